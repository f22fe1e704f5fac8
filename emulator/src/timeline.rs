//! The timeline of one run, for trace viewers (`railcoll trace`).
//!
//! Contract: spans on one track nest or follow each other, never overlap
//! partially, because every track is one sequential agent: a rank (its
//! operation, the schedule steps inside it, and the posts, waits and
//! copies inside those), a NIC's processor (commands and events), or one
//! transmit port of a rail (packets leave it one at a time). Things that
//! happen beside a track's sequence (link-level acknowledgements, switch
//! operations, NIC activity in threads mode) are instants. Times are
//! nanoseconds: virtual time in modeled mode, wall time since the
//! cluster's start in threads mode.
//!
//! Rank spans are kept only while the rank is *armed* (around the
//! operation being traced), so warm-up and set-up do not clutter the view;
//! NIC and port spans are kept when they overlap the armed window.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use railcoll_host::env::{HostObserver, LibraryWork, WaitHook, WaitTimeout, WordWatch};

/// One agent's lane in the viewer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Track {
    /// A rank's host thread.
    Rank(usize),
    /// The processor of the NIC on `rail` of `node`.
    Nic {
        /// Node.
        node: usize,
        /// Rail.
        rail: usize,
    },
    /// `node`'s transmit port into `rail`'s switch.
    Port {
        /// Rail.
        rail: usize,
        /// Node.
        node: usize,
    },
    /// `rail`'s switch (hardware broadcast and barrier).
    Switch {
        /// Rail.
        rail: usize,
    },
}

/// A span (or, with `dur_ns` None, an instant).
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    /// Where it is drawn.
    pub track: Track,
    /// Category: `op`, `step`, `put`, `wait`, `shm`, `nic`, `event`,
    /// `packet`, `ack`, `switch`.
    pub cat: &'static str,
    /// What it is.
    pub name: String,
    /// Start, ns.
    pub start_ns: f64,
    /// Duration, ns (None: an instant).
    pub dur_ns: Option<f64>,
}

impl Span {
    /// End, ns (the start for an instant).
    pub fn end_ns(&self) -> f64 {
        self.start_ns + self.dur_ns.unwrap_or(0.0)
    }
}

#[derive(Debug, Default)]
struct State {
    spans: Vec<Span>,
    /// Per rank: armed, and the schedule step open since when.
    ranks: Vec<RankLane>,
    window: Option<(f64, f64)>,
}

#[derive(Debug, Default, Clone)]
struct RankLane {
    armed: bool,
    step: Option<(f64, String)>,
}

/// Spans collected during a run (shared by the ranks, NICs and switches of
/// one cluster).
#[derive(Debug, Default)]
pub struct Timeline {
    state: Mutex<State>,
}

impl Timeline {
    /// An empty timeline.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lane(state: &mut State, rank: usize) -> &mut RankLane {
        if state.ranks.len() <= rank {
            state.ranks.resize(rank + 1, RankLane::default());
        }
        &mut state.ranks[rank]
    }

    /// Start keeping `rank`'s spans at `at_ns`.
    pub fn arm(&self, rank: usize, at_ns: f64) {
        let mut s = self.lock();
        Self::lane(&mut s, rank).armed = true;
        s.window = Some(match s.window {
            Some((lo, hi)) => (lo.min(at_ns), hi.max(at_ns)),
            None => (at_ns, at_ns),
        });
    }

    /// Stop keeping `rank`'s spans at `at_ns`; its open step ends there.
    pub fn disarm(&self, rank: usize, at_ns: f64) {
        let mut s = self.lock();
        Self::close_step(&mut s, rank, at_ns);
        Self::lane(&mut s, rank).armed = false;
        if let Some((lo, hi)) = s.window {
            s.window = Some((lo, hi.max(at_ns)));
        }
    }

    fn close_step(s: &mut State, rank: usize, at_ns: f64) {
        if let Some((start, name)) = Self::lane(s, rank).step.take() {
            s.spans.push(Span {
                track: Track::Rank(rank),
                cat: "step",
                name,
                start_ns: start,
                dur_ns: Some((at_ns - start).max(0.0)),
            });
        }
    }

    /// `rank` begins schedule step `step` (`what`) at `at_ns`; the previous
    /// step ends there.
    pub fn step(&self, rank: usize, step: u32, what: &str, at_ns: f64) {
        let mut s = self.lock();
        if !Self::lane(&mut s, rank).armed {
            return;
        }
        Self::close_step(&mut s, rank, at_ns);
        Self::lane(&mut s, rank).step = Some((at_ns, format!("step {step}: {what}")));
    }

    /// A span of `rank` (kept only while it is armed).
    pub fn rank_span(&self, rank: usize, cat: &'static str, name: String, start: f64, end: f64) {
        let mut s = self.lock();
        if !Self::lane(&mut s, rank).armed {
            return;
        }
        s.spans.push(Span {
            track: Track::Rank(rank),
            cat,
            name,
            start_ns: start,
            dur_ns: Some((end - start).max(0.0)),
        });
    }

    /// A span or instant of a NIC, port or switch.
    pub fn push(
        &self,
        track: Track,
        cat: &'static str,
        name: String,
        start: f64,
        end: Option<f64>,
    ) {
        self.lock().spans.push(Span {
            track,
            cat,
            name,
            start_ns: start,
            dur_ns: end.map(|e| (e - start).max(0.0)),
        });
    }

    /// Everything kept: rank spans, and the other tracks' spans that
    /// overlap the armed window; sorted by track, start, then longest
    /// first (the order a viewer nests them in).
    pub fn take(&self) -> Vec<Span> {
        let mut s = self.lock();
        let window = s.window;
        let mut spans: Vec<Span> = std::mem::take(&mut s.spans)
            .into_iter()
            .filter(|sp| match (sp.track, window) {
                (Track::Rank(_), _) => true,
                (_, Some((lo, hi))) => sp.end_ns() >= lo && sp.start_ns <= hi,
                (_, None) => false,
            })
            .collect();
        spans.sort_by(|a, b| {
            a.track
                .cmp(&b.track)
                .then(a.start_ns.total_cmp(&b.start_ns))
                .then(b.end_ns().total_cmp(&a.end_ns()))
        });
        spans
    }
}

/// A threads-mode rank's wait hook that records its waits and schedule
/// steps in wall time (since the cluster's start).
pub struct TracingWait {
    inner: Arc<dyn WaitHook>,
    timeline: Arc<Timeline>,
    rank: usize,
    epoch: Instant,
}

impl std::fmt::Debug for TracingWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracingWait")
            .field("rank", &self.rank)
            .finish()
    }
}

impl TracingWait {
    /// Wrap `inner`, the hook of `rank`.
    pub fn new(
        inner: Arc<dyn WaitHook>,
        timeline: Arc<Timeline>,
        rank: usize,
        epoch: Instant,
    ) -> Self {
        Self {
            inner,
            timeline,
            rank,
            epoch,
        }
    }

    fn now(&self) -> f64 {
        self.epoch.elapsed().as_nanos() as f64
    }

    fn timed<T>(&self, name: impl FnOnce() -> String, body: impl FnOnce() -> T) -> T {
        let start = self.now();
        let out = body();
        let end = self.now();
        self.timeline
            .rank_span(self.rank, "wait", name(), start, end);
        out
    }
}

impl WaitHook for TracingWait {
    fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), WaitTimeout> {
        self.timed(|| "wait".into(), || self.inner.wait_until(ready))
    }

    fn wait_words(&self, words: &[WordWatch]) -> Result<(), WaitTimeout> {
        self.timed(
            || format!("wait: {} word(s)", words.len()),
            || self.inner.wait_words(words),
        )
    }

    fn wait_words_or(&self, words: &[WordWatch], notice: &WordWatch) -> Result<bool, WaitTimeout> {
        self.timed(
            || format!("wait: {} word(s) or a notice", words.len()),
            || self.inner.wait_words_or(words, notice),
        )
    }

    fn wake_local(&self, local: usize) {
        self.inner.wake_local(local);
    }

    fn compute(&self, d: std::time::Duration) {
        self.timed(|| "compute".into(), || self.inner.compute(d));
    }

    fn observer(&self) -> &dyn HostObserver {
        self
    }
}

/// A traced rank's host activity: copies and schedule steps become spans,
/// and everything reaches the inner hook's observer.
impl HostObserver for TracingWait {
    fn before_shared_write(&self) {
        self.inner.observer().before_shared_write();
    }

    fn host_copy(&self, bytes: usize, cross_socket: bool) {
        // The copy follows the call; threads mode only knows that it starts.
        let at = self.now();
        self.timeline
            .rank_span(self.rank, "shm", format!("copy {bytes} B"), at, at);
        self.inner.observer().host_copy(bytes, cross_socket);
    }

    fn idle_poll(&self) -> Result<(), WaitTimeout> {
        self.inner.observer().idle_poll()
    }

    fn at_step(&self, step: u32, what: &'static str) {
        self.timeline.step(self.rank, step, what, self.now());
        self.inner.observer().at_step(step, what);
    }

    fn library(&self, work: LibraryWork) {
        self.inner.observer().library(work);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_close_at_the_next_step_and_at_disarm_and_nothing_is_kept_unarmed() {
        let t = Timeline::new();
        t.step(0, 0, "put", 1.0);
        t.rank_span(0, "wait", "wait".into(), 1.0, 2.0);
        t.arm(0, 10.0);
        t.step(0, 0, "put", 11.0);
        t.step(0, 1, "wait", 15.0);
        t.rank_span(0, "wait", "wait".into(), 15.0, 18.0);
        t.disarm(0, 20.0);
        t.push(
            Track::Nic { node: 0, rail: 0 },
            "nic",
            "command".into(),
            5.0,
            Some(6.0),
        );
        t.push(
            Track::Nic { node: 0, rail: 0 },
            "nic",
            "command".into(),
            12.0,
            Some(13.0),
        );
        let spans = t.take();
        let names: Vec<(&str, f64, f64)> = spans
            .iter()
            .map(|s| (s.name.as_str(), s.start_ns, s.end_ns()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("step 0: put", 11.0, 15.0),
                ("step 1: wait", 15.0, 20.0),
                ("wait", 15.0, 18.0),
                ("command", 12.0, 13.0),
            ]
        );
    }
}
