//! A rank's resumable run of a schedule set, and the communicator's table
//! of the collectives in flight: the data the executor (`super::exec`)
//! advances and the request layer ([`super::request`]) keeps. Data only:
//! this module knows nothing of the collective layer, which holds the
//! table (so that the layer's state can own it without importing the
//! executor).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::Arc;

use crate::arena::SymBuffer;
use crate::endpoint::{ArmedWait, DestEvent, Posted};
use crate::error::Error;
use crate::sched::budget::Outstanding;
use crate::sched::*;
use crate::shm::BcastCursor;

/// This call's barrier numbers, set by the schedule's
/// [`Op::BarrierNumber`] steps.
#[derive(Debug, Default)]
pub(crate) struct BarrierNumbers {
    flat: Option<u64>,
    masters: Option<u64>,
    queue: Option<u64>,
}

impl BarrierNumbers {
    fn slot(&mut self, which: Numbers) -> &mut Option<u64> {
        match which {
            Numbers::Words(Words::Flat) => &mut self.flat,
            Numbers::Words(Words::Masters) => &mut self.masters,
            Numbers::Queue => &mut self.queue,
        }
    }

    pub(crate) fn set(&mut self, which: Numbers, number: u64) {
        *self.slot(which) = Some(number);
    }

    pub(crate) fn get(&mut self, which: Numbers) -> Result<u64, Error> {
        self.slot(which).ok_or_else(|| {
            Error::Internal(format!(
                "a schedule waits for a {which:?} barrier number it never took"
            ))
        })
    }
}

/// A step's half-done part, kept between polls of a run.
pub(crate) enum Pending {
    /// Nothing begun.
    None,
    /// A counter armed for its arrivals.
    Arrivals(ArmedWait),
    /// The switch barrier's arrival, posted.
    Switch(Posted),
    /// The switch barrier, run without the switch.
    WithoutSwitch,
    /// The node barrier's epoch, taken.
    NodeArrive,
    /// The node broadcast, this far.
    NodeBcast(BcastCursor),
}

/// One rank's run of a schedule set, resumable: what the executor (`Coll::advance_gated`)
/// needs to go on from where it stopped.
pub(crate) struct Run {
    pub(crate) set: Arc<ScheduleSet>,
    pub(crate) send: SymBuffer,
    pub(crate) recv: SymBuffer,
    pub(crate) scratch: SymBuffer,
    pub(crate) events: Vec<DestEvent>,
    pub(crate) my_socket: usize,
    /// The first step not done.
    pub(crate) next: usize,
    pub(crate) pending: Pending,
    pub(crate) handles: Outstanding<Posted>,
    pub(crate) numbers: BarrierNumbers,
    /// This call's number among the guarded calls (0: not guarded).
    pub(crate) entered: u64,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("algorithm", &self.set.params.choice().name())
            .field("next", &self.next)
            .finish()
    }
}

impl Run {
    pub(crate) fn region(&self, r: &Region) -> Result<SymBuffer, Error> {
        let base = match r.buf {
            Buf::Send => &self.send,
            Buf::Recv => &self.recv,
            Buf::Scratch => &self.scratch,
        };
        region_of(base, r, self.set.params.block_bytes)
    }

    pub(crate) fn event(&self, c: Counter) -> Result<DestEvent, Error> {
        self.events
            .get(usize::from(c))
            .copied()
            .ok_or(Error::EventsExhausted("schedule counter"))
    }
}

pub(crate) fn region_of(base: &SymBuffer, r: &Region, block: usize) -> Result<SymBuffer, Error> {
    base.slice(r.block as usize * block, r.count as usize * block)
}

/// One collective in flight: its run until it completes, then how it
/// ended, until its owner has seen that.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) id: u64,
    pub(crate) name: &'static str,
    /// The counter pool and scratch set it holds (parity), if any.
    pub(crate) slot: Option<usize>,
    /// `None` while it is being advanced, or once over. Boxed: every
    /// poll takes it out and puts it back, and a pointer moves cheaper
    /// than the run (a `test()` loop copied it both ways at each call).
    pub(crate) run: Option<Box<Run>>,
    /// How it ended (`None`: in flight).
    pub(crate) outcome: Option<Result<(), Error>>,
}

/// The communicator's collectives in flight, oldest first.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    pub(crate) next: Cell<u64>,
    pub(crate) entries: RefCell<VecDeque<Entry>>,
}

impl InFlight {
    /// Whether `id` is over (`Some`, with how it ended, without taking it).
    pub(crate) fn outcome(&self, id: u64) -> Option<Result<(), Error>> {
        let entries = self.entries.borrow();
        match entries.iter().find(|e| e.id == id) {
            Some(e) => e.outcome.clone(),
            // Seen and let go: only a complete entry is let go.
            None => Some(Ok(())),
        }
    }

    /// Let go of `id` (its owner has seen it end).
    pub(crate) fn forget(&self, id: u64) {
        self.entries.borrow_mut().retain(|e| e.id != id);
    }

    /// The oldest collective in flight, by algorithm name.
    pub(crate) fn running(&self) -> Option<&'static str> {
        self.oldest(|_| true).map(|(_, _, name)| name)
    }

    /// The oldest collective in flight that `holds` accepts: its index in
    /// the table, its number and its algorithm's name.
    pub(crate) fn oldest(
        &self,
        holds: impl Fn(&Entry) -> bool,
    ) -> Option<(usize, u64, &'static str)> {
        let entries = self.entries.borrow();
        let mut running = entries.iter().enumerate();
        let found = running.find(|(_, e)| e.outcome.is_none() && holds(e));
        found.map(|(i, e)| (i, e.id, e.name))
    }
}
