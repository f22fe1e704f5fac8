//! The one tracked post: every operation the host waits for is posted all
//! or nothing, gives back every resource it took when it fails, and checks
//! lengths before narrowing them for the NIC.

use railcoll_fw::abi::MAX_DMA_LEN;
use railcoll_host::{ChainedPut, Comm, Error, RailPolicy, TransferOptions};
use railcoll_tests::{cluster, pattern};

fn on_rail(rail: usize) -> TransferOptions {
    TransferOptions {
        policy: Some(RailPolicy::Rail(rail)),
        ..TransferOptions::default()
    }
}

/// Post 8-byte puts to `peer` on `rail`, keeping their handles, until the
/// completion events run out: returns the handles and the error.
fn exhaust_completion_events<'c>(
    comm: &'c Comm,
    peer: usize,
    rail: usize,
) -> Result<(Vec<railcoll_host::PutHandle<'c>>, Error), Error> {
    let src = comm.alloc(8)?;
    let dst = comm.alloc(8)?;
    let mut held = Vec::new();
    loop {
        match comm.endpoint().put_with(&src, peer, &dst, on_rail(rail)) {
            Ok(h) => held.push(h),
            Err(e) => return Ok((held, e)),
        }
    }
}

#[test]
fn exhausted_events_fail_typed_and_every_event_comes_back() {
    let c = cluster(2, 1, 2, 1 << 20);
    let out = c.run(|comm| -> Result<(), Error> {
        if comm.rank() == 0 {
            let ep = comm.endpoint();
            let (free0, free1) = (ep.free_completion_events(0), ep.free_completion_events(1));
            assert!(free0 > 0 && free1 == free0, "{free0} {free1}");
            let (held, err) = exhaust_completion_events(comm, 1, 0)?;
            assert_eq!(err, Error::EventsExhausted("completion"));
            assert_eq!(held.len(), free0, "every event was usable once");
            assert_eq!(ep.free_completion_events(0), 0);
            assert_eq!(ep.free_completion_events(1), free1, "rail 1 untouched");
            // Failing again takes nothing.
            let buf = comm.alloc(8)?;
            assert!(comm.endpoint().put_with(&buf, 1, &buf, on_rail(0)).is_err());
            assert_eq!(ep.free_completion_events(0), 0);
            for h in held {
                h.wait()?;
            }
            assert_eq!(ep.free_completion_events(0), free0, "all came back");
            comm.endpoint()
                .put_with(&buf, 1, &buf, on_rail(0))?
                .wait()?;
            assert_eq!(ep.free_completion_events(0), free0);
        }
        comm.barrier()
    });
    for r in out {
        r.expect("rank ran").expect("no error");
    }
}

#[test]
fn a_chained_post_without_a_chain_block_releases_its_event() {
    let c = cluster(1, 1, 1, 1 << 20);
    let out = c.run(|comm| -> Result<(), Error> {
        let ep = comm.endpoint();
        let src = comm.alloc(64)?;
        let dst = comm.alloc(64 * 128)?;
        let scratch = comm.alloc(0)?;
        comm.write_local(&src, 0, &pattern(64, 7))?;
        let events = ep.free_completion_events(0);
        let blocks = ep.free_chain_blocks();
        assert!(blocks > 0);
        // One chain per block, each on a trigger of its own that has not
        // fired yet.
        let mut triggers = Vec::new();
        // A chained put of `src` into 64 bytes of `dst` at `at`, started by
        // one set of `trigger`.
        let chain = |trigger, at: usize| -> Result<ChainedPut, Error> {
            Ok(ChainedPut {
                trigger,
                rail: 0,
                count: 1,
                src,
                dst_rank: 0,
                dst: dst.slice(at, 64)?,
                dst_event: None,
                feeds: Default::default(),
                policy: RailPolicy::Rail(0),
                done: Default::default(),
            })
        };
        let mut held = Vec::new();
        for i in 0..blocks {
            let trigger = comm.endpoint().alloc_dest_event()?;
            held.push(comm.endpoint().chain_put(&chain(trigger, i * 64)?)?);
            triggers.push(trigger);
        }
        assert_eq!(ep.free_chain_blocks(), 0);
        assert_eq!(ep.free_completion_events(0), events - blocks);
        // The event was taken and armed, then the chain block ran out: the
        // post fails and gives the event back.
        let trigger = comm.endpoint().alloc_dest_event()?;
        let err = comm
            .endpoint()
            .chain_put(&chain(trigger, 0)?)
            .expect_err("no chain block left");
        let after_failure = ep.free_completion_events(0);
        // Fire every trigger first (a failed assertion must not leave
        // handles that wait for chains that never run): each chain runs,
        // completes, and returns its block and event.
        for t in &triggers {
            comm.endpoint().notify(0, t, &scratch)?;
        }
        for h in held {
            h.wait()?;
        }
        assert_eq!(err, Error::EventsExhausted("chain block"));
        assert_eq!(
            after_failure,
            events - blocks,
            "the failed post kept no event"
        );
        assert_eq!(ep.free_chain_blocks(), blocks);
        assert_eq!(ep.free_completion_events(0), events);
        let mut got = vec![0u8; 64 * blocks];
        comm.read_local(&dst, 0, &mut got)?;
        for chunk in got.chunks(64) {
            assert_eq!(chunk, pattern(64, 7), "every chained put delivered");
        }
        // Blocks are reused: more chained puts than there are blocks.
        for round in 0..2 * blocks {
            let trigger = triggers[round % triggers.len()];
            let h = comm.endpoint().chain_put(&chain(trigger, 0)?)?;
            comm.endpoint().notify(0, &trigger, &scratch)?;
            h.wait()?;
        }
        assert_eq!(ep.free_chain_blocks(), blocks);
        Ok(())
    });
    for r in out {
        r.expect("rank ran").expect("no error");
    }
}

#[test]
fn a_striped_put_whose_second_part_fails_posts_no_part() {
    let len = 64 << 10;
    let c = cluster(2, 1, 2, 4 << 20);
    let out = c.run(|comm| -> Result<Option<Vec<u8>>, Error> {
        let dst = comm.alloc(len)?;
        let marker = comm.alloc(8)?;
        let landed = comm.endpoint().alloc_dest_event()?;
        comm.write_local(&dst, 0, &pattern(len, 99))?;
        comm.barrier()?;
        if comm.rank() == 0 {
            let ep = comm.endpoint();
            let src = comm.alloc(len)?;
            comm.write_local(&src, 0, &pattern(len, 1))?;
            let free0 = ep.free_completion_events(0);
            // Rail 1 has no completion event left.
            let (held, _) = exhaust_completion_events(comm, 1, 1)?;
            let parts = comm.endpoint().plan(RailPolicy::default(), 0, 1, len);
            assert_eq!(parts.len(), 2, "the put is striped over both rails");
            let err = comm
                .endpoint()
                .put(&src, 1, &dst)
                .expect_err("rail 1 has no event");
            assert_eq!(err, Error::EventsExhausted("completion"));
            assert_eq!(ep.free_completion_events(0), free0, "rail 0's event back");
            for h in held {
                h.wait()?;
            }
            // Rails deliver in order: had the rail-0 part been posted, it
            // would land before this marker.
            comm.endpoint()
                .put_with(
                    &marker,
                    1,
                    &marker,
                    TransferOptions {
                        policy: Some(RailPolicy::Rail(0)),
                        dest_event: Some(landed),
                        wake: false,
                    },
                )?
                .wait()?;
            comm.barrier()?;
            Ok(None)
        } else {
            let mut one = railcoll_host::Arrivals::new();
            one.add(0, 1);
            comm.endpoint().wait_arrivals(&landed, &one)?;
            let mut got = vec![0u8; len];
            comm.read_local(&dst, 0, &mut got)?;
            comm.barrier()?;
            Ok(Some(got))
        }
    });
    let mut results = out.into_iter();
    results.next().expect("rank 0").expect("ran").expect("ok");
    let got = results
        .next()
        .expect("rank 1")
        .expect("ran")
        .expect("ok")
        .expect("data");
    assert!(
        got == pattern(len, 99),
        "no byte of the failed striped put reached the target"
    );
}

#[test]
fn an_oversize_length_is_a_typed_error_on_every_post_path() {
    // An arena just large enough for one buffer past the NIC's largest
    // transfer: untouched pages cost nothing.
    let big = MAX_DMA_LEN as usize + 1;
    let c = cluster(2, 1, 1, big + (1 << 20));
    let out = c.run(|comm| -> Result<(), Error> {
        let ep = comm.endpoint();
        let huge = comm.alloc(big)?;
        let trigger = comm.endpoint().alloc_dest_event()?;
        let events = ep.free_completion_events(0);
        let too_large = Error::TooLarge {
            len: big,
            max: MAX_DMA_LEN as usize,
        };
        if comm.rank() == 0 {
            assert_eq!(
                comm.endpoint().put(&huge, 1, &huge).err(),
                Some(too_large.clone())
            );
            assert_eq!(
                comm.endpoint().get(1, &huge, &huge).err(),
                Some(too_large.clone())
            );
            assert_eq!(
                comm.endpoint()
                    .put_unchecked(&huge, 1, 0x1000_0000_0000, 0)
                    .err(),
                Some(too_large.clone())
            );
            assert_eq!(
                comm.endpoint()
                    .chain_put(&ChainedPut {
                        trigger,
                        rail: 0,
                        count: 1,
                        src: huge,
                        dst_rank: 1,
                        dst: huge,
                        dst_event: None,
                        feeds: Default::default(),
                        policy: RailPolicy::Rail(0),
                        done: Default::default(),
                    })
                    .err(),
                Some(too_large.clone())
            );
            assert_eq!(
                comm.endpoint().hw_bcast_post(&huge, &huge, None).err(),
                Some(too_large.clone())
            );
            let queue = comm.endpoint().create_queue(4, 64)?;
            assert!(matches!(
                comm.endpoint().queue_send(&queue, 1, &huge),
                Err(Error::TooLarge { len, max: 64 }) if len == big
            ));
            assert_eq!(ep.free_completion_events(0), events, "nothing was taken");
        } else {
            let _queue = comm.endpoint().create_queue(4, 64)?;
        }
        comm.barrier()
    });
    for r in out {
        r.expect("rank ran").expect("no error");
    }
}

/// The NICs' `GEOMETRY` and `RESOURCES` registers reach the schedule
/// budget: half of the 512 events per context complete at destinations,
/// 64 chain blocks per rank, a 64-entry chain queue per NIC, a 64-entry
/// sibling FIFO (two rails, COPYs of several blocks: relays can run); the
/// budget the executor proves every schedule against is made from them.
#[test]
fn the_nics_report_their_resources_and_the_budget_is_made_from_them() {
    use railcoll_host::driver::NicLimits;
    use railcoll_host::sched::verify::Budget;
    let c = cluster(2, 2, 2, 1 << 20);
    for limits in c.run(|comm| comm.endpoint().nic_limits()) {
        let limits = limits.expect("ran");
        assert_eq!(
            limits,
            NicLimits {
                dest_events: 256,
                chain_blocks: 64,
                chain_queue: 64,
                peer_fifo: 64,
                feeds: 3,
                completion_events: 256,
                peers: 256,
            }
        );
        let budget = Budget::for_nic(limits);
        assert_eq!(
            (
                budget.counters,
                budget.chain_blocks,
                budget.chain_queue,
                budget.peer_fifo,
                budget.feeds,
                budget.outstanding,
                budget.peers
            ),
            (120, 64, 64, 64, 3, 64, 256)
        );
    }
    // A smaller NIC gives a smaller budget: two counter pools within half
    // its destination events.
    let small = Budget::for_nic(NicLimits {
        dest_events: 24,
        chain_blocks: 8,
        chain_queue: 4,
        peer_fifo: 0,
        feeds: 0,
        completion_events: 24,
        peers: 8,
    });
    assert_eq!(
        (
            small.counters,
            small.chain_blocks,
            small.chain_queue,
            small.outstanding
        ),
        (12, 8, 4, 6)
    );
    // One rail: no sibling, no relays.
    let one = cluster(2, 1, 1, 1 << 20);
    for limits in one.run(|comm| comm.endpoint().nic_limits()) {
        assert_eq!(limits.expect("ran").peer_fifo, 0);
    }
}
