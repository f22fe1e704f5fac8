//! The sequencer's ordered action queue and the NICs' receive ports.
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
//! - [`Ports`] holds, per receiver, the packets waiting for its port and
//!   serves them first come, first served by the time their first bits
//!   arrive (not the order senders emitted them); the kernel keeps one
//!   live serve action per busy port in the action queue.

use std::collections::BinaryHeap;

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

/// One packet waiting for a receive port: ordered by the time its first
/// bit reaches the port, then by offer order (a deterministic tie-break).
#[derive(Debug)]
struct Waiting<P> {
    first_bit: Ps,
    seq: u64,
    ser: Ps,
    item: P,
}

impl<P> Waiting<P> {
    fn key(&self) -> (Ps, u64) {
        (self.first_bit, self.seq)
    }
}

impl<P> PartialEq for Waiting<P> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl<P> Eq for Waiting<P> {}
impl<P> PartialOrd for Waiting<P> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<P> Ord for Waiting<P> {
    /// Reversed: `BinaryHeap` is a max-heap and we serve the earliest.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key().cmp(&self.key())
    }
}

/// One receive port: the packets waiting for it, the one being received
/// and the serve action the kernel holds for it.
#[derive(Debug)]
struct Port<P> {
    waiting: BinaryHeap<Waiting<P>>,
    /// The packet being received and when its last bit is in.
    receiving: Option<(Ps, P)>,
    /// When the port can start the next packet.
    free: Ps,
    /// The one serve action that is live: its time and token (older ones
    /// in the action queue are stale and ignored).
    due: Option<(Ps, u32)>,
    token: u32,
}

/// What a serve did: the packet whose reception ended now, and the serve
/// action to queue next (time, token).
pub(super) struct Served<P> {
    pub(super) done: Option<P>,
    pub(super) next: Option<(Ps, u32)>,
}

/// Receive ports that take packets in the order their first bits reach
/// them, one at a time.
///
/// Senders emit packets ahead of time (a NIC queues a whole poll's worth
/// of packets, each stamped with its future departure), so emission order
/// is not arrival order: a port that reserved itself in emission order
/// would serve one early sender's whole train before a packet that reached
/// it first. Instead a packet waits here until the port serves it, and the
/// port is served only when virtual time reaches the moment it can start
/// the next packet; by then every packet whose first bit arrived earlier
/// has been offered (a sender's departure is never before its poll), so
/// the port is first come, first served by arrival. The kernel keeps one
/// live serve action per busy port, whatever the number of packets queued.
#[derive(Debug)]
pub(super) struct Ports<P> {
    ports: Vec<Port<P>>,
    seq: u64,
}

impl<P> Ports<P> {
    /// `receivers` idle ports.
    pub(super) fn new(receivers: usize) -> Self {
        Self {
            ports: (0..receivers)
                .map(|_| Port {
                    waiting: BinaryHeap::new(),
                    receiving: None,
                    free: 0,
                    due: None,
                    token: 0,
                })
                .collect(),
            seq: 0,
        }
    }

    /// Offer `item`, whose first bit reaches `port` at `first_bit` and
    /// which occupies it for `ser`. Returns the serve action to queue
    /// (time, token) if the port must now be served earlier than planned.
    pub(super) fn offer(
        &mut self,
        port: usize,
        first_bit: Ps,
        ser: Ps,
        item: P,
    ) -> Option<(Ps, u32)> {
        self.seq += 1;
        let seq = self.seq;
        let p = self.ports.get_mut(port)?;
        p.waiting.push(Waiting {
            first_bit,
            seq,
            ser,
            item,
        });
        let at = first_bit.max(p.free);
        if p.due.is_some_and(|(due, _)| due <= at) {
            return None;
        }
        p.token = p.token.wrapping_add(1);
        p.due = Some((at, p.token));
        p.due
    }

    /// Serve `port` at `now` for the action carrying `token`: end the
    /// packet being received if its last bit is in, and start the earliest
    /// arrived packet if the port is free. None if the action is stale.
    pub(super) fn serve(&mut self, port: usize, now: Ps, token: u32) -> Option<Served<P>> {
        let p = self.ports.get_mut(port)?;
        // The token alone tells the live action (it is unique per port);
        // the kernel may run it later than planned, never earlier.
        if p.due.map(|(_, t)| t) != Some(token) {
            return None;
        }
        p.due = None;
        let done = match p.receiving.take() {
            Some((end, item)) if end <= now => Some(item),
            other => {
                p.receiving = other;
                None
            }
        };
        if p.receiving.is_none()
            && p.free <= now
            && p.waiting.peek().is_some_and(|head| head.first_bit <= now)
            && let Some(w) = p.waiting.pop()
        {
            p.free = now + w.ser;
            p.receiving = Some((p.free, w.item));
        }
        let next = match (&p.receiving, p.waiting.peek()) {
            (Some((end, _)), _) => Some(*end),
            (None, Some(head)) => Some(head.first_bit.max(p.free)),
            (None, None) => None,
        };
        if let Some(at) = next {
            p.token = p.token.wrapping_add(1);
            p.due = Some((at, p.token));
        }
        Some(Served { done, next: p.due })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drive one port the way the kernel does: queue serve actions, pop
    /// them in time order, collect (packet, reception end).
    fn run(offers: &[(Ps, Ps, u32)]) -> Vec<(u32, Ps)> {
        let mut ports = Ports::new(1);
        let mut queue = ActionQueue::new();
        for &(first_bit, ser, id) in offers {
            if let Some((at, token)) = ports.offer(0, first_bit, ser, id) {
                queue.push(at, 0, token);
            }
        }
        let mut got = Vec::new();
        while let Some((now, _, token)) = queue.pop() {
            let Some(served) = ports.serve(0, now, token) else {
                continue;
            };
            if let Some(id) = served.done {
                got.push((id, now));
            }
            if let Some((at, token)) = served.next {
                queue.push(at, 0, token);
            }
        }
        got
    }

    #[test]
    fn a_port_serves_packets_in_the_order_their_first_bits_arrive() {
        // Sender A emitted a train far ahead; B's packet, emitted later,
        // reaches the port first and must not wait behind A's train.
        let got = run(&[(100, 10, 1), (200, 10, 2), (105, 10, 3)]);
        assert_eq!(got, vec![(1, 110), (3, 120), (2, 210)]);
    }

    #[test]
    fn a_busy_port_queues_and_an_idle_port_waits_for_the_first_bit() {
        let got = run(&[(0, 10, 1), (0, 10, 2), (0, 0, 3), (50, 5, 4)]);
        assert_eq!(got, vec![(1, 10), (2, 20), (3, 20), (4, 55)]);
    }
}
