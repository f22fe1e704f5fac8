//! Fail together: a collective that fails on one rank fails promptly on
//! every rank, each naming the rank that failed and why (ULFM's revoke,
//! \[ULFM\]).
//!
//! Contract:
//! - Every collective call (blocking, a non-blocking start or its
//!   progress, a persistent collective's creation, start or progress) runs
//!   through [`Coll::together`]. On a communicator already revoked it
//!   returns [`Error::Revoked`] once its arguments are found valid, before
//!   it posts anything (`Coll::start_run`); a call invalid on this rank
//!   returns its own error, revoked or not. When the call fails on this rank,
//!   the rank revokes the communicator: it writes a notice (its rank and
//!   the [`RevokeCause`]) to its own notice record and puts it to every
//!   other rank's, and returns its own error (also when another rank's
//!   notice came first: a call every rank got wrong returns each rank its
//!   own error). A call refused because a collective is still in flight
//!   (`Error::CollectiveInFlight`: a persistent start, an arena reset) is
//!   not a failure: nothing of it began, and the caller calls it again
//!   once the other completed.
//! - Every wait of a rank goes through its [`crate::env::NoticeWait`], armed with the
//!   rank's notice word: once a notice lands, the wait gives up, and the
//!   call it was part of returns [`Error::Revoked`] naming the rank that
//!   failed. A loop of waits that complete at once ends too (the notice is
//!   tested before each wait). In threads mode the notice's put wakes the
//!   waiting thread; modeled mode tests the notice word with the waits'
//!   own words.
//! - A revoke is for good: the communicator's collectives all return it.
//!   Its NICs may still hold puts of the failed call (they land in the
//!   call's buffers); closing the communicator waits for them before it
//!   detaches its contexts, so none outlives it.
//!
//! The notice's format is in [`super::notice`].

use super::notice::{NOTICE_LEN, Notice};
use super::state::Coll;
use crate::endpoint::TransferOptions;
use crate::error::{Error, RevokeCause};

impl Coll<'_> {
    /// The notice this rank holds, if any.
    pub(crate) fn notice(&self) -> Option<Notice> {
        // Every call asks (`Coll::start_run`): one load of the header word
        // while none has come, the record only once one has.
        if !self.st.notice.ready() {
            return None;
        }
        let mut record = [0u8; NOTICE_LEN];
        self.ep
            .read_local(&self.st.bufs.notices, 0, &mut record)
            .ok()?;
        Notice::from_bytes(&record)
    }

    /// Run `call`, one collective call of this rank, failing together:
    /// see the module documentation.
    pub(crate) fn together<T>(&self, call: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        // This communicator's waits end on its own notice.
        let result = self.in_scope(call);
        match result {
            // Not a failure: a call refused before it began because
            // another is in flight (the caller completes that one and
            // calls again; the others are in it).
            Err(Error::CollectiveInFlight(_)) => result,
            Err(e) => match self.notice() {
                // A wait the notice of another rank ended: the revoke is
                // the call's outcome.
                Some(n) if n.rank != self.rank() && matches!(e, Error::Timeout(_)) => {
                    Err(n.into_error())
                }
                // This rank's own failure, told already (by an inner call:
                // a request's start within `istart`; or by another rank
                // that failed the same way at the same time).
                Some(_) => Err(e),
                None => {
                    self.revoke(RevokeCause::of(&e));
                    Err(e)
                }
            },
            Ok(v) => Ok(v),
        }
    }

    /// Post this rank's notice to itself, then to every other rank (the
    /// puts wait to be delivered, ignoring the notice they send; a rank
    /// whose put fails still gets the others').
    fn revoke(&self, cause: RevokeCause) {
        let notice = Notice {
            rank: self.rank(),
            cause,
        };
        let record = self.st.bufs.notices;
        if self.ep.write_local(&record, 0, &notice.to_bytes()).is_err() {
            return;
        }
        let opts = TransferOptions {
            wake: true,
            ..TransferOptions::default()
        };
        // Every put posted before any is waited for: the last rank hears
        // one round trip after the first, not n - 1 of them.
        self.st.notice_wait.holding(|| {
            let puts: Vec<_> = (0..self.size())
                .filter(|&r| r != notice.rank)
                .filter_map(|peer| {
                    let to = self.job_rank(peer).ok()?;
                    self.ep.put_with(&record, to, &record, opts).ok()
                })
                .collect();
            for h in puts {
                let _ = h.wait();
            }
        });
    }
}
