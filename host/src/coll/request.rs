//! Non-blocking and persistent collectives [MPI4 §6.12, §6.13], and the
//! communicator's table of collectives in flight that every call
//! progresses.
//!
//! `Comm::iallgather` and its siblings start a collective and return a
//! [`Request`]; `Comm::allgather_init` and its siblings generate (and
//! prove) a schedule once and return a [`Persistent`] collective that can
//! be started any number of times. Both run on the executor's resumable
//! runs (`Coll::advance_gated` in `coll::exec`), which the communicator keeps
//! in its table (`InFlight`, in `coll::run`) until they complete; a request is a
//! number in that table:
//!
//! - starting posts everything that need not wait (puts whose data is
//!   local, every chained put of an offloaded algorithm: from then on the
//!   NICs go on by themselves);
//! - the host-driven parts progress only inside library calls (as in MPI
//!   libraries without a progress thread): `test` takes every ready step
//!   of every collective in flight, oldest first, and `wait` blocks
//!   through the oldest until its own is complete, so waiting for a later
//!   request never starves an earlier one that another rank needs;
//! - several may be in flight, completed in any order ([`wait_all`],
//!   [`wait_any`], [`test_all`]); a blocking collective is one more entry
//!   of the table. Steps that use the communicator's sequential state
//!   (barrier numbers, node flags and barriers, the switch, the queue)
//!   run in start order: a later collective takes one only once every
//!   earlier one is complete, so every rank takes them in the same order
//!   whatever order it waits in. Puts, chained puts, counter waits and
//!   local copies go ahead at once;
//! - a collective takes one of the two counter pools and scratch sets in
//!   turn; starting a third that needs one while both are held first
//!   completes the older holder (the NICs' budget: a typed refusal would
//!   depend on timing and differ between ranks, this does not);
//! - completion means what a blocking call's return means: the outputs are
//!   in place and no rank touches this rank's buffers any more.
//!
//! Dropping a request completes it (blocking), as dropping a put's handle
//! does. A request leaked with `mem::forget` stays in the table and is
//! completed by the calls that follow: it locks nothing. An error leaves
//! the communicator revoked ([`crate::coll`]); a failed request keeps
//! returning its error, so a failed collective never reads as complete.
//!
//! A persistent collective's set is guarded ([`crate::sched::persist`]), so its
//! starts may follow each other back to back on the same buffers with no
//! barrier: the caller reads the outputs and writes new inputs between
//! `wait` and the next `start`. Starting it while its previous start is
//! still active is [`Error::CollectiveInFlight`] (MPI's erroneous
//! program, refused).

use std::sync::Arc;

use super::run::{Entry, InFlight, Run};
use super::state::{Coll, Progress};
use crate::arena::SymBuffer;
use crate::env::WaitTimeout;
use crate::error::Error;
use crate::sched::*;

impl<'a> Coll<'a> {
    /// Put `run` (holding counter pool and scratch set `slot`) in the
    /// table; its number.
    fn enqueue(&self, run: Run, slot: Option<usize>, name: &'static str) -> u64 {
        let table = &self.st.exec.in_flight;
        let id = table.next.get();
        table.next.set(id + 1);
        table.entries.borrow_mut().push_back(Entry {
            id,
            name,
            slot,
            run: Some(Box::new(run)),
            outcome: None,
        });
        id
    }

    /// Advance the entry at `index` as far as `how` allows; its steps that
    /// use the communicator's sequential state wait while an older entry is
    /// in flight. An error is kept as its outcome and returned.
    fn advance_entry(&self, index: usize, how: Progress) -> Result<(), Error> {
        let table = &self.st.exec.in_flight;
        let (mut run, older_open) = {
            let mut entries = table.entries.borrow_mut();
            let older_open = entries.iter().take(index).any(|e| e.outcome.is_none());
            let Some(entry) = entries.get_mut(index) else {
                return Ok(());
            };
            match entry.run.take() {
                Some(run) if entry.outcome.is_none() => (run, older_open),
                other => {
                    entry.run = other;
                    return Ok(());
                }
            }
        };
        // An advance that unwinds (a panic; a modeled rank given up on,
        // whose stack is unwound) must not leave the entry looking as if
        // it were still being advanced: every later wait on it (a
        // request's drop among them) would go round for ever.
        let unwinding = UnwindGuard { table, index };
        let result = self.advance_gated(&mut run, how, older_open);
        std::mem::forget(unwinding);
        let mut entries = table.entries.borrow_mut();
        let Some(entry) = entries.get_mut(index) else {
            return result.map(|_| ());
        };
        match result {
            Ok(false) => entry.run = Some(run),
            Ok(true) => entry.outcome = Some(Ok(())),
            Err(e) => {
                entry.outcome = Some(Err(e.clone()));
                drop(entries);
                self.abandon(*run);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Progress the collectives in flight until `target` is over (every
    /// one, with `None`), or, polling, as far as they go. Each round takes
    /// every ready step of every entry, oldest first; blocking, it then
    /// waits through the oldest entry in flight (which no rank's later
    /// collective can be holding up). `true` once the target is over; an
    /// error of any entry is this call's.
    pub(crate) fn progress(&self, target: Option<u64>, how: Progress) -> Result<bool, Error> {
        let table = &self.st.exec.in_flight;
        loop {
            // A target that is the oldest in flight goes straight through,
            // as a lone collective runs (no poll round first).
            let target_first = how == Progress::Block
                && target.is_some()
                && table.oldest(|_| true).map(|(_, id, _)| id) == target;
            if !target_first {
                let count = table.entries.borrow().len();
                for index in 0..count {
                    self.advance_entry(index, Progress::Poll)?;
                }
                let over = match target {
                    Some(id) => table.outcome(id).is_some(),
                    None => table.running().is_none(),
                };
                if over || how == Progress::Poll {
                    return Ok(over);
                }
            }
            if let Some((index, _, _)) = table.oldest(|_| true) {
                self.advance_entry(index, Progress::Block)?;
            }
        }
    }

    /// Complete whichever collective in flight holds counter pool and
    /// scratch set `slot`, before a new one takes it.
    pub(crate) fn free_slot(&self, slot: usize) -> Result<(), Error> {
        self.complete_oldest(|e| e.slot == Some(slot))
    }

    /// Whether a collective is in flight on this communicator.
    pub(crate) fn in_flight_open(&self) -> bool {
        self.st.exec.in_flight.oldest(|_| true).is_some()
    }

    /// Complete the oldest collective in flight that `holds` accepts
    /// (nothing if none).
    pub(crate) fn complete_oldest(&self, holds: impl Fn(&Entry) -> bool) -> Result<(), Error> {
        match self.st.exec.in_flight.oldest(holds) {
            Some((_, id, _)) => self.progress(Some(id), Progress::Block).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Start `set` on `send` and `recv`: its entry in the table, and every
    /// step that can go at once (`Poll`), or all of it (`Block`).
    fn start_entry(
        &self,
        set: Arc<ScheduleSet>,
        send: &SymBuffer,
        recv: &SymBuffer,
        how: Progress,
    ) -> Result<u64, Error> {
        let name = set.params.choice().name();
        let (run, slot) = self.start_run(set, send, recv)?;
        let id = self.enqueue(run, slot, name);
        if let Err(e) = self.progress(Some(id), how) {
            // Its own failure is the start's; the request never existed.
            if matches!(self.st.exec.in_flight.outcome(id), Some(Err(_))) {
                self.st.exec.in_flight.forget(id);
            }
            return Err(e);
        }
        Ok(id)
    }

    /// Run `set` to completion (a blocking call: one more entry of the
    /// table, completed before returning).
    pub(crate) fn run_to_completion(
        &self,
        set: Arc<ScheduleSet>,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<(), Error> {
        let id = self.start_entry(set, send, recv, Progress::Block)?;
        let result = self.st.exec.in_flight.outcome(id).unwrap_or(Ok(()));
        self.st.exec.in_flight.forget(id);
        result
    }

    /// `id`'s outcome once over, completing it as far as `how` allows;
    /// `Ok(false)` while in flight.
    fn request_progress(&self, id: u64, how: Progress) -> Result<bool, Error> {
        self.together(|| {
            let table = &self.st.exec.in_flight;
            // Another entry's error is this call's too (the communicator
            // is revoked), but `id` keeps its own outcome for later.
            let progressed = self.progress(Some(id), how);
            match table.outcome(id) {
                Some(Ok(())) => Ok(true),
                Some(Err(e)) => Err(e),
                // A poll that found nothing to do never waits, so no wait
                // saw the notice: ask for it here, or a rank polling with
                // `test` would never learn of a revoke (its own included,
                // as `wait` does).
                None => match self.notice() {
                    Some(n) if progressed.is_ok() => Err(n.into_error()),
                    _ => progressed.map(|_| false),
                },
            }
        })
    }
}

/// A non-blocking collective in flight ([MPI4 §6.12]).
///
/// Dropping a request completes the collective on this rank (it blocks,
/// as `wait` does) but has nowhere to return an error: if the
/// communicator is revoked meanwhile, the collective may have ended
/// incomplete, which [`Comm::revoked`](crate::Comm::revoked) then tells.
#[must_use = "a collective is only known complete once its request is tested or waited"]
pub struct Request<'c> {
    coll: Coll<'c>,
    id: u64,
    /// Its end was seen (and its entry let go).
    seen: bool,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("id", &self.id)
            .field("seen", &self.seen)
            .finish()
    }
}

/// Ends the entry at `index` with an error if its advance unwinds (its run
/// is lost with the unwound frame).
struct UnwindGuard<'t> {
    table: &'t InFlight,
    index: usize,
}

impl Drop for UnwindGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut entries) = self.table.entries.try_borrow_mut()
            && let Some(entry) = entries.get_mut(self.index)
            && entry.outcome.is_none()
        {
            entry.outcome = Some(Err(Error::Timeout(WaitTimeout(std::time::Duration::ZERO))));
        }
    }
}

impl<'c> Request<'c> {
    pub(crate) fn start(
        coll: Coll<'c>,
        set: Arc<ScheduleSet>,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<Self, Error> {
        let id = coll.together(|| coll.start_entry(set, send, recv, Progress::Poll))?;
        Ok(Self {
            coll,
            id,
            seen: false,
        })
    }

    /// Take every step that is ready, of this collective and of every
    /// other one in flight on the communicator, without blocking; `true`
    /// once this one is complete on this rank. An error is returned again
    /// by every later call.
    pub fn test(&mut self) -> Result<bool, Error> {
        let done = self.coll.request_progress(self.id, Progress::Poll)?;
        if done {
            self.see();
        }
        Ok(done)
    }

    /// Block until the collective is complete on this rank (progressing
    /// every collective in flight on the communicator meanwhile).
    pub fn wait(mut self) -> Result<(), Error> {
        let result = self.coll.request_progress(self.id, Progress::Block);
        if result.is_ok() {
            self.see();
        }
        result.map(|_| ())
    }

    /// Its end was seen: let go of its entry.
    fn see(&mut self) {
        if !self.seen {
            self.seen = true;
            self.coll.st.exec.in_flight.forget(self.id);
        }
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if !self.seen {
            // Its waits end on its own communicator's revoke.
            let (c, id) = (self.coll, self.id);
            let _ = c.in_scope(|| c.progress(Some(id), Progress::Block));
            self.coll.st.exec.in_flight.forget(self.id);
        }
    }
}

/// Complete every request of `requests` (in any order: each wait
/// progresses them all), returning the first error. [MPI4 §3.7.5]
///
/// Several collectives in flight on one communicator, each on its own
/// buffers (a request's buffers are the collective's until it completes):
///
/// ```
/// # use railcoll_emu::{Cluster, ClusterConfig};
/// # let cluster = Cluster::new(ClusterConfig::default())?;
/// # let results = cluster.run(|comm| -> Result<(), railcoll_host::Error> {
/// let n = comm.size();
/// let (a, all_a) = (comm.alloc(8)?, comm.alloc(8 * n)?);
/// let (b, all_b) = (comm.alloc(8)?, comm.alloc(8 * n)?);
/// comm.write_local(&a, 0, &[1; 8])?;
/// comm.write_local(&b, 0, &[2; 8])?;
/// let first = comm.iallgather(&a, &all_a)?;
/// let barrier = comm.ibarrier()?;
/// let second = comm.iallgather(&b, &all_b)?;
/// // Completed in another order than started, on every rank alike or not.
/// railcoll_host::wait_all(vec![second, barrier, first])?;
/// let mut got = vec![0u8; 8 * n];
/// comm.read_local(&all_b, 0, &mut got)?;
/// assert!(got.iter().all(|&x| x == 2));
/// # Ok(())
/// # });
/// # for r in results { r??; }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn wait_all(requests: Vec<Request<'_>>) -> Result<(), Error> {
    let mut first = Ok(());
    for r in requests {
        let result = r.wait();
        if first.is_ok() {
            first = result;
        }
    }
    first
}

/// Complete one request of `requests`, whichever is complete first; its
/// index (it is removed from `requests`). Polls them all, then blocks
/// through the communicator's oldest collective, until one is complete.
/// `None` if `requests` is empty.
pub fn wait_any(requests: &mut Vec<Request<'_>>) -> Result<Option<usize>, Error> {
    loop {
        if requests.is_empty() {
            return Ok(None);
        }
        for i in 0..requests.len() {
            if requests[i].test()? {
                let _seen = requests.remove(i);
                return Ok(Some(i));
            }
        }
        let coll = requests[0].coll;
        coll.together(|| coll.complete_oldest(|_| true))?;
    }
}

/// Take every ready step of every request of `requests` without blocking;
/// `true` once all are complete (those complete are then seen).
pub fn test_all(requests: &mut [Request<'_>]) -> Result<bool, Error> {
    let mut all = true;
    for r in requests.iter_mut() {
        if !r.test()? {
            all = false;
        }
    }
    Ok(all)
}

/// A persistent collective ([MPI4 §6.13]): its schedule generated and
/// proved once, started any number of times on the same buffers.
pub struct Persistent<'c> {
    coll: Coll<'c>,
    set: Arc<ScheduleSet>,
    send: SymBuffer,
    recv: SymBuffer,
    /// The current start, until its end is seen.
    active: Option<Request<'c>>,
    /// A start that failed: every later call returns it.
    failed: Option<Error>,
    starts: u64,
}

impl std::fmt::Debug for Persistent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persistent")
            .field("algorithm", &self.set.params.choice().name())
            .field("starts", &self.starts)
            .field("active", &self.active.is_some())
            .finish()
    }
}

impl<'c> Persistent<'c> {
    pub(crate) fn new(
        coll: Coll<'c>,
        set: Arc<ScheduleSet>,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Self {
        Self {
            coll,
            set,
            send: *send,
            recv: *recv,
            active: None,
            failed: None,
            starts: 0,
        }
    }

    /// Start the collective (every rank starts it the same number of
    /// times). Not while the previous start is still active; not after a
    /// start failed (its error again).
    pub fn start(&mut self) -> Result<(), Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.active.is_some() {
            return Err(Error::CollectiveInFlight(self.set.params.choice().name()));
        }
        let started = Request::start(self.coll, Arc::clone(&self.set), &self.send, &self.recv);
        match started {
            Ok(r) => self.active = Some(r),
            Err(e) => {
                self.failed = Some(e.clone());
                return Err(e);
            }
        }
        self.starts += 1;
        Ok(())
    }

    /// Take every step that is ready without blocking; `true` once the
    /// current start is complete on this rank (or if none is active).
    pub fn test(&mut self) -> Result<bool, Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let Some(r) = self.active.as_mut() else {
            return Ok(true);
        };
        match r.test() {
            Ok(true) => {
                self.active = None;
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Block until the current start is complete on this rank.
    pub fn wait(&mut self) -> Result<(), Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let Some(r) = self.active.take() else {
            return Ok(());
        };
        r.wait().inspect_err(|e| self.failed = Some(e.clone()))
    }

    /// How many times it was started.
    pub fn starts(&self) -> u64 {
        self.starts
    }

    /// The schedule set it runs (guarded for back-to-back starts).
    pub fn schedule(&self) -> &Arc<ScheduleSet> {
        &self.set
    }
}

impl<'a> Coll<'a> {
    /// Start `collective` (`algorithm`, or the tuned one) without
    /// blocking.
    pub(crate) fn start_collective(
        self,
        collective: Collective,
        algorithm: Option<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<Request<'a>, Error> {
        let set = self.set_for(collective, algorithm, send, root, false)?;
        Request::start(self, set, send, recv)
    }

    /// Prepare `collective` (`algorithm`, or the tuned one) as a
    /// persistent collective.
    pub(crate) fn init_collective(
        self,
        collective: Collective,
        algorithm: Option<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<Persistent<'a>, Error> {
        let set = self.set_for(collective, algorithm, send, root, true)?;
        Ok(Persistent::new(self, set, send, recv))
    }
}
