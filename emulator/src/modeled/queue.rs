//! The sequencer's ordered action queue and the per-NIC arrival FIFOs.
//!
//! Contract:
//! - [`ActionQueue`] pops actions in (virtual time, entity, sequence)
//!   order; the sequence number is assigned at push, so entries with equal
//!   time and entity come out in push order. Nothing else decides order.
//! - Heap entries are small keys pointing into a slab of actions, so
//!   sifting moves no packet headers; popped slots are reused.
//! - The queue neither clamps times nor interprets actions: it knows
//!   nothing of ranks, NICs or the clock (the kernel passes times already
//!   brought to the present).
//! - [`Arrivals`] keeps, per receiver, items in the order they were pushed
//!   (their times never decrease: a port receives one packet at a time);
//!   the kernel keeps only each FIFO's head in the action queue.

use std::collections::{BinaryHeap, VecDeque};

use super::board::Ps;

/// A queue entry: the ordering key and the slot of its action in
/// `ActionQueue::actions`. Kept small because the heap moves entries on
/// every push and pop (actions carry packet headers).
#[derive(Debug)]
struct Queued {
    time: Ps,
    entity: u32,
    slot: u32,
    seq: u64,
}

impl Queued {
    fn key(&self) -> (Ps, u32, u64) {
        (self.time, self.entity, self.seq)
    }
}

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    /// Reversed: `BinaryHeap` is a max-heap and we pop the earliest.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key().cmp(&self.key())
    }
}

/// Actions ordered by (virtual time, entity, sequence number).
#[derive(Debug)]
pub(super) struct ActionQueue<A> {
    seq: u64,
    heap: BinaryHeap<Queued>,
    /// Actions of queued entries, by slot; `free` lists unused slots.
    actions: Vec<A>,
    free: Vec<u32>,
}

impl<A: Copy> ActionQueue<A> {
    pub(super) fn new() -> Self {
        Self {
            seq: 0,
            heap: BinaryHeap::new(),
            actions: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Queue `action` of `entity` at `time`.
    pub(super) fn push(&mut self, time: Ps, entity: u32, action: A) {
        self.seq += 1;
        let seq = self.seq;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.actions[slot as usize] = action;
                slot
            }
            None => {
                self.actions.push(action);
                (self.actions.len() - 1) as u32
            }
        };
        self.heap.push(Queued {
            time,
            entity,
            slot,
            seq,
        });
    }

    /// Take the earliest action: (time, entity, action).
    pub(super) fn pop(&mut self) -> Option<(Ps, u32, A)> {
        let item = self.heap.pop()?;
        let action = self.actions[item.slot as usize];
        self.free.push(item.slot);
        Some((item.time, item.entity, action))
    }

    /// Time and entity of the earliest action.
    pub(super) fn peek(&self) -> Option<(Ps, u32)> {
        self.heap.peek().map(|q| (q.time, q.entity))
    }
}

/// Per-receiver FIFOs of timed items, in push order.
#[derive(Debug)]
pub(super) struct Arrivals<P> {
    fifos: Vec<VecDeque<(Ps, P)>>,
}

impl<P: Clone> Arrivals<P> {
    /// `receivers` empty FIFOs.
    pub(super) fn new(receivers: usize) -> Self {
        Self {
            fifos: vec![VecDeque::new(); receivers],
        }
    }

    /// Append `item` arriving at `at` to `receiver`'s FIFO; true if it is
    /// now the head (the FIFO was empty).
    pub(super) fn push(&mut self, receiver: usize, at: Ps, item: P) -> bool {
        let fifo = &mut self.fifos[receiver];
        fifo.push_back((at, item));
        fifo.len() == 1
    }

    /// Take `receiver`'s head item.
    pub(super) fn pop(&mut self, receiver: usize) -> Option<P> {
        self.fifos
            .get_mut(receiver)
            .and_then(VecDeque::pop_front)
            .map(|(_, item)| item)
    }

    /// Arrival time of `receiver`'s head item.
    pub(super) fn head_time(&self, receiver: usize) -> Option<Ps> {
        self.fifos
            .get(receiver)
            .and_then(VecDeque::front)
            .map(|&(at, _)| at)
    }
}
