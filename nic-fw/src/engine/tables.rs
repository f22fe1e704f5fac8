//! The engine's tables that keep invariants of their own: the DMA channels
//! (how many are active, the issue order, the transmit cursor), the chain
//! queue (a ring of fired commands between `head` and `tail`), the events
//! of every context (one lookup, one reset), the flows and the broadcasts.
//! Only `install` and `retire` change which DMA channels are active (the
//! engine updates an active channel's progress through `slots`), and only
//! the chain queue's methods move its ring.

use super::{BcastDest, BcastRx, BcastTx, CHAIN_RING, ChainEntry, Dma, Event, RxFlow, TxFlow};
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

/// The reliable flows to and from every node (docs/abi.md §8.1), the
/// receivers that owe an acknowledgement, and the transmit flows that have
/// packets in flight (none: no retransmission timer is due). The engine's
/// per-poll work over flows (retransmissions, timers) walks only those,
/// in node order, not every node's flow.
#[derive(Debug)]
pub(super) struct Flows<const NODES: usize> {
    pub(super) tx: [TxFlow; NODES],
    pub(super) rx: [RxFlow; NODES],
    /// Nodes owed an ack, in the order they became so: the first
    /// `acks_len` entries.
    pub(super) acks: [NodeId; NODES],
    pub(super) acks_len: usize,
    /// Nodes whose transmit flow has packets in flight, ascending: the
    /// first `busy_len` entries.
    busy: [NodeId; NODES],
    busy_len: usize,
}

impl<const NODES: usize> Flows<NODES> {
    pub(super) const NEW: Self = Self {
        tx: [TxFlow::NEW; NODES],
        rx: [RxFlow::NEW; NODES],
        acks: [0; NODES],
        acks_len: 0,
        busy: [0; NODES],
        busy_len: 0,
    };

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
    pub(super) fn next_busy(&self, from: usize) -> Option<usize> {
        let busy = self.busy();
        let at = busy.partition_point(|&n| usize::from(n) < from);
        busy.get(at).map(|&n| usize::from(n))
    }

    /// `node`'s flow has packets in flight now (it had none).
    pub(super) fn set_busy(&mut self, node: NodeId) {
        let len = self.busy_len;
        let at = self.busy().partition_point(|&n| n < node);
        if self.busy().get(at) == Some(&node) || len >= NODES {
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

/// The broadcast DMA this NIC sends (one at a time), what each
/// destination acknowledged of it, and what this NIC receives of each
/// sender's.
#[derive(Debug)]
pub(super) struct Broadcasts<const NODES: usize> {
    pub(super) tx: BcastTx,
    /// Broadcasts go through the sibling on this rail (ABI 1.5): an
    /// earlier one's destinations stayed silent past the retry limit.
    pub(super) via: Option<u8>,
    pub(super) next_id: u32,
    pub(super) dest: [BcastDest; NODES],
    pub(super) rx: [BcastRx; NODES],
}

impl<const NODES: usize> Broadcasts<NODES> {
    pub(super) const IDLE: Self = Self {
        tx: BcastTx::IDLE,
        via: None,
        next_id: 0,
        dest: [BcastDest {
            received: 0,
            status: None,
            direct: false,
        }; NODES],
        rx: [BcastRx {
            id: 0,
            next: 0,
            started: false,
            status: None,
        }; NODES],
    };
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::collections::BTreeSet;

    use super::Flows;
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
                    walked.push(n as u16);
                    from = n + 1;
                }
                prop_assert_eq!(walked, want);
            }
        }
    }
}
