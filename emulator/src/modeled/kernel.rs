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
//!
//! Parts: `super::queue` orders the actions, `super::ranks` keeps the
//! ranks' clocks and waits, `super::witness` the trace hash, the
//! watchdog and the timeline entries; this module composes them and
//! commits the actions.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use railcoll_fw::abi::MAX_CONTEXTS;
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
use super::queue::{ActionQueue, Arrivals};
use super::ranks::{RankState, Ranks, Watch};
pub use super::witness::{Stalled, TraceDigest, TraceRecord};
use super::witness::{Trace, Watchdog, hash_of, ns, trace_nic, trace_packet, trace_switch};
use crate::hw::registers::SharedRegisters;
use crate::hw::wire::{WirePacket, is_collective, is_control, route_collective};
use crate::timeline::Timeline;

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

#[derive(Debug)]
struct World {
    now: Ps,
    queue: ActionQueue<Action>,
    /// Data packets on their way into each NIC, in arrival order (a
    /// port receives one packet at a time, so their times never
    /// decrease): only each head is in `queue`, which keeps the queue as
    /// small as the number of agents instead of packets in flight.
    arrivals: Arrivals<WirePacket>,
    ranks: Ranks,
    nics: Vec<NicSlot>,
    switches: Vec<Switch>,
    rx_free: Vec<Ps>,
    copies: Vec<Vec<Ps>>,
    trace: Trace,
    stats: ModelStats,
    watchdog: Watchdog,
    /// Where spans go while a run is traced.
    timeline: Option<Arc<Timeline>>,
}

enum Next {
    Continue,
    Run(usize),
    Empty,
}

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
        let ranks = Ranks::new(&topology, sockets);
        let world = World {
            now: 0,
            queue: ActionQueue::new(),
            arrivals: Arrivals::new(nodes * rails),
            ranks,
            nics,
            switches: (0..rails).map(|_| Switch::new()).collect(),
            rx_free: vec![0; nodes * rails],
            copies: vec![Vec::new(); nodes],
            trace: Trace::new(seed),
            stats: ModelStats::default(),
            watchdog: Watchdog::new(),
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
        w.ranks.slots.get(rank).map_or(w.now, |r| r.time)
    }

    /// Counters so far.
    pub fn stats(&self) -> ModelStats {
        self.lock().stats
    }

    /// The trace digest so far.
    pub fn digest(&self) -> TraceDigest {
        let w = self.lock();
        w.trace.digest(w.now)
    }

    /// Start (or stop, with `false`) keeping every committed action.
    pub fn record(&self, on: bool) {
        self.lock().trace.record(on);
    }

    /// Take the actions recorded so far.
    pub fn take_records(&self) -> Vec<TraceRecord> {
        self.lock().trace.take_records()
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
            w.timeline.as_ref().map(|_| w.ranks.slots[rank].time)
        };
        let out = body();
        if let Some(start) = start {
            let w = self.lock();
            let end = w.ranks.slots[rank].time;
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
        self.lock().watchdog.failure().cloned().map(Stalled)
    }

    fn entity_nic(&self, nic: usize) -> u32 {
        (self.ranks + nic) as u32
    }

    fn entity_switch(&self, rail: usize) -> u32 {
        (self.ranks + self.nodes * self.rails + rail) as u32
    }

    fn push(&self, w: &mut World, time: Ps, entity: u32, action: Action) {
        let time = time.max(w.now);
        w.queue.push(time, entity, action);
    }

    fn note(w: &mut World, time: Ps, entity: u32, kind: u8, a: u64, b: u64) {
        w.trace.note(time, entity, kind, a, b);
        w.stats.events += 1;
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
        if w.ranks.resume(rank) {
            self.push(w, at, rank as u32, Action::RankRun(rank));
        }
    }

    /// Something on `node` changed: resume, at `at`, the ranks whose wait
    /// it may have satisfied (`only`: just that rank).
    fn node_changed(&self, w: &mut World, node: usize, at: Ps, only: Option<usize>) {
        // By index: this runs after every NIC write, no list copies.
        let count = w.ranks.on_node(node);
        for i in 0..count {
            let r = w.ranks.of_node(node, i);
            if only.is_some_and(|o| o != r) {
                continue;
            }
            if w.ranks.wakes_on_change(r) {
                self.resume(w, r, at);
            }
        }
    }

    /// A non-admin rank of `node` reached the kernel: a rank waiting for
    /// the node's admin lock may now get it.
    fn admin_retry(&self, w: &mut World, node: usize) {
        let now = w.now;
        let count = w.ranks.on_node(node);
        for i in 0..count {
            let r = w.ranks.of_node(node, i);
            if w.ranks.waits_admin(r) {
                self.resume(w, r, now);
            }
        }
    }

    /// Commit the next action.
    fn step(&self, w: &mut World) -> Next {
        let Some((t, e, action)) = w.queue.pop() else {
            return Next::Empty;
        };
        if w.watchdog.past_horizon(t) {
            let report = self.report(w, "virtual time passed the watchdog horizon");
            self.fail(w, report);
        }
        if w.watchdog.livelock(t) {
            let report = self.report(w, "livelock: no virtual time passes");
            self.fail(w, report);
        }
        w.now = t;
        match action {
            Action::RankRun(r) => {
                w.watchdog.progress(t);
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
                let Some(packet) = w.arrivals.pop(nic) else {
                    return Next::Continue;
                };
                if let Some(next) = w.arrivals.head_time(nic) {
                    let e = self.entity_nic(nic);
                    self.push(w, next, e, Action::ArriveData { nic });
                }
                self.arrive(w, nic, packet);
            }
            Action::SwitchIn { rail, packet } => {
                let h = hash_of(packet.header.as_bytes());
                Self::note(w, t, e, 4, h, rail as u64);
                if let Some(tl) = w.timeline.as_ref() {
                    trace_switch(tl, rail, &packet, t);
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
        let h = hash_of(packet.header.as_bytes());
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
        if w.arrivals.push(nic, at, packet) {
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
                trace_nic(tl, slot.node, slot.rail, spans.drain(..));
            }
            (slot.node, slot.rail, outcome, effects, board.ready_at())
        };
        if outcome.progressed {
            w.watchdog.progress(now);
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
                    let h = hash_of(packet.header.as_bytes());
                    w.trace.mix(&[h, depart]);
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
                    let target = w.ranks.local(node, ctx as usize);
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

    /// The watchdog's report on the run as it stands.
    fn report(&self, w: &World, why: &str) -> String {
        w.watchdog
            .report(why, self.seed, w.now, w.ranks.blocked_ranks())
    }

    /// Fail every blocked wait (once each: a rank that goes on, say to tear
    /// its communicator down, waits normally again).
    fn fail(&self, w: &mut World, report: String) {
        w.watchdog.fail(report);
        let now = w.now;
        for r in 0..w.ranks.slots.len() {
            if w.ranks.blocked(r) {
                w.ranks.slots[r].stalled = true;
                self.resume(w, r, now);
            }
        }
    }

    /// Did the watchdog end the wait `rank` just came back from?
    fn failed(&self, rank: usize) -> Result<(), Stalled> {
        let mut w = self.lock();
        if !std::mem::take(&mut w.ranks.slots[rank].stalled) {
            return Ok(());
        }
        Err(Stalled(w.watchdog.failure().cloned().unwrap_or_default()))
    }

    /// Bring `rank`'s clock and the global clock together: commit every
    /// action due before the rank's time first.
    pub(crate) fn sync(&self, rank: usize) -> Result<(), Stalled> {
        {
            let mut w = self.lock();
            let t = w.ranks.slots[rank].time.max(w.now);
            let earlier = w.queue.peek().is_some_and(|q| q < (t, rank as u32));
            if !earlier {
                w.now = t;
                w.ranks.slots[rank].time = t;
                return Ok(());
            }
            w.ranks.slots[rank].state = RankState::Ready;
            self.push(&mut w, t, rank as u32, Action::RankRun(rank));
        }
        fiber::suspend();
        self.failed(rank)
    }

    fn block(&self, rank: usize, watch: Watch) -> Result<(), Stalled> {
        {
            let mut w = self.lock();
            let admin = matches!(watch, Watch::Admin);
            w.ranks.slots[rank].state = RankState::Blocked(watch);
            if !admin {
                let node = w.ranks.slots[rank].node;
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
        let node = w.ranks.slots[rank].node;
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
        w.ranks.slots[rank].time = now + dur;
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
            w.ranks.slots[rank].time += self.costs.host_poll.max(10_000);
        }
        let _ = self.sync(rank);
    }

    /// `rank` raised a flag local rank `local` of its node may poll.
    pub(crate) fn wake_local(&self, rank: usize, local: usize) {
        let mut w = self.lock();
        let (node, socket, t) = {
            let s = &w.ranks.slots[rank];
            (s.node, s.socket, s.time)
        };
        let Some(target) = w.ranks.local(node, local) else {
            return;
        };
        let handoff = if w.ranks.slots[target].socket == socket {
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
                let slot = &mut w.ranks.slots[r];
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
        if let Some(s) = w.ranks.slots.get_mut(rank) {
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
            let now = w.now;
            w.watchdog.start(now);
            w.ranks.active = fibers.len();
            w.ranks.rendezvous.clear();
            for r in 0..fibers.len() {
                let slot = &mut w.ranks.slots[r];
                slot.time = now;
                slot.state = RankState::Ready;
                slot.step = None;
                self.push(&mut w, now, r as u32, Action::RankRun(r));
            }
        }
        loop {
            let mut w = self.lock();
            if w.watchdog.given_up(fibers.len()) {
                // Ranks that keep waiting after every stall: give up on
                // them (their fibers are unwound when dropped).
                return;
            }
            if w.ranks.active == 0 {
                // The run ends with its last rank; actions still queued
                // (acknowledgements in flight, timers) stay queued and are
                // committed in time order by the next run.
                return;
            }
            match self.step(&mut w) {
                Next::Continue => {}
                Next::Run(r) => {
                    let now = w.now;
                    let slot = &mut w.ranks.slots[r];
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
            w.ranks.rendezvous.push(rank);
            if w.ranks.rendezvous.len() < w.ranks.active {
                drop(w);
                return self.block(rank, Watch::Rendezvous);
            }
            let now = w.now;
            for r in std::mem::take(&mut w.ranks.rendezvous) {
                if r != rank {
                    w.ranks.slots[r].state = RankState::Blocked(Watch::Rendezvous);
                    self.resume(&mut w, r, now);
                }
            }
        }
        Ok(())
    }

    /// `rank` is done with this run.
    fn finish(&self, rank: usize) {
        let mut w = self.lock();
        w.ranks.slots[rank].state = RankState::Done;
        w.ranks.active = w.ranks.active.saturating_sub(1);
        // A rank waiting at a rendezvous no longer waits for this one.
        if !w.ranks.rendezvous.is_empty() && w.ranks.rendezvous.len() >= w.ranks.active {
            let now = w.now;
            for r in std::mem::take(&mut w.ranks.rendezvous) {
                self.resume(&mut w, r, now);
            }
        }
        let node = w.ranks.slots[rank].node;
        self.admin_retry(&mut w, node);
    }
}
