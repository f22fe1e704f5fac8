//! Communicator slots: the arena range and destination events a
//! communicator split off another one keeps for itself.
//!
//! The job's own communicator reserves its buffers and grows its counter
//! pools from the bottom of the arena and of the destination events, in
//! the same order on every rank (symmetric). A split communicator cannot:
//! only its members create it, so the bottom-up sequences of its members
//! and of the other ranks would part. It takes a *slot* instead, chosen so
//! that it is free on every member (the lowest set bit of the AND of the
//! members' free masks, which the split exchanges: MPICH's context-id
//! agreement, and OpenSHMEM teams' pSync pools): slot `s` (1 to
//! [`MAX_SLOTS`]) is the arena range of `comm_reserve` bytes ending
//! `(s - 1) * comm_reserve` bytes below the arena's top, and the
//! [`SLOT_EVENTS`] destination events ending `(s - 1) * SLOT_EVENTS`
//! below the top of the rank's destination events. Every member computes
//! the same offsets and indices, so the communicator's buffers and
//! counters are symmetric among its members.
//!
//! A slot is free on a rank when no communicator of the rank holds it and
//! the bottom-up allocations stay below it; once taken, they are limited
//! to below the lowest slot taken (an allocation beyond fails with
//! [`Error::ArenaExhausted`], a counter pool's growth with
//! [`Error::EventsExhausted`]). Freeing the communicator gives the slot
//! back.

use crate::arena::{SymAllocator, SymBuffer};
use crate::endpoint::{DestEvent, Endpoint};
use crate::error::Error;
use railcoll_fw::abi::event::EventId;

/// Slots a rank may hold at once (communicators besides the job's).
pub const MAX_SLOTS: usize = 15;

/// Destination events of one slot: two counter pools of
/// [`SLOT_COUNTERS`].
pub const SLOT_EVENTS: u32 = 2 * SLOT_COUNTERS as u32;

/// Destination counters each of a split communicator's two pools holds:
/// its share of the NIC's events (a schedule that needs more is refused
/// with [`Error::OverBudget`]).
pub const SLOT_COUNTERS: u16 = 16;

/// What a communicator's slot holds.
#[derive(Debug)]
pub(crate) struct Slot {
    /// 1..=[`MAX_SLOTS`].
    pub(crate) index: usize,
    /// Its arena range.
    pub(crate) region: SymBuffer,
    /// Its destination events.
    pub(crate) events: Vec<DestEvent>,
}

impl Endpoint {
    /// The slots free on this rank for a communicator reserving `span`
    /// bytes, one bit each (bit `s` for slot `s`).
    pub(crate) fn free_slots(&self, span: usize) -> u32 {
        let taken = self.slots.get();
        let alloc = self.alloc.borrow();
        let (used_events, events) = self.driver.borrow().dest_event_use();
        (1..=MAX_SLOTS)
            .filter(|&s| taken & (1 << s) == 0)
            .filter(|&s| {
                let arena_ok = s
                    .checked_mul(span)
                    .and_then(|d| alloc.size().checked_sub(d))
                    .is_some_and(|start| start >= alloc.used());
                let events_ok = events
                    .checked_sub(s as u32 * SLOT_EVENTS)
                    .is_some_and(|start| start >= used_events);
                arena_ok && events_ok
            })
            .fold(0, |mask, s| mask | 1 << s)
    }

    /// Take slot `index` (free: see [`Endpoint::free_slots`]) for a
    /// communicator reserving `span` bytes.
    pub(crate) fn take_slot(&self, index: usize, span: usize) -> Result<Slot, Error> {
        if self.free_slots(span) & (1 << index) == 0 {
            return Err(Error::Internal(format!(
                "communicator slot {index} was agreed on but is not free on rank {}",
                self.rank()
            )));
        }
        self.slots.set(self.slots.get() | 1 << index);
        self.limit_to_slots(span);
        let size = self.alloc.borrow().size();
        let (_, events) = self.driver.borrow().dest_event_use();
        let base = events - index as u32 * SLOT_EVENTS;
        Ok(Slot {
            index,
            region: SymAllocator::region(size - index * span, span),
            events: (base..base + SLOT_EVENTS)
                .map(|e| DestEvent::from_id(EventId(e)))
                .collect(),
        })
    }

    /// Give back slot `index` (its communicator is gone).
    pub(crate) fn release_slot(&self, index: usize, span: usize) {
        self.slots.set(self.slots.get() & !(1 << index));
        self.limit_to_slots(span);
    }

    /// Bottom-up allocations stop below the lowest slot taken.
    fn limit_to_slots(&self, span: usize) {
        let taken = self.slots.get();
        let top = (1..=MAX_SLOTS).rev().find(|&s| taken & (1 << s) != 0);
        let mut alloc = self.alloc.borrow_mut();
        let mut driver = self.driver.borrow_mut();
        let (_, events) = driver.dest_event_use();
        let size = alloc.size();
        match top {
            Some(s) => {
                alloc.set_limit(size - s * span);
                driver.set_dest_limit(events - s as u32 * SLOT_EVENTS);
            }
            None => {
                alloc.set_limit(size);
                driver.set_dest_limit(events);
            }
        }
    }
}
