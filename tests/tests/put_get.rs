//! Puts and gets end to end on the emulator: every size class of the issue,
//! 1-4 rails, every rail policy, same-node and cross-node peers, random
//! sizes and offsets.

use proptest::prelude::*;
use railcoll_host::{Comm, Error, RailPolicy, TransferOptions};
use railcoll_tests::{cluster, pattern};

const SIZES: [usize; 9] = [0, 1, 7, 1023, 1024, 1025, 4095, 65_536 + 3, 4 << 20];

fn policies(rails: usize) -> Vec<RailPolicy> {
    let mut v = vec![
        RailPolicy::default(),
        RailPolicy::Stripe { threshold: 0 },
        RailPolicy::RoundRobin,
    ];
    v.extend((0..rails).map(RailPolicy::Rail));
    v
}

/// Rank 0 puts to `peer` and gets from it, for every size and policy; the
/// peer checks each put's bytes after a notification that follows the
/// put's completion (completion means the data is delivered).
fn exercise(comm: &Comm, peer: usize, sizes: &[usize]) -> Result<usize, Error> {
    let max = sizes.iter().copied().max().unwrap_or(0);
    let src = comm.alloc(max)?;
    let dst = comm.alloc(max)?;
    let back = comm.alloc(max)?;
    let flag = comm.alloc(0)?;
    let go = comm.endpoint().alloc_dest_event()?;
    let ack = comm.endpoint().alloc_dest_event()?;
    let data_event = comm.endpoint().alloc_dest_event()?;
    let mut checked = 0;
    let mut seed = 0u64;
    for &len in sizes {
        for policy in policies(comm.rails()) {
            seed += 1;
            let data = pattern(len, seed);
            let (s, d) = (src.slice(0, len)?, dst.slice(0, len)?);
            if comm.rank() == 0 {
                comm.write_local(&s, 0, &data)?;
                let opts = TransferOptions {
                    policy: Some(policy),
                    dest_event: Some(data_event),
                    wake: false,
                };
                let h = comm.endpoint().put_with(&s, peer, &d, opts)?;
                let parts = h.parts().len();
                h.wait()?;
                comm.endpoint().notify(peer, &go, &flag)?;
                // The peer reports back; then read its data back with a get.
                comm.endpoint().wait_arrivals(&ack, &one_on_rail0())?;
                let b = back.slice(0, len)?;
                comm.endpoint()
                    .get_with(
                        peer,
                        &d,
                        &b,
                        TransferOptions {
                            policy: Some(policy),
                            dest_event: None,
                            wake: false,
                        },
                    )?
                    .wait()?;
                let mut got = vec![0; len];
                comm.read_local(&b, 0, &mut got)?;
                assert_eq!(got, data, "get of {len} B with {policy:?}");
                assert!(parts >= 1);
            } else if comm.rank() == peer {
                comm.endpoint().wait_arrivals(&go, &one_on_rail0())?;
                // Every part of the put set the data event on its rail.
                if policy != RailPolicy::RoundRobin {
                    let arrivals = comm.endpoint().expected_arrivals(policy, 0, peer, len, 1);
                    comm.endpoint().wait_arrivals(&data_event, &arrivals)?;
                }
                let mut got = vec![0; len];
                comm.read_local(&d, 0, &mut got)?;
                assert_eq!(
                    got,
                    data,
                    "put of {len} B with {policy:?} on {} rails",
                    comm.rails()
                );
                checked += 1;
                comm.endpoint().notify(0, &ack, &flag)?;
            }
        }
    }
    Ok(checked)
}

fn one_on_rail0() -> railcoll_host::Arrivals {
    let mut a = railcoll_host::Arrivals::new();
    a.add(0, 1);
    a
}

#[test]
fn put_and_get_every_size_every_policy_on_1_to_4_rails() {
    for rails in 1..=4 {
        // 2 nodes x 2 ranks: rank 0's peers are rank 1 (same node, through
        // the NIC loopback) and rank 2 (other node).
        let c = cluster(2, 2, rails, 16 << 20);
        for peer in [1, 2] {
            let out = c.run(|comm| exercise(comm, peer, &SIZES));
            let checked = out[peer]
                .as_ref()
                .expect("peer ran")
                .as_ref()
                .expect("no error");
            assert_eq!(*checked, SIZES.len() * policies(rails).len());
            for (rank, r) in out.iter().enumerate() {
                assert!(r.as_ref().is_ok_and(|v| v.is_ok()), "rank {rank}: {r:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]
    /// Random sizes and offsets (unaligned on both sides), random rails.
    #[test]
    fn random_sizes_and_offsets(rails in 1usize..=3, cases in proptest::collection::vec((0usize..200_000, 0usize..4096, 0usize..4096, 0usize..4), 1..12)) {
        let c = cluster(2, 1, rails, 1 << 20);
        let cases2 = cases.clone();
        let out = c.run(move |comm| -> Result<(), Error> {
            let src = comm.alloc(300_000)?;
            let dst = comm.alloc(300_000)?;
            let flag = comm.alloc(0)?;
            let go = comm.endpoint().alloc_dest_event()?;
            let ack = comm.endpoint().alloc_dest_event()?;
            for (i, &(len, so, doff, p)) in cases2.iter().enumerate() {
                let policy = [RailPolicy::default(), RailPolicy::RoundRobin, RailPolicy::Stripe { threshold: 0 }, RailPolicy::Rail(rails - 1)][p];
                let data = pattern(len, i as u64);
                let (s, d) = (src.slice(so, len)?, dst.slice(doff, len)?);
                if comm.rank() == 0 {
                    comm.write_local(&s, 0, &data)?;
                    comm.endpoint().put_with(&s, 1, &d, TransferOptions { policy: Some(policy), dest_event: None, wake: false })?.wait()?;
                    comm.endpoint().notify(1, &go, &flag)?;
                    comm.endpoint().wait_arrivals(&ack, &one_on_rail0())?;
                } else {
                    comm.endpoint().wait_arrivals(&go, &one_on_rail0())?;
                    let mut got = vec![0; len];
                    comm.read_local(&d, 0, &mut got)?;
                    assert_eq!(got, data);
                    comm.endpoint().notify(0, &ack, &flag)?;
                }
            }
            Ok(())
        });
        for r in out {
            prop_assert!(r.is_ok_and(|v| v.is_ok()));
        }
    }
}

#[test]
fn bad_requests_get_typed_errors_and_change_nothing() {
    let c = cluster(2, 1, 2, 1 << 16);
    let out = c.run(|comm| {
        let buf = comm.alloc(1024).unwrap();
        let other = comm.alloc(512).unwrap();
        assert!(matches!(
            comm.endpoint().put(&buf, 2, &buf),
            Err(Error::RankOutOfRange { rank: 2, size: 2 })
        ));
        assert!(matches!(
            comm.endpoint().put(&buf, 1, &other),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            comm.endpoint().put_with(
                &buf,
                1,
                &buf,
                TransferOptions {
                    policy: Some(RailPolicy::Rail(2)),
                    dest_event: None,
                    wake: false
                }
            ),
            Err(Error::NoSuchRail { rail: 2, rails: 2 })
        ));
        assert!(matches!(
            buf.slice(1000, 100),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(matches!(
            comm.alloc(1 << 20),
            Err(Error::ArenaExhausted { .. })
        ));
        assert!(matches!(
            comm.write_local(&buf, 1020, &[0; 8]),
            Err(Error::OutOfBounds { .. })
        ));
        assert!(
            comm.endpoint().take_nic_errors().unwrap().is_empty(),
            "nothing reached the NIC"
        );
    });
    assert!(out.iter().all(|r| r.is_ok()));
}
