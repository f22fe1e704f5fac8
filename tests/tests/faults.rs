//! Collectives under injected faults (`ClusterConfig::faults`, the CLI's
//! `--faults`): random collectives (shape, collective, algorithm and its
//! drive, block size, root, call form, fault seed) must complete with
//! every byte right while the rails lose, corrupt, duplicate and delay
//! packets, and the faults must really have happened (counted).
//!
//! The suite's mode ([`railcoll_tests::mode`]) runs them: the README's
//! test command runs this file in threads mode and again in modeled mode.
//! `RAILCOLL_FAULT_CASES=N` sets the collectives per test (default 96,
//! enough packets that at 0.1 % corruption both headers and payloads are
//! hit in both modes; docs/reliability.md reports runs of 1000). The determinism checks run
//! in modeled mode whatever the suite's mode: the same seed must give the
//! same trace hash with faults on.

use std::sync::Arc;
use std::time::Duration;

use railcoll_emu::hw::faults::{FaultCounts, FaultSpec};
use railcoll_emu::{Cluster, ClusterConfig, Mode};
use railcoll_host::Placement;
use railcoll_host::sched::{Choice, Collective, Params, Shape, generate};
use railcoll_tests::Draw;
use railcoll_tests::coll::{Case, Form, run_case};

const SIZES: [usize; 7] = [0, 1, 3, 64, 1000, 4096, 65537];

fn cases_per_test() -> usize {
    std::env::var("RAILCOLL_FAULT_CASES")
        .ok()
        .map(|v| v.parse().expect("RAILCOLL_FAULT_CASES: a number"))
        .unwrap_or(96)
}

/// A random shape of up to 16 ranks, `min_rails`-3 rails.
fn random_shape(draw: &mut Draw, min_rails: usize) -> Shape {
    let nodes = [1, 2, 3, 4, 5, 8][draw.below(6)];
    let rpn = 1 + draw.below(if nodes > 4 { 2 } else { 4 });
    let rails = min_rails + draw.below(4 - min_rails);
    let placement = if draw.below(2) == 0 {
        Placement::Block
    } else {
        Placement::Cyclic
    };
    Shape::new(nodes, rpn, 1, rails, placement).expect("shape")
}

/// A random case the shape can run.
fn random_case(draw: &mut Draw, shape: Shape) -> Case {
    let n = shape.size();
    loop {
        let c = Collective::ALL[draw.below(Collective::ALL.len())];
        let algorithms = c.algorithms();
        let a = algorithms[draw.below(algorithms.len())];
        let choice = match draw.below(3) {
            0 => Choice::host(a),
            1 => Choice::nic(a),
            _ => Choice::nic_dma(a),
        };
        let bytes = SIZES[draw.below(SIZES.len())];
        let bytes = if c == Collective::Alltoall {
            bytes.min(4096)
        } else {
            bytes
        };
        let root = if c.rooted() { draw.below(n) } else { 0 };
        let params = Params::new(c, a, shape, root, bytes).with_choice(choice);
        if generate(&params).is_err() {
            continue; // refused for this shape (tested in schedules.rs)
        }
        return Case {
            c,
            a: choice,
            root,
            bytes,
            form: [Form::Blocking, Form::Wait, Form::Test][draw.below(3)],
        };
    }
}

/// A cluster of `shape` in `mode` with `faults` seeded by `seed`.
fn faulty_cluster(shape: Shape, mode: Mode, faults: &str, seed: u64) -> Cluster {
    faulty_cluster_with(shape, mode, faults, seed, None)
}

/// As [`faulty_cluster`], with the NICs' retry limit.
fn faulty_cluster_with(
    shape: Shape,
    mode: Mode,
    faults: &str,
    seed: u64,
    retry_limit: Option<u32>,
) -> Cluster {
    let spec: FaultSpec = faults.parse().expect("fault spec");
    Cluster::new(ClusterConfig {
        shape,
        mode,
        seed,
        faults: Arc::new(spec),
        // Above the worst queueing on a port of these shapes (15 senders'
        // windows of 2 KiB packets, ~1 ms), so losses, not waiting, are
        // what it catches.
        retransmit_timeout: Some(Duration::from_millis(2)),
        retry_limit,
        arena_size: 32 << 20,
        packet_size: 2048,
        wait_timeout: Duration::from_secs(60),
        ..ClusterConfig::default()
    })
    .expect("cluster")
}

/// What a run of random collectives saw.
#[derive(Debug, Default)]
struct Seen {
    /// The faults injected.
    counts: FaultCounts,
    /// Payloads the receive ports discarded for their CRC.
    discards: u64,
    /// Clusters in which some rank's NIC went round a rail (`STATUS.MIGRATED`
    /// once its collectives were done).
    failed_over: usize,
    /// Clusters whose faults took rail 0 (the switch barrier's) down.
    rail_0_down: usize,
}

/// The faults of one cluster, drawn for its shape.
type FaultsFor<'a> = &'a dyn Fn(&mut Draw, Shape) -> String;

/// Run `count` random collectives in `mode` under the faults `faults`
/// draws for each cluster (of a random shape with at least `min_rails`
/// rails, a few cases each, the NICs' retry limit `retry_limit`); panics
/// on the first wrong byte or error.
fn random_collectives_under(
    faults: FaultsFor<'_>,
    min_rails: usize,
    retry_limit: Option<u32>,
    mode: Mode,
    seed: u64,
    count: usize,
) -> Seen {
    let mut draw = Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut seen = Seen::default();
    let mut done = 0;
    let mut cluster_seed = seed;
    while done < count {
        let shape = random_shape(&mut draw, min_rails);
        let cases: Vec<Case> = (0..8.min(count - done))
            .map(|_| random_case(&mut draw, shape))
            .collect();
        let spec = faults(&mut draw, shape);
        cluster_seed = cluster_seed.wrapping_add(1);
        let cluster = faulty_cluster_with(shape, mode, &spec, cluster_seed, retry_limit);
        let results = cluster.run(|comm| {
            for &case in &cases {
                run_case(comm, case)?;
            }
            comm.endpoint()
                .failed_over_rails()
                .map_err(|e| e.to_string())
        });
        let mut failed_over = false;
        for (rank, r) in results.into_iter().enumerate() {
            match r {
                Ok(Ok(rails)) => failed_over |= !rails.is_empty(),
                Ok(Err(e)) => {
                    panic!("{shape:?} seed {cluster_seed} under {spec}: rank {rank}: {e}")
                }
                Err(e) => panic!("{shape:?} seed {cluster_seed}: rank {rank} did not start: {e}"),
            }
        }
        seen.counts.add(&cluster.fault_counts());
        seen.discards += cluster.crc_discards();
        seen.failed_over += usize::from(failed_over);
        seen.rail_0_down += usize::from(spec.contains("rail-down=0@"));
        done += cases.len();
    }
    seen
}

/// 1% loss and 0.1% corruption per rail (the figures): every
/// collective completes with every byte right.
#[test]
fn random_collectives_survive_loss_and_corruption() {
    let mode = railcoll_tests::mode();
    let Seen {
        counts, discards, ..
    } = random_collectives_under(
        &|_, _| "drop=0.01,corrupt=0.001".into(),
        1,
        None,
        mode,
        11,
        cases_per_test(),
    );
    eprintln!("{mode:?}: {counts:?}, {discards} payloads failed their CRC");
    assert!(counts.dropped > 0, "no packet was lost: {counts:?}");
    assert!(
        counts.corrupt_header > 0 && counts.corrupt_payload > 0,
        "headers and payloads were not both corrupted: {counts:?}"
    );
    assert!(
        discards >= counts.corrupt_payload,
        "a corrupted payload passed its CRC: {counts:?}, {discards} discarded"
    );
}

/// Duplicates, reordering, lost barrier and broadcast packets, and a
/// NIC that stalls: every collective completes with every byte right.
#[test]
fn random_collectives_survive_duplicates_delays_and_lost_collective_packets() {
    let mode = railcoll_tests::mode();
    let Seen {
        counts, discards, ..
    } = random_collectives_under(
        &|_, _| {
            "dup=0.02,delay=0.02:30us,drop-collective=0.05,corrupt=0.005,stall=0.0@200us+300us"
                .into()
        },
        1,
        None,
        mode,
        12,
        cases_per_test(),
    );
    eprintln!("{mode:?}: {counts:?}, {discards} payloads failed their CRC");
    assert!(counts.duplicated > 0 && counts.delayed > 0, "{counts:?}");
    assert!(
        counts.dropped > 0,
        "no collective packet was lost: {counts:?}"
    );
}

/// A rail killed for good at a random time while the collectives run:
/// the NICs' flows and broadcasts on it migrate to their alternate rail
/// past the retry limit (2 here: after 7 timeouts of 2 ms), a switch
/// barrier on it gives up and the masters finish it without the switch,
/// and every collective completes with every byte right.
#[test]
fn random_collectives_survive_a_rail_killed_at_a_random_time() {
    let mode = railcoll_tests::mode();
    // Within a cluster's run: its eight collectives take some 100s of us
    // of virtual time, some ms of wall time.
    let horizon_us = match mode {
        Mode::Modeled => 300,
        _ => 3000,
    };
    let seen = random_collectives_under(
        &|draw, shape| {
            let rail = draw.below(shape.rails);
            format!("rail-down={rail}@{}us", draw.below(horizon_us))
        },
        2,
        Some(2),
        mode,
        13,
        cases_per_test(),
    );
    eprintln!("{mode:?}: {seen:?}");
    assert!(
        seen.counts.rail_down > 0,
        "the dead rails carried nothing: {seen:?}"
    );
    assert!(
        seen.failed_over > 0,
        "no NIC went round its dead rail: {seen:?}"
    );
}

/// Rail 0, whose switch combines the hardware barrier and replicates the
/// hardware broadcast, dead from the start: each master's switch barrier
/// gives up past the retry limit and is finished without the switch
/// (the masters read each other's entered numbers), the broadcasts go
/// through rail 1's switch, and every byte is right. Before ABI 1.5 the
/// first barrier waited for ever.
#[test]
fn the_hardware_barrier_and_broadcast_survive_a_dead_rail_0() {
    let mode = railcoll_tests::mode();
    let shape = Shape::new(4, 2, 1, 2, Placement::Block).expect("shape");
    let cluster = faulty_cluster_with(shape, mode, "rail-down=0@0us", 5, Some(2));
    let hardware = railcoll_host::sched::Algorithm::Hardware;
    let bcast = |root, bytes| Case {
        c: Collective::Bcast,
        a: Choice::host(hardware),
        root,
        bytes,
        form: Form::Blocking,
    };
    for r in cluster.run(|comm| {
        for round in 0..3 {
            comm.barrier_with(hardware).map_err(|e| e.to_string())?;
            run_case(comm, bcast(round % comm.size(), 5000))?;
            run_case(comm, bcast(comm.size() - 1, 64))?;
        }
        comm.endpoint()
            .failed_over_rails()
            .map_err(|e| e.to_string())
    }) {
        let rails = r
            .expect("started")
            .expect("every barrier and broadcast completes");
        assert!(rails.contains(&0), "{rails:?}");
    }
    assert!(cluster.fault_counts().rail_down > 0);
}

/// Rail 0 flapping under back-to-back switch barriers (down for 20 ms,
/// up, down again for 5 ms, up): masters may fail over at different
/// barriers, and the switch comes back while they run without it; every
/// barrier still completes (a held wait is bounded, the fallback finishes
/// it), and a barrier never releases a master before every master
/// entered it (each checks a word its neighbour put before the barrier).
#[test]
fn switch_barriers_survive_rail_0_flapping() {
    let mode = railcoll_tests::mode();
    let shape = Shape::new(4, 1, 1, 2, Placement::Block).expect("shape");
    let cluster = faulty_cluster_with(
        shape,
        mode,
        "rail-down=0@300us,rail-up=0@20ms,rail-down=0@40ms,rail-up=0@45ms",
        9,
        Some(2),
    );
    let hardware = railcoll_host::sched::Algorithm::Hardware;
    for r in cluster.run(|comm| {
        let word = comm.alloc(8).map_err(|e| e.to_string())?;
        let src = comm.alloc(8).map_err(|e| e.to_string())?;
        let peer = (comm.rank() + 1) % comm.size();
        for round in 1..=300u64 {
            // Each rank puts its round to the next before the barrier,
            // and checks after it that its own word holds the round: a
            // barrier that released early would show the previous one.
            comm.write_local(&word, 0, &0u64.to_le_bytes())
                .map_err(|e| e.to_string())?;
            comm.barrier_with(hardware).map_err(|e| e.to_string())?;
            comm.write_local(&src, 0, &round.to_le_bytes())
                .map_err(|e| e.to_string())?;
            comm.endpoint()
                .put(&src, peer, &word)
                .and_then(|h| h.wait())
                .map_err(|e| e.to_string())?;
            comm.barrier_with(hardware).map_err(|e| e.to_string())?;
            let mut got = [0u8; 8];
            comm.read_local(&word, 0, &mut got)
                .map_err(|e| e.to_string())?;
            if u64::from_le_bytes(got) != round {
                return Err(format!("round {round}: {}", u64::from_le_bytes(got)));
            }
        }
        Ok::<(), String>(())
    }) {
        assert_eq!(r.expect("started"), Ok(()));
    }
    assert!(cluster.fault_counts().rail_down > 0);
}

/// A rail that goes down and comes back within the retry budget: the
/// go-back-N alone carries every collective across the outage.
#[test]
fn a_rail_that_comes_back_is_ridden_out() {
    let mode = railcoll_tests::mode();
    let shape = Shape::new(4, 2, 1, 2, Placement::Block).expect("shape");
    // 100 ms, not 20: on a loaded machine the cluster's first packet can
    // come after 20 ms of its clock, and the outage then hit nothing (the
    // test failed so, before issue 27's changes too). Within the retry
    // budget all the same: 119 backed-off timeouts of 2 ms.
    let cluster = faulty_cluster(shape, mode, "rail-down=1@0us,rail-up=1@100ms", 3);
    let mut draw = Draw(99);
    let cases: Vec<Case> = (0..6).map(|_| random_case(&mut draw, shape)).collect();
    let allgather = Case {
        c: Collective::Allgather,
        a: Choice::host(railcoll_host::sched::Algorithm::Direct),
        root: 0,
        bytes: 65537,
        form: Form::Blocking,
    };
    for r in cluster.run(|comm| {
        run_case(comm, allgather)?;
        for &case in &cases {
            run_case(comm, case)?;
        }
        Ok::<(), String>(())
    }) {
        assert_eq!(r.expect("started"), Ok(()));
    }
    assert!(
        cluster.fault_counts().rail_down > 0,
        "the outage hit nothing"
    );
}

/// The same seed gives the same trace hash with faults on, over reruns
/// (modeled mode); another seed injects other faults.
#[test]
fn the_same_seed_replays_the_same_faults() {
    let shape = Shape::new(3, 2, 1, 2, Placement::Block).expect("shape");
    let mut draw = Draw(5);
    let cases: Vec<Case> = (0..6).map(|_| random_case(&mut draw, shape)).collect();
    let faults = "drop=0.02,corrupt=0.01,dup=0.01,delay=0.01,drop-collective=0.05";
    let run = |seed: u64| {
        let cluster = faulty_cluster(shape, Mode::Modeled, faults, seed);
        for r in cluster.run(|comm| {
            for &case in &cases {
                run_case(comm, case)?;
            }
            Ok::<(), String>(())
        }) {
            assert_eq!(r.expect("started"), Ok(()));
        }
        let kernel = cluster.kernel().expect("modeled");
        (kernel.digest(), cluster.fault_counts())
    };
    let (first, counts) = run(41);
    assert!(counts.injected() > 0, "{counts:?}");
    let (again, counts_again) = run(41);
    assert_eq!(first, again, "a rerun with the same seed differs");
    assert_eq!(counts, counts_again);
    let (other, other_counts) = run(42);
    assert_ne!(first, other, "another seed, the same trace");
    assert_ne!(counts, other_counts);
}

/// A rank that never arrives: the others' wait ends, in either mode, in
/// a report naming every rank's pending step (modeled mode's watchdog in
/// virtual time, threads mode's after `wait_timeout` of wall time). The
/// first rank whose wait times out revokes the communicator: the other
/// returns the revoke naming it, with the timeout as its cause.
#[test]
fn a_stall_ends_in_a_report_naming_every_rank() {
    let mode = railcoll_tests::mode();
    let cluster = Cluster::new(ClusterConfig {
        shape: Shape::new(3, 1, 1, 1, Placement::Block).expect("shape"),
        mode,
        wait_timeout: Duration::from_millis(500),
        ..ClusterConfig::default()
    })
    .expect("cluster");
    let results = cluster.run(|comm| {
        if comm.rank() == 2 {
            Ok(()) // never arrives
        } else {
            comm.barrier()
        }
    });
    let mut timed_out = 0;
    for (rank, r) in results.iter().take(2).enumerate() {
        let e = r
            .as_ref()
            .expect("started")
            .as_ref()
            .expect_err("a stalled barrier fails");
        match e {
            railcoll_host::Error::Timeout(_) => timed_out += 1,
            railcoll_host::Error::Revoked {
                rank: by,
                cause: railcoll_host::RevokeCause::Timeout,
            } if *by != rank && *by < 2 => {}
            e => panic!("rank {rank}: {e}"),
        }
    }
    assert!(timed_out > 0, "some rank's own wait timed out");
    let report = cluster.stall_report().expect("a report");
    eprintln!("{report}");
    for rank in 0..2 {
        assert!(
            report.contains(&format!("rank {rank} at step")),
            "rank {rank}'s step is missing: {report}"
        );
    }
    assert!(report.contains("rank 2"), "{report}");
}
