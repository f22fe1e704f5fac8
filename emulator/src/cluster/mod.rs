//! Building an emulated cluster and running code on every rank.
//!
//! ```text
//! let shape = Shape::new(4, 2, 1, 2, Placement::Block)?; // nodes, ranks per node, sockets, rails
//! let cluster = Cluster::new(ClusterConfig { shape, ..Default::default() })?;
//! let results = cluster.run(|comm| { /* SPMD code */ comm.rank() });
//! ```
//!
//! `run` starts one OS thread per rank (threads mode); each opens its NICs
//! through the node's [`EmuDevice`] and runs the closure. All ranks meet at
//! a barrier after the closure so that no context is detached while a peer
//! may still address it. A cluster can run many closures in turn.
//!
//! Parts: `config` (the configuration, checked field by field, and the
//! modes); this module builds the cluster and runs closures on it.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use railcoll_fw::abi::MAX_CONTEXTS;
use railcoll_fw::abi::regs::{self, MailboxOp, Param};
use railcoll_host::device::{AdminGuard, Device, DeviceError, DmaBuffer};
use railcoll_host::env::{NodeWait, ParkingWait, WaitHook, Waker};
use railcoll_host::sched::Shape;
use railcoll_host::{Comm, CommConfig, Topology};
use railcoll_mem::dma_mem::DmaMemory;
use railcoll_mem::regio::RegisterIo;

mod config;
pub use crate::data::{DataMode, DataSample};
pub use config::{ClusterConfig, Mode, THREADS_PACKET_SIZE};

use crate::hw::faults::FaultCounts;
use crate::hw::memory::{CanaryDamage, GUARD, NodeMemory};
use crate::hw::registers::SharedRegisters;
use crate::modeled::fiber::{self, FiberYielder};
use crate::modeled::{Kernel, ModelRegs, ModelWait, Profile, SetupWait};
use crate::threads::nics::Nics;
use crate::threads::rail::Rail;
use crate::threads::watchdog::Watchdog;
use crate::threads::worker::{NicHelp, WorkerPool};
use crate::timeline::{Timeline, TracingWait};
use corosensei::stack::DefaultStack;
use corosensei::{ScopedCoroutine, ScopedCoroutineRef};

/// Errors building or running a cluster.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    /// The configuration is invalid.
    #[error("invalid cluster configuration: {0}")]
    Config(String),
    /// The host could not provide memory or threads.
    #[error("emulator resources: {0}")]
    Io(#[from] std::io::Error),
    /// The host library refused something.
    #[error(transparent)]
    Host(#[from] railcoll_host::Error),
    /// A fabric file (rails between machines) cannot be used.
    #[error(transparent)]
    Fabric(#[from] crate::fabric::FabricError),
    /// A run stopped making progress: the watchdog's report
    /// ([`Cluster::stall_report`]).
    #[error("{0}")]
    Stalled(String),
    /// A collective returned with wrong data ([`crate::verify`]).
    #[error(transparent)]
    WrongResult(Box<crate::verify::WrongResult>),
    /// A run that moves no data (all or part: [`DataMode`]) was asked of a
    /// schedule the verifier cannot prove.
    #[error(
        "--data {data}: {what}: the schedule verifier cannot prove it, so a run that does not move its data would report unchecked figures: {why}"
    )]
    Unproven {
        /// The data mode asked.
        data: DataMode,
        /// The collective, algorithm and size.
        what: String,
        /// The verifier's or the generator's refusal.
        why: String,
    },
}

/// A node's NICs, as the host driver sees them.
pub struct EmuDevice {
    memory: Arc<NodeMemory>,
    registers: Vec<Arc<dyn RegisterIo>>,
    admin: Mutex<()>,
    segments: Mutex<std::collections::HashMap<u64, railcoll_mem::mmap::WeakMapping>>,
    /// Shared segments are made under data elision ([`DataMode`]).
    elided: bool,
    /// In modeled mode, a rank that finds the admin lock taken yields to
    /// the sequencer instead of blocking its thread (which holds the baton).
    kernel: Option<Arc<Kernel>>,
}

impl std::fmt::Debug for EmuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmuDevice")
            .field("rails", &self.registers.len())
            .field("modeled", &self.kernel.is_some())
            .finish_non_exhaustive()
    }
}

impl Device for EmuDevice {
    fn rails(&self) -> usize {
        self.registers.len()
    }

    fn registers(&self, rail: usize) -> Result<&dyn RegisterIo, DeviceError> {
        railcoll_host::device::rail_of(&self.registers, rail).map(|r| &**r as &dyn RegisterIo)
    }

    fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaBuffer, DeviceError> {
        self.memory.alloc(len, align)
    }

    fn admin_lock(&self) -> Result<AdminGuard<'_>, DeviceError> {
        Ok(AdminGuard::new(self.admin_mutex()))
    }

    fn dma_view(&self, phys: u64, len: usize) -> Result<DmaMemory, DeviceError> {
        let whole = self.memory.memory();
        usize::try_from(phys)
            .ok()
            .filter(|&p| p >= crate::hw::memory::PHYS_BASE)
            .and_then(|p| whole.slice(p, len).ok())
            .ok_or_else(|| {
                DeviceError::Backend(format!("no DMA memory at {phys:#x} + {len} on this node"))
            })
    }

    fn node_segment(&self, key: u64, len: usize) -> Result<DmaMemory, DeviceError> {
        let mut segments = self.segments.lock().unwrap_or_else(|p| p.into_inner());
        // The device keeps only a weak handle: the segment lives exactly as
        // long as some rank's communicator uses it, so a later communicator
        // with the same key starts from zeroed memory.
        if let Some(map) = segments.get(&key).and_then(|w| w.upgrade()) {
            if map.len() < len {
                return Err(DeviceError::OutOfMemory {
                    asked: len,
                    free: map.len(),
                });
            }
            return Ok(map.memory());
        }
        let map = if self.elided {
            railcoll_mem::mmap::SharedMapping::new_elided(len)
        } else {
            railcoll_mem::mmap::SharedMapping::new(len)
        }
        .map_err(|e| DeviceError::Backend(format!("shared segment: {e}")))?;
        // Segments no communicator holds any more (split ones freed) are
        // forgotten: the map stays as small as the live segments.
        segments.retain(|_, w| w.upgrade().is_some());
        segments.insert(key, map.downgrade());
        Ok(map.memory())
    }
}

impl EmuDevice {
    fn admin_mutex(&self) -> MutexGuard<'_, ()> {
        if let (Some(kernel), Some(rank)) = (&self.kernel, crate::modeled::kernel::current_rank()) {
            loop {
                match self.admin.try_lock() {
                    Ok(g) => return g,
                    Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => {
                        if kernel.wait_admin(rank).is_err() {
                            break;
                        }
                    }
                }
            }
        }
        self.admin.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What drives the NICs.
#[derive(Debug)]
enum Backend {
    Threads {
        wakers: Arc<[Waker]>,
        wait: Arc<ParkingWait>,
        epoch: Instant,
        timeline: Arc<OnceLock<Arc<Timeline>>>,
        rails: Vec<Arc<Rail>>,
        watchdog: Arc<Watchdog>,
        /// What waiting ranks run the NICs with (`ClusterConfig::inline_nic`).
        help: Option<Arc<NicHelp>>,
        // Dropped last: stops the NIC workers.
        _pool: WorkerPool,
    },
    Modeled {
        kernel: Arc<Kernel>,
        profile: Arc<Profile>,
    },
}

/// A running emulated cluster.
#[derive(Debug)]
pub struct Cluster {
    cfg: ClusterConfig,
    shape: Shape,
    devices: Vec<Arc<EmuDevice>>,
    memories: Vec<Arc<NodeMemory>>,
    backend: Backend,
    /// Runs started: each run's communicator is a new instance
    /// ([`CommConfig::instance`]).
    runs: AtomicU32,
    /// The ranks whose data runs move ([`ClusterConfig::data`]).
    sample: DataSample,
}

/// Wait for the firmware of the NIC on `rail` to come up (`shared` is its
/// register file), then set its packet size, its alternate rail (the
/// host's failover policy, [`railcoll_host::driver::alternate_rail`]),
/// and the retransmission timeout and retry limit the configuration
/// gives, through the driver's view `io`.
pub(crate) fn bring_up(
    io: &dyn RegisterIo,
    shared: &SharedRegisters,
    wait: &dyn WaitHook,
    cfg: &ClusterConfig,
    rail: usize,
) -> Result<(), EmuError> {
    wait.wait_until(&mut || shared.nic_read(regs::ID) == regs::ID_VALUE)
        .map_err(railcoll_host::Error::from)?;
    set_params(io, wait, cfg, rail)
}

/// Set the NIC on `rail`'s packet size, alternate rail, retransmission
/// timeout and retry limit as `cfg` gives them, through its BAR0 `io`
/// (an emulated NIC's or a board's).
pub(crate) fn set_params(
    io: &dyn RegisterIo,
    wait: &dyn WaitHook,
    cfg: &ClusterConfig,
    rail: usize,
) -> Result<(), EmuError> {
    let mut params = vec![(Param::PacketSize, u64::from(cfg.packet_size))];
    if let Some(alternate) = railcoll_host::driver::alternate_rail(rail, cfg.shape.rails) {
        params.push((Param::AlternateRail, alternate as u64 + 1));
    }
    if let Some(ns) = cfg.retransmit_ns() {
        params.push((Param::RetryTimeoutNs, ns));
    }
    if let Some(limit) = cfg.retry_limit {
        params.push((Param::RetryLimit, u64::from(limit)));
    }
    for (param, value) in params {
        railcoll_host::driver::mailbox_call(
            io,
            wait,
            MailboxOp::SetParam,
            [param as u64, value, 0, 0],
        )?;
    }
    Ok(())
}

/// Bytes of node memory a node of `cfg` needs: per rank, the arena, each
/// rail's rings, the control region, and the canaries around each.
pub(crate) fn node_memory_len(cfg: &ClusterConfig) -> usize {
    let per_rank = cfg.arena_size + (1 << 20) * cfg.shape.rails + (256 << 10) + 16 * GUARD;
    per_rank * cfg.shape.ranks_per_node()
}

fn node_memories(cfg: &ClusterConfig) -> Result<Vec<Arc<NodeMemory>>, EmuError> {
    let len = node_memory_len(cfg);
    Ok((0..cfg.shape.nodes())
        .map(|_| NodeMemory::new(len, cfg.data.elides()).map(Arc::new))
        .collect::<Result<_, _>>()?)
}

fn device(
    memory: &Arc<NodeMemory>,
    registers: Vec<Arc<dyn RegisterIo>>,
    kernel: Option<Arc<Kernel>>,
    elided: bool,
) -> Arc<EmuDevice> {
    Arc::new(EmuDevice {
        memory: Arc::clone(memory),
        registers,
        admin: Mutex::new(()),
        segments: Mutex::new(std::collections::HashMap::new()),
        elided,
        kernel,
    })
}

impl Cluster {
    /// Build the cluster and bring every NIC up (modeled mode uses the
    /// default profile, [`crate::modeled::DEFAULT_PROFILE`]).
    pub fn new(cfg: ClusterConfig) -> Result<Self, EmuError> {
        match cfg.mode {
            Mode::Threads => Self::threads(cfg),
            Mode::Modeled => {
                let profile = Profile::builtin(crate::modeled::DEFAULT_PROFILE)
                    .map_err(|e| EmuError::Config(e.to_string()))?;
                Self::modeled(cfg, profile)
            }
        }
    }

    /// Build a cluster in modeled mode with `profile` (the packet size is
    /// the profile's: it is a property of the hardware modeled).
    pub fn modeled(cfg: ClusterConfig, profile: Profile) -> Result<Self, EmuError> {
        let cfg = ClusterConfig {
            mode: Mode::Modeled,
            packet_size: profile.packet_size,
            ..cfg
        };
        let shape = cfg.validate()?;
        let topology = shape.topology;
        let memories = node_memories(&cfg)?;
        let views: Arc<[DmaMemory]> = memories.iter().map(|m| m.memory()).collect();
        let (kernel, regs) = Kernel::new(
            topology,
            cfg.shape.rails,
            cfg.shape.sockets,
            profile.costs(),
            cfg.seed,
            Arc::clone(&cfg.faults),
            views,
        )?;
        let devices: Vec<Arc<EmuDevice>> = memories
            .iter()
            .zip(&regs)
            .enumerate()
            .map(|(node, (m, node_regs))| {
                let io: Vec<Arc<dyn RegisterIo>> = node_regs
                    .iter()
                    .enumerate()
                    .map(|(rail, r)| {
                        Arc::new(ModelRegs {
                            regs: Arc::clone(r),
                            kernel: Arc::clone(&kernel),
                            nic: node * cfg.shape.rails + rail,
                        }) as Arc<dyn RegisterIo>
                    })
                    .collect();
                device(m, io, Some(Arc::clone(&kernel)), cfg.data.elides())
            })
            .collect();
        kernel.report_progress(cfg.progress);
        let wait = SetupWait {
            kernel: Arc::clone(&kernel),
        };
        for (device, node_regs) in devices.iter().zip(&regs) {
            for (rail, (io, shared)) in device.registers.iter().zip(node_regs).enumerate() {
                bring_up(&**io, shared, &wait, &cfg, rail)?;
            }
        }
        let sample = cfg.data_sample()?;
        Ok(Self {
            cfg,
            shape,
            devices,
            memories,
            runs: AtomicU32::new(0),
            sample,
            backend: Backend::Modeled {
                kernel,
                profile: Arc::new(profile),
            },
        })
    }

    fn threads(cfg: ClusterConfig) -> Result<Self, EmuError> {
        let shape = cfg.validate()?;
        let workers = cfg.worker_count(shape.size(), shape.nodes() * cfg.shape.rails);
        let epoch = Instant::now();
        let memories = node_memories(&cfg)?;
        let views: Arc<[DmaMemory]> = memories.iter().map(|m| m.memory()).collect();
        let Nics {
            wakers,
            timeline,
            rails,
            registers,
            pool,
            receivers: _,
        } = Nics::start(&cfg.nic_plan(), workers, views, epoch, &mut |notifier| {
            SharedRegisters::new(Some(notifier))
        })?;
        let wait = Arc::new(ParkingWait::new(
            64,
            std::time::Duration::from_micros(50),
            cfg.wait_timeout,
        ));
        for node_regs in &registers {
            for (rail, regs) in node_regs.iter().enumerate() {
                bring_up(&**regs, regs, &*wait, &cfg, rail)?;
            }
        }
        let devices: Vec<Arc<EmuDevice>> = memories
            .iter()
            .zip(registers)
            .map(|(m, r)| {
                let io = r.into_iter().map(|r| r as Arc<dyn RegisterIo>).collect();
                device(m, io, None, false)
            })
            .collect();
        let sample = cfg.data_sample()?;
        let help = cfg.inline_nic.then(|| pool.help());
        Ok(Self {
            cfg,
            shape,
            devices,
            memories,
            runs: AtomicU32::new(0),
            sample,
            backend: Backend::Threads {
                wakers,
                wait,
                epoch,
                timeline,
                rails,
                watchdog: Arc::new(Watchdog::new(shape.size(), epoch)),
                help,
                _pool: pool,
            },
        })
    }

    /// Threads mode: how many engine polls waiting ranks made in the runs
    /// that have finished ([`ClusterConfig::inline_nic`]); `None` in
    /// modeled mode, or when ranks leave the NICs to the workers.
    pub fn nic_polls_by_ranks(&self) -> Option<u64> {
        match &self.backend {
            Backend::Threads { help, .. } => help.as_ref().map(|h| h.rank_polls()),
            Backend::Modeled { .. } => None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ClusterConfig {
        &self.cfg
    }

    /// The ranks whose data this cluster's runs move and check
    /// ([`DataMode`]).
    pub fn data(&self) -> &DataSample {
        &self.sample
    }

    /// Lines (64 bytes) of node memory given data so far, over every node,
    /// under data elision ([`DataMode`]; 0 with full data, which does not
    /// count).
    pub fn data_lines(&self) -> usize {
        self.memories.iter().map(|m| m.data_lines()).sum()
    }

    /// The job shape.
    pub fn topology(&self) -> &Topology {
        &self.shape.topology
    }

    /// The sequencer, in modeled mode.
    pub fn kernel(&self) -> Option<&Arc<Kernel>> {
        match &self.backend {
            Backend::Modeled { kernel, .. } => Some(kernel),
            Backend::Threads { .. } => None,
        }
    }

    /// Record this cluster's runs in `timeline` (`railcoll trace`): rank
    /// waits, steps and copies, NIC activity and packets; spans in virtual
    /// time in modeled mode, wall-time spans and instants in threads mode.
    /// A threads-mode cluster keeps the first timeline it is given.
    pub fn set_timeline(&self, timeline: Arc<Timeline>) {
        match &self.backend {
            Backend::Threads { timeline: slot, .. } => {
                let _ = slot.set(timeline);
            }
            Backend::Modeled { kernel, .. } => kernel.set_timeline(Some(timeline)),
        }
    }

    /// The calibration profile, in modeled mode.
    pub fn profile(&self) -> Option<&Profile> {
        match &self.backend {
            Backend::Modeled { profile, .. } => Some(profile),
            Backend::Threads { .. } => None,
        }
    }

    /// The calling rank's clock in nanoseconds: virtual time in modeled
    /// mode (the rank's own clock), wall time since start in threads mode.
    pub fn now_ns(&self) -> f64 {
        match &self.backend {
            Backend::Threads { epoch, .. } => epoch.elapsed().as_nanos() as f64,
            Backend::Modeled { kernel, .. } => {
                let ps = match crate::modeled::kernel::current_rank() {
                    Some(r) => kernel.rank_time_ps(r),
                    None => kernel.now_ps(),
                };
                ps as f64 / 1000.0
            }
        }
    }

    /// Node segments some communicator still holds, over every node (a
    /// freed communicator's segment is gone once its last member let go).
    pub fn live_node_segments(&self) -> usize {
        self.devices
            .iter()
            .map(|d| {
                let segments = d.segments.lock().unwrap_or_else(|p| p.into_inner());
                segments.values().filter(|w| w.upgrade().is_some()).count()
            })
            .sum()
    }

    /// The communicator configuration rank `rank` gets in the next run
    /// (the communicator instance is the number of runs started before it).
    pub fn comm_config(&self, rank: usize) -> CommConfig {
        self.comm_config_of(rank, self.runs.load(Ordering::Relaxed))
    }

    fn comm_config_of(&self, rank: usize, instance: u32) -> CommConfig {
        CommConfig {
            arena_size: self.cfg.arena_size,
            policy: self.cfg.policy,
            cq_log2: self.cfg.cq_log2,
            instance,
            check: self.cfg.check,
            contract: self.cfg.contract,
            ..CommConfig::new(self.shape, rank)
        }
    }

    /// Run `f` on every rank (one thread each) and collect each rank's
    /// result, or the error that kept it from starting. A panic in any rank
    /// is re-raised after every rank has finished. In modeled mode the
    /// threads run one at a time under the sequencer; a run the watchdog
    /// stops returns timeouts from the blocked ranks, and
    /// [`Kernel::failure`] holds the report.
    pub fn run<R, F>(&self, f: F) -> Vec<Result<R, railcoll_host::Error>>
    where
        R: Send,
        F: Fn(&Comm) -> R + Sync,
    {
        for m in &self.memories {
            m.reset();
        }
        let instance = self.runs.fetch_add(1, Ordering::Relaxed);
        let results = match &self.backend {
            Backend::Threads { watchdog, .. } => {
                watchdog.reset();
                self.run_threads(instance, &f)
            }
            Backend::Modeled { kernel, .. } => self.run_modeled(kernel, instance, &f),
        };
        let damage = self.canary_damage();
        assert!(
            damage.is_empty(),
            "a write outside every buffer (the emulator's or the firmware's bug, never the program's): {damage:?}"
        );
        results
            .into_iter()
            .map(|r| match r {
                Some(Ok(v)) => v,
                Some(Err(panic)) => resume_unwind(panic),
                None => Err(railcoll_host::Error::Config("rank did not run".into())),
            })
            .collect()
    }

    /// The faults injected so far, over every rail
    /// ([`ClusterConfig::faults`]).
    pub fn fault_counts(&self) -> FaultCounts {
        match &self.backend {
            Backend::Threads { rails, .. } => rails.iter().map(|r| r.fault_counts()).sum(),
            Backend::Modeled { kernel, .. } => kernel.fault_counts(),
        }
    }

    /// Packets the NICs' receive ports discarded so far for a payload that
    /// failed its CRC (injected corruption; a corrupted broadcast payload
    /// is discarded by every destination).
    pub fn crc_discards(&self) -> u64 {
        match &self.backend {
            Backend::Threads { rails, .. } => rails.iter().map(|r| r.crc_discards()).sum(),
            Backend::Modeled { kernel, .. } => kernel.crc_discards(),
        }
    }

    /// Packets the NICs' receive ports dropped so far because they were
    /// older than the rails' packet lifetime ([`crate::hw::wire::PACKET_LIFETIME_NS`]:
    /// a delay fault or a stall held them that long).
    pub fn expired_packets(&self) -> u64 {
        match &self.backend {
            Backend::Threads { rails, .. } => rails.iter().map(|r| r.expired()).sum(),
            Backend::Modeled { kernel, .. } => kernel.expired_packets(),
        }
    }

    /// Barrier arrivals the rails' switches held because all their group
    /// entries ([`railcoll_fw::switch::GROUPS`]) were collecting: how
    /// often communicators' hardware barriers reached the switch's limit
    /// (each held arrival is re-announced and counted once an entry frees).
    pub fn switch_entries_exhausted(&self) -> u64 {
        match &self.backend {
            Backend::Threads { rails, .. } => rails.iter().map(|r| r.held_for_entry()).sum(),
            Backend::Modeled { kernel, .. } => kernel.held_for_entry(),
        }
    }

    /// Why a run stalled, if one did: modeled mode's watchdog report
    /// ([`Kernel::failure`]), or threads mode's (a rank's wait made no
    /// progress for [`ClusterConfig::wait_timeout`]); each names every
    /// rank's pending step. The first report of the cluster's life stands.
    pub fn stall_report(&self) -> Option<String> {
        match &self.backend {
            Backend::Threads { watchdog, .. } => watchdog.report().map(|r| {
                let status = railcoll_fw::abi::regs::STATUS.offset();
                let statuses = self.devices.iter().enumerate().flat_map(|(node, d)| {
                    d.registers
                        .iter()
                        .enumerate()
                        .map(move |(rail, io)| (node, rail, io.read(status)))
                });
                let note =
                    crate::hw::faults::stall_note(statuses, &self.cfg.faults, self.fault_counts());
                format!("{r}{note}")
            }),
            Backend::Modeled { kernel, .. } => kernel.failure().map(|s| s.0),
        }
    }

    /// `Err` with the watchdog's report if a run stalled.
    pub fn check_stalled(&self) -> Result<(), EmuError> {
        self.stall_report()
            .map_or(Ok(()), |r| Err(EmuError::Stalled(r)))
    }

    /// Every canary around the nodes' buffers that changed during the
    /// last run, by node ([`NodeMemory::canary_damage`]); `run` checks it
    /// after every run.
    pub fn canary_damage(&self) -> Vec<(usize, CanaryDamage)> {
        self.memories
            .iter()
            .enumerate()
            .flat_map(|(node, m)| m.canary_damage().into_iter().map(move |d| (node, d)))
            .collect()
    }

    fn run_threads<R, F>(&self, instance: u32, f: &F) -> Vec<Option<RankOutcome<R>>>
    where
        R: Send,
        F: Fn(&Comm) -> R + Sync,
    {
        let size = self.shape.size();
        let barrier = Barrier::new(size);
        let mut results: Vec<Option<RankOutcome<R>>> = (0..size).map(|_| None).collect();
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..size)
                .map(|rank| {
                    let barrier = &barrier;
                    std::thread::Builder::new()
                        .name(format!("rank-{rank}"))
                        .spawn_scoped(scope, move || {
                            let outcome = catch_unwind(AssertUnwindSafe(|| {
                                let opened = self.open_comm(rank, instance);
                                // Opening is collective (like MPI_Init): no rank
                                // may address a peer before the peer's context
                                // is attached on every rail.
                                barrier.wait();
                                opened.map(|comm| (f(&comm), comm))
                            }));
                            barrier.wait();
                            // The communicator is dropped (contexts detached)
                            // only after every rank is done with the others.
                            close(outcome)
                        })
                        .expect("spawn rank thread")
                })
                .collect();
            for (rank, h) in handles.into_iter().enumerate() {
                results[rank] = Some(h.join().unwrap_or_else(Err));
            }
        });
        results
    }

    fn run_modeled<R, F>(
        &self,
        kernel: &Arc<Kernel>,
        instance: u32,
        f: &F,
    ) -> Vec<Option<RankOutcome<R>>>
    where
        R: Send,
        F: Fn(&Comm) -> R + Sync,
    {
        let size = self.shape.size();
        // The fibers' scopes nest one frame per rank (`nest_scopes`), and
        // the sequencer runs inside the innermost: on a stack of its own
        // that holds them, however many ranks there are. A coroutine on
        // this thread, not a thread: a thread would allocate from another
        // malloc arena, which costs a run of 4096 ranks a fifth more
        // memory.
        let bytes = SEQUENCER_STACK.saturating_add(size.saturating_mul(SCOPE_FRAME));
        let stack = match DefaultStack::new(bytes) {
            Ok(stack) => stack,
            Err(e) => {
                return every_rank_refused(
                    size,
                    format!("cannot reserve the sequencer's {bytes}-byte stack: {e}"),
                );
            }
        };
        let sequencer =
            ScopedCoroutine::with_stack(stack, |_: &corosensei::Yielder<(), ()>, ()| {
                self.run_fibers(kernel, instance, f)
            });
        // It never yields: one resume runs it to the end (a panic inside
        // comes out of `resume`).
        sequencer.scope(|mut sequencer| {
            loop {
                if let corosensei::CoroutineResult::Return(results) = sequencer.as_mut().resume(())
                {
                    break results;
                }
            }
        })
    }

    /// [`Cluster::run_modeled`]'s body, on the sequencer's stack.
    fn run_fibers<R, F>(
        &self,
        kernel: &Arc<Kernel>,
        instance: u32,
        f: &F,
    ) -> Vec<Option<RankOutcome<R>>>
    where
        R: Send,
        F: Fn(&Comm) -> R + Sync,
    {
        let size = self.shape.size();
        // Each stack is a mapping of its own (and a guard page): the
        // kernel's map count (`vm.max_map_count`, 65530 by default) bounds
        // the ranks one process can model, about 32,000.
        let stacks = match (0..size)
            .map(|_| DefaultStack::new(FIBER_STACK))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(stacks) => stacks,
            Err(e) => {
                return every_rank_refused(
                    size,
                    format!(
                        "cannot reserve a {} KiB fiber stack for each of {size} modeled ranks: {e} \
                         (each takes two memory mappings; see vm.max_map_count)",
                        FIBER_STACK >> 10
                    ),
                );
            }
        };
        let mut results: Vec<Option<RankOutcome<R>>> = (0..size).map(|_| None).collect();
        let fibers: Vec<_> = stacks
            .into_iter()
            .enumerate()
            .map(|(rank, stack)| {
                let kernel = Arc::clone(kernel);
                ScopedCoroutine::with_stack(stack, move |yielder: &FiberYielder, ()| {
                    fiber::run_fiber(yielder, || {
                        let outcome = catch_unwind(AssertUnwindSafe(|| {
                            let opened = self.open_comm(rank, instance);
                            // Opening is collective (like MPI_Init).
                            let met = kernel.rendezvous(rank);
                            let comm = opened?;
                            met.map_err(|e| railcoll_host::Error::Config(e.0))?;
                            Ok((f(&comm), comm))
                        }));
                        // The communicator is dropped (contexts detached) only
                        // after every rank is done with the others.
                        let _ = kernel.rendezvous(rank);
                        close(outcome)
                    })
                })
            })
            .collect();
        // Each fiber borrows this frame: enter one scope per fiber, then
        // let the sequencer run them all.
        nest_scopes(fibers, Vec::new(), &mut |refs| {
            kernel.run(refs, &mut |r, v| results[r] = Some(v));
        });
        results
    }

    fn open_comm(&self, rank: usize, instance: u32) -> Result<Comm, railcoll_host::Error> {
        let (node, local) = self.shape.topology.locate(rank)?;
        let device: Arc<dyn Device> = self.devices[node].clone();
        let wait: Arc<dyn WaitHook> = match &self.backend {
            Backend::Threads {
                wakers,
                wait,
                epoch,
                timeline,
                watchdog,
                help,
                ..
            } => {
                if let Some(w) = wakers.get(node * MAX_CONTEXTS + local) {
                    w.register_current();
                }
                let node_wakers = wakers[node * MAX_CONTEXTS..(node + 1) * MAX_CONTEXTS].to_vec();
                let plain: Arc<dyn WaitHook> = Arc::new(crate::threads::RankWait {
                    inner: NodeWait::new(Arc::clone(wait), node_wakers),
                    rank,
                    watchdog: Arc::clone(watchdog),
                    nics: help.as_ref().map(NicHelp::helper),
                });
                match timeline.get() {
                    Some(t) => Arc::new(TracingWait::new(plain, Arc::clone(t), rank, *epoch)),
                    None => plain,
                }
            }
            Backend::Modeled { kernel, .. } => Arc::new(ModelWait {
                kernel: Arc::clone(kernel),
                rank,
            }),
        };
        Comm::new(
            self.comm_config_of(rank, instance),
            Arc::clone(&self.cfg.tuning),
            device,
            wait,
        )
    }
}

/// Stack of a modeled rank's fiber (host code only: NICs are polled on
/// the sequencer's stack). Reserved, not committed, until touched.
const FIBER_STACK: usize = 1 << 20;

/// The sequencer coroutine's stack beyond the fibers' nested scopes: the
/// sequencer, the NICs' polls and the switch run in the innermost scope.
const SEQUENCER_STACK: usize = 16 << 20;

/// Stack one fiber's scope takes in [`nest_scopes`] (measured: under
/// 2 KiB a level in a release build; an unoptimised build takes more).
/// Reserved, touched only as deep as the ranks go.
const SCOPE_FRAME: usize = if cfg!(debug_assertions) {
    32 << 10
} else {
    8 << 10
};

type Fiber<'a, T> = ScopedCoroutine<'a, (), (), T, DefaultStack>;
type FiberRef<'a, T> = ScopedCoroutineRef<'a, (), (), T, DefaultStack>;

/// Enter the scope of every fiber in `pending` (one nested scope each, as
/// corosensei requires for borrowing fibers), then call `body` with all.
fn nest_scopes<T>(
    mut pending: Vec<Fiber<'_, T>>,
    mut entered: Vec<FiberRef<'_, T>>,
    body: &mut dyn FnMut(&mut [FiberRef<'_, T>]),
) {
    match pending.pop() {
        None => {
            entered.reverse();
            body(&mut entered);
        }
        Some(fiber) => fiber.scope(|r| {
            let mut entered: Vec<FiberRef<'_, T>> = entered.into_iter().collect();
            entered.push(r);
            nest_scopes(pending, entered, body);
        }),
    }
}

type RankOutcome<R> = std::thread::Result<Result<R, railcoll_host::Error>>;

/// Every one of `size` ranks' outcome: the run could not start, `why`.
fn every_rank_refused<R>(size: usize, why: String) -> Vec<Option<RankOutcome<R>>> {
    (0..size)
        .map(|_| Some(Ok(Err(railcoll_host::Error::Config(why.clone())))))
        .collect()
}

/// Drop the communicator (detaching its contexts) and keep the value.
fn close<R>(
    outcome: std::thread::Result<Result<(R, Comm), railcoll_host::Error>>,
) -> RankOutcome<R> {
    outcome.map(|r| {
        r.map(|(value, comm)| {
            drop(comm);
            value
        })
    })
}

#[cfg(test)]
mod tests;
