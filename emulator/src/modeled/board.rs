//! The firmware's hardware traits in modeled mode.
//!
//! Memory and data movement are real (the same one-copy delivery as threads
//! mode); what differs is time. The board keeps the NIC's own clock (the
//! *cursor*), starting each poll at the virtual time the kernel polls it
//! and advancing with every activity the engine reports and every host-bus
//! transfer it makes. Effects that other entities must see (packets, host
//! memory writes, wake-ups, register changes) are not acted on here: they
//! are buffered with their virtual time stamps and the kernel commits them
//! through the sequencer after the poll.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use railcoll_fw::abi::error::ErrorCode;
use railcoll_fw::abi::packet::PacketHeader;
use railcoll_fw::abi::{ContextIndex, MAX_DMAS};
use railcoll_fw::engine::Engine;
use railcoll_fw::engine::hw::{
    Activity, BusError, Clock, HostMemory, HostWake, Link, Meter, Path, PayloadSource, PeerSet,
    RegisterFile, Siblings,
};
use railcoll_mem::dma_mem::DmaMemory;

use super::profile::{Costs, transfer};
use crate::hw::nic::{EMU_EVENTS, EMU_PEERS, deliver_payload, payload_intact, range};
use crate::hw::registers::SharedRegisters;
use crate::hw::wire::{PayloadRef, Tunnel, WirePacket, is_control};

/// Virtual time, picoseconds.
pub type Ps = u64;

/// The firmware engine as instantiated in modeled mode.
pub type ModelEngine = Engine<ModelBoard, EMU_PEERS, EMU_EVENTS>;

/// Something a poll did that the kernel must commit.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Effect {
    /// A packet whose first bit leaves at `depart`, taking `ser` on a link.
    Send {
        packet: WirePacket,
        depart: Ps,
        ser: Ps,
    },
    /// `len` bytes of this node's host memory at address `addr`
    /// ([`DmaMemory::address_of`]) were written; visible to the host at `at`.
    Touched { at: Ps, addr: usize, len: usize },
    /// A NIC-owned register at BAR0 `offset` took `value` at `at`.
    RegChanged { at: Ps, offset: u32, value: u64 },
    /// The host threads of context `ctx` are woken at `at`.
    Wake { ctx: ContextIndex, at: Ps },
    /// A `PEER_SET` word reaches this node's NIC on `rail` at `at` (its
    /// FIFO entry is already reserved).
    PeerSet { rail: u8, word: u64, at: Ps },
}

/// One NIC's board in modeled mode.
#[derive(Debug)]
pub struct ModelBoard {
    node: u16,
    memory: DmaMemory,
    memories: Arc<[DmaMemory]>,
    regs: Arc<SharedRegisters>,
    costs: Costs,
    /// Host-bus free time; shared by the node's NICs when the bus is.
    pci: Arc<AtomicU64>,
    pub(crate) inbox: VecDeque<WirePacket>,
    /// The NIC processor's clock during a poll; after it, when it is free.
    pub(crate) cursor: Ps,
    /// The transmit side of the link.
    wire: Wire,
    /// Wire time of the last packet queued, for double-buffered pacing.
    last_ser: Ps,
    /// When the DMA engine can take the next DMA (one per `dma_gap`).
    dma_free: Ps,
    /// When each transmit channel's DMA is through its start-up, by
    /// channel (DMA slots, then the broadcast engine).
    dma_ready: [Ps; MAX_DMAS + 1],
    /// The channel of the packet the engine is about to send.
    sending: Option<u8>,
    pub(crate) effects: Vec<Effect>,
    /// Processor activity (start, end or None for an instant, what), kept
    /// only while a timeline is attached.
    pub(crate) spans: Option<Vec<(Ps, Option<Ps>, &'static str)>>,
    /// This NIC's rail, and its node's register files by rail (the
    /// NIC-to-NIC path).
    rail: u8,
    siblings: Arc<[Arc<SharedRegisters>]>,
    /// Packets the receive port discarded for their payload CRC.
    pub(crate) crc_discards: u64,
    /// Packets the receive port dropped past the packet lifetime.
    pub(crate) expired: u64,
}

impl ModelBoard {
    pub(crate) fn new(
        node: u16,
        memories: Arc<[DmaMemory]>,
        regs: Arc<SharedRegisters>,
        costs: Costs,
        pci: Arc<AtomicU64>,
    ) -> Option<Self> {
        Some(Self {
            node,
            memory: memories.get(node as usize)?.clone(),
            memories,
            regs,
            costs,
            pci,
            inbox: VecDeque::new(),
            cursor: 0,
            wire: Wire::default(),
            last_ser: 0,
            dma_free: 0,
            dma_ready: [0; MAX_DMAS + 1],
            sending: None,
            effects: Vec::new(),
            spans: None,
            rail: 0,
            siblings: Arc::from([]),
            crc_discards: 0,
            expired: 0,
        })
    }

    /// Give the board its rail and its node's NICs' register files by rail
    /// (itself included), for `SET_EVENT` on a sibling rail.
    pub(crate) fn with_siblings(mut self, rail: u8, siblings: Arc<[Arc<SharedRegisters>]>) -> Self {
        self.rail = rail;
        self.siblings = siblings;
        self
    }

    /// Start a poll at `now`: the processor resumes when it is free.
    pub(crate) fn begin(&mut self, now: Ps) {
        self.cursor = self.cursor.max(now);
        self.wire.forget_before(now);
    }

    /// When the NIC can usefully be polled again for transmit work: once
    /// its processor is free and the transmit engine can take the next
    /// packet (one packet of lookahead, as a double-buffered DMA engine).
    pub(crate) fn ready_at(&self) -> Ps {
        self.cursor
            .max(self.wire.free.saturating_sub(self.last_ser))
    }

    /// A host-bus transfer of `bytes` starting no earlier than the cursor;
    /// returns its end.
    fn bus(&mut self, bytes: u64) -> Ps {
        let start = self.cursor.max(self.pci.load(Ordering::Relaxed));
        let end = start + transfer(bytes, self.costs.pci_ps_per_byte);
        self.pci.store(end, Ordering::Relaxed);
        end
    }

    /// A posted write into host memory: the processor moves on when the
    /// bus has taken it; the host sees it one bus latency later.
    fn posted_write(&mut self, phys: u64, bytes: u64) {
        self.cursor = self.bus(bytes);
        self.effects.push(Effect::Touched {
            at: self.cursor + self.costs.pci_latency,
            addr: self
                .memory
                .address_of(usize::try_from(phys).unwrap_or(usize::MAX)),
            len: usize::try_from(bytes).unwrap_or(usize::MAX),
        });
    }
}

/// The transmit side of a NIC's link: busy up to `free`, and slots held
/// further ahead for packets whose DMA was still starting up when the
/// engine handed them over. A packet that is ready takes the first gap
/// that fits it, so a DMA starting up never idles the wire for DMAs
/// already sending, but never one before a held packet to the same node:
/// a flow's packets leave in sequence order (go-back-N needs it). Packets
/// to different nodes may leave out of hand-over order; receive ports
/// order arrivals by time anyway (`queue::Ports`).
#[derive(Debug, Default)]
struct Wire {
    free: Ps,
    /// Held slots (start, end, destination node), sorted, disjoint, all
    /// starting after `free` and ending after the kernel's time at the
    /// last [`Wire::forget_before`].
    ahead: VecDeque<(Ps, Ps, u16)>,
}

impl Wire {
    /// The kernel's time is `now`: no packet is placed before it any more
    /// (every placement starts at or after the time of the action that
    /// makes it), so held slots that end by then can neither fit a gap nor
    /// order a flow and are dropped. Without this, a NIC whose packets
    /// are all held (single-packet DMAs, each still in its start-up when
    /// handed over) never moves `free` and scans an ever longer list.
    fn forget_before(&mut self, now: Ps) {
        while self.ahead.front().is_some_and(|a| a.1 <= now) {
            self.ahead.pop_front();
        }
    }

    /// Place `dur` of wire time no earlier than `earliest`; `held` for a
    /// packet that waits for its own DMA's start-up (its slot is kept
    /// aside), else the wire's busy prefix grows. Returns the slot's start.
    fn place(&mut self, earliest: Ps, dur: Ps, held: bool, dst: u16) -> Ps {
        // After every held packet of its own flow.
        let after_flow = self
            .ahead
            .iter()
            .filter(|a| a.2 == dst)
            .map(|a| a.1)
            .max()
            .unwrap_or(0);
        let mut t = earliest.max(self.free).max(after_flow);
        let mut at = 0;
        for &(s, e, _) in &self.ahead {
            if t + dur <= s {
                break;
            }
            t = t.max(e);
            at += 1;
        }
        if held {
            self.ahead.insert(at, (t, t + dur, dst));
        } else {
            // Slots passed over stay where they are; the small gaps
            // before them are given up. Those that start before the new
            // busy prefix's end are a prefix of the sorted list.
            self.free = t + dur;
            while self.ahead.front().is_some_and(|a| a.0 < self.free) {
                self.ahead.pop_front();
            }
        }
        t
    }
}

impl ModelBoard {
    /// A packet a sibling NIC hands this NIC to send on its link (a
    /// sibling path, ABI 1.5), ready at `earliest`: it takes this NIC's
    /// transmit port like its own packets. Returns when it departs.
    pub(crate) fn carry_for_sibling(&mut self, earliest: Ps, ser: Ps, dst: u16) -> Ps {
        // `earliest` is a sibling's departure plus a bus hop: not before
        // the kernel's time, which is not before this board's last poll.
        let overhead = self.costs.packet_overhead;
        self.wire.place(earliest, overhead + ser, false, dst) + overhead
    }
}

impl HostMemory for ModelBoard {
    fn read(&mut self, phys: u64, buf: &mut [u8]) -> Result<(), BusError> {
        self.memory.read(range(phys)?, buf).map_err(|_| BusError)?;
        // A read waits for its completion to come back across the bus.
        self.cursor = self.bus(buf.len() as u64) + self.costs.pci_latency;
        Ok(())
    }

    fn write(&mut self, phys: u64, data: &[u8]) -> Result<(), BusError> {
        self.memory
            .write(range(phys)?, data)
            .map_err(|_| BusError)?;
        self.posted_write(phys, data.len() as u64);
        Ok(())
    }

    fn write_word_release(&mut self, phys: u64, value: u64) -> Result<(), BusError> {
        self.memory
            .store_u64(range(phys)?, value, Ordering::Release)
            .map_err(|_| BusError)?;
        self.posted_write(phys, 8);
        Ok(())
    }
}

impl Link for ModelBoard {
    type Payload = Option<PayloadRef>;

    fn send(&mut self, header: &PacketHeader, payload: Option<PayloadSource>, path: Path) -> bool {
        let Ok(tunnel) = Tunnel::along(path, self.rail, self.siblings.len()) else {
            return false;
        };
        let len = payload.map_or(0, |p| u64::from(p.len));
        // The payload crosses the host bus before it can go on the wire.
        let fetched = if len > 0 { self.bus(len) } else { self.cursor };
        let ser = transfer(
            len + self.costs.packet_header_bytes,
            self.costs.link_ps_per_byte,
        );
        let payload = payload.map(|p| PayloadRef {
            node: self.node,
            phys: p.phys,
            len: p.len,
        });
        let mut packet = WirePacket::new(*header, payload).sent_at(self.now_ns());
        packet.tunnel = tunnel;
        let start = if is_control(&packet) {
            // Acknowledgements travel back on the link level (Elan's PAck
            // on the reverse route), not queued behind this NIC's own DMAs.
            self.cursor
        } else {
            // A DMA's packets wait for its start-up, not for other DMAs':
            // DMAs started together overlap their start-up latencies, and
            // a packet whose DMA is still starting up holds a slot ahead
            // while packets of DMAs already sending fill the wire before it.
            let ready = self
                .sending
                .take()
                .and_then(|c| self.dma_ready.get(usize::from(c)).copied())
                .unwrap_or(0);
            let overhead = self.costs.packet_overhead;
            let held = ready > fetched.max(self.wire.free);
            let dst = packet.header.dst_node.get();
            let slot = self
                .wire
                .place(fetched.max(ready), overhead + ser, held, dst);
            self.last_ser = ser;
            slot + overhead
        };
        self.effects.push(Effect::Send {
            packet,
            depart: start,
            ser,
        });
        true
    }

    /// The receive port discards a packet whose payload fails its CRC
    /// before the firmware sees it (and counts it).
    fn recv(&mut self) -> Option<(PacketHeader, Option<PayloadRef>, Path)> {
        loop {
            let p = self.inbox.pop_front()?;
            if p.expired(self.now_ns()) {
                self.expired += 1;
                continue;
            }
            if payload_intact(&self.memories, &p) {
                return Some((p.header, p.payload, Tunnel::path(p.tunnel)));
            }
            self.crc_discards += 1;
        }
    }

    fn payload_len(&self, payload: &Option<PayloadRef>) -> usize {
        payload.map_or(0, |p| p.len as usize)
    }

    fn deliver(&mut self, payload: &Option<PayloadRef>, phys: u64) -> Result<(), BusError> {
        deliver_payload(&self.memory, &self.memories, payload, phys)?;
        self.posted_write(phys, payload.map_or(0, |p| u64::from(p.len)));
        Ok(())
    }
}

impl RegisterFile for ModelBoard {
    fn reg_read(&self, offset: u32) -> u64 {
        self.regs.nic_read(offset)
    }

    fn reg_write(&mut self, offset: u32, value: u64) {
        self.regs.nic_write(offset, value);
        self.effects.push(Effect::RegChanged {
            at: self.cursor,
            offset,
            value,
        });
    }

    fn take_doorbells(&mut self) -> u64 {
        self.regs.take_doorbells()
    }
}

impl Clock for ModelBoard {
    fn now_ns(&self) -> u64 {
        self.cursor / 1000
    }
}

impl HostWake for ModelBoard {
    fn wake(&mut self, ctx: ContextIndex) {
        self.effects.push(Effect::Wake {
            ctx,
            at: self.cursor + self.costs.pci_latency,
        });
    }
}

/// A sibling set is a posted write across the host bridge: it reaches the
/// other NIC one `pci.latency_ns` after the command that made it.
impl Siblings for ModelBoard {
    fn peer_set(&mut self, rail: u8, set: PeerSet) -> Result<(), ErrorCode> {
        crate::hw::nic::reserve_peer_set(&self.siblings, self.rail, rail)?;
        self.effects.push(Effect::PeerSet {
            rail,
            word: set.to_word(),
            at: self.cursor + self.costs.pci_latency,
        });
        Ok(())
    }

    fn take_peer_set(&mut self) -> Option<PeerSet> {
        self.regs.peer_take().map(PeerSet::from_word)
    }

    fn peer_fifo_depth(&self) -> u8 {
        crate::hw::nic::peer_fifo_depth(&self.siblings)
    }
}

impl Meter for ModelBoard {
    fn note(&mut self, activity: Activity) {
        let start = self.cursor;
        let (end, what) = match activity {
            Activity::Command => {
                self.cursor += self.costs.nic_command;
                (Some(self.cursor), "command")
            }
            Activity::EventFired => {
                self.cursor += self.costs.nic_event;
                (Some(self.cursor), "event fired")
            }
            // The DMA engine takes one DMA per gap (LogGP's g); the DMA's
            // packets may leave once its start-up latency has passed too.
            // Neither occupies the processor or the wire.
            Activity::DmaStart { channel } => {
                self.dma_free = self.dma_free.max(self.cursor) + self.costs.dma_gap;
                if let Some(ready) = self.dma_ready.get_mut(usize::from(channel)) {
                    *ready = self.dma_free + self.costs.dma_latency;
                }
                (None, "dma start")
            }
            Activity::DmaPacket { channel } => {
                self.sending = Some(channel);
                return;
            }
        };
        if let Some(spans) = self.spans.as_mut() {
            spans.push((start, end, what));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Wire;

    #[test]
    fn a_held_slot_does_not_idle_the_wire_for_ready_packets() {
        let mut w = Wire::default();
        assert_eq!(w.place(0, 10, false, 1), 0);
        // A DMA to node 2 still starting up holds a slot at 50..60.
        assert_eq!(w.place(50, 10, true, 2), 50);
        // Ready packets to node 1 fill the wire before it, then go around.
        assert_eq!(w.place(0, 10, false, 1), 10);
        assert_eq!(w.place(0, 30, false, 1), 20);
        assert_eq!(w.place(0, 10, false, 1), 60, "no room before the held slot");
        assert_eq!(w.free, 70);
        assert!(w.ahead.is_empty(), "{:?}", w.ahead);
    }

    #[test]
    fn a_flow_keeps_its_order_behind_its_own_held_packet() {
        let mut w = Wire::default();
        assert_eq!(w.place(50, 10, true, 3), 50);
        // A ready packet to node 3 came after the held one: it follows it.
        assert_eq!(w.place(0, 10, false, 3), 60);
        // Node 4's packets are free to go first.
        assert_eq!(w.place(0, 10, true, 4), 70);
        assert_eq!(w.place(0, 10, false, 5), 80, "no gap before the held slot");
    }

    #[test]
    fn held_slots_keep_their_order_and_never_overlap() {
        let mut w = Wire::default();
        assert_eq!(w.place(40, 10, true, 1), 40);
        assert_eq!(w.place(20, 10, true, 2), 20);
        assert_eq!(
            w.place(45, 10, true, 3),
            50,
            "after the slot it would overlap"
        );
        assert_eq!(w.ahead, vec![(20, 30, 2), (40, 50, 1), (50, 60, 3)]);
        assert_eq!(w.place(0, 25, false, 4), 60, "no gap of 25 before them");
        assert_eq!((w.free, w.ahead.len()), (85, 0));
    }

    proptest::proptest! {
        /// Dropping the held slots that end by the kernel's time changes
        /// no placement: every later one starts at or after that time.
        #[test]
        fn forgetting_past_slots_changes_no_placement(
            ops in proptest::collection::vec(
                (0u64..40, 0u64..200, 1u64..30, proptest::bool::ANY, 0u16..6),
                1..300,
            )
        ) {
            let (mut pruned, mut whole) = (Wire::default(), Wire::default());
            let mut now = 0;
            for (advance, lead, dur, held, dst) in ops {
                now += advance;
                pruned.forget_before(now);
                let earliest = now + lead;
                proptest::prop_assert_eq!(
                    pruned.place(earliest, dur, held, dst),
                    whole.place(earliest, dur, held, dst)
                );
                proptest::prop_assert_eq!(pruned.free, whole.free);
                proptest::prop_assert!(pruned.ahead.iter().all(|a| a.1 > now));
            }
        }
    }
}
