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
//!   when a NIC writes one of them, or writes that node's memory after a
//!   rank of the node ran (no thread switch until the wait is over), or
//!   "anything on my node" for the rare generic waits.
//! - The watchdog: if the queue empties while ranks are blocked, or virtual
//!   time passes the horizon, the run stops with a report naming the seed,
//!   the virtual time and every blocked rank's pending step; blocked waits
//!   then fail with a timeout instead of hanging.
//! - Every committed action is hashed into the trace (a word-at-a-time
//!   fold over its fields); the hash is the determinism witness.
//!
//! Parts: `super::queue` orders the actions, `super::ranks` keeps the
//! ranks' clocks and waits, `super::witness` the trace hash, the
//! watchdog and the timeline entries; this module composes them and
//! commits the actions, with its NIC side (`nic_side`: arrivals,
//! transmissions, engine polls) and the calls ranks make (`rank_calls`:
//! sync, waits, host costs, register writes) in modules of their own.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use railcoll_fw::abi::MAX_CONTEXTS;
use railcoll_fw::abi::regs;
use railcoll_fw::engine::{Engine, Location};
use railcoll_fw::switch::Switch;
use railcoll_host::Topology;
use railcoll_host::env::{LibraryWork, WordWatch};
use railcoll_mem::dma_mem::DmaMemory;
use railcoll_mem::regio::RegisterIo;
use zerocopy::IntoBytes;

use super::board::{Effect, ModelBoard, ModelEngine, Ps};
use super::fiber;
use super::profile::{Costs, transfer};
use super::queue::{ActionQueue, Ports};
use super::ranks::{RankState, Ranks, Watch};
use super::witness::{
    ProgressMeter, Trace, Watchdog, hash_of, ns, trace_nic, trace_packet, trace_switch,
};
pub use super::witness::{Stalled, TraceDigest, TraceRecord};
use crate::hw::faults::{Fate, FaultCounts, FaultSpec, RailFaults, stall_note};
use crate::hw::registers::SharedRegisters;
use crate::hw::wire::{WirePacket, is_collective, is_control, route_collective};
use crate::timeline::Timeline;

mod nic_side;
mod rank_calls;

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
    /// NIC `nic`'s receive port is due to end a packet's reception or
    /// start the next (see `World::ports`); `token` tells a live serve
    /// from one superseded by an earlier arrival.
    PortServe {
        nic: usize,
        token: u32,
    },
    SwitchIn {
        rail: usize,
        packet: WirePacket,
    },
    /// A sibling's `PEER_SET` word reaches NIC `nic`.
    PeerSet {
        nic: usize,
        word: u64,
    },
}

#[derive(Debug)]
struct NicSlot {
    engine: Box<ModelEngine>,
    regs: Arc<SharedRegisters>,
    next_poll: Option<Ps>,
    node: usize,
    rail: usize,
    /// Each context's command-queue tail as last written (by the host's
    /// posts, or by the NIC at attach): a post is charged for the commands
    /// between it and the new tail.
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
    /// Data packets waiting for each NIC's receive port, served in the
    /// order their first bits arrive: one live action per busy port is in
    /// `queue`, which keeps the queue as small as the number of agents
    /// instead of packets in flight.
    ports: Ports<WirePacket>,
    /// Each rail's injected faults (empty: none).
    faults: Vec<RailFaults>,
    ranks: Ranks,
    nics: Vec<NicSlot>,
    switches: Vec<Switch>,
    copies: Vec<Vec<Ps>>,
    trace: Trace,
    stats: ModelStats,
    watchdog: Watchdog,
    /// Where spans go while a run is traced.
    timeline: Option<Arc<Timeline>>,
    /// `--progress`: the event rate, reported on stderr.
    progress: Option<ProgressMeter>,
    /// By node: a rank of the node has run since the NIC writes there last
    /// tested every blocked rank's words. A running rank may write words
    /// its node's peers watch (an `entered` word, a flag) without waking
    /// them at once; the next NIC write on the node then tests every
    /// waiter, as it would without the written ranges, so that knowing
    /// them changes no wake-up.
    host_ran: Vec<bool>,
    /// The memory ranges the NIC being polled wrote (a buffer reused by
    /// every poll).
    written: Vec<(usize, usize)>,
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
    /// Test every blocked rank's words on every NIC write, ignoring the
    /// written ranges ([`Kernel::test_every_wait_on_every_write`]).
    exhaustive_wakes: AtomicBool,
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
        faults: Arc<FaultSpec>,
        memories: Arc<[DmaMemory]>,
    ) -> std::io::Result<(Arc<Kernel>, RegsByNode)> {
        let nodes = topology.nodes();
        let size = topology.size();
        let mut regs_by_node: RegsByNode = vec![Vec::new(); nodes];
        let mut specs = Vec::new();
        for (node, node_regs) in regs_by_node.iter_mut().enumerate() {
            let pci = Arc::new(AtomicU64::new(0));
            for _ in 0..rails {
                node_regs.push(SharedRegisters::new(None)?);
            }
            let siblings: Arc<[Arc<SharedRegisters>]> = node_regs.iter().cloned().collect();
            for (rail, regs) in node_regs.iter().enumerate() {
                let pci = if costs.pci_shared {
                    Arc::clone(&pci)
                } else {
                    Arc::new(AtomicU64::new(0))
                };
                specs.push((node, rail, Arc::clone(regs), pci, Arc::clone(&siblings)));
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
                    .map(|(node, rail, regs, pci, siblings)| {
                        let board = ModelBoard::new(
                            node as u16,
                            Arc::clone(&mems),
                            Arc::clone(&regs),
                            costs,
                            pci,
                        )
                        .expect("node memory exists for every node")
                        .with_siblings(rail as u8, siblings);
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
            ports: Ports::new(nodes * rails),
            faults: if faults.is_none() {
                Vec::new()
            } else {
                (0..rails)
                    .map(|r| RailFaults::new(Arc::clone(&faults), r as u8, seed))
                    .collect()
            },
            ranks,
            nics,
            switches: (0..rails).map(|_| Switch::new()).collect(),
            copies: vec![Vec::new(); nodes],
            trace: Trace::new(seed),
            stats: ModelStats::default(),
            watchdog: Watchdog::new(),
            timeline: None,
            progress: None,
            host_ran: vec![true; nodes],
            written: Vec::new(),
        };
        let kernel = Arc::new(Kernel {
            world: Mutex::new(world),
            costs,
            seed,
            nodes,
            rails,
            ranks: size,
            tracing: AtomicBool::new(false),
            exhaustive_wakes: AtomicBool::new(false),
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

    /// The faults injected so far, over every rail.
    pub fn fault_counts(&self) -> FaultCounts {
        self.lock().faults.iter().map(RailFaults::counts).sum()
    }

    /// Barrier arrivals the switches held for want of a group entry.
    pub fn held_for_entry(&self) -> u64 {
        self.lock()
            .switches
            .iter()
            .map(Switch::held_for_entry)
            .sum()
    }

    /// Packets the receive ports discarded for their payload CRC so far.
    pub fn crc_discards(&self) -> u64 {
        self.lock()
            .nics
            .iter()
            .map(|n| n.engine.hardware().crc_discards)
            .sum()
    }

    /// Every NIC's firmware counters, by NIC (node-major, then rail).
    pub fn nic_stats(&self) -> Vec<railcoll_fw::engine::Stats> {
        self.lock().nics.iter().map(|n| n.engine.stats()).collect()
    }

    /// Every NIC's flow slots in use, (transmit, receive), by NIC.
    pub fn flow_slots_in_use(&self) -> Vec<(usize, usize)> {
        self.lock()
            .nics
            .iter()
            .map(|n| n.engine.flow_slots_in_use())
            .collect()
    }

    /// Packets the receive ports dropped past the packet lifetime so far.
    pub fn expired_packets(&self) -> u64 {
        self.lock()
            .nics
            .iter()
            .map(|n| n.engine.hardware().expired)
            .sum()
    }

    /// Judge `packet` taking a hop of `rail` at `at` (a corrupted one is
    /// changed in place); an injected fault goes into the trace.
    fn judge(&self, w: &mut World, rail: usize, packet: &mut WirePacket, at: Ps) -> Fate {
        let Some(f) = w.faults.get_mut(rail) else {
            return Fate::Deliver;
        };
        let fate = f.judge(packet, at / 1000);
        if fate != Fate::Deliver {
            let h = hash_of(packet.header.as_bytes());
            Self::note(w, at, self.entity_switch(rail), 6, fate.code(), h);
        }
        fate
    }

    /// Test hook, not an interface: with `true`, every NIC write tests
    /// every blocked rank's words on its node, as the kernel did before it
    /// knew what a write covers; a test runs a program both ways and
    /// compares the traces (the written ranges must change no wake-up).
    #[doc(hidden)]
    pub fn test_every_wait_on_every_write(&self, on: bool) {
        self.exhaustive_wakes.store(on, Ordering::Relaxed);
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

    /// Report the event rate on stderr about once a second while runs go
    /// on (`--progress`; `false`: stop).
    pub fn report_progress(&self, on: bool) {
        self.lock().progress = on.then(ProgressMeter::new);
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
    /// it may have satisfied (`only`: just that rank). `written`, when
    /// known, is every memory range that changed (addresses, lengths): a
    /// rank watching words outside all of them is not tested, since its
    /// words are as they were when it was last tested. That holds only
    /// while no rank of the node has run since every waiter was last
    /// tested (`World::host_ran`); otherwise every waiter is tested.
    fn node_changed(
        &self,
        w: &mut World,
        node: usize,
        at: Ps,
        only: Option<usize>,
        written: Option<&[(usize, usize)]>,
    ) {
        let every = self.exhaustive_wakes.load(Ordering::Relaxed);
        let written = match w.host_ran.get_mut(node) {
            _ if every => None,
            Some(ran) if only.is_none() && *ran => {
                *ran = false;
                None
            }
            _ => written,
        };
        // By index: this runs after every NIC write, no list copies.
        let count = w.ranks.on_node(node);
        for i in 0..count {
            let r = w.ranks.of_node(node, i);
            if only.is_some_and(|o| o != r) {
                continue;
            }
            if w.ranks.wakes_on_change(r, written) {
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
                // Only a rank that is ready to run: a resume queued for a
                // rank that has since finished (a stalled run's ranks
                // leave their waits in any order) is stale.
                if !w
                    .ranks
                    .slots
                    .get(r)
                    .is_some_and(|s| matches!(s.state, RankState::Ready))
                {
                    return Next::Continue;
                }
                w.watchdog.progress(t);
                Self::note(w, t, e, 0, r as u64, 0);
                let node = w.ranks.slots[r].node;
                if let Some(ran) = w.host_ran.get_mut(node) {
                    *ran = true;
                }
                return Next::Run(r);
            }
            Action::RegWrite { nic, offset, value } => {
                Self::note(w, t, e, 1, u64::from(offset), value);
                if let Some(slot) = w.nics.get(nic) {
                    slot.regs.write(offset, value);
                    if regs::is_doorbell(offset) {
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
            Action::PeerSet { nic, word } => self.peer_set_arrives(w, nic, word),
            Action::PortServe { nic, token } => {
                let Some(served) = w.ports.serve(nic, t, token) else {
                    return Next::Continue; // superseded by an earlier arrival
                };
                if let Some((at, token)) = served.next {
                    self.push(w, at, e, Action::PortServe { nic, token });
                }
                if let Some(packet) = served.done {
                    self.arrive(w, nic, packet);
                }
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
                let first_bit = t + self.costs.switch_collective;
                for (node, mut p) in out {
                    let fate = self.judge(w, rail, &mut p, first_bit);
                    let nic = node * self.rails + rail;
                    for at in fate.arrivals(first_bit) {
                        self.transmit(w, nic, at, ser, p);
                    }
                }
            }
        }
        Next::Continue
    }

    /// The watchdog's report on the run as it stands.
    fn report(&self, w: &World, why: &str) -> String {
        let mut report = w
            .watchdog
            .report(why, self.seed, w.now, w.ranks.blocked_ranks());
        let statuses = w.nics.iter().map(|n| {
            let status = n.regs.nic_read(railcoll_fw::abi::regs::STATUS.offset());
            (n.node, n.rail, status)
        });
        let counts: FaultCounts = w.faults.iter().map(RailFaults::counts).sum();
        let none = FaultSpec::default();
        let spec = w.faults.first().map_or(&none, RailFaults::spec);
        report.push_str(&stall_note(statuses, spec, counts));
        report
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
        let mut steps = 0u32;
        loop {
            let mut w = self.lock();
            steps = steps.wrapping_add(1);
            if steps.is_multiple_of(1 << 14) {
                let (events, now) = (w.stats.events, w.now);
                if let Some(p) = w.progress.as_mut() {
                    p.tick(events, now);
                }
            }
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
                let met = self.block(rank, Watch::Rendezvous);
                if met.is_err() {
                    // Left without meeting (a stalled run): no longer
                    // waiting here, whatever it does next.
                    self.lock().ranks.rendezvous.retain(|&r| r != rank);
                }
                return met;
            }
            let now = w.now;
            for r in std::mem::take(&mut w.ranks.rendezvous) {
                if r != rank {
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
