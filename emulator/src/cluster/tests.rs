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
