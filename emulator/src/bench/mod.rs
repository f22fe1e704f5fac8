//! Measurements behind `railcoll bench`.
//!
//! Every figure is reported as a ratio against a baseline measured in the
//! same run and interleaved with it, because on a shared 2-core machine the
//! CPUs' speed changes under us (the two vCPUs move between fast and slow
//! placements every ~50 s):
//!
//! - bandwidth against `memcpy` of the same size (one thread, warm buffers);
//! - latency against a cache-line ping-pong between two spinning threads
//!   (round trip, the floor of any cross-thread hand-off).
//!
//! Each size is measured in `rounds` rounds of (baseline, subject...); the
//! reported ratio is the median of the per-round ratios and the reported
//! absolute figures are medians too. The ping-pong baseline is the fastest
//! of the run's rounds (see `min_pingpong`).
//!
//! Parts: `proof` (what a modeled run without all its data stands on:
//! the proof of the schedule set it executed).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use railcoll_host::arena::SymBuffer;
use railcoll_host::sched::ScheduleSet;
use railcoll_host::{Comm, RailPolicy, TransferOptions};
use serde::Serialize;

use crate::cluster::{Cluster, ClusterConfig, DataSample, EmuError};
use crate::verify::Check;

mod proof;
pub(crate) use proof::Proving;
pub use proof::{Proof, prove_executed};

/// The barrier between a benchmark's phases (after the warm-up, after the
/// timed calls): named, not the tuned `comm.barrier()`, so that what a
/// measurement measures never depends on the tuning table in use (the
/// built-in one is derived from the model's own measurements).
pub(crate) const SETTLE: railcoll_host::Algorithm = railcoll_host::Algorithm::Smp;

/// Time budget of one timed measurement.
const TARGET: Duration = Duration::from_millis(15);

/// One line of `railcoll bench put`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PutRecord {
    /// Always "put".
    pub op: &'static str,
    /// Bytes per put.
    pub size: usize,
    /// Rails the put was spread over (1: one rail; k: striped over k).
    pub rails: usize,
    /// "threads".
    pub mode: &'static str,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Ranks per node.
    pub ranks_per_node: usize,
    /// NIC packet payload size.
    pub packet_size: u32,
    /// Median time from post to completion (data delivered, source free).
    pub latency_us: f64,
    /// size / latency, in GB/s (10^9 bytes per second).
    pub bandwidth_gbps: f64,
    /// memcpy of the same size in the same run, GB/s.
    pub memcpy_gbps: f64,
    /// bandwidth / memcpy bandwidth (median of per-round ratios).
    pub memcpy_ratio: f64,
    /// Cache-line ping-pong round trip measured in the same run, ns.
    pub pingpong_rtt_ns: f64,
    /// latency / ping-pong round trip (median of per-round ratios).
    pub pingpong_ratio: f64,
}

/// The median of `v` (NaN when empty); sorts `v`.
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The ping-pong baseline of a run: the fastest of its interleaved
/// measurements. On this 2-core VM the two vCPUs sometimes cannot run two
/// spinning threads at once, and a ping-pong then measures a scheduler
/// quantum (milliseconds) instead of a cache-line hand-off; the minimum
/// over the run is the hand-off cost the machine can deliver.
fn min_pingpong(samples: impl Iterator<Item = f64>) -> f64 {
    samples.fold(f64::INFINITY, f64::min)
}

/// Repeat `op` for about 15 ms (at least 3 calls); seconds per call.
pub fn time_per_call(mut op: impl FnMut()) -> f64 {
    let start = Instant::now();
    op();
    let once = start.elapsed().max(Duration::from_nanos(20));
    let iters = (TARGET.as_secs_f64() / once.as_secs_f64()).clamp(3.0, 200_000.0) as u32;
    let start = Instant::now();
    for _ in 0..iters {
        op();
    }
    start.elapsed().as_secs_f64() / iters as f64
}

/// memcpy time per copy of `size` bytes, warm.
pub fn memcpy_seconds(size: usize) -> f64 {
    let src = vec![0x5au8; size.max(1)];
    let mut dst = vec![0u8; size.max(1)];
    time_per_call(|| {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    })
}

/// Round trip of a cache line between this thread and a spinning helper.
pub fn pingpong_rtt_seconds() -> f64 {
    let line = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (l2, s2) = (Arc::clone(&line), Arc::clone(&stop));
    let helper = std::thread::spawn(move || {
        while !s2.load(Ordering::Relaxed) {
            let v = l2.load(Ordering::Acquire);
            if v % 2 == 1 {
                l2.store(v + 1, Ordering::Release);
            }
            std::hint::spin_loop();
        }
    });
    let mut next = 1u64;
    let t = time_per_call(|| {
        line.store(next, Ordering::Release);
        while line.load(Ordering::Acquire) != next + 1 {
            std::hint::spin_loop();
        }
        next += 2;
    });
    stop.store(true, Ordering::Relaxed);
    let _ = helper.join();
    t
}

/// Power-of-two sizes from `lo` to `hi` inclusive.
pub fn pow2_sizes(lo: usize, hi: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut s = lo.max(1);
    while s <= hi {
        v.push(s);
        s = s.saturating_mul(2);
    }
    v
}

/// Measure puts from rank 0 to the first rank on another node (or rank 1).
/// `progress` is called after each size.
pub fn put_bench(
    cfg: ClusterConfig,
    sizes: &[usize],
    rounds: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<PutRecord>, EmuError> {
    let largest = sizes.iter().copied().max().unwrap_or(8);
    let cfg = ClusterConfig {
        arena_size: cfg.arena_size.max(2 * largest + 4096),
        ..cfg
    };
    let cluster = Cluster::new(cfg.clone())?;
    let topo = *cluster.topology();
    let size = topo.size();
    if size < 2 {
        return Err(EmuError::Config(
            "a put benchmark needs at least 2 ranks".into(),
        ));
    }
    // Prefer a peer on another node, so the put crosses the rails' switches.
    let peer = (1..size)
        .find(|&r| topo.locate(r).map(|l| l.0) != topo.locate(0).map(|l| l.0))
        .unwrap_or(1);
    let rails = cfg.shape.rails;
    let results = cluster.run(
        |comm: &Comm| -> Result<Vec<PutRecord>, railcoll_host::Error> {
            let src = comm.alloc(largest)?;
            let dst = comm.alloc(largest)?;
            if comm.rank() != 0 {
                return Ok(Vec::new());
            }
            comm.write_local(&src, 0, &crate::bench::fill_pattern(largest))?;
            let mut out = Vec::new();
            for &bytes in sizes {
                let (s, d) = (src.slice(0, bytes)?, dst.slice(0, bytes)?);
                let mut policies = vec![(1, RailPolicy::Rail(0))];
                if rails > 1 {
                    policies.push((rails, RailPolicy::Stripe { threshold: 0 }));
                }
                let mut samples: Vec<Vec<(f64, f64, f64, f64)>> = vec![Vec::new(); policies.len()];
                for _ in 0..rounds.max(1) {
                    let memcpy = memcpy_seconds(bytes);
                    let pingpong = (0..3)
                        .map(|_| pingpong_rtt_seconds())
                        .fold(f64::INFINITY, f64::min);
                    for (i, &(_, policy)) in policies.iter().enumerate() {
                        let mut failure = None;
                        let t = time_per_call(|| {
                            let r = comm
                                .endpoint()
                                .put_with(
                                    &s,
                                    peer,
                                    &d,
                                    TransferOptions {
                                        policy: Some(policy),
                                        dest_event: None,
                                        wake: false,
                                    },
                                )
                                .and_then(|h| h.wait());
                            if let Err(e) = r {
                                failure = Some(e);
                            }
                        });
                        if let Some(e) = failure {
                            return Err(e);
                        }
                        samples[i].push((t, memcpy, pingpong, 0.0));
                    }
                }
                for (i, &(k, _)) in policies.iter().enumerate() {
                    let s = &samples[i];
                    let mut lat: Vec<f64> = s.iter().map(|x| x.0).collect();
                    let mut mem: Vec<f64> = s.iter().map(|x| x.1).collect();
                    let pp = min_pingpong(s.iter().map(|x| x.2));
                    let mut mem_ratio: Vec<f64> = s.iter().map(|x| x.1 / x.0).collect();
                    let mut pp_ratio: Vec<f64> = s.iter().map(|x| x.0 / pp).collect();
                    let latency = median(&mut lat);
                    let memcpy = median(&mut mem);
                    out.push(PutRecord {
                        op: "put",
                        size: bytes,
                        rails: k,
                        mode: "threads",
                        nodes: cfg.shape.nodes(),
                        ranks_per_node: cfg.shape.ranks_per_node(),
                        packet_size: cfg.packet_size,
                        latency_us: latency * 1e6,
                        bandwidth_gbps: bytes as f64 / latency / 1e9,
                        memcpy_gbps: bytes as f64 / memcpy / 1e9,
                        memcpy_ratio: median(&mut mem_ratio),
                        pingpong_rtt_ns: pp * 1e9,
                        pingpong_ratio: median(&mut pp_ratio),
                    });
                }
                progress(bytes);
            }
            Ok(out)
        },
    );
    let mut records = Vec::new();
    for r in results {
        records.extend(r.map_err(EmuError::Host)?.map_err(EmuError::Host)?);
    }
    Ok(records)
}

/// Verifiable, non-constant data.
pub fn fill_pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(131) >> 3) as u8).collect()
}

/// One line of `railcoll bench barrier` or `railcoll bench bcast`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CollRecord {
    /// "barrier" or "bcast".
    pub collective: &'static str,
    /// Algorithm name.
    pub algorithm: &'static str,
    /// Bytes (0 for a barrier).
    pub size: usize,
    /// Nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub ranks_per_node: usize,
    /// Rails.
    pub rails: usize,
    /// "threads" or "modeled".
    pub mode: &'static str,
    /// Calibration profile (modeled mode).
    pub profile: Option<String>,
    /// Mean over ranks of each rank's mean time per operation (virtual time
    /// in modeled mode).
    pub latency_us: f64,
    /// Slowest rank's mean time per operation.
    pub latency_max_us: f64,
    /// Cache-line ping-pong round trip in the same run, ns (threads mode).
    pub pingpong_rtt_ns: Option<f64>,
    /// latency / ping-pong round trip (median of per-round ratios; threads
    /// mode).
    pub pingpong_ratio: Option<f64>,
    /// Hash of the modeled run's event trace (the determinism witness).
    pub trace_hash: Option<String>,
    /// Events the modeled run committed.
    pub events: Option<u64>,
    /// Modeled mode, one iteration: first rank's start to last rank's end
    /// (the collective's completion time, as the cost formulas define it).
    pub makespan_us: Option<f64>,
    /// The flags besides the shape and profile that change the figure.
    #[serde(flatten)]
    pub conditions: Conditions,
}

/// What besides the shape, the mode and the profile changes a figure,
/// carried by every record so that a figure says how it was made.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct Conditions {
    /// `--faults`, in its canonical form (`none`).
    pub faults: String,
    /// `--seed` (drives the faults; modeled runs' traces).
    pub seed: u64,
    /// `--retransmit-timeout`, us (`None`: the firmware's, 50 ms).
    pub retransmit_timeout_us: Option<f64>,
    /// `--retry-limit` (`None`: the firmware's, 16).
    pub retry_limit: Option<u32>,
    /// Every rank's buffers were checked after the timed calls
    /// ([`crate::verify`]: all of them with full data, the sample's blocks
    /// with `--data sample=N`); false with `--no-verify`, and with `--data
    /// none`, whose figures stand on the proof of the executed schedule
    /// instead.
    pub verified: bool,
    /// Every collective call checked its arguments against the other
    /// ranks' first (`--check`, [`ClusterConfig::check`]): the exchange is
    /// in the figure.
    pub checked: bool,
    /// The buffer contract (`--contract`, [`ClusterConfig::contract`]):
    /// `mpi`'s readiness messages are in the figure, `shmem` has none.
    pub contract: String,
    /// The data mode (`--data`, [`crate::cluster::DataMode`]): `full`,
    /// `none` or `sample=N` (absent from records of before it: `full`).
    #[serde(default = "full_data")]
    pub data: String,
    /// What the schedule verifier proved of the executed set when the
    /// run did not move all its data ([`Proof::name`]); `None` with full
    /// data.
    #[serde(default)]
    pub proof: Option<String>,
}

fn full_data() -> String {
    crate::cluster::DataMode::Full.to_string()
}

impl Conditions {
    /// The conditions of a run on `cfg`, checked or not.
    pub fn of(cfg: &ClusterConfig, verified: bool) -> Self {
        Self {
            faults: cfg.faults.to_string(),
            seed: cfg.seed,
            retransmit_timeout_us: cfg.retransmit_timeout.map(|d| d.as_secs_f64() * 1e6),
            retry_limit: cfg.retry_limit,
            verified: verified && cfg.data != crate::cluster::DataMode::None,
            checked: cfg.check,
            contract: cfg.contract.name().to_string(),
            data: cfg.data.to_string(),
            proof: None,
        }
    }
}

impl CollRecord {
    /// The record of algorithm `a` of `bench` at `size` on `cfg` with these
    /// latencies (us); the mode and its fields are the caller's to set.
    fn new(
        bench: &CollBench<'_>,
        a: usize,
        size: usize,
        cfg: &ClusterConfig,
        latency_us: f64,
        latency_max_us: f64,
    ) -> Self {
        Self {
            collective: bench.collective,
            algorithm: bench.algorithms[a],
            size,
            nodes: cfg.shape.nodes(),
            ranks_per_node: cfg.shape.ranks_per_node(),
            rails: cfg.shape.rails,
            mode: cfg.mode.name(),
            profile: None,
            latency_us,
            latency_max_us,
            pingpong_rtt_ns: None,
            pingpong_ratio: None,
            trace_hash: None,
            events: None,
            makespan_us: None,
            conditions: Conditions::of(cfg, bench.check.is_some()),
        }
    }
}

/// A collective to time: its name, its algorithms' names, and how to run
/// one operation of algorithm `index` on `size` bytes.
pub struct CollBench<'a> {
    /// "barrier" or "bcast".
    pub collective: &'static str,
    /// Algorithms, by name, in the order results are reported.
    pub algorithms: Vec<&'static str>,
    /// Message sizes (one entry, 0, for a barrier).
    pub sizes: Vec<usize>,
    /// Operations per timed sample.
    pub iters: usize,
    /// Interleaved rounds (baseline, then each algorithm).
    pub rounds: usize,
    /// Run one operation: (comm, algorithm index, send buffer of
    /// `send_len(size)` bytes, receive buffer of `recv_len(size)` bytes).
    pub op: &'a OpFn<'a>,
    /// Start one operation of algorithm `index` without blocking (the
    /// overlap benchmark, [`crate::overlap`]); same arguments as `op`.
    pub start: &'a StartFn<'a>,
    /// The schedule set algorithm `index` executes at a size on a
    /// communicator: a run that does not move all its data
    /// ([`crate::cluster::DataMode`]) reports a figure only once the
    /// schedule verifier has proved that set ([`prove_executed`]).
    pub schedule: &'a ScheduleFn<'a>,
    /// Send buffer bytes for a size and a rank count.
    pub send_len: LenFn,
    /// Receive buffer bytes for a size and a rank count.
    pub recv_len: LenFn,
    /// Separate operations by a barrier and time each alone (the papers'
    /// synchronised methodology; needed by collectives whose ranks may run
    /// ahead, such as gather).
    pub synchronised: bool,
    /// What every rank's buffers must hold after the timed calls, checked
    /// outside the timed region ([`crate::verify`]); `None`: not checked
    /// (`--no-verify`), and the send buffers hold one pattern on every
    /// rank.
    pub check: Option<Check>,
}

/// One timed operation of a [`CollBench`].
pub type OpFn<'a> =
    dyn Fn(&Comm, usize, &SymBuffer, &SymBuffer) -> Result<(), railcoll_host::Error> + Sync + 'a;

/// The schedule set of one algorithm of a [`CollBench`]: (communicator,
/// algorithm index, size).
pub type ScheduleFn<'a> =
    dyn Fn(&Comm, usize, usize) -> Result<Arc<ScheduleSet>, railcoll_host::Error> + Sync + 'a;

/// One started operation of a [`CollBench`]: its request.
pub type StartFn<'a> = dyn for<'c> Fn(
        &'c Comm,
        usize,
        &SymBuffer,
        &SymBuffer,
    ) -> Result<railcoll_host::Request<'c>, railcoll_host::Error>
    + Sync
    + 'a;

/// `f` as a [`StartFn`] (a closure's request borrows the communicator it
/// was given, which the compiler only infers when told).
pub fn start_fn<F>(f: F) -> F
where
    F: for<'c> Fn(
        &'c Comm,
        usize,
        &SymBuffer,
        &SymBuffer,
    ) -> Result<railcoll_host::Request<'c>, railcoll_host::Error>,
{
    f
}

/// A buffer's length for a message size and a rank count.
pub type LenFn = fn(usize, usize) -> usize;

/// `size` bytes: the buffer length of a broadcast, a gather's send buffer.
pub fn same_len(size: usize, _ranks: usize) -> usize {
    size
}

/// No buffer.
pub fn no_len(_size: usize, _ranks: usize) -> usize {
    0
}

/// One block per rank.
pub fn per_rank_len(size: usize, ranks: usize) -> usize {
    size * ranks
}

impl std::fmt::Debug for CollBench<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CollBench")
            .field("collective", &self.collective)
            .field("algorithms", &self.algorithms)
            .finish()
    }
}

/// Allocate and fill a rank's buffers, run algorithm `a` once (warm-up,
/// and every rank is in), set what the timed calls must write to what
/// they must not leave ([`Check::arm`]), then meet at a barrier (so no
/// rank's timed call writes before every rank has armed).
pub(crate) fn warm_up(
    comm: &Comm,
    bench: &CollBench<'_>,
    (a, size): (usize, usize),
    data: &DataSample,
) -> Result<(SymBuffer, SymBuffer), railcoll_host::Error> {
    let n = comm.size();
    let send = comm.alloc((bench.send_len)(size, n))?;
    let recv = comm.alloc((bench.recv_len)(size, n))?;
    let bytes = match &bench.check {
        Some(c) => c.send_data(comm.rank(), n, size),
        None => fill_pattern(send.len()),
    };
    // Under a data sample only the sampled ranks write (`DataSample`).
    if data.holds(comm.rank()) {
        comm.write_local(&send, 0, &bytes)?;
    }
    (bench.op)(comm, a, &send, &recv)?;
    if let Some(c) = &bench.check {
        c.arm(comm, size, (&send, &recv), data)?;
    }
    comm.barrier_with(SETTLE)?;
    Ok((send, recv))
}

/// After the timed calls and the barrier that ends them (outside the
/// timed region): this rank's buffers against the collective's
/// definition, unless the bench checks nothing.
pub(crate) fn check_result(
    comm: &Comm,
    bench: &CollBench<'_>,
    (a, size): (usize, usize),
    (send, recv): (&SymBuffer, &SymBuffer),
    data: &DataSample,
) -> Result<(), EmuError> {
    let Some(c) = &bench.check else {
        return Ok(());
    };
    let what = (bench.collective, bench.algorithms[a], size);
    c.check(comm, what, (send, recv), data)?
        .map_err(|w| EmuError::WrongResult(Box::new(w)))
}

/// The barrier a modeled run aligns its ranks with between timed calls:
/// the hardware one (the quickest, so it leaves the least skew), or the
/// SMP-aware one where the switch's barrier cannot span the nodes.
pub(crate) fn sync_barrier(cfg: &ClusterConfig) -> railcoll_host::Algorithm {
    if cfg.shape.nodes() <= railcoll_host::sched::generate::HW_COLLECTIVE_NODES {
        railcoll_host::Algorithm::Hardware
    } else {
        railcoll_host::Algorithm::Smp
    }
}

/// Arena a collective bench needs for its largest size.
pub(crate) fn coll_config(cfg: ClusterConfig, bench: &CollBench<'_>) -> ClusterConfig {
    let largest = bench.sizes.iter().copied().max().unwrap_or(0);
    coll_config_for(cfg, bench, largest)
}

/// Arena a collective bench needs for `size`.
fn coll_config_for(cfg: ClusterConfig, bench: &CollBench<'_>, size: usize) -> ClusterConfig {
    let ranks = cfg.shape.nodes() * cfg.shape.ranks_per_node();
    // Buffers, plus room for the schedules' scratch (two alternating sets
    // of up to (2 + 2 log N) x the receive buffer for all-to-all).
    let need = (bench.send_len)(size, ranks) + (bench.recv_len)(size, ranks);
    ClusterConfig {
        arena_size: cfg
            .arena_size
            .max((need * 8 + (1 << 20)).next_power_of_two()),
        ..cfg
    }
}

/// What [`timed_calls`] returns per rank (outer error: the rank did not
/// start; inner: a call failed).
pub(crate) type RankTiming = Result<(f64, (f64, f64)), EmuError>;

/// Run algorithm `a` of `bench` on `size` bytes on every rank of
/// `cluster`, the papers' way: buffers filled, one warm-up call, then
/// `iters` calls, each after a barrier of `barrier` kind if the bench is
/// synchronised (hardware in modeled mode: the switch releases every node
/// at one instant), back to back otherwise. With a
/// `timeline`, each rank is armed around its calls and each call is an
/// `op` span. Per rank: mean time per call (ns), and the first start and
/// last end (ns). A cluster that does not move all its data
/// ([`crate::cluster::DataMode`]) gives its figures only once the schedule
/// verifier has proved the set rank 0 executed ([`prove_executed`]).
pub(crate) fn timed_calls(
    cluster: &Cluster,
    bench: &CollBench<'_>,
    a: usize,
    size: usize,
    barrier: railcoll_host::Algorithm,
    timeline: Option<&crate::timeline::Timeline>,
) -> Result<Timed, EmuError> {
    let name = format!("{} {}", bench.collective, bench.algorithms[a]);
    let proving = Proving::default();
    let per_rank = cluster.run(|comm: &Comm| -> Result<(f64, (f64, f64)), EmuError> {
        let (send, recv) = warm_up(comm, bench, (a, size), cluster.data())?;
        let mut total = 0.0;
        let mut span = (f64::INFINITY, 0.0f64);
        for _ in 0..bench.iters {
            if bench.synchronised {
                comm.barrier_with(barrier)?;
            }
            let start = cluster.now_ns();
            if let Some(t) = timeline {
                t.arm(comm.rank(), start);
            }
            (bench.op)(comm, a, &send, &recv)?;
            let end = cluster.now_ns();
            if let Some(t) = timeline {
                t.rank_span(comm.rank(), "op", name.clone(), start, end);
                t.disarm(comm.rank(), end);
            }
            total += end - start;
            span = (span.0.min(start), end);
        }
        comm.barrier_with(SETTLE)?;
        check_result(comm, bench, (a, size), (&send, &recv), cluster.data())?;
        proving.note(comm, cluster, bench, (a, size))?;
        comm.reset_arena()?;
        Ok((total / bench.iters.max(1) as f64, span))
    });
    let proof = proving.prove(cluster, bench, (a, size), &per_rank)?;
    Ok(Timed { per_rank, proof })
}

/// What [`timed_calls`] measured: per rank, as [`RankTiming`] (outer
/// error: the rank did not start); and the proof a run without all its
/// data stands on.
pub(crate) struct Timed {
    pub(crate) per_rank: Vec<Result<RankTiming, railcoll_host::Error>>,
    pub(crate) proof: Option<Proof>,
}

/// Model algorithm `a` of `bench` at `size` under `profile` on a fresh
/// cluster of `cfg` (so the result depends on nothing else that ran), with
/// an optional timeline of the timed calls.
pub(crate) fn model_point(
    cfg: ClusterConfig,
    profile: &crate::modeled::Profile,
    bench: &CollBench<'_>,
    a: usize,
    size: usize,
    timeline: Option<&Arc<crate::timeline::Timeline>>,
) -> Result<CollRecord, EmuError> {
    let cfg = coll_config_for(cfg, bench, size);
    let cluster = Cluster::modeled(cfg.clone(), profile.clone())?;
    if let Some(t) = timeline {
        cluster.set_timeline(Arc::clone(t));
    }
    let kernel = cluster
        .kernel()
        .cloned()
        .ok_or_else(|| EmuError::Config("a modeled cluster has a sequencer".into()))?;
    let Timed { per_rank, proof } = timed_calls(
        &cluster,
        bench,
        a,
        size,
        sync_barrier(&cfg),
        timeline.map(|t| &**t),
    )?;
    cluster.check_stalled()?;
    let mut times = Vec::new();
    let (mut first, mut last) = (f64::INFINITY, 0.0f64);
    for r in per_rank {
        let (t, (s, e)) = r.map_err(EmuError::Host)??;
        times.push(t);
        (first, last) = (first.min(s), last.max(e));
    }
    let digest = kernel.digest();
    let mut record = CollRecord::new(
        bench,
        a,
        size,
        &cfg,
        times.iter().sum::<f64>() / times.len().max(1) as f64 / 1e3,
        times.iter().copied().fold(0.0, f64::max) / 1e3,
    );
    record.conditions.proof = proof.map(|p| p.name().to_string());
    Ok(CollRecord {
        mode: "modeled",
        profile: Some(profile.name.clone()),
        trace_hash: Some(format!("{:016x}", digest.hash)),
        events: Some(digest.events),
        makespan_us: (bench.iters == 1).then(|| (last - first) / 1e3),
        ..record
    })
}

/// Model every algorithm and size of `bench` on clusters of `cfg` under
/// `profile`: virtual-time latencies, one fresh cluster per (size,
/// algorithm), so a point's latency and trace hash do not depend on which
/// other points ran, or on how many `workers` threads ran points side by
/// side. `progress` is called once per point with its size.
pub fn coll_model(
    cfg: ClusterConfig,
    profile: &crate::modeled::Profile,
    bench: &CollBench<'_>,
    workers: usize,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<CollRecord>, EmuError> {
    let points: Vec<(usize, usize)> = bench
        .sizes
        .iter()
        .flat_map(|&size| (0..bench.algorithms.len()).map(move |a| (size, a)))
        .collect();
    let workers = workers.clamp(1, points.len().max(1));
    let point = |(size, a): (usize, usize)| {
        let r = model_point(cfg.clone(), profile, bench, a, size, None);
        progress(size);
        r
    };
    let mut results: Vec<Option<Result<CollRecord, EmuError>>> =
        (0..points.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (point, points) = (&point, &points);
                scope.spawn(move || {
                    (w..points.len())
                        .step_by(workers)
                        .map(|i| (i, point(points[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (i, r) in h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)) {
                results[i] = Some(r);
            }
        }
    });
    results.into_iter().flatten().collect()
}

/// Time every algorithm and size of `bench` on a cluster of `cfg`.
pub fn coll_bench(
    cfg: ClusterConfig,
    bench: &CollBench<'_>,
    progress: &(dyn Fn(usize) + Sync),
) -> Result<Vec<CollRecord>, EmuError> {
    let cfg = coll_config(cfg, bench);
    let cluster = Cluster::new(cfg.clone())?;
    let mut records = Vec::new();
    for &size in &bench.sizes {
        // samples[algorithm] = per round (mean us over ranks, max us, pingpong s)
        let mut samples: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); bench.algorithms.len()];
        for _ in 0..bench.rounds.max(1) {
            for (a, sample) in samples.iter_mut().enumerate() {
                // Let the previous run's threads (NIC workers in their idle
                // yield phase, exiting ranks) settle before the baseline.
                std::thread::sleep(Duration::from_millis(25));
                let pingpong = (0..3)
                    .map(|_| pingpong_rtt_seconds())
                    .fold(f64::INFINITY, f64::min);
                let per_rank = cluster.run(|comm: &Comm| -> Result<f64, EmuError> {
                    let (send, recv) = warm_up(comm, bench, (a, size), cluster.data())?;
                    let mut total = 0.0;
                    if bench.synchronised {
                        for _ in 0..bench.iters {
                            comm.barrier_with(SETTLE)?;
                            let start = Instant::now();
                            (bench.op)(comm, a, &send, &recv)?;
                            total += start.elapsed().as_secs_f64();
                        }
                    } else {
                        let start = Instant::now();
                        for _ in 0..bench.iters {
                            (bench.op)(comm, a, &send, &recv)?;
                        }
                        total = start.elapsed().as_secs_f64();
                    }
                    comm.barrier_with(SETTLE)?;
                    check_result(comm, bench, (a, size), (&send, &recv), cluster.data())?;
                    comm.reset_arena()?;
                    Ok(total / bench.iters.max(1) as f64)
                });
                cluster.check_stalled()?;
                let mut times = Vec::new();
                for r in per_rank {
                    times.push(r.map_err(EmuError::Host)??);
                }
                let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
                let max = times.iter().copied().fold(0.0, f64::max);
                sample.push((mean, max, pingpong));
            }
        }
        // The fastest ping-pong of the size's interleaved rounds: a slow
        // one measures vCPUs that could not co-run, not the cache line.
        let pp = min_pingpong(samples.iter().flatten().map(|x| x.2));
        for (a, s) in samples.iter().enumerate() {
            let mut mean: Vec<f64> = s.iter().map(|x| x.0).collect();
            let mut max: Vec<f64> = s.iter().map(|x| x.1).collect();
            let mut ratio: Vec<f64> = s.iter().map(|x| x.0 / pp).collect();
            records.push(CollRecord {
                mode: "threads",
                pingpong_rtt_ns: Some(pp * 1e9),
                pingpong_ratio: Some(median(&mut ratio)),
                ..CollRecord::new(
                    bench,
                    a,
                    size,
                    &cfg,
                    median(&mut mean) * 1e6,
                    median(&mut max) * 1e6,
                )
            });
        }
        progress(size);
    }
    Ok(records)
}

/// What `railcoll bench revoke` measures: how long after one rank's
/// collective fails every other rank has returned (the revoke), beside
/// the tuned barrier on the same cluster in the same run.
#[derive(Clone, Debug, Serialize)]
pub struct RevokeRecord {
    /// `threads` or `modeled`.
    pub mode: &'static str,
    /// Ranks.
    pub procs: usize,
    /// From the failing call to the last other rank's return, us (median
    /// over rounds): wall time in threads mode, virtual time in modeled.
    pub revoke_us: f64,
    /// The slowest round's, us.
    pub revoke_max_us: f64,
    /// The tuned barrier's latency, us (median of interleaved rounds).
    pub barrier_us: f64,
    /// revoke / barrier (median of per-round ratios).
    pub barrier_ratio: f64,
}

/// Measure [`RevokeRecord`] over `rounds` rounds on one cluster of
/// `cfg`: each round times 20 barriers, then a closure in which every rank but
/// the last waits in an all-gather that the last rank, after 100 us of
/// its own work, calls with a receive buffer one byte short. Each rank
/// must return the revoke naming the last rank (anything else fails the
/// measurement).
pub fn revoke_bench(
    cfg: ClusterConfig,
    profile: Option<&crate::modeled::Profile>,
    rounds: usize,
) -> Result<RevokeRecord, EmuError> {
    let n = cfg.shape.size();
    if n < 2 {
        return Err(EmuError::Config("a revoke needs at least two ranks".into()));
    }
    let bad = n - 1;
    let mut revokes = Vec::new();
    let mut barriers = Vec::new();
    let mut ratios = Vec::new();
    // One cluster for every round: each round's closures open new
    // communicators over the contexts the revoked one left, as a program
    // that recovers does.
    let cluster = match profile {
        Some(p) => Cluster::modeled(cfg.clone(), p.clone())?,
        None => Cluster::new(cfg.clone())?,
    };
    let mode = cluster_mode_name(&cluster);
    for _ in 0..rounds.max(1) {
        let per_barrier: Vec<f64> = collect_ranks(cluster.run(|comm| {
            comm.barrier()?;
            let t0 = cluster.now_ns();
            for _ in 0..20 {
                comm.barrier()?;
            }
            Ok((cluster.now_ns() - t0) / 20.0)
        }))?;
        let barrier = per_barrier.iter().copied().fold(0.0, f64::max);
        let times: Vec<(f64, f64)> = collect_ranks(cluster.run(|comm| {
            let send = comm.alloc(64)?;
            let recv = comm.alloc(64 * n)?;
            comm.barrier()?;
            if comm.rank() == bad {
                comm.compute(Duration::from_micros(100));
                let t0 = cluster.now_ns();
                let short = recv.slice(0, 64 * n - 1)?;
                let failed = comm.allgather(&send, &short);
                return match failed {
                    Err(railcoll_host::Error::OutOfBounds { .. }) => Ok((t0, f64::NAN)),
                    other => Err(railcoll_host::Error::Config(format!(
                        "the failing rank got {other:?}"
                    ))),
                };
            }
            match comm.allgather(&send, &recv) {
                Err(railcoll_host::Error::Revoked { rank, .. }) if rank == bad => {
                    Ok((f64::NAN, cluster.now_ns()))
                }
                other => Err(railcoll_host::Error::Config(format!(
                    "rank {} got {other:?}, not the revoke",
                    comm.rank()
                ))),
            }
        }))?;
        let t0 = times
            .iter()
            .map(|t| t.0)
            .find(|t| !t.is_nan())
            .unwrap_or(0.0);
        let last = times
            .iter()
            .map(|t| t.1)
            .filter(|t| !t.is_nan())
            .fold(t0, f64::max);
        let revoke = last - t0;
        revokes.push(revoke);
        barriers.push(barrier);
        ratios.push(revoke / barrier);
    }
    let max = revokes.iter().copied().fold(0.0, f64::max);
    Ok(RevokeRecord {
        mode,
        procs: n,
        revoke_us: median(&mut revokes) / 1000.0,
        revoke_max_us: max / 1000.0,
        barrier_us: median(&mut barriers) / 1000.0,
        barrier_ratio: median(&mut ratios),
    })
}

fn cluster_mode_name(c: &Cluster) -> &'static str {
    if c.kernel().is_some() {
        "modeled"
    } else {
        "threads"
    }
}

/// Every rank's value, or the first error.
fn collect_ranks<T>(
    results: Vec<Result<Result<T, railcoll_host::Error>, railcoll_host::Error>>,
) -> Result<Vec<T>, EmuError> {
    results
        .into_iter()
        .map(|r| r.and_then(|v| v).map_err(EmuError::from))
        .collect()
}
