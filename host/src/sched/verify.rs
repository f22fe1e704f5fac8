//! The schedule verifier: proves, without running anything, that a
//! [`ScheduleSet`] implements its collective.
//!
//! It replays the set with no timing ([`super::sim`]) and then checks, in
//! this order, reporting the first violation in words (rank, step, block):
//! 1. budgets ([`fits`], also what the executor checks before posting
//!    anything): destination counters, shm flags, chain blocks per rank
//!    and chain queue entries per NIC, scratch bytes per node;
//! 2. every region lies in its buffer, shm partners share a node;
//! 3. every chained put's trigger fills (a chain the NIC would never
//!    start is named with its rank, rail and step; chains that wait for
//!    each other's puts are named as a cycle), every wait can be
//!    satisfied (no deadlock) and every signal is consumed (none is left
//!    to be counted by a later operation);
//! 4. a wait consumes all rail parts of a put or none, and where several
//!    waits share a counter, a signal meant for a later one cannot arrive
//!    before an earlier one completes (no signal can be counted twice);
//! 5. no two accesses to the same bytes, one of them a write, are
//!    unordered by happens-before (no concurrent overlapping writes, no
//!    read racing a write), and nothing writes a send buffer;
//! 6. every output block holds the block the MPI definition says and was
//!    written exactly once (for gather, only the root's receive buffer is
//!    written);
//! 7. in-flight puts per rail stay within budget;
//! 8. a barrier synchronises: every rank returns (its last step, and the
//!    completion of every put it issued or armed) after every other
//!    rank's first step;
//! 9. a rank's buffers are its own again when it returns: every access
//!    another rank makes to them (a put into them, a node peer's copy
//!    from or into them) is over before that rank returns, so the caller
//!    may reuse them at once;
//! 10. (guarded sets, which run back to back on the same buffers, and
//!     every broadcast, which promises that under either buffer contract)
//!     no rank touches another's buffers before that rank has started: its
//!     first step happens before every such access ([`super::persist`]).

use std::collections::HashMap;
use std::fmt;

use super::sim::{self, Access, NodeId, Replay};
use super::*;

pub use super::budget::{Budget, Overrun, fits};

/// The first thing found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Rank concerned (if one).
    pub rank: Option<Rank>,
    /// Step concerned (if one).
    pub step: Option<u32>,
    /// What, in words.
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.rank, self.step) {
            (Some(r), Some(s)) => write!(f, "rank {r}, step {s}: {}", self.what),
            (Some(r), None) => write!(f, "rank {r}: {}", self.what),
            _ => f.write_str(&self.what),
        }
    }
}

impl std::error::Error for Violation {}

/// What a verified set uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Steps over all ranks.
    pub steps: usize,
    /// Puts (hardware broadcast targets counted one each).
    pub puts: usize,
    /// Most puts in flight on one rail of one rank.
    pub max_in_flight: u32,
    /// Scratch bytes per rank.
    pub scratch_bytes: usize,
    /// The checks that order accesses by happens-before (rules 4, 5, 8, 9
    /// and 10) ran: always for [`verify()`]; for [`verify_with`] under
    /// [`Ordering::IfWithin`], only if the closure fits its bound.
    pub ordering_checked: bool,
}

/// Bytes the happens-before closure (one bitset of ancestors per graph
/// node of the replay: it grows with the square of the set's steps and
/// puts) may take. A direct all-gather of 512 ranks would need 200 GB.
pub const HB_LIMIT_BYTES: usize = 1 << 30;

/// Whether [`verify_with`] must run the checks that need the
/// happens-before closure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ordering {
    /// Always: a set whose closure exceeds [`HB_LIMIT_BYTES`] is refused
    /// as too large to prove.
    Required,
    /// Where the closure fits this many bytes ([`HB_LIMIT_BYTES`] is the
    /// most `Required` allows); beyond, the report says the ordering rules
    /// did not run ([`Report::ordering_checked`]) and the rest is proved:
    /// budgets, regions, liveness, whole puts, no write to a send buffer,
    /// and that in the replay's own order of events every output block
    /// receives the block the definition says exactly once. That is not a
    /// proof for every timing: a race or an ambiguous counter signal goes
    /// unnoticed and could make a run wrong with full data, and neither a
    /// barrier's synchronisation nor buffers free on return are proved.
    IfWithin(usize),
}

fn fail(rank: Option<Rank>, step: Option<u32>, what: String) -> Violation {
    Violation { rank, step, what }
}

/// Verify `set` against `budget`.
pub fn verify(set: &ScheduleSet, budget: &Budget) -> Result<Report, Violation> {
    verify_with(set, budget, Ordering::Required)
}

/// [`verify()`], with the happens-before rules as `ordering` says.
pub fn verify_with(
    set: &ScheduleSet,
    budget: &Budget,
    ordering: Ordering,
) -> Result<Report, Violation> {
    let p = &set.params;
    let b = p.block_bytes;
    // The overrun names its own place (a rank and step, or a NIC).
    fits(set, budget).map_err(|o| fail(None, None, o.to_string()))?;
    let scratch_bytes = set.scratch_blocks as usize * b;
    let per_node = super::budget::scratch_per_node(set);
    if per_node > budget.scratch_bytes_per_node {
        return Err(fail(
            None,
            None,
            format!(
                "needs {per_node} scratch bytes per node, the budget is {}",
                budget.scratch_bytes_per_node
            ),
        ));
    }
    if set.ranks.len() != p.shape.size()
        || set
            .ranks
            .iter()
            .enumerate()
            .any(|(i, s)| s.rank as usize != i)
    {
        return Err(fail(
            None,
            None,
            format!(
                "has {} schedules for {} ranks, or out of rank order",
                set.ranks.len(),
                p.shape.size()
            ),
        ));
    }
    let replay = sim::replay(set, &sim::Untimed);
    if let Some(f) = replay.faults.first() {
        return Err(fail(Some(f.rank), Some(f.step), f.what.clone()));
    }
    if let Some(cycle) = chain_cycle(set, &replay.stuck_chains) {
        let (r, step) = cycle[0];
        let path: Vec<String> = cycle
            .iter()
            .map(|(r, s)| format!("rank {r} step {s}"))
            .collect();
        return Err(fail(
            Some(r),
            Some(step),
            format!(
                "a cycle of chained puts: each waits for the next one's put ({} -> back to the first), so no NIC can start any of them",
                path.join(" -> ")
            ),
        ));
    }
    if let Some(s) = replay.stuck_chains.first() {
        return Err(fail(
            Some(s.rank),
            Some(s.step),
            format!(
                "the chained put on rail {} can never start: its trigger c{} needs {} sets on that rail, {} arrive",
                s.rail, s.trigger, s.needs, s.arrived
            ),
        ));
    }
    if let Some((r, s, what)) = replay.blocked.first() {
        return Err(fail(
            Some(*r),
            Some(*s),
            format!("can never proceed (deadlock): {what}"),
        ));
    }
    if let Some(&(r, c, put, _)) = replay.leftover_parts.first() {
        let rec = &replay.puts[put as usize];
        return Err(fail(
            Some(r),
            None,
            format!(
                "counter c{c} receives a signal from rank {} step {} that no wait consumes (a later operation would count it)",
                rec.from, rec.step
            ),
        ));
    }
    if let Some(&(r, f, n)) = replay.leftover_flags.first() {
        return Err(fail(
            Some(r),
            None,
            format!("flag f{f} is raised {n} more times than it is waited for"),
        ));
    }
    if let Some(&(r, notice, n)) = replay.leftover_notices.first() {
        return Err(fail(
            Some(r),
            None,
            format!("{notice} reaches it {n} more times than it is waited for"),
        ));
    }
    whole_puts(set, &replay)?;
    let closure = Ancestors::bytes(&replay);
    let limit = match ordering {
        Ordering::Required => HB_LIMIT_BYTES,
        Ordering::IfWithin(bytes) => bytes.min(HB_LIMIT_BYTES),
    };
    let anc = if closure <= limit {
        Some(Ancestors::new(&replay))
    } else if ordering == Ordering::Required {
        return Err(fail(
            None,
            None,
            format!(
                "is too large for the verifier's ordering checks: {} replay nodes need {} MiB of happens-before closure, beyond its {} MiB",
                replay.nodes.len(),
                closure >> 20,
                HB_LIMIT_BYTES >> 20
            ),
        ));
    } else {
        None
    };
    send_buffers_read_only(&replay)?;
    if let Some(anc) = &anc {
        unambiguous(&replay, anc)?;
        races(set, &replay, anc)?;
    }
    outputs(set, &replay)?;
    let max_in_flight = replay
        .max_in_flight
        .iter()
        .flat_map(|r| r.iter().copied())
        .max()
        .unwrap_or(0);
    if max_in_flight > budget.in_flight_per_rail {
        let (r, _) = replay
            .max_in_flight
            .iter()
            .enumerate()
            .find(|(_, m)| m.contains(&max_in_flight))
            .unwrap_or((0, &[0; MAX_RAILS]));
        return Err(fail(
            Some(r as Rank),
            None,
            format!(
                "has {max_in_flight} puts in flight on one rail, the budget is {}",
                budget.in_flight_per_rail
            ),
        ));
    }
    if let Some(anc) = &anc {
        if p.collective == Collective::Barrier {
            synchronises(set, &replay, anc)?;
        }
        returns_its_buffers(set, &replay, anc)?;
        // A broadcast promises it for every call: it runs back to back on
        // buffers rewritten in between, with no barrier.
        if p.guarded || p.collective == Collective::Bcast {
            touches_only_started_ranks(set, &replay, anc)?;
        }
    }
    Ok(Report {
        ordering_checked: anc.is_some(),
        steps: set.ranks.iter().map(|s| s.steps.len()).sum(),
        puts: replay.puts.iter().filter(|p| !p.set_only).count(),
        max_in_flight,
        scratch_bytes,
    })
}

/// Strict ancestor sets of every graph node, as bitsets (node ids are
/// created in topological order).
struct Ancestors {
    words: usize,
    bits: Vec<u64>,
}

impl Ancestors {
    /// What [`Ancestors::new`] allocates for `replay`.
    fn bytes(replay: &Replay) -> usize {
        let n = replay.nodes.len();
        n.saturating_mul(n.div_ceil(64).max(1)).saturating_mul(8)
    }

    fn new(replay: &Replay) -> Self {
        let n = replay.nodes.len();
        let words = n.div_ceil(64).max(1);
        let mut bits = vec![0u64; n * words];
        for (i, node) in replay.nodes.iter().enumerate() {
            for &pr in &node.preds {
                let pr = pr as usize;
                if pr >= i {
                    continue;
                }
                let (head, tail) = bits.split_at_mut(i * words);
                let mine = &mut tail[..words];
                let theirs = &head[pr * words..(pr + 1) * words];
                for (m, t) in mine.iter_mut().zip(theirs) {
                    *m |= *t;
                }
                mine[pr / 64] |= 1 << (pr % 64);
            }
        }
        Self { words, bits }
    }

    /// `a` happens strictly before `b`.
    fn before(&self, a: NodeId, b: NodeId) -> bool {
        let (a, b) = (a as usize, b as usize);
        self.bits
            .get(b * self.words + a / 64)
            .is_some_and(|w| w & (1 << (a % 64)) != 0)
    }
}

fn whole_puts(set: &ScheduleSet, replay: &Replay) -> Result<(), Violation> {
    // A chained put and the relays that feed it consume one counter
    // together: the put fires only once every relay has, so together
    // they count every part (one owner).
    let owner_of = |c: &sim::Consumption| {
        let joined = set
            .ranks
            .get(c.rank as usize)
            .and_then(|s| s.steps.get(c.step as usize))
            .is_some_and(|s| matches!(s.op, Op::ChainPut { .. } | Op::Relay { .. }));
        (c.rank, c.counter, if joined { u32::MAX } else { c.step })
    };
    let mut owner: HashMap<u32, (Rank, Counter, u32)> = HashMap::new();
    for c in &replay.consumed {
        let i = owner_of(c);
        for &(put, _) in &c.parts {
            if let Some(&j) = owner.get(&put)
                && j != i
            {
                let rec = &replay.puts[put as usize];
                return Err(fail(
                    Some(c.rank),
                    Some(c.step),
                    format!(
                        "counts only some rail parts of the put from rank {} step {} (another wait counts the rest)",
                        rec.from, rec.step
                    ),
                ));
            }
            owner.insert(put, i);
        }
    }
    Ok(())
}

fn unambiguous(replay: &Replay, anc: &Ancestors) -> Result<(), Violation> {
    let mut by: HashMap<(Rank, Counter), Vec<usize>> = HashMap::new();
    for (i, c) in replay.consumed.iter().enumerate() {
        by.entry((c.rank, c.counter)).or_default().push(i);
    }
    let mut keys: Vec<_> = by.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        let mut list = by[&key].clone();
        list.sort_by_key(|&i| replay.consumed[i].step);
        let rail_of = |(put, part): (u32, u32)| {
            replay.puts[put as usize]
                .parts
                .get(part as usize)
                .map(|&(rail, _)| rail)
        };
        for (j, &earlier) in list.iter().enumerate() {
            let e = &replay.consumed[earlier];
            // The rails `e` counts on (a relay or a chained put counts on
            // one rail of the counter, a wait on every rail it expects).
            let listens: Vec<Option<usize>> = e.parts.iter().map(|&p| rail_of(p)).collect();
            for &later in &list[j + 1..] {
                for &(put, part) in &replay.consumed[later].parts {
                    if !listens.contains(&rail_of((put, part))) {
                        continue;
                    }
                    let issue = replay.puts[put as usize].issue;
                    if issue != e.node && !anc.before(e.node, issue) {
                        let rec = &replay.puts[put as usize];
                        return Err(fail(
                            Some(e.rank),
                            Some(e.step),
                            format!(
                                "the wait on c{} may count the signal of rank {} step {}, meant for step {} (signals on one counter are not ordered)",
                                e.counter, rec.from, rec.step, replay.consumed[later].step
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn describe(set: &ScheduleSet, a: &Access) -> String {
    let op = set.ranks[a.rank as usize].steps[a.step as usize]
        .op
        .to_string();
    format!(
        "rank {} step {} ({})",
        a.rank,
        a.step,
        op.split_whitespace().collect::<Vec<_>>().join(" ")
    )
}

/// Nothing writes a send buffer (rule 5's half that needs no ordering).
fn send_buffers_read_only(replay: &Replay) -> Result<(), Violation> {
    match replay
        .accesses
        .iter()
        .find(|a| a.write && a.mem.buf == Buf::Send)
    {
        Some(a) => Err(fail(
            Some(a.rank),
            Some(a.step),
            format!("writes rank {}'s send buffer", a.mem.rank),
        )),
        None => Ok(()),
    }
}

fn races(set: &ScheduleSet, replay: &Replay, anc: &Ancestors) -> Result<(), Violation> {
    // Each memory's blocks in order, each block's accesses in access order
    // (the order the first race found is reported in): the accesses are
    // sorted by memory, then each memory's are counted out by block. No
    // map of lists, and no sort of every (block, access) pair: at 4096
    // ranks there are tens of millions, and those made the check
    // allocator-bound, then sort-bound.
    let mut order: Vec<usize> = (0..replay.accesses.len()).collect();
    order.sort_by_key(|&i| (replay.accesses[i].mem, i));
    let (mut starts, mut fill, mut slots, mut writes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for same_mem in order.chunk_by(|&x, &y| replay.accesses[x].mem == replay.accesses[y].mem) {
        let mem = replay.accesses[same_mem[0]].mem;
        let span = |i: usize| {
            let a = &replay.accesses[i];
            a.block as usize..(a.block + a.count) as usize
        };
        let blocks = same_mem.iter().map(|&i| span(i).end).max().unwrap_or(0);
        // starts[b]..starts[b + 1]: block b's accesses in `slots`.
        starts.clear();
        starts.resize(blocks + 1, 0);
        for &i in same_mem {
            for blk in span(i) {
                starts[blk + 1] += 1;
            }
        }
        for blk in 0..blocks {
            starts[blk + 1] += starts[blk];
        }
        slots.clear();
        slots.resize(starts[blocks], 0);
        fill.clear();
        fill.extend_from_slice(&starts);
        for &i in same_mem {
            for blk in span(i) {
                slots[fill[blk]] = i;
                fill[blk] += 1;
            }
        }
        for blk in 0..blocks {
            let list = &slots[starts[blk]..starts[blk + 1]];
            if list.len() < 2 {
                continue;
            }
            let key = (mem, blk as u32);
            // Only pairs with a write can race. A block is read far more often
            // than written (every relay of an all-gather reads it), so a read
            // meets only the writes after it in the list, not every access:
            // the pairs are the same, in the same order, at a cost of
            // writes x accesses instead of accesses squared.
            writes.clear();
            writes.extend((0..list.len()).filter(|&x| replay.accesses[list[x]].write));
            let check = |i: usize, j: usize| {
                let (a, b) = (&replay.accesses[i], &replay.accesses[j]);
                if anc.before(a.end, b.start) || anc.before(b.end, a.start) {
                    return Ok(());
                }
                Err(race(set, a, b, key))
            };
            for (x, &i) in list.iter().enumerate() {
                if replay.accesses[i].write {
                    for &j in &list[x + 1..] {
                        check(i, j)?;
                    }
                } else {
                    let first = writes.partition_point(|&w| w <= x);
                    for &w in &writes[first..] {
                        check(i, list[w])?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The violation of accesses `a` and `b` to block `key`, unordered.
fn race(set: &ScheduleSet, a: &Access, b: &Access, key: (sim::Mem, u32)) -> Violation {
    let kind = if a.write && b.write {
        "write"
    } else {
        "read and write"
    };
    fail(
        Some(a.rank),
        Some(a.step),
        format!(
            "{} and {} {kind} rank {}'s {} block {} concurrently",
            describe(set, a),
            describe(set, b),
            key.0.rank,
            key.0.buf,
            key.1
        ),
    )
}

/// The block the MPI definition puts at `rank`'s receive block `i`, or
/// `None` if that block is not an output.
pub fn expected(p: &Params, rank: usize, i: usize) -> Option<u64> {
    match p.collective {
        Collective::Gather => (rank == p.root).then(|| sim::val(i as u32, 0)),
        Collective::Allgather => Some(sim::val(i as u32, 0)),
        Collective::Alltoall => Some(sim::val(i as u32, rank as u32)),
        Collective::Bcast => (rank != p.root).then(|| sim::val(p.root as u32, 0)),
        Collective::Barrier => None,
    }
}

/// A barrier's promise: no rank can return before every rank's first
/// step (so none can leave before all have entered). A rank whose last
/// wait a chained put folded returns when that put completes.
fn synchronises(set: &ScheduleSet, replay: &Replay, anc: &Ancestors) -> Result<(), Violation> {
    let (first, _) = first_and_last_steps(set, replay);
    let ends = returns(set, replay);
    for (a, &enter) in first.iter().enumerate() {
        for (b, leave) in ends.iter().enumerate().filter(|&(b, _)| b != a) {
            let ordered =
                enter.is_some_and(|enter| leave.iter().any(|&end| anc.before(enter, end)));
            if !ordered {
                return Err(fail(
                    Some(b as Rank),
                    None,
                    format!("may leave the barrier before rank {a} has entered it"),
                ));
            }
        }
    }
    Ok(())
}

/// A cycle among the chained puts that never started, if there is one:
/// each one's trigger is fed by the next one's put (on its rail), so none
/// can ever start. Returned as (rank, arming step), starting anywhere on
/// the cycle.
fn chain_cycle(set: &ScheduleSet, stuck: &[sim::StuckChain]) -> Option<Vec<(Rank, u32)>> {
    // Edges: a stuck chain -> the stuck chains whose puts would set its
    // trigger on its rail.
    let feeds = |from: &sim::StuckChain, to: &sim::StuckChain| {
        set.ranks
            .get(from.rank as usize)
            .and_then(|s| s.steps.get(from.step as usize))
            .is_some_and(|step| {
                matches!(step.op, Op::ChainPut { to: t, rail, signal: Some(c), .. }
                    if t == to.rank && usize::from(rail) == to.rail && c == to.trigger)
            })
    };
    let n = stuck.len();
    // Follow any feeder from each chain; with every chain on the walk
    // stuck, coming back to a visited one closes a cycle.
    for start in 0..n {
        let mut path = vec![start];
        let mut at = start;
        while let Some(next) = (0..n).find(|&j| feeds(&stuck[j], &stuck[at])) {
            if let Some(pos) = path.iter().position(|&p| p == next) {
                return Some(
                    path[pos..]
                        .iter()
                        .map(|&i| (stuck[i].rank, stuck[i].step))
                        .collect(),
                );
            }
            path.push(next);
            at = next;
        }
    }
    None
}

fn returns_its_buffers(
    set: &ScheduleSet,
    replay: &Replay,
    anc: &Ancestors,
) -> Result<(), Violation> {
    let ends = returns(set, replay);
    for a in replay.accesses.iter().filter(|a| a.mem.rank != a.rank) {
        let over = ends
            .get(a.mem.rank as usize)
            .is_some_and(|e| e.iter().any(|&end| a.end == end || anc.before(a.end, end)));
        if !over {
            return Err(fail(
                Some(a.mem.rank),
                None,
                format!(
                    "may return while {} still {} its {} (its buffers are the caller's again once it returns)",
                    describe(set, a),
                    if a.write { "writes" } else { "reads" },
                    a.mem.buf
                ),
            ));
        }
    }
    Ok(())
}

fn touches_only_started_ranks(
    set: &ScheduleSet,
    replay: &Replay,
    anc: &Ancestors,
) -> Result<(), Violation> {
    let (first, _) = first_and_last_steps(set, replay);
    for a in replay.accesses.iter().filter(|a| a.mem.rank != a.rank) {
        let started = first
            .get(a.mem.rank as usize)
            .copied()
            .flatten()
            .is_some_and(|enter| a.start == enter || anc.before(enter, a.start));
        if !started {
            return Err(fail(
                Some(a.rank),
                Some(a.step),
                format!(
                    "started back to back, it may touch rank {}'s {} before rank {} has started (it could still be reading the last start's results)",
                    a.mem.rank, a.mem.buf, a.mem.rank
                ),
            ));
        }
    }
    Ok(())
}

/// What each rank returns after: its last step and every put it issued
/// or armed (the executor waits for them all to complete). A rank has
/// returned once all of them have happened, so anything ordered before
/// any one of them is ordered before its return.
fn returns(set: &ScheduleSet, replay: &Replay) -> Vec<Vec<NodeId>> {
    let (_, last) = first_and_last_steps(set, replay);
    let mut ends: Vec<Vec<NodeId>> = last.iter().map(|l| l.iter().copied().collect()).collect();
    for p in replay.puts.iter().filter(|p| p.node != u32::MAX) {
        if let Some(e) = ends.get_mut(p.from as usize) {
            e.push(p.node);
        }
    }
    ends
}

/// Each rank's first and last step nodes.
fn first_and_last_steps(
    set: &ScheduleSet,
    replay: &Replay,
) -> (Vec<Option<NodeId>>, Vec<Option<NodeId>>) {
    let n = set.ranks.len();
    let mut first: Vec<Option<NodeId>> = vec![None; n];
    let mut last: Vec<Option<NodeId>> = vec![None; n];
    for (id, node) in replay.nodes.iter().enumerate() {
        if let sim::NodeKind::Step { rank, .. } = node.kind {
            let r = rank as usize;
            first[r] = first[r].or(Some(id as NodeId));
            last[r] = Some(id as NodeId);
        }
    }
    (first, last)
}

fn show(v: u64) -> String {
    if v == sim::UNSET {
        "nothing".into()
    } else {
        format!("rank {}'s send block {}", v >> 32, v & 0xffff_ffff)
    }
}

fn outputs(set: &ScheduleSet, replay: &Replay) -> Result<(), Violation> {
    let p = &set.params;
    for r in 0..set.ranks.len() {
        let recv = &replay.content[&sim::Mem {
            rank: r as Rank,
            buf: Buf::Recv,
        }];
        for (i, &got) in recv.iter().enumerate() {
            let writes = replay.recv_writes[r][i];
            match expected(p, r, i) {
                Some(want) => {
                    if writes != 1 {
                        return Err(fail(
                            Some(r as Rank),
                            None,
                            format!("receive block {i} is written {writes} times (once expected)"),
                        ));
                    }
                    if got != want {
                        return Err(fail(
                            Some(r as Rank),
                            None,
                            format!(
                                "receive block {i} holds {}, expected {}",
                                show(got),
                                show(want)
                            ),
                        ));
                    }
                }
                None if writes != 0 => {
                    return Err(fail(
                        Some(r as Rank),
                        None,
                        format!(
                            "receive block {i} is not an output here but is written {writes} times"
                        ),
                    ));
                }
                None => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Placement;

    /// The race check as first written: every pair of accesses to a block.
    fn races_pairwise(
        set: &ScheduleSet,
        replay: &Replay,
        anc: &Ancestors,
    ) -> Result<(), Violation> {
        let mut per_block: HashMap<(sim::Mem, u32), Vec<usize>> = HashMap::new();
        for (i, a) in replay.accesses.iter().enumerate() {
            for blk in a.block..a.block + a.count {
                per_block.entry((a.mem, blk)).or_default().push(i);
            }
        }
        let mut keys: Vec<_> = per_block.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            let list = &per_block[&key];
            for (x, &i) in list.iter().enumerate() {
                for &j in &list[x + 1..] {
                    let (a, b) = (&replay.accesses[i], &replay.accesses[j]);
                    if (a.write || b.write)
                        && !anc.before(a.end, b.start)
                        && !anc.before(b.end, a.start)
                    {
                        return Err(race(set, a, b, key));
                    }
                }
            }
        }
        Ok(())
    }

    /// The check (accesses counted out by block, a read compared only
    /// with the writes after it) finds the same first race as the
    /// pairwise one, on every algorithm of every collective on three
    /// shapes, and on each of those sets with one rank's first or second
    /// wait moved to its end (which makes races: reads and writes of
    /// blocks still being written).
    #[test]
    fn races_match_the_pairwise_check() {
        let (mut compared, mut racy) = (0, 0);
        for shape in [
            Shape::new(3, 2, 1, 2, Placement::Block),
            Shape::new(5, 1, 1, 1, Placement::Block),
            Shape::new(4, 4, 2, 1, Placement::Cyclic),
        ] {
            let shape = shape.expect("shape");
            for c in Collective::ALL {
                for a in c.algorithms() {
                    let Ok(base) = generate(&Params::new(c, a, shape, 0, 64)) else {
                        continue;
                    };
                    let mut sets = vec![base.clone()];
                    for r in 0..base.ranks.len() {
                        for nth in 0..2 {
                            let mut set = base.clone();
                            let steps = &mut set.ranks[r].steps;
                            let waits: Vec<usize> = (0..steps.len())
                                .filter(|&i| matches!(steps[i].op, Op::Wait { .. }))
                                .collect();
                            if let Some(&at) = waits.get(nth) {
                                let w = steps.remove(at);
                                steps.push(w);
                                sets.push(set);
                            }
                        }
                    }
                    for set in &sets {
                        let replay = sim::replay(set, &sim::Untimed);
                        let anc = Ancestors::new(&replay);
                        let got = races(set, &replay, &anc);
                        assert_eq!(got, races_pairwise(set, &replay, &anc), "{c} {a}");
                        compared += 1;
                        racy += usize::from(got.is_err());
                    }
                }
            }
        }
        // The mutations must have made races for the comparison to mean
        // anything.
        assert!(compared > 500 && racy > 100, "{compared} sets, {racy} racy");
    }
}
