//! railcoll-conformance: the ABI-level tests of a railcoll NIC (docs/abi.md),
//! run through the host library against whatever device its communicator
//! drives: the in-process emulator, a `nicd` over vfio-user, a board.
//! It is what an FPGA team runs first against their board
//! (docs/hil.md), and what CI runs against the first two
//! (`railcoll conformance`).
//!
//! Map of the crate:
//!
//! - [`CHECKS`]: the checks, in the order they run, each a collective
//!   step every rank of the communicator takes: registers and geometry,
//!   the command ring (a malformed block fails alone), puts (every
//!   byte, and the bytes around the target untouched), gets, striped
//!   puts, destination events (counting), chained puts (a ring of NICs
//!   forwarding with no host), cross-rail triggers (a striped chained
//!   put), protection (puts outside the target's arena write nothing),
//!   queued messages, the switch's barrier and broadcast, and traffic
//!   that go-back-N must carry byte-exact when the link loses packets.
//! - [`run`]: every selected check on one rank; after each, the ranks
//!   agree on its verdict (a check that failed on any rank failed).
//!
//! Contract: a check never panics on what the device does; it reports.
//! A device that stops answering makes the waits end with the
//! communicator's timeout, and [`run`] returns that error: the suite
//! cannot go on without a device that carries the verdicts.
//!
//! ```no_run
//! # fn with(comm: &railcoll_host::Comm) -> Result<(), railcoll_host::Error> {
//! let report = railcoll_conformance::run(comm, &|_| true).map_err(|s| s.error)?;
//! for outcome in &report {
//!     println!("{outcome}");
//! }
//! assert!(report.iter().all(|o| o.verdict.passed()));
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

mod checks;

use railcoll_host::{Comm, Error};

pub use checks::{CHECKS, pattern};

/// A check's verdict on one rank, or agreed by all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Everything it checked was right.
    Passed,
    /// The shape does not allow it (why).
    NotApplicable(String),
    /// Something was wrong (what, on which rank).
    Failed(String),
}

impl Verdict {
    /// Did it not fail?
    pub fn passed(&self) -> bool {
        !matches!(self, Verdict::Failed(_))
    }

    fn code(&self) -> u8 {
        match self {
            Verdict::Passed => 0,
            Verdict::NotApplicable(_) => 1,
            Verdict::Failed(_) => 2,
        }
    }
}

/// One check of the suite.
#[derive(Clone, Copy, Debug)]
pub struct Check {
    /// Its name (what `--only` selects).
    pub name: &'static str,
    /// What it checks, in a line.
    pub what: &'static str,
    /// What the ABI says of it.
    pub spec: &'static str,
    run: fn(&Comm) -> Result<Verdict, Error>,
}

/// A check's agreed outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The check's name.
    pub name: &'static str,
    /// Its verdict: failed if it failed on any rank (this rank's words,
    /// or the ranks that failed).
    pub verdict: Verdict,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.verdict {
            Verdict::Passed => write!(f, "pass  {}", self.name),
            Verdict::NotApplicable(why) => write!(f, "n/a   {}: {why}", self.name),
            Verdict::Failed(what) => write!(f, "FAIL  {}: {what}", self.name),
        }
    }
}

/// The suite could not go on: the ranks could not meet before a check,
/// or agree on its verdict.
#[derive(Debug)]
pub struct Stopped {
    /// The outcomes agreed before it stopped.
    pub report: Vec<Outcome>,
    /// The check it stopped at.
    pub at: &'static str,
    /// This rank's verdict of that check, if it had run it.
    pub verdict: Option<Verdict>,
    /// What stopped it.
    pub error: Error,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the suite stopped at {}", self.at)?;
        if let Some(v) = &self.verdict {
            write!(f, " (this rank's verdict: {v:?})")?;
        }
        write!(f, ": {}", self.error)
    }
}

impl std::error::Error for Stopped {}

/// Run every check `select` takes, in order, on this rank of `comm`
/// (collective: every rank calls it with the same selection). A check's
/// own errors (a wait that timed out, a NIC error) are its failure; the
/// suite stops, with the outcomes so far, when the ranks cannot meet
/// before a check or agree on its verdict.
pub fn run(comm: &Comm, select: &dyn Fn(&str) -> bool) -> Result<Vec<Outcome>, Box<Stopped>> {
    let mut report = Vec::new();
    for check in CHECKS.iter().filter(|c| select(c.name)) {
        let stop = |report, verdict, error| {
            Box::new(Stopped {
                report,
                at: check.name,
                verdict,
                error,
            })
        };
        if let Err(e) = comm.barrier().and_then(|()| comm.reset_arena()) {
            return Err(stop(report, None, e));
        }
        let mine = match (check.run)(comm) {
            Ok(v) => v,
            Err(e) => Verdict::Failed(format!("rank {}: {e}", comm.rank())),
        };
        // Stale error records of this check are not the next one's.
        let _ = comm.endpoint().take_nic_errors();
        let verdict = match agree(comm, mine.clone()) {
            Ok(v) => v,
            Err(e) => return Err(stop(report, Some(mine), e)),
        };
        report.push(Outcome {
            name: check.name,
            verdict,
        });
    }
    Ok(report)
}

/// The verdict of all ranks: this rank's if it failed; else, if another
/// failed, which ranks did; else this rank's.
fn agree(comm: &Comm, mine: Verdict) -> Result<Verdict, Error> {
    comm.barrier()?;
    comm.reset_arena()?;
    let n = comm.size();
    let send = comm.alloc(1)?;
    let recv = comm.alloc(n)?;
    comm.write_local(&send, 0, &[mine.code()])?;
    // No code: a slot the all-gather did not write reads as none.
    comm.write_local(&recv, 0, &vec![0xff; n])?;
    comm.allgather(&send, &recv)?;
    let mut codes = vec![0u8; n];
    comm.read_local(&recv, 0, &mut codes)?;
    if matches!(mine, Verdict::Failed(_)) {
        return Ok(mine);
    }
    // The verdicts travel over the device under test: they must come back
    // whole, this rank's own included.
    if codes.get(comm.rank()) != Some(&mine.code()) || codes.iter().any(|&c| c > 2) {
        return Ok(Verdict::Failed(format!(
            "the ranks' verdicts did not come back intact: {codes:?}"
        )));
    }
    let failed: Vec<usize> = (0..n).filter(|&r| codes[r] == 2).collect();
    Ok(if failed.is_empty() {
        mine
    } else {
        Verdict::Failed(format!("failed on ranks {failed:?}"))
    })
}
