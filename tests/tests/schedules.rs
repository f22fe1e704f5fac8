//! The schedule verifier over the catalogue: every algorithm, every shape
//! of the property space (nodes 1..=9 and 16, ranks per node 1..=4, rails
//! 1..=3, block and cyclic placement), roots, and block sizes on both sides
//! of every size-dependent switch. Also: deliberately broken schedules are
//! rejected, and the Hockney replay agrees with the papers' formulas.

use railcoll_host::Placement;
use railcoll_host::sched::cost::{self, Hockney};
use railcoll_host::sched::verify::{self, Budget};
use railcoll_host::sched::{Algorithm, Choice, Collective, Op, Params, Shape, generate};

const NODES: [usize; 10] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 16];
/// Block sizes: the property sizes, which straddle the striping threshold
/// and every native switch (2 KB, 4 KB, 8 KB, 32 KB).
const SIZES: [usize; 7] = [0, 1, 3, 64, 1000, 4096, 65537];

fn shapes() -> impl Iterator<Item = Shape> {
    NODES.into_iter().flat_map(|nodes| {
        (1..=4).flat_map(move |rpn| {
            (1..=3).flat_map(move |rails| {
                [Placement::Block, Placement::Cyclic]
                    .into_iter()
                    .map(move |pl| Shape::new(nodes, rpn, 2, rails, pl).expect("shape"))
            })
        })
    })
}

fn refuses_clearly(p: &Params) -> bool {
    // The only refusals the catalogue makes: SE all-to-all off powers of
    // k + 1, the node-only broadcast and barrier on several nodes, and
    // rings longer than the counter pool.
    let n = p.shape.size();
    let radix = p.shape.rails + 1;
    let mut x = 1;
    while x < n {
        x *= radix;
    }
    (p.collective == Collective::Alltoall && p.algorithm == Algorithm::Exchange && x != n)
        || (p.algorithm == Algorithm::Shm && p.shape.topology.nodes() > 1)
        || n > 120
}

#[test]
fn every_algorithm_verifies_on_every_shape() {
    let mut checked = 0;
    for shape in shapes() {
        let n = shape.size();
        for c in Collective::ALL {
            for a in c.algorithms() {
                // Sizes only change striping and the native switches; each
                // shape gets a rotating pair, and the root rotates too.
                let sizes = [SIZES[checked % 7], SIZES[(checked + 3) % 7]];
                for (i, &bytes) in sizes.iter().enumerate() {
                    let root = if c.rooted() { (checked + i * 5) % n } else { 0 };
                    let p = Params::new(c, a, shape, root, bytes);
                    match generate(&p) {
                        Ok(set) => {
                            if let Err(v) = verify::verify(&set, &Budget::default()) {
                                panic!("{c} {a} on {shape:?} root {root} block {bytes}: {v}");
                            }
                        }
                        Err(e) => assert!(refuses_clearly(&p), "{c} {a} {shape:?}: {e}"),
                    }
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 5000, "{checked}");
}

#[test]
fn every_root_and_size_of_every_gather_verifies() {
    for shape in [
        Shape::new(3, 3, 1, 2, Placement::Cyclic).expect("shape"),
        Shape::new(5, 2, 1, 3, Placement::Block).expect("shape"),
    ] {
        for a in Collective::Gather.algorithms() {
            for root in 0..shape.size() {
                for bytes in SIZES {
                    let set = generate(&Params::new(Collective::Gather, a, shape, root, bytes))
                        .expect("generate");
                    verify::verify(&set, &Budget::default())
                        .unwrap_or_else(|v| panic!("gather {a} root {root} block {bytes}: {v}"));
                }
            }
        }
    }
}

fn allgather_set(a: Algorithm) -> railcoll_host::sched::ScheduleSet {
    let shape = Shape::new(3, 2, 1, 2, Placement::Block).expect("shape");
    generate(&Params::new(Collective::Allgather, a, shape, 0, 64)).expect("generate")
}

#[test]
fn a_missing_wait_is_rejected() {
    let mut set = allgather_set(Algorithm::Direct);
    let steps = &mut set.ranks[2].steps;
    let at = steps
        .iter()
        .position(|s| matches!(s.op, Op::Wait { .. }))
        .expect("a wait");
    steps.remove(at);
    let v = verify::verify(&set, &Budget::default()).expect_err("must fail");
    assert_eq!(v.rank, Some(2), "{v}");
    assert!(v.to_string().contains("no wait consumes"), "{v}");
}

#[test]
fn a_double_write_is_rejected() {
    let mut set = allgather_set(Algorithm::Direct);
    // Rank 1 also writes its block into rank 0's slot of rank 3.
    let mut extra = set.ranks[1]
        .steps
        .iter()
        .find(|s| matches!(s.op, Op::Put { to: 3, .. }))
        .cloned()
        .expect("put");
    if let Op::Put { signal, .. } = &mut extra.op {
        *signal = None;
    }
    set.ranks[1].steps.insert(0, extra);
    let v = verify::verify(&set, &Budget::default()).expect_err("must fail");
    assert!(
        v.to_string().contains("concurrently") || v.to_string().contains("written 2 times"),
        "{v}"
    );
}

/// Shift rank 4's last copy of a 6-rank Bruck set by one block.
fn shift_last_copy(set: &mut railcoll_host::sched::ScheduleSet) {
    let last = set.ranks[4]
        .steps
        .iter_mut()
        .rev()
        .find(|s| matches!(s.op, Op::Copy { .. }))
        .expect("copy");
    if let Op::Copy { src, .. } = &mut last.op {
        src.block = (src.block + 1) % 6;
    }
}

#[test]
fn a_wrong_source_block_is_rejected() {
    let mut set = allgather_set(Algorithm::Bruck);
    shift_last_copy(&mut set);
    let v = verify::verify(&set, &Budget::default()).expect_err("must fail");
    assert!(v.to_string().contains("rank 4"), "{v}");
}

#[test]
fn an_over_budget_plan_is_rejected() {
    let set = allgather_set(Algorithm::Ring);
    let tight = Budget {
        counters: 2,
        ..Budget::default()
    };
    let v = verify::verify(&set, &tight).expect_err("ring needs 5 counters");
    assert!(v.to_string().contains("budget"), "{v}");
    let set = allgather_set(Algorithm::Direct);
    let tight = Budget {
        in_flight_per_rail: 1,
        ..Budget::default()
    };
    assert!(verify::verify(&set, &tight).is_err());
    let tight = Budget {
        scratch_bytes_per_node: 10,
        ..Budget::default()
    };
    assert!(verify::verify(&allgather_set(Algorithm::Bruck), &tight).is_err());
}

#[test]
fn a_deadlock_is_reported_with_the_blocked_rank() {
    let mut set = allgather_set(Algorithm::Ring);
    // Every rank waits for step 0's block before sending its own: a cycle.
    for s in &mut set.ranks {
        let steps = &mut s.steps;
        let put = steps
            .iter()
            .position(|s| matches!(s.op, Op::Put { .. }))
            .expect("put");
        let wait = steps
            .iter()
            .position(|s| matches!(s.op, Op::Wait { .. }))
            .expect("wait");
        steps.swap(put, wait);
    }
    let v = verify::verify(&set, &Budget::default()).expect_err("deadlock");
    assert!(v.to_string().contains("deadlock"), "{v}");
}

/// Every algorithm compiled for the NICs (`@nic`: puts whose trigger the
/// NICs can learn about become chained puts; `@nic-dma`: local copies
/// too) still verifies on every shape: same outputs, no races, no
/// deadlock, within the budget. On one rail the round-by-round algorithms
/// really move onto the NIC, and with NIC copies the all-to-alls too.
#[test]
fn every_algorithm_offloaded_still_verifies() {
    use railcoll_host::sched::offload::{self, Copies};
    let mut chained_on_one_rail: std::collections::BTreeMap<String, usize> = Default::default();
    let mut checked = 0;
    for shape in shapes() {
        let n = shape.size();
        for c in Collective::ALL {
            for a in c.algorithms() {
                let bytes = SIZES[checked % 7];
                let root = if c.rooted() { checked % n } else { 0 };
                checked += 1;
                let p = Params::new(c, a, shape, root, bytes);
                let Ok(set) = generate(&p) else { continue };
                for (copies, suffix) in [(Copies::Host, "@nic"), (Copies::Nic, "@nic-dma")] {
                    let out = offload::compile_with(&set, &Budget::default(), copies)
                        .unwrap_or_else(|e| panic!("{c} {a}{suffix} on {shape:?}: {e}"));
                    if let Err(v) = verify::verify(&out.set, &Budget::default()) {
                        panic!("{c} {a}{suffix} on {shape:?} root {root} block {bytes}: {v}");
                    }
                    if shape.rails == 1 {
                        *chained_on_one_rail
                            .entry(format!("{c} {a}{suffix}"))
                            .or_default() += out.moved.chained;
                    }
                }
            }
        }
    }
    for name in [
        "allgather ring@nic",
        "allgather recursive-doubling@nic",
        "allgather bruck@nic",
        "gather binomial@nic",
        "alltoall bruck@nic-dma",
    ] {
        assert!(
            chained_on_one_rail[name] > 0,
            "{name}: {chained_on_one_rail:?}"
        );
    }
    assert_eq!(chained_on_one_rail["alltoall bruck@nic"], 0);
    assert!(checked > 2000, "{checked}");
}

/// The native all-to-all [QA08 §3.1] on nodes of several ranks: up to
/// 2 KB every block between nodes travels through the node masters, one
/// message per ordered node pair on rail 0; above, pairwise among all
/// ranks. Its `@nic-dma` form, whose node pushes carry their raise on the
/// last push of each rank, still orders the master's reads after the
/// earlier pushes (the verifier rejected it before the offload compiler
/// credited an unsignalled put to the signal that waits for it).
#[test]
fn the_native_alltoall_goes_through_node_masters_up_to_2_kb() {
    use railcoll_host::sched::offload::{self, Copies};
    for placement in [Placement::Block, Placement::Cyclic] {
        let shape = Shape::new(3, 2, 1, 2, placement).expect("shape");
        let puts_of = |bytes| {
            let set = generate(&Params::new(
                Collective::Alltoall,
                Algorithm::Native,
                shape,
                0,
                bytes,
            ))
            .expect("set");
            verify::verify(&set, &Budget::default()).expect("verifies");
            let mut puts = Vec::new();
            for r in &set.ranks {
                for step in &r.steps {
                    if let Op::Put { to, lane, src, .. } = step.op
                        && src.count > 0
                    {
                        puts.push((r.rank, to, lane));
                    }
                }
            }
            (set, puts)
        };
        let (set, shm) = puts_of(2048);
        let masters: Vec<u32> = (0..3)
            .map(|v| shape.topology.rank_of(v, 0).expect("master") as u32)
            .collect();
        assert_eq!(shm.len(), 3 * 2, "{placement}: {shm:?}");
        for (from, to, lane) in shm {
            assert!(masters.contains(&from) && masters.contains(&to));
            assert_eq!(lane, railcoll_host::sched::Lane::Rail(0));
        }
        let out = offload::compile_with(&set, &Budget::default(), Copies::Nic).expect("compiles");
        verify::verify(&out.set, &Budget::default()).expect("the @nic-dma form verifies");
        // Two ranks per node, cyclic: each rank's pushes are single blocks,
        // only the last carries the raise.
        let small = Shape::new(2, 2, 1, 1, placement).expect("shape");
        let p = Params::new(Collective::Alltoall, Algorithm::Native, small, 0, 64);
        let out =
            offload::compile_with(&generate(&p).expect("set"), &Budget::default(), Copies::Nic)
                .expect("compiles");
        if let Err(v) = verify::verify(&out.set, &Budget::default()) {
            panic!("native@nic-dma on 2 x 2 {placement}: {v}");
        }
        let (_, flat) = puts_of(2049);
        assert_eq!(flat.len(), 6 * 5, "{placement}: pairwise among all ranks");
    }
}

/// With `@nic-dma` the node phases leave the host: no flag is raised or
/// waited for, no node barrier or node broadcast is left, and no copy goes
/// into a node peer's memory (each became a
/// put to the peer and its counter), and in the SMP-aware gathers and
/// all-gathers no copy comes out of one either (each was handed to the
/// peer, whose raise became the put of those bytes; the gather-and-
/// broadcast all-gathers copy out after the node's flat-tree barrier,
/// which stays with the host), while `@nic` keeps them all. On several
/// shapes with two to four ranks per node.
#[test]
fn node_phases_move_onto_the_nics_with_nic_dma() {
    let node_ops = |set: &railcoll_host::sched::ScheduleSet| {
        let (mut flags, mut pushes, mut pulls) = (0, 0, 0);
        for step in set.ranks.iter().flat_map(|r| &r.steps) {
            match step.op {
                // The node's flat tree and broadcast count as flags.
                Op::Signal { .. }
                | Op::WaitFlag { .. }
                | Op::NodeArrive
                | Op::NodeRelease
                | Op::NodeBcast { .. } => flags += 1,
                Op::PeerCopy {
                    dir: railcoll_host::sched::PeerDir::Push,
                    ..
                } => pushes += 1,
                Op::PeerCopy { .. } => pulls += 1,
                _ => {}
            }
        }
        (flags, pushes, pulls)
    };
    let handed_whole = [
        (Collective::Gather, Algorithm::SmpTree),
        (Collective::Gather, Algorithm::SmpDirect),
        (Collective::Allgather, Algorithm::SmpDirect),
        (Collective::Allgather, Algorithm::SmpBruck),
    ];
    let mut moved = 0;
    for (nodes, rpn, rails, placement) in [
        (3, 2, 1, Placement::Block),
        (2, 4, 2, Placement::Cyclic),
        (4, 3, 1, Placement::Block),
    ] {
        let shape = Shape::new(nodes, rpn, 1, rails, placement).expect("shape");
        for c in Collective::ALL {
            for a in c.algorithms() {
                let p = Params::new(c, a, shape, 1 % shape.size(), 64);
                let Ok(host) = generate(&p) else { continue };
                let (flags, pushes, _) = node_ops(&host);
                if flags == 0 && pushes == 0 {
                    continue;
                }
                let kept = node_ops(&generate(&p.with_choice(Choice::nic(a))).expect("@nic"));
                assert_eq!(kept, node_ops(&host), "{c} {a}@nic on {shape:?}");
                let dma = generate(&p.with_choice(Choice::nic_dma(a))).expect("@nic-dma");
                let (flags, pushes, pulls) = node_ops(&dma);
                assert_eq!(
                    (flags, pushes),
                    (0, 0),
                    "{c} {a}@nic-dma on {shape:?} keeps flags or pushes"
                );
                if handed_whole.contains(&(c, a)) {
                    assert_eq!(pulls, 0, "{c} {a}@nic-dma on {shape:?} keeps pulls");
                }
                moved += 1;
            }
        }
    }
    assert!(moved > 20, "{moved}");
}

/// On two rails, a chained put whose trigger's sets arrive on the other
/// rail is fed by a relay; NICs without the sibling path (a budget with no
/// `PEER_SET` FIFO) get no relays; a FIFO too small for the relays that may
/// fire together into one NIC is refused in words naming it.
#[test]
fn relays_feed_cross_rail_chains_within_the_sibling_fifo() {
    use railcoll_host::sched::offload;
    let shape = Shape::new(6, 1, 1, 2, Placement::Block).expect("shape");
    let p = Params::new(Collective::Allgather, Algorithm::Exchange, shape, 0, 8);
    let set = generate(&p).expect("exchange");
    let relays = |s: &railcoll_host::sched::ScheduleSet| {
        s.ranks
            .iter()
            .flat_map(|r| &r.steps)
            .filter(|st| matches!(st.op, Op::Relay { .. }))
            .count()
    };
    let with = offload::compile(&set, &Budget::default())
        .expect("compiles")
        .set;
    assert!(relays(&with) > 0, "two rails: some triggers cross rails");
    verify::verify(&with, &Budget::default()).expect("verifies");
    let no_path = Budget {
        peer_fifo: 0,
        ..Budget::default()
    };
    let without = offload::compile(&set, &no_path).expect("compiles").set;
    assert_eq!(relays(&without), 0);
    verify::verify(&without, &no_path).expect("verifies");
    let v = verify::verify(&with, &no_path).expect_err("no room for the relays");
    assert!(v.to_string().contains("sibling FIFO entries"), "{v}");
    // What a communicator on NICs without the path generates: its NICs'
    // FIFO is in the parameters, the set has no relays and fits them.
    let mut on_old_nics = p.with_choice(Choice::nic(Algorithm::Exchange));
    on_old_nics.budget.peer_fifo = 0;
    let set = generate(&on_old_nics).expect("exchange@nic");
    assert_eq!(relays(&set), 0);
    verify::verify(&set, &no_path).expect("fits NICs without siblings");
}

/// Two NICs that each wait for the other's chained put before starting
/// their own: the verifier names the cycle (ranks and steps), not just a
/// chain that never starts.
#[test]
fn a_cycle_of_chained_puts_is_named() {
    use railcoll_host::sched::{Buf, Region, ScheduleSet, Step};
    let shape = Shape::new(2, 1, 1, 1, Placement::Block).expect("shape");
    let p = Params::new(Collective::Allgather, Algorithm::Direct, shape, 0, 64)
        .with_choice(Choice::nic(Algorithm::Direct));
    // Rank r: copy its block into place, then chain a put of it to the
    // other rank, triggered by the other rank's chained put: a cycle.
    let ranks = (0..2u32)
        .map(|r| railcoll_host::sched::Schedule {
            rank: r,
            steps: vec![
                Step {
                    op: Op::Copy {
                        src: Region::one(Buf::Send, 0),
                        dst: Region::one(Buf::Recv, r),
                    },
                    after: Vec::new(),
                },
                Step {
                    op: Op::ChainPut {
                        trigger: 0,
                        count: 0,
                        rail: 0,
                        lane: railcoll_host::sched::Lane::Rail(0),
                        to: 1 - r,
                        src: Region::one(Buf::Recv, r),
                        dst: Region::one(Buf::Recv, r),
                        signal: Some(0),
                        feeds: Vec::new(),
                        done: Vec::new(),
                    },
                    after: Vec::new(),
                },
            ],
        })
        .collect();
    let set = ScheduleSet {
        params: p,
        scratch_blocks: 0,
        counters: 0,
        flags: 0,
        ranks,
    }
    .seal()
    .expect("seals");
    let v = verify::verify(&set, &Budget::default()).expect_err("cycle");
    let text = v.to_string();
    assert!(
        text.contains("a cycle of chained puts")
            && text.contains("rank 0 step 1")
            && text.contains("rank 1 step 1"),
        "{text}"
    );
}

/// A rank of a guarded set that sets another rank's counter (a put's
/// signal) before waiting for that rank's readiness: the counter is in the
/// pool of whatever call that rank is in, which may be an older one still
/// waiting on it (broadcasts and barriers were not guarded, and their
/// first puts completed an older gather's wait at its root: found by the
/// differential fuzzer).
fn counter_set_before_readiness(set: &railcoll_host::sched::ScheduleSet) -> Option<String> {
    let topology = set.params.shape.topology;
    for (me, schedule) in set.ranks.iter().enumerate() {
        let mut ready = std::collections::BTreeSet::new();
        for (i, step) in schedule.steps.iter().enumerate() {
            if let Op::AwaitReady { from } = step.op {
                ready.insert(from as usize);
            }
            let targets = match step.op.counters_set_on(me, &topology) {
                Ok(t) => t,
                Err(e) => return Some(format!("rank {me} step {i}: {e}")),
            };
            if let Some(t) = targets.iter().find(|t| !ready.contains(*t)) {
                return Some(format!(
                    "rank {me} step {i} sets a counter of rank {t} before its readiness"
                ));
            }
        }
    }
    None
}

/// Persistent sets (the readiness guard, host-driven and compiled onto the
/// NICs) verify on every shape, rule 10 included: no rank touches the
/// buffers of a rank that has not started, nor sets its counters.
#[test]
fn every_algorithm_persistent_verifies() {
    let mut checked = 0;
    for shape in shapes() {
        let n = shape.size();
        for c in Collective::ALL {
            for a in c.algorithms() {
                for choice in [Choice::host(a), Choice::nic(a), Choice::nic_dma(a)] {
                    let bytes = SIZES[checked % 7];
                    let root = if c.rooted() { checked % n } else { 0 };
                    checked += 1;
                    let mut p = Params::new(c, a, shape, root, bytes).with_choice(choice);
                    p.guarded = true;
                    let set = match generate(&p) {
                        Ok(set) => set,
                        Err(e) => {
                            assert!(refuses_clearly(&p), "{c} {choice} on {shape:?}: {e}");
                            continue;
                        }
                    };
                    if let Err(v) = verify::verify(&set, &Budget::default()) {
                        panic!(
                            "persistent {c} {choice} on {shape:?} root {root} block {bytes}: {v}"
                        );
                    }
                    if let Some(what) = counter_set_before_readiness(&set) {
                        panic!("persistent {c} {choice} on {shape:?} root {root}: {what}");
                    }
                }
            }
        }
    }
    assert!(checked > 4000, "{checked}");
}

/// A set started back to back without the guard is refused by rule 10 in
/// words (the ring's first put reaches a rank that may not have started),
/// and the guard is what makes it pass.
#[test]
fn an_unguarded_set_started_back_to_back_is_refused() {
    let shape = Shape::new(4, 1, 1, 1, Placement::Block).expect("shape");
    let p = Params::new(Collective::Allgather, Algorithm::Ring, shape, 0, 64);
    let mut set = generate(&p).expect("ring");
    set.params.guarded = true;
    let v = verify::verify(&set, &Budget::default()).expect_err("unguarded");
    assert!(
        v.to_string().contains("before rank") && v.to_string().contains("has started"),
        "{v}"
    );
    let guarded = railcoll_host::sched::persist::guard(&set).expect("guard");
    verify::verify(&guarded, &Budget::default()).expect("guarded");
    // One readiness notice per writer: the ring has one writer per rank.
    let notices = |s: &railcoll_host::sched::ScheduleSet| {
        s.ranks.iter().map(|r| r.steps.len()).sum::<usize>()
    };
    assert_eq!(
        notices(&guarded),
        notices(&set) + 2 * 4,
        "a notice and a wait per rank"
    );
}

/// A rank whose buffers a node peer still reads after it returned is
/// refused by rule 9 (the caller would overwrite what the peer copies).
#[test]
fn a_rank_returning_while_a_peer_reads_its_buffer_is_refused() {
    let shape = Shape::new(1, 2, 1, 1, Placement::Block).expect("shape");
    let p = Params::new(Collective::Allgather, Algorithm::Direct, shape, 0, 64);
    let mut set = generate(&p).expect("direct");
    // Rank 1 pulls rank 0's send block as its very last step, after
    // everything rank 0 waits for.
    set.ranks[1].steps.push(railcoll_host::sched::Step {
        op: Op::PeerCopy {
            peer: 0,
            dir: railcoll_host::sched::PeerDir::Pull,
            local: railcoll_host::sched::Region::new(railcoll_host::sched::Buf::Scratch, 0, 0),
            remote: railcoll_host::sched::Region::one(railcoll_host::sched::Buf::Send, 0),
        },
        after: Vec::new(),
    });
    let v = verify::verify(&set, &Budget::default()).expect_err("reads after return");
    assert!(
        v.to_string().contains("may return while rank 1")
            && v.to_string().contains("reads its send"),
        "{v}"
    );
}

/// A chained put whose trigger asks for one set more than ever arrives
/// is refused in words naming its rank, rail, step and counts (the NIC
/// would hold it forever and the collective would never finish).
#[test]
fn a_chained_put_that_can_never_start_is_named() {
    let shape = Shape::new(4, 1, 1, 1, Placement::Block).expect("shape");
    let p = Params::new(Collective::Allgather, Algorithm::Ring, shape, 0, 64)
        .with_choice(Choice::nic(Algorithm::Ring));
    let mut set = generate(&p).expect("ring@nic");
    verify::verify(&set, &Budget::default()).expect("as compiled");
    let (step, count) = set.ranks[2]
        .steps
        .iter_mut()
        .enumerate()
        .find_map(|(i, s)| match &mut s.op {
            Op::ChainPut { count, .. } => Some((i, count)),
            _ => None,
        })
        .expect("rank 2 chains a forward");
    *count += 1;
    let v = verify::verify(&set, &Budget::default()).expect_err("stuck");
    assert_eq!(
        v.to_string(),
        format!(
            "rank 2, step {step}: the chained put on rail 0 can never start: its trigger c0 needs 2 sets on that rail, 1 arrive"
        )
    );
}

/// Each NIC resource a schedule can run out of is refused before anything
/// runs, in words naming the resource, the numbers and the place: the
/// native gather's chained tree (ranks 2, 4 and 6 each arm one chained
/// put) against budgets one short.
#[test]
fn over_budget_sets_are_refused_naming_the_resource_and_the_place() {
    let native = |placement| {
        let shape = Shape::new(4, 2, 1, 1, placement).expect("shape");
        generate(&Params::new(
            Collective::Gather,
            Algorithm::Native,
            shape,
            0,
            3000,
        ))
        .expect("set")
    };
    let block = native(Placement::Block);
    verify::verify(&block, &Budget::default()).expect("fits the default budget");
    let cases = [
        (
            Budget {
                counters: 0,
                ..Budget::default()
            },
            Placement::Block,
            "needs 1 destination counters, the budget is 0",
        ),
        (
            Budget {
                chain_blocks: 0,
                ..Budget::default()
            },
            Placement::Block,
            "needs 1 chain blocks (chained puts armed at once) at rank 2, step 1, the budget is 0",
        ),
        // Cyclic: ranks 2 and 6 share node 2, so its NIC may have to hold
        // both chained puts at once.
        (
            Budget {
                chain_queue: 1,
                ..Budget::default()
            },
            Placement::Cyclic,
            "needs 2 chain queue entries (chained puts of the node's ranks that may fire together) at node 2, rail 0, the budget is 1",
        ),
    ];
    for (budget, placement, words) in cases {
        let set = native(placement);
        let v = verify::verify(&set, &budget).expect_err("over budget");
        assert_eq!(v.to_string(), words);
        let o = verify::fits(&set, &budget).expect_err("the executor's check agrees");
        assert_eq!(o.to_string(), words);
    }
}

/// A barrier one round short (the exchange at distance 2 dropped on every
/// rank of 4) deadlocks nowhere and leaves no word unread, but rank 0
/// could leave before rank 2 entered: the verifier says so. The full
/// schedule passes.
#[test]
fn a_barrier_one_round_short_is_rejected() {
    let shape = Shape::new(4, 1, 1, 1, Placement::Block).expect("shape");
    let mut set = generate(&Params::new(
        Collective::Barrier,
        Algorithm::Rdma,
        shape,
        0,
        0,
    ))
    .expect("set");
    verify::verify(&set, &Budget::default()).expect("the full barrier synchronises");
    for (rank, schedule) in set.ranks.iter_mut().enumerate() {
        let partner = (rank ^ 2) as u32;
        schedule.steps.retain(|s| match s.op {
            Op::WordPut { to, .. } => to != partner,
            Op::WordWait { slot, .. } => slot != partner,
            _ => true,
        });
    }
    let v = verify::verify(&set, &Budget::default()).expect_err("not a barrier");
    assert!(
        v.to_string().contains("may leave the barrier before rank"),
        "{v}"
    );
}

#[test]
fn a_race_between_a_put_and_a_copy_is_rejected() {
    let mut set = allgather_set(Algorithm::Bruck);
    // Move rank 0's first wait to the end: its final shift reads scratch
    // that peers are still writing.
    first_wait_last(&mut set.ranks[0].steps);
    let v = verify::verify(&set, &Budget::default()).expect_err("race");
    assert!(v.to_string().contains("concurrently"), "{v}");
}

/// A broadcast promises that it writes no rank's buffer before that rank
/// has entered (it runs back to back on rewritten buffers, no barrier):
/// a root that sends before its children said they are ready (its wait
/// for them moved to the end, as the offload compiler once did for all
/// but its first child) is refused in words.
#[test]
fn a_broadcast_sending_before_its_children_are_ready_is_refused() {
    let shape = Shape::new(8, 1, 1, 1, Placement::Block).expect("shape");
    let p = Params::new(Collective::Bcast, Algorithm::Binomial, shape, 0, 64);
    let mut set = generate(&p).expect("binomial");
    verify::verify(&set, &Budget::default()).expect("as generated");
    first_wait_last(&mut set.ranks[0].steps);
    let v = verify::verify(&set, &Budget::default()).expect_err("sends too early");
    assert!(v.to_string().contains("before rank"), "{v}");
}

/// Move a schedule's first wait for a counter to its end.
fn first_wait_last(steps: &mut Vec<railcoll_host::sched::Step>) {
    let wait = steps
        .iter()
        .position(|s| matches!(s.op, Op::Wait { .. }))
        .expect("a wait");
    let w = steps.remove(wait);
    steps.push(w);
}

/// Under Hockney, every algorithm whose paper formula holds for N
/// reproduces it exactly (to rounding), for several N, k and sizes.
#[test]
fn hockney_replay_equals_the_papers_formulas() {
    let h = Hockney {
        t_s: 1.7,
        tau: 0.0013,
    };
    let mut compared = 0;
    for rails in 1..=3 {
        for n in [2, 3, 4, 8, 9, 16, 27] {
            let shape = Shape::new(n, 1, 1, rails, Placement::Block).expect("shape");
            for c in Collective::ALL {
                for a in c.algorithms() {
                    for bytes in [0, 8, 1000, 4096, 65536] {
                        let p = Params::new(c, a, shape, 0, bytes);
                        let Some(f) = railcoll_host::sched::catalogue::formula(&p, &h) else {
                            continue;
                        };
                        if !f.exact {
                            continue;
                        }
                        let Ok(set) = generate(&p) else { continue };
                        let t = cost::hockney(&set, &h).expect("replay");
                        let tol = 1e-9 * f.value.max(1.0);
                        assert!(
                            (t - f.value).abs() <= tol,
                            "{c} {a} n={n} k={rails} m={bytes}: replay {t} vs {} {}",
                            f.label,
                            f.value
                        );
                        compared += 1;
                    }
                }
            }
        }
    }
    assert!(compared > 300, "{compared}");
}

/// Combined triggers: recursive doubling's later rounds send what came in
/// every earlier round, so on the NICs each round's put waits for a join
/// fed by the previous round's chained put and by the round's own
/// arrivals; every round's put is chained. NICs whose COPY injects one
/// block get no joins (and still verify); a budget with fewer feeds per
/// chained put than the set uses is refused in words naming the resource,
/// the rank and the step.
#[test]
fn joins_chain_every_round_and_fit_the_feed_budget() {
    use railcoll_host::sched::offload;
    let shape = Shape::new(16, 1, 1, 2, Placement::Block).expect("shape");
    let p = Params::new(
        Collective::Allgather,
        Algorithm::RecursiveDoubling,
        shape,
        0,
        8,
    );
    let set = generate(&p).expect("recursive doubling");
    let compiled = offload::compile(&set, &Budget::default()).expect("compiles");
    verify::verify(&compiled.set, &Budget::default()).expect("verifies");
    for s in &compiled.set.ranks {
        let chained = s
            .steps
            .iter()
            .filter(|st| matches!(st.op, Op::ChainPut { .. }))
            .count();
        let host_puts = s
            .steps
            .iter()
            .filter(|st| matches!(st.op, Op::Put { .. }))
            .count();
        // Four rounds: the first from the host, three on the NICs.
        assert_eq!((host_puts, chained), (1, 3), "rank {}", s.rank);
    }
    let most_feeds = compiled
        .set
        .ranks
        .iter()
        .flat_map(|s| &s.steps)
        .filter_map(|st| match &st.op {
            Op::ChainPut { feeds, .. } => Some(feeds.len() as u32),
            _ => None,
        })
        .max()
        .expect("chains");
    assert!(most_feeds >= 1);
    let fewer = Budget {
        feeds: most_feeds - 1,
        ..Budget::default()
    };
    let v = verify::verify(&compiled.set, &fewer).expect_err("too many feeds");
    let words = v.to_string();
    assert!(words.contains("feeds of one chained put"), "{words}");
    assert!(
        words.contains("rank ") && words.contains("step "),
        "{words}"
    );
    // One-block COPY: no joins, no relays, fewer puts on the NICs.
    let old = Budget {
        feeds: 0,
        peer_fifo: 0,
        ..Budget::default()
    };
    let plain = offload::compile(&set, &old).expect("compiles").set;
    verify::verify(&plain, &old).expect("verifies on one-block COPY NICs");
    assert!(
        plain
            .ranks
            .iter()
            .flat_map(|s| &s.steps)
            .all(|st| match &st.op {
                Op::ChainPut { feeds, .. } => feeds.is_empty(),
                Op::Relay { .. } => false,
                _ => true,
            })
    );
    assert!(offload::moved(&plain).chained < compiled.moved.chained);
}

/// Found by the `schedules` fuzz target: the native all-gather with the
/// NICs doing the copies, on 4 nodes x 7 ranks, compiled to more chain
/// queue entries than a rank's share, which a debug assertion caught (a
/// panic in a test build). It is refused with a typed error instead.
#[test]
fn a_compiled_set_over_a_ranks_chain_share_is_refused_not_a_panic() {
    let shape = Shape::new(4, 7, 5, 3, Placement::Block).expect("shape");
    let p = Params::new(Collective::Allgather, Algorithm::Native, shape, 0, 64)
        .with_choice(Choice::nic_dma(Algorithm::Native));
    match generate(&p) {
        Err(railcoll_host::Error::OverBudget {
            resource,
            needed,
            available,
            ..
        }) => {
            assert!(resource.contains("chain"), "{resource}");
            assert!(needed > available);
        }
        other => panic!(
            "expected a typed refusal, got {:?}",
            other.map(|s| s.ranks.len())
        ),
    }
}

/// Found by the `schedules` fuzz target: the native all-gather's generator
/// used the root a caller passed (all-gather has none) and, with one
/// other than 0, wrote rank 0's own block nowhere. A collective without a
/// root now ignores it, whether given to `Params::new` or set afterwards.
#[test]
fn a_collective_without_a_root_ignores_one() {
    let shape = Shape::new(12, 3, 2, 4, Placement::Block).expect("shape");
    for c in [
        Collective::Allgather,
        Collective::Alltoall,
        Collective::Barrier,
    ] {
        for a in c.algorithms() {
            for root in [1, 2, 35] {
                let mut p = Params::new(c, a, shape, root, 4096);
                assert_eq!(p.root, 0);
                p.root = root;
                if let Ok(set) = generate(&p)
                    && let Err(v) = verify::verify(&set, &Budget::default())
                {
                    panic!("{c} {a} with root {root}: {v}");
                }
            }
        }
    }
}

/// A set whose happens-before closure is beyond a bound is still proved
/// by every other rule under `Ordering::IfWithin` (the report says the
/// ordering rules did not run): a wrong block is still rejected, a race
/// is not looked for; `verify` itself never skips them. Bounds at 0 bytes
/// stand in for sets too large for the real one (`HB_LIMIT_BYTES`).
#[test]
fn beyond_the_closure_bound_every_rule_but_the_ordering_ones_still_holds() {
    use verify::Ordering;
    let good = allgather_set(Algorithm::Bruck);
    let full = verify::verify(&good, &Budget::default()).expect("proved");
    assert!(full.ordering_checked);
    let within = verify::verify_with(&good, &Budget::default(), Ordering::IfWithin(1 << 30))
        .expect("proved");
    assert!(within.ordering_checked, "a small set's closure fits");
    let outputs_only =
        verify::verify_with(&good, &Budget::default(), Ordering::IfWithin(0)).expect("proved");
    assert!(!outputs_only.ordering_checked);
    assert_eq!(
        (outputs_only.steps, outputs_only.puts),
        (full.steps, full.puts)
    );

    let mut wrong = good.clone();
    shift_last_copy(&mut wrong);
    let v = verify::verify_with(&wrong, &Budget::default(), Ordering::IfWithin(0))
        .expect_err("a wrong block is an output rule");
    assert!(v.to_string().contains("rank 4"), "{v}");

    let mut racy = good.clone();
    first_wait_last(&mut racy.ranks[0].steps);
    verify::verify(&racy, &Budget::default()).expect_err("a race");
    let unordered = verify::verify_with(&racy, &Budget::default(), Ordering::IfWithin(0))
        .expect("the race is an ordering rule, not checked beyond the bound");
    assert!(!unordered.ordering_checked);
}
