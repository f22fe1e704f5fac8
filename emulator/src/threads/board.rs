//! The firmware's hardware traits, implemented over emulated node memory,
//! the rail switch, the shared register file and the host's wakers.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crossbeam_channel::Receiver;
use railcoll_fw::abi::error::ErrorCode;
use railcoll_fw::abi::packet::PacketHeader;
use railcoll_fw::abi::{ContextIndex, MAX_CONTEXTS};
use railcoll_fw::engine::Engine;
use railcoll_fw::engine::hw::{
    BusError, Clock, HostMemory, HostWake, Link, Meter, Path, PayloadSource, PeerSet, RegisterFile,
    Siblings,
};
use railcoll_host::env::Waker;
use railcoll_mem::dma_mem::DmaMemory;

use crate::hw::nic::{EMU_EVENTS, EMU_PEERS, deliver_any, intact_any, range};
use crate::hw::registers::SharedRegisters;
use crate::hw::wire::{Payload, PayloadRef, RailPacket, Tunnel, WirePacket};
use crate::threads::rail::Rail;
use crate::timeline::{Timeline, Track};

/// The firmware engine as instantiated in the emulator.
pub type EmuEngine = Engine<EmuBoard, EMU_PEERS, EMU_EVENTS>;

/// One NIC's board.
#[derive(Debug)]
pub struct EmuBoard {
    /// This NIC's node.
    pub node: u16,
    memory: DmaMemory,
    memories: Arc<[DmaMemory]>,
    registers: Arc<SharedRegisters>,
    rail: Arc<Rail>,
    inbox: Receiver<RailPacket>,
    wakers: Arc<[Waker]>,
    epoch: Instant,
    /// The NIC's clock: the time its current poll started
    /// ([`EmuBoard::start_poll`]). One clock read per poll, where the
    /// firmware reads the time at every send, receive and timer check (a
    /// tenth of the NIC worker's time in `bench put --sizes 8` went to
    /// those reads). Within a poll the time stands, as a counter latched
    /// at the poll's start would: a poll takes microseconds (tens with a
    /// full receive budget, more if its thread is preempted), its timers
    /// milliseconds and more, and a time stamped late in a poll is early
    /// by at most that much.
    clock: std::cell::Cell<u64>,
    trace: Option<BoardTrace>,
    /// This NIC's rail, and its node's register files by rail (the
    /// NIC-to-NIC path).
    rail_index: u8,
    siblings: Arc<[Arc<SharedRegisters>]>,
    /// Every rail of the cluster, by index (the sibling paths).
    rails: Arc<[Arc<Rail>]>,
}

/// Where a threads-mode board reports its activity when the cluster is
/// traced (instants in wall time: the NIC's processor and port are not
/// modeled, so they have no spans).
#[derive(Debug)]
struct BoardTrace {
    rail: usize,
    timeline: Arc<OnceLock<Arc<Timeline>>>,
}

impl EmuBoard {
    /// Assemble a board.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        node: u16,
        memories: Arc<[DmaMemory]>,
        registers: Arc<SharedRegisters>,
        rail: Arc<Rail>,
        inbox: Receiver<RailPacket>,
        wakers: Arc<[Waker]>,
        epoch: Instant,
    ) -> Option<Self> {
        let memory = memories.get(node as usize)?.clone();
        Some(Self {
            node,
            memory,
            memories,
            registers,
            rail,
            inbox,
            wakers,
            epoch,
            clock: std::cell::Cell::new(crate::hw::notify::clock_ns(epoch)),
            trace: None,
            rail_index: 0,
            siblings: Arc::from([]),
            rails: Arc::from([]),
        })
    }

    /// Latch the NIC's clock for the poll about to run.
    pub fn start_poll(&self) {
        self.clock.set(crate::hw::notify::clock_ns(self.epoch));
    }

    /// Give the board its rail and its node's NICs' register files by rail
    /// (itself included), for `SET_EVENT` on a sibling rail.
    pub fn with_siblings(mut self, rail: u8, siblings: Arc<[Arc<SharedRegisters>]>) -> Self {
        self.rail_index = rail;
        self.siblings = siblings;
        self
    }

    /// Give the board every rail of the cluster (the sibling paths, ABI
    /// 1.5).
    pub fn with_rails(mut self, rails: Arc<[Arc<Rail>]>) -> Self {
        self.rails = rails;
        self
    }

    /// This NIC's rail.
    pub fn rail_index(&self) -> u8 {
        self.rail_index
    }

    /// Report activity to the cluster's timeline once one is attached.
    pub fn traced(mut self, rail: usize, timeline: Arc<OnceLock<Arc<Timeline>>>) -> Self {
        self.trace = Some(BoardTrace { rail, timeline });
        self
    }

    fn trace_instant(&self, on_port: bool, cat: &'static str, name: impl FnOnce() -> String) {
        let Some(t) = &self.trace else { return };
        let Some(timeline) = t.timeline.get() else {
            return;
        };
        let (node, rail) = (usize::from(self.node), t.rail);
        let track = if on_port {
            Track::Port { rail, node }
        } else {
            Track::Nic { node, rail }
        };
        let at = self.epoch.elapsed().as_nanos() as f64;
        timeline.push(track, cat, name(), at, None);
    }
}

impl HostMemory for EmuBoard {
    fn read(&mut self, phys: u64, buf: &mut [u8]) -> Result<(), BusError> {
        self.memory.read(range(phys)?, buf).map_err(|_| BusError)
    }

    fn write(&mut self, phys: u64, data: &[u8]) -> Result<(), BusError> {
        self.memory.write(range(phys)?, data).map_err(|_| BusError)
    }

    fn write_word_release(&mut self, phys: u64, value: u64) -> Result<(), BusError> {
        self.memory
            .store_u64(range(phys)?, value, std::sync::atomic::Ordering::Release)
            .map_err(|_| BusError)
    }
}

impl Link for EmuBoard {
    type Payload = Option<Payload>;

    fn send(&mut self, header: &PacketHeader, payload: Option<PayloadSource>, path: Path) -> bool {
        let payload = payload.map(|p| PayloadRef {
            node: self.node,
            phys: p.phys,
            len: p.len,
        });
        self.trace_instant(true, "packet", || {
            let len = payload.map_or(0, |p| p.len);
            format!("packet {len} B to node {}", header.dst_node.get())
        });
        let mut packet =
            WirePacket::new(*header, payload.map(Payload::Memory)).sent_at(self.now_ns());
        match Tunnel::along(path, self.rail_index, self.rails.len()) {
            Ok(None) => self.rail.switch(packet),
            Ok(Some(tunnel)) => {
                packet.tunnel = Some(tunnel);
                self.rails
                    .get(usize::from(tunnel.via))
                    .is_some_and(|rail| rail.switch(packet))
            }
            Err(_) => false,
        }
    }

    /// The receive port discards a packet whose payload fails its CRC
    /// before the firmware sees it (and counts it). A packet tunnelled
    /// for a sibling is handed to it (the NIC-to-NIC path), not seen here.
    fn recv(&mut self) -> Option<(PacketHeader, Option<Payload>, Path)> {
        loop {
            let p = self.inbox.try_recv().ok()?;
            if p.expired(self.now_ns()) {
                self.rail.count_expired();
                continue;
            }
            if !intact_any(&self.memories, &p) {
                self.rail.count_crc_discard();
                continue;
            }
            match p.tunnel {
                Some(t) if t.nic_rail != self.rail_index => {
                    if let Some(rail) = self.rails.get(usize::from(t.nic_rail)) {
                        rail.deliver(usize::from(self.node), p);
                    }
                }
                _ => return Some((p.header, p.payload, Tunnel::path(p.tunnel))),
            }
        }
    }

    fn payload_len(&self, payload: &Option<Payload>) -> usize {
        payload.as_ref().map_or(0, |p| p.len() as usize)
    }

    fn deliver(&mut self, payload: &Option<Payload>, phys: u64) -> Result<(), BusError> {
        deliver_any(&self.memory, &self.memories, payload, phys)
    }
}

impl RegisterFile for EmuBoard {
    fn reg_read(&self, offset: u32) -> u64 {
        self.registers.nic_read(offset)
    }

    fn reg_write(&mut self, offset: u32, value: u64) {
        self.registers.nic_write(offset, value);
    }

    fn take_doorbells(&mut self) -> u64 {
        self.registers.take_doorbells()
    }
}

impl Clock for EmuBoard {
    fn now_ns(&self) -> u64 {
        self.clock.get()
    }
}

impl HostWake for EmuBoard {
    fn wake(&mut self, ctx: ContextIndex) {
        let index = self.node as usize * MAX_CONTEXTS + ctx as usize;
        if let Some(w) = self.wakers.get(index) {
            w.wake();
        }
    }
}

impl Siblings for EmuBoard {
    fn peer_set(&mut self, rail: u8, set: PeerSet) -> Result<(), ErrorCode> {
        crate::hw::nic::reserve_peer_set(&self.siblings, self.rail_index, rail)?
            .peer_push(set.to_word());
        Ok(())
    }

    fn take_peer_set(&mut self) -> Option<PeerSet> {
        self.registers.peer_take().map(PeerSet::from_word)
    }

    fn peer_fifo_depth(&self) -> u8 {
        crate::hw::nic::peer_fifo_depth(&self.siblings)
    }
}

impl Meter for EmuBoard {
    fn note(&mut self, activity: railcoll_fw::engine::hw::Activity) {
        use railcoll_fw::engine::hw::Activity;
        let (cat, what) = match activity {
            Activity::Command => ("nic", "command"),
            Activity::EventFired => ("event", "event fired"),
            Activity::DmaStart { .. } => ("nic", "dma start"),
            Activity::DmaPacket { .. } => return,
        };
        self.trace_instant(false, cat, || what.into());
    }
}
