//! Sweeps: every algorithm of a subject x message sizes on one cluster
//! shape, and how they are presented.
//!
//! A point's latency is the papers' figure: in modeled mode one call after
//! a hardware barrier (the switch releases every node at one instant), in
//! threads mode the median of interleaved rounds; the mean over ranks,
//! except for gather, where non-roots finish early and the slowest rank
//! (the root) is the operation's time. The best algorithm of a size is the
//! fastest; the speedup is baseline / best ([`Collective::baseline`]).
//!
//! The table is OSU-style: `# Size` then one column per algorithm in
//! microseconds, `*` on the best, then the best's name, the speedup, and
//! the algorithm the tuning table in use would pick. CSV is tidy (one row
//! per size and algorithm); JSON is the [`Sweep`] structure itself. All
//! three carry the same numbers.

use std::io::Write;

use serde::{Deserialize, Serialize};

use railcoll_host::sched::cost;
use railcoll_host::sched::tuning::TuningTable;
use railcoll_host::sched::{Params, generate};

use super::{AlgoSet, SpecError};
use crate::bench::{self, CollRecord, Conditions};
use crate::cluster::{ClusterConfig, EmuError, Mode};
use crate::modeled::Profile;
use railcoll_host::Collective;

/// What to sweep.
#[derive(Clone, Debug)]
pub struct SweepSpec {
    /// The operation.
    pub subject: Collective,
    /// `all` or a comma-separated list of algorithm names.
    pub algo: String,
    /// Message (block) sizes, bytes; ignored for a barrier.
    pub sizes: Vec<usize>,
    /// Root rank (gather, broadcast).
    pub root: usize,
    /// Cluster shape and mode.
    pub cluster: ClusterConfig,
    /// Costs (modeled mode) and the Hockney parameters of predictions.
    pub profile: Profile,
    /// Operations per sample.
    pub iters: usize,
    /// Interleaved rounds (threads mode).
    pub rounds: usize,
    /// Threads running sizes side by side (modeled mode).
    pub workers: usize,
    /// Compute each algorithm's Hockney prediction.
    pub predict: bool,
    /// The table whose choice the `tuned` column shows.
    pub tuning: Option<TuningTable>,
    /// Check every rank's buffers after the timed calls
    /// ([`crate::verify`]; `--no-verify` turns it off).
    pub verify: bool,
}

/// Why a sweep did not run.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The request is invalid (exit status 2).
    #[error(transparent)]
    Invalid(#[from] SpecError),
    /// An algorithm and size the benchmark should have timed are missing
    /// from its records (exit status 2, as before).
    #[error("{algorithm} at {size} B did not run")]
    Missing {
        /// The algorithm.
        algorithm: String,
        /// The size.
        size: usize,
    },
    /// The run failed (exit status 1).
    #[error(transparent)]
    Run(#[from] EmuError),
}

/// Hockney parameters as reported.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HockneyParams {
    /// Start-up, microseconds.
    pub t_s_us: f64,
    /// Bandwidth per rail, MB/s.
    pub bandwidth_mb_s: f64,
}

/// One algorithm at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Algorithm name.
    pub algorithm: String,
    /// The point's latency, us (see the module doc).
    pub latency_us: f64,
    /// The slowest rank's time, us.
    pub max_us: f64,
    /// Hockney prediction, us (with `--predict`, catalogue collectives).
    pub predicted_us: Option<f64>,
    /// baseline latency / this latency.
    pub speedup_over_baseline: Option<f64>,
    /// Modeled mode: the run's trace hash.
    pub trace_hash: Option<String>,
    /// Threads mode: latency / cache-line ping-pong round trip measured in
    /// the same run (wall times mean something only as such ratios).
    pub pingpong_ratio: Option<f64>,
}

/// One size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Bytes (per block for gather, all-gather and all-to-all; 0 for a
    /// barrier).
    pub size: usize,
    /// One per algorithm, in the sweep's order.
    pub results: Vec<Measured>,
    /// The fastest algorithm.
    pub best: String,
    /// baseline / best (None without the baseline in the sweep).
    pub speedup: Option<f64>,
    /// What the tuning table in use picks for this size.
    pub tuned: Option<String>,
}

/// A sweep's results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    /// gather, allgather, alltoall, bcast or barrier.
    pub collective: String,
    /// threads or modeled.
    pub mode: String,
    /// Profile (modeled mode).
    pub profile: Option<String>,
    /// Ranks.
    pub procs: usize,
    /// Nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub ranks_per_node: usize,
    /// Sockets per node.
    pub sockets: usize,
    /// Rails.
    pub rails: usize,
    /// block or cyclic.
    pub placement: String,
    /// Root rank (gather, broadcast).
    pub root: usize,
    /// The algorithm speedups are measured against.
    pub baseline: String,
    /// Algorithms, in column order.
    pub algorithms: Vec<String>,
    /// Parameters of the predictions.
    pub hockney: Option<HockneyParams>,
    /// One per size.
    pub points: Vec<Point>,
    /// Threads mode: the fastest cache-line ping-pong round trip of the
    /// run, ns (the baseline of `pingpong_ratio`).
    pub pingpong_rtt_ns: Option<f64>,
    /// Faults, seed, retransmission flags, whether results were checked.
    #[serde(flatten)]
    pub conditions: Conditions,
}

impl SweepSpec {
    /// Check everything that can be checked without running: the shape,
    /// the root, the algorithms, the sizes. Returns the algorithms.
    pub fn validate(&self) -> Result<AlgoSet, SpecError> {
        let shape = self.cluster.shape;
        super::check_root(self.root, &shape)?;
        if self.subject.sized() && self.sizes.contains(&0) {
            return Err(SpecError::ZeroSize(self.subject));
        }
        let first = self.sizes.first().copied().unwrap_or(1);
        let set = super::select(self.subject, &self.algo, shape, self.root, first)?;
        if set.names().is_empty() {
            return Err(SpecError::NoAlgorithm(self.subject));
        }
        Ok(set)
    }

    /// Sizes actually run (a barrier has one, 0).
    pub fn run_sizes(&self) -> Vec<usize> {
        if self.subject.sized() {
            self.sizes.clone()
        } else {
            vec![0]
        }
    }
}

/// Run a sweep; `progress` is called once per finished size.
pub fn run(spec: &SweepSpec, progress: &(dyn Fn(usize) + Sync)) -> Result<Sweep, SweepError> {
    let set = spec.validate()?;
    let shape = spec.cluster.shape;
    let sizes = spec.run_sizes();
    let records = set.with_bench(
        &sizes,
        spec.iters,
        spec.rounds,
        spec.root,
        spec.verify,
        |b| match spec.cluster.mode {
            Mode::Modeled => bench::coll_model(
                spec.cluster.clone(),
                &spec.profile,
                b,
                spec.workers,
                progress,
            ),
            Mode::Threads => bench::coll_bench(spec.cluster.clone(), b, progress),
        },
    )?;
    let h = spec.profile.hockney();
    let names = set.names();
    let baseline = spec.subject.baseline().name();
    let mut points = Vec::new();
    for &size in &sizes {
        let mut results = Vec::new();
        for (i, &name) in names.iter().enumerate() {
            let r: &CollRecord = records
                .iter()
                .find(|r| r.size == size && r.algorithm == name)
                .ok_or_else(|| SweepError::Missing {
                    algorithm: name.to_string(),
                    size,
                })?;
            let latency = match spec.subject {
                Collective::Gather => r.latency_max_us,
                _ => r.latency_us,
            };
            let c = set.collective;
            let predicted_us = spec
                .predict
                .then(|| {
                    let a = set.algorithms[i];
                    generate(&Params::new(c, a.algorithm, shape, spec.root, size).with_choice(a))
                })
                .and_then(Result::ok)
                .and_then(|s| cost::hockney(&s, &h).ok());
            results.push(Measured {
                algorithm: name.to_string(),
                latency_us: latency,
                max_us: r.latency_max_us,
                predicted_us,
                speedup_over_baseline: None,
                trace_hash: r.trace_hash.clone(),
                pingpong_ratio: r.pingpong_ratio,
            });
        }
        let base = results
            .iter()
            .find(|m| m.algorithm == baseline)
            .map(|m| m.latency_us);
        for m in &mut results {
            m.speedup_over_baseline = base.map(|b| b / m.latency_us);
        }
        let best = results
            .iter()
            .min_by(|a, b| a.latency_us.total_cmp(&b.latency_us))
            .map(|m| (m.algorithm.clone(), m.latency_us))
            .unwrap_or_default();
        let c = set.collective;
        let tuned = spec.tuning.as_ref().map(|table| {
            table
                .select(c, size, &shape, &mut |a| {
                    generate(&Params::new(c, a.algorithm, shape, spec.root, size).with_choice(a))
                        .is_ok()
                })
                .name()
                .to_string()
        });
        points.push(Point {
            size,
            results,
            speedup: base.map(|b| b / best.1),
            best: best.0,
            tuned,
        });
    }
    let cfg = &spec.cluster;
    Ok(Sweep {
        collective: spec.subject.name().to_string(),
        mode: cfg.mode.name().to_string(),
        profile: (cfg.mode == Mode::Modeled).then(|| spec.profile.name.clone()),
        procs: cfg.shape.nodes() * cfg.shape.ranks_per_node(),
        nodes: cfg.shape.nodes(),
        ranks_per_node: cfg.shape.ranks_per_node(),
        sockets: cfg.shape.sockets,
        rails: cfg.shape.rails,
        placement: cfg.shape.placement().to_string(),
        root: spec.root,
        baseline: baseline.to_string(),
        algorithms: names.iter().map(|s| s.to_string()).collect(),
        hockney: spec.predict.then_some(HockneyParams {
            t_s_us: h.t_s,
            bandwidth_mb_s: if h.tau > 0.0 {
                1.0 / h.tau
            } else {
                f64::INFINITY
            },
        }),
        pingpong_rtt_ns: records
            .iter()
            .filter_map(|r| r.pingpong_rtt_ns)
            .reduce(f64::min),
        points,
        conditions: Conditions {
            // The weakest proof any point stands on.
            proof: records
                .iter()
                .filter_map(|r| r.conditions.proof.clone())
                .max_by_key(|p| p.as_str() != crate::bench::Proof::Complete.name()),
            ..Conditions::of(cfg, spec.verify)
        },
    })
}

/// Calls per sample when none is asked for. Modeled: one call after a
/// barrier, as the papers time gathers; broadcasts and barriers run back
/// to back, so ten calls average out where each starts. Threads: twenty.
pub fn default_iters(subject: Collective, mode: Mode) -> usize {
    match (mode, subject) {
        (Mode::Modeled, Collective::Bcast | Collective::Barrier) => 10,
        (Mode::Modeled, _) => 1,
        (Mode::Threads, _) => 20,
    }
}

/// Sizes as the papers print them: 4, 1K, 64K, 1M.
pub fn size_label(size: usize) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{}M", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{}K", s >> 10),
        s => s.to_string(),
    }
}

/// The OSU-style table of `sweep` (and, with predictions, a second block
/// with each algorithm's Hockney prediction).
pub fn write_table(out: &mut dyn Write, sweep: &Sweep) -> std::io::Result<()> {
    writeln!(
        out,
        "# railcoll sweep: {} on {} procs ({} nodes x {} ranks, {} sockets, {} rails, {} placement), {} mode{}",
        sweep.collective,
        sweep.procs,
        sweep.nodes,
        sweep.ranks_per_node,
        sweep.sockets,
        sweep.rails,
        sweep.placement,
        sweep.mode,
        sweep
            .profile
            .as_ref()
            .map_or_else(String::new, |p| format!(", profile {p}"))
    )?;
    writeln!(
        out,
        "# latency in us ({}); * marks the best per size; speedup = {} / best",
        match sweep.collective.as_str() {
            "gather" => "the root's time, one call after a barrier",
            "bcast" | "barrier" => "mean over ranks per call, calls back to back",
            _ => "mean over ranks, one call after a barrier",
        },
        sweep.baseline
    )?;
    if let Some(rtt) = sweep.pingpong_rtt_ns {
        writeln!(
            out,
            "# wall time: compare only as ratios to the cache-line ping-pong of this run ({rtt:.0} ns round trip; pingpong_ratio in --csv and --json)"
        )?;
    }
    let widths: Vec<usize> = sweep
        .algorithms
        .iter()
        .map(|a| a.len().max(9) + 1)
        .collect();
    write!(out, "{:<10}", "# Size")?;
    for (a, w) in sweep.algorithms.iter().zip(&widths) {
        write!(out, " {a:>w$}")?;
    }
    let best_w = sweep
        .algorithms
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(out, "  {:<best_w$} {:>8}  tuned", "best", "speedup")?;
    for p in &sweep.points {
        write!(out, "{:<10}", size_label(p.size))?;
        for (m, w) in p.results.iter().zip(&widths) {
            let mark = if m.algorithm == p.best { "*" } else { " " };
            let w = w - 1;
            write!(out, " {:>w$.2}{mark}", m.latency_us)?;
        }
        let speedup = p
            .speedup
            .map_or_else(|| "-".to_string(), |s| format!("{s:.2}x"));
        writeln!(
            out,
            "  {:<best_w$} {speedup:>8}  {}",
            p.best,
            p.tuned.as_deref().unwrap_or("-")
        )?;
    }
    if let Some(h) = sweep.hockney {
        writeln!(
            out,
            "# Hockney prediction in us (t_s = {:.3} us, {:.0} MB/s per rail; from the profile)",
            h.t_s_us, h.bandwidth_mb_s
        )?;
        write!(out, "{:<10}", "# Size")?;
        for (a, w) in sweep.algorithms.iter().zip(&widths) {
            write!(out, " {a:>w$}")?;
        }
        writeln!(out)?;
        for p in &sweep.points {
            write!(out, "{:<10}", size_label(p.size))?;
            for (m, w) in p.results.iter().zip(&widths) {
                match m.predicted_us {
                    Some(v) => write!(out, " {v:>w$.2}")?,
                    None => write!(out, " {:>w$}", "-")?,
                }
            }
            writeln!(out)?;
        }
    }
    Ok(())
}

/// The CSV header.
pub const CSV_HEADER: &str = "collective,mode,profile,procs,nodes,ranks_per_node,sockets,rails,placement,root,size,algorithm,latency_us,max_us,predicted_us,speedup_over_baseline,best,trace_hash,pingpong_ratio,faults,seed,retransmit_timeout_us,retry_limit,verified,checked,contract,data,proof";

/// Tidy CSV of `sweeps`: one row per (sweep, size, algorithm). The
/// faults column separates its terms with `;` (a comma would split it).
pub fn csv(sweeps: &[Sweep]) -> String {
    let opt = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v}"));
    let mut s = String::from(CSV_HEADER);
    s.push('\n');
    for sw in sweeps {
        let c = &sw.conditions;
        let conditions = format!(
            "{},{},{},{},{},{},{},{},{}",
            c.faults.replace(',', ";"),
            c.seed,
            opt(c.retransmit_timeout_us),
            c.retry_limit.map_or_else(String::new, |v| v.to_string()),
            c.verified,
            c.checked,
            c.contract,
            c.data,
            c.proof.as_deref().unwrap_or("")
        );
        for p in &sw.points {
            for m in &p.results {
                s.push_str(&format!(
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{conditions}\n",
                    sw.collective,
                    sw.mode,
                    sw.profile.as_deref().unwrap_or(""),
                    sw.procs,
                    sw.nodes,
                    sw.ranks_per_node,
                    sw.sockets,
                    sw.rails,
                    sw.placement,
                    sw.root,
                    p.size,
                    m.algorithm,
                    m.latency_us,
                    m.max_us,
                    opt(m.predicted_us),
                    opt(m.speedup_over_baseline),
                    m.algorithm == p.best,
                    m.trace_hash.as_deref().unwrap_or(""),
                    opt(m.pingpong_ratio)
                ));
            }
        }
    }
    s
}

/// The JSON document of `sweeps`: `{"sweeps": [...]}`.
pub fn json(sweeps: &[Sweep]) -> String {
    #[derive(Serialize)]
    struct Doc<'a> {
        sweeps: &'a [Sweep],
    }
    serde_json::to_string_pretty(&Doc { sweeps }).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_labels_follow_the_papers() {
        assert_eq!(size_label(4), "4");
        assert_eq!(size_label(1024), "1K");
        assert_eq!(size_label(1536), "1536");
        assert_eq!(size_label(1 << 20), "1M");
    }
}
