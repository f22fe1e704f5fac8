//! Gather, all-gather and all-to-all on the emulator: every algorithm of
//! the catalogue, on every shape of the property space (nodes 1..=9 and 16,
//! ranks per node 1..=4, rails 1..=3, block and cyclic placement), with
//! block sizes 0, 1, 3, 64, 1000, 4096 and 65537 and gather roots rotating
//! over every rank: each rank's receive buffer must equal the MPI
//! definition byte for byte.
//!
//! One cluster runs per shape and all its cases in one go (thread start-up
//! dominates otherwise). Sizes rotate over algorithms and roots so that
//! every (algorithm, size) pair and every root meets every shape class
//! without running the full cross product, which would take hours on two
//! cores; the verifier (tests/schedules.rs) covers the full product of
//! shapes x algorithms symbolically. All-to-all with 65537-byte blocks is
//! limited to 16 ranks (N^2 blocks per rank).
//!
//! Each algorithm runs twice per shape: host-driven, and compiled onto the
//! NICs (`name@nic`), so every offloaded form meets the whole shape space
//! too; and a third time (`name@nic-dma`) wherever the NICs doing the
//! copies (local ones and the node phases) changes the compiled set, on
//! every other shape of each shape class and with blocks of at most 4 KiB
//! (its puts are the `@nic` form's, striped above that there already; the
//! verifier covers every shape and size). The call form rotates over the
//! cases: the blocking call, a
//! non-blocking request completed by `wait`, and one completed by polling
//! `test` [MPI4 §6.12].
//!
//! From three nodes on, threads mode and modeled mode take alternate
//! shapes ([`railcoll_tests::shared_shape`]); the README's test command
//! runs both, so every shape above still runs once.

use railcoll_host::Placement;
use railcoll_host::sched::{Algorithm, Choice, Collective, Drive, Params, generate};
use railcoll_tests::coll::{Case, Form, block_of, run_case};

const SIZES: [usize; 7] = [0, 1, 3, 64, 1000, 4096, 65537];

/// The cases one shape runs: (collective, algorithm, root, block bytes).
/// Algorithms for one node only are left out on several (their refusal
/// is tested in schedules.rs).
fn cases(n: usize, nodes: usize, k: usize, salt: usize) -> Vec<Case> {
    let mut out = Vec::new();
    let mut i = salt;
    for c in Collective::ALL {
        for a in c.algorithms() {
            if a == Algorithm::Shm && nodes > 1 {
                continue;
            }
            for rep in 0..2 {
                let bytes = SIZES[(i + rep * 3) % SIZES.len()];
                i += 1;
                if c == Collective::Alltoall && bytes > 4096 && n > 16 {
                    continue;
                }
                if c == Collective::Alltoall && a == Algorithm::Exchange {
                    let radix = k + 1;
                    let mut x = 1;
                    while x < n {
                        x *= radix;
                    }
                    if x != n {
                        continue; // refused (tested in schedules.rs)
                    }
                }
                let root = if c.rooted() { (i * 7 + rep) % n } else { 0 };
                let choice = if rep == 0 {
                    Choice::host(a)
                } else {
                    Choice::nic(a)
                };
                let form = [Form::Blocking, Form::Wait, Form::Test][i % 3];
                out.push(Case {
                    c,
                    a: choice,
                    root,
                    bytes,
                    form,
                });
            }
        }
    }
    out
}

fn run_shape(nodes: usize, rpn: usize, rails: usize, placement: Placement, salt: usize) {
    let n = nodes * rpn;
    let shape = railcoll_tests::shape(nodes, rpn, 2, rails, placement);
    let mut cases = cases(n, nodes, rails, salt);
    // `name@nic-dma` as well wherever the NICs' copies change the set
    // (elsewhere it is the `@nic` set, run already): every other one of
    // them, alternating between consecutive shapes (the salt steps by an
    // odd number), so that each meets every shape class within CI's time.
    let dma: Vec<Case> = cases
        .iter()
        .filter(|case| case.a.drive == Drive::Nic)
        .filter_map(|case| {
            // Its puts are the `@nic` form's, striped above 4 KiB there
            // already; its copies are what it adds.
            let bytes = case.bytes.min(4096);
            let p = Params::new(case.c, case.a.algorithm, shape, case.root, bytes);
            let nic = generate(&p.with_choice(case.a)).ok()?;
            let dma = Choice::nic_dma(case.a.algorithm);
            let with_copies = generate(&p.with_choice(dma)).ok()?;
            (with_copies.ranks != nic.ranks).then_some(Case {
                a: dma,
                bytes,
                ..*case
            })
        })
        .enumerate()
        .filter(|(j, _)| (j + salt).is_multiple_of(2))
        .map(|(_, case)| case)
        .collect();
    cases.extend(dma);
    let biggest = cases
        .iter()
        .map(|case| {
            if case.c == Collective::Alltoall {
                2 * n * n * case.bytes
            } else {
                2 * n * case.bytes
            }
        })
        .max()
        .unwrap_or(0);
    // Scratch: Bruck/exchange all-to-all keep up to (2 + 2 log N) x N^2 blocks.
    let arena = (biggest * 8 + (8 << 20)).next_power_of_two();
    let cluster = railcoll_emu::Cluster::new(railcoll_emu::ClusterConfig {
        shape,
        mode: railcoll_tests::mode(),
        arena_size: arena,
        packet_size: 8192,
        wait_timeout: std::time::Duration::from_secs(30),
        // Thousands of calls whose arguments agree by construction: the
        // argument check (tested in together.rs) would only add its
        // exchange to CI's budget.
        check: false,
        ..railcoll_emu::ClusterConfig::default()
    })
    .expect("cluster");
    let results = cluster.run(|comm| {
        for &case in &cases {
            run_case(comm, case)?;
        }
        Ok::<(), String>(())
    });
    let errors: Vec<String> = results
        .into_iter()
        .enumerate()
        .filter_map(|(rank, r)| match r {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("rank {rank}: {e}")),
            Err(e) => Some(format!("rank {rank} did not start: {e}")),
        })
        .collect();
    assert!(
        errors.is_empty(),
        "{nodes}x{rpn} rails {rails} {placement}:\n{}",
        errors.join("\n")
    );
}

/// Every shape with `nodes` nodes; from three nodes on, the two modes
/// share them ([`railcoll_tests::shared_shape`]): those are 82 % of the
/// suite's time.
fn run_nodes(nodes: usize) {
    run_nodes_rpn(nodes, 1..=4);
}

/// The shapes of `nodes` with ranks per node in `rpns` (the largest node
/// count is split over three tests, which the harness runs side by side).
fn run_nodes_rpn(nodes: usize, rpns: std::ops::RangeInclusive<usize>) {
    let mut salt = nodes;
    let mut index = 0;
    for rpn in 1..=4 {
        for rails in 1..=3 {
            for placement in [Placement::Block, Placement::Cyclic] {
                if rpn == 1 && placement == Placement::Cyclic {
                    continue; // identical to block
                }
                let mine = nodes < 3 || railcoll_tests::shared_shape(index + nodes);
                if mine && rpns.contains(&rpn) {
                    run_shape(nodes, rpn, rails, placement, salt);
                }
                index += 1;
                salt += 5;
            }
        }
    }
}

#[test]
fn one_node() {
    run_nodes(1);
}
#[test]
fn two_nodes() {
    run_nodes(2);
}
#[test]
fn three_nodes() {
    run_nodes(3);
}
#[test]
fn four_nodes() {
    run_nodes(4);
}
#[test]
fn five_nodes() {
    run_nodes(5);
}
#[test]
fn six_nodes() {
    run_nodes(6);
}
#[test]
fn seven_nodes() {
    run_nodes(7);
}
#[test]
fn eight_nodes() {
    run_nodes(8);
}
#[test]
fn nine_nodes() {
    run_nodes(9);
}
#[test]
fn sixteen_nodes_one_or_two_ranks_each() {
    run_nodes_rpn(16, 1..=2);
}
#[test]
fn sixteen_nodes_three_ranks_each() {
    run_nodes_rpn(16, 3..=3);
}
#[test]
fn sixteen_nodes_four_ranks_each() {
    run_nodes_rpn(16, 4..=4);
}

/// The plain calls use the tuning table; back-to-back all-gathers and
/// all-to-alls need no barrier between them (alternating counter pools).
#[test]
fn tuned_calls_run_back_to_back() {
    let cluster = railcoll_tests::cluster(3, 2, 2, 8 << 20);
    let results = cluster.run(|comm| -> Result<(), String> {
        let n = comm.size();
        let me = comm.rank();
        for bytes in [8usize, 1000, 20000] {
            let send = comm.alloc(bytes).map_err(|e| e.to_string())?;
            let recv = comm.alloc(n * bytes).map_err(|e| e.to_string())?;
            comm.write_local(&send, 0, &block_of(me, 0, bytes))
                .map_err(|e| e.to_string())?;
            for _ in 0..20 {
                comm.allgather(&send, &recv).map_err(|e| e.to_string())?;
                let mut got = vec![0u8; n * bytes];
                comm.read_local(&recv, 0, &mut got)
                    .map_err(|e| e.to_string())?;
                for i in 0..n {
                    if got[i * bytes..(i + 1) * bytes] != block_of(i, 0, bytes)[..] {
                        return Err(format!("allgather {bytes}: block {i}"));
                    }
                }
            }
            let a2a_send = comm.alloc(n * bytes).map_err(|e| e.to_string())?;
            let a2a_recv = comm.alloc(n * bytes).map_err(|e| e.to_string())?;
            for j in 0..n {
                comm.write_local(&a2a_send, j * bytes, &block_of(me, j, bytes))
                    .map_err(|e| e.to_string())?;
            }
            for _ in 0..10 {
                comm.alltoall(&a2a_send, &a2a_recv)
                    .map_err(|e| e.to_string())?;
            }
            let mut got = vec![0u8; n * bytes];
            comm.read_local(&a2a_recv, 0, &mut got)
                .map_err(|e| e.to_string())?;
            for i in 0..n {
                if got[i * bytes..(i + 1) * bytes] != block_of(i, me, bytes)[..] {
                    return Err(format!("alltoall {bytes}: block {i}"));
                }
            }
            comm.gather(&send, &recv, n - 1)
                .map_err(|e| e.to_string())?;
            comm.barrier().map_err(|e| e.to_string())?;
            comm.reset_arena().map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    for r in results {
        r.expect("started").expect("correct");
    }
}

#[test]
fn bad_buffers_get_typed_errors() {
    let cluster = railcoll_tests::cluster(2, 1, 2, 1 << 20);
    let results = cluster.run(|comm| {
        let send = comm.alloc(10).expect("alloc");
        let small = comm.alloc(10).expect("alloc");
        let e1 = comm
            .allgather_with(Algorithm::Direct, &send, &small)
            .expect_err("recv too small");
        let e2 = comm
            .alltoall_with(Algorithm::Direct, &send.slice(0, 9).expect("slice"), &small)
            .expect_err("not divisible");
        let e3 = comm
            .gather_with(Algorithm::Direct, &send, &small, 5)
            .expect_err("root");
        let e4 = comm
            .alltoall_with(Algorithm::Ring, &small, &small)
            .expect_err("not an all-to-all algorithm");
        (
            e1.to_string(),
            e2.to_string(),
            e3.to_string(),
            e4.to_string(),
        )
    });
    for r in results {
        let (e1, e2, e3, e4) = r.expect("started");
        assert!(e1.contains("receive buffer"), "{e1}");
        assert!(e2.contains("multiple"), "{e2}");
        assert!(e3.contains("out of range"), "{e3}");
        assert!(
            e4.contains("not a alltoall") || e4.contains("alltoall"),
            "{e4}"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 10, ..proptest::prelude::ProptestConfig::default() })]

    /// Random draws from the whole space (the sweep above rotates sizes
    /// and roots; this mixes them freely): collective, algorithm, nodes,
    /// ranks per node, rails, placement, root and block size.
    #[test]
    fn random_cases_match_the_definition(
        coll in 0usize..3,
        algo in 0usize..14,
        nodes in proptest::sample::select(vec![1usize, 2, 3, 4, 5, 6, 7, 8, 9, 16]),
        rpn in 1usize..=4,
        rails in 1usize..=3,
        cyclic in proptest::bool::ANY,
        root in 0usize..64,
        size in proptest::sample::select(SIZES.to_vec()),
        nic in proptest::bool::ANY,
        form in 0usize..3,
    ) {
        let c = Collective::ALL[coll];
        let a = c.algorithms()[algo % c.algorithms().len()];
        let n = nodes * rpn;
        let size = if c == Collective::Alltoall && n > 16 { size.min(4096) } else { size };
        let params = railcoll_host::sched::Params::new(
            c,
            a,
            railcoll_host::sched::Shape::new(nodes, rpn, 2, rails, if cyclic { Placement::Cyclic } else { Placement::Block }).expect("shape"),
            root % n,
            size,
        );
        proptest::prop_assume!(railcoll_host::sched::generate(&params).is_ok());
        let cluster = railcoll_emu::Cluster::new(railcoll_emu::ClusterConfig {
            shape: params.shape,
            mode: railcoll_tests::mode(),
            arena_size: ((n * n * size.max(1)) * 12 + (8 << 20)).next_power_of_two(),
            packet_size: 4096,
            wait_timeout: std::time::Duration::from_secs(30),
            ..railcoll_emu::ClusterConfig::default()
        }).expect("cluster");
        let case = Case {
            c,
            a: if nic { Choice::nic(a) } else { Choice::host(a) },
            root: root % n,
            bytes: size,
            form: [Form::Blocking, Form::Wait, Form::Test][form],
        };
        for r in cluster.run(|comm| run_case(comm, case)) {
            proptest::prop_assert_eq!(r.expect("started"), Ok(()));
        }
    }
}
