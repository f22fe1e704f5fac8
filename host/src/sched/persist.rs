//! The readiness guard: schedules that may run back to back on the same
//! buffers with no barrier between them (the MPI buffer contract, and
//! every persistent collective [MPI4 §6.13]).
//!
//! Under the SHMEM-style contract a call may write another rank's buffers
//! from the moment any rank enters it, so calls whose buffers overlap are
//! separated by a barrier. Under the MPI contract (the default,
//! [`crate::config::BufferContract`]) a rank's buffers are written only
//! after it has entered the call, so a rank one call ahead never touches
//! the buffers of a rank still reading the last call's results. [`guard`]
//! makes a set keep that promise:
//!
//! - on entering the call, every rank takes the call's number (the
//!   communicator counts guarded calls; every rank runs the same calls in
//!   the same order, so the numbers agree) and writes it to its own
//!   `entered` word;
//! - first thing, it tells each rank that touches its buffers (a put into
//!   them, a node peer's copy from or into them, a chained put armed by
//!   it) that it has entered: [`Op::Ready`], an RDMA write of the number
//!   into its slot of the toucher's readiness words across nodes, a
//!   wake-up on the node (the peer reads the number in this rank's
//!   memory);
//! - before its first step that touches another rank's buffers, or sets
//!   one of its counters (a put's signal, with or without bytes), it
//!   waits, [`Op::AwaitReady`], until each rank it touches has a number
//!   that reaches this call's. A counter is in the pool of the call its
//!   rank is in, which may still be an older one.
//!
//! Numbers only grow and a wait compares with `>=`, so nothing is counted
//! or reset: a notice can never be taken for another call's, whatever
//! collectives are mixed, and a rank already in a later call has entered
//! this one. The other half, that nobody touches a rank's buffers once it
//! has returned, every set already has: the verifier proves it for every
//! set (its rule 9), so the caller may read and rewrite them as soon as
//! the call returns.
//!
//! Every set is guarded, broadcasts and barriers too: a broadcast never
//! writes a rank that has not entered (the verifier's rule 10 holds for
//! every one), but its puts set counters, as a counted barrier's do (a
//! set that touches nothing, a host barrier on numbered words, is left as
//! it is). The guard runs last, on the set as it will execute
//! (after the offload compiler): a chained put's access starts when its
//! NIC fires it, which is after the host armed it, which is after the
//! readiness waits. Guarding first and compiling after would be wrong: a
//! put chained on a later counter no longer waits for the readiness the
//! host waited for.

use std::collections::BTreeSet;

use super::*;

/// `set` with readiness notices and waits (see the module doc). A set in
/// which no rank touches another's buffers is returned as is.
pub fn guard(set: &ScheduleSet) -> Result<ScheduleSet, Error> {
    let replay = sim::replay(set, &sim::Untimed);
    if let Some(f) = replay.faults.first() {
        return Err(Error::BadSchedule(format!(
            "cannot guard a set that does not replay: rank {}, step {}: {}",
            f.rank, f.step, f.what
        )));
    }
    let n = set.ranks.len();
    // For each rank: the ranks whose buffers it touches, and its first
    // step that does.
    let mut touched: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
    let mut first_touch: Vec<Option<u32>> = vec![None; n];
    let mut touch = |w: usize, t: usize, step: u32| {
        touched[w].insert(t);
        first_touch[w] = Some(first_touch[w].map_or(step, |s| s.min(step)));
    };
    for a in replay.accesses.iter().filter(|a| a.mem.rank != a.rank) {
        touch(a.rank as usize, a.mem.rank as usize, a.step);
    }
    // A put that sets another rank's counter touches that rank too, even
    // with no byte: the counter is in the pool of the call the rank is in,
    // which may still be an older one (a root still waiting in a gather
    // while the others, done with it, went on to a later call on the same
    // pool: their sets completed its wait, its data still missing; found by
    // the differential fuzzer).
    let topo = set.params.shape.topology;
    for (w, schedule) in set.ranks.iter().enumerate() {
        for (i, step) in schedule.steps.iter().enumerate() {
            for t in step.op.counters_set_on(w, &topo)? {
                touch(w, t, i as u32);
            }
        }
    }
    if touched.iter().all(BTreeSet::is_empty) {
        return Ok(set.clone());
    }
    let mut guarded = set.clone();
    for (r, schedule) in guarded.ranks.iter_mut().enumerate() {
        let notices = (0..n)
            .filter(|&w| touched[w].contains(&r))
            .map(|w| Op::Ready { to: w as Rank })
            .collect();
        let waits = touched[r]
            .iter()
            .map(|&t| Op::AwaitReady { from: t as Rank })
            .collect();
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
