//! The command line's grammar: every subcommand's arguments (clap derive)
//! and the parsers of sizes, times and contracts they use.

use super::*;

/// railcoll: NIC-offloaded collectives on emulated multi-rail Elan-style clusters.
#[derive(Debug, Parser)]
#[command(name = "railcoll", version, about, long_about = None, args_override_self = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every algorithm x message size on a cluster: an OSU-style table
    /// with the best per size and its speedup over the baseline, CSV,
    /// JSON and the papers' figure.
    Sweep(SweepArgs),
    /// Trace one call as Chrome trace JSON (ranks, NICs, rails).
    Trace(TraceArgs),
    /// Sweep cluster shapes and write the tuning table the library uses.
    Tune(TuneArgs),
    /// Fit a profile's link and NIC costs to your own point-to-point
    /// measurements (osu_latency, osu_bw or CSV) by least squares.
    Calibrate(CalibrateArgs),
    /// The model's error against measured collective latencies (CSV or
    /// OSU output), per algorithm and size, with a plot.
    Validate(ValidateArgs),
    /// Measure operations on the emulated cluster.
    Bench {
        /// Which operation.
        #[command(subcommand)]
        what: BenchCommand,
    },
    /// Inspect the schedules the algorithms generate.
    Schedule {
        /// What to do.
        #[command(subcommand)]
        what: ScheduleCommand,
    },
    /// Calibration profiles of modeled mode.
    Profile {
        /// What to do.
        #[command(subcommand)]
        what: ProfileCommand,
    },
    /// The tuning table that picks algorithms for plain collective calls.
    Tuning {
        /// What to do.
        #[command(subcommand)]
        what: TuningCommand,
    },
    /// Soak in threads mode: many barriers and all-gathers on one
    /// cluster, with the process's resident memory, threads and file
    /// descriptors sampled along the way (a leak shows as growth).
    Soak(SoakArgs),
    /// Serve a job's NICs to rank processes as vfio-user devices, one
    /// socket per NIC in `--dir`, until killed.
    Nicd(NicdArgs),
    /// Run a program as every rank of a job on this machine, as
    /// processes, with their NICs served by a nicd in this process.
    Launch(LaunchArgs),
    /// The NIC conformance suite (docs/abi.md, docs/hil.md): every
    /// ABI-level check on an in-process emulator, or, with --join, as a
    /// rank of a launched job against its nicd's devices.
    Conformance(ConformanceArgs),
}

/// `railcoll conformance`.
#[derive(Debug, Args)]
pub struct ConformanceArgs {
    /// Cluster shape (of the in-process emulator; ignored with --join).
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Faults on the in-process emulator's rails (go-back-N under loss).
    #[command(flatten)]
    pub faults: FaultArgs,
    /// Seed of the faults.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Run as a rank of a job a launcher started (`railcoll launch ... --
    /// railcoll conformance --join`, or mpirun with RAILCOLL_NICD set):
    /// the devices are the nicd's, over vfio-user.
    #[arg(long)]
    pub join: bool,
    /// Run on a board's NICs behind Linux VFIO instead: one PCI device
    /// per rail (comma-separated addresses, e.g. 0000:03:00.0,0000:04:00.0,
    /// bound to vfio-pci); one node, --ranks-per-node ranks as threads.
    #[arg(long, value_delimiter = ',', conflicts_with = "join")]
    pub vfio: Vec<String>,
    /// Only these checks (comma-separated names; --list names them).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// List the checks and exit.
    #[arg(long)]
    pub list: bool,
}

/// What a `nicd` serves (`railcoll nicd`, `railcoll launch`).
#[derive(Debug, Args, Clone)]
pub struct ServedArgs {
    /// Cluster shape.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Each rank's symmetric arena (a size: 64K, 16M).
    #[arg(long, default_value = "16M", value_parser = parse_size)]
    pub arena: usize,
    /// How long a NIC bring-up may wait, and, with --fabric, how long the
    /// ranks of the other hosts may take to meet this host's (seconds).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
    /// The job's nodes are on several hosts, as this fabric file places
    /// them (docs/library.md, "Rails between machines"); serve this
    /// host's only, with `--host`.
    #[arg(long, requires = "host")]
    pub fabric: Option<std::path::PathBuf>,
    /// Which host of `--fabric` this is (its index in the file, from 0).
    #[arg(long, requires = "fabric")]
    pub host: Option<usize>,
}

impl ServedArgs {
    /// The cluster these flags describe.
    pub fn config(&self) -> Result<ClusterConfig, railcoll_host::Error> {
        Ok(ClusterConfig {
            arena_size: self.arena,
            wait_timeout: std::time::Duration::from_secs(self.timeout),
            ..self.cluster.config()?
        })
    }

    /// This host of `--fabric`, for the cluster `cfg`, if one is given.
    pub fn here(
        &self,
        cfg: &ClusterConfig,
    ) -> Result<Option<crate::fabric::Here>, crate::fabric::FabricError> {
        let (Some(file), Some(host)) = (&self.fabric, self.host) else {
            return Ok(None);
        };
        let fabric = crate::fabric::Fabric::read(file)?;
        crate::fabric::Here::new(fabric, host, cfg.shape.nodes(), cfg.shape.rails).map(Some)
    }
}

/// `railcoll nicd`.
#[derive(Debug, Args)]
pub struct NicdArgs {
    /// What it serves.
    #[command(flatten)]
    pub served: ServedArgs,
    /// The directory to serve in (must exist): one socket per NIC and the
    /// job file the ranks read.
    #[arg(long)]
    pub dir: std::path::PathBuf,
}

/// `railcoll launch`.
#[derive(Debug, Args)]
pub struct LaunchArgs {
    /// What its nicd serves.
    #[command(flatten)]
    pub served: ServedArgs,
    /// Seconds the other ranks may run on after one failed, before they
    /// are killed.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub grace: u64,
    /// Use the nicd already serving this directory (`railcoll nicd`)
    /// instead of starting one; the shape flags must be the ones it
    /// serves.
    #[arg(long)]
    pub nicd: Option<std::path::PathBuf>,
    /// Write each rank's output to `rank-R.out` and `rank-R.err` in this
    /// directory (which must exist) instead of the launcher's.
    #[arg(long)]
    pub output: Option<std::path::PathBuf>,
    /// The program each rank runs, and its arguments (after `--`).
    #[arg(required = true, last = true, num_args = 1..)]
    pub program: Vec<String>,
}

/// `railcoll soak`.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Cluster shape.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Barriers in all.
    #[arg(long, default_value_t = 1_000_000)]
    pub barriers: u64,
    /// All-gathers in all.
    #[arg(long, default_value_t = 100_000)]
    pub allgathers: u64,
    /// All-gather block size.
    #[arg(long, default_value = "1K", value_parser = parse_size)]
    pub size: usize,
    /// Samples of the process's use (rounds of work between them).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub samples: u64,
}

/// `railcoll schedule ...`.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Print one rank's schedule, whether the verifier accepts the whole
    /// set, and its Hockney cost beside the paper's formula.
    Show(ScheduleArgs),
    /// The catalogue: every algorithm of every collective (gather,
    /// all-gather, all-to-all, broadcast, barrier) with its reference, what it needs and its closed form (Markdown,
    /// as docs/algorithms.md carries it).
    List,
}

/// `railcoll profile ...`.
#[derive(Debug, Subcommand)]
pub enum ProfileCommand {
    /// Print a profile (built-in name or TOML file), every number with its
    /// source, after validating it.
    Show {
        /// qsnet2-dual, clan-via, ib-multicore, hockney, or a path.
        name: String,
    },
    /// List the built-in profiles.
    List,
}

/// `railcoll tuning ...`.
#[derive(Debug, Subcommand)]
pub enum TuningCommand {
    /// Print the table in use (RAILCOLL_TUNING, else the user's table
    /// written by `railcoll tune`, else the built-in one).
    Show {
        /// Print this file instead (after validating it).
        #[arg(long, alias = "file")]
        tuning: Option<std::path::PathBuf>,
    },
}

/// `railcoll schedule show`.
#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// Collective: gather, allgather, alltoall, bcast or barrier.
    #[arg(value_parser = |s: &str| s.parse::<Collective>())]
    pub collective: Collective,
    /// Algorithm name, or NAME@nic for the set compiled onto the NICs (give
    /// a wrong one to be told the list).
    pub algorithm: String,
    /// Cluster shape.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Rank whose schedule to print.
    #[arg(long, default_value_t = 0)]
    pub rank: usize,
    /// Block size in bytes.
    #[arg(long, default_value = "64", value_parser = parse_size)]
    pub size: usize,
    /// Root (gather).
    #[arg(long, default_value_t = 0)]
    pub root: usize,
    /// Hockney start-up time, microseconds.
    #[arg(long, default_value_t = Hockney::QSNET2.t_s)]
    pub t_s: f64,
    /// Hockney per-rail bandwidth, MB/s.
    #[arg(long, default_value_t = 900.0)]
    pub bandwidth: f64,
    /// The set a persistent collective runs: guarded under either buffer
    /// contract, so that its starts follow each other with no barrier.
    #[arg(long)]
    pub persistent: bool,
    /// The buffer contract the set is for: `mpi` (the library's default:
    /// with the readiness guard wherever the algorithm could write a rank
    /// that has not entered) or `shmem` (as the papers describe it).
    #[arg(long, default_value = "mpi", value_parser = parse_contract)]
    pub contract: railcoll_host::BufferContract,
    /// Also print the rank's program NIC by NIC: the blocks the host writes
    /// ahead, the events it arms and what each does, the chain blocks held.
    #[arg(long)]
    pub offload: bool,
}

/// `railcoll bench ...`.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// RDMA put latency and bandwidth, on one rail and striped, beside
    /// memcpy and a cache-line ping-pong measured in the same run.
    Put(PutArgs),
    /// Barrier latency per algorithm, beside a cache-line ping-pong.
    Barrier(BarrierArgs),
    /// Broadcast latency per algorithm and size, beside a ping-pong.
    Bcast(BcastArgs),
    /// Gather latency per algorithm and block size.
    Gather(CollArgs),
    /// All-gather latency per algorithm and block size.
    Allgather(CollArgs),
    /// All-to-all latency per algorithm and block size.
    Alltoall(CollArgs),
    /// How long after one rank's collective fails every other rank has
    /// returned the revoke, beside the tuned barrier.
    Revoke(RevokeArgs),
}

/// `railcoll bench revoke`.
#[derive(Debug, Args)]
pub struct RevokeArgs {
    /// Cluster shape.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Threads or modeled.
    #[command(flatten)]
    pub run: ModeArgs,
    /// Interleaved rounds (medians are reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub rounds: u16,
}

/// `railcoll bench gather|allgather|alltoall`.
#[derive(Debug, Args)]
pub struct CollArgs {
    /// Cluster shape.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Threads or modeled.
    #[command(flatten)]
    pub run: ModeArgs,
    /// Algorithm name (NAME@nic: compiled onto the NICs; NAME@nic-dma:
    /// their DMA doing the local copies too), a list, `all` (every
    /// algorithm that runs on the shape), `all@nic` or `all@nic-dma`.
    #[arg(long, default_value = "all")]
    pub algo: String,
    /// Block sizes: a list (8,64,1K) or a power-of-two range (4..1M).
    #[arg(long, default_value = "4..64K", value_parser = parse_sizes)]
    pub sizes: Sizes,
    /// Root rank (gather).
    #[arg(long, default_value_t = 0)]
    pub root: usize,
    /// Operations per timed sample (each after a barrier).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub iters: u32,
    /// Interleaved rounds (medians are reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub rounds: u16,
    /// Measure overlap instead of latency: start the non-blocking form,
    /// compute for its duration, wait [OSU-MB]; prints overlap % per
    /// algorithm and size.
    #[arg(long)]
    pub overlap: bool,
}

/// `railcoll bench barrier`.
#[derive(Debug, Args)]
pub struct BarrierArgs {
    /// Cluster shape.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Threads or modeled.
    #[command(flatten)]
    pub run: ModeArgs,
    /// Algorithm: rdma, shm, smp, sendrecv, hardware (each also NAME@nic
    /// and NAME@nic-dma), a list, all, all@nic or all@nic-dma.
    #[arg(long, default_value = "all")]
    pub algo: String,
    /// Barriers per timed sample.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub iters: u32,
    /// Interleaved rounds (medians are reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub rounds: u16,
    /// Measure overlap instead of latency: start the non-blocking form,
    /// compute for its duration, wait [OSU-MB]; prints overlap % per
    /// algorithm and size.
    #[arg(long)]
    pub overlap: bool,
}

/// `railcoll bench bcast`.
#[derive(Debug, Args)]
pub struct BcastArgs {
    /// Cluster shape.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Threads or modeled.
    #[command(flatten)]
    pub run: ModeArgs,
    /// Algorithm: binomial, shm, smp, hardware (each also NAME@nic and
    /// NAME@nic-dma), a list, all, all@nic or all@nic-dma.
    #[arg(long, default_value = "all")]
    pub algo: String,
    /// Message sizes: a list (8,64,1K) or a power-of-two range (8..1M).
    #[arg(long, default_value = "8..1M", value_parser = parse_sizes)]
    pub sizes: Sizes,
    /// Root rank.
    #[arg(long, default_value_t = 0)]
    pub root: usize,
    /// Broadcasts per timed sample.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub iters: u32,
    /// Interleaved rounds (medians are reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub rounds: u16,
    /// Measure overlap instead of latency: start the non-blocking form,
    /// compute for its duration, wait [OSU-MB]; prints overlap % per
    /// algorithm and size.
    #[arg(long)]
    pub overlap: bool,
}

/// How the emulator runs a measurement (every `bench` subcommand).
#[derive(Debug, Args, Clone)]
pub struct ModeArgs {
    /// threads: free-running threads, wall time (measures the software);
    /// modeled: deterministic virtual time under --profile (predicts the
    /// hardware).
    #[arg(long, default_value = "threads", value_parser = |s: &str| s.parse::<Mode>())]
    pub mode: Mode,
    /// Calibration profile for modeled mode: a built-in name
    /// (qsnet2-dual, clan-via, ib-multicore, hockney) or a TOML file.
    #[arg(long, default_value = DEFAULT_PROFILE)]
    pub profile: String,
    /// Seed of a modeled run (recorded in its trace and watchdog reports;
    /// it also drives --faults).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Modeled mode's payload: full (every byte moved and checked), none
    /// (no payload moved; the schedule verifier proves each schedule
    /// first), or sample=N (the data of rank 0 and N - 1 seeded others
    /// moved, and checked wherever it must land).
    #[arg(long, default_value = "full", value_parser = |s: &str| s.parse::<DataMode>())]
    pub data: DataMode,
    /// Modeled mode: report the sequencer's events per second on stderr
    /// about once a second (long runs).
    #[arg(long)]
    pub progress: bool,
    /// Injected faults.
    #[command(flatten)]
    pub faults: FaultArgs,
    /// Modeled mode: run everything twice (the second time with the other
    /// worker count) and fail unless every trace hash is identical.
    #[arg(long)]
    pub check_determinism: bool,
    /// Skip the check of the results: by default, after the timed calls
    /// (outside the timed region), every rank's receive buffer is compared
    /// with the collective's definition, and a wrong result fails the run
    /// (exit 1) with no figure printed or written.
    #[arg(long)]
    pub no_verify: bool,
}

/// Faults injected on the rails, and threads mode's watchdog: shared by
/// every command that runs collectives.
#[derive(Debug, Args, Clone)]
pub struct FaultArgs {
    /// What goes wrong on the rails, seeded by --seed: comma-separated
    /// drop=P, drop-collective=P, corrupt=P, dup=P, delay=P or P:TIME,
    /// rail-down=RAIL@TIME, rail-up=RAIL@TIME, stall=NODE.RAIL@TIME+TIME
    /// (e.g. drop=0.01,corrupt=0.001,rail-down=1@250us).
    #[arg(long, default_value = "none", value_parser = |s: &str| s.parse::<FaultSpec>().map_err(|e| e.to_string()))]
    pub faults: FaultSpec,
    /// The NICs' retransmission timeout (default: the firmware's, 50 ms);
    /// under --faults every loss costs one.
    #[arg(long, value_parser = parse_time)]
    pub retransmit_timeout: Option<std::time::Duration>,
    /// Fruitless retransmission timeouts before a flow leaves its rail
    /// for the alternate, or breaks (default: the firmware's, 16; >= 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub retry_limit: Option<u32>,
    /// Threads mode: how long a rank's wait may make no progress before
    /// the run fails with a report naming every rank's pending step
    /// (modeled mode's watchdog works in virtual time).
    #[arg(long, default_value = "120s", value_parser = parse_watchdog)]
    pub watchdog: std::time::Duration,
    /// Check every collective call's arguments against the other ranks'
    /// before it runs (off by default here: it adds a neighbour exchange
    /// to every timed call, and the commands verify every receive buffer
    /// after the timed calls instead).
    #[arg(long)]
    pub check: bool,
    /// The buffer contract of every communicator: `mpi` (the library's
    /// default: calls may follow each other on the same buffers, at the
    /// cost of a readiness message per writer where an algorithm could
    /// write early) or `shmem` (no readiness messages; calls whose
    /// buffers overlap need a barrier between them, or data is lost).
    #[arg(long, default_value = "mpi", value_parser = parse_contract)]
    pub contract: railcoll_host::BufferContract,
}

/// `--contract`: `mpi` or `shmem`.
pub(super) fn parse_contract(s: &str) -> Result<railcoll_host::BufferContract, String> {
    s.parse().map_err(|e: railcoll_host::Error| e.to_string())
}

/// A watchdog's time: a time, and not zero (a wait that may make no
/// progress for no time at all fails at once).
pub(super) fn parse_watchdog(s: &str) -> Result<std::time::Duration, String> {
    match parse_time(s)? {
        d if d.is_zero() => Err(format!(
            "the watchdog needs a time above zero, got '{s}' (accepted: e.g. 500ms, 30s)"
        )),
        d => Ok(d),
    }
}

impl FaultArgs {
    /// `cfg` with these faults and this watchdog.
    pub fn apply(&self, cfg: ClusterConfig) -> ClusterConfig {
        ClusterConfig {
            faults: std::sync::Arc::new(self.faults.clone()),
            retransmit_timeout: self.retransmit_timeout,
            retry_limit: self.retry_limit,
            wait_timeout: self.watchdog,
            check: self.check,
            contract: self.contract,
            ..cfg
        }
    }
}

/// The cluster shape, shared by every subcommand.
#[derive(Debug, Args, Clone)]
pub struct ClusterArgs {
    /// Nodes (1..=32768; 1..=256 in threads mode).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=32768))]
    pub nodes: u32,
    /// Ranks per node (1..=16).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=16))]
    pub ranks_per_node: u8,
    /// Rails, i.e. NICs per node (1..=4).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub rails: u8,
    /// Rank placement.
    #[arg(long, default_value = "block", value_parser = ["block", "cyclic"])]
    pub placement: String,
    /// Sockets per node (multi-leader all-gather: one leader per socket).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=64))]
    pub sockets: u8,
    /// NIC worker threads (default: the cores the ranks leave free, at
    /// least 1, at most one per NIC).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=64))]
    pub workers: Option<u8>,
    /// Leave all NIC work to the workers (for comparison; by default
    /// waiting ranks run it when they and the workers outnumber the
    /// cores).
    #[arg(long)]
    pub no_inline_nic: bool,
    /// NIC packet payload size in bytes (a power of two, 64..=1M).
    #[arg(long, default_value_t = THREADS_PACKET_SIZE as u64, value_parser = parse_packet_size)]
    pub packet_size: u64,
    /// Print one JSON object per result line instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl ClusterArgs {
    /// The emulator configuration these flags describe (the shape
    /// checked).
    pub fn config(&self) -> Result<ClusterConfig, railcoll_host::Error> {
        let shape = Shape::new(
            self.nodes as usize,
            self.ranks_per_node as usize,
            usize::from(self.sockets),
            self.rails as usize,
            self.placement.parse().unwrap_or(Placement::Block),
        )?;
        Ok(ClusterConfig {
            shape,
            workers: self.workers.map(usize::from),
            inline_nic: !self.no_inline_nic,
            packet_size: self.packet_size as u32,
            tuning: users_tuning()?,
            ..ClusterConfig::default()
        })
    }
}

/// `railcoll bench put`.
#[derive(Debug, Args)]
pub struct PutArgs {
    /// Cluster shape.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Message sizes: a list (8,64,1K) or a power-of-two range (8..4M).
    #[arg(long, default_value = "8..4M", value_parser = parse_sizes)]
    pub sizes: Sizes,
    /// Interleaved rounds per size (medians are reported).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub rounds: u16,
}

/// A parsed `--sizes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sizes(pub Vec<usize>);

/// Parse `8`, `4K`, `1M`, `2G` (binary multiples).
pub fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1usize << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    let n: usize = digits.parse().map_err(|_| {
        format!("'{s}' is not a size (accepted: a number with optional K, M or G, e.g. 64, 4K, 1M)")
    })?;
    n.checked_mul(mult)
        .filter(|v| *v <= 1 << 31)
        .ok_or_else(|| format!("size '{s}' is larger than 2G"))
}

/// Parse a size list or a power-of-two range.
pub fn parse_sizes(s: &str) -> Result<Sizes, String> {
    let sizes = if let Some((lo, hi)) = s.split_once("..") {
        let (lo, hi) = (parse_size(lo)?, parse_size(hi)?);
        if lo == 0 || lo > hi {
            return Err(format!(
                "range '{s}' must be LO..HI with 1 <= LO <= HI (e.g. 8..4M)"
            ));
        }
        bench::pow2_sizes(lo, hi)
    } else {
        s.split(',')
            .map(parse_size)
            .collect::<Result<Vec<_>, _>>()?
    };
    if sizes.contains(&0) {
        return Err("size 0 is not allowed (accepted: sizes of 1 byte to 2G)".into());
    }
    if sizes.is_empty() {
        return Err("no sizes given (accepted: a list like 8,64,1K or a range like 8..4M)".into());
    }
    // A size given twice is one point (first occurrence order kept):
    // `4,4,4` runs 4 once, not three identical points.
    let mut seen = std::collections::HashSet::new();
    Ok(Sizes(
        sizes.into_iter().filter(|s| seen.insert(*s)).collect(),
    ))
}

pub(super) fn parse_packet_size(s: &str) -> Result<u64, String> {
    let v = parse_size(s)?;
    if !v.is_power_of_two() || !(64..=1 << 20).contains(&v) {
        return Err(format!("packet size {v} must be a power of two in 64..=1M"));
    }
    Ok(v as u64)
}
