//! Elan-like NIC semantics observed through the host API on the emulator:
//! chaining without the host, receiver-side protection, malformed commands,
//! many outstanding puts, early sets before a re-arm.

use railcoll_fw::abi::ErrorCode;
use railcoll_fw::abi::command::{Command, CommandBlock, DmaCommand, DmaKind};
use railcoll_fw::abi::error::ErrorKind;
use railcoll_fw::abi::event::EventId;
use railcoll_host::driver::{ARENA_VA, CONTROL_VA};
use railcoll_host::{Arrivals, ChainedPut, Error, RailPolicy, TransferOptions};
use railcoll_tests::{cluster, pattern};

fn on_rail(rail: usize, n: u32) -> Arrivals {
    let mut a = Arrivals::new();
    a.add(rail, n);
    a
}

/// Put `buf` into the same buffer of `to` on `rail`, setting `event`
/// there, and wait for its local completion.
fn put_signalled(
    comm: &railcoll_host::Comm,
    buf: &railcoll_host::arena::SymBuffer,
    to: usize,
    rail: usize,
    event: railcoll_host::DestEvent,
) -> Result<(), Error> {
    comm.endpoint()
        .put_with(
            buf,
            to,
            buf,
            TransferOptions {
                policy: Some(RailPolicy::Rail(rail)),
                dest_event: Some(event),
                wake: false,
            },
        )?
        .wait()
}

/// A puts to B; B's NIC, on the put's arrival, puts the data on to C
/// through an event COPY action, while B's host thread is blocked waiting
/// for a signal that only C sends after receiving the forwarded data.
#[test]
fn chained_put_completes_while_the_forwarding_host_is_blocked() {
    let c = cluster(3, 1, 2, 1 << 20);
    let out = c.run(|comm| -> Result<Option<Vec<u8>>, Error> {
        let len = 50_000;
        let buf = comm.alloc(len)?;
        let flag = comm.alloc(0)?;
        let arrived = comm.endpoint().alloc_dest_event()?;
        let forwarded = comm.endpoint().alloc_dest_event()?;
        let done = comm.endpoint().alloc_dest_event()?;
        let ready = comm.endpoint().alloc_dest_event()?;
        match comm.rank() {
            0 => {
                // Wait until B has armed its chain, then put.
                comm.endpoint().wait_arrivals(&ready, &on_rail(0, 1))?;
                comm.write_local(&buf, 0, &pattern(len, 42))?;
                put_signalled(comm, &buf, 1, 0, arrived)?;
                Ok(None)
            }
            1 => {
                let forward = comm.endpoint().chain_put(&ChainedPut {
                    trigger: arrived,
                    rail: 0,
                    count: 1,
                    src: buf,
                    dst_rank: 2,
                    dst: buf,
                    dst_event: Some(forwarded),
                    feeds: Default::default(),
                    policy: RailPolicy::Rail(0),
                    done: Default::default(),
                })?;
                comm.endpoint().notify(0, &ready, &flag)?;
                // Blocked: only C's acknowledgement releases B, and C sends
                // it only after the chained put delivered the data.
                comm.endpoint().wait_arrivals(&done, &on_rail(0, 1))?;
                // The chained put's own completion: delivered and acked.
                forward.wait()?;
                Ok(None)
            }
            _ => {
                comm.endpoint().wait_arrivals(&forwarded, &on_rail(0, 1))?;
                let mut got = vec![0; len];
                comm.read_local(&buf, 0, &mut got)?;
                comm.endpoint().notify(1, &done, &flag)?;
                Ok(Some(got))
            }
        }
    });
    let got = out
        .into_iter()
        .nth(2)
        .expect("rank 2")
        .expect("ran")
        .expect("no error")
        .expect("data");
    assert_eq!(got, pattern(50_000, 42));
}

/// A put aimed outside the target's arena (into its control region, which
/// is mapped but not remotely writable, and past its arena's end) writes
/// nothing; the initiator's handle fails and the target gets a record.
/// Nothing means nothing: the target fills every free byte of its arena
/// (the straddling put's in-arena half included) with a pattern and finds
/// it whole afterwards, and the canary pages around every buffer of both
/// nodes (the page after the arena is the straddling put's other half,
/// the pages around the control region the first put's) are unchanged.
#[test]
fn put_outside_the_target_arena_writes_nothing_and_both_sides_see_it() {
    let arena = 1 << 16;
    let c = cluster(2, 1, 2, arena);
    let out =
        c.run(|comm| -> Result<(), Error> {
            let buf = comm.alloc(4096)?;
            let flag = comm.alloc(0)?;
            let go = comm.endpoint().alloc_dest_event()?;
            // The rest of the arena, to its last byte.
            let used = comm.alloc(0)?.offset();
            let rest = comm.alloc(arena - used)?;
            let canary = pattern(rest.len(), 0xc0ffee);
            comm.write_local(&rest, 0, &canary)?;
            comm.barrier()?;
            if comm.rank() == 0 {
                comm.write_local(&buf, 0, &[0xee; 4096])?;
                for (va, what) in [
                    (CONTROL_VA, "control region"),
                    (ARENA_VA + arena as u64 - 2048, "straddling the arena end"),
                    (0xdead_0000_0000, "unmapped"),
                ] {
                    let r = comm.endpoint().put_unchecked(&buf, 1, va, 1)?.wait();
                    assert_eq!(
                        r,
                        Err(Error::Nic {
                            rail: 1,
                            code: ErrorCode::Protection
                        }),
                        "{what}"
                    );
                }
                let errors = comm.endpoint().take_nic_errors()?;
                assert_eq!(errors.len(), 3);
                assert!(
                    errors
                        .iter()
                        .all(|e| e.info.kind == ErrorKind::Remote && e.rail == 1)
                );
                comm.endpoint().notify(1, &go, &flag)?;
            } else {
                comm.endpoint().wait_arrivals(&go, &on_rail(0, 1))?;
                let records = comm.endpoint().take_nic_errors()?;
                // Each 4 KiB put is two 2 KiB packets: every one rejected, none
                // applied, each reported.
                assert_eq!(records.len(), 6, "{records:?}");
                assert!(
                    records.iter().all(|e| e.info.kind == ErrorKind::Inbound
                        && e.info.code == ErrorCode::Protection)
                );
                assert!(records.iter().all(|e| e.info.peer_node == 0));
                let mut after = vec![0; rest.len()];
                comm.read_local(&rest, 0, &mut after)?;
                let changed = after.iter().zip(&canary).filter(|(a, b)| a != b).count();
                assert_eq!(
                    changed,
                    0,
                    "{changed} bytes of the arena's free part (its last {} bytes) changed",
                    rest.len()
                );
                let mut own = vec![1; 4096];
                comm.read_local(&buf, 0, &mut own)?;
                assert!(
                    own.iter().all(|b| *b == 0),
                    "the target's own buffer changed"
                );
            }
            Ok(())
        });
    for r in out {
        r.expect("ran").expect("no error");
    }
    assert_eq!(
        c.canary_damage(),
        vec![],
        "nothing written beside any buffer"
    );
}

/// Malformed command blocks complete with typed errors; the NIC keeps
/// serving this queue and every other one.
#[test]
fn malformed_commands_fail_alone_and_the_nic_keeps_serving() {
    let c = cluster(2, 2, 1, 1 << 20);
    let out = c.run(|comm| -> Result<(), Error> {
        let buf = comm.alloc(1 << 16)?;
        let flag = comm.alloc(0)?;
        let ready = comm.endpoint().alloc_dest_event()?;
        if comm.rank() == 0 {
            let mut unknown = Command::Nop.emit(11);
            unknown.opcode = 0x7f;
            let mut reserved = Command::Nop.emit(12);
            reserved.reserved = [1, 0];
            let too_long = DmaCommand {
                kind: DmaKind::Put,
                len: 0,
                vp: 1,
                src_addr: ARENA_VA,
                dst_addr: ARENA_VA,
                src_event: None,
                dst_event: None,
                wake: false,
            };
            let mut too_long_block = Command::Dma(too_long).emit(13);
            too_long_block.body[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
            let wild = Command::Dma(DmaCommand {
                src_addr: u64::MAX - 8,
                len: 64,
                ..too_long
            })
            .emit(14);
            let bad_vp = Command::Dma(DmaCommand {
                vp: 1000,
                ..too_long
            })
            .emit(15);
            let bad_event = Command::SetEvent {
                event: EventId(100_000),
                count: 1,
                rail: None,
            }
            .emit(16);
            let zeroed = CommandBlock::from_bytes(&[0; 64]);
            for block in [
                unknown,
                reserved,
                too_long_block,
                wild,
                bad_vp,
                bad_event,
                zeroed,
            ] {
                comm.endpoint().post_raw(0, &block)?;
            }
        }
        // Every rank (including the one that sent garbage) still moves data.
        let peer = (comm.rank() + 1) % comm.size();
        let data = pattern(1 << 16, comm.rank() as u64);
        comm.write_local(&buf, 0, &data)?;
        // Tell the rank that reads from us that our data is in place, and
        // wait until our own source is.
        let reader = (comm.rank() + comm.size() - 1) % comm.size();
        comm.endpoint().notify(reader, &ready, &flag)?;
        comm.endpoint().wait_arrivals(&ready, &on_rail(0, 1))?;
        let back = comm.alloc(1 << 16)?;
        comm.endpoint().get(peer, &buf, &back)?.wait()?;
        let mut got = vec![0; 1 << 16];
        comm.read_local(&back, 0, &mut got)?;
        assert_eq!(got, pattern(1 << 16, peer as u64));
        if comm.rank() == 0 {
            let codes: Vec<(ErrorCode, u32)> = comm
                .endpoint()
                .take_nic_errors()?
                .iter()
                .map(|e| (e.info.code, e.info.cookie))
                .collect();
            assert_eq!(
                codes,
                vec![
                    (ErrorCode::UnknownOpcode, 11),
                    (ErrorCode::ReservedNonZero, 12),
                    (ErrorCode::BadLength, 13),
                    (ErrorCode::AddressOverflow, 14),
                    (ErrorCode::BadVp, 15),
                    (ErrorCode::BadEvent, 16),
                    (ErrorCode::UnknownOpcode, 0),
                ]
            );
        }
        Ok(())
    });
    for r in out {
        r.expect("ran").expect("no error");
    }
}

/// Every rank keeps many puts outstanding to rank 0, while rank 0 keeps many
/// outstanding to every rank; all land, all complete.
#[test]
fn many_outstanding_puts_from_several_ranks_in_both_directions() {
    let c = cluster(3, 2, 2, 4 << 20);
    let n = 24usize;
    let chunk = 3000usize;
    let out = c.run(|comm| -> Result<(), Error> {
        let size = comm.size();
        let inbox = comm.alloc(size * n * chunk)?;
        let outbox = comm.alloc(n * chunk)?;
        let arrived = comm.endpoint().alloc_dest_event()?;
        let me = comm.rank();
        comm.write_local(&outbox, 0, &pattern(n * chunk, me as u64))?;
        let targets: Vec<usize> = if me == 0 {
            (1..size).collect()
        } else {
            vec![0]
        };
        let mut handles = Vec::new();
        for &t in &targets {
            for i in 0..n {
                let src = outbox.slice(i * chunk, chunk)?;
                let dst = inbox.slice((me * n + i) * chunk, chunk)?;
                handles.push(comm.endpoint().put_with(
                    &src,
                    t,
                    &dst,
                    TransferOptions {
                        policy: None,
                        dest_event: Some(arrived),
                        wake: false,
                    },
                )?);
            }
        }
        for h in handles {
            h.wait()?;
        }
        // Arrivals: rank 0 hears from everyone, others from rank 0 only.
        let senders: Vec<usize> = if me == 0 {
            (1..size).collect()
        } else {
            vec![0]
        };
        let mut expected = Arrivals::new();
        for &s in &senders {
            expected.merge(&comm.endpoint().expected_arrivals(
                comm.config().policy,
                s,
                me,
                chunk,
                n as u32,
            ));
        }
        comm.endpoint().wait_arrivals(&arrived, &expected)?;
        for &s in &senders {
            let mut got = vec![0; n * chunk];
            comm.read_local(&inbox, s * n * chunk, &mut got)?;
            assert_eq!(got, pattern(n * chunk, s as u64), "from {s} at {me}");
        }
        Ok(())
    });
    for r in out {
        r.expect("ran").expect("no error");
    }
}

/// Sets that reach an event before the target arms it are kept: the arm
/// adds to the count and fires at once [ELAN-SEM §13 rule 2]. Surplus
/// sets carry over to the next arm.
#[test]
fn rearming_after_early_sets_does_not_lose_them() {
    let c = cluster(2, 1, 1, 1 << 16);
    let out = c.run(|comm| -> Result<(), Error> {
        let flag = comm.alloc(0)?;
        let early = comm.endpoint().alloc_dest_event()?;
        let go = comm.endpoint().alloc_dest_event()?;
        if comm.rank() == 0 {
            // Five sets, each delivered (its completion waited for) before
            // the target arms the event at all.
            for _ in 0..5 {
                comm.endpoint().notify(1, &early, &flag)?;
            }
            comm.endpoint().notify(1, &go, &flag)?;
        } else {
            comm.endpoint().wait_arrivals(&go, &on_rail(0, 1))?;
            // Armed for 3 after 5 arrived: fires at once...
            comm.endpoint().wait_arrivals(&early, &on_rail(0, 3))?;
            // ...and the 2 surplus sets satisfy the next arm for 2.
            comm.endpoint().wait_arrivals(&early, &on_rail(0, 2))?;
        }
        Ok(())
    });
    for r in out {
        r.expect("ran").expect("no error");
    }
}

/// `PutHandle::test` says "in flight" without blocking while the put
/// cannot have completed (a chained put whose trigger only the peer sets,
/// and only after this rank has polled it twenty times), then gives the
/// result; a completed handle stays completed; 4 MiB is striped.
#[test]
fn handle_test_polls_to_completion() {
    let c = cluster(2, 1, 2, 8 << 20);
    let out = c.run(|comm| -> Result<(), Error> {
        let buf = comm.alloc(4 << 20)?;
        let flag = comm.alloc(0)?;
        let go = comm.endpoint().alloc_dest_event()?;
        let polled = comm.endpoint().alloc_dest_event()?;
        if comm.rank() == 1 {
            comm.endpoint().wait_arrivals(&polled, &on_rail(0, 1))?;
            comm.endpoint().notify(0, &go, &flag)?;
            return Ok(());
        }
        let block = buf.slice(0, 4096)?;
        let mut h = comm.endpoint().chain_put(&ChainedPut {
            trigger: go,
            rail: 0,
            count: 1,
            src: block,
            dst_rank: 1,
            dst: block,
            dst_event: None,
            feeds: Default::default(),
            policy: RailPolicy::Rail(0),
            done: Default::default(),
        })?;
        for poll in 0..20 {
            assert!(
                h.test().is_none(),
                "poll {poll}: complete before its trigger"
            );
        }
        comm.endpoint().notify(1, &polled, &flag)?;
        let result = loop {
            if let Some(r) = h.test() {
                break r;
            }
            std::thread::yield_now();
        };
        result?;
        assert_eq!(h.test(), Some(Ok(())), "a completed handle stays completed");
        let striped = comm.endpoint().put(&buf, 1, &buf)?;
        assert_eq!(striped.parts().len(), 2, "4 MiB is striped over both rails");
        striped.wait()
    });
    for r in out {
        r.expect("ran").expect("no error");
    }
}

/// ABI 1.2's NIC-to-NIC path and multi-block COPY, through the host API:
/// rank 0 puts to rank 1 once on each rail. On rank 1, the rail-0 arrival's
/// event injects `SET_EVENT(J)` naming rail 1 (a sibling set: a cross-rail
/// trigger), the rail-1 arrival's event a local `SET_EVENT(J)`, and J on
/// rail 1 waits for both (a combined trigger). J completes only if both
/// paths ran.
#[test]
fn an_arrival_on_one_rail_sets_an_event_on_the_other() {
    use railcoll_fw::abi::event::{ActionKind, EventAction};
    let c = cluster(2, 1, 2, 1 << 20);
    let out = c.run(|comm| -> Result<(), Error> {
        let data = comm.alloc(64)?;
        let blocks = comm.alloc(128)?;
        let (a, on_1, join) = (
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
        );
        let start = comm.endpoint().alloc_dest_event()?;
        if comm.rank() == 1 {
            let set_join = |rail| Command::SetEvent {
                event: join.id(),
                count: 1,
                rail,
            };
            comm.write_local(&blocks, 0, &set_join(Some(1)).emit(1).to_bytes())?;
            comm.write_local(&blocks, 64, &set_join(None).emit(2).to_bytes())?;
            let arm = |event: EventId, offset: usize| Command::ArmEvent {
                event,
                count: 1,
                action: EventAction {
                    kind: ActionKind::Copy {
                        src: ARENA_VA + (blocks.offset() + offset) as u64,
                        blocks: 1,
                    },
                    wake: false,
                },
            };
            comm.endpoint().post_raw(0, &arm(a.id(), 0).emit(3))?;
            comm.endpoint().post_raw(1, &arm(on_1.id(), 64).emit(4))?;
            // Armed: let rank 0 send.
            comm.endpoint().notify(0, &start, &data)?;
            comm.endpoint().wait_arrivals(&join, &on_rail(1, 2))?;
            // Neither NIC reported an error (a refused sibling set would).
            assert_eq!(comm.endpoint().take_nic_errors()?, Vec::new());
        } else {
            comm.endpoint().wait_arrivals(&start, &on_rail(0, 1))?;
            for (rail, ev) in [(0, a), (1, on_1)] {
                comm.endpoint()
                    .put_with(
                        &data,
                        1,
                        &data,
                        TransferOptions {
                            policy: Some(RailPolicy::Rail(rail)),
                            dest_event: Some(ev),
                            wake: false,
                        },
                    )?
                    .wait()?;
            }
        }
        Ok(())
    });
    for r in out {
        r.expect("started").expect("both paths set the join event");
    }
}

/// The driver's combined trigger: rank 1's chained put P1 (rail 0,
/// started by part A's arrival) feeds join J on rail 1 (a sibling set),
/// a relay of part B's arrival event on rail 1 feeds J locally, and the
/// chained put P2 on rail 1 waits for J's two sets, then returns A and B
/// together. Rank 0 sends B first and A only after B's relay has run: P2
/// started on B alone would return A's bytes unwritten.
#[test]
fn a_chained_put_feeds_a_join_that_a_relay_also_feeds() {
    use railcoll_host::driver::Feeds;
    let c = cluster(2, 1, 2, 1 << 20);
    let half = 4096;
    let out = c.run(move |comm| -> Result<Option<Vec<u8>>, Error> {
        let parts = comm.alloc(2 * half)?;
        let back_a = comm.alloc(half)?;
        let back_both = comm.alloc(2 * half)?;
        let (a, b, join, got_a, got_both, start) = (
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
        );
        let part = |i: usize| parts.slice(i * half, half);
        if comm.rank() == 1 {
            let p1 = comm.endpoint().chain_put(&ChainedPut {
                trigger: a,
                rail: 0,
                count: 1,
                src: part(0)?,
                dst_rank: 0,
                dst: back_a,
                dst_event: Some(got_a),
                feeds: Feeds::new(&[(join.id(), 1)])?,
                policy: RailPolicy::Rail(0),
                done: Default::default(),
            })?;
            let relay = comm.endpoint().relay(b, 1, 1, join, 1)?;
            let p2 = comm.endpoint().chain_put(&ChainedPut {
                trigger: join,
                rail: 1,
                count: 2,
                src: parts,
                dst_rank: 0,
                dst: back_both,
                dst_event: Some(got_both),
                feeds: Feeds::default(),
                policy: RailPolicy::Rail(1),
                done: Default::default(),
            })?;
            comm.endpoint().notify(0, &start, &back_a)?;
            // B's relay has run (its handle completes then): let A come.
            relay.wait()?;
            comm.endpoint().notify(0, &start, &back_a)?;
            for h in [p1, p2] {
                h.wait()?;
            }
            assert_eq!(comm.endpoint().take_nic_errors()?, Vec::new());
            return Ok(None);
        }
        comm.write_local(&parts, 0, &pattern(2 * half, 7))?;
        for (i, ev, rail) in [(1, b, 1), (0, a, 0)] {
            comm.endpoint().wait_arrivals(&start, &on_rail(0, 1))?;
            put_signalled(comm, &part(i)?, 1, rail, ev)?;
        }
        comm.endpoint().wait_arrivals(&got_a, &on_rail(0, 1))?;
        comm.endpoint().wait_arrivals(&got_both, &on_rail(1, 1))?;
        let mut both = vec![0; 2 * half];
        comm.read_local(&back_both, 0, &mut both)?;
        Ok(Some(both))
    });
    let both = out[0].as_ref().expect("ran").as_ref().expect("rank 0 ok");
    assert_eq!(both.as_deref(), Some(&pattern(2 * half, 7)[..]));
    for r in out {
        r.expect("ran").expect("no error");
    }
}

/// A striped chained put: rank 1's NICs forward 64 KiB that rank 0 sent,
/// over both rails, once its arrival on rail 0 fires the trigger: the
/// rail-0 part leads, its COPY setting the lent trigger of the rail-1
/// part on the sibling NIC. Both halves land byte-exact, each rail's part
/// sets the target's event once on its rail, and the lent events go back
/// to the driver. A chained put whose trigger rail carries no part of it
/// is refused with a typed error and takes nothing.
#[test]
fn a_striped_chained_put_starts_every_part_from_its_lead() {
    let c = cluster(2, 1, 2, 1 << 20);
    let len = 64 << 10;
    let out = c.run(move |comm| -> Result<Option<Vec<u8>>, Error> {
        let buf = comm.alloc(len)?;
        let back = comm.alloc(len)?;
        let flag = comm.alloc(0)?;
        let (arrived, returned, ready) = (
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
        );
        let striped = RailPolicy::Stripe { threshold: 1024 };
        if comm.rank() == 1 {
            let free: Vec<usize> = (0..2)
                .map(|r| comm.endpoint().free_completion_events(r))
                .collect();
            let wrong = ChainedPut {
                trigger: arrived,
                rail: 0,
                count: 1,
                src: buf,
                dst_rank: 0,
                dst: back,
                dst_event: Some(returned),
                feeds: Default::default(),
                policy: RailPolicy::Rail(1),
                done: Default::default(),
            };
            assert!(matches!(
                comm.endpoint().chain_put(&wrong),
                Err(Error::Config(_))
            ));
            let h = comm.endpoint().chain_put(&ChainedPut {
                policy: striped,
                done: Default::default(),
                ..wrong
            })?;
            comm.endpoint().notify(0, &ready, &flag)?;
            h.wait()?;
            let now: Vec<usize> = (0..2)
                .map(|r| comm.endpoint().free_completion_events(r))
                .collect();
            assert_eq!(now, free, "every lent event is back");
            assert_eq!(comm.endpoint().take_nic_errors()?, Vec::new());
            return Ok(None);
        }
        comm.write_local(&buf, 0, &pattern(len, 11))?;
        comm.endpoint().wait_arrivals(&ready, &on_rail(0, 1))?;
        put_signalled(comm, &buf, 1, 0, arrived)?;
        let mut both = Arrivals::new();
        both.add(0, 1);
        both.add(1, 1);
        comm.endpoint().wait_arrivals(&returned, &both)?;
        let mut got = vec![0; len];
        comm.read_local(&back, 0, &mut got)?;
        Ok(Some(got))
    });
    let got = out[0].as_ref().expect("ran").as_ref().expect("rank 0 ok");
    assert_eq!(got.as_deref(), Some(&pattern(len, 11)[..]));
    for r in out {
        r.expect("ran").expect("no error");
    }
}

/// A chained put ordered after another one's completion: rank 1's NIC
/// starts A (256 KiB on rail 0) when rank 0's go arrives; A completes
/// through a lent event whose COPY sets A's completion event and, on the
/// sibling NIC of rail 1, the trigger of B (a small put on rail 1). Rank 0
/// waits for B alone and then finds every byte of A in place: B started
/// on A's injection would have overtaken it on the other rail. A's handle
/// completes and the driver gets its lent event back.
#[test]
fn a_chained_put_starts_when_another_has_completed() {
    use railcoll_host::driver::Feeds;
    let c = cluster(2, 1, 2, 1 << 20);
    let big = 256 << 10;
    let out = c.run(move |comm| -> Result<Option<Vec<u8>>, Error> {
        let a = comm.alloc(big)?;
        let b = comm.alloc(64)?;
        let flag = comm.alloc(0)?;
        let (go, a_done, got_a, got_b, ready) = (
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
            comm.endpoint().alloc_dest_event()?,
        );
        if comm.rank() == 1 {
            comm.write_local(&a, 0, &pattern(big, 5))?;
            let free: Vec<usize> = (0..2)
                .map(|r| comm.endpoint().free_completion_events(r))
                .collect();
            let first = comm.endpoint().chain_put(&ChainedPut {
                trigger: go,
                rail: 0,
                count: 1,
                src: a,
                dst_rank: 0,
                dst: a,
                dst_event: Some(got_a),
                feeds: Feeds::default(),
                policy: RailPolicy::Rail(0),
                done: Feeds::new(&[(a_done.id(), 1)])?,
            })?;
            let second = comm.endpoint().chain_put(&ChainedPut {
                trigger: a_done,
                rail: 1,
                count: 1,
                src: b,
                dst_rank: 0,
                dst: b,
                dst_event: Some(got_b),
                feeds: Feeds::default(),
                policy: RailPolicy::Rail(1),
                done: Feeds::default(),
            })?;
            comm.endpoint().notify(0, &ready, &flag)?;
            first.wait()?;
            second.wait()?;
            let now: Vec<usize> = (0..2)
                .map(|r| comm.endpoint().free_completion_events(r))
                .collect();
            assert_eq!(now, free, "the lent source event is back");
            assert_eq!(comm.endpoint().take_nic_errors()?, Vec::new());
            return Ok(None);
        }
        comm.endpoint().wait_arrivals(&ready, &on_rail(0, 1))?;
        put_signalled(comm, &flag, 1, 0, go)?;
        comm.endpoint().wait_arrivals(&got_b, &on_rail(1, 1))?;
        let mut landed = vec![0; big];
        comm.read_local(&a, 0, &mut landed)?;
        comm.endpoint().wait_arrivals(&got_a, &on_rail(0, 1))?;
        Ok(Some(landed))
    });
    let landed = out[0].as_ref().expect("ran").as_ref().expect("rank 0 ok");
    assert_eq!(landed.as_deref(), Some(&pattern(big, 5)[..]));
    for r in out {
        r.expect("ran").expect("no error");
    }
}
