//! Non-blocking and persistent collectives [MPI4 §6.12, §6.13].
//!
//! `Comm::iallgather` and its siblings start a collective and return a
//! [`Request`]; `Comm::allgather_init` and its siblings generate (and
//! prove) a schedule once and return a [`Persistent`] collective that can
//! be started any number of times. Both run on the executor's resumable
//! runs (`Coll::advance` in [`super::exec`]):
//!
//! - starting posts everything that need not wait (puts whose data is
//!   local, every chained put of an offloaded algorithm: from then on the
//!   NICs go on by themselves);
//! - the host-driven part progresses only inside [`Request::test`] and
//!   [`Request::wait`] (as in MPI libraries without a progress thread):
//!   `test` takes every step that is ready and returns at the first that
//!   is not; `wait` blocks through the rest;
//! - completion means what a blocking call's return means: the outputs are
//!   in place and no rank touches this rank's buffers any more.
//!
//! One collective is in flight per communicator at a time: starting
//! another (blocking or not) before this one completes is
//! [`Error::CollectiveInFlight`]. Dropping a request or an active
//! persistent collective completes it (blocking), as dropping a put's
//! handle does: the NICs and the other ranks may still be using its
//! buffers. An error leaves the communicator's collectives unusable, as
//! for a blocking call; the request (or persistent collective) keeps
//! returning it, so a failed collective never reads as complete.
//!
//! A persistent collective is generated with the readiness guard of
//! [`super::persist`], so starts may follow each other back to back on
//! the same buffers with no barrier: the caller reads the outputs and
//! writes new inputs between `wait` and the next `start`.

use std::sync::Arc;

use super::exec::Run;
use super::*;
use crate::arena::SymBuffer;
use crate::coll::state::{Coll, Progress};

/// A run in flight and the communicator it holds busy; once failed, the
/// error it failed with (every later `test` or `wait` returns it again:
/// a failed collective never reads as complete).
///
/// The request stays active, and the communicator busy, until the user
/// sees it complete (`test` returning true, `wait`, or a drop), even if
/// the run finished inside `start`: whether a run finishes within its
/// first poll depends on timing and differs between ranks, and what
/// every rank is allowed to do next (a second start, another
/// collective) must not.
struct Active<'c> {
    coll: Coll<'c>,
    run: Option<Run<'c>>,
    failed: Option<Error>,
    /// The user has seen it complete (the communicator is free again).
    observed: bool,
}

impl<'c> Active<'c> {
    /// Start `set` and take every step that can go at once.
    fn start(
        coll: Coll<'c>,
        set: Arc<ScheduleSet>,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<Self, Error> {
        let name = set.params.choice().name();
        let run = coll.together(|| coll.start_run(set, send, recv))?;
        coll.st.exec.in_flight.set(Some(name));
        let mut active = Self {
            coll,
            run: Some(run),
            failed: None,
            observed: false,
        };
        active.advance(Progress::Poll)?;
        Ok(active)
    }

    /// Take the run as far as `how` allows; `true` once it is over. A
    /// failure is over too: it frees the communicator and is kept.
    fn advance(&mut self, how: Progress) -> Result<bool, Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let Some(run) = self.run.as_mut() else {
            return Ok(true);
        };
        let coll = self.coll;
        let result = coll.together(|| coll.advance(run, how));
        if !matches!(result, Ok(false)) {
            self.run = None;
        }
        if let Err(e) = &result {
            self.failed = Some(e.clone());
            self.coll.st.exec.in_flight.set(None);
        }
        result
    }

    /// The user's `test`, `wait` or drop: go on as far as `how` allows;
    /// `true` once complete, and from then on the communicator is free.
    fn progress(&mut self, how: Progress) -> Result<bool, Error> {
        let done = self.advance(how)?;
        if done && !self.observed {
            self.observed = true;
            self.coll.st.exec.in_flight.set(None);
        }
        Ok(done)
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        let _ = self.progress(Progress::Block);
    }
}

/// A non-blocking collective in flight ([MPI4 §6.12]).
#[must_use = "a collective is only known complete once its request is tested or waited"]
pub struct Request<'c> {
    active: Active<'c>,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request")
            .field("run", &self.active.run)
            .finish()
    }
}

impl<'c> Request<'c> {
    pub(crate) fn start(
        coll: Coll<'c>,
        set: Arc<ScheduleSet>,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<Self, Error> {
        Active::start(coll, set, send, recv).map(|active| Self { active })
    }

    /// Take every step that is ready without blocking; `true` once the
    /// collective is complete on this rank.
    pub fn test(&mut self) -> Result<bool, Error> {
        self.active.progress(Progress::Poll)
    }

    /// Block until the collective is complete on this rank.
    pub fn wait(mut self) -> Result<(), Error> {
        self.active.progress(Progress::Block).map(|_| ())
    }
}

/// A persistent collective ([MPI4 §6.13]): its schedule generated and
/// proved once, started any number of times on the same buffers.
pub struct Persistent<'c> {
    coll: Coll<'c>,
    set: Arc<ScheduleSet>,
    send: SymBuffer,
    recv: SymBuffer,
    active: Option<Active<'c>>,
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
            starts: 0,
        }
    }

    /// Start the collective (every rank starts it the same number of
    /// times). Not while the previous start is still active; not after a
    /// start failed (its error again).
    pub fn start(&mut self) -> Result<(), Error> {
        if let Some(e) = self.active.as_ref().and_then(|a| a.failed.clone()) {
            return Err(e);
        }
        if self.active.as_ref().is_some_and(|a| !a.observed) {
            return Err(Error::CollectiveInFlight(self.set.params.choice().name()));
        }
        self.active = None;
        self.active = Some(Active::start(
            self.coll,
            Arc::clone(&self.set),
            &self.send,
            &self.recv,
        )?);
        self.starts += 1;
        Ok(())
    }

    /// Take every step that is ready without blocking; `true` once the
    /// current start is complete on this rank (or if none is active).
    pub fn test(&mut self) -> Result<bool, Error> {
        match self.active.as_mut() {
            Some(a) => a.progress(Progress::Poll),
            None => Ok(true),
        }
    }

    /// Block until the current start is complete on this rank.
    pub fn wait(&mut self) -> Result<(), Error> {
        match self.active.as_mut() {
            Some(a) => a.progress(Progress::Block).map(|_| ()),
            None => Ok(()),
        }
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
