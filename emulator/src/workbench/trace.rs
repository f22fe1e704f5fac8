//! One traced run as Chrome trace JSON (opens in Perfetto and
//! chrome://tracing).
//!
//! The run is the sweep's procedure for one point: buffers filled, one
//! warm-up call, a barrier (hardware in modeled mode, so every node starts
//! together), then the traced call. Processes and threads of the trace:
//!
//! - `ranks`: one thread per rank; the operation as a span, its schedule
//!   steps inside it, and inside those the posts of commands to NICs
//!   (`put`), waits on completion words and flags (`wait`) and CPU copies
//!   of the shared-memory phases (`shm`);
//! - `NICs`: one thread per NIC; command processing and fired events
//!   (spans in modeled mode, instants in threads mode);
//! - `rail R`: one thread per node's transmit port (each data packet a
//!   span of its wire time, acknowledgements instants) and one for the
//!   switch (collective packets it handles, instants).
//!
//! Timestamps are microseconds from the first kept span: virtual time in
//! modeled mode, wall time in threads mode.

use std::sync::Arc;

use serde_json::{Value, json};

use super::sweep::SweepError;
use super::{AlgoSet, SpecError};
use crate::bench;
use crate::cluster::{Cluster, ClusterConfig, EmuError, Mode};
use crate::modeled::Profile;
use crate::timeline::{Span, Timeline, Track};
use railcoll_host::Collective;

/// What to trace.
#[derive(Clone, Debug)]
pub struct TraceSpec {
    /// The operation.
    pub subject: Collective,
    /// One algorithm name.
    pub algo: String,
    /// Message (block) size, bytes.
    pub size: usize,
    /// Root rank.
    pub root: usize,
    /// Cluster shape and mode.
    pub cluster: ClusterConfig,
    /// Costs (modeled mode).
    pub profile: Profile,
}

/// A traced run.
#[derive(Debug)]
pub struct Traced {
    /// The Chrome trace document.
    pub json: Value,
    /// Spans and instants in it.
    pub spans: usize,
    /// The traced call's latency, mean over ranks, us.
    pub latency_us: f64,
}

impl TraceSpec {
    /// Check the request; returns the one algorithm.
    pub fn validate(&self) -> Result<AlgoSet, SpecError> {
        if self.algo == "all" || self.algo.contains(',') {
            return Err(SpecError::NotOneAlgorithm);
        }
        let shape = self.cluster.shape;
        super::check_root(self.root, &shape)?;
        if self.subject.sized() && self.size == 0 {
            return Err(SpecError::ZeroSize(self.subject));
        }
        super::select(self.subject, &self.algo, shape, self.root, self.size)
    }
}

/// Run and trace one call.
pub fn run(spec: &TraceSpec) -> Result<Traced, SweepError> {
    let set = spec.validate()?;
    let size = if spec.subject.sized() { spec.size } else { 0 };
    let timeline = Arc::new(Timeline::new());
    // What a modeled run without all its data stands on (its record's).
    let mut proof: Option<String> = None;
    let times = set.with_bench(
        &[size],
        1,
        1,
        spec.root,
        true,
        |b| -> Result<Vec<f64>, EmuError> {
            if spec.cluster.mode == Mode::Modeled {
                // Exactly the sweep's point, with a timeline attached.
                let r = bench::model_point(
                    spec.cluster.clone(),
                    &spec.profile,
                    b,
                    0,
                    size,
                    Some(&timeline),
                )?;
                proof = r.conditions.proof.clone();
                return Ok(vec![r.latency_us * 1e3]);
            }
            let cluster = Cluster::new(bench::coll_config(spec.cluster.clone(), b))?;
            cluster.set_timeline(Arc::clone(&timeline));
            let barrier = railcoll_host::Algorithm::Smp;
            let timed = bench::timed_calls(&cluster, b, 0, size, barrier, Some(&timeline))?;
            cluster.check_stalled()?;
            timed
                .per_rank
                .into_iter()
                .map(|r| Ok(r.map_err(EmuError::Host)??.0))
                .collect()
        },
    )?;
    let latency_us = times.iter().sum::<f64>() / times.len().max(1) as f64 / 1e3;
    let spans = timeline.take();
    let meta = json!({
        "collective": spec.subject.name(),
        "algorithm": set.names().first().copied().unwrap_or(""),
        "size": size,
        "mode": spec.cluster.mode.name(),
        "profile": (spec.cluster.mode == Mode::Modeled).then(|| spec.profile.name.clone()),
        "nodes": spec.cluster.shape.nodes(),
        "ranks_per_node": spec.cluster.shape.ranks_per_node(),
        "rails": spec.cluster.shape.rails,
        "latency_us": latency_us,
        "clock": if spec.cluster.mode == Mode::Modeled { "virtual" } else { "wall" },
        "data": spec.cluster.data.to_string(),
        "proof": proof,
    });
    Ok(Traced {
        spans: spans.len(),
        json: chrome_json(&spans, spec.cluster.shape.rails, meta),
        latency_us,
    })
}

/// Process and thread ids of a track, and their names.
fn ids(track: Track, rails: usize) -> (u64, u64, String, String) {
    match track {
        Track::Rank(r) => (1, r as u64, "ranks".into(), format!("rank {r}")),
        Track::Nic { node, rail } => (
            2,
            (node * rails + rail) as u64,
            "NICs".into(),
            format!("node {node} rail {rail}"),
        ),
        Track::Port { rail, node } => (
            10 + rail as u64,
            node as u64,
            format!("rail {rail}"),
            format!("node {node} port"),
        ),
        Track::Switch { rail } => (
            10 + rail as u64,
            1 << 20,
            format!("rail {rail}"),
            "switch".into(),
        ),
    }
}

/// The Chrome trace document of `spans` (sorted as [`Timeline::take`]
/// returns them), with `meta` as `otherData`.
pub fn chrome_json(spans: &[Span], rails: usize, meta: Value) -> Value {
    let t0 = spans
        .iter()
        .map(|s| s.start_ns)
        .fold(f64::INFINITY, f64::min);
    let t0 = if t0.is_finite() { t0 } else { 0.0 };
    let us = |ns: f64| ((ns - t0) * 1e3).round() / 1e6;
    let mut events = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    for s in spans {
        let (pid, tid, process, thread) = ids(s.track, rails);
        if named.insert((pid, u64::MAX)) {
            events.push(
                json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": process}}),
            );
            events.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": pid}}));
        }
        if named.insert((pid, tid)) {
            events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}}));
            events.push(json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}));
        }
        events.push(match s.dur_ns {
            Some(d) => json!({
                "ph": "X", "name": s.name, "cat": s.cat, "pid": pid, "tid": tid,
                "ts": us(s.start_ns),
                // End and start are rounded alike, so nested spans stay nested.
                "dur": us(s.start_ns + d) - us(s.start_ns),
            }),
            None => json!({
                "ph": "i", "s": "t", "name": s.name, "cat": s.cat, "pid": pid, "tid": tid,
                "ts": us(s.start_ns),
            }),
        });
    }
    json!({"traceEvents": events, "displayTimeUnit": "ns", "otherData": meta})
}
