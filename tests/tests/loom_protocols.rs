//! Exhaustive interleaving checks (loom) of the node protocols and of the
//! RDMA barrier's barrier-number check. The code under test is the real
//! protocol code of `railcoll_host::shm` and the real schedule the
//! generator writes for the `rdma` barrier (its word puts and word waits),
//! run over loom's atomics.

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use railcoll_host::Error;
use railcoll_host::sched::{Op, Params, Shape, generate};
use railcoll_host::shm::{self, FlagMap, Flags, Round, reached};
use railcoll_host::{Algorithm, Collective, Placement};

/// Flags whose every store also signals a monitor, so that waiters block
/// instead of spinning (spinning threads make loom's search explode). This
/// models the real system: the flag store is a Release atomic, and the
/// waker's unpark token (plus the timed re-poll) guarantees the waiter
/// re-checks after every store it may depend on.
struct LoomFlags {
    words: Vec<AtomicU64>,
    monitor: Mutex<()>,
    changed: Condvar,
}

impl LoomFlags {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            words: (0..n).map(|_| AtomicU64::new(0)).collect(),
            monitor: Mutex::new(()),
            changed: Condvar::new(),
        })
    }

    fn wait(&self, ready: &mut dyn FnMut() -> bool) {
        let mut guard = self.monitor.lock().expect("monitor");
        while !ready() {
            guard = self.changed.wait(guard).expect("monitor");
        }
    }
}

impl Flags for LoomFlags {
    fn load(&self, i: usize) -> u64 {
        self.words[i].load(Ordering::Acquire)
    }
    fn store(&self, i: usize, v: u64) {
        let _guard = self.monitor.lock().expect("monitor");
        self.words[i].store(v, Ordering::Release);
        self.changed.notify_all();
    }
}

/// Waiting on the flags' monitor.
struct Monitor<'a>(&'a LoomFlags);

impl shm::Sync for Monitor<'_> {
    fn wait(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), Error> {
        self.0.wait(ready);
        Ok(())
    }
    fn wake(&self, _: usize) {}
}

/// Run `body(i, shared)` on `n` loom threads, each with its own clone of
/// `shared`, and join them all.
fn run_threads<T: Clone + Send + 'static>(
    n: usize,
    shared: T,
    body: impl Fn(usize, T) + Clone + Send + 'static,
) {
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (shared, body) = (shared.clone(), body.clone());
            thread::spawn(move || body(i, shared))
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    // Exhaustive up to 2 involuntary switches per execution (where most
    // concurrency bugs live), which keeps the run short.
    b.preemption_bound = Some(2);
    b.max_branches = 50_000;
    b.check(f);
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
        let entered = Arc::new((0..locals).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        run_threads(
            locals,
            (flags.clone(), entered.clone()),
            move |me, (flags, entered)| {
                for epoch in 1..=rounds {
                    entered[me].store(epoch, Ordering::SeqCst);
                    let round = Round {
                        flags: &*flags,
                        sync: &Monitor(&flags),
                        map,
                        me,
                        root: 0,
                        epoch,
                    };
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
    model(|| {
        let locals = 2;
        let map = FlagMap::new(locals);
        let flags = LoomFlags::new(map.count());
        let buffer = Arc::new(AtomicU64::new(0));
        run_threads(
            locals,
            (flags.clone(), buffer.clone()),
            move |me, (flags, buffer)| {
                for (epoch, root) in [(1u64, 0usize), (2, 1), (3, 1)] {
                    let round = Round {
                        flags: &*flags,
                        sync: &Monitor(&flags),
                        map,
                        me,
                        root,
                        epoch,
                    };
                    let value = epoch * 100;
                    let mut fill = || {
                        buffer.store(value, Ordering::Relaxed);
                        Ok(())
                    };
                    let mut drain = || {
                        assert_eq!(buffer.load(Ordering::Relaxed), value, "round {epoch}");
                        Ok(())
                    };
                    shm::broadcast_round(&round, &mut fill, &mut drain).expect("bcast");
                }
            },
        );
    });
}

/// Gather rounds with changing roots: the root sees every slot of the
/// current round, never a stale or a future one.
#[test]
fn gather_rounds_collect_exactly_the_current_round() {
    model(|| {
        let locals = 2;
        let map = FlagMap::new(locals);
        let flags = LoomFlags::new(map.count());
        let slots = Arc::new((0..locals).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        run_threads(
            locals,
            (flags.clone(), slots.clone()),
            move |me, (flags, slots)| {
                for (epoch, root) in [(1u64, 0usize), (2, 1), (3, 0)] {
                    let round = Round {
                        flags: &*flags,
                        sync: &Monitor(&flags),
                        map,
                        me,
                        root,
                        epoch,
                    };
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
        let entered = Arc::new((0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>());
        let set = std::sync::Arc::clone(&set);
        run_threads(
            n,
            (words.clone(), entered.clone()),
            move |id, (words, entered)| {
                for number in 1..=rounds {
                    entered[id].store(number, Ordering::SeqCst);
                    for step in &set.ranks[id].steps {
                        match step.op {
                            Op::BarrierNumber(_) => {}
                            Op::WordPut { to, slot, .. } => {
                                words.store(to as usize * n + slot as usize, number)
                            }
                            Op::WordWait { slot, .. } => words
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
