//! Exhaustive interleaving checks (loom) of the node protocols, the RDMA
//! barrier's barrier-number check, and the host-NIC command ring and
//! completion words. The shared-memory protocols run the real protocol
//! code of `railcoll_host::shm`, and the RDMA barrier the real schedule
//! the generator writes for the `rdma` barrier (its word puts and word
//! waits).
//!
//! What the models share with the system is what decides correctness:
//! - every flag, word and register is an atomic with the orderings the
//!   code uses (Release stores, Acquire loads; ring contents Relaxed behind
//!   a Release fence), with no lock around them, so a missing ordering is
//!   a stale read loom finds;
//! - a waiter checks, then parks; a waker stores, then unparks the one
//!   thread it names, through a per-rank slot guarded by a mutex (the
//!   launcher's `env::Waker`). The real `ParkingWait` also re-polls every
//!   2 ms, which turns a lost wake-up into latency; the models park with
//!   no timeout, so a lost wake-up is a deadlock loom reports.
//!
//! Two planted bugs show that the models find what they are for: the
//! shared-memory broadcast's old lost wake-up (a non-root woke only the
//! round's root) and a command ring whose tail is published without
//! ordering.

use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};
use railcoll_host::sched::{Op, Params, Shape, generate};
use railcoll_host::shm::{self, FlagMap, Flags, reached};
use railcoll_host::{Algorithm, Collective, Placement};
use railcoll_tests::loom_models::{
    LoomFlags, Parking, RankSync, broadcast_rounds, model, ring_and_completion, round_of,
    run_threads,
};

/// Run `loom_planted` on the model with bug `which` planted: it must
/// fail. Returns what it printed.
fn finds_the_bug(which: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_loom_planted"))
        .arg(which)
        .output()
        .expect("loom_planted runs");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "the model did not find the planted bug '{which}': {stderr}"
    );
    stderr
}

/// Node barriers: nobody leaves barrier k before everybody entered it, and
/// back-to-back barriers never need a flag reset. Three back-to-back
/// barriers among 2 ranks (a rank one barrier ahead).
#[test]
fn node_barrier_never_releases_early() {
    node_barrier_model(2, 3);
}

fn node_barrier_model(locals: usize, rounds: u64) {
    model(move || {
        let map = FlagMap::new(locals);
        let flags = LoomFlags::new(map.count());
        let parking = Parking::new(locals);
        let entered = Arc::new((0..locals).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        run_threads(
            locals,
            &parking,
            (flags.clone(), entered.clone(), parking.clone()),
            move |me, (flags, entered, parking)| {
                let sync = RankSync {
                    parking,
                    only_wakes: None,
                };
                for epoch in 1..=rounds {
                    entered[me].store(epoch, Ordering::SeqCst);
                    let round = round_of(&flags, &sync, map, me, 0, epoch);
                    shm::barrier(&round, &mut || Ok(())).expect("barrier");
                    for e in entered.iter() {
                        assert!(
                            e.load(Ordering::SeqCst) >= epoch,
                            "left barrier {epoch} early"
                        );
                    }
                }
            },
        );
    });
}

/// Broadcast rounds with changing roots: every reader sees the round's
/// value, and a root never overwrites the buffer before every reader
/// drained the previous round (the stale-flag bug this model was written
/// to catch would deadlock here).
#[test]
fn broadcast_rounds_with_changing_roots_deliver_each_value() {
    model(|| broadcast_rounds(2, &[(1, 0), (2, 1), (3, 1)], false));
}

/// Two rounds among 3 ranks, the root moving to a rank that was not the
/// first round's root (where a wake-up can go to the wrong rank).
#[test]
fn broadcast_rounds_among_three_wake_the_next_root() {
    model(|| broadcast_rounds(3, &[(1, 0), (2, 1)], false));
}

/// The lost wake-up the shared-memory broadcast had (found by modeled
/// mode, not by the old model, whose every store woke every waiter):
/// a non-root woke only the round's root, but the next round's root
/// waits for its done flag. Planted back, this model finds it as a
/// deadlock.
#[test]
fn the_broadcasts_old_lost_wake_up_is_found() {
    let message = finds_the_bug("broadcast-wake");
    assert!(message.contains("deadlock"), "{message}");
}

/// Gather rounds with changing roots: the root sees every slot of the
/// current round, never a stale or a future one.
#[test]
fn gather_rounds_collect_exactly_the_current_round() {
    model(|| {
        let locals = 2;
        let map = FlagMap::new(locals);
        let flags = LoomFlags::new(map.count());
        let parking = Parking::new(locals);
        let slots = Arc::new((0..locals).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        run_threads(
            locals,
            &parking,
            (flags.clone(), slots.clone(), parking.clone()),
            move |me, (flags, slots, parking)| {
                let sync = RankSync {
                    parking,
                    only_wakes: None,
                };
                for (epoch, root) in [(1u64, 0usize), (2, 1), (3, 0)] {
                    let round = round_of(&flags, &sync, map, me, root, epoch);
                    let mut fill = || {
                        if me != root {
                            slots[me].store(epoch * 10 + me as u64, Ordering::Relaxed);
                        }
                        Ok(())
                    };
                    let mut collect = || {
                        for (r, s) in slots.iter().enumerate() {
                            if r != root {
                                assert_eq!(s.load(Ordering::Relaxed), epoch * 10 + r as u64);
                            }
                        }
                        Ok(())
                    };
                    shm::gather_round(&round, &mut fill, &mut collect).expect("gather");
                }
            },
        );
    });
}

/// The RDMA barrier's schedule over words written by partners (an RDMA
/// write modelled as a store into the partner's word): with the `>=` check
/// nobody leaves early and nobody deadlocks, even when a fast member has
/// already written the next barrier's number. Three back-to-back barriers
/// between 2 members.
#[test]
fn rdma_barrier_numbers_tolerate_a_partner_one_barrier_ahead() {
    rdma_barrier_model(2, 3);
}

fn rdma_barrier_model(n: usize, rounds: u64) {
    let shape = Shape::new(n, 1, 1, 1, Placement::Block).expect("shape");
    let set = std::sync::Arc::new(
        generate(&Params::new(
            Collective::Barrier,
            Algorithm::Rdma,
            shape,
            0,
            0,
        ))
        .expect("the rdma barrier's schedule"),
    );
    model(move || {
        // words[target * n + writer]
        let words = LoomFlags::new(n * n);
        let parking = Parking::new(n);
        let entered = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        let set = std::sync::Arc::clone(&set);
        run_threads(
            n,
            &parking,
            (words.clone(), entered.clone(), parking.clone()),
            move |id, (words, entered, parking)| {
                for number in 1..=rounds {
                    entered[id].store(number, Ordering::SeqCst);
                    for step in &set.ranks[id].steps {
                        match step.op {
                            Op::BarrierNumber(_) => {}
                            // The put lands, then its wake flag wakes the
                            // target (RUN_DMA flag bit 1).
                            Op::WordPut { to, slot, .. } => {
                                words.store(to as usize * n + slot as usize, number);
                                parking.wake(to as usize);
                            }
                            Op::WordWait { slot, .. } => parking
                                .wait(&mut || reached(words.load(id * n + slot as usize), number)),
                            ref other => panic!("the rdma barrier has no '{other}' step"),
                        }
                    }
                    for e in entered.iter() {
                        assert!(
                            e.load(Ordering::SeqCst) >= number,
                            "left barrier {number} early"
                        );
                    }
                }
            },
        );
    });
}

/// One node barrier among 3 ranks: the master waits for several arrivals
/// (back-to-back epochs are covered by the two-rank model).
#[test]
fn node_barrier_of_three() {
    node_barrier_model(3, 1);
}

/// One RDMA barrier among 3 members: the non-power-of-two scheme (back to
/// back numbering is covered by the two-member model).
#[test]
fn rdma_barrier_of_three() {
    rdma_barrier_model(3, 1);
}

/// Commands reach the NIC whole and in order, a completion word is never
/// seen before its data, the host's waits for ring room and completion
/// are always woken, and nothing deadlocks.
#[test]
fn the_command_ring_and_completion_words_keep_their_order() {
    model(|| ring_and_completion(false));
}

/// A tail published without ordering: the model finds the NIC reading the
/// block before it was written.
#[test]
fn a_ring_tail_published_without_ordering_is_found() {
    let message = finds_the_bug("ring-tail");
    assert!(message.contains("stale command block"), "{message}");
}
