//! Modeled mode's data modes (`--data full|none|sample=N`,
//! `railcoll_emu::cluster::DataMode`): a run that moves no payload, or
//! only a sample's, takes the same virtual time and leaves the same trace
//! hash as one that moves everything; it moves and keeps only the pages
//! its data reaches; a sample's data is checked wherever it must land;
//! and what a run without data cannot see, the schedule verifier's
//! symbolic replay of the executed set does.
//!
//! These are modeled mode's own properties: the tests build modeled
//! clusters whatever `RAILCOLL_TEST_MODE` says.

use railcoll_emu::bench::{self, CollBench, coll_model};
use railcoll_emu::cluster::DataMode;
use railcoll_emu::modeled::Profile;
use railcoll_emu::workbench::select;
use railcoll_emu::{Cluster, ClusterConfig, Mode};
use railcoll_host::arena::SymBuffer;
use railcoll_host::sched::{Algorithm, Buf, Choice, Collective, Op, ScheduleSet, Shape};
use railcoll_host::{Comm, Placement};

fn config(shape: Shape, data: DataMode) -> ClusterConfig {
    ClusterConfig {
        mode: Mode::Modeled,
        shape,
        arena_size: 8 << 20,
        data,
        seed: 11,
        check: false,
        ..ClusterConfig::default()
    }
}

/// `figures` with full data, then with none and with a sample of `sample`
/// ranks: the same every time (`what` names the case in a failure). The
/// full run's figures.
fn same_whatever_the_data<T: PartialEq + std::fmt::Debug>(
    what: &str,
    sample: usize,
    figures: impl Fn(DataMode) -> T,
) -> T {
    let full = figures(DataMode::Full);
    assert_eq!(figures(DataMode::None), full, "{what}: --data none");
    assert_eq!(
        figures(DataMode::Sample(sample)),
        full,
        "{what}: --data sample={sample}"
    );
    full
}

fn modeled(shape: Shape, data: DataMode) -> Cluster {
    Cluster::modeled(
        config(shape, data),
        Profile::builtin("qsnet2-dual").expect("profile"),
    )
    .expect("cluster")
}

/// `call` (an all-gather of `block` bytes per rank) on every rank, send
/// data written by the ranks `writes` names: each rank's receive buffer,
/// and the virtual time at the end.
fn gathered(
    cluster: &Cluster,
    block: usize,
    writes: impl Fn(usize) -> bool + Sync,
    call: impl Fn(&Comm, &SymBuffer, &SymBuffer) -> Result<(), railcoll_host::Error> + Sync,
) -> (Vec<Vec<u8>>, f64) {
    let out = cluster
        .run(|comm: &Comm| -> Result<Vec<u8>, railcoll_host::Error> {
            let n = comm.size();
            let send = comm.alloc(block)?;
            let recv = comm.alloc(block * n)?;
            if writes(comm.rank()) {
                let data = railcoll_emu::verify::block_data(comm.rank(), 0, block);
                comm.write_local(&send, 0, &data)?;
            }
            call(comm, &send, &recv)?;
            let mut out = vec![0u8; block * n];
            comm.read_local(&recv, 0, &mut out)?;
            Ok(out)
        })
        .into_iter()
        .map(|r| r.expect("rank ran").expect("all-gather"))
        .collect();
    (out, cluster.now_ns())
}

/// One all-gather with `a` ([`gathered`]).
fn allgather(
    cluster: &Cluster,
    a: Choice,
    block: usize,
    writes: impl Fn(usize) -> bool + Sync,
) -> Vec<Vec<u8>> {
    let call = |comm: &Comm, send: &SymBuffer, recv: &SymBuffer| {
        comm.collective_with(Collective::Allgather, a, send, recv, 0)
    };
    gathered(cluster, block, writes, call).0
}

/// Without data, a run gives no payload line data (only the library's
/// control words: less than one block over all ranks); with a sample,
/// the sampled ranks' blocks reach every rank, byte-exact, every other
/// block is zeros, and the lines given data are those of the sample's
/// blocks (a few pages more for blocks that share pages), far fewer than
/// full data's, through recursive doubling and through Bruck, whose
/// scratch and final rotation are host copies of many blocks at once.
#[test]
fn only_the_pages_a_samples_data_reaches_are_moved() {
    let shape = Shape::new(4, 2, 1, 2, Placement::Block).expect("shape");
    let (n, block) = (shape.size(), 64 << 10);
    let lines_per_block = block / 64;
    for algorithm in [Algorithm::RecursiveDoubling, Algorithm::Bruck] {
        let a = Choice::host(algorithm);
        let none = modeled(shape, DataMode::None);
        let before = none.data_lines();
        let got = allgather(&none, a, block, |_| false);
        let control = none.data_lines() - before;
        assert!(
            control * 64 < block,
            "{algorithm}: {control} lines given data without a payload (one block is {block} bytes)"
        );
        assert!(got.iter().all(|b| b.iter().all(|&x| x == 0)));

        let sampled = modeled(shape, DataMode::Sample(2));
        let sample = sampled.data().ranks().to_vec();
        assert_eq!(sample.len(), 2);
        let got = allgather(&sampled, a, block, |r| sample.contains(&r));
        for (rank, recv) in got.iter().enumerate() {
            for from in 0..n {
                let at = &recv[from * block..(from + 1) * block];
                if sample.contains(&from) {
                    let want = railcoll_emu::verify::block_data(from, 0, block);
                    assert!(at == want, "{algorithm}: rank {rank}, block {from}");
                } else {
                    assert!(
                        at.iter().all(|&x| x == 0),
                        "{algorithm}: rank {rank}, block {from}"
                    );
                }
            }
        }
        // Each rank's copy of each sampled block (and the sampled send
        // blocks), at least; at most three times that (a scratch copy, and
        // pages shared with a neighbouring block) plus the control words.
        let lines = sampled.data_lines();
        let sampled_blocks = n * sample.len() + sample.len();
        assert!(
            lines >= sampled_blocks * lines_per_block,
            "{algorithm}: {lines} lines, fewer than the sample's blocks"
        );
        assert!(
            lines <= 3 * sampled_blocks * lines_per_block + 4 * control,
            "{algorithm}: {lines} lines given data for a sample of 2 (full data: {})",
            n * n * lines_per_block
        );
    }
}

/// Each rank's part of `set` ([`gathered`]).
fn run_set(
    cluster: &Cluster,
    set: &std::sync::Arc<ScheduleSet>,
    block: usize,
    writes: impl Fn(usize) -> bool + Sync,
) -> (Vec<Vec<u8>>, f64) {
    let call = |comm: &Comm, send: &SymBuffer, recv: &SymBuffer| comm.run_schedule(set, send, recv);
    gathered(cluster, block, writes, call)
}

/// The all-gather's recursive-doubling set as a communicator of `shape`
/// runs it, with rank 1's first put sent one block too far.
fn planted_set(
    shape: Shape,
    block: usize,
) -> (std::sync::Arc<ScheduleSet>, std::sync::Arc<ScheduleSet>) {
    let probe = modeled(shape, DataMode::None);
    let rd = Choice::host(Algorithm::RecursiveDoubling);
    let set = probe
        .run(|comm: &Comm| comm.schedule(Collective::Allgather, rd, block, 0))
        .swap_remove(0)
        .expect("rank ran")
        .expect("schedule");
    let mut planted = (*set).clone();
    let n = shape.size() as u32;
    let put = planted.ranks[1]
        .steps
        .iter_mut()
        .find_map(|s| match &mut s.op {
            Op::Put { dst, .. } if dst.buf == Buf::Recv && dst.count == 1 => Some(dst),
            _ => None,
        })
        .expect("rank 1 puts one block");
    put.block = (put.block + 1) % n;
    (set, std::sync::Arc::new(planted))
}

/// A schedule that puts a block in the wrong place runs to the end with
/// the same virtual time whether or not data moves: without data, the run
/// itself cannot see it. Full data and a sample holding the block's rank
/// see the wrong bytes; the schedule verifier's symbolic replay, on which
/// `--data none` rests (the workbench proves the executed set before it
/// reports a figure), names it without running anything.
#[test]
fn the_verifier_catches_a_misplacement_a_run_without_data_cannot_see() {
    let shape = Shape::new(4, 2, 1, 1, Placement::Block).expect("shape");
    let block = 256;
    let (set, planted) = planted_set(shape, block);
    let want = |from: usize| railcoll_emu::verify::block_data(from, 0, block);

    let (_, t_right) = run_set(&modeled(shape, DataMode::None), &set, block, |_| false);
    let (_, t_none) = run_set(&modeled(shape, DataMode::None), &planted, block, |_| false);
    let (full, t_full) = run_set(&modeled(shape, DataMode::Full), &planted, block, |_| true);
    assert_eq!(t_none, t_full, "the data mode changes no virtual time");
    assert_eq!(
        t_none, t_right,
        "a misplaced put takes as long as a placed one"
    );
    // Some rank's block from a rank in `from` is not that rank's data.
    let wrong = |bufs: &[Vec<u8>], from: &[usize]| {
        bufs.iter().any(|recv| {
            from.iter()
                .any(|&f| recv[f * block..(f + 1) * block] != want(f)[..])
        })
    };
    let every: Vec<usize> = (0..shape.size()).collect();
    assert!(wrong(&full, &every), "full data sees the misplacement");
    // A sample of two that holds rank 1 (the first seed that draws it).
    let sampled = (0..100)
        .map(|seed| {
            let cfg = ClusterConfig {
                seed,
                ..config(shape, DataMode::Sample(2))
            };
            Cluster::modeled(cfg, Profile::builtin("qsnet2-dual").expect("profile"))
                .expect("cluster")
        })
        .find(|c| c.data().holds(1))
        .expect("some seed samples rank 1");
    let sample = sampled.data().ranks().to_vec();
    let (got, _) = run_set(&sampled, &planted, block, |r| sample.contains(&r));
    assert!(wrong(&got, &sample), "a sample holding rank 1 sees it");

    let violation = railcoll_host::sched::verify::verify(&planted, &planted.params.budget)
        .expect_err("the verifier sees the misplacement");
    assert!(violation.to_string().contains("block"), "{violation}");
    railcoll_host::sched::verify::verify(&set, &set.params.budget).expect("the real set is proved");
    // The workbench's path: a point whose executed set is the planted one
    // gives no figure without data, and one with full data a wrong result.
    let point = |set: &std::sync::Arc<ScheduleSet>, data: DataMode| {
        let op = |comm: &Comm, _: usize, send: &SymBuffer, recv: &SymBuffer| {
            comm.run_schedule(set, send, recv)
        };
        let start = bench::start_fn(|comm, _, send, recv| comm.iallgather(send, recv));
        let schedule = |_: &Comm, _: usize, _: usize| Ok(std::sync::Arc::clone(set));
        let b = CollBench {
            collective: "allgather",
            algorithms: vec!["recursive-doubling (as run)"],
            sizes: vec![block],
            iters: 1,
            rounds: 1,
            op: &op,
            start: &start,
            schedule: &schedule,
            send_len: bench::same_len,
            recv_len: bench::per_rank_len,
            synchronised: true,
            check: Some(railcoll_emu::verify::Check {
                collective: Collective::Allgather,
                root: 0,
            }),
        };
        let profile = Profile::builtin("qsnet2-dual").expect("profile");
        coll_model(config(shape, data), &profile, &b, 1, &|_| {})
    };
    let proved = point(&set, DataMode::None).expect("the real set is proved and reported");
    assert_eq!(proved.len(), 1);
    assert!(!proved[0].conditions.verified && proved[0].conditions.data == "none");
    match point(&planted, DataMode::None) {
        Err(e @ railcoll_emu::EmuError::Unproven { .. }) => {
            assert!(e.to_string().contains("recursive-doubling (as run)"), "{e}")
        }
        other => panic!("a planted set without data must be refused: {other:?}"),
    }
    match point(&planted, DataMode::Full) {
        Err(railcoll_emu::EmuError::WrongResult(_)) => {}
        other => panic!("a planted set with full data must be a wrong result: {other:?}"),
    }
}

/// Every collective, every algorithm host-driven and compiled onto the
/// NICs, on SMP and flat shapes with one and two rails, at a one-packet
/// and a multi-packet size: moving no data, or a sample's, gives the
/// same modeled latencies, event counts and trace hash as moving it all
/// (the workbench's path: each point checked, or proved, before it is
/// reported).
#[test]
fn every_data_mode_gives_the_same_figures_and_trace_hash() {
    let profile = Profile::builtin("qsnet2-dual").expect("profile");
    let shapes = [
        Shape::new(4, 1, 1, 1, Placement::Block).expect("shape"),
        Shape::new(3, 2, 1, 2, Placement::Cyclic).expect("shape"),
        Shape::new(2, 4, 2, 2, Placement::Block).expect("shape"),
    ];
    let mut points = 0;
    for shape in shapes {
        for c in Collective::ALL {
            let set = select(c, "all,all@nic,all@nic-dma", shape, 1, 4096).expect("algorithms");
            let figures = |data: DataMode| {
                set.with_bench(&[8, 4096], 1, 1, 1, true, |bench| {
                    coll_model(config(shape, data), &profile, bench, 1, &|_| {})
                        .unwrap_or_else(|e| panic!("{c} on {shape:?} with --data {data}: {e}"))
                        .into_iter()
                        .map(|r| {
                            (
                                r.algorithm,
                                r.size,
                                r.latency_us,
                                r.latency_max_us,
                                r.events,
                                r.trace_hash,
                            )
                        })
                        .collect::<Vec<_>>()
                })
            };
            points += same_whatever_the_data(&format!("{c} on {shape:?}"), 2, figures).len();
        }
    }
    assert!(points > 100, "{points} points compared");
}

/// The same under faults (losses and damage recovered by go-back-N; a
/// rail whose switch is dead from the start, so that the masters finish
/// the switch barrier by reading each other's entered numbers), and for
/// the overlap benchmark (non-blocking calls with computation between):
/// every data mode gives the same figures and trace hash.
#[test]
fn faults_and_overlap_give_the_same_figures_whatever_the_data() {
    use railcoll_emu::hw::faults::FaultSpec;
    use std::sync::Arc;
    use std::time::Duration;
    let profile = Profile::builtin("qsnet2-dual").expect("profile");
    let shape = Shape::new(4, 2, 1, 2, Placement::Block).expect("shape");
    let cases: [(Collective, &str, &str); 4] = [
        (Collective::Barrier, "hardware,smp", "rail-down=0@0us"),
        (Collective::Bcast, "hardware,binomial", "rail-down=0@0us"),
        (
            Collective::Allgather,
            "ring,direct,smp-direct@nic",
            "drop=0.02,corrupt=0.01",
        ),
        (Collective::Alltoall, "all", "dup=0.02,delay=0.05"),
    ];
    for (c, algos, faults) in cases {
        let set = select(c, algos, shape, 0, 4096).expect("algorithms");
        let figures = |data: DataMode| {
            let cfg = ClusterConfig {
                faults: Arc::new(faults.parse::<FaultSpec>().expect("faults")),
                retransmit_timeout: Some(Duration::from_millis(1)),
                retry_limit: Some(2),
                ..config(shape, data)
            };
            set.with_bench(&[64, 5000], 1, 1, 0, true, |bench| {
                coll_model(cfg, &profile, bench, 1, &|_| {})
                    .unwrap_or_else(|e| panic!("{c} under {faults} with --data {data}: {e}"))
                    .into_iter()
                    .map(|r| (r.algorithm, r.size, r.latency_us, r.events, r.trace_hash))
                    .collect::<Vec<_>>()
            })
        };
        same_whatever_the_data(&format!("{c} under {faults}"), 3, figures);
    }
    let set = select(
        Collective::Allgather,
        "ring,smp-direct@nic-dma",
        shape,
        0,
        4096,
    )
    .expect("algorithms");
    let overlap = |data: DataMode| {
        set.with_bench(&[4096], 2, 1, 0, true, |bench| {
            railcoll_emu::overlap::overlap_modeled(config(shape, data), &profile, bench, &|_| {})
                .unwrap_or_else(|e| panic!("overlap with --data {data}: {e}"))
                .into_iter()
                .map(|r| {
                    (
                        r.algorithm,
                        r.pure_us,
                        r.compute_us,
                        r.total_us,
                        r.conditions.data,
                    )
                })
                .collect::<Vec<_>>()
        })
    };
    // The records name their data mode: compared without it.
    let strip = |v: Vec<(&'static str, f64, f64, f64, String)>| {
        v.into_iter()
            .map(|(a, p, c, t, _)| (a, p, c, t))
            .collect::<Vec<_>>()
    };
    let full = same_whatever_the_data("overlap", 2, |data| strip(overlap(data)));
    assert_eq!(full.len(), 2);
}

/// A barrier finished without its switch (rail 0's switch dead from the
/// start): each master reads the others' entered numbers with gets into
/// one word, and a late master's number is still the zero it started
/// from. That zero must land over the reader's earlier result in every
/// data mode (elision writes a never-written source's zeros where the
/// target holds data), or the reader would leave before the late master
/// came; as with full data, no rank leaves before the last arrives.
#[test]
fn a_barrier_without_its_switch_waits_for_a_late_master_whatever_the_data() {
    use railcoll_emu::hw::faults::FaultSpec;
    use std::sync::Arc;
    use std::time::Duration;
    let shape = Shape::new(4, 1, 1, 2, Placement::Block).expect("shape");
    let late = Duration::from_micros(500);
    let leaves = |data: DataMode| {
        let cfg = ClusterConfig {
            faults: Arc::new("rail-down=0@0us".parse::<FaultSpec>().expect("faults")),
            retransmit_timeout: Some(Duration::from_micros(50)),
            retry_limit: Some(2),
            ..config(shape, data)
        };
        let cluster = Cluster::modeled(cfg, Profile::builtin("qsnet2-dual").expect("profile"))
            .expect("cluster");
        let hardware = Choice::host(Algorithm::Hardware);
        cluster
            .run(|comm: &Comm| -> Result<(f64, f64), railcoll_host::Error> {
                let mut last = (0.0, 0.0);
                for round in 0..3 {
                    if comm.rank() == 2 + round % 2 {
                        comm.compute(late);
                    }
                    let arrived = cluster.now_ns();
                    comm.barrier_with(hardware)?;
                    last = (arrived, cluster.now_ns());
                }
                Ok(last)
            })
            .into_iter()
            .map(|r| r.expect("rank ran").expect("barrier"))
            .collect::<Vec<_>>()
    };
    let full = leaves(DataMode::Full);
    let last_arrival = full.iter().map(|t| t.0).fold(0.0, f64::max);
    assert!(full.iter().all(|t| t.1 >= last_arrival), "{full:?}");
    assert_eq!(leaves(DataMode::None), full, "--data none");
    assert_eq!(leaves(DataMode::Sample(1)), full, "--data sample=1");
}
