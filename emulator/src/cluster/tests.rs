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
        (2, 17, 2, "ranks per node"),
        (2, 1, 0, "rails"),
        (2, 1, 5, "rails"),
    ] {
        let err = Shape::new(nodes, rpn, 1, rails, Placement::Block)
            .expect_err("bad shape")
            .to_string();
        assert!(err.contains(needle), "{err}");
    }
    let beyond_the_emulator = Shape::new(257, 1, 1, 2, Placement::Block).expect("a shape");
    for (cfg, needle) in [
        (
            ClusterConfig {
                shape: beyond_the_emulator,
                ..ok.clone()
            },
            "nodes",
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

/// Threads mode: ranks that wait on a crowded machine (more waiting ranks
/// than the cores the one worker leaves) run the NICs' work themselves
/// unless the cluster leaves it to the workers, and either way every
/// block of a stream of all-gathers (barriers between them) lands intact.
#[test]
fn waiting_ranks_run_the_nics_only_when_let() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let ranks = 16;
    for inline_nic in [true, false] {
        let c = Cluster::new(ClusterConfig {
            shape: Shape::new(2, ranks / 2, 1, 2, Placement::Block).expect("shape"),
            workers: Some(1),
            arena_size: 1 << 16,
            inline_nic,
            ..ClusterConfig::default()
        })
        .expect("cluster");
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
                        "inline {inline_nic}, round {round}: rank {me}'s block {rank} is wrong"
                    );
                }
                comm.barrier()?;
            }
            Ok(())
        });
        for r in out {
            r.expect("rank ran").expect("all-gathers");
        }
        match (inline_nic, c.nic_polls_by_ranks()) {
            // Sixteen ranks crowd a machine of up to 16 cores whenever
            // all of them wait (in every barrier, with luck in many).
            (true, Some(polls)) => assert!(polls > 0 || ranks < cores, "no rank ran a NIC"),
            (false, None) => {}
            (inline, polls) => panic!("inline {inline}: rank polls {polls:?}"),
        }
    }
}
