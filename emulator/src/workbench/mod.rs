//! The researcher's workbench: from a cluster shape to the figure.
//!
//! - [`mod@self`]: what can be measured ([`Subject`]), which algorithms
//!   of it run on a shape ([`AlgoSet`]), the named cluster presets
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
//!
//! Contract: nothing here writes a partial file. Outputs are checked for
//! writability before any work runs and are renamed into place complete.

pub mod config;
pub mod plot;
pub mod sweep;
pub mod trace;
pub mod tune;

use std::path::{Path, PathBuf};

use railcoll_host::arena::SymBuffer;
use railcoll_host::coll::{BarrierAlgorithm, BcastAlgorithm};
use railcoll_host::sched::{Algorithm, Collective, Params, Shape, generate};

use crate::bench::{self, CollBench};

/// Something a sweep, trace or tune measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subject {
    /// Gather, all-gather or all-to-all: the schedule catalogue.
    Catalogue(Collective),
    /// Broadcast.
    Bcast,
    /// Barrier (no message size).
    Barrier,
}

impl Subject {
    /// Every subject, in the order `all` runs them.
    pub const ALL: [Subject; 5] = [
        Subject::Catalogue(Collective::Gather),
        Subject::Catalogue(Collective::Allgather),
        Subject::Catalogue(Collective::Alltoall),
        Subject::Bcast,
        Subject::Barrier,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Subject::Catalogue(c) => c.name(),
            Subject::Bcast => "bcast",
            Subject::Barrier => "barrier",
        }
    }

    /// The algorithm speedups are measured against: the native
    /// (vendor-library) reconstruction for the catalogue, the
    /// point-to-point tree for broadcast, the message-passing barrier of
    /// \[GTNP02\] for barriers.
    pub fn baseline(self) -> &'static str {
        match self {
            Subject::Catalogue(_) => Algorithm::Native.name(),
            Subject::Bcast => BcastAlgorithm::Binomial.name(),
            Subject::Barrier => BarrierAlgorithm::SendRecv.name(),
        }
    }

    /// Does the subject take a message size?
    pub fn sized(self) -> bool {
        self != Subject::Barrier
    }

    /// The algorithms `algo` names (`all`, or a comma-separated list) that
    /// run on `shape`; an error names the problem and the accepted values.
    pub fn select(
        self,
        algo: &str,
        shape: Shape,
        root: usize,
        size: usize,
    ) -> Result<AlgoSet, String> {
        let nodes = shape.topology.nodes();
        match self {
            Subject::Catalogue(c) => {
                let runs = |a: Algorithm| generate(&Params::new(c, a, shape, root, size));
                let algos = if algo == "all" {
                    c.algorithms()
                        .iter()
                        .copied()
                        .filter(|&a| runs(a).is_ok())
                        .collect()
                } else {
                    parse_list(algo, |name| {
                        let a = c.parse_algorithm(name)?;
                        runs(a)
                            .map_err(|e| format!("{c} '{name}' cannot run on this shape: {e}"))?;
                        Ok(a)
                    })?
                };
                Ok(AlgoSet::Catalogue(c, algos))
            }
            Subject::Bcast => pick(
                algo,
                &BcastAlgorithm::ALL,
                BcastAlgorithm::Shm,
                nodes,
                BcastAlgorithm::name,
            )
            .map(AlgoSet::Bcast),
            Subject::Barrier => pick(
                algo,
                &BarrierAlgorithm::ALL,
                BarrierAlgorithm::Shm,
                nodes,
                BarrierAlgorithm::name,
            )
            .map(AlgoSet::Barrier),
        }
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Subject {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.iter().copied().find(|x| x.name() == s).ok_or_else(|| {
            format!("unknown collective '{s}' (accepted: gather, allgather, alltoall, bcast, barrier)")
        })
    }
}

/// `all` or a comma-separated list of `T`s: every one that can run on
/// `nodes` nodes, or the ones named (one that runs within a node only is
/// refused on several nodes).
fn pick<T: Copy + PartialEq + std::str::FromStr<Err = String>>(
    algo: &str,
    all: &[T],
    node_only: T,
    nodes: usize,
    name: impl Fn(T) -> &'static str,
) -> Result<Vec<T>, String> {
    if algo == "all" {
        return Ok(all
            .iter()
            .copied()
            .filter(|a| *a != node_only || nodes == 1)
            .collect());
    }
    parse_list(algo, |n| {
        let a: T = n.parse()?;
        if a == node_only && nodes > 1 {
            return Err(format!(
                "algorithm '{}' runs within one node only, but the cluster has {nodes} nodes (use --nodes 1 or another algorithm)",
                name(a)
            ));
        }
        Ok(a)
    })
}

/// A comma-separated list of algorithm names, each checked by `parse`,
/// duplicates dropped; errors list `all` among the accepted values.
fn parse_list<T: PartialEq>(
    list: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let mut v = Vec::new();
    for name in list.split(',').map(str::trim) {
        let a = parse(name).map_err(|e| e.replace(" (accepted: ", " (accepted: all, "))?;
        if !v.contains(&a) {
            v.push(a);
        }
    }
    Ok(v)
}

/// The algorithms of one subject that a run times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AlgoSet {
    /// Catalogue algorithms of a collective.
    Catalogue(Collective, Vec<Algorithm>),
    /// Broadcast algorithms.
    Bcast(Vec<BcastAlgorithm>),
    /// Barrier algorithms.
    Barrier(Vec<BarrierAlgorithm>),
}

impl AlgoSet {
    /// The algorithms' names, in run order.
    pub fn names(&self) -> Vec<&'static str> {
        match self {
            AlgoSet::Catalogue(_, v) => v.iter().map(|a| a.name()).collect(),
            AlgoSet::Bcast(v) => v.iter().map(|a| a.name()).collect(),
            AlgoSet::Barrier(v) => v.iter().map(|a| a.name()).collect(),
        }
    }

    /// Call `f` with the benchmark that times these algorithms on `sizes`
    /// (ignored for a barrier), `iters` operations per sample, `rounds`
    /// rounds, from `root`.
    pub fn with_bench<R>(
        &self,
        sizes: &[usize],
        iters: usize,
        rounds: usize,
        root: usize,
        f: impl FnOnce(&CollBench<'_>) -> R,
    ) -> R {
        let names = self.names();
        match self {
            AlgoSet::Catalogue(c, algos) => {
                let c = *c;
                let op =
                    |comm: &railcoll_host::Comm, a: usize, send: &SymBuffer, recv: &SymBuffer| {
                        comm.collective_with(c, algos[a], send, recv, root)
                    };
                f(&CollBench {
                    collective: c.name(),
                    algorithms: names,
                    sizes: sizes.to_vec(),
                    iters,
                    rounds,
                    op: &op,
                    send_len: if c == Collective::Alltoall {
                        bench::per_rank_len
                    } else {
                        bench::same_len
                    },
                    recv_len: bench::per_rank_len,
                    synchronised: true,
                })
            }
            AlgoSet::Bcast(algos) => {
                let op = |comm: &railcoll_host::Comm, a: usize, buf: &SymBuffer, _: &SymBuffer| {
                    comm.broadcast_with(algos[a], buf, root)
                };
                f(&CollBench {
                    collective: "bcast",
                    algorithms: names,
                    sizes: sizes.to_vec(),
                    iters,
                    rounds,
                    op: &op,
                    send_len: bench::same_len,
                    recv_len: bench::no_len,
                    synchronised: false,
                })
            }
            AlgoSet::Barrier(algos) => {
                let op = |comm: &railcoll_host::Comm, a: usize, _: &SymBuffer, _: &SymBuffer| {
                    comm.barrier_with(algos[a])
                };
                f(&CollBench {
                    collective: "barrier",
                    algorithms: names,
                    sizes: vec![0],
                    iters,
                    rounds,
                    op: &op,
                    send_len: bench::no_len,
                    recv_len: bench::no_len,
                    synchronised: false,
                })
            }
        }
    }
}

/// `root` must be a rank of `shape` (the error names the accepted range).
pub fn check_root(root: usize, shape: &Shape) -> Result<(), String> {
    if root >= shape.size() {
        return Err(format!(
            "--root {root} is not a rank: the cluster has ranks 0..={}",
            shape.size() - 1
        ));
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

/// An output file that appears complete or not at all: created (empty,
/// as a proof that the place is writable) beside its target before any
/// work runs, renamed over the target when done, removed if dropped.
#[derive(Debug)]
pub struct PendingFile {
    target: PathBuf,
    temp: PathBuf,
    done: bool,
}

impl PendingFile {
    /// Reserve `target`; the error is one line naming the path and why.
    pub fn create(target: &Path) -> Result<Self, String> {
        if target.as_os_str().is_empty() || target.is_dir() {
            return Err(format!(
                "output path '{}' is not a file name",
                target.display()
            ));
        }
        let name = target
            .file_name()
            .ok_or_else(|| format!("output path '{}' is not a file name", target.display()))?;
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
        std::fs::File::create(&temp)
            .map_err(|e| format!("cannot write output '{}': {e}", target.display()))?;
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

    /// Where to write before [`PendingFile::commit`].
    pub fn temp(&self) -> &Path {
        &self.temp
    }

    /// Write `bytes` to the temporary file and move it into place.
    pub fn write(self, bytes: &[u8]) -> Result<(), String> {
        std::fs::write(&self.temp, bytes)
            .map_err(|e| format!("cannot write output '{}': {e}", self.target.display()))?;
        self.commit()
    }

    /// Move the temporary file (already written) into place.
    pub fn commit(mut self) -> Result<(), String> {
        std::fs::rename(&self.temp, &self.target)
            .map_err(|e| format!("cannot write output '{}': {e}", self.target.display()))?;
        self.done = true;
        Ok(())
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
        {
            let p = PendingFile::create(&target).expect("writable");
            assert!(p.temp().exists() && !target.exists());
        }
        assert_eq!(
            std::fs::read_dir(&dir).expect("ls").count(),
            0,
            "dropped: nothing left"
        );
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
    fn subjects_refuse_unknown_and_misplaced_algorithms() {
        let shape = Shape::new(2, 2, 1, 2, railcoll_host::Placement::Block).expect("shape");
        let e = Subject::Catalogue(Collective::Allgather)
            .select("nope", shape, 0, 64)
            .expect_err("unknown");
        assert!(e.contains("accepted: all, direct"), "{e}");
        let e = Subject::Bcast
            .select("shm", shape, 0, 64)
            .expect_err("node only");
        assert!(e.contains("one node"), "{e}");
        let set = Subject::Barrier.select("all", shape, 0, 0).expect("all");
        assert!(!set.names().contains(&"shm"));
        assert!("scan".parse::<Subject>().is_err());
        assert!("nowhere".parse::<Preset>().is_err());
    }
}
