//! Completion: completion events and their words, testing and waiting
//! for them, and the error ring's records.

use super::*;

/// An operation's completion: the event armed for it on `rail` and the
/// generation its completion word will carry when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Rail.
    pub rail: usize,
    /// The event.
    pub event: EventId,
    /// The value the event's completion word takes when it fires.
    pub generation: u64,
    /// The chain block holding the command, for a chained post.
    pub(super) chain_block: Option<usize>,
    /// A completion event of the same rail lent to the post: the trigger
    /// of a part of a striped chained put (set by its lead), or the source
    /// event of a chained put with `done` sets (whose COPY sets `event`
    /// and those).
    pub(super) trigger: Option<EventId>,
    /// The chain block of that source event's COPY.
    pub(super) done_block: Option<usize>,
}

impl Completion {
    /// Give `event` (a completion event of this post's rail, lent as its
    /// trigger) back when the post is released.
    pub(crate) fn lend_trigger(&mut self, event: EventId) {
        debug_assert!(self.trigger.is_none(), "one lent event per post");
        self.trigger = Some(event);
    }

    /// A destination event re-armed by [`Driver::push_arm_write`]: the
    /// driver lent nothing for it, so releasing it gives nothing back.
    pub fn of_dest_event(rail: usize, event: EventId, generation: u64) -> Self {
        Self {
            rail,
            event,
            generation,
            chain_block: None,
            trigger: None,
            done_block: None,
        }
    }
}

/// A NIC error record, with the rail it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicError {
    /// Rail.
    pub rail: usize,
    /// The record.
    pub info: ErrorInfo,
}

impl Driver {
    /// Give back what a completed (or never posted) tracked post took.
    pub fn release(&mut self, c: &Completion) {
        self.release_completion_event(c.rail, c.event);
        if let Some(t) = c.trigger {
            self.release_completion_event(c.rail, t);
        }
        if let Some(block) = c.done_block {
            self.free_chain_blocks.push(block);
        }
        if let Some(block) = c.chain_block {
            self.free_chain_blocks.push(block);
        }
    }

    /// Free completion events on `rail` (diagnostics: a leak shows here).
    pub fn free_completion_events(&self, rail: usize) -> usize {
        self.ports.get(rail).map_or(0, |p| p.free_events.len())
    }

    /// Free chain blocks (diagnostics).
    pub fn free_chain_blocks(&self) -> usize {
        CHAIN_BLOCKS - self.next_chain_block + self.free_chain_blocks.len()
    }

    /// Take a completion event on `rail`.
    pub fn take_completion_event(&mut self, rail: usize) -> Result<EventId, Error> {
        self.port(rail)?
            .free_events
            .pop()
            .map(EventId)
            .ok_or(Error::EventsExhausted("completion"))
    }

    /// Return a completion event.
    pub fn release_completion_event(&mut self, rail: usize, ev: EventId) {
        if let Ok(port) = self.port(rail) {
            port.free_events.push(ev.0);
        }
    }

    pub(super) fn word_offset(&self, rail: usize, ev: EventId) -> usize {
        (rail * self.events_per_ctx as usize + ev.0 as usize) * 8
    }

    /// Read an event's completion word.
    pub fn completion_word(&self, rail: usize, ev: EventId) -> CompletionWord {
        let word = self
            .control
            .mem
            .load_u64(self.word_offset(rail, ev), Ordering::Acquire)
            .unwrap_or(0);
        CompletionWord::unpack(word)
    }

    /// Has the event fired with generation `generation`? `Some(outcome)` if
    /// so (a status code that names no error reads as `BadConfig`).
    pub fn test_completion(&self, c: &Completion) -> Option<Result<(), ErrorCode>> {
        let w = self.completion_word(c.rail, c.event);
        (w.value == c.generation).then(|| w.status.unwrap_or(Err(ErrorCode::BadConfig)))
    }

    /// Wait for a set of (rail, event, generation) completions; the first
    /// error is returned after all have completed.
    pub fn wait_completions(&self, parts: &[Completion]) -> Result<(), Error> {
        let watches: Vec<WordWatch> = parts
            .iter()
            .map(|c| WordWatch {
                mem: self.control.mem.clone(),
                offset: self.word_offset(c.rail, c.event),
                mask: MAX_WRITE_VALUE,
                test: WordTest::Equals(c.generation),
            })
            .collect();
        self.wait.wait_words(&watches)?;
        self.first_error(parts)
    }

    /// Have all of `parts` completed? `None` while one has not (a modeled
    /// environment lets a poll's worth of time pass); else how they ended,
    /// or `Error::Timeout` if the environment gave the poll up (nothing
    /// else could complete them: [`HostObserver::idle_poll`]).
    ///
    /// [`HostObserver::idle_poll`]: crate::env::HostObserver::idle_poll
    pub fn test_completions(&self, parts: &[Completion]) -> Option<Result<(), Error>> {
        if parts.iter().all(|c| self.test_completion(c).is_some()) {
            Some(self.first_error(parts))
        } else {
            match self.wait.observer().idle_poll() {
                Ok(()) => None,
                Err(e) => Some(Err(e.into())),
            }
        }
    }

    /// Settle a post's `parts`: `Some` once all have completed (waiting for
    /// them if `block`), with the first NIC error of any, and each part's
    /// events and chain blocks back in the pools; `None` while one is in
    /// flight (a modeled environment lets a poll's worth of time pass).
    /// A wait or poll the environment gave up is `Some(Err(Timeout))`;
    /// then only the parts that completed go back (a part still armed may
    /// fire later: its event must not be handed out again). When every part
    /// has completed already, each word is read once and nothing is
    /// allocated.
    pub fn settle(&mut self, parts: &[Completion], block: bool) -> Option<Result<(), Error>> {
        // The common case, every part complete, reads each word once.
        let mut pending = false;
        let mut failed = None;
        for c in parts {
            match self.test_completion(c) {
                None => pending = true,
                Some(Err(code)) => {
                    failed.get_or_insert(Error::Nic { rail: c.rail, code });
                }
                Some(Ok(())) => {}
            }
        }
        if !pending {
            for c in parts {
                self.release(c);
            }
            return Some(failed.map_or(Ok(()), Err));
        }
        if !block {
            return match self.wait.observer().idle_poll() {
                Ok(()) => None,
                Err(e) => Some(Err(e.into())),
            };
        }
        let result = self.wait_completions(parts);
        for c in parts {
            if self.test_completion(c).is_some() {
                self.release(c);
            }
        }
        Some(result)
    }

    /// The first error among completed `parts`, or success.
    pub(super) fn first_error(&self, parts: &[Completion]) -> Result<(), Error> {
        for c in parts {
            if let Some(Err(code)) = self.test_completion(c) {
                return Err(Error::Nic { rail: c.rail, code });
            }
        }
        Ok(())
    }

    /// New NIC error records since the last call, from every rail.
    pub fn take_errors(&mut self) -> Result<Vec<NicError>, Error> {
        let mut out = Vec::new();
        for rail in 0..self.ports.len() {
            let count = read_reg(self.regs(rail)?, self.ports[rail].err_count_reg);
            let port = &mut self.ports[rail];
            // Records older than the ring's size were overwritten.
            for seq in ERROR_RING.unread(port.errors_seen, count).indices() {
                let mut raw = [0u8; ERROR_RECORD_SIZE];
                let offset = ERROR_RING.byte_offset(seq, ERROR_RECORD_SIZE as u32) as usize;
                if port.errors.mem.read(offset, &mut raw).is_ok()
                    && let Ok(rec) = ErrorRecord::read_from_bytes(&raw)
                    && let Some(info) = ErrorInfo::parse(&rec)
                {
                    out.push(NicError { rail, info });
                }
            }
            port.errors_seen = count;
        }
        Ok(out)
    }
}
