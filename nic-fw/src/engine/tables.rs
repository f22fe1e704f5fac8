//! The engine's tables that keep invariants of their own: the DMA channels
//! (how many are active, the issue order, the transmit cursor), the chain
//! queue (a ring of fired commands between `head` and `tail`), the events
//! of every context (one lookup, one reset), the per-peer slot table
//! (`PeerTable`: open addressing; a removal shifts back the entries
//! probed past it), the flows kept in it, and the broadcasts.
//! Only `install` and `retire` change which DMA channels are active (the
//! engine updates an active channel's progress through `slots`), and only
//! the chain queue's methods move its ring.

use super::{BcastDest, BcastTx, CHAIN_RING, ChainEntry, Dma, Event, RxFlow, TxFlow};
use crate::abi::NodeId;
use crate::abi::event::EventId;
use crate::abi::{ContextIndex, MAX_CONTEXTS, MAX_DMAS};

/// The DMA channels. `active` is the number of slots with `active` set.
#[derive(Debug)]
pub(super) struct DmaTable {
    pub(super) slots: [Dma; MAX_DMAS],
    active: usize,
    /// Where the transmitter's round-robin resumes.
    cursor: usize,
    /// Issue order of the next DMA ([`Dma::order`]).
    order: u32,
}

impl DmaTable {
    pub(super) const IDLE: DmaTable = DmaTable {
        slots: [Dma::IDLE; MAX_DMAS],
        active: 0,
        cursor: 0,
        order: 0,
    };

    /// DMAs in progress.
    pub(super) fn active(&self) -> usize {
        self.active
    }

    /// Every channel busy.
    pub(super) fn full(&self) -> bool {
        self.active >= MAX_DMAS
    }

    /// Put `dma` on a free channel with the next issue order; the channel,
    /// or `None` if every channel is busy.
    pub(super) fn install(&mut self, dma: Dma) -> Option<usize> {
        let channel = self.slots.iter().position(|s| !s.active)?;
        let order = self.order;
        self.order = order.wrapping_add(1);
        let slot = self.slots.get_mut(channel)?;
        *slot = Dma {
            order,
            active: true,
            ..dma
        };
        self.active = self.active.wrapping_add(1);
        Some(channel)
    }

    /// Channel `channel` finished: free it.
    pub(super) fn retire(&mut self, channel: usize) {
        if let Some(d) = self.slots.get_mut(channel)
            && d.active
        {
            d.active = false;
            self.active = self.active.saturating_sub(1);
        }
    }

    /// The next channel of the transmitter's round-robin.
    pub(super) fn next_turn(&mut self) -> usize {
        let i = self.cursor % MAX_DMAS;
        self.cursor = self.cursor.wrapping_add(1) % MAX_DMAS;
        i
    }

    /// Test hook: pretend `n` channels are busy without installing any.
    #[cfg(test)]
    pub(super) fn set_active_for_test(&mut self, n: usize) {
        self.active = n;
    }
}

/// Commands that fired and wait to run, in order: the live entries are
/// the `tail - head` ring slots from `head` (free-running counts on
/// [`CHAIN_RING`]); a slot of a detached context is `None` (cancelled).
#[derive(Debug)]
pub(super) struct ChainQueue {
    entries: [Option<ChainEntry>; crate::abi::CHAIN_DEPTH],
    /// Entries run (free-running).
    head: u64,
    /// Entries injected (free-running).
    tail: u64,
}

impl ChainQueue {
    pub(super) const EMPTY: ChainQueue = ChainQueue {
        entries: [None; crate::abi::CHAIN_DEPTH],
        head: 0,
        tail: 0,
    };

    /// Nothing waits to run.
    pub(super) fn is_empty(&self) -> bool {
        CHAIN_RING.is_empty(self.head, self.tail)
    }

    /// Room for `n` more entries.
    pub(super) fn has_room(&self, n: u64) -> bool {
        self.tail.wrapping_sub(self.head).saturating_add(n) <= CHAIN_RING.entries()
    }

    /// Append `entry` (the caller checked [`ChainQueue::has_room`]).
    pub(super) fn push(&mut self, entry: ChainEntry) {
        if let Some(s) = self.entries.get_mut(CHAIN_RING.slot(self.tail)) {
            *s = Some(entry);
            self.tail = self.tail.wrapping_add(1);
        }
    }

    /// The oldest entry: `None` if the queue is empty, `Some(None)` if it
    /// was cancelled.
    pub(super) fn front(&self) -> Option<Option<ChainEntry>> {
        if self.is_empty() {
            return None;
        }
        self.entries.get(CHAIN_RING.slot(self.head)).copied()
    }

    /// Drop the oldest entry (it ran, or was cancelled).
    pub(super) fn pop_front(&mut self) {
        if self.is_empty() {
            return;
        }
        if let Some(s) = self.entries.get_mut(CHAIN_RING.slot(self.head)) {
            *s = None;
        }
        self.head = self.head.wrapping_add(1);
    }

    /// The free-running counts (head, tail), for tests.
    #[cfg(test)]
    pub(super) fn counts(&self) -> (u64, u64) {
        (self.head, self.tail)
    }

    /// Move the free-running counts (tests: a queue that is nearly full,
    /// or counts about to wrap), its entries as they are.
    #[cfg(test)]
    pub(super) fn set_counts(&mut self, head: u64, tail: u64) {
        (self.head, self.tail) = (head, tail);
    }

    /// Cancel every entry of context `ctx` (detached: the next owner of
    /// the index must not run them).
    pub(super) fn cancel(&mut self, ctx: ContextIndex) {
        for entry in self.entries.iter_mut() {
            if entry.is_some_and(|e| e.ctx == ctx) {
                *entry = None;
            }
        }
    }
}

/// The events of every context.
#[derive(Debug)]
pub(super) struct EventTable<const EVENTS: usize> {
    table: [[Event; EVENTS]; MAX_CONTEXTS],
}

impl<const EVENTS: usize> EventTable<EVENTS> {
    pub(super) const RESET: Self = Self {
        table: [[Event::RESET; EVENTS]; MAX_CONTEXTS],
    };

    /// Event `ev` of context `ctx`; `None` outside the table.
    pub(super) fn get_mut(&mut self, ctx: ContextIndex, ev: EventId) -> Option<&mut Event> {
        self.table
            .get_mut(ctx as usize)
            .and_then(|t| t.get_mut(ev.0 as usize))
    }

    /// Every event of context `ctx` back to its reset state (attach).
    pub(super) fn reset(&mut self, ctx: ContextIndex) {
        if let Some(t) = self.table.get_mut(ctx as usize) {
            *t = [Event::RESET; EVENTS];
        }
    }
}

/// Per-peer state for at most `SLOTS` peers at once, found by node number
/// (docs/abi.md §8.1, "Flow slots"): open addressing, probing linearly
/// from the node's home slot, `node % SLOTS`. Nodes below `SLOTS` never
/// collide with one another, so a fabric of at most `SLOTS` nodes finds
/// every peer in its home slot, as a table indexed by node would; a larger
/// fabric holds the peers a NIC talks to, whichever they are, and a peer
/// beyond the table's size is refused ([`PeerTable::open`] answers
/// `None`) instead of overwriting another's state.
#[derive(Debug)]
pub(super) struct PeerTable<T, const SLOTS: usize> {
    keys: [Option<NodeId>; SLOTS],
    vals: [T; SLOTS],
}

impl<T: Copy, const SLOTS: usize> PeerTable<T, SLOTS> {
    /// An empty table; `fresh` fills the unused slots.
    pub(super) const fn new(fresh: T) -> Self {
        Self {
            keys: [None; SLOTS],
            vals: [fresh; SLOTS],
        }
    }

    fn home(node: NodeId) -> usize {
        usize::from(node).checked_rem(SLOTS).unwrap_or(0)
    }

    fn next(i: usize) -> usize {
        i.wrapping_add(1).checked_rem(SLOTS).unwrap_or(0)
    }

    /// `Ok(slot)` holding `node`; else `Err(Some(slot))`, the free slot it
    /// would take, or `Err(None)` if every slot is taken.
    fn probe(&self, node: NodeId) -> Result<usize, Option<usize>> {
        let mut i = Self::home(node);
        for _ in 0..SLOTS {
            match self.keys.get(i) {
                Some(Some(k)) if *k == node => return Ok(i),
                Some(None) => return Err(Some(i)),
                _ => i = Self::next(i),
            }
        }
        Err(None)
    }

    /// `node` has a slot, or one is free for it.
    pub(super) fn has_room_for(&self, node: NodeId) -> bool {
        self.probe(node) != Err(None)
    }

    /// `node`'s state, if it has a slot.
    pub(super) fn get(&self, node: NodeId) -> Option<&T> {
        self.probe(node).ok().and_then(|i| self.vals.get(i))
    }

    /// `node`'s state, if it has a slot.
    pub(super) fn get_mut(&mut self, node: NodeId) -> Option<&mut T> {
        self.probe(node).ok().and_then(|i| self.vals.get_mut(i))
    }

    /// `node`'s state, set up as `fresh` in a free slot if it had none;
    /// `None` if it had none and every slot is taken.
    pub(super) fn open(&mut self, node: NodeId, fresh: T) -> Option<&mut T> {
        self.open_if(node, || true, fresh)
    }

    /// As [`PeerTable::open`], but a slot is taken only if `allow()` says
    /// so (asked only then): one probe either way.
    pub(super) fn open_if(
        &mut self,
        node: NodeId,
        allow: impl FnOnce() -> bool,
        fresh: T,
    ) -> Option<&mut T> {
        let i = match self.probe(node) {
            Ok(i) => i,
            Err(Some(i)) if allow() => {
                *self.keys.get_mut(i)? = Some(node);
                *self.vals.get_mut(i)? = fresh;
                i
            }
            Err(_) => return None,
        };
        self.vals.get_mut(i)
    }

    /// Free `node`'s slot, if it has one. The entries probed past it move
    /// back (backward-shift deletion), so every other peer is still found
    /// from its home slot.
    pub(super) fn remove(&mut self, node: NodeId) {
        let Ok(mut hole) = self.probe(node) else {
            return;
        };
        if let Some(k) = self.keys.get_mut(hole) {
            *k = None;
        }
        let mut j = hole;
        for _ in 0..SLOTS {
            j = Self::next(j);
            let Some(Some(key)) = self.keys.get(j).copied() else {
                return;
            };
            // The entry at `j` may fill the hole unless its home lies
            // cyclically in (hole, j]: it would then no longer be found.
            let home = Self::home(key);
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if stays {
                continue;
            }
            let (Some(moved), Some(_)) = (self.vals.get(j).copied(), self.vals.get(hole)) else {
                return;
            };
            if let Some(v) = self.vals.get_mut(hole) {
                *v = moved;
            }
            if let Some(k) = self.keys.get_mut(hole) {
                *k = Some(key);
            }
            if let Some(k) = self.keys.get_mut(j) {
                *k = None;
            }
            hole = j;
        }
    }

    /// The peer in slot `i` and its state, if that slot is taken (for walks
    /// by slot index, which a removal may disturb: it moves entries).
    pub(super) fn slot_mut(&mut self, i: usize) -> Option<(NodeId, &mut T)> {
        let node = (*self.keys.get(i)?)?;
        self.vals.get_mut(i).map(|v| (node, v))
    }

    /// The state of every peer with a slot, in slot order.
    pub(super) fn values(&self) -> impl Iterator<Item = &T> {
        self.keys
            .iter()
            .zip(self.vals.iter())
            .filter_map(|(k, v)| k.map(|_| v))
    }
}

/// The reliable flows to and from the NIC's peers (docs/abi.md §8.1): a
/// slot per peer this NIC sends to and per peer it receives from, taken on
/// first use; the receivers that owe an acknowledgement, and the transmit
/// flows that have packets in flight (none: no retransmission timer is
/// due). The engine's per-poll work over flows (retransmissions, timers)
/// walks only those, in node order, not every peer's flow.
#[derive(Debug)]
pub(super) struct Flows<const PEERS: usize> {
    pub(super) tx: PeerTable<TxFlow, PEERS>,
    pub(super) rx: PeerTable<RxFlow, PEERS>,
    /// Nodes owed an ack, in the order they became so: the first
    /// `acks_len` entries (a receive slot is listed at most once).
    pub(super) acks: [NodeId; PEERS],
    pub(super) acks_len: usize,
    /// Nodes whose transmit flow has packets in flight, ascending: the
    /// first `busy_len` entries.
    busy: [NodeId; PEERS],
    busy_len: usize,
    /// Transmit flows whose close awaits its answer.
    pub(super) closing: u32,
    /// When the walk for idle transmit flows to close next runs (`None`:
    /// no transmit slot that could become idle).
    pub(super) close_scan_ns: Option<u64>,
    /// The flow instance the next opening of a transmit flow takes (never
    /// 0).
    next_instance: u32,
    /// Until when no receive slot is opened for the senders of each
    /// bucket (`node mod QUIET_BUCKETS`): one of them was refused for want
    /// of a slot less than the close idle time ago, and a copy of its
    /// refused packet may still arrive.
    refusing_until: [u64; QUIET_BUCKETS],
}

/// Buckets of senders that share a quiet time after a refusal: a record
/// per node would be the per-node memory the slots avoid, one for all
/// would let one sender keep every other out.
pub(super) const QUIET_BUCKETS: usize = 64;

impl<const PEERS: usize> Flows<PEERS> {
    pub(super) const NEW: Self = Self {
        tx: PeerTable::new(TxFlow::NEW),
        rx: PeerTable::new(RxFlow::NEW),
        acks: [0; PEERS],
        acks_len: 0,
        busy: [0; PEERS],
        busy_len: 0,
        closing: 0,
        close_scan_ns: None,
        next_instance: 1,
        refusing_until: [0; QUIET_BUCKETS],
    };

    /// `node` (or a node sharing its bucket) was refused for want of a
    /// slot and stays refused before `until`.
    pub(super) fn refused_until(&self, node: NodeId) -> u64 {
        self.refusing_until
            .get(usize::from(node) % QUIET_BUCKETS)
            .copied()
            .unwrap_or(0)
    }

    /// Refuse `node`'s bucket new slots until `until`.
    pub(super) fn refuse_until(&mut self, node: NodeId, until: u64) {
        if let Some(t) = self
            .refusing_until
            .get_mut(usize::from(node) % QUIET_BUCKETS)
        {
            *t = until;
        }
    }

    /// A new flow instance: consecutive, wrapping, skipping 0. Receivers
    /// tell a later instance from an earlier one by serial-number
    /// comparison, which holds while fewer than 2^31 openings separate the
    /// instance a slot follows from the next one it meets (abi.md §8.1).
    pub(super) fn draw_instance(&mut self) -> u32 {
        let instance = self.next_instance;
        self.next_instance = match instance.wrapping_add(1) {
            0 => 1,
            next => next,
        };
        instance
    }

    /// The nodes whose flows have packets in flight, ascending.
    pub(super) fn busy(&self) -> &[NodeId] {
        self.busy.get(..self.busy_len).unwrap_or(&[])
    }

    /// Whether any flow has packets in flight.
    pub(super) fn any_busy(&self) -> bool {
        self.busy_len > 0
    }

    /// The first node at or after `from` whose flow has packets in flight
    /// (a walk that may change the set as it goes: each step looks again).
    pub(super) fn next_busy(&self, from: u32) -> Option<NodeId> {
        let busy = self.busy();
        let at = busy.partition_point(|&n| u32::from(n) < from);
        busy.get(at).copied()
    }

    /// `node` is owed no ack any more (its receive flow was reset).
    pub(super) fn forget_ack(&mut self, node: NodeId) {
        let len = self.acks_len;
        let mut kept = 0;
        for i in 0..len {
            if let Some(n) = self.acks.get(i).copied()
                && n != node
            {
                if let Some(slot) = self.acks.get_mut(kept) {
                    *slot = n;
                }
                kept = kept.saturating_add(1);
            }
        }
        self.acks_len = kept;
    }

    /// `node`'s flow has packets in flight now (it had none).
    pub(super) fn set_busy(&mut self, node: NodeId) {
        let len = self.busy_len;
        let at = self.busy().partition_point(|&n| n < node);
        if self.busy().get(at) == Some(&node) || len >= PEERS {
            return;
        }
        // The entries from `at` on move up by one (element by element:
        // the image has no panic path, which slice rotation keeps).
        let mut i = len;
        while i > at {
            let below = i.saturating_sub(1);
            if let (Some(&moved), Some(_)) = (self.busy.get(below), self.busy.get(i))
                && let Some(slot) = self.busy.get_mut(i)
            {
                *slot = moved;
            }
            i = below;
        }
        if let Some(slot) = self.busy.get_mut(at) {
            *slot = node;
            self.busy_len = len.saturating_add(1);
        }
    }

    /// `node`'s flow has no packet in flight any more.
    pub(super) fn set_idle(&mut self, node: NodeId) {
        let len = self.busy_len;
        let at = self.busy().partition_point(|&n| n < node);
        if self.busy().get(at) != Some(&node) {
            return;
        }
        // The entries after `at` move down by one.
        let mut i = at;
        while i.saturating_add(1) < len {
            if let Some(&moved) = self.busy.get(i.saturating_add(1))
                && let Some(slot) = self.busy.get_mut(i)
            {
                *slot = moved;
            }
            i = i.saturating_add(1);
        }
        self.busy_len = len.saturating_sub(1);
    }
}

/// The broadcast DMA this NIC sends (one at a time) and what each
/// destination acknowledged of it. What this NIC receives of each
/// sender's broadcasts is kept in that sender's receive flow
/// (`RxFlow::bcast`).
#[derive(Debug)]
pub(super) struct Broadcasts<const PEERS: usize> {
    pub(super) tx: BcastTx,
    /// Broadcasts go through the sibling on this rail (ABI 1.5): an
    /// earlier one's destinations stayed silent past the retry limit.
    pub(super) via: Option<u8>,
    pub(super) next_id: u32,
    /// What each destination acknowledged, by its place in the
    /// broadcast's range (`node - low`; a range spans at most `PEERS`
    /// nodes).
    pub(super) dest: [BcastDest; PEERS],
}

impl<const PEERS: usize> Broadcasts<PEERS> {
    pub(super) const IDLE: Self = Self {
        tx: BcastTx::IDLE,
        via: None,
        next_id: 0,
        dest: [BcastDest {
            received: 0,
            status: None,
            direct: false,
        }; PEERS],
    };

    /// The acknowledgement state of `node`, a destination of the broadcast
    /// in flight (whose range starts at `low`).
    pub(super) fn dest_mut(&mut self, low: NodeId, node: NodeId) -> Option<&mut BcastDest> {
        self.dest.get_mut(usize::from(node.checked_sub(low)?))
    }

    /// The acknowledgement state of `node` (see [`Broadcasts::dest_mut`]).
    pub(super) fn dest(&self, low: NodeId, node: NodeId) -> Option<&BcastDest> {
        self.dest.get(usize::from(node.checked_sub(low)?))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::collections::{BTreeMap, BTreeSet};

    use super::{Flows, PeerTable};
    use proptest::prelude::*;

    proptest! {
        /// The busy list is the set of nodes marked busy and not since
        /// idle, ascending, whatever the order of the marks (repeats and
        /// idles of idle nodes included); `next_busy` walks it in order.
        #[test]
        fn the_busy_list_is_the_busy_set_in_node_order(
            ops in proptest::collection::vec((any::<bool>(), 0u16..16), 0..200)
        ) {
            let mut flows = Flows::<16>::NEW;
            let mut model = BTreeSet::new();
            for (busy, node) in ops {
                if busy {
                    flows.set_busy(node);
                    model.insert(node);
                } else {
                    flows.set_idle(node);
                    model.remove(&node);
                }
                let want: std::vec::Vec<u16> = model.iter().copied().collect();
                prop_assert_eq!(flows.busy(), &want[..]);
                prop_assert_eq!(flows.any_busy(), !want.is_empty());
                let mut walked = std::vec::Vec::new();
                let mut from = 0;
                while let Some(n) = flows.next_busy(from) {
                    walked.push(n);
                    from = u32::from(n) + 1;
                }
                prop_assert_eq!(walked, want);
            }
        }

        /// The peer table is a map from node to state holding at most
        /// `SLOTS` peers, whatever the order of opens and removals and
        /// however the nodes collide on their home slots (nodes up to 5x
        /// the slots, the top of the node space included): an open finds
        /// a peer's own state or sets up a fresh one, refuses only when
        /// every slot is taken, and a removal loses no other peer.
        #[test]
        fn the_peer_table_is_a_bounded_map(
            ops in proptest::collection::vec(
                (0u8..3, prop_oneof![0u16..40, (u16::MAX - 8)..=u16::MAX], any::<u32>()),
                0..300,
            )
        ) {
            const SLOTS: usize = 8;
            let mut table = PeerTable::<u32, SLOTS>::new(0);
            let mut model = BTreeMap::new();
            for (op, node, value) in ops {
                match op {
                    0 => {
                        let had = model.contains_key(&node);
                        let opened = table.open(node, 0).map(|v| {
                            *v = value;
                        });
                        if had || model.len() < SLOTS {
                            prop_assert!(opened.is_some());
                            model.insert(node, value);
                        } else {
                            prop_assert!(opened.is_none());
                        }
                    }
                    1 => {
                        table.remove(node);
                        model.remove(&node);
                    }
                    _ => {
                        if let Some(v) = table.get_mut(node) {
                            *v = value;
                            model.insert(node, value);
                        }
                    }
                }
                for n in (0u16..40).chain((u16::MAX - 8)..=u16::MAX) {
                    prop_assert_eq!(table.get(n).copied(), model.get(&n).copied());
                }
                let mut values: std::vec::Vec<u32> = table.values().copied().collect();
                let mut want: std::vec::Vec<u32> = model.values().copied().collect();
                values.sort_unstable();
                want.sort_unstable();
                prop_assert_eq!(values, want);
            }
        }

        /// A fabric of at most `SLOTS` nodes finds every peer in its home
        /// slot: the table then behaves as the per-node array it replaced.
        #[test]
        fn small_fabrics_sit_in_their_home_slots(
            order in Just((0u16..16).collect::<std::vec::Vec<_>>()).prop_shuffle()
        ) {
            let mut table = PeerTable::<u16, 16>::new(u16::MAX);
            for &n in &order {
                *table.open(n, 0).unwrap() = n;
            }
            for n in 0u16..16 {
                prop_assert_eq!(table.keys[usize::from(n)], Some(n));
                prop_assert_eq!(table.vals[usize::from(n)], n);
            }
        }
    }
}
