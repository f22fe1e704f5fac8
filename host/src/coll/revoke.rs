//! Fail together: a collective that fails on one rank fails promptly on
//! every rank, each naming the rank that failed and why (ULFM's revoke,
//! \[ULFM\]).
//!
//! Contract:
//! - Every collective call (blocking, a non-blocking start or its
//!   progress, a persistent collective's creation, start or progress) runs
//!   through [`Coll::together`]. On a communicator already revoked it
//!   returns [`Error::Revoked`] at once. When the call fails on this rank,
//!   the rank revokes the communicator: it writes a notice (its rank and
//!   the [`RevokeCause`]) to its own notice record and puts it to every
//!   other rank's, and returns its own error.
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

use super::notice::{HEADER_AT, NOTICE_LEN, Notice};
use super::state::Coll;
use crate::endpoint::TransferOptions;
use crate::error::{Error, RevokeCause};

impl Coll<'_> {
    /// The notice this rank holds, if any.
    pub(crate) fn notice(&self) -> Option<Notice> {
        let notices = &self.st.bufs.notices;
        let mut word = [0u8; 8];
        self.ep.read_local(notices, HEADER_AT, &mut word).ok()?;
        Notice::of_header(u64::from_le_bytes(word))
    }

    /// Run `call`, one collective call of this rank, failing together:
    /// see the module documentation.
    pub(crate) fn together<T>(&self, call: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
        if let Some(n) = self.notice() {
            return Err(n.into_error());
        }
        let result = call();
        match result {
            Err(Error::WouldBlock) => result,
            Err(e) => match self.notice() {
                // The call failed because another rank's notice ended it.
                Some(n) if n.rank != self.ep.rank() => Err(n.into_error()),
                // This rank's own failure, revoked already (by an inner
                // call: a request's start within `istart`).
                Some(_) => Err(e),
                None => {
                    self.revoke(RevokeCause::of(&e));
                    Err(e)
                }
            },
            Ok(v) => Ok(v),
        }
    }

    /// Post this rank's notice to itself, then to every other rank (each
    /// put waits to be delivered, ignoring the notice it sends; a rank
    /// whose put fails still gets the others').
    fn revoke(&self, cause: RevokeCause) {
        let notice = Notice {
            rank: self.ep.rank(),
            cause,
        };
        let notices = self.st.bufs.notices;
        if self
            .ep
            .write_local(&notices, HEADER_AT, &notice.header().to_le_bytes())
            .is_err()
        {
            return;
        }
        let opts = TransferOptions {
            wake: true,
            ..TransferOptions::default()
        };
        let Ok(record) = notices.slice(0, NOTICE_LEN) else {
            return;
        };
        self.st.notice_wait.holding(|| {
            for peer in (0..self.ep.size()).filter(|&r| r != notice.rank) {
                if let Ok(h) = self.ep.put_with(&record, peer, &record, opts) {
                    let _ = h.wait();
                }
            }
        });
    }
}
