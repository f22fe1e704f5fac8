//! Schedules for persistent collectives started back to back
//! [MPI4 §6.13]: the readiness guard.
//!
//! A one-shot collective lives by the buffer contract (a call may write
//! another rank's buffers from the moment any rank enters it, so calls
//! whose buffers overlap are separated by a barrier). A persistent
//! collective is started again and again on the same buffers, with the
//! caller reading the results and writing new data between starts, and no
//! barrier: a rank one start ahead must not touch the buffers of a rank
//! that has not started yet. [`guard`] makes a set safe for that:
//!
//! - every rank, first thing, tells each rank that touches its buffers
//!   (a put into them, a node peer's copy from or into them, a chained
//!   put armed by it) that it has started: a zero-length put setting the
//!   toucher's readiness counter across nodes, a raise of its readiness
//!   flag on the node;
//! - every rank waits for all of those notices before its first step
//!   that touches another rank's buffers.
//!
//! The other half, that nobody touches a rank's buffers once it has
//! returned, every set already has: the verifier proves it for every set
//! (its rule 9), so the caller may read and rewrite them as soon as `wait`
//! returns. Counters and scratch alternate between two sets on
//! consecutive starts, and a guarded rank can be at most one start ahead
//! of any rank whose buffers it touches, so they never mix.
//!
//! The guard runs last, on the set as it will execute (after the offload
//! compiler): a chained put's access starts when its NIC fires it, which
//! is after the host armed it, which is after the readiness waits. Guarding
//! first and compiling after would be wrong: a put chained on a later
//! counter no longer waits for the readiness the host waited for.

use std::collections::BTreeSet;

use super::budget::SCHED_FLAGS;
use super::*;

/// `set` with readiness notices and waits (see the module doc). A set in
/// which no rank touches another's buffers (a barrier) is returned as is.
pub fn guard(set: &ScheduleSet) -> Result<ScheduleSet, Error> {
    let replay = sim::replay(set, &sim::Untimed);
    if let Some(f) = replay.faults.first() {
        return Err(Error::Config(format!(
            "cannot guard a set that does not replay: rank {}, step {}: {}",
            f.rank, f.step, f.what
        )));
    }
    let n = set.ranks.len();
    // For each rank: the ranks whose buffers it touches, and its first
    // step that does.
    let mut touched: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    let mut first_touch: Vec<Option<u32>> = vec![None; n];
    for a in replay.accesses.iter().filter(|a| a.mem.rank != a.rank) {
        let w = a.rank as usize;
        touched[w].insert(a.mem.rank as usize);
        first_touch[w] = Some(first_touch[w].map_or(a.step, |s| s.min(a.step)));
    }
    if touched.iter().all(BTreeSet::is_empty) {
        return Ok(set.clone());
    }
    let counter: Counter = set.counters;
    let flag: Flag = set.flags;
    if usize::from(flag) >= SCHED_FLAGS {
        return Err(Error::Config(format!(
            "a persistent {} {} needs one more shm flag than the {SCHED_FLAGS} there are",
            set.params.collective,
            set.params.algorithm.name()
        )));
    }
    let topo = set.params.shape.topology;
    let node_of = |r: usize| topo.locate(r).map(|(node, _)| node);
    let mut guarded = set.clone();
    for (r, schedule) in guarded.ranks.iter_mut().enumerate() {
        let mut notices = Vec::new();
        for w in (0..n).filter(|&w| touched[w].contains(&r)) {
            let op = if node_of(w)? == node_of(r)? {
                Op::Signal {
                    to: w as Rank,
                    flag,
                }
            } else {
                let nothing = Region::new(Buf::Recv, 0, 0);
                Op::Put {
                    to: w as Rank,
                    src: nothing,
                    dst: nothing,
                    lane: Lane::Rail(0),
                    signal: Some(counter),
                }
            };
            notices.push(op);
        }
        let mut waits = Vec::new();
        let (mut peers, mut remote) = (false, false);
        for &t in &touched[r] {
            if node_of(t)? == node_of(r)? {
                peers = true;
            } else {
                remote = true;
            }
        }
        if remote {
            waits.push(Op::Wait {
                counter,
                arrivals: [0; MAX_RAILS],
            });
        }
        if peers {
            waits.push(Op::WaitFlag { flag, count: 0 });
        }
        let at = first_touch[r].unwrap_or(0) as usize;
        schedule.steps = insert(&schedule.steps, notices, at, waits);
    }
    guarded.seal()
}

/// `steps` with `front` before them all and `before` just before step
/// `at`, the `after` lists renumbered.
fn insert(steps: &[Step], front: Vec<Op>, at: usize, before: Vec<Op>) -> Vec<Step> {
    let (f, b) = (front.len() as u32, before.len() as u32);
    let renumber = |j: u32| j + f + if j as usize >= at { b } else { 0 };
    let plain = |op| Step {
        op,
        after: Vec::new(),
    };
    let mut out: Vec<Step> = front.into_iter().map(plain).collect();
    let mut before = Some(before);
    for (i, step) in steps.iter().enumerate() {
        if i == at
            && let Some(ops) = before.take()
        {
            out.extend(ops.into_iter().map(plain));
        }
        out.push(Step {
            op: step.op.clone(),
            after: step.after.iter().map(|&j| renumber(j)).collect(),
        });
    }
    if let Some(ops) = before {
        out.extend(ops.into_iter().map(plain));
    }
    out
}
