//! Unit tests of cluster construction and reuse.
use super::*;
use railcoll_host::{Placement, RailPolicy};

#[test]
fn invalid_configurations_are_refused_by_name() {
    let ok = ClusterConfig::default();
    assert!(ok.validate().is_ok());
    // A shape is checked when it is made.
    for (nodes, rpn, rails, needle) in [
        (0, 1, 2, "nodes"),
        (railcoll_host::topology::MAX_NODES + 1, 1, 2, "nodes"),
        (2, 17, 2, "ranks per node"),
        (2, 1, 0, "rails"),
        (2, 1, 5, "rails"),
    ] {
        let err = Shape::new(nodes, rpn, 1, rails, Placement::Block)
            .expect_err("bad shape")
            .to_string();
        assert!(err.contains(needle), "{err}");
    }
    // Past the 256 nodes the NICs' flow tables once covered (their flow
    // slots are per peer now, docs/abi.md §8.1), up to the host's limit:
    // in modeled mode; threads mode (a thread per rank) stops at 256.
    for nodes in [257, railcoll_host::topology::MAX_NODES] {
        let shape = Shape::new(nodes, 1, 1, 2, Placement::Block).expect("a shape");
        let modeled = ClusterConfig {
            shape,
            mode: Mode::Modeled,
            ..ok.clone()
        };
        assert!(modeled.validate().is_ok());
    }
    let beyond_threads = Shape::new(257, 1, 1, 2, Placement::Block).expect("a shape");
    for (cfg, needle) in [
        (
            ClusterConfig {
                shape: beyond_threads,
                ..ok.clone()
            },
            "nodes must be 1..=256 in threads mode",
        ),
        (
            ClusterConfig {
                workers: Some(0),
                ..ok.clone()
            },
            "workers",
        ),
        (
            ClusterConfig {
                packet_size: 1000,
                ..ok.clone()
            },
            "packet size",
        ),
        (
            ClusterConfig {
                packet_size: 32,
                ..ok.clone()
            },
            "packet size",
        ),
        (
            ClusterConfig {
                arena_size: 0,
                ..ok.clone()
            },
            "arena",
        ),
        (
            ClusterConfig {
                policy: RailPolicy::Rail(2),
                ..ok.clone()
            },
            "rail policy",
        ),
    ] {
        match Cluster::new(cfg.clone()) {
            Err(EmuError::Config(msg)) => assert!(msg.contains(needle), "{msg}"),
            other => panic!("{cfg:?} was accepted: {other:?}"),
        }
    }
}

#[test]
fn a_cluster_runs_many_closures_in_turn() {
    let c = Cluster::new(ClusterConfig {
        arena_size: 1 << 16,
        ..ClusterConfig::default()
    })
    .expect("cluster");
    for round in 0..3 {
        let out = c.run(|comm| comm.rank() * 10 + round);
        let values: Vec<usize> = out.into_iter().map(|r| r.expect("rank ran")).collect();
        assert_eq!(values, vec![round, 10 + round]);
    }
}

/// Threads mode: ranks that wait run the NICs' work themselves exactly
/// when the machine is crowded (here made so, or not, whatever its cores)
/// and the cluster lets them; either way every block of a stream of
/// all-gathers lands intact, also when packets are lost (retransmission
/// timers armed by ranks' polls must still fire) and ranks compute
/// between calls (the workers must take the NICs back).
#[test]
fn waiting_ranks_run_the_nics_only_when_crowded_and_let() {
    use crate::hw::faults::FaultSpec;
    for (inline_nic, crowded, lossy) in [
        (true, true, false),
        (true, true, true),
        (true, false, false),
        (false, true, true),
    ] {
        let what = format!("inline {inline_nic}, crowded {crowded}, lossy {lossy}");
        let c = Cluster::new(ClusterConfig {
            shape: Shape::new(2, 2, 1, 2, Placement::Block).expect("shape"),
            workers: Some(1),
            arena_size: 1 << 16,
            inline_nic,
            faults: Arc::new(FaultSpec {
                drop: if lossy { 0.05 } else { 0.0 },
                ..FaultSpec::default()
            }),
            retransmit_timeout: Some(std::time::Duration::from_millis(2)),
            // A lost timer shows as a timeout, not as a slow test.
            wait_timeout: std::time::Duration::from_secs(10),
            ..ClusterConfig::default()
        })
        .expect("cluster");
        if let Backend::Threads {
            help: Some(help), ..
        } = &c.backend
        {
            help.set_spare_cores(if crowded { 0 } else { usize::MAX });
        }
        let block = 256;
        let out = c.run(|comm| -> Result<(), railcoll_host::Error> {
            let (n, me) = (comm.size(), comm.rank());
            let send = comm.alloc(block)?;
            let recv = comm.alloc(n * block)?;
            for round in 0..20u8 {
                let byte = |rank: usize| (rank as u8).wrapping_mul(31) ^ round;
                comm.write_local(&send, 0, &vec![byte(me); block])?;
                comm.allgather(&send, &recv)?;
                let mut got = vec![0u8; n * block];
                comm.read_local(&recv, 0, &mut got)?;
                for (rank, b) in got.chunks(block).enumerate() {
                    assert!(
                        b.iter().all(|&x| x == byte(rank)),
                        "{what}, round {round}: rank {me}'s block {rank} is wrong"
                    );
                }
                comm.compute(std::time::Duration::from_micros(100 * (me as u64 % 2)));
                comm.barrier()?;
            }
            Ok(())
        });
        for r in out {
            r.expect("rank ran")
                .unwrap_or_else(|e| panic!("{what}: {e}"));
        }
        if lossy {
            assert!(c.fault_counts().dropped > 0, "{what}: nothing was lost");
        }
        match (inline_nic, c.nic_polls_by_ranks()) {
            (true, Some(polls)) if crowded => assert!(polls > 0, "{what}: no rank ran a NIC"),
            (true, Some(polls)) => assert_eq!(polls, 0, "{what}: ranks ran NICs"),
            (false, None) => {}
            (_, polls) => panic!("{what}: rank polls {polls:?}"),
        }
    }
}
