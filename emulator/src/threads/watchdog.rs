//! Threads mode's watchdog, the counterpart of modeled mode's: a rank
//! whose wait makes no progress for the cluster's `wait_timeout` (wall
//! time) fails with a report naming every rank's pending step, instead of
//! hanging.
//!
//! Contract: each rank's wait hook records the schedule step the rank is
//! at ([`railcoll_host::env::HostObserver::at_step`]) and when its current
//! wait began. The first wait to time out writes the report (later ones
//! keep it); [`crate::Cluster::stall_report`] returns it, and the rank's
//! call fails with `Error::Timeout`.

use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// What one rank is doing, as the watchdog sees it.
#[derive(Clone, Copy, Debug, Default)]
struct RankState {
    step: Option<(u32, &'static str)>,
    waiting_since: Option<Instant>,
}

/// The watchdog of one threads-mode cluster.
#[derive(Debug)]
pub struct Watchdog {
    ranks: Vec<Mutex<RankState>>,
    report: OnceLock<String>,
    epoch: Instant,
}

impl Watchdog {
    /// A watchdog over `ranks` ranks, times from `epoch`.
    pub fn new(ranks: usize, epoch: Instant) -> Self {
        Self {
            ranks: (0..ranks)
                .map(|_| Mutex::new(RankState::default()))
                .collect(),
            report: OnceLock::new(),
            epoch,
        }
    }

    fn with(&self, rank: usize, f: impl FnOnce(&mut RankState)) {
        if let Some(r) = self.ranks.get(rank) {
            f(&mut r.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }

    /// Rank `rank` is at schedule step `step` (`what`).
    pub fn at_step(&self, rank: usize, step: u32, what: &'static str) {
        self.with(rank, |s| s.step = Some((step, what)));
    }

    /// Rank `rank` begins (`Some`) or ends (`None`) a wait.
    pub fn waiting(&self, rank: usize, since: Option<Instant>) {
        self.with(rank, |s| s.waiting_since = since);
    }

    /// Forget every rank's step (a new run begins).
    pub fn reset(&self) {
        for r in 0..self.ranks.len() {
            self.with(r, |s| *s = RankState::default());
        }
    }

    /// Rank `rank`'s wait timed out: write the report (the first one
    /// stands).
    pub fn stalled(&self, rank: usize) {
        let now = Instant::now();
        let ranks: Vec<String> = self
            .ranks
            .iter()
            .enumerate()
            .map(|(r, s)| {
                let s = *s.lock().unwrap_or_else(|p| p.into_inner());
                let step = match s.step {
                    Some((i, what)) => format!("at step {i} ({what})"),
                    None => "at no schedule step".into(),
                };
                let doing = match s.waiting_since {
                    Some(t) => format!(
                        "waiting for {:.3} s",
                        now.saturating_duration_since(t).as_secs_f64()
                    ),
                    None => "running".into(),
                };
                format!("rank {r} {step}, {doing}")
            })
            .collect();
        let _ = self.report.set(format!(
            "threads-mode watchdog: rank {rank} made no progress (wall time {:.3} s); {}",
            now.saturating_duration_since(self.epoch).as_secs_f64(),
            ranks.join("; ")
        ));
    }

    /// The report of the first stalled wait, if any.
    pub fn report(&self) -> Option<&str> {
        self.report.get().map(String::as_str)
    }
}
