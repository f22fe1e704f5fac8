//! The Hockney cost model (t_s + m * tau per message, k ports per rank)
//! evaluated on a schedule, and the closed forms of the papers beside it.
//!
//! [`hockney`] replays a set with every rail part costing t_s + bytes*tau
//! on its sender's and receiver's port and everything else free (the
//! papers' model has no copy or flag costs). [`formula`] gives the paper's
//! prediction where there is one; `exact` says whether the paper's formula
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

fn is_power(n: usize, base: usize) -> bool {
    let mut x = 1;
    while x < n {
        x *= base;
    }
    x == n
}

fn log_ceil(base: usize, n: usize) -> f64 {
    let mut steps = 0u32;
    let mut x = 1usize;
    while x < n {
        x *= base;
        steps += 1;
    }
    f64::from(steps)
}

fn log_floor(base: usize, n: usize) -> f64 {
    let mut steps = 0u32;
    let mut x = base;
    while x <= n {
        x *= base;
        steps += 1;
    }
    f64::from(steps)
}

/// The paper's (or the classic) closed form for `p` under `h`, if any.
pub fn formula(p: &Params, h: &Hockney) -> Option<Formula> {
    let n = p.shape.size();
    let k = p.shape.rails;
    let r = k + 1;
    let m = p.block_bytes as f64;
    let (ts, tau) = (h.t_s, h.tau);
    let nf = n as f64;
    let kf = k as f64;
    // One striped message of `bytes`: its largest rail part.
    let striped = |bytes: usize| -> f64 {
        if bytes > p.stripe_threshold && k > 1 {
            ts + bytes.div_ceil(k) as f64 * tau
        } else {
            ts + bytes as f64 * tau
        }
    };
    use Algorithm as A;
    use Collective as C;
    let f = match (p.collective, p.algorithm) {
        (C::Gather, A::Binomial) => Formula {
            label: "[QA08 eq. 1]",
            value: ts * log_ceil(r, n) + (nf - 1.0) / kf * m * tau,
            exact: is_power(n, r),
        },
        (_, A::Direct) => Formula {
            label: "[QA08 eq. 2]",
            value: ((n - 1).div_ceil(k)) as f64 * (ts + m * tau),
            exact: true,
        },
        (C::Allgather, A::Exchange) if is_power(n, r) => Formula {
            label: "[QA08 eq. 3]",
            value: ts * log_ceil(r, n) + (nf - 1.0) / kf * m * tau,
            exact: true,
        },
        (C::Allgather, A::Exchange) => Formula {
            label: "[QA08 eq. 4]",
            value: ts * (r as f64) * log_floor(r, n) + (nf - 1.0) / kf * m * tau,
            exact: false,
        },
        (C::Allgather, A::Bruck) => Formula {
            label: "[QA08 eq. 1] (Bruck)",
            value: ts * log_ceil(r, n) + (nf - 1.0) / kf * m * tau,
            exact: is_power(n, r),
        },
        (C::Alltoall, A::Exchange) => Formula {
            label: "[QA08 §5.1.3] (SE all-to-all)",
            value: ts * log_ceil(r, n) + nf / r as f64 * log_ceil(r, n) * m * tau,
            exact: is_power(n, r),
        },
        (C::Alltoall, A::Bruck) => Formula {
            label: "[QA08 eq. 5] (k-port Bruck)",
            value: log_ceil(r, n) * (ts + nf / r as f64 * m * tau),
            exact: is_power(n, r),
        },
        (C::Alltoall, A::Pairwise) => Formula {
            label: "classic pairwise",
            value: (nf - 1.0) * striped(p.block_bytes),
            exact: true,
        },
        (C::Allgather, A::Ring) => Formula {
            label: "classic ring",
            value: (nf - 1.0) * striped(p.block_bytes),
            exact: true,
        },
        (C::Allgather, A::RecursiveDoubling) => {
            let mut value = 0.0;
            let mut d = 1;
            while d < n {
                value += striped(d * p.block_bytes);
                d *= 2;
            }
            Formula {
                label: "classic recursive doubling",
                value,
                exact: n.is_power_of_two(),
            }
        }
        _ => return None,
    };
    Some(f)
}
