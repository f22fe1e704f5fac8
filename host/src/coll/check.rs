//! The argument check (`CommConfig::check`): before each collective call,
//! every rank agrees with its two neighbours in rank order on the call's
//! collective, algorithm (with its drive), block size, root and
//! communicator instance.
//!
//! Contract:
//! - Each rank numbers its collective calls (every blocking call, every
//!   non-blocking or persistent start) from 1 and, before the call posts
//!   anything, puts its signature (call number and the five fields) into
//!   a slot of each neighbour, then waits for both neighbours' signatures
//!   of the same call number and compares them with its own. Equal
//!   neighbours all round the ring mean every rank agrees.
//! - A difference is [`Error::Mismatch`] on the rank that found it
//!   (naming both ranks, the first field that differs and both values),
//!   which revokes the communicator ([`super::revoke`]): every other rank
//!   returns [`Error::Revoked`] with that mismatch. Both neighbours of a
//!   rank that disagrees find it; the first notice to land names one.
//! - Two slots per neighbour, used by alternate calls, suffice: a rank
//!   cannot pass the check of call `k + 1` before both its neighbours
//!   entered call `k + 1`, so none is ever two calls ahead of a neighbour
//!   that has not read its slot.
//! - A rank that skips a call of the same signature as the next one is
//!   not caught here (its later calls are one behind; the last waits for
//!   a signature that never comes, until the wait timeout revokes).
//! - Off, it costs nothing: no buffer is reserved and nothing is posted.
//!
//! Cost: two puts and one wait per call, measured in docs/performance.md.

use super::signature::{code_of, decode, from_le_bytes, to_le_bytes};
use super::state::{CHECK_LEN, Coll};
use crate::endpoint::TransferOptions;
use crate::env::{WordTest, WordWatch};
use crate::error::{CheckField, Error, Mismatch};
use crate::sched::Params;

/// Bytes of a signature: the five fields' codes, then the call number
/// (last: the put writes in address order, so the word the wait tests
/// lands after the fields).
const SIGNATURE_LEN: usize = 48;
const _: () = assert!(CHECK_LEN == 5 * SIGNATURE_LEN);

/// A signature's field codes and call number.
type Signature = [u64; 6];
/// Where the call number is.
const CALL_AT: usize = 5;

impl Coll<'_> {
    /// Agree with both neighbours on the call about to run `p` (see the
    /// module documentation); nothing if the check is off or the
    /// communicator has one rank.
    pub(crate) fn check_arguments(&self, p: &Params) -> Result<(), Error> {
        let Some(slots) = self.st.bufs.checks else {
            return Ok(());
        };
        let n = self.size();
        if n < 2 {
            return Ok(());
        }
        let me = self.rank();
        let call = self.st.seq.checked_calls.get().wrapping_add(1);
        self.st.seq.checked_calls.set(call);
        let instance = self.st.who.tag;
        let mut mine: Signature = [0; 6];
        for (w, field) in mine.iter_mut().zip(CheckField::ALL) {
            *w = code_of(field, p, instance);
        }
        mine[CALL_AT] = call;
        let parity = (call % 2) as usize;
        let slot =
            |side: usize| slots.slice((1 + 2 * side + parity) * SIGNATURE_LEN, SIGNATURE_LEN);
        let source = slots.slice(0, SIGNATURE_LEN)?;
        self.ep
            .write_local(&source, 0, &to_le_bytes::<6, SIGNATURE_LEN>(mine))?;
        let left = (me + n - 1) % n;
        let right = (me + 1) % n;
        let opts = TransferOptions {
            wake: true,
            ..TransferOptions::default()
        };
        // Side 0 holds what the left neighbour sent, side 1 the right's.
        let to_right = self
            .ep
            .put_with(&source, self.job_rank(right)?, &slot(0)?, opts)?;
        let to_left = self
            .ep
            .put_with(&source, self.job_rank(left)?, &slot(1)?, opts)?;
        let watches = [slot(0)?, slot(1)?]
            .map(|s| self.ep.local_memory(&s))
            .map(|m| {
                m.map(|mem| WordWatch {
                    mem,
                    offset: CALL_AT * 8,
                    mask: u64::MAX,
                    test: WordTest::Equals(call),
                })
            });
        let [a, b] = watches;
        let hook = self.ep.wait_arc();
        // What a watchdog names if a neighbour never comes (before the
        // schedule's step 0).
        hook.observer().at_step(0, "argument check");
        let words = [a?, b?];
        // A neighbour may be held up in an older collective in flight
        // that needs this rank's progress (a node flag it raises, say):
        // while one is, complete the oldest rather than wait for the
        // signatures alone, which would deadlock (found by the
        // differential fuzzer). This rank's signature is out already.
        while !words.iter().all(WordWatch::ready) && self.in_flight_open() {
            self.complete_oldest(|_| true)?;
            hook.observer().at_step(0, "argument check");
        }
        hook.wait_words(&words)?;
        to_right.wait()?;
        to_left.wait()?;
        for (side, neighbour) in [(0, left), (1, right)] {
            let mut bytes = [0u8; SIGNATURE_LEN];
            self.ep.read_local(&slot(side)?, 0, &mut bytes)?;
            let theirs: Signature = from_le_bytes(&bytes);
            let differing = CheckField::ALL
                .iter()
                .zip(&mine)
                .zip(&theirs)
                .find(|((_, a), b)| a != b);
            if let Some(((&field, &a), &b)) = differing {
                return Err(Error::Mismatch(Mismatch {
                    call,
                    field,
                    ranks: (me, neighbour),
                    values: (decode(field, a), decode(field, b)),
                }));
            }
        }
        Ok(())
    }
}
