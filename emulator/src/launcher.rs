//! `railcoll launch`: a job of rank processes on this machine, their NICs
//! served by a [`Nicd`] in the launcher's own process.
//!
//! The launcher starts the `nicd`, then one process per rank of the
//! shape, each with the variables [`railcoll_host::launch`] reads
//! (`RAILCOLL_RANK`, `RAILCOLL_SIZE`, `RAILCOLL_LOCAL_RANK`,
//! `RAILCOLL_LOCAL_SIZE`, `RAILCOLL_NODE`) and `RAILCOLL_NICD`, the
//! directory the `nicd` serves. It waits for all of them. When one fails
//! (a non-zero exit, or a signal), the others have `grace` to finish on
//! their own (a library wait times out with a typed error); those still
//! running then are killed. The job's outcome names the first failure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::cluster::{ClusterConfig, EmuError};
use crate::fabric::Here;
use crate::nicd::Nicd;
use crate::threads::udp::DatagramCounts;

/// The variable naming the `nicd` directory.
pub const NICD_VAR: &str = "RAILCOLL_NICD";

/// How one rank process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RankEnd {
    /// It exited with this status.
    Exited(i32),
    /// A signal ended it.
    Signalled(i32),
    /// The launcher killed it after another rank failed.
    Killed,
}

impl RankEnd {
    fn of(status: ExitStatus) -> Self {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => RankEnd::Exited(code),
            (None, Some(signal)) => RankEnd::Signalled(signal),
            (None, None) => RankEnd::Exited(1),
        }
    }

    /// Did it succeed?
    pub fn ok(&self) -> bool {
        *self == RankEnd::Exited(0)
    }

    /// The status a shell would report for it.
    pub fn status(&self) -> i32 {
        match self {
            RankEnd::Exited(code) => *code,
            RankEnd::Signalled(signal) => 128 + signal,
            RankEnd::Killed => 128 + 9,
        }
    }
}

impl std::fmt::Display for RankEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RankEnd::Exited(code) => write!(f, "exited with status {code}"),
            RankEnd::Signalled(signal) => write!(f, "was killed by signal {signal}"),
            RankEnd::Killed => f.write_str("was killed by the launcher after another rank failed"),
        }
    }
}

/// What a job did: the end of every rank this launcher started (all of
/// the job's, or one host's of a fabric), in rank order.
#[derive(Clone, Debug)]
pub struct JobOutcome {
    /// Each rank started, and its end.
    pub ranks: Vec<(usize, RankEnd)>,
    /// The first rank that failed, in the order failures were seen.
    pub first_failure: Option<usize>,
    /// Each rail's datagrams on this host, when its nodes are on several
    /// (the launcher's own `nicd`'s); empty otherwise.
    pub datagrams: Vec<DatagramCounts>,
}

impl JobOutcome {
    /// Rank `rank`'s end, if this launcher started it.
    pub fn end(&self, rank: usize) -> Option<&RankEnd> {
        self.ranks.iter().find(|(r, _)| *r == rank).map(|(_, e)| e)
    }

    /// The launcher's exit status: 0, or the first failed rank's.
    pub fn status(&self) -> i32 {
        self.first_failure
            .and_then(|r| self.end(r))
            .map_or(0, RankEnd::status)
    }
}

/// The program each rank runs, and how the launcher watches them.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// How long the other ranks may run on after one failed.
    pub grace: Duration,
    /// The NICs: a `nicd` started here, or one already serving.
    pub nics: Nics,
    /// Where each rank's standard output and error go: inherited, or
    /// files `rank-R.out` and `rank-R.err` in this directory.
    pub output: Option<PathBuf>,
    /// The host this launcher is on, when the job's nodes are on several
    /// ([`crate::fabric`]): it starts that host's ranks only, and its
    /// `nicd` serves that host's nodes.
    pub fabric: Option<Here>,
}

/// Whose NICs the ranks use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nics {
    /// A `nicd` the launcher starts for the job, in a fresh directory
    /// under the system's temporary directory (removed afterwards).
    Own,
    /// The `nicd` already serving this directory (`railcoll nicd`): the
    /// launcher's shape must be the one it serves.
    Serving(PathBuf),
}

/// Run `spec.program` as every rank of `cfg`'s shape, with its NICs in a
/// `nicd` of this process; returns when every rank has ended.
pub fn launch(cfg: &ClusterConfig, spec: &LaunchSpec) -> Result<JobOutcome, EmuError> {
    let shape = cfg.validate()?;
    let (dir, nicd) = match &spec.nics {
        Nics::Serving(d) => {
            check_dir(d)?;
            (d.clone(), None)
        }
        Nics::Own => {
            // One directory per launch, also for several launches in one
            // process at once.
            static LAUNCHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = LAUNCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let d =
                std::env::temp_dir().join(format!("railcoll-launch-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&d)?;
            match Nicd::start_on(cfg, &d, spec.fabric.clone()) {
                Ok(nicd) => (d, Some(nicd)),
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&d);
                    return Err(e);
                }
            }
        }
    };
    let topology = shape.topology;
    let here = |rank: usize| {
        topology
            .locate(rank)
            .is_ok_and(|(node, _)| spec.fabric.as_ref().is_none_or(|h| h.serves(node)))
    };
    let ranks: Vec<usize> = (0..shape.size()).filter(|&r| here(r)).collect();
    let mut children: Vec<Option<Child>> = Vec::with_capacity(ranks.len());
    let mut spawn_error = None;
    for &rank in &ranks {
        match spawn_rank(spec, &dir, topology, rank) {
            Ok(child) => children.push(Some(child)),
            Err(e) => {
                // The ranks already started are reaped (killed after the
                // grace, as after any failure), the nicd stopped and its
                // directory removed below.
                spawn_error = Some(e);
                break;
            }
        }
    }
    // A job that could not start every rank cannot run: the rest go now.
    let grace = if spawn_error.is_some() {
        Duration::ZERO
    } else {
        spec.grace
    };
    let mut outcome = watch(&mut children, &ranks, grace);
    if let Some(nicd) = nicd {
        outcome.datagrams = nicd.datagrams();
        nicd.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }
    match spawn_error {
        Some(e) => Err(e),
        None => Ok(outcome),
    }
}

/// Start rank `rank` of the job.
fn spawn_rank(
    spec: &LaunchSpec,
    dir: &Path,
    topology: railcoll_host::Topology,
    rank: usize,
) -> Result<Child, EmuError> {
    let (node, local) = topology.locate(rank).map_err(EmuError::Host)?;
    let mut command = Command::new(&spec.program);
    if let Some(out) = &spec.output {
        let file = |name: String| {
            std::fs::File::create(out.join(&name)).map_err(|e| {
                EmuError::Config(format!("cannot write {}: {e}", out.join(&name).display()))
            })
        };
        command
            .stdout(file(format!("rank-{rank}.out"))?)
            .stderr(file(format!("rank-{rank}.err"))?);
    }
    command
        .args(&spec.args)
        .env("RAILCOLL_RANK", rank.to_string())
        .env("RAILCOLL_SIZE", topology.size().to_string())
        .env("RAILCOLL_LOCAL_RANK", local.to_string())
        .env("RAILCOLL_LOCAL_SIZE", topology.ranks_per_node().to_string())
        .env("RAILCOLL_NODE", node.to_string())
        .env(NICD_VAR, dir)
        .spawn()
        .map_err(|e| EmuError::Config(format!("cannot start {}: {e}", spec.program.display())))
}

/// Wait for every child (`children[i]` is rank `started[i]`); after the
/// first failure, give the rest `grace`, then kill them.
fn watch(children: &mut [Option<Child>], started: &[usize], grace: Duration) -> JobOutcome {
    let size = started.len();
    // Ranks never started (a spawn failed) count as killed.
    let mut ranks: Vec<Option<RankEnd>> = (0..size)
        .map(|r| {
            children
                .get(r)
                .is_none_or(Option::is_none)
                .then_some(RankEnd::Killed)
        })
        .collect();
    let mut first_failure = None;
    let mut failed_at: Option<Instant> = (children.len() < size).then(Instant::now);
    loop {
        let mut running = 0;
        for (rank, slot) in children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            match child.try_wait() {
                Ok(Some(status)) => {
                    let end = RankEnd::of(status);
                    if !end.ok() && first_failure.is_none() {
                        first_failure = Some(started[rank]);
                        failed_at.get_or_insert_with(Instant::now);
                    }
                    ranks[rank] = Some(end);
                    *slot = None;
                }
                Ok(None) => running += 1,
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    ranks[rank] = Some(RankEnd::Killed);
                    *slot = None;
                }
            }
        }
        if running == 0 {
            break;
        }
        if failed_at.is_some_and(|t| t.elapsed() > grace) {
            for (rank, slot) in children.iter_mut().enumerate() {
                if let Some(child) = slot.take() {
                    let _ = child_kill(child);
                    ranks[rank] = Some(RankEnd::Killed);
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let ranks: Vec<(usize, RankEnd)> = ranks
        .into_iter()
        .zip(started)
        .map(|(r, &rank)| (rank, r.unwrap_or(RankEnd::Killed)))
        .collect();
    let first_failure =
        first_failure.or_else(|| ranks.iter().find(|(_, e)| !e.ok()).map(|(r, _)| *r));
    JobOutcome {
        ranks,
        first_failure,
        datagrams: Vec::new(),
    }
}

fn child_kill(mut child: Child) -> std::io::Result<()> {
    child.kill()?;
    child.wait().map(|_| ())
}

/// A directory exists for the `nicd` to serve in.
pub fn check_dir(dir: &Path) -> Result<(), EmuError> {
    if dir.is_dir() {
        Ok(())
    } else {
        Err(EmuError::Config(format!(
            "{} is not a directory",
            dir.display()
        )))
    }
}
