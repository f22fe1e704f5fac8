//! The `railcoll` command line.
//!
//! Conventions shared by every subcommand: the cluster shape (`--nodes`,
//! `--ranks-per-node`, `--rails`, `--placement`), `--sizes` as a list
//! (`8,64,1K`) or a power-of-two range (`8..4M`), and `--json` for one JSON
//! object per result line. Bad arguments exit with status 2 and one line
//! naming the problem and the accepted values. Every flag can also come
//! from a study file (`--config FILE.toml`, see
//! [`crate::workbench::config`]).
//!
//! - this module: parsing, the `bench`, `schedule`, `profile` and `tuning`
//!   subcommands;
//! - `workbench`: `sweep`, `trace` and `tune`;
//! - `calibration`: `calibrate` and `validate`;
//! - [`error`]: [`CliError`], and the one place that prints it and picks
//!   the exit status.

mod calibration;
pub mod error;
mod workbench;

use std::io::Write;

use clap::{Args, CommandFactory, Parser, Subcommand};
use railcoll_host::Placement;

use crate::bench::{self, CollBench, CollRecord, PutRecord};
use crate::cluster::{ClusterConfig, Mode, THREADS_PACKET_SIZE};
use crate::hw::faults::{FaultSpec, parse_time};
use crate::modeled::{DEFAULT_PROFILE, Profile};
use railcoll_host::sched::catalogue;
use railcoll_host::sched::cost::{self, Hockney};
use railcoll_host::sched::tuning::TuningTable;
use railcoll_host::sched::verify::{Budget, verify};
use railcoll_host::sched::{Collective, Params, Shape, generate};

use crate::workbench::AlgoSet;
pub use calibration::{CalibrateArgs, ValidateArgs};
pub use error::CliError;
use error::output;
pub use workbench::{StudyArgs, SweepArgs, TraceArgs, TuneArgs};

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
fn parse_contract(s: &str) -> Result<railcoll_host::BufferContract, String> {
    s.parse().map_err(|e: railcoll_host::Error| e.to_string())
}

/// A watchdog's time: a time, and not zero (a wait that may make no
/// progress for no time at all fails at once).
fn parse_watchdog(s: &str) -> Result<std::time::Duration, String> {
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
    /// Nodes (1..=256).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub nodes: u16,
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
    /// NIC worker threads (default: one per rail, at most cores - 1).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=64))]
    pub workers: Option<u8>,
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
            packet_size: self.packet_size as u32,
            tuning: users_tuning()?,
            ..ClusterConfig::default()
        })
    }
}

/// The tuning table the user chose (`RAILCOLL_TUNING`, else the table
/// `railcoll tune` wrote, else the built-in: [`TuningTable::locate`]),
/// read once per command: every cluster the command builds gets this one,
/// and a bad file fails the command before it runs anything.
pub(crate) fn users_tuning() -> Result<std::sync::Arc<TuningTable>, railcoll_host::Error> {
    static TABLE: std::sync::OnceLock<std::sync::Arc<TuningTable>> = std::sync::OnceLock::new();
    if let Some(table) = TABLE.get() {
        return Ok(std::sync::Arc::clone(table));
    }
    let table = std::sync::Arc::new(locate_tuning()?.0);
    Ok(std::sync::Arc::clone(TABLE.get_or_init(|| table)))
}

/// [`TuningTable::locate`] with the user's table where the XDG Base
/// Directory spec puts it ([`user_tuning_path`]).
fn locate_tuning()
-> Result<(TuningTable, railcoll_host::sched::tuning::TuningSource), railcoll_host::Error> {
    TuningTable::locate_in(
        std::env::var_os(railcoll_host::sched::tuning::ENV),
        user_tuning_path(),
    )
}

/// The user's tuning table: `$XDG_CONFIG_HOME/railcoll/tuning.toml`, else
/// `$HOME/.config/railcoll/tuning.toml`. A relative `XDG_CONFIG_HOME` is
/// ignored, as the XDG Base Directory spec requires (it would name a
/// different file in every directory the command runs from).
pub(crate) fn user_tuning_path() -> Option<std::path::PathBuf> {
    user_tuning_path_in(
        std::env::var_os("XDG_CONFIG_HOME"),
        std::env::var_os("HOME"),
    )
}

fn user_tuning_path_in(
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<std::path::PathBuf> {
    let base = xdg
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            home.filter(|h| !h.is_empty())
                .map(|h| std::path::PathBuf::from(h).join(".config"))
        })?;
    Some(base.join("railcoll").join("tuning.toml"))
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

fn parse_packet_size(s: &str) -> Result<u64, String> {
    let v = parse_size(s)?;
    if !v.is_power_of_two() || !(64..=1 << 20).contains(&v) {
        return Err(format!("packet size {v} must be a power of two in 64..=1M"));
    }
    Ok(v as u64)
}

/// Run the CLI on `args`; returns the process exit status. The one exit
/// path: every failure comes back here as a [`CliError`], which
/// [`CliError::report`] prints and turns into the status.
pub fn main_with(args: impl IntoIterator<Item = String>) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(e) => e.report(),
    }
}

/// Parse `args` (with any study file spliced in) and run the command.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<(), CliError> {
    let (args, study) =
        crate::workbench::config::expand_traced(args.into_iter().collect(), &Cli::command())?;
    // A value the parser refuses that came from a study file is reported
    // against the file and its key (the flag means little to its author).
    let cli =
        Cli::try_parse_from(args).map_err(|e| match study.as_ref().and_then(|s| s.blame(&e)) {
            Some(message) => CliError::Usage(message),
            None => CliError::Arguments(e),
        })?;
    match cli.command {
        Command::Sweep(args) => workbench::run_sweep(&args),
        Command::Trace(args) => workbench::run_trace(&args),
        Command::Tune(args) => workbench::run_tune(&args),
        Command::Calibrate(args) => calibration::run_calibrate(&args),
        Command::Validate(args) => calibration::run_validate(&args),
        Command::Bench { what } => match what {
            BenchCommand::Put(args) => run_put(&args),
            BenchCommand::Barrier(args) => run_barrier(&args),
            BenchCommand::Bcast(args) => run_bcast(&args),
            BenchCommand::Gather(args) => run_catalogue(Collective::Gather, &args),
            BenchCommand::Allgather(args) => run_catalogue(Collective::Allgather, &args),
            BenchCommand::Alltoall(args) => run_catalogue(Collective::Alltoall, &args),
            BenchCommand::Revoke(args) => run_revoke(&args),
        },
        Command::Schedule {
            what: ScheduleCommand::Show(args),
        } => run_schedule_show(&args),
        Command::Schedule {
            what: ScheduleCommand::List,
        } => print_text(catalogue::markdown()),
        Command::Tuning {
            what: TuningCommand::Show { tuning },
        } => run_tuning_show(tuning.as_deref()),
        Command::Profile { what } => run_profile(&what),
        Command::Soak(args) => run_soak(&args),
    }
}

fn run_soak(args: &SoakArgs) -> Result<(), CliError> {
    let cfg = args.cluster.config()?;
    let cluster = crate::Cluster::new(cfg)?;
    let spec = crate::soak::SoakSpec {
        barriers: args.barriers,
        allgathers: args.allgathers,
        block: args.size,
        samples: args.samples,
    };
    let quiet = args.cluster.json;
    let samples = crate::soak::soak(&cluster, &spec, &|done| {
        if !quiet {
            eprint!("\r# {done} operations          ");
        }
    });
    if !quiet {
        eprintln!();
    }
    let samples = samples?;
    let mut out = std::io::stdout().lock();
    let mut write = || -> std::io::Result<()> {
        if quiet {
            for s in &samples {
                writeln!(
                    out,
                    "{{\"barriers\":{},\"allgathers\":{},\"seconds\":{:.3},\"rss_kib\":{},\"threads\":{},\"fds\":{}}}",
                    s.barriers,
                    s.allgathers,
                    s.seconds,
                    s.usage.rss_kib,
                    s.usage.threads,
                    s.usage.fds
                )?;
            }
            return Ok(());
        }
        writeln!(
            out,
            "# railcoll soak, threads mode: {} nodes x {} ranks, {} rails; all-gather blocks of {} B",
            cluster.topology().nodes(),
            cluster.topology().ranks_per_node(),
            cluster.config().shape.rails,
            args.size
        )?;
        writeln!(
            out,
            "{:>10} {:>10} {:>9} {:>10} {:>8} {:>5}",
            "barriers", "allgathers", "seconds", "rss_kib", "threads", "fds"
        )?;
        for s in &samples {
            writeln!(
                out,
                "{:>10} {:>10} {:>9.3} {:>10} {:>8} {:>5}",
                s.barriers, s.allgathers, s.seconds, s.usage.rss_kib, s.usage.threads, s.usage.fds
            )?;
        }
        Ok(())
    };
    write().map_err(CliError::Stdout)
}

/// The shape of `cluster` for the schedule generators.
fn shape_of(cluster: &ClusterArgs) -> Result<Shape, crate::workbench::SpecError> {
    Ok(cluster
        .config()
        .map_err(crate::workbench::SpecError::Shape)?
        .shape)
}

/// Time the algorithms `algo` names of `collective` on the bench's cluster.
fn run_subject(
    collective: Collective,
    algo: &str,
    cluster: &ClusterArgs,
    run: &ModeArgs,
    (sizes, root): (&[usize], usize),
    (iters, rounds, overlap): (u32, u16, bool),
) -> Result<(), CliError> {
    let shape = shape_of(cluster)?;
    crate::workbench::check_root(root, &shape)?;
    let first = sizes.first().copied().unwrap_or(0);
    let set: AlgoSet = crate::workbench::select(collective, algo, shape, root, first)?;
    let verify = !run.no_verify;
    set.with_bench(
        sizes,
        iters as usize,
        rounds as usize,
        root,
        verify,
        |bench| {
            if overlap {
                run_overlap(cluster, run, bench)
            } else {
                run_coll(cluster, run, bench)
            }
        },
    )
}

fn run_catalogue(collective: Collective, args: &CollArgs) -> Result<(), CliError> {
    run_subject(
        collective,
        &args.algo,
        &args.cluster,
        &args.run,
        (&args.sizes.0, args.root),
        (args.iters, args.rounds, args.overlap),
    )
}

fn run_schedule_show(args: &ScheduleArgs) -> Result<(), CliError> {
    let shape = shape_of(&args.cluster)?;
    let n = shape.size();
    for (what, v) in [("--rank", args.rank), ("--root", args.root)] {
        if v >= n {
            return Err(CliError::Usage(format!(
                "{what} {v} is not a rank: the cluster has ranks 0..={}",
                n - 1
            )));
        }
    }
    if !(args.t_s >= 0.0
        && args.bandwidth > 0.0
        && args.t_s.is_finite()
        && args.bandwidth.is_finite())
    {
        return Err(CliError::Usage(
            "--t-s must be >= 0 and --bandwidth > 0 (MB/s)".into(),
        ));
    }
    if args.algorithm == "all" || args.algorithm.contains(',') {
        return Err(CliError::Usage(
            "name one algorithm, not 'all' or a list".into(),
        ));
    }
    let algo = match crate::workbench::select(
        args.collective,
        &args.algorithm,
        shape,
        args.root,
        args.size,
    )?
    .algorithms[..]
    {
        [a] => a,
        _ => return Err(CliError::Usage("name one algorithm".into())),
    };
    let mut params =
        Params::new(args.collective, algo.algorithm, shape, args.root, args.size).with_choice(algo);
    params.guarded = args.persistent || args.contract == railcoll_host::BufferContract::Mpi;
    let set = generate(&params)?;
    let budget = Budget::default();
    // An `@nic` choice: what moved onto the NICs.
    let moved = algo.drive.offloaded().then(|| {
        let m = railcoll_host::sched::offload::moved(&set);
        let peak = set
            .ranks
            .iter()
            .map(|s| railcoll_host::sched::budget::chain_peak(s, &set.params).total)
            .max()
            .unwrap_or(0);
        format!(
            "# on the NICs: {} puts chained{}, {} still posted by the host; at most {peak} chain blocks per rank (budget {}, chain queue {} per NIC)",
            m.chained,
            if m.copies > 0 {
                format!(" and {} local copies by their DMA", m.copies)
            } else {
                String::new()
            },
            m.host_puts,
            budget.chain_blocks,
            budget.chain_queue
        )
    });
    let h = Hockney {
        t_s: args.t_s,
        tau: 1.0 / args.bandwidth,
    };
    let mut out = std::io::stdout().lock();
    let result = (|| -> std::io::Result<()> {
        writeln!(
            out,
            "# {} {} {}: {} nodes x {} ranks ({} placement, {} sockets), k = {} rails, {}{}",
            args.collective,
            algo,
            catalogue::entry(args.collective, algo.algorithm).map_or("", |e| e.reference),
            shape.topology.nodes(),
            shape.topology.ranks_per_node(),
            shape.topology.placement(),
            shape.sockets,
            shape.rails,
            if args.collective.sized() {
                format!("block {} B", args.size)
            } else {
                "no data".to_string()
            },
            if args.collective.rooted() {
                format!(", root {}", args.root)
            } else {
                String::new()
            }
        )?;
        if let Some(line) = &moved {
            writeln!(out, "{line}")?;
        }
        let readiness = set.ranks.iter().flat_map(|r| &r.steps);
        let readiness = readiness
            .filter(|s| matches!(s.op, railcoll_host::sched::Op::Ready { .. }))
            .count();
        if readiness > 0 {
            writeln!(
                out,
                "# guarded ({}): every rank first tells the ranks that touch its buffers it has entered the call ({readiness} readiness notices), and waits for theirs before touching anyone's",
                if args.persistent {
                    "persistent"
                } else {
                    "the MPI buffer contract"
                }
            )?;
        }
        match verify(&set, &budget) {
            Ok(r) => writeln!(
                out,
                "# verified: {} steps, {} puts, at most {} in flight per rail, {} scratch bytes per rank, {} counters, {} flags",
                r.steps, r.puts, r.max_in_flight, r.scratch_bytes, set.counters, set.flags
            )?,
            Err(v) => writeln!(out, "# VERIFIER REJECTS: {v}")?,
        }
        match cost::hockney(&set, &h) {
            Ok(t) => {
                write!(
                    out,
                    "# Hockney (t_s {} us, {} MB/s per rail): {t:.3} us",
                    h.t_s, args.bandwidth
                )?;
                match catalogue::formula(&params, &h) {
                    Some(f) if f.exact => writeln!(out, "; {}: {:.3} us", f.label, f.value)?,
                    Some(f) => writeln!(
                        out,
                        "; {}: {:.3} us (the formula is not meant for N = {n})",
                        f.label, f.value
                    )?,
                    None => writeln!(out, "; no closed form in the papers")?,
                }
            }
            Err(e) => writeln!(out, "# Hockney: {e}")?,
        }
        if let Some(s) = set.rank(args.rank) {
            write!(out, "{s}")?;
        }
        if args.offload
            && let Some(p) = railcoll_host::sched::offload::program(&set, args.rank)
        {
            write!(out, "{p}")?;
            writeln!(
                out,
                "chain budget: {} blocks per rank, {} chain queue entries per NIC",
                budget.chain_blocks, budget.chain_queue
            )?;
        }
        Ok(())
    })();
    output(result)
}

fn run_tuning_show(file: Option<&std::path::Path>) -> Result<(), CliError> {
    let (table, source) = match file {
        Some(path) => {
            // The error names the file.
            let table = TuningTable::load(path).map_err(|e| CliError::Usage(e.to_string()))?;
            (table, path.display().to_string())
        }
        None => {
            let (t, source) = locate_tuning()?;
            (t, source.to_string())
        }
    };
    print_text(format!(
        "# tuning table in use: {source}\n{}",
        table.to_toml()
    ))
}

fn run_put(args: &PutArgs) -> Result<(), CliError> {
    let cfg = args.cluster.config()?;
    let quiet = args.cluster.json;
    let progress = progress_line(quiet);
    let records = bench::put_bench(cfg.clone(), &args.sizes.0, args.rounds as usize, &progress);
    // End the progress line, before the results or the error.
    if !quiet {
        eprintln!();
    }
    let records = records?;
    write_output(args.cluster.json, &records, |out| {
        print_put_table(out, &cfg, &records)
    })
}

fn run_revoke(args: &RevokeArgs) -> Result<(), CliError> {
    let cfg = run_config(&args.cluster, &args.run)?;
    let profile = match args.run.mode {
        Mode::Threads => None,
        Mode::Modeled => Some(Profile::load(&args.run.profile)?.0),
    };
    let record = bench::revoke_bench(cfg, profile.as_ref(), usize::from(args.rounds))?;
    write_output(args.cluster.json, std::slice::from_ref(&record), |out| {
        writeln!(
            out,
            "# revoke: one rank's all-gather fails, the others wait in it ({} ranks, {} mode)",
            record.procs, record.mode
        )?;
        writeln!(
            out,
            "# revoke_us  revoke_max_us  barrier_us  revoke/barrier"
        )?;
        writeln!(
            out,
            "{:10.2}  {:13.2}  {:10.2}  {:14.2}",
            record.revoke_us, record.revoke_max_us, record.barrier_us, record.barrier_ratio
        )
    })
}

fn run_barrier(args: &BarrierArgs) -> Result<(), CliError> {
    run_subject(
        Collective::Barrier,
        &args.algo,
        &args.cluster,
        &args.run,
        (&[0], 0),
        (args.iters, args.rounds, args.overlap),
    )
}

fn run_bcast(args: &BcastArgs) -> Result<(), CliError> {
    run_subject(
        Collective::Bcast,
        &args.algo,
        &args.cluster,
        &args.run,
        (&args.sizes.0, args.root),
        (args.iters, args.rounds, args.overlap),
    )
}

/// The "measured N B" line a run keeps rewriting on stderr (none with
/// `--json`).
fn progress_line(quiet: bool) -> impl Fn(usize) + Sync {
    move |size: usize| {
        if !quiet {
            eprint!("\r# measured {size} B          ");
        }
    }
}

/// The cluster a bench runs on: its shape, and the mode and seed asked.
fn run_config(cluster: &ClusterArgs, run: &ModeArgs) -> Result<ClusterConfig, CliError> {
    Ok(run.faults.apply(ClusterConfig {
        mode: run.mode,
        seed: run.seed,
        ..cluster.config()?
    }))
}

fn run_coll(cluster: &ClusterArgs, run: &ModeArgs, bench: &CollBench<'_>) -> Result<(), CliError> {
    let cfg = run_config(cluster, run)?;
    let quiet = cluster.json;
    let progress = progress_line(quiet);
    let records = match run.mode {
        Mode::Threads => {
            if run.check_determinism {
                return Err(CliError::Usage(
                    "--check-determinism needs --mode modeled (threads mode is not deterministic)"
                        .into(),
                ));
            }
            bench::coll_bench(cfg.clone(), bench, &progress)
        }
        Mode::Modeled => {
            let (profile, _) = Profile::load(&run.profile)?;
            let workers = cluster.workers.map_or(1, usize::from);
            let first = bench::coll_model(cfg.clone(), &profile, bench, workers, &progress);
            match (run.check_determinism, first) {
                (true, Ok(a)) => {
                    let other = if workers == 1 { 2 } else { 1 };
                    match bench::coll_model(cfg.clone(), &profile, bench, other, &progress) {
                        Ok(b) => {
                            let same = a.len() == b.len()
                                && a.iter().zip(&b).all(|(x, y)| {
                                    x.trace_hash == y.trace_hash && x.latency_us == y.latency_us
                                });
                            if !same {
                                // End the progress line before the error.
                                eprintln!();
                                return Err(CliError::Nondeterministic { workers, other });
                            }
                            eprintln!(
                                "\n# determinism: {} runs repeated with {workers} and {other} workers, identical trace hashes",
                                a.len()
                            );
                            Ok(a)
                        }
                        Err(e) => Err(e),
                    }
                }
                (_, r) => r,
            }
        }
    };
    let records = records?;
    if !quiet {
        eprintln!();
    }
    write_output(cluster.json, &records, |out| {
        print_coll_table(out, &cfg, &records)
    })
}

/// `bench ... --overlap`: overlap % per algorithm and size.
fn run_overlap(
    cluster: &ClusterArgs,
    run: &ModeArgs,
    bench: &CollBench<'_>,
) -> Result<(), CliError> {
    let cfg = run_config(cluster, run)?;
    if run.check_determinism {
        return Err(CliError::Usage(
            "--check-determinism does not apply to --overlap".into(),
        ));
    }
    let quiet = cluster.json;
    let progress = progress_line(quiet);
    let records = match run.mode {
        Mode::Threads => crate::overlap::overlap_threads(cfg.clone(), bench, &progress),
        Mode::Modeled => {
            let (profile, _) = Profile::load(&run.profile)?;
            crate::overlap::overlap_modeled(cfg.clone(), &profile, bench, &progress)
        }
    };
    if !quiet {
        eprintln!();
    }
    let records = records?;
    write_output(cluster.json, &records, |out| {
        let Some(first) = records.first() else {
            return Ok(());
        };
        writeln!(
            out,
            "# railcoll {} overlap, {} mode{}: {} nodes x {} ranks, {} rails (the slowest rank, us; overlap % as OSU: 100 x (1 - (total - compute) / pure))",
            first.collective,
            first.mode,
            first
                .profile
                .as_deref()
                .map(|p| format!(", profile {p}"))
                .unwrap_or_default(),
            cfg.shape.nodes(),
            cfg.shape.ranks_per_node(),
            cfg.shape.rails
        )?;
        writeln!(
            out,
            "{:>10} {:>22} {:>10} {:>10} {:>10} {:>9} {:>9}",
            "# size", "algorithm", "pure_us", "compute_us", "total_us", "overlap%", "pure/pp"
        )?;
        for r in &records {
            writeln!(
                out,
                "{:>10} {:>22} {:>10.3} {:>10.3} {:>10.3} {:>9.1} {:>9}",
                r.size,
                r.algorithm,
                r.pure_us,
                r.compute_us,
                r.total_us,
                r.overlap_pct,
                r.pingpong_ratio
                    .map(|x| format!("{x:.1}"))
                    .unwrap_or_else(|| "-".into())
            )?;
        }
        Ok(())
    })
}

fn run_profile(what: &ProfileCommand) -> Result<(), CliError> {
    match what {
        ProfileCommand::List => {
            let mut text = String::new();
            for (name, _) in crate::modeled::profile::BUILTIN {
                let p = Profile::builtin(name).map_err(CliError::BuiltinProfile)?;
                text.push_str(&format!("{name:14} {}\n", p.description));
            }
            print_text(text)
        }
        ProfileCommand::Show { name } => print_text(Profile::load(name)?.1),
    }
}

/// Print a command's text on stdout: the one way plain output leaves (a
/// closed pipe, `railcoll tuning show | true`, ends the command quietly,
/// as a pipe's reader that has read enough expects; `print!` would panic).
fn print_text(text: impl std::fmt::Display) -> Result<(), CliError> {
    output(write!(std::io::stdout().lock(), "{text}"))
}

fn print_coll_table(
    out: &mut impl Write,
    cfg: &ClusterConfig,
    records: &[CollRecord],
) -> std::io::Result<()> {
    let Some(first) = records.first() else {
        return Ok(());
    };
    if first.mode == "modeled" {
        writeln!(
            out,
            "# railcoll {}, modeled mode, profile {}: {} nodes x {} ranks, {} rails (virtual latency: mean over ranks, us)",
            first.collective,
            first.profile.as_deref().unwrap_or("?"),
            cfg.shape.nodes(),
            cfg.shape.ranks_per_node(),
            cfg.shape.rails
        )?;
        writeln!(
            out,
            "{:>10} {:>18} {:>12} {:>12} {:>18}",
            "# size", "algorithm", "latency_us", "max_us", "trace_hash"
        )?;
        for r in records {
            writeln!(
                out,
                "{:>10} {:>18} {:>12.3} {:>12.3} {:>18}",
                r.size,
                r.algorithm,
                r.latency_us,
                r.latency_max_us,
                r.trace_hash.as_deref().unwrap_or("-")
            )?;
        }
        return Ok(());
    }
    writeln!(
        out,
        "# railcoll {}, threads mode: {} nodes x {} ranks, {} rails (latency: mean over ranks, us)",
        first.collective,
        cfg.shape.nodes(),
        cfg.shape.ranks_per_node(),
        cfg.shape.rails
    )?;
    writeln!(
        out,
        "# ratio: latency / cache-line ping-pong round trip measured in the same run"
    )?;
    writeln!(
        out,
        "{:>10} {:>18} {:>12} {:>12} {:>12} {:>10}",
        "# size", "algorithm", "latency_us", "max_us", "pingpong_ns", "lat/ping"
    )?;
    for r in records {
        writeln!(
            out,
            "{:>10} {:>18} {:>12.2} {:>12.2} {:>12.0} {:>10.1}",
            r.size,
            r.algorithm,
            r.latency_us,
            r.latency_max_us,
            r.pingpong_rtt_ns.unwrap_or(f64::NAN),
            r.pingpong_ratio.unwrap_or(f64::NAN)
        )?;
    }
    Ok(())
}

/// Print `records` as JSON lines or with `table` (a closed pipe is not an
/// error).
fn write_output<T: serde::Serialize>(
    json: bool,
    records: &[T],
    table: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>,
) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let result = if json {
        print_json(&mut out, records)
    } else {
        table(&mut out)
    };
    output(result)
}

fn print_json<T: serde::Serialize>(out: &mut impl Write, records: &[T]) -> std::io::Result<()> {
    for r in records {
        writeln!(
            out,
            "{}",
            serde_json::to_string(r).map_err(std::io::Error::other)?
        )?;
    }
    Ok(())
}

fn print_put_table(
    out: &mut impl Write,
    cfg: &ClusterConfig,
    records: &[PutRecord],
) -> std::io::Result<()> {
    writeln!(
        out,
        "# railcoll put, threads mode: {} nodes x {} ranks, {} rails, {} B packets",
        cfg.shape.nodes(),
        cfg.shape.ranks_per_node(),
        cfg.shape.rails,
        cfg.packet_size
    )?;
    writeln!(
        out,
        "# latency = post to completion (data delivered and acknowledged)"
    )?;
    writeln!(
        out,
        "# ratios: bandwidth / memcpy bandwidth, latency / cache-line ping-pong round trip (same run)"
    )?;
    writeln!(
        out,
        "{:>10} {:>6} {:>12} {:>10} {:>11} {:>8} {:>12} {:>9}",
        "# size",
        "rails",
        "latency_us",
        "bw_GB/s",
        "memcpy_GB/s",
        "bw/mcpy",
        "pingpong_ns",
        "lat/ping"
    )?;
    for r in records {
        writeln!(
            out,
            "{:>10} {:>6} {:>12.2} {:>10.3} {:>11.3} {:>8.3} {:>12.0} {:>9.1}",
            r.size,
            r.rails,
            r.latency_us,
            r.bandwidth_gbps,
            r.memcpy_gbps,
            r.memcpy_ratio,
            r.pingpong_rtt_ns,
            r.pingpong_ratio
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_lists_and_ranges_and_refuse_garbage() {
        assert_eq!(parse_sizes("8,64,1K"), Ok(Sizes(vec![8, 64, 1024])));
        assert_eq!(parse_sizes("8..64"), Ok(Sizes(vec![8, 16, 32, 64])));
        assert_eq!(parse_sizes("1M..1M"), Ok(Sizes(vec![1 << 20])));
        assert_eq!(parse_sizes("64,4,64,4K,4"), Ok(Sizes(vec![64, 4, 4096])));
        let many = vec!["4"; 5000].join(",");
        assert_eq!(parse_sizes(&many), Ok(Sizes(vec![4])));
        assert!(parse_sizes("64..8").is_err());
        assert!(parse_sizes("0..8").is_err());
        assert!(parse_sizes("abc").is_err());
        assert!(parse_sizes("4T").is_err());
        assert!(parse_sizes("3G").is_err());
        assert!(parse_packet_size("1000").is_err());
        assert_eq!(parse_packet_size("2K"), Ok(2048));
    }

    #[test]
    fn a_relative_xdg_config_home_is_ignored() {
        let path = |xdg: Option<&str>, home: Option<&str>| {
            user_tuning_path_in(xdg.map(Into::into), home.map(Into::into))
        };
        let home = Some(std::path::PathBuf::from("/h/.config/railcoll/tuning.toml"));
        assert_eq!(path(Some("rel/cfg"), Some("/h")), home);
        assert_eq!(path(Some(""), Some("/h")), home);
        assert_eq!(
            path(Some("/x"), Some("/h")),
            Some("/x/railcoll/tuning.toml".into())
        );
        assert_eq!(path(Some("rel"), None), None);
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_arguments_exit_2() {
        let run = |a: &[&str]| {
            main_with(
                std::iter::once("railcoll")
                    .chain(a.iter().copied())
                    .map(String::from),
            )
        };
        assert_eq!(run(&["bench", "put", "--nodes", "0"]), 2);
        assert_eq!(run(&["bench", "put", "--rails", "5"]), 2);
        assert_eq!(run(&["bench", "put", "--sizes", "x"]), 2);
        assert_eq!(run(&["bench", "put", "--placement", "diagonal"]), 2);
        assert_eq!(run(&["bench", "teleport"]), 2);
        assert_eq!(
            run(&["bench", "put", "--nodes", "1"]),
            2,
            "a put benchmark needs two ranks"
        );
    }
}
