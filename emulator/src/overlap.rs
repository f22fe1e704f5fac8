//! The overlap benchmark behind `railcoll bench COLLECTIVE --overlap`: how
//! much of a non-blocking collective the host's own work can hide, measured
//! the way the OSU non-blocking collective benchmarks do it [OSU-MB]:
//!
//! 1. `t_pure`: start the collective and wait for it at once (each call
//!    after a barrier), mean per call;
//! 2. `t_total`: start it, compute for `t_pure` (`Comm::compute`: the CPU
//!    spins in threads mode, virtual time passes in modeled mode), then
//!    wait; `t_compute` is the time spent in the compute alone;
//! 3. overlap % = 100 x (1 - (t_total - t_compute) / t_pure), clamped to
//!    0..=100: 100 when the collective finished entirely behind the
//!    compute, 0 when none of it did.
//!
//! A host-driven algorithm progresses only in `test`/`wait` (no progress
//! thread), so little of it overlaps; an `@nic` algorithm goes on in the
//! NICs once started. Figures are the slowest rank's means over calls,
//! and every rank computes for the slowest rank's `t_pure`.
//! Threads mode reports `t_pure` against a cache-line ping-pong measured
//! in the same run (the suite's baseline); in modeled mode every point
//! runs on a fresh cluster, so it depends on nothing else that ran.

use std::time::Duration;

use serde::Serialize;

use crate::bench::{CollBench, SETTLE, check_result, pingpong_rtt_seconds, warm_up};
use crate::cluster::{Cluster, ClusterConfig, EmuError};

/// One line of `railcoll bench ... --overlap`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OverlapRecord {
    /// Collective.
    pub collective: &'static str,
    /// Algorithm (`name@nic` when compiled onto the NICs).
    pub algorithm: &'static str,
    /// Block bytes.
    pub size: usize,
    /// Nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub ranks_per_node: usize,
    /// Rails.
    pub rails: usize,
    /// "threads" or "modeled".
    pub mode: &'static str,
    /// Modeled mode: the profile.
    pub profile: Option<String>,
    /// Start and wait at once, us per call.
    pub pure_us: f64,
    /// The compute alone, us per call.
    pub compute_us: f64,
    /// Start, compute, wait, us per call.
    pub total_us: f64,
    /// 100 x (1 - (total - compute) / pure), clamped to 0..=100.
    pub overlap_pct: f64,
    /// Threads mode: `pure_us` / the fastest cache-line ping-pong round
    /// trip of the same run.
    pub pingpong_ratio: Option<f64>,
    /// The flags besides the shape and profile that change the figure.
    #[serde(flatten)]
    pub conditions: crate::bench::Conditions,
}

/// Overlap % from the three times (clamped: a compute that ran long, or a
/// wait that cost more than the collective, is neither more than all nor
/// less than none).
pub fn overlap_pct(pure: f64, compute: f64, total: f64) -> f64 {
    if pure <= 0.0 {
        return 0.0;
    }
    (100.0 * (1.0 - (total - compute) / pure)).clamp(0.0, 100.0)
}

/// What one rank reports from one run (outer error: it did not start).
type RankPair = Result<(f64, f64), EmuError>;

/// (t_pure, t_compute, t_total) in ns per call, and the proof of the set a
/// run without all its data executed.
type Measured = ((f64, f64, f64), Option<crate::bench::Proof>);

/// Measure algorithm `a` of `bench` at `size` on every rank of `cluster`,
/// every call after a barrier of kind `barrier`: (t_pure, t_compute,
/// t_total) in ns per call, each the slowest rank's (the collective is
/// over when its last rank is done: a gather's leaves leave at once).
/// Every rank computes for the same time, the slowest rank's `t_pure`,
/// learnt from a first run.
fn measure(
    cluster: &Cluster,
    bench: &CollBench<'_>,
    a: usize,
    size: usize,
    barrier: railcoll_host::Algorithm,
) -> Result<Measured, EmuError> {
    let iters = bench.iters.max(1);
    let slowest =
        |per_rank: Vec<Result<RankPair, railcoll_host::Error>>| -> Result<(f64, f64), EmuError> {
            // A stalled run's report explains the ranks' timeouts.
            cluster.check_stalled()?;
            let mut worst = (0.0f64, 0.0f64);
            for r in per_rank {
                let (x, y) = r.map_err(EmuError::Host)??;
                worst = (worst.0.max(x), worst.1.max(y));
            }
            Ok(worst)
        };
    let (pure, _) = slowest(cluster.run(|comm| -> RankPair {
        let (send, recv) = warm_up(comm, bench, (a, size), cluster.data())?;
        let mut pure = 0.0;
        for _ in 0..iters {
            comm.barrier_with(barrier)?;
            let start = cluster.now_ns();
            (bench.start)(comm, a, &send, &recv)?.wait()?;
            pure += cluster.now_ns() - start;
        }
        comm.barrier_with(SETTLE)?;
        check_result(comm, bench, (a, size), (&send, &recv), cluster.data())?;
        comm.reset_arena()?;
        Ok((pure / iters as f64, 0.0))
    }))?;
    let work = Duration::from_nanos(pure as u64);
    // The set the requests ran, for the proof a run without all its data
    // needs before it reports ([`crate::bench::prove_executed`]).
    let proving = crate::bench::Proving::default();
    let per_rank = cluster.run(|comm| -> RankPair {
        let (send, recv) = warm_up(comm, bench, (a, size), cluster.data())?;
        let (mut compute, mut total) = (0.0, 0.0);
        for _ in 0..iters {
            comm.barrier_with(barrier)?;
            let start = cluster.now_ns();
            let request = (bench.start)(comm, a, &send, &recv)?;
            let before = cluster.now_ns();
            comm.compute(work);
            compute += cluster.now_ns() - before;
            request.wait()?;
            total += cluster.now_ns() - start;
        }
        comm.barrier_with(SETTLE)?;
        check_result(comm, bench, (a, size), (&send, &recv), cluster.data())?;
        proving.note(comm, cluster, bench, (a, size))?;
        comm.reset_arena()?;
        Ok((compute / iters as f64, total / iters as f64))
    });
    let proof = proving.prove(cluster, bench, (a, size), &per_rank)?;
    let (compute, total) = slowest(per_rank)?;
    Ok(((pure, compute, total), proof))
}

fn record(
    bench: &CollBench<'_>,
    a: usize,
    size: usize,
    cfg: &ClusterConfig,
    (pure, compute, total): (f64, f64, f64),
) -> OverlapRecord {
    OverlapRecord {
        collective: bench.collective,
        algorithm: bench.algorithms[a],
        size,
        nodes: cfg.shape.nodes(),
        ranks_per_node: cfg.shape.ranks_per_node(),
        rails: cfg.shape.rails,
        mode: cfg.mode.name(),
        profile: None,
        pure_us: pure / 1e3,
        compute_us: compute / 1e3,
        total_us: total / 1e3,
        overlap_pct: overlap_pct(pure, compute, total),
        pingpong_ratio: None,
        conditions: crate::bench::Conditions::of(cfg, bench.check.is_some()),
    }
}

/// Threads mode: every algorithm and size of `bench` on one cluster of
/// `cfg`, a ping-pong measured before each point; the ratios use the
/// fastest ping-pong of the run (a slow one measures vCPUs that could not
/// run two threads at once, not the cache line; as `bench` does).
pub fn overlap_threads(
    cfg: ClusterConfig,
    bench: &CollBench<'_>,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<OverlapRecord>, EmuError> {
    let cfg = crate::bench::coll_config(cfg, bench);
    let cluster = Cluster::new(cfg.clone())?;
    let mut out = Vec::new();
    let mut fastest = f64::INFINITY;
    for &size in &bench.sizes {
        for a in 0..bench.algorithms.len() {
            std::thread::sleep(Duration::from_millis(25));
            fastest = (0..3)
                .map(|_| pingpong_rtt_seconds())
                .fold(fastest, f64::min);
            let (times, _) = measure(&cluster, bench, a, size, railcoll_host::Algorithm::Smp)?;
            out.push(record(bench, a, size, &cfg, times));
        }
        progress(size);
    }
    for r in &mut out {
        r.pingpong_ratio = Some(r.pure_us * 1e3 / (fastest * 1e9));
    }
    Ok(out)
}

/// Modeled mode: every algorithm and size of `bench` under `profile`, a
/// fresh cluster per point (the switch's barrier between calls releases
/// every node at one instant).
pub fn overlap_modeled(
    cfg: ClusterConfig,
    profile: &crate::modeled::Profile,
    bench: &CollBench<'_>,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<OverlapRecord>, EmuError> {
    let mut out = Vec::new();
    for &size in &bench.sizes {
        for a in 0..bench.algorithms.len() {
            let cfg = crate::bench::coll_config(cfg.clone(), bench);
            let cluster = Cluster::modeled(cfg.clone(), profile.clone())?;
            let (times, proof) =
                measure(&cluster, bench, a, size, crate::bench::sync_barrier(&cfg))?;
            cluster.check_stalled()?;
            let mut r = record(bench, a, size, &cfg, times);
            r.conditions.proof = proof.map(|p| p.name().to_string());
            r.profile = Some(profile.name.clone());
            out.push(r);
        }
        progress(size);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::overlap_pct;

    #[test]
    fn overlap_is_the_hidden_share_of_the_collective() {
        // Fully hidden: total is the compute alone.
        assert_eq!(overlap_pct(10.0, 10.0, 10.0), 100.0);
        // Not hidden at all: total is compute + the whole collective.
        assert_eq!(overlap_pct(10.0, 10.0, 20.0), 0.0);
        // Half hidden.
        assert_eq!(overlap_pct(10.0, 10.0, 15.0), 50.0);
        // A wait that cost more than the collective is still none.
        assert_eq!(overlap_pct(10.0, 10.0, 25.0), 0.0);
        assert_eq!(overlap_pct(0.0, 1.0, 1.0), 0.0);
    }
}
