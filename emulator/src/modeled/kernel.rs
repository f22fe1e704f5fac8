//! The sequencer of modeled mode (SimGrid's "maestro",
//! [EMU-ANCH lessons 1 and 3]).
//!
//! Contract:
//! - Every cross-entity effect is an *action* in one queue ordered by
//!   (virtual time, entity id, sequence number): a rank resuming, a host
//!   register write reaching a NIC, a NIC poll, a packet arriving, a
//!   collective packet at a switch. Ties never depend on thread scheduling:
//!   the sequence number is assigned in commit order, and commits happen in
//!   queue order.
//! - One thread runs the queue (`Kernel::run`); ranks are fibers on it
//!   (real host code on their own stacks, see [`super::fiber`]), resumed
//!   by a rank action and suspended when they wait or must bring their
//!   clock to the present. NIC engines are state machines polled inline.
//! - A rank's clock runs ahead of the global clock between its
//!   interactions (host costs are charged to it); register writes are
//!   committed at the rank's time. Before a rank reads memory others write
//!   (every wait) or writes memory others poll (flags, copies), it *syncs*:
//!   the queue runs until the global clock reaches the rank's. So nothing is
//!   observed before it happened in virtual time.
//! - A blocked rank states what it waits for: words the kernel tests itself
//!   whenever a NIC writes that node's memory (no thread switch until the
//!   wait is over), or "anything on my node" for the rare generic waits.
//! - The watchdog: if the queue empties while ranks are blocked, or virtual
//!   time passes the horizon, the run stops with a report naming the seed,
//!   the virtual time and every blocked rank's pending step; blocked waits
//!   then fail with a timeout instead of hanging.
//! - Every committed action is hashed into the trace (FNV-1a 64 over its
//!   fields); the hash is the determinism witness.

use std::cell::Cell;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use railcoll_fw::abi::MAX_CONTEXTS;
use railcoll_fw::abi::packet::PacketType;
use railcoll_fw::engine::{Engine, Location};
use railcoll_fw::switch::Switch;
use railcoll_host::Topology;
use railcoll_host::env::WordWatch;
use railcoll_mem::dma_mem::DmaMemory;
use railcoll_mem::regio::RegisterIo;
use zerocopy::IntoBytes;

use super::board::{Effect, ModelBoard, ModelEngine, Ps};
use super::fiber;
use super::profile::{Costs, transfer};
use crate::rail::{WirePacket, is_collective, is_control, route_collective};
use crate::registers::SharedRegisters;
use crate::timeline::{Timeline, Track};

thread_local! {
    /// The rank this thread runs (modeled-mode rank threads only).
    static CURRENT_RANK: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The rank the calling thread runs, if it is a modeled rank thread.
pub fn current_rank() -> Option<usize> {
    CURRENT_RANK.with(Cell::get)
}

pub(crate) fn set_current_rank(rank: Option<usize>) {
    CURRENT_RANK.with(|c| c.set(rank));
}

/// A modeled run stopped by the watchdog.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Stalled(pub String);

#[derive(Clone, Copy, Debug)]
enum Action {
    RankRun(usize),
    RegWrite {
        nic: usize,
        offset: u32,
        value: u64,
    },
    NicPoll(usize),
    Arrive {
        nic: usize,
        packet: WirePacket,
    },
    /// The head of NIC `nic`'s data arrivals (see `World::arrivals`).
    ArriveData {
        nic: usize,
    },
    SwitchIn {
        rail: usize,
        packet: WirePacket,
    },
}

/// A queue entry: the ordering key and the slot of its action in
/// `World::actions`. Kept small because the heap moves entries on every
/// push and pop (actions carry packet headers).
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

#[derive(Debug)]
enum Watch {
    Words(Vec<WordWatch>),
    Any,
    Admin,
    Rendezvous,
}

impl Watch {
    fn describe(&self) -> String {
        match self {
            Watch::Words(w) => format!("{} completion word(s) or flag(s)", w.len()),
            Watch::Any => "a register or memory change on its node".into(),
            Watch::Admin => "its node's admin mailbox lock".into(),
            Watch::Rendezvous => "the other ranks (end-of-run rendezvous)".into(),
        }
    }
}

#[derive(Debug)]
enum RankState {
    Idle,
    Ready,
    Running,
    Blocked(Watch),
    Done,
}

#[derive(Debug)]
struct RankSlot {
    node: usize,
    socket: usize,
    time: Ps,
    state: RankState,
    step: Option<(u32, &'static str)>,
    /// The watchdog released this rank from a wait: the wait fails.
    stalled: bool,
}

#[derive(Debug)]
struct NicSlot {
    engine: Box<ModelEngine>,
    regs: Arc<SharedRegisters>,
    next_poll: Option<Ps>,
    node: usize,
    rail: usize,
    tails: [u64; MAX_CONTEXTS],
}

/// Counters of one cluster's modeled execution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelStats {
    /// Actions committed (rank resumes, register writes, NIC polls, packet
    /// arrivals, switch operations).
    pub events: u64,
    /// Switches into a rank's fiber.
    pub handoffs: u64,
    /// Packets put on a link.
    pub packets: u64,
}

/// The determinism witness of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceDigest {
    /// FNV-1a 64 over every committed action.
    pub hash: u64,
    /// Actions hashed.
    pub events: u64,
    /// Virtual time at the end, picoseconds.
    pub end_ps: Ps,
}

/// One committed action, for timelines (kept only when recording).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// Virtual time, picoseconds.
    pub time: Ps,
    /// Entity: rank `r` is `r`; NIC `node * rails + rail` follows the
    /// ranks; switches follow the NICs.
    pub entity: u32,
    /// 0 rank resumes, 1 register write, 2 NIC poll, 3 packet arrival,
    /// 4 switch.
    pub kind: u8,
    /// Kind-specific detail (register offset, packet type, ...).
    pub detail: u64,
}

/// Picoseconds as the timeline's nanoseconds.
fn ns(ps: Ps) -> f64 {
    ps as f64 / 1000.0
}

fn packet_name(t: PacketType) -> &'static str {
    match t {
        PacketType::Data => "data",
        PacketType::GetRequest => "get request",
        PacketType::Ack => "ack",
        PacketType::Nack => "nack",
        PacketType::Bcast => "broadcast",
        PacketType::BcastAck => "broadcast ack",
        PacketType::BarrierArrive => "barrier arrive",
        PacketType::BarrierRelease => "barrier release",
    }
}

/// A packet leaving `node`'s port on `rail`: data occupies the port
/// (a span); link-level acknowledgements travel beside it (an instant).
fn trace_packet(tl: &Timeline, node: usize, rail: usize, packet: &WirePacket, depart: Ps, ser: Ps) {
    let track = Track::Port { rail, node };
    let what = PacketType::from_raw(packet.header.ptype).map_or("packet", packet_name);
    let len = packet.payload.map_or(0, |p| p.len);
    if is_control(packet) {
        tl.push(track, "ack", what.into(), ns(depart), None);
        return;
    }
    let name = if is_collective(packet) {
        format!("{what} {len} B to the switch")
    } else {
        format!("{what} {len} B to node {}", packet.header.dst_node.get())
    };
    tl.push(track, "packet", name, ns(depart), Some(ns(depart + ser)));
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

#[derive(Debug)]
struct World {
    now: Ps,
    seq: u64,
    queue: BinaryHeap<Queued>,
    /// Data packets on their way into each NIC, in arrival order (a
    /// port receives one packet at a time, so their times never
    /// decrease): only each head is in `queue`, which keeps the queue as
    /// small as the number of agents instead of packets in flight.
    arrivals: Vec<std::collections::VecDeque<(Ps, WirePacket)>>,
    /// Actions of queued entries, by slot; `free` lists unused slots.
    actions: Vec<Action>,
    free: Vec<u32>,
    ranks: Vec<RankSlot>,
    nics: Vec<NicSlot>,
    switches: Vec<Switch>,
    rx_free: Vec<Ps>,
    copies: Vec<Vec<Ps>>,
    node_ranks: Vec<Vec<usize>>,
    hash: u64,
    hashed: u64,
    records: Option<Vec<TraceRecord>>,
    stats: ModelStats,
    failure: Option<String>,
    stalls: u64,
    active: usize,
    rendezvous: Vec<usize>,
    horizon: Ps,
    same_time: (Ps, u64),
    /// Time of the last action that moved something (for stall reports).
    last_progress: Ps,
    /// Where spans go while a run is traced.
    timeline: Option<Arc<Timeline>>,
}

enum Next {
    Continue,
    Run(usize),
    Empty,
}

/// Most actions committed at one virtual instant before the watchdog calls
/// it a livelock.
const LIVELOCK_EVENTS: u64 = 200_000_000;
/// Virtual time a run may take (from its start) before the watchdog stops it.
const HORIZON_PS: Ps = 600 * 1_000_000_000_000;

/// NIC register files, per node, by rail.
pub(crate) type RegsByNode = Vec<Vec<Arc<SharedRegisters>>>;

/// The sequencer and everything it owns.
#[derive(Debug)]
pub struct Kernel {
    world: Mutex<World>,
    costs: Costs,
    seed: u64,
    nodes: usize,
    rails: usize,
    ranks: usize,
    /// A timeline is attached (checked without the lock on every wait).
    tracing: AtomicBool,
}

impl Kernel {
    /// Build the model of a cluster: one engine per (node, rail) on a
    /// modeled board, NIC register files (returned per node, by rail).
    pub(crate) fn new(
        topology: Topology,
        rails: usize,
        sockets: usize,
        costs: Costs,
        seed: u64,
        memories: Arc<[DmaMemory]>,
    ) -> std::io::Result<(Arc<Kernel>, RegsByNode)> {
        let nodes = topology.nodes();
        let size = topology.size();
        let mut regs_by_node: RegsByNode = vec![Vec::new(); nodes];
        let mut specs = Vec::new();
        for (node, node_regs) in regs_by_node.iter_mut().enumerate() {
            let pci = Arc::new(AtomicU64::new(0));
            for rail in 0..rails {
                let regs = SharedRegisters::new(None);
                node_regs.push(Arc::clone(&regs));
                let pci = if costs.pci_shared {
                    Arc::clone(&pci)
                } else {
                    Arc::new(AtomicU64::new(0))
                };
                specs.push((node, rail, regs, pci));
            }
        }
        // Engines are large: build them on a thread with a big stack.
        let mems = Arc::clone(&memories);
        let nics: Vec<NicSlot> = std::thread::Builder::new()
            .name("model-build".into())
            .stack_size(64 << 20)
            .spawn(move || {
                specs
                    .into_iter()
                    .map(|(node, rail, regs, pci)| {
                        let board = ModelBoard::new(
                            node as u16,
                            Arc::clone(&mems),
                            Arc::clone(&regs),
                            costs,
                            pci,
                        )
                        .expect("node memory exists for every node");
                        let loc = Location {
                            node: node as u16,
                            rail: rail as u8,
                        };
                        NicSlot {
                            engine: Box::new(Engine::new(board, loc)),
                            regs,
                            next_poll: None,
                            node,
                            rail,
                            tails: [0; MAX_CONTEXTS],
                        }
                    })
                    .collect()
            })?
            .join()
            .map_err(|_| std::io::Error::other("building the NIC models failed"))?;
        let rpn = topology.ranks_per_node();
        let mut node_ranks = vec![Vec::new(); nodes];
        let ranks = (0..size)
            .map(|r| {
                let (node, local) = topology.locate(r).unwrap_or((0, 0));
                if let Some(list) = node_ranks.get_mut(node) {
                    list.push(r);
                }
                RankSlot {
                    node,
                    socket: local * sockets / rpn,
                    time: 0,
                    state: RankState::Idle,
                    step: None,
                    stalled: false,
                }
            })
            .collect();
        // node_ranks[node][local] must be the rank with that local index.
        for list in &mut node_ranks {
            list.sort_by_key(|&r| topology.locate(r).map_or(0, |(_, l)| l));
        }
        let world = World {
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            arrivals: vec![std::collections::VecDeque::new(); nodes * rails],
            actions: Vec::new(),
            free: Vec::new(),
            ranks,
            nics,
            switches: (0..rails).map(|_| Switch::new()).collect(),
            rx_free: vec![0; nodes * rails],
            copies: vec![Vec::new(); nodes],
            node_ranks,
            hash: fnv(FNV_OFFSET, &seed.to_le_bytes()),
            hashed: 0,
            records: None,
            stats: ModelStats::default(),
            failure: None,
            stalls: 0,
            active: 0,
            rendezvous: Vec::new(),
            horizon: HORIZON_PS,
            same_time: (0, 0),
            last_progress: 0,
            timeline: None,
        };
        let kernel = Arc::new(Kernel {
            world: Mutex::new(world),
            costs,
            seed,
            nodes,
            rails,
            ranks: size,
            tracing: AtomicBool::new(false),
        });
        {
            let mut w = kernel.lock();
            for nic in 0..nodes * rails {
                kernel.schedule_poll(&mut w, nic, 0);
            }
        }
        Ok((kernel, regs_by_node))
    }

    fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The seed the run was started with (recorded in reports and hashes).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Current global virtual time, picoseconds.
    pub fn now_ps(&self) -> Ps {
        self.lock().now
    }

    /// Virtual time of `rank`'s clock, picoseconds.
    pub fn rank_time_ps(&self, rank: usize) -> Ps {
        let w = self.lock();
        w.ranks.get(rank).map_or(w.now, |r| r.time)
    }

    /// Counters so far.
    pub fn stats(&self) -> ModelStats {
        self.lock().stats
    }

    /// The trace digest so far.
    pub fn digest(&self) -> TraceDigest {
        let w = self.lock();
        TraceDigest {
            hash: w.hash,
            events: w.hashed,
            end_ps: w.now,
        }
    }

    /// Start (or stop, with `false`) keeping every committed action.
    pub fn record(&self, on: bool) {
        self.lock().records = on.then(Vec::new);
    }

    /// Take the actions recorded so far.
    pub fn take_records(&self) -> Vec<TraceRecord> {
        self.lock()
            .records
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Send spans of ranks, NICs, ports and switches to `timeline` (None:
    /// stop).
    pub fn set_timeline(&self, timeline: Option<Arc<Timeline>>) {
        let mut w = self.lock();
        for slot in &mut w.nics {
            slot.engine.hardware_mut().spans = timeline.is_some().then(Vec::new);
        }
        self.tracing.store(timeline.is_some(), Ordering::Relaxed);
        w.timeline = timeline;
    }

    /// Run `body` (a hook of `rank` that may block or take time) and, when
    /// traced, record it as a span of the rank from its clock before to
    /// its clock after.
    fn traced<T>(
        &self,
        rank: usize,
        cat: &'static str,
        name: impl FnOnce() -> String,
        body: impl FnOnce() -> T,
    ) -> T {
        if !self.tracing.load(Ordering::Relaxed) {
            return body();
        }
        let start = {
            let w = self.lock();
            w.timeline.as_ref().map(|_| w.ranks[rank].time)
        };
        let out = body();
        if let Some(start) = start {
            let w = self.lock();
            let end = w.ranks[rank].time;
            if let Some(tl) = w.timeline.as_ref()
                && end > start
            {
                tl.rank_span(rank, cat, name(), ns(start), ns(end));
            }
        }
        out
    }

    /// The watchdog's report, if the last run stalled.
    pub fn failure(&self) -> Option<Stalled> {
        self.lock().failure.clone().map(Stalled)
    }

    fn entity_nic(&self, nic: usize) -> u32 {
        (self.ranks + nic) as u32
    }

    fn entity_switch(&self, rail: usize) -> u32 {
        (self.ranks + self.nodes * self.rails + rail) as u32
    }

    fn push(&self, w: &mut World, time: Ps, entity: u32, action: Action) {
        w.seq += 1;
        let seq = w.seq;
        let slot = match w.free.pop() {
            Some(slot) => {
                w.actions[slot as usize] = action;
                slot
            }
            None => {
                w.actions.push(action);
                (w.actions.len() - 1) as u32
            }
        };
        w.queue.push(Queued {
            time: time.max(w.now),
            entity,
            slot,
            seq,
        });
    }

    fn note(w: &mut World, time: Ps, entity: u32, kind: u8, a: u64, b: u64) {
        let mut h = w.hash;
        for v in [time, u64::from(entity), u64::from(kind), a, b] {
            h = fnv(h, &v.to_le_bytes());
        }
        w.hash = h;
        w.hashed += 1;
        w.stats.events += 1;
        if let Some(r) = w.records.as_mut() {
            r.push(TraceRecord {
                time,
                entity,
                kind,
                detail: a,
            });
        }
    }

    fn schedule_poll(&self, w: &mut World, nic: usize, at: Ps) {
        let at = at.max(w.now);
        let Some(slot) = w.nics.get_mut(nic) else {
            return;
        };
        if slot.next_poll.is_some_and(|p| p <= at) {
            return;
        }
        slot.next_poll = Some(at);
        let entity = self.entity_nic(nic);
        self.push(w, at, entity, Action::NicPoll(nic));
    }

    fn resume(&self, w: &mut World, rank: usize, at: Ps) {
        let Some(slot) = w.ranks.get_mut(rank) else {
            return;
        };
        if !matches!(slot.state, RankState::Blocked(_)) {
            return;
        }
        slot.state = RankState::Ready;
        self.push(w, at, rank as u32, Action::RankRun(rank));
    }

    /// Something on `node` changed: resume, at `at`, the ranks whose wait
    /// it may have satisfied (`only`: just that rank).
    fn node_changed(&self, w: &mut World, node: usize, at: Ps, only: Option<usize>) {
        // By index: this runs after every NIC write, no list copies.
        let count = w.node_ranks.get(node).map_or(0, Vec::len);
        for i in 0..count {
            let r = w.node_ranks[node][i];
            if only.is_some_and(|o| o != r) {
                continue;
            }
            let ready = match &w.ranks[r].state {
                RankState::Blocked(Watch::Words(words)) => words.iter().all(WordWatch::ready),
                RankState::Blocked(Watch::Any) => true,
                _ => false,
            };
            if ready {
                self.resume(w, r, at);
            }
        }
    }

    /// A non-admin rank of `node` reached the kernel: a rank waiting for
    /// the node's admin lock may now get it.
    fn admin_retry(&self, w: &mut World, node: usize) {
        let now = w.now;
        let count = w.node_ranks.get(node).map_or(0, Vec::len);
        for i in 0..count {
            let r = w.node_ranks[node][i];
            if matches!(w.ranks[r].state, RankState::Blocked(Watch::Admin)) {
                self.resume(w, r, now);
            }
        }
    }

    /// Commit the next action.
    fn step(&self, w: &mut World) -> Next {
        let Some(item) = w.queue.pop() else {
            return Next::Empty;
        };
        let action = w.actions[item.slot as usize];
        w.free.push(item.slot);
        if item.time > w.horizon {
            let report = self.report(w, "virtual time passed the watchdog horizon");
            self.fail(w, report);
            w.horizon = item.time.saturating_add(HORIZON_PS);
        }
        if item.time == w.same_time.0 {
            w.same_time.1 += 1;
            if w.same_time.1 > LIVELOCK_EVENTS {
                let report = self.report(w, "livelock: no virtual time passes");
                self.fail(w, report);
                w.same_time.1 = 0;
            }
        } else {
            w.same_time = (item.time, 0);
        }
        w.now = item.time;
        let (t, e) = (item.time, item.entity);
        match action {
            Action::RankRun(r) => {
                w.last_progress = t;
                Self::note(w, t, e, 0, r as u64, 0);
                return Next::Run(r);
            }
            Action::RegWrite { nic, offset, value } => {
                Self::note(w, t, e, 1, u64::from(offset), value);
                if let Some(slot) = w.nics.get(nic) {
                    slot.regs.write(offset, value);
                    if SharedRegisters::is_doorbell(offset) {
                        self.schedule_poll(w, nic, t);
                    }
                }
            }
            Action::NicPoll(nic) => {
                if w.nics.get(nic).and_then(|s| s.next_poll) != Some(t) {
                    return Next::Continue; // superseded by an earlier poll
                }
                self.poll(w, nic);
            }
            Action::Arrive { nic, packet } => self.arrive(w, nic, packet),
            Action::ArriveData { nic } => {
                let Some((_, packet)) = w.arrivals.get_mut(nic).and_then(|q| q.pop_front()) else {
                    return Next::Continue;
                };
                if let Some(&(next, _)) = w.arrivals[nic].front() {
                    let e = self.entity_nic(nic);
                    self.push(w, next, e, Action::ArriveData { nic });
                }
                self.arrive(w, nic, packet);
            }
            Action::SwitchIn { rail, packet } => {
                let h = fnv(FNV_OFFSET, packet.header.as_bytes());
                Self::note(w, t, e, 4, h, rail as u64);
                if let Some(tl) = w.timeline.as_ref() {
                    let what =
                        PacketType::from_raw(packet.header.ptype).map_or("packet", packet_name);
                    tl.push(Track::Switch { rail }, "switch", what.into(), ns(t), None);
                }
                let mut out = Vec::new();
                if let Some(sw) = w.switches.get_mut(rail) {
                    route_collective(sw, packet, &mut |node, p| out.push((node, p)));
                }
                let ser = transfer(
                    u64::from(packet.payload.map_or(0, |p| p.len)) + self.costs.packet_header_bytes,
                    self.costs.link_ps_per_byte,
                );
                for (node, p) in out {
                    let nic = node * self.rails + rail;
                    self.transmit(w, nic, t + self.costs.switch_collective, ser, p);
                }
            }
        }
        Next::Continue
    }

    /// Packet `packet` has arrived at NIC `nic` (now).
    fn arrive(&self, w: &mut World, nic: usize, packet: WirePacket) {
        let t = w.now;
        let e = self.entity_nic(nic);
        let h = fnv(FNV_OFFSET, packet.header.as_bytes());
        Self::note(
            w,
            t,
            e,
            3,
            h,
            u64::from(packet.payload.map_or(0, |p| p.len)),
        );
        if let Some(slot) = w.nics.get_mut(nic) {
            slot.engine.hardware_mut().inbox.push_back(packet);
            self.schedule_poll(w, nic, t);
        }
    }

    /// A packet whose first bit reaches NIC `nic`'s port at `first_bit`.
    /// Data queues for the receiving port; acknowledgements travel on the
    /// link level beside it.
    fn transmit(&self, w: &mut World, nic: usize, first_bit: Ps, ser: Ps, packet: WirePacket) {
        let Some(free) = w.rx_free.get_mut(nic) else {
            return; // no such node: the packet is lost, the sender retries
        };
        let at = if is_control(&packet) {
            first_bit + ser
        } else {
            let start = first_bit.max(*free);
            *free = start + ser;
            start + ser
        };
        let entity = self.entity_nic(nic);
        if is_control(&packet) {
            self.push(w, at, entity, Action::Arrive { nic, packet });
            return;
        }
        let queue = &mut w.arrivals[nic];
        queue.push_back((at, packet));
        if queue.len() == 1 {
            self.push(w, at, entity, Action::ArriveData { nic });
        }
    }

    fn poll(&self, w: &mut World, nic: usize) {
        let now = w.now;
        let entity = self.entity_nic(nic);
        let (node, rail, outcome, effects, ready_at) = {
            let slot = &mut w.nics[nic];
            slot.next_poll = None;
            slot.engine.hardware_mut().begin(now);
            let outcome = slot.engine.poll();
            let board = slot.engine.hardware_mut();
            let effects = std::mem::take(&mut board.effects);
            if let (Some(tl), Some(spans)) = (w.timeline.as_ref(), board.spans.as_mut()) {
                let track = Track::Nic {
                    node: slot.node,
                    rail: slot.rail,
                };
                for (start, end, what) in spans.drain(..) {
                    let cat = if what == "event fired" {
                        "event"
                    } else {
                        "nic"
                    };
                    tl.push(track, cat, what.into(), ns(start), end.map(ns));
                }
            }
            (slot.node, slot.rail, outcome, effects, board.ready_at())
        };
        if outcome.progressed {
            w.last_progress = now;
        }
        Self::note(
            w,
            now,
            entity,
            2,
            effects.len() as u64,
            u64::from(outcome.progressed) | (u64::from(outcome.pending) << 1),
        );
        let mut touched: Option<Ps> = None;
        for effect in &effects {
            match *effect {
                Effect::Send {
                    packet,
                    depart,
                    ser,
                } => {
                    w.stats.packets += 1;
                    let h = fnv(FNV_OFFSET, packet.header.as_bytes());
                    w.hash = fnv(w.hash, &h.to_le_bytes());
                    w.hash = fnv(w.hash, &depart.to_le_bytes());
                    if let Some(tl) = w.timeline.as_ref() {
                        trace_packet(tl, node, rail, &packet, depart, ser);
                    }
                    let first_bit = depart + self.costs.link_latency;
                    if is_collective(&packet) {
                        let at = first_bit + ser;
                        let e = self.entity_switch(rail);
                        self.push(w, at, e, Action::SwitchIn { rail, packet });
                    } else {
                        let dst = packet.header.dst_node.get() as usize;
                        if dst < self.nodes {
                            self.transmit(w, dst * self.rails + rail, first_bit, ser, packet);
                        }
                    }
                }
                Effect::Touched { at } | Effect::RegChanged { at } => {
                    touched = Some(touched.map_or(at, |t: Ps| t.max(at)));
                }
                Effect::Wake { ctx, at } => {
                    let target = w
                        .node_ranks
                        .get(node)
                        .and_then(|l| l.get(ctx as usize))
                        .copied();
                    if let Some(r) = target {
                        self.node_changed(w, node, at + self.costs.host_poll, Some(r));
                    }
                }
            }
        }
        if let Some(at) = touched {
            self.node_changed(w, node, at + self.costs.host_poll, None);
        }
        if outcome.pending && outcome.progressed {
            self.schedule_poll(w, nic, ready_at.max(now));
        }
        if let Some(t) = outcome.timer_ns {
            self.schedule_poll(w, nic, t.saturating_mul(1000));
        }
    }

    fn report(&self, w: &World, why: &str) -> String {
        let mut s = format!(
            "modeled run stalled: {why} (seed {}, virtual time {:.3} us, last progress at {:.3} us)",
            self.seed,
            w.now as f64 / 1e6,
            w.last_progress as f64 / 1e6
        );
        let mut shown = 0;
        for (r, slot) in w.ranks.iter().enumerate() {
            if let RankState::Blocked(watch) = &slot.state {
                if shown < 16 {
                    let step = slot
                        .step
                        .map_or_else(String::new, |(i, what)| format!(" at step {i} ({what})"));
                    s.push_str(&format!("; rank {r}{step} waits for {}", watch.describe()));
                }
                shown += 1;
            }
        }
        if shown > 16 {
            s.push_str(&format!("; and {} more blocked ranks", shown - 16));
        }
        s
    }

    /// Fail every blocked wait (once each: a rank that goes on, say to tear
    /// its communicator down, waits normally again).
    fn fail(&self, w: &mut World, report: String) {
        // The watchdog speaks on stderr too: the waits it fails only carry a
        // timeout.
        eprintln!("railcoll watchdog: {report}");
        w.failure = Some(report);
        w.stalls += 1;
        let now = w.now;
        for r in 0..w.ranks.len() {
            if matches!(w.ranks[r].state, RankState::Blocked(_)) {
                w.ranks[r].stalled = true;
                self.resume(w, r, now);
            }
        }
    }

    /// Did the watchdog end the wait `rank` just came back from?
    fn failed(&self, rank: usize) -> Result<(), Stalled> {
        let mut w = self.lock();
        if !std::mem::take(&mut w.ranks[rank].stalled) {
            return Ok(());
        }
        Err(Stalled(w.failure.clone().unwrap_or_default()))
    }

    /// Bring `rank`'s clock and the global clock together: commit every
    /// action due before the rank's time first.
    pub(crate) fn sync(&self, rank: usize) -> Result<(), Stalled> {
        {
            let mut w = self.lock();
            let t = w.ranks[rank].time.max(w.now);
            let earlier = w
                .queue
                .peek()
                .is_some_and(|q| (q.time, q.entity) < (t, rank as u32));
            if !earlier {
                w.now = t;
                w.ranks[rank].time = t;
                return Ok(());
            }
            w.ranks[rank].state = RankState::Ready;
            self.push(&mut w, t, rank as u32, Action::RankRun(rank));
        }
        fiber::suspend();
        self.failed(rank)
    }

    fn block(&self, rank: usize, watch: Watch) -> Result<(), Stalled> {
        {
            let mut w = self.lock();
            let admin = matches!(watch, Watch::Admin);
            w.ranks[rank].state = RankState::Blocked(watch);
            if !admin {
                let node = w.ranks[rank].node;
                self.admin_retry(&mut w, node);
            }
        }
        fiber::suspend();
        self.failed(rank)
    }

    /// Block `rank` until `ready()`.
    pub(crate) fn wait_until(
        &self,
        rank: usize,
        ready: &mut dyn FnMut() -> bool,
    ) -> Result<(), Stalled> {
        self.traced(
            rank,
            "wait",
            || "wait".into(),
            || loop {
                self.sync(rank)?;
                if ready() {
                    return Ok(());
                }
                self.block(rank, Watch::Any)?;
            },
        )
    }

    /// Block `rank` until every word passes its test.
    pub(crate) fn wait_words(&self, rank: usize, words: &[WordWatch]) -> Result<(), Stalled> {
        self.traced(
            rank,
            "wait",
            || format!("wait: {} word(s)", words.len()),
            || loop {
                self.sync(rank)?;
                if words.iter().all(WordWatch::ready) {
                    return Ok(());
                }
                self.block(rank, Watch::Words(words.to_vec()))?;
            },
        )
    }

    /// Block `rank` until its node's admin lock may be free.
    pub(crate) fn wait_admin(&self, rank: usize) -> Result<(), Stalled> {
        self.block(rank, Watch::Admin)
    }

    /// `rank` copies `bytes` with its CPU: the time depends on how many
    /// copies share the node's memory bandwidth at that moment.
    pub(crate) fn host_copy(&self, rank: usize, bytes: usize, cross_socket: bool) {
        if self.sync(rank).is_err() {
            return;
        }
        let c = &self.costs;
        let mut w = self.lock();
        let now = w.now;
        let node = w.ranks[rank].node;
        let active = {
            let copies = &mut w.copies[node];
            copies.retain(|&end| end > now);
            copies.len() as f64 + 1.0
        };
        let core = if cross_socket {
            c.memcpy_xsocket_ps_per_byte
        } else {
            c.memcpy_ps_per_byte
        };
        let dur = transfer(bytes as u64, core.max(c.memory_ps_per_byte * active));
        w.copies[node].push(now + dur);
        w.ranks[rank].time = now + dur;
        if let Some(tl) = w.timeline.as_ref() {
            let name = if cross_socket {
                format!("copy {bytes} B (cross-socket)")
            } else {
                format!("copy {bytes} B")
            };
            tl.rank_span(rank, "shm", name, ns(now), ns(now + dur));
        }
    }

    /// `rank` polled something that was not ready: a poll's worth of
    /// virtual time passes (at least 10 ns, so that a spinning rank always
    /// lets the model move).
    pub(crate) fn idle_poll(&self, rank: usize) {
        {
            let mut w = self.lock();
            w.ranks[rank].time += self.costs.host_poll.max(10_000);
        }
        let _ = self.sync(rank);
    }

    /// `rank` raised a flag local rank `local` of its node may poll.
    pub(crate) fn wake_local(&self, rank: usize, local: usize) {
        let mut w = self.lock();
        let (node, socket, t) = {
            let s = &w.ranks[rank];
            (s.node, s.socket, s.time)
        };
        let Some(target) = w.node_ranks.get(node).and_then(|l| l.get(local)).copied() else {
            return;
        };
        let handoff = if w.ranks[target].socket == socket {
            self.costs.cacheline
        } else {
            self.costs.cacheline_xsocket
        };
        // The kernel polls on the target's behalf; it sees the line once
        // the hand-off is done.
        self.node_changed(&mut w, node, t + handoff, Some(target));
    }

    /// `rank` (or, with `None`, a setup thread) writes a NIC register. The
    /// host pays the post; the NIC sees it one bus latency later.
    pub(crate) fn post_register(&self, rank: Option<usize>, nic: usize, offset: u32, value: u64) {
        let c = &self.costs;
        let mut w = self.lock();
        let mut cost = c.host_post;
        let mut commands = 0;
        if let Some(ctx) = railcoll_fw::abi::regs::CQ_TAIL.context_of(offset)
            && let Some(slot) = w.nics.get_mut(nic)
            && let Some(tail) = slot.tails.get_mut(ctx as usize)
        {
            commands = value.wrapping_sub(*tail).min(1 << 20);
            cost += c.host_command * commands;
            *tail = value;
        }
        let at = match rank {
            Some(r) => {
                let slot = &mut w.ranks[r];
                let start = slot.time;
                slot.time += cost;
                let end = slot.time;
                if let Some(tl) = w.timeline.as_ref() {
                    let name = match commands {
                        0 => format!("register write to NIC {nic}"),
                        n => format!("post {n} command(s) to NIC {nic}"),
                    };
                    tl.rank_span(r, "put", name, ns(start), ns(end));
                }
                end + c.pci_latency
            }
            None => w.now,
        };
        let entity = self.entity_nic(nic);
        self.push(&mut w, at, entity, Action::RegWrite { nic, offset, value });
    }

    /// Record which schedule step `rank` is at (for watchdog reports).
    pub(crate) fn at_step(&self, rank: usize, step: u32, what: &'static str) {
        let mut w = self.lock();
        if let Some(s) = w.ranks.get_mut(rank) {
            s.step = Some((step, what));
            let t = s.time;
            if let Some(tl) = w.timeline.as_ref() {
                tl.step(rank, step, what, ns(t));
            }
        }
    }

    /// Drive the queue from a thread that is not a rank until `ready()`
    /// (cluster set-up: no rank runs yet).
    pub(crate) fn drive_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), Stalled> {
        loop {
            if ready() {
                return Ok(());
            }
            let mut w = self.lock();
            match self.step(&mut w) {
                Next::Continue => {}
                Next::Run(_) | Next::Empty => {
                    drop(w);
                    if ready() {
                        return Ok(());
                    }
                    let w = self.lock();
                    return Err(Stalled(self.report(&w, "set-up made no progress")));
                }
            }
        }
    }

    /// Run every rank's fiber under the sequencer until all are done (or
    /// the watchdog stopped the run); `fibers[r]` is rank `r`, and `done(r,
    /// value)` receives what a fiber returned.
    pub(crate) fn run<T>(
        &self,
        fibers: &mut [corosensei::ScopedCoroutineRef<
            '_,
            (),
            (),
            T,
            corosensei::stack::DefaultStack,
        >],
        done: &mut dyn FnMut(usize, T),
    ) {
        {
            let mut w = self.lock();
            w.failure = None;
            w.stalls = 0;
            w.active = fibers.len();
            w.rendezvous.clear();
            let now = w.now;
            w.horizon = now.saturating_add(HORIZON_PS);
            for r in 0..fibers.len() {
                let slot = &mut w.ranks[r];
                slot.time = now;
                slot.state = RankState::Ready;
                slot.step = None;
                self.push(&mut w, now, r as u32, Action::RankRun(r));
            }
        }
        loop {
            let mut w = self.lock();
            if w.stalls > 2 * fibers.len() as u64 {
                // Ranks that keep waiting after every stall: give up on
                // them (their fibers are unwound when dropped).
                return;
            }
            if w.active == 0 {
                // The run ends with its last rank; actions still queued
                // (acknowledgements in flight, timers) stay queued and are
                // committed in time order by the next run.
                return;
            }
            match self.step(&mut w) {
                Next::Continue => {}
                Next::Run(r) => {
                    let now = w.now;
                    let slot = &mut w.ranks[r];
                    slot.state = RankState::Running;
                    slot.time = now;
                    w.stats.handoffs += 1;
                    drop(w);
                    let Some(fiber) = fibers.get_mut(r) else {
                        continue;
                    };
                    set_current_rank(Some(r));
                    let out = fiber.as_mut().resume(());
                    set_current_rank(None);
                    if let corosensei::CoroutineResult::Return(v) = out {
                        self.finish(r);
                        done(r, v);
                    }
                }
                Next::Empty => {
                    let report = self.report(&w, "deadlock: no event can make progress");
                    self.fail(&mut w, report);
                }
            }
        }
    }

    /// Every rank of the run meets here (opening and end of a run); the
    /// last to arrive releases the others at its time.
    pub(crate) fn rendezvous(&self, rank: usize) -> Result<(), Stalled> {
        self.sync(rank)?;
        {
            let mut w = self.lock();
            w.rendezvous.push(rank);
            if w.rendezvous.len() < w.active {
                drop(w);
                return self.block(rank, Watch::Rendezvous);
            }
            let now = w.now;
            for r in std::mem::take(&mut w.rendezvous) {
                if r != rank {
                    w.ranks[r].state = RankState::Blocked(Watch::Rendezvous);
                    self.resume(&mut w, r, now);
                }
            }
        }
        Ok(())
    }

    /// `rank` is done with this run.
    fn finish(&self, rank: usize) {
        let mut w = self.lock();
        w.ranks[rank].state = RankState::Done;
        w.active = w.active.saturating_sub(1);
        // A rank waiting at a rendezvous no longer waits for this one.
        if !w.rendezvous.is_empty() && w.rendezvous.len() >= w.active {
            let now = w.now;
            for r in std::mem::take(&mut w.rendezvous) {
                self.resume(&mut w, r, now);
            }
        }
        let node = w.ranks[rank].node;
        self.admin_retry(&mut w, node);
    }
}
