//! The researcher's workbench: from a cluster shape to the figure.
//!
//! - [`mod@self`]: which algorithms of a collective run on a shape
//!   ([`select`], [`AlgoSet`]), the named cluster presets
//!   ([`Preset`]), and output files that appear whole or not at all
//!   ([`PendingFile`]).
//! - [`sweep`]: every algorithm x size on one shape, with the best per
//!   size, the speedup over the baseline, Hockney predictions and the tuned
//!   choice; rendered as an OSU-style table, CSV and JSON.
//! - [`plot`]: the papers' figure (latency against size on log-log axes,
//!   one line per algorithm, and a speedup panel) as SVG or PNG.
//! - [`trace`]: one traced run as Chrome/Perfetto trace JSON.
//! - [`tune`]: tuning tables made from sweeps.
//! - [`config`]: study files: every command-line flag from one TOML file.
//! - [`measured`]: a user's own measurements (OSU output, CSV).
//! - [`calibrate`]: a profile fitted to point-to-point measurements.
//! - [`validate`]: the model's error against measured collectives.
//!
//! Contract: nothing here writes a partial file. Outputs are checked for
//! writability before any work runs, leaving nothing on disk while it
//! runs, and are renamed into place complete, a command's outputs
//! together once all of them are ready ([`PendingFile`]), with the
//! termination signals held off meanwhile ([`write_outputs`]).

pub mod calibrate;
pub mod config;
pub mod measured;
pub mod plot;
pub mod sweep;
pub mod trace;
pub mod tune;
pub mod validate;

use std::path::{Path, PathBuf};

use railcoll_host::arena::SymBuffer;
use railcoll_host::sched::{Algorithm, Choice, Collective, Params, Shape, generate};

use crate::bench::{self, CollBench};

/// A study the workbench refuses before running anything: the message
/// names the problem and, where there is a choice, the accepted values.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The cluster shape is not one the schedules support.
    #[error(transparent)]
    Shape(railcoll_host::Error),
    /// The root is not a rank of the cluster.
    #[error("--root {root} is not a rank: the cluster has ranks 0..={last}")]
    Root {
        /// The root asked for.
        root: usize,
        /// The last rank.
        last: usize,
    },
    /// A collective that moves data was given size 0.
    #[error("size 0 is not allowed for {0} (accepted: 1 byte to 2G)")]
    ZeroSize(Collective),
    /// An algorithm name its parser refused (its message, with `all`
    /// among the accepted values).
    #[error("{0}")]
    UnknownAlgorithm(String),
    /// An algorithm whose schedule cannot be generated here (the reason
    /// names the constraint: one node, N a power of k + 1, ...).
    #[error("{collective} '{name}' cannot run on this shape: {reason}")]
    CannotRun {
        /// The collective.
        collective: Collective,
        /// The algorithm as named.
        name: String,
        /// Why the generator refused.
        reason: railcoll_host::Error,
    },
    /// `all` selected nothing.
    #[error("no {0} algorithm runs on this shape")]
    NoAlgorithm(Collective),
    /// A trace was asked for several algorithms.
    #[error("trace needs one algorithm (--algo NAME), not a list or 'all'")]
    NotOneAlgorithm,
    /// One spec of a multi-shape study, and where it was.
    #[error("{source} ({subject} on {nodes} nodes x {ranks_per_node} ranks)")]
    In {
        /// The problem.
        source: Box<SpecError>,
        /// The collective of the spec.
        subject: Collective,
        /// Its nodes.
        nodes: usize,
        /// Its ranks per node.
        ranks_per_node: usize,
    },
}

/// An output file (or figure) that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The path is empty or a directory.
    #[error("output path '{}' is not a file name", .0.display())]
    NotAFileName(PathBuf),
    /// The place cannot be written (found when reserving, before any work).
    #[error("cannot write output '{}': {source}", .path.display())]
    Reserve {
        /// The target.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Writing or renaming into place failed (after the work).
    #[error("cannot write output '{}': {source}", .path.display())]
    Write {
        /// The target.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Two outputs of one command name the same file (the second would
    /// replace the first).
    #[error("--{first} and --{second} name the same file '{}': give each output its own", .path.display())]
    SamePath {
        /// The file.
        path: PathBuf,
        /// The first output's flag.
        first: &'static str,
        /// The second output's flag.
        second: &'static str,
    },
    /// A figure file that is neither SVG nor PNG.
    #[error("plot file '{}' must end in .svg or .png (accepted: FILE.svg, FILE.png)", .0.display())]
    PlotFormat(PathBuf),
    /// The embedded font could not be registered.
    #[error("the embedded plot font is invalid")]
    Font,
    /// No sweep has two sizes.
    #[error("nothing to plot: a figure needs a sweep over at least two sizes")]
    NothingToPlot,
    /// The plotting library failed.
    #[error("drawing {}: {reason}", .path.display())]
    Draw {
        /// The target.
        path: PathBuf,
        /// Its message.
        reason: String,
    },
    /// The termination signals could not be held off while the outputs
    /// are written (nothing was written).
    #[error("cannot hold off termination signals while writing the outputs: {0}")]
    Signals(std::io::Error),
}

impl OutputError {
    /// Found before any work ran (the request was bad), rather than while
    /// writing results.
    pub fn before_run(&self) -> bool {
        matches!(
            self,
            OutputError::NotAFileName(_)
                | OutputError::Reserve { .. }
                | OutputError::PlotFormat(_)
                | OutputError::SamePath { .. }
        )
    }
}

/// The algorithms of `collective` that `algo` names and that run on
/// `shape`: `all` (every catalogue algorithm, host-driven), `all@nic`
/// (every one compiled onto the NICs), `all@nic-dma` (the same, the NICs'
/// DMA doing the local copies too), or a comma-separated list of names
/// (`ring,ring@nic`). `all` keeps those whose schedule can be generated
/// there; a named one that cannot run is an error giving the generator's
/// reason.
pub fn select(
    collective: Collective,
    algo: &str,
    shape: Shape,
    root: usize,
    size: usize,
) -> Result<AlgoSet, SpecError> {
    let runs = |a: Choice| {
        generate(&Params::new(collective, a.algorithm, shape, root, size).with_choice(a))
    };
    let all = |drive: fn(Algorithm) -> Choice| -> Vec<Choice> {
        collective
            .algorithms()
            .into_iter()
            .map(drive)
            .filter(|&a| runs(a).is_ok())
            .collect()
    };
    // `all`, `all@nic` and `all@nic-dma` may also be items of a list
    // ("all,all@nic": every algorithm both ways).
    let mut algorithms: Vec<Choice> = Vec::new();
    for item in algo.split(',').map(str::trim) {
        let more = match item {
            "all" => all(Choice::host),
            "all@nic" => all(Choice::nic),
            "all@nic-dma" => all(Choice::nic_dma),
            name => parse_list(name, |name| {
                let a = collective
                    .parse_choice(name)
                    .map_err(SpecError::UnknownAlgorithm)?;
                runs(a).map_err(|reason| SpecError::CannotRun {
                    collective,
                    name: name.to_string(),
                    reason,
                })?;
                Ok(a)
            })?,
        };
        for a in more {
            if !algorithms.contains(&a) {
                algorithms.push(a);
            }
        }
    }
    Ok(AlgoSet {
        collective,
        algorithms,
    })
}

/// Every collective, or the one named (`all` or a name).
pub fn parse_collectives(s: &str) -> Result<Vec<Collective>, String> {
    if s == "all" {
        return Ok(Collective::ALL.to_vec());
    }
    s.parse::<Collective>()
        .map(|c| vec![c])
        .map_err(|e| e.replace(" (accepted: ", " (accepted: all, "))
}

/// A comma-separated list of algorithm names, each checked by `parse`,
/// duplicates dropped; errors list `all` among the accepted values.
fn parse_list<T: PartialEq>(
    list: &str,
    parse: impl Fn(&str) -> Result<T, SpecError>,
) -> Result<Vec<T>, SpecError> {
    let mut v = Vec::new();
    for name in list.split(',').map(str::trim) {
        let a = parse(name).map_err(|e| match e {
            SpecError::UnknownAlgorithm(m) => SpecError::UnknownAlgorithm(
                m.replace(" (accepted: ", " (accepted: all, all@nic, all@nic-dma, "),
            ),
            e => e,
        })?;
        if !v.contains(&a) {
            v.push(a);
        }
    }
    Ok(v)
}

/// The algorithms of one collective that a run times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlgoSet {
    /// The collective.
    pub collective: Collective,
    /// Its algorithms as they run, in run order.
    pub algorithms: Vec<Choice>,
}

impl AlgoSet {
    /// The algorithms' names, in run order.
    pub fn names(&self) -> Vec<&'static str> {
        self.algorithms.iter().map(|a| a.name()).collect()
    }

    /// Call `f` with the benchmark that times these algorithms on `sizes`
    /// (ignored for a barrier), `iters` operations per sample, `rounds`
    /// rounds, from `root`, checking every rank's buffers after the timed
    /// calls if `verify` ([`crate::verify`]). What differs between collectives is only the
    /// buffers: a broadcast has one (the same on every rank), a barrier
    /// none, and the collectives whose every rank's completion needs every
    /// rank's data are separated by a barrier (`synchronised`).
    pub fn with_bench<R>(
        &self,
        sizes: &[usize],
        iters: usize,
        rounds: usize,
        root: usize,
        verify: bool,
        f: impl FnOnce(&CollBench<'_>) -> R,
    ) -> R {
        let (c, algos) = (self.collective, &self.algorithms);
        let op = |comm: &railcoll_host::Comm, a: usize, send: &SymBuffer, recv: &SymBuffer| match c
        {
            Collective::Bcast => comm.broadcast_with(algos[a], send, root),
            Collective::Barrier => comm.barrier_with(algos[a]),
            _ => comm.collective_with(c, algos[a], send, recv, root),
        };
        let start = bench::start_fn(|comm, a, send, recv| {
            let recv = if c == Collective::Bcast { send } else { recv };
            comm.icollective_with(c, algos[a], send, recv, root)
        });
        let (send_len, recv_len, synchronised): (bench::LenFn, bench::LenFn, bool) = match c {
            Collective::Gather | Collective::Allgather => {
                (bench::same_len, bench::per_rank_len, true)
            }
            Collective::Alltoall => (bench::per_rank_len, bench::per_rank_len, true),
            Collective::Bcast => (bench::same_len, bench::no_len, false),
            Collective::Barrier => (bench::no_len, bench::no_len, false),
        };
        // What `--data none` and `--data sample=N` rest on: the schedule
        // the run executed, which the verifier then replays symbolically.
        let schedule = |comm: &railcoll_host::Comm, a: usize, size: usize| {
            comm.schedule(c, algos[a], size, root)
        };
        f(&CollBench {
            collective: c.name(),
            schedule: &schedule,
            algorithms: self.names(),
            sizes: if c.sized() { sizes.to_vec() } else { vec![0] },
            iters,
            rounds,
            op: &op,
            start: &start,
            send_len,
            recv_len,
            synchronised,
            check: verify.then_some(crate::verify::Check {
                collective: c,
                root,
            }),
        })
    }
}

/// `root` must be a rank of `shape` (the error names the accepted range).
pub fn check_root(root: usize, shape: &Shape) -> Result<(), SpecError> {
    if root >= shape.size() {
        return Err(SpecError::Root {
            root,
            last: shape.size() - 1,
        });
    }
    Ok(())
}

/// A named cluster: a platform of the papers and its calibration profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preset {
    /// Name on the command line.
    pub name: &'static str,
    /// Built-in profile of its hardware.
    pub profile: &'static str,
    /// Nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub ranks_per_node: usize,
    /// Sockets per node.
    pub sockets: usize,
    /// Rails.
    pub rails: usize,
    /// Where it comes from.
    pub description: &'static str,
}

/// The presets; the first is the default.
pub const PRESETS: [Preset; 4] = [
    Preset {
        name: "qsnet2-4x4",
        profile: "qsnet2-dual",
        nodes: 4,
        ranks_per_node: 4,
        sockets: 4,
        rails: 2,
        description: "[QA08]'s platform: 4 x 4-way Xeon MP nodes, dual-rail QsNetII",
    },
    Preset {
        name: "clan-8x1",
        profile: "clan-via",
        nodes: 8,
        ranks_per_node: 1,
        sockets: 1,
        rails: 1,
        description: "[GTNP02]'s Cluster 1: 8 uniprocessor nodes on GigaNet cLAN",
    },
    Preset {
        name: "ib-4x16",
        profile: "ib-multicore",
        nodes: 4,
        ranks_per_node: 16,
        sockets: 4,
        rails: 1,
        description: "[KSSKP09]'s platform: 4 x 16-core (4-socket) Opteron nodes, one IB HCA",
    },
    Preset {
        name: "hockney-4x1",
        profile: "hockney",
        nodes: 4,
        ranks_per_node: 1,
        sockets: 1,
        rails: 2,
        description: "the papers' analytic model: 4 nodes, 2 rails, Hockney costs only",
    },
];

impl std::str::FromStr for Preset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        PRESETS
            .iter()
            .copied()
            .find(|p| p.name == s)
            .ok_or_else(|| {
                let names: Vec<&str> = PRESETS.iter().map(|p| p.name).collect();
                format!("unknown preset '{s}' (accepted: {})", names.join(", "))
            })
    }
}

/// Greatest common divisor (sockets per node are reduced to divide the
/// ranks per node).
pub fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// An output file that appears complete or not at all. Reserved before
/// any work runs (a hidden file beside the target is created and removed
/// at once, as a proof that the place is writable: nothing is left on
/// disk while the work runs, so an interrupted run leaves nothing);
/// staged when its bytes are ready (written to that hidden file); moved
/// over the target by [`PendingFile::commit`], which a command calls only
/// once every output it makes is staged, so a failure in one (a plot that
/// cannot be drawn) leaves none of them. Dropped uncommitted, the staged
/// file is removed.
#[derive(Debug)]
pub struct PendingFile {
    target: PathBuf,
    temp: PathBuf,
    done: bool,
}

/// Refuse two outputs of one command (flag, path) that name one file
/// (compared as absolute paths, the directory resolved where it exists:
/// `a.csv` and `./a.csv` are one file).
pub fn distinct_outputs(outputs: &[(&'static str, &Path)]) -> Result<(), OutputError> {
    let identity = |p: &Path| -> PathBuf {
        let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        match (abs.parent().map(std::fs::canonicalize), abs.file_name()) {
            (Some(Ok(dir)), Some(name)) => dir.join(name),
            _ => abs,
        }
    };
    for (i, &(first, a)) in outputs.iter().enumerate() {
        for &(second, b) in &outputs[i + 1..] {
            if identity(a) == identity(b) {
                return Err(OutputError::SamePath {
                    path: b.to_path_buf(),
                    first,
                    second,
                });
            }
        }
    }
    Ok(())
}

/// Run `step`, which stages and commits a command's outputs, with SIGINT,
/// SIGTERM and SIGHUP held off until it ends
/// ([`railcoll_mem::signals`]): an interrupted command then leaves every
/// new file or none, never a mixed old/new pair or a hidden `.partial`
/// file (a signal's default action ends the process without unwinding,
/// so no `Drop` would remove one).
pub fn write_outputs<T, E: From<OutputError>>(step: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let _deferred =
        railcoll_mem::signals::defer_termination().map_err(|e| E::from(OutputError::Signals(e)))?;
    step()
}

impl PendingFile {
    /// Reserve `target`; the error is one line naming the path and why.
    pub fn create(target: &Path) -> Result<Self, OutputError> {
        let not_a_file = || OutputError::NotAFileName(target.to_path_buf());
        if target.as_os_str().is_empty() || target.is_dir() {
            return Err(not_a_file());
        }
        let name = target.file_name().ok_or_else(not_a_file)?;
        // Keep the extension last: image encoders choose the format by it.
        let ext = target
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        let temp = target.with_file_name(format!(
            ".{}.{}.partial{ext}",
            name.to_string_lossy(),
            std::process::id()
        ));
        // The probe file exists for an instant: a signal then would leave
        // it behind, so it waits.
        write_outputs(|| {
            std::fs::File::create(&temp)
                .and_then(|_| std::fs::remove_file(&temp))
                .map_err(|source| OutputError::Reserve {
                    path: target.to_path_buf(),
                    source,
                })
        })?;
        Ok(Self {
            target: target.to_path_buf(),
            temp,
            done: false,
        })
    }

    /// The target path.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Where to stage the bytes before [`PendingFile::commit`].
    pub fn temp(&self) -> &Path {
        &self.temp
    }

    /// Stage `bytes` (write the hidden file; the target is untouched).
    pub fn stage(&self, bytes: &[u8]) -> Result<(), OutputError> {
        std::fs::write(&self.temp, bytes).map_err(|e| self.write_error(e))
    }

    /// Stage `bytes` and move them into place at once (a command's only
    /// output), the termination signals held off meanwhile.
    pub fn write(self, bytes: &[u8]) -> Result<(), OutputError> {
        write_outputs(|| {
            self.stage(bytes)?;
            self.commit()
        })
    }

    /// Move the staged file into place.
    pub fn commit(mut self) -> Result<(), OutputError> {
        std::fs::rename(&self.temp, &self.target).map_err(|e| self.write_error(e))?;
        self.done = true;
        Ok(())
    }

    fn write_error(&self, source: std::io::Error) -> OutputError {
        OutputError::Write {
            path: self.target.clone(),
            source,
        }
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_files_appear_whole_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("railcoll-pending-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let target = dir.join("out.csv");
        let ls = || std::fs::read_dir(&dir).expect("ls").count();
        {
            let p = PendingFile::create(&target).expect("writable");
            // Reserved: nothing on disk while the work runs.
            assert_eq!(ls(), 0, "an interrupted run would leave nothing");
            p.stage(b"x").expect("stage");
            assert!(p.temp().exists() && !target.exists());
        }
        assert_eq!(ls(), 0, "dropped after staging: nothing left");
        // Two outputs staged, the second's drawing fails: the command
        // returns before committing either, and neither is left.
        {
            let csv = PendingFile::create(&target).expect("writable");
            let plot = PendingFile::create(&dir.join("out.svg")).expect("writable");
            csv.stage(b"a,b\n").expect("stage");
            drop(plot);
        }
        assert_eq!(ls(), 0, "no CSV without its plot");
        PendingFile::create(&target)
            .expect("writable")
            .write(b"a,b\n")
            .expect("write");
        assert_eq!(std::fs::read(&target).expect("read"), b"a,b\n");
        assert!(PendingFile::create(&dir.join("no/such/dir/x.svg")).is_err());
        assert!(PendingFile::create(&dir).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn selection_refuses_unknown_and_misplaced_algorithms() {
        let shape = Shape::new(2, 2, 1, 2, railcoll_host::Placement::Block).expect("shape");
        let e = select(Collective::Allgather, "nope", shape, 0, 64)
            .expect_err("unknown")
            .to_string();
        assert!(
            e.contains("accepted: all, all@nic, all@nic-dma, direct"),
            "{e}"
        );
        let e = select(Collective::Bcast, "shm", shape, 0, 64)
            .expect_err("node only")
            .to_string();
        assert!(e.contains("one node"), "{e}");
        let set = select(Collective::Barrier, "all", shape, 0, 0).expect("all");
        assert!(!set.names().contains(&"shm") && set.names().contains(&"rdma"));
        let nic = select(Collective::Allgather, "all@nic", shape, 0, 64).expect("all@nic");
        assert!(!nic.names().is_empty() && nic.names().iter().all(|n| n.ends_with("@nic")));
        let both = select(Collective::Allgather, "ring,ring@nic", shape, 0, 64).expect("list");
        assert_eq!(both.names(), ["ring", "ring@nic"]);
        assert!(parse_collectives("scan").is_err());
        assert_eq!(parse_collectives("all").expect("all").len(), 5);
        assert!("nowhere".parse::<Preset>().is_err());
    }
}
