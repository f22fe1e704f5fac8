//! The Hockney cost model (t_s + m * tau per message, k ports per rank)
//! evaluated on a schedule, and the closed forms of the papers beside it.
//!
//! [`hockney`] replays a set with every rail part costing t_s + bytes*tau
//! on its sender's and receiver's port and everything else free (the
//! papers' model has no copy or flag costs).
//! [`crate::sched::catalogue::formula`] gives the paper's prediction where
//! there is one (each catalogue entry names its closed form); `exact` says whether the paper's formula
//! is meant to hold for this N (power-of-(k+1) forms only hold there), and
//! where it is, the schedule's replay must agree to rounding: the tests
//! hold every algorithm to that.

use super::sim::{self, Timing};
use super::*;

/// Hockney parameters, in microseconds and microseconds per byte.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hockney {
    /// Start-up time per message.
    pub t_s: f64,
    /// Time per byte.
    pub tau: f64,
}

impl Timing for Hockney {
    fn part(&self, bytes: usize) -> f64 {
        self.t_s + bytes as f64 * self.tau
    }
}

impl Hockney {
    /// QsNetII-like numbers for examples (t_s 1.6 us, 900 MB/s per rail,
    /// [ELAN-SEM §12]).
    pub const QSNET2: Hockney = Hockney {
        t_s: 1.6,
        tau: 1.0 / 900.0,
    };
}

/// The modelled completion time of `set` (the last rank to finish).
pub fn hockney(set: &ScheduleSet, model: &Hockney) -> Result<f64, Error> {
    let r = sim::replay(set, model);
    r.makespan().ok_or_else(|| Error::Unsupported {
        algorithm: set.params.algorithm.name(),
        reason: "its schedule deadlocks (run the verifier)".into(),
    })
}

/// A paper's closed form for one case.
#[derive(Clone, Debug, PartialEq)]
pub struct Formula {
    /// Where it comes from.
    pub label: &'static str,
    /// Its value, microseconds.
    pub value: f64,
    /// The formula is meant to hold for this N (else it is printed for
    /// comparison only).
    pub exact: bool,
}
