//! What running a schedule takes from the communicator and its NICs, and
//! the budget it must fit: the executor's own limits ([`SCHED_FLAGS`],
//! the posts it keeps in flight, [`Budget::outstanding`]), the chain
//! blocks a rank holds at once
//! ([`chain_peak`], mirrored from the executor's bookkeeping), and
//! [`Budget`] / [`fits`]: the static proof the executor makes before it
//! posts anything and the verifier makes first.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::fmt;

use super::*;

/// Schedule flags per local rank.
pub const SCHED_FLAGS: usize = crate::shm::SCHED_FLAG_LINES;
/// Completion events per rail of one context on the reference NIC (the
/// emulator's: 512 events per context, the upper half completion events;
/// `GEOMETRY`, docs/abi.md §2): what [`Budget::default`] assumes.
pub const REFERENCE_COMPLETION_EVENTS: u32 = 256;

/// Posts one run of the executor holds before it posts another plain put
/// (it completes the oldest first), on a NIC whose context has
/// `completion_events` completion events per rail: a quarter of them (at
/// least one). Each post holds a completion event on each rail it uses,
/// and a quarter lets the two runs of each of two communicators sharing
/// the endpoint (a collective takes one of two counter pools in turn)
/// hold theirs at once. What the bound does not cover: readiness puts,
/// barrier words, queued messages, hardware broadcasts and chained puts
/// are posted without that check (a chained put may hold two events on a
/// rail), nor are more communicators or requests; a schedule or a program
/// that holds more than the NIC has fails with `Error::EventsExhausted`.
pub const fn outstanding_for(completion_events: u32) -> u32 {
    let n = completion_events / 4;
    if n == 0 { 1 } else { n }
}

/// The chained puts one rank's executor holds at once: each keeps a chain
/// block from its arming until its handle is waited (by a later step's
/// `after`, by the bound on puts in flight, or at the end).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChainPeak {
    /// Most held at once.
    pub total: u32,
    /// The step that reached that peak first.
    pub step: u32,
    /// Most held at once on each rail (what each NIC's chain queue must
    /// take if they all fire together).
    pub per_rail: [u32; MAX_RAILS],
    /// Most relays held at once into each rail (what that NIC's sibling
    /// FIFO must take if they all fire together).
    pub peer_sets: [u32; MAX_RAILS],
}

/// The handles of one run's posts, as the executor keeps them: held from
/// the post until a later step's `after` names it, until room is needed
/// for another put (the oldest first: at most [`Budget::outstanding`]), or
/// until the end. The executor keeps real handles in it and waits what it
/// gives back; [`chain_peak`] keeps each chained put's rail, so the two
/// cannot disagree.
#[derive(Debug)]
pub(crate) struct Outstanding<T> {
    held: Vec<Option<T>>,
    order: VecDeque<usize>,
    /// Posts counted at most ([`Budget::outstanding`]).
    limit: usize,
}

impl<T> Outstanding<T> {
    /// Room for a schedule of `steps` steps, at most `limit` posts held.
    pub(crate) fn new(steps: usize, limit: u32) -> Self {
        Self {
            held: (0..steps).map(|_| None).collect(),
            order: VecDeque::new(),
            limit: (limit as usize).max(1),
        }
    }

    /// Hand `settle` the handles `after` names that are still held, in its
    /// order; a handle it settles (`Ok(true)`) is let go. `Ok(false)`: one
    /// is not settled yet (a polling caller comes back later; the ones
    /// after it are not tried).
    pub(crate) fn release_after<E>(
        &mut self,
        after: &[u32],
        mut settle: impl FnMut(&mut T) -> Result<bool, E>,
    ) -> Result<bool, E> {
        for &a in after {
            if let Some(slot) = self.held.get_mut(a as usize)
                && let Some(h) = slot
            {
                if !settle(h)? {
                    return Ok(false);
                }
                *slot = None;
            }
        }
        Ok(true)
    }

    /// Make room for one more put: hand `settle` the oldest handles while
    /// the limit's number of posts are counted (a post released earlier
    /// still counts until it reaches the front).
    pub(crate) fn make_room<E>(
        &mut self,
        mut settle: impl FnMut(&mut T) -> Result<bool, E>,
    ) -> Result<bool, E> {
        while self.order.len() >= self.limit {
            let Some(&j) = self.order.front() else { break };
            if let Some(h) = self.held[j].as_mut() {
                if !settle(h)? {
                    return Ok(false);
                }
                self.held[j] = None;
            }
            self.order.pop_front();
        }
        Ok(true)
    }

    /// Keep the handle of step `step`'s post.
    pub(crate) fn hold(&mut self, step: usize, handle: T) {
        if let Some(slot) = self.held.get_mut(step) {
            *slot = Some(handle);
            self.order.push_back(step);
        }
    }

    /// Hand `settle` every handle still held, in step order (the end of a
    /// run); `Ok(false)` as in [`Outstanding::release_after`].
    pub(crate) fn release_all<E>(
        &mut self,
        mut settle: impl FnMut(&mut T) -> Result<bool, E>,
    ) -> Result<bool, E> {
        for slot in &mut self.held {
            if let Some(h) = slot {
                if !settle(h)? {
                    return Ok(false);
                }
                *slot = None;
            }
        }
        Ok(true)
    }
}

/// The rails of a put's or a chained put's parts (one, or every rail a
/// striped one uses under `params`); empty for any other op.
pub fn chain_parts(params: &Params, me: usize, op: &Op) -> Vec<usize> {
    match op {
        Op::Put { lane, to, src, .. } | Op::ChainPut { lane, to, src, .. } => put_parts(
            *lane,
            params.shape.rails,
            params.stripe_threshold,
            me,
            *to as usize,
            src.count as usize * params.block_bytes,
        )
        .into_iter()
        .map(|p| p.rail)
        .collect(),
        _ => Vec::new(),
    }
}

/// [`ChainPeak`] of `schedule` (a rank's, under `params`): its steps
/// through the executor's own handle bookkeeping (`Outstanding`), without
/// running anything.
pub fn chain_peak(schedule: &Schedule, params: &Params) -> ChainPeak {
    // Each held handle is (its chain queue entries on each rail, the
    // sibling sets it posts into each rail), or `None` for a post that
    // holds no chain block. A chained put injects one entry and one per
    // feed, a striped one also one per other part on its lead's rail (the
    // set starting it) and one on the part's rail; a relay two (the set
    // and its completion).
    type Held = Option<([u32; MAX_RAILS], [u32; MAX_RAILS])>;
    let mut book: Outstanding<Held> =
        Outstanding::new(schedule.steps.len(), params.budget.outstanding);
    let mut rails = [0u32; MAX_RAILS];
    let mut peers = [0u32; MAX_RAILS];
    let mut peak = ChainPeak::default();
    let release = |rails: &mut [u32; MAX_RAILS],
                   peers: &mut [u32; MAX_RAILS],
                   held: &mut Held|
     -> Result<bool, Infallible> {
        if let Some((entries, to)) = *held {
            for (r, n) in rails.iter_mut().zip(entries) {
                *r -= n;
            }
            for (p, t) in peers.iter_mut().zip(to) {
                *p -= t;
            }
        }
        Ok(true)
    };
    let rail_of = |r: usize| r.min(MAX_RAILS - 1);
    for (i, step) in schedule.steps.iter().enumerate() {
        let Ok(_) = book.release_after(&step.after, |h| release(&mut rails, &mut peers, h));
        let mut entries = [0u32; MAX_RAILS];
        let mut to = [0u32; MAX_RAILS];
        match &step.op {
            Op::Put { .. } => {
                let Ok(_) = book.make_room(|h| release(&mut rails, &mut peers, h));
                book.hold(i, None);
                continue;
            }
            op @ Op::ChainPut {
                rail, feeds, done, ..
            } => {
                let lead = rail_of(usize::from(*rail));
                entries[lead] += 1;
                // Sets on completion: the completion event's, then each.
                if !done.is_empty() {
                    entries[lead] += 1;
                }
                for f in feeds.iter().chain(done) {
                    entries[lead] += 1;
                    if f.rail != *rail {
                        to[rail_of(usize::from(f.rail))] += 1;
                    }
                }
                for part in chain_parts(params, schedule.rank as usize, op) {
                    if rail_of(part) != lead {
                        entries[lead] += 1;
                        entries[rail_of(part)] += 1;
                        to[rail_of(part)] += 1;
                    }
                }
            }
            Op::Relay { from, to: into, .. } => {
                entries[rail_of(usize::from(*from))] += 2;
                if into != from {
                    to[rail_of(usize::from(*into))] += 1;
                }
            }
            Op::HwBcast { .. } | Op::WordPut { .. } | Op::QueueSend { .. } | Op::Ready { .. } => {
                book.hold(i, None);
                continue;
            }
            _ => continue,
        }
        let held = Some((entries, to));
        for (r, n) in rails.iter_mut().zip(entries) {
            *r += n;
        }
        for (p, t) in peers.iter_mut().zip(to) {
            *p += t;
        }
        let total = rails.iter().sum::<u32>();
        if total > peak.total {
            peak.total = total;
            peak.step = i as u32;
        }
        for (p, &now) in peak.per_rail.iter_mut().zip(&rails) {
            *p = (*p).max(now);
        }
        for (p, &now) in peak.peer_sets.iter_mut().zip(&peers) {
            *p = (*p).max(now);
        }
        book.hold(i, held);
    }
    peak
}

/// Limits a set of schedules must respect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    /// Destination counters (NIC events) per rank.
    pub counters: u16,
    /// Chained puts a rank may have armed at once (its chain blocks).
    pub chain_blocks: u32,
    /// Chained commands one NIC can hold fired and not yet run (its chain
    /// queue, shared by the node's ranks).
    pub chain_queue: u32,
    /// Shm flags per local rank.
    pub flags: u8,
    /// Puts a rank may have in flight on one rail.
    pub in_flight_per_rail: u32,
    /// Posts one run of the executor holds before it posts another plain
    /// put ([`outstanding_for`] of the NIC's completion events per rail).
    pub outstanding: u32,
    /// Scratch bytes per node (all its ranks together).
    pub scratch_bytes_per_node: usize,
    /// Sibling sets each NIC's `PEER_SET` FIFO holds (shared by the node's
    /// ranks): relays that may fire together into one NIC.
    pub peer_fifo: u32,
    /// Sets one chained put's firing may make besides the put (feeds of
    /// later chained puts' joins).
    pub feeds: u32,
    /// Nodes one NIC may exchange packets with (its flow slots per
    /// direction, docs/abi.md §8.1), counted per node over all its rails.
    pub peers: u32,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            counters: generate::MAX_COUNTERS,
            chain_blocks: crate::driver::CHAIN_BLOCKS as u32,
            chain_queue: railcoll_fw::abi::CHAIN_DEPTH as u32,
            flags: SCHED_FLAGS as u8,
            in_flight_per_rail: 4096,
            outstanding: outstanding_for(REFERENCE_COMPLETION_EVENTS),
            scratch_bytes_per_node: 4 << 30,
            peer_fifo: 64,
            feeds: crate::driver::MAX_FEEDS as u32,
            peers: REFERENCE_PEERS,
        }
    }
}

/// Flow slots of the reference NIC (the emulator's), per direction.
pub const REFERENCE_PEERS: u32 = 256;

impl Budget {
    /// What a communicator on NICs with `limits` offers its schedules: the
    /// executor keeps two counter pools (alternate calls), each within
    /// half the rank's destination events, and never more than
    /// [`generate::MAX_COUNTERS`].
    pub fn for_nic(limits: crate::driver::NicLimits) -> Self {
        let per_pool = (limits.dest_events / 2).min(u32::from(generate::MAX_COUNTERS));
        Self {
            counters: per_pool as u16,
            chain_blocks: limits.chain_blocks,
            chain_queue: limits.chain_queue,
            peer_fifo: limits.peer_fifo,
            feeds: limits.feeds,
            outstanding: outstanding_for(limits.completion_events),
            peers: limits.peers,
            ..Self::default()
        }
    }
}

/// A NIC resource a set needs more of than the budget offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overrun {
    /// What runs out.
    pub resource: &'static str,
    /// What the set needs.
    pub needed: u64,
    /// What the budget offers.
    pub available: u64,
    /// Where the need peaks: a rank (and its step), or a node and rail.
    pub rank: Option<Rank>,
    /// The step of `rank` at which it peaks.
    pub step: Option<u32>,
    /// The node whose NIC runs out.
    pub node: Option<usize>,
    /// The rail.
    pub rail: Option<usize>,
}

impl Overrun {
    /// `resource` needed `needed` times where `available` are offered,
    /// with no place named yet.
    fn of(resource: &'static str, needed: u64, available: u64) -> Self {
        Self {
            resource,
            needed,
            available,
            rank: None,
            step: None,
            node: None,
            rail: None,
        }
    }

    /// Where, in words (" at rank 3, step 12"), or empty.
    pub fn place(&self) -> String {
        let mut at = Vec::new();
        if let Some(r) = self.rank {
            at.push(format!("rank {r}"));
        }
        if let Some(n) = self.node {
            at.push(format!("node {n}"));
        }
        if let Some(r) = self.rail {
            at.push(format!("rail {r}"));
        }
        if let Some(s) = self.step {
            at.push(format!("step {s}"));
        }
        if at.is_empty() {
            String::new()
        } else {
            format!(" at {}", at.join(", "))
        }
    }
}

impl fmt::Display for Overrun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "needs {} {}{}, the budget is {}",
            self.needed,
            self.resource,
            self.place(),
            self.available
        )
    }
}

/// The scratch bytes `set` needs on each node: every rank's scratch, the
/// node's ranks together.
pub fn scratch_per_node(set: &ScheduleSet) -> usize {
    (set.scratch_blocks as usize)
        .saturating_mul(set.params.block_bytes)
        .saturating_mul(set.params.shape.topology.ranks_per_node())
}

/// Does `set` fit `budget`? The static checks, cheap enough for the
/// executor to make before it posts anything: destination counters, shm
/// flags, the chained puts each rank holds at once against its chain
/// blocks, and those of a node's ranks on one rail against that NIC's
/// chain queue (all of them may fire together), and the nodes each node
/// talks to, each way, against the NICs' flow slots ([`Budget::peers`]; a
/// hardware broadcast or barrier counts as talking to every node).
pub fn fits(set: &ScheduleSet, budget: &Budget) -> Result<(), Overrun> {
    let over = Overrun::of;
    if set.counters > budget.counters {
        return Err(over(
            "destination counters",
            set.counters.into(),
            budget.counters.into(),
        ));
    }
    if set.flags > budget.flags {
        return Err(over("shm flags", set.flags.into(), budget.flags.into()));
    }
    let topo = set.params.shape.topology;
    let mut per_nic: HashMap<(usize, usize), u32> = HashMap::new();
    let mut peer_per_nic: HashMap<(usize, usize), u32> = HashMap::new();
    for s in &set.ranks {
        let peak = chain_peak(s, &set.params);
        if peak.total > budget.chain_blocks {
            return Err(Overrun {
                rank: Some(s.rank),
                step: Some(peak.step),
                ..over(
                    "chain blocks (chained puts armed at once)",
                    peak.total.into(),
                    budget.chain_blocks.into(),
                )
            });
        }
        // A chained put's COPY sets its feeds and, striped, the trigger of
        // each other part.
        let feeding = s.steps.iter().enumerate().find_map(|(i, st)| match &st.op {
            op @ Op::ChainPut { feeds, done, .. } => {
                let parts = chain_parts(&set.params, s.rank as usize, op).len().max(1);
                let sets = (feeds.len() + parts - 1).max(done.len());
                (sets as u32 > budget.feeds).then_some((i, sets))
            }
            _ => None,
        });
        if let Some((i, n)) = feeding {
            return Err(Overrun {
                rank: Some(s.rank),
                step: Some(i as u32),
                ..over(
                    "feeds of one chained put (sets its COPY makes besides the put)",
                    n as u64,
                    budget.feeds.into(),
                )
            });
        }
        // A relay's COPY is two blocks: NICs whose COPY takes one cannot
        // run it, local or not.
        let relay = s
            .steps
            .iter()
            .position(|st| matches!(st.op, Op::Relay { .. }));
        if let (0, Some(i)) = (budget.feeds, relay) {
            return Err(Overrun {
                rank: Some(s.rank),
                step: Some(i as u32),
                ..over("relays (a two-block COPY)", 1, 0)
            });
        }
        let Ok((node, _)) = topo.locate(s.rank as usize) else {
            continue;
        };
        for (rail, &n) in peak.per_rail.iter().enumerate().filter(|(_, n)| **n > 0) {
            *per_nic.entry((node, rail)).or_default() += n;
        }
        for (rail, &n) in peak.peer_sets.iter().enumerate().filter(|(_, n)| **n > 0) {
            *peer_per_nic.entry((node, rail)).or_default() += n;
        }
    }
    // The first NIC (by node, then rail) whose shared resource overflows.
    let nic_over = |map: HashMap<(usize, usize), u32>,
                    limit: u32,
                    resource: &'static str|
     -> Result<(), Overrun> {
        let mut nics: Vec<_> = map.into_iter().collect();
        nics.sort_unstable();
        match nics.iter().find(|(_, n)| *n > limit) {
            Some(&((node, rail), n)) => Err(Overrun {
                node: Some(node),
                rail: Some(rail),
                ..over(resource, n.into(), limit.into())
            }),
            None => Ok(()),
        }
    };
    nic_over(
        peer_per_nic,
        budget.peer_fifo,
        "sibling FIFO entries (relays of the node's ranks into one NIC that may fire together)",
    )?;
    nic_over(
        per_nic,
        budget.chain_queue,
        "chain queue entries (chained puts of the node's ranks that may fire together)",
    )?;
    peers_within(set, budget.peers)
}

/// The nodes a node's NICs exchange packets with, each way, within
/// `limit` (their flow slots, docs/abi.md §8.1): the nodes its ranks send
/// to, and those whose ranks send to it. Counted per node over all its
/// rails (an upper bound on each rail's count: a set that stripes or
/// spreads its puts may fit NICs this refuses).
fn peers_within(set: &ScheduleSet, limit: u32) -> Result<(), Overrun> {
    let topo = set.params.shape.topology;
    let node_of = |rank: usize| topo.locate(rank).map_or(usize::MAX, |(node, _)| node);
    let nodes = topo.nodes();
    // A node talks to at most every node, itself included: a set over no
    // more nodes than the slots always fits.
    if nodes <= limit as usize {
        return Ok(());
    }
    // A hardware broadcast keeps every destination's progress in a slot
    // (ABI §4.4), and the switch's barrier falls back to a get from every
    // node's master when the switch is silent: both span every node.
    let spanning = set
        .ranks
        .iter()
        .flat_map(|s| &s.steps)
        .find_map(|st| match st.op {
            Op::HwBcast { .. } => Some("nodes a hardware broadcast spans (its flow slots)"),
            Op::HwBarrier => Some("nodes a hardware barrier's fallback reaches (its flow slots)"),
            _ => None,
        });
    if let Some(resource) = spanning {
        return Err(Overrun::of(resource, nodes as u64, limit.into()));
    }
    let mut sends: Vec<Vec<usize>> = vec![Vec::new(); nodes];
    let mut receives: Vec<Vec<usize>> = vec![Vec::new(); nodes];
    for s in &set.ranks {
        let from = node_of(s.rank as usize);
        for st in &s.steps {
            let to = match st.op {
                Op::Put { to, .. }
                | Op::ChainPut { to, .. }
                | Op::WordPut { to, .. }
                | Op::Ready { to, .. }
                | Op::QueueSend { to, .. } => node_of(to as usize),
                _ => continue,
            };
            if let (Some(out), Some(into)) = (sends.get_mut(from), receives.get_mut(to)) {
                out.push(to);
                into.push(from);
            }
        }
    }
    for (direction, lists) in [("to", sends), ("from", receives)] {
        for (node, mut peers) in lists.into_iter().enumerate() {
            peers.sort_unstable();
            peers.dedup();
            if peers.len() > limit as usize {
                let resource = if direction == "to" {
                    "peer nodes one NIC sends to (its flow slots)"
                } else {
                    "peer nodes one NIC receives from (its flow slots)"
                };
                return Err(Overrun {
                    node: Some(node),
                    ..Overrun::of(resource, peers.len() as u64, limit.into())
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(rail: u8) -> Op {
        Op::ChainPut {
            trigger: 0,
            count: 1,
            rail,
            lane: Lane::Rail(rail),
            to: 1,
            src: Region::one(Buf::Send, 0),
            dst: Region::one(Buf::Recv, 0),
            signal: None,
            feeds: Vec::new(),
            done: Vec::new(),
        }
    }

    fn params() -> Params {
        let shape = Shape::new(2, 1, 1, 2, crate::topology::Placement::Block).expect("shape");
        Params::new(Collective::Allgather, Algorithm::Ring, shape, 0, 8)
    }

    fn put() -> Op {
        Op::Put {
            to: 1,
            src: Region::one(Buf::Send, 0),
            dst: Region::one(Buf::Recv, 0),
            lane: Lane::Rail(0),
            signal: None,
        }
    }

    fn step(op: Op, after: &[u32]) -> Step {
        Step {
            op,
            after: after.to_vec(),
        }
    }

    /// The peers a node's NICs exchange packets with are counted each way,
    /// and a set that talks to more nodes than the NICs have flow slots
    /// is refused, naming the node and the direction: a direct all-gather
    /// over 16 nodes needs 15 peers, recursive doubling 4.
    #[test]
    fn a_set_over_the_nics_flow_slots_is_refused() {
        let shape = Shape::new(16, 1, 1, 1, crate::topology::Placement::Block).expect("shape");
        let budget = Budget {
            peers: 8,
            ..Budget::default()
        };
        let direct = Params::new(Collective::Allgather, Algorithm::Direct, shape, 0, 8);
        let set = crate::sched::generate(&direct).expect("direct");
        let o = fits(&set, &budget).expect_err("15 peers, 8 slots");
        assert_eq!(
            (o.resource, o.needed, o.available, o.node),
            (
                "peer nodes one NIC sends to (its flow slots)",
                15,
                8,
                Some(0)
            )
        );
        let gather = Params::new(Collective::Gather, Algorithm::Direct, shape, 3, 8);
        let set = crate::sched::generate(&gather).expect("gather");
        let o = fits(&set, &budget).expect_err("the root hears from 15");
        assert_eq!(
            (o.resource, o.needed, o.node),
            (
                "peer nodes one NIC receives from (its flow slots)",
                15,
                Some(3)
            )
        );
        let rd = Params::new(
            Collective::Allgather,
            Algorithm::RecursiveDoubling,
            shape,
            0,
            8,
        );
        let set = crate::sched::generate(&rd).expect("recursive doubling");
        assert_eq!(fits(&set, &budget), Ok(()));
        assert_eq!(
            fits(&set, &Budget { peers: 3, ..budget }).map_err(|o| o.needed),
            Err(4)
        );
    }

    #[test]
    fn chain_blocks_are_held_until_their_handle_is_waited() {
        // Two chains on rails 0 and 1, the first released by step 2's
        // `after`, then a third on rail 1: at most two at once, first at
        // step 1; rail 1 holds two at once at step 3.
        let s = Schedule {
            rank: 0,
            steps: vec![
                step(chain(0), &[]),
                step(chain(1), &[]),
                step(
                    Op::Copy {
                        src: Region::one(Buf::Send, 0),
                        dst: Region::one(Buf::Scratch, 0),
                    },
                    &[0],
                ),
                step(chain(1), &[]),
            ],
        };
        let peak = chain_peak(&s, &params());
        assert_eq!((peak.total, peak.step), (2, 1));
        assert_eq!(peak.per_rail[..2], [1, 2]);
    }

    #[test]
    fn the_bound_on_puts_in_flight_releases_the_oldest_chain() {
        // A chain, then as many puts as the budget keeps in flight: the
        // executor waits the oldest handle (the chain's) to post the last
        // put, then a new chain is the only one held.
        let mut steps = vec![step(chain(0), &[])];
        let limit = params().budget.outstanding as usize;
        steps.extend((0..limit).map(|_| step(put(), &[])));
        steps.push(step(chain(0), &[]));
        let peak = chain_peak(&Schedule { rank: 0, steps }, &params());
        assert_eq!((peak.total, peak.step), (1, 0));
    }
}
