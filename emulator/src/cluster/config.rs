//! A cluster's configuration: its shape and settings, checked field by
//! field ([`ClusterConfig::validate`]), and how it runs ([`Mode`]).

use std::sync::Arc;

use railcoll_fw::abi::{MAX_PACKET_SIZE, MIN_PACKET_SIZE};
use railcoll_host::RailPolicy;
use railcoll_host::sched::Shape;
use railcoll_host::sched::tuning::TuningTable;

use super::EmuError;
use crate::data::{DataMode, DataSample};
use crate::hw::faults::FaultSpec;
use crate::threads::nics::NicPlan;

/// Shape and settings of an emulated cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterConfig {
    /// Nodes (`1..=32768`, [`railcoll_host::topology::MAX_NODES`]; threads mode `1..=256`), ranks per node, placement, sockets per node
    /// (multi-leader all-gather places one leader per socket) and rails
    /// (NICs per node): the one shape every layer shares.
    pub shape: Shape,
    /// Threads mode's NIC worker threads (default: the cores the ranks
    /// leave free, at least 1 and at most one per NIC).
    pub workers: Option<usize>,
    /// Threads mode, in-process clusters: when the ranks waiting and the
    /// workers outnumber the cores, a rank that waits runs the NICs' work
    /// itself, any NIC with work that no other thread is running, and the
    /// workers stand back (default on; `--no-inline-nic`). A worker would
    /// otherwise need a context switch to get a core.
    pub inline_nic: bool,
    /// Symmetric arena per rank, bytes.
    pub arena_size: usize,
    /// NIC packet payload size, bytes (power of two, 64..=1 MiB).
    pub packet_size: u32,
    /// Default rail policy of every communicator.
    pub policy: RailPolicy,
    /// log2 of command-ring entries.
    pub cq_log2: u8,
    /// Threads mode's watchdog: how long a rank's wait may make no
    /// progress before it fails with `Error::Timeout` and
    /// [`super::Cluster::stall_report`] names every rank's pending step (modeled
    /// mode has its own, in virtual time).
    pub wait_timeout: std::time::Duration,
    /// Free-running threads and wall time, or virtual time.
    pub mode: Mode,
    /// Seed of the run (recorded in modeled traces and watchdog reports).
    pub seed: u64,
    /// The tuning table every communicator of the cluster picks plain
    /// calls' algorithms by, read once (default: the built-in table; the
    /// CLI gives the user's, `TuningTable::locate`). Never read from the
    /// environment here, so a test's result does not depend on the home
    /// directory it runs in.
    pub tuning: Arc<TuningTable>,
    /// What goes wrong on the rails (default: nothing). In modeled mode
    /// the seed drives it and every fault is in the trace.
    pub faults: Arc<FaultSpec>,
    /// The NICs' retransmission timeout (`SET_PARAM` 2; default: the
    /// firmware's, 50 ms). Under injected faults, every loss costs one.
    pub retransmit_timeout: Option<std::time::Duration>,
    /// Fruitless retransmission timeouts before a flow migrates to its
    /// alternate rail, or breaks (`SET_PARAM` 3; default: the
    /// firmware's, 16). With the timeout it sets how soon a dead rail is
    /// left: (1 + 2 + 4 + 8 (limit - 2)) timeouts.
    pub retry_limit: Option<u32>,
    /// Every communicator checks each collective call's arguments against
    /// the other ranks' ([`railcoll_host::CommConfig::check`]; default: on in debug
    /// builds). The workbench's timed commands turn it off unless asked
    /// (`--check`): they verify every receive buffer after the timed calls
    /// instead.
    pub check: bool,
    /// Every communicator's buffer contract ([`railcoll_host::CommConfig::contract`];
    /// default: MPI's).
    pub contract: railcoll_host::BufferContract,
    /// Whether a modeled run moves its payload bytes ([`DataMode`];
    /// default: all of them). Threads mode moves them all.
    pub data: DataMode,
    /// Modeled mode: report the sequencer's event rate on stderr about
    /// once a second of wall time (`--progress`; default off).
    pub progress: bool,
}

/// How the emulator runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Free-running OS threads, wall-clock time: exercises real
    /// concurrency and measures the software path itself.
    #[default]
    Threads,
    /// Deterministic virtual time with costs from a profile.
    Modeled,
}

impl Mode {
    /// Every mode, by name.
    pub const ALL: [(&'static str, Mode); 2] =
        [("threads", Mode::Threads), ("modeled", Mode::Modeled)];

    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Threads => "threads",
            Mode::Modeled => "modeled",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Mode::ALL
            .iter()
            .find(|(n, _)| *n == s)
            .map(|(_, m)| *m)
            .ok_or_else(|| format!("unknown mode `{s}` (accepted: threads, modeled)"))
    }
}

/// Default packet size in threads mode. Elan4 used 2 KiB packets; emulating
/// each packet costs a fixed ~0.3-1 us of software here, so threads mode
/// uses larger packets to measure the software path rather than per-packet
/// overhead (docs/performance.md). Tests run 1-2 KiB packets too.
pub const THREADS_PACKET_SIZE: u32 = 64 * 1024;

impl ClusterConfig {
    /// Threads mode's NIC worker threads for `nics` NICs when `ranks`
    /// rank threads run on this machine: [`Self::workers`] if set, else
    /// the cores the ranks leave free; at least 1, and (unless set) at
    /// most one per NIC. With more busy threads than cores every hand-off
    /// becomes a ~10 us context switch (docs/performance.md).
    pub fn worker_count(&self, ranks: usize, nics: usize) -> usize {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        self.workers
            .unwrap_or_else(|| cores.saturating_sub(ranks).min(nics))
            .max(1)
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            shape: Shape::default(),
            workers: None,
            inline_nic: true,
            arena_size: 16 << 20,
            packet_size: THREADS_PACKET_SIZE,
            policy: RailPolicy::default(),
            cq_log2: 8,
            wait_timeout: std::time::Duration::from_secs(120),
            mode: Mode::Threads,
            seed: 0,
            tuning: TuningTable::shared_builtin(),
            faults: Arc::new(FaultSpec::default()),
            retransmit_timeout: None,
            retry_limit: None,
            check: cfg!(debug_assertions),
            contract: railcoll_host::BufferContract::Mpi,
            data: DataMode::Full,
            progress: false,
        }
    }
}

/// Most nodes a threads-mode cluster has (a thread per rank and every
/// node's memory backed): modeled mode takes the host's `MAX_NODES`.
pub const THREADS_MAX_NODES: usize = 256;

impl ClusterConfig {
    /// Check every field; the error names the field and the accepted values.
    pub fn validate(&self) -> Result<Shape, EmuError> {
        // The shape was validated when it was made (nodes up to the host's
        // limit: an emulated NIC keeps flow state per peer it talks to).
        // Threads mode runs a thread per rank and backs every node's
        // memory: it stays at the sizes one machine runs; scale is
        // modeled mode's.
        if self.mode == Mode::Threads && self.shape.nodes() > THREADS_MAX_NODES {
            return Err(EmuError::Config(format!(
                "nodes must be 1..={THREADS_MAX_NODES} in threads mode (modeled mode takes up to {}), got {}",
                railcoll_host::topology::MAX_NODES,
                self.shape.nodes()
            )));
        }
        if self.workers == Some(0) {
            return Err(EmuError::Config("workers must be at least 1".into()));
        }
        if !self.packet_size.is_power_of_two()
            || !(MIN_PACKET_SIZE..=MAX_PACKET_SIZE).contains(&self.packet_size)
        {
            return Err(EmuError::Config(format!(
                "packet size must be a power of two in {MIN_PACKET_SIZE}..={MAX_PACKET_SIZE}, got {}",
                self.packet_size
            )));
        }
        if self.arena_size == 0 || self.arena_size > 1 << 34 {
            return Err(EmuError::Config(format!(
                "arena size must be 1..=16 GiB, got {}",
                self.arena_size
            )));
        }
        if let RailPolicy::Rail(r) = self.policy
            && r >= self.shape.rails
        {
            return Err(EmuError::Config(format!(
                "rail policy names rail {r}, but there are {} rails",
                self.shape.rails
            )));
        }
        self.faults
            .check_against(self.shape.nodes(), self.shape.rails)
            .map_err(|e| EmuError::Config(e.to_string()))?;
        if let Some(t) = self.retransmit_timeout
            && t < std::time::Duration::from_micros(1)
        {
            return Err(EmuError::Config(format!(
                "retransmission timeout must be at least 1 us, got {t:?}"
            )));
        }
        if self.retry_limit == Some(0) {
            return Err(EmuError::Config("retry limit must be at least 1".into()));
        }
        if self.data.elides() && self.mode != Mode::Modeled {
            return Err(EmuError::Config(format!(
                "data mode {} is modeled mode's (threads mode's time is the time its copies take)",
                self.data
            )));
        }
        self.data_sample()?;
        Ok(self.shape)
    }

    /// The ranks whose data a run of this configuration moves.
    pub(super) fn data_sample(&self) -> Result<DataSample, EmuError> {
        let size = self.shape.size();
        DataSample::draw(self.data, size, self.seed).ok_or_else(|| {
            EmuError::Config(format!(
                "data mode {} samples more ranks than the job's {size}",
                self.data
            ))
        })
    }

    /// The NICs this configuration runs (threads mode).
    pub(crate) fn nic_plan(&self) -> NicPlan {
        NicPlan {
            nodes: self.shape.nodes(),
            rails: self.shape.rails,
            faults: Arc::clone(&self.faults),
            seed: self.seed,
            fabric: None,
        }
    }

    /// The retransmission timeout in ns, if one is set.
    pub(super) fn retransmit_ns(&self) -> Option<u64> {
        self.retransmit_timeout
            .map(|t| u64::try_from(t.as_nanos()).unwrap_or(u64::MAX))
    }
}
