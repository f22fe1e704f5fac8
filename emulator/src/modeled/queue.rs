//! The sequencer's ordered action queue and the NICs' receive ports.
//!
//! Contract:
//! - [`ActionQueue`] pops actions in (virtual time, entity, sequence)
//!   order; the sequence number is assigned at push, so entries with equal
//!   time and entity come out in push order. Nothing else decides order.
//! - It is a radix heap over time (Ahuja, Mehlhorn, Orlin and Tarjan's,
//!   suited to discrete-event simulation, where no action is queued
//!   before the last one taken), with the entries of its base instant in
//!   a binary heap by (entity, sequence). An entry moves between buckets
//!   at most once per bit of the time, instead of log(queue) sifts per
//!   push and pop. A peek settles the base on the earliest queued time;
//!   an action queued before that base afterwards (a rank that runs
//!   ahead of the present but behind the next action) waits in a small
//!   binary heap of its own, taken first. Entries are small keys pointing
//!   into a slab of actions, so moving them moves no packet headers;
//!   popped slots are reused.
//! - The queue neither clamps times nor interprets actions: it knows
//!   nothing of ranks, NICs or the clock (the kernel passes times already
//!   brought to the present).
//! - [`Ports`] holds, per receiver, the packets waiting for its port and
//!   serves them first come, first served by the time their first bits
//!   arrive (not the order senders emitted them); the kernel keeps one
//!   live serve action per busy port in the action queue.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::board::Ps;

/// A queue entry: the ordering key and the slot of its action in
/// `ActionQueue::actions`.
#[derive(Clone, Copy, Debug)]
struct Queued {
    time: Ps,
    entity: u32,
    slot: u32,
    seq: u64,
}

/// Buckets of the radix heap: 0 holds the last instant taken, `i > 0`
/// the times whose highest bit differing from it is bit `i - 1`.
const BUCKETS: usize = 65;

/// Actions ordered by (virtual time, entity, sequence number).
#[derive(Debug)]
pub(super) struct ActionQueue<A> {
    seq: u64,
    /// The radix heap's base: every entry of `now` and `later` is at or
    /// after it.
    last: Ps,
    /// The entries at `last`, by (entity, sequence, slot).
    now: BinaryHeap<Reverse<(u32, u64, u32)>>,
    /// The later entries, by the highest bit their time differs from
    /// `last` in (bucket 0 unused: those are in `now`).
    later: Vec<Vec<Queued>>,
    /// Entries queued before `last` after a peek settled it there, by
    /// (time, entity, sequence, slot): all before the radix heap's.
    early: BinaryHeap<Reverse<(Ps, u32, u64, u32)>>,
    /// Actions of queued entries, by slot; `free` lists unused slots.
    actions: Vec<A>,
    free: Vec<u32>,
}

impl<A: Copy> ActionQueue<A> {
    pub(super) fn new() -> Self {
        Self {
            seq: 0,
            last: 0,
            now: BinaryHeap::new(),
            later: (0..BUCKETS).map(|_| Vec::new()).collect(),
            early: BinaryHeap::new(),
            actions: Vec::new(),
            free: Vec::new(),
        }
    }

    /// The bucket of `time` relative to the last instant taken.
    fn bucket(&self, time: Ps) -> usize {
        (u64::BITS - (time ^ self.last).leading_zeros()) as usize
    }

    fn file(&mut self, q: Queued) {
        match self.bucket(q.time) {
            0 => self.now.push(Reverse((q.entity, q.seq, q.slot))),
            b => self.later[b].push(q),
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
        if time < self.last {
            self.early.push(Reverse((time, entity, seq, slot)));
            return;
        }
        self.file(Queued {
            time,
            entity,
            slot,
            seq,
        });
    }

    /// Bring the earliest instant's entries into `now` (if `now` is
    /// empty): the first non-empty bucket's earliest time becomes the last
    /// instant taken, and that bucket's entries go down to lower buckets.
    fn settle(&mut self) {
        if !self.now.is_empty() {
            return;
        }
        let Some(b) = (1..BUCKETS).find(|&b| !self.later[b].is_empty()) else {
            return;
        };
        let entries = std::mem::take(&mut self.later[b]);
        self.last = entries.iter().map(|q| q.time).min().unwrap_or(self.last);
        for q in &entries {
            self.file(*q);
        }
        // Give the emptied bucket its allocation back for reuse.
        let mut entries = entries;
        entries.clear();
        if self.later[b].is_empty() {
            self.later[b] = entries;
        }
    }

    /// Take the earliest action: (time, entity, action).
    pub(super) fn pop(&mut self) -> Option<(Ps, u32, A)> {
        let (time, entity, slot) = match self.early.pop() {
            Some(Reverse((time, entity, _, slot))) => (time, entity, slot),
            None => {
                self.settle();
                let Reverse((entity, _, slot)) = self.now.pop()?;
                (self.last, entity, slot)
            }
        };
        let action = self.actions[slot as usize];
        self.free.push(slot);
        Some((time, entity, action))
    }

    /// Time and entity of the earliest action.
    pub(super) fn peek(&mut self) -> Option<(Ps, u32)> {
        if let Some(Reverse((time, entity, _, _))) = self.early.peek() {
            return Some((*time, *entity));
        }
        self.settle();
        self.now.peek().map(|Reverse((e, _, _))| (self.last, *e))
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

    /// The radix heap pops exactly what a sorted list of (time, entity,
    /// push order) would, for pushes that never go before the last pop
    /// (as the kernel's), with pops, pushes and peeks interleaved (a peek
    /// settles on the next action's time; pushes may then come before
    /// it).
    #[test]
    fn the_queue_pops_in_time_entity_push_order() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut queue = ActionQueue::new();
        let mut model: Vec<(Ps, u32, u64)> = Vec::new();
        let (mut now, mut pushed) = (0u64, 0u64);
        for _ in 0..20_000 {
            if next(5) == 0 {
                // A peek settles the base; later pushes may come before it.
                model.sort_unstable();
                assert_eq!(queue.peek(), model.first().map(|&(t, e, _)| (t, e)));
            } else if next(3) < 2 {
                // Mostly near the present, sometimes far, sometimes now.
                let time = now + [0, next(4), next(1000), next(1 << 40)][next(4) as usize];
                let entity = next(5) as u32;
                pushed += 1;
                queue.push(time, entity, pushed);
                model.push((time, entity, pushed));
            } else {
                model.sort_unstable();
                let want = (!model.is_empty()).then(|| model.remove(0));
                let got = queue.pop();
                assert_eq!(got, want);
                if let Some((t, _, _)) = got {
                    now = t;
                }
            }
        }
        model.sort_unstable();
        for want in model {
            assert_eq!(queue.pop(), Some(want));
        }
        assert_eq!(queue.pop(), None);
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
