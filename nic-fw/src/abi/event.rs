//! Events: a signed count plus an action [ELAN-SEM §13 rules 1-4].
//!
//! An event is armed with `ARM_EVENT(n, action)`: the NIC *adds* `-n` to the
//! event's count and installs the action. Every set adds one. When the count
//! is `>= 0` while the event is armed, the event fires exactly once: it
//! disarms and runs its action. Sets that arrive before the arm are kept in
//! the count, so re-arming never loses them (rule 2); a re-arm after enough
//! early sets fires at once.
//!
//! Actions:
//! - `WRITE(addr, value)`: store a [`CompletionWord`] (the 48-bit `value` and
//!   the event's status) at `addr`, 8-byte aligned, in a region of the owning
//!   context with `LOCAL_WRITE`. The store is the last thing the NIC does for
//!   the event, and it is ordered after every byte the event covers.
//! - `COPY(src, blocks)`: read the `blocks` consecutive 64-byte command
//!   blocks at `src` (`LOCAL_READ`; 1..=[`MAX_COPY_BLOCKS`], ABI 1.2; 1.0
//!   and 1.1 copy one) and append them, all or none, to the NIC's chain
//!   queue, where they run in order as commands of the owning context:
//!   this is how puts are chained without the host (rule 3), and, with a
//!   `SET_EVENT` among the blocks, how one firing feeds another event, on
//!   this NIC or a sibling (a combined or cross-rail trigger).
//! - either may also `WAKE` the host threads waiting on the context.
//!
//! An event also carries a sticky *status*: an error reported while it is
//! counting (a failed DMA it completes, a rejected packet it was named by) is
//! kept and delivered with the next firing, then cleared.

use super::ContextIndex;
use super::error::{ErrorCode, status_from_raw, status_to_raw};

/// Event index within a context's event table. `EventId::NONE` (all ones)
/// means "no event" in descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub u32);

impl EventId {
    /// The "no event" encoding.
    pub const NONE: EventId = EventId(u32::MAX);

    /// Decode a descriptor field: `None` for [`EventId::NONE`], an error for
    /// an index outside `0..events_per_ctx`.
    pub const fn decode(raw: u32, events_per_ctx: u32) -> Result<Option<EventId>, ErrorCode> {
        if raw == u32::MAX {
            Ok(None)
        } else if raw < events_per_ctx {
            Ok(Some(EventId(raw)))
        } else {
            Err(ErrorCode::BadEvent)
        }
    }

    /// Encode an optional event for a descriptor field.
    pub const fn encode(ev: Option<EventId>) -> u32 {
        match ev {
            Some(e) => e.0,
            None => u32::MAX,
        }
    }
}

/// Most command blocks one COPY action injects (ABI 1.2).
pub const MAX_COPY_BLOCKS: u8 = 8;

/// A set of an event of context `ctx` on a sibling NIC (the same context
/// index on every NIC of the node: a context spans the rails of its rank),
/// as one 64-bit `PEER_SET` register write: bits 7:0 `ctx`, bits 31:8 `count`
/// (1..=[`PeerSet::MAX_COUNT`]), bits 63:32 `event`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerSet {
    /// Context.
    pub ctx: ContextIndex,
    /// Event of that context.
    pub event: EventId,
    /// Sets to add.
    pub count: u32,
}

impl PeerSet {
    /// Largest count one peer set carries (24 bits).
    pub const MAX_COUNT: u32 = (1 << 24) - 1;

    /// The `PEER_SET` word.
    pub const fn to_word(self) -> u64 {
        (self.ctx as u64)
            | (((self.count & Self::MAX_COUNT) as u64) << 8)
            | ((self.event.0 as u64) << 32)
    }

    /// Decode a `PEER_SET` word (any word decodes; the target checks the
    /// context and event like a local `SET_EVENT`).
    pub const fn from_word(w: u64) -> Self {
        Self {
            ctx: w as u8 as ContextIndex,
            event: EventId((w >> 32) as u32),
            count: ((w >> 8) as u32) & Self::MAX_COUNT,
        }
    }
}

/// Largest value a WRITE action can carry (48 bits).
pub const MAX_WRITE_VALUE: u64 = (1 << 48) - 1;

/// What an event does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionKind {
    /// Nothing besides the optional wakeup.
    None,
    /// Store a completion word.
    Write {
        /// Context virtual address, 8-byte aligned.
        addr: u64,
        /// Value, at most [`MAX_WRITE_VALUE`].
        value: u64,
    },
    /// Inject the command blocks at `src` into the chain queue.
    Copy {
        /// Context virtual address of the first 64-byte command block,
        /// 8-byte aligned.
        src: u64,
        /// Consecutive blocks, 1..=[`MAX_COPY_BLOCKS`].
        blocks: u8,
    },
}

/// An event's action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventAction {
    /// Write, copy or nothing.
    pub kind: ActionKind,
    /// Also wake host threads waiting on the owning context.
    pub wake: bool,
}

impl EventAction {
    /// No action, no wakeup.
    pub const NONE: EventAction = EventAction {
        kind: ActionKind::None,
        wake: false,
    };

    /// Encoding in ARM_EVENT: (`action` word, `param0`, `param1`).
    /// `action` bits 7:0 kind (0 none, 1 write, 2 copy), bit 8 wake. A
    /// COPY's `param1` is its block count, 0 for one (the 1.0 encoding).
    pub const fn encode(&self) -> (u32, u64, u64) {
        let wake = (self.wake as u32) << 8;
        match self.kind {
            ActionKind::None => (wake, 0, 0),
            ActionKind::Write { addr, value } => (1 | wake, addr, value),
            ActionKind::Copy { src, blocks } => {
                (2 | wake, src, if blocks > 1 { blocks as u64 } else { 0 })
            }
        }
    }

    /// Decode and validate the ARM_EVENT fields.
    pub const fn decode(action: u32, p0: u64, p1: u64) -> Result<Self, ErrorCode> {
        if action >> 9 != 0 {
            return Err(ErrorCode::ReservedNonZero);
        }
        let wake = (action >> 8) & 1 == 1;
        let kind = match action & 0xff {
            0 => {
                if p0 != 0 || p1 != 0 {
                    return Err(ErrorCode::ReservedNonZero);
                }
                ActionKind::None
            }
            1 => {
                if !p0.is_multiple_of(8) {
                    return Err(ErrorCode::Misaligned);
                }
                if p1 > MAX_WRITE_VALUE {
                    return Err(ErrorCode::ReservedNonZero);
                }
                ActionKind::Write {
                    addr: p0,
                    value: p1,
                }
            }
            2 => {
                if !p0.is_multiple_of(8) {
                    return Err(ErrorCode::Misaligned);
                }
                if p1 > MAX_COPY_BLOCKS as u64 {
                    return Err(ErrorCode::BadLength);
                }
                ActionKind::Copy {
                    src: p0,
                    blocks: if p1 == 0 { 1 } else { p1 as u8 },
                }
            }
            _ => return Err(ErrorCode::ReservedNonZero),
        };
        Ok(Self { kind, wake })
    }
}

/// The 64-bit word a WRITE action stores: bits 47:0 the action's value,
/// bits 63:48 the outcome the event fired with: 0 for success, else the
/// [`ErrorCode`] (see [`status_to_raw`]).
///
/// Drivers write a fresh value (a generation number) with every arm and wait
/// until the word's value equals it; the status then says how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletionWord {
    /// The value from the action (48 bits).
    pub value: u64,
    /// How the event fired: `Ok(())` or the error it carried; `None` for a
    /// code that names no [`ErrorCode`].
    pub status: Option<Result<(), ErrorCode>>,
}

impl CompletionWord {
    /// Pack.
    pub const fn pack(value: u64, status: Result<(), ErrorCode>) -> u64 {
        (value & MAX_WRITE_VALUE) | ((status_to_raw(status) as u64) << 48)
    }

    /// Unpack a word read from memory.
    pub const fn unpack(word: u64) -> Self {
        Self {
            value: word & MAX_WRITE_VALUE,
            status: status_from_raw((word >> 48) as u16),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_round_trip() {
        for a in [
            EventAction::NONE,
            EventAction {
                kind: ActionKind::Write {
                    addr: 64,
                    value: MAX_WRITE_VALUE,
                },
                wake: true,
            },
            EventAction {
                kind: ActionKind::Copy {
                    src: 0x4000,
                    blocks: 1,
                },
                wake: false,
            },
            EventAction {
                kind: ActionKind::Copy {
                    src: 0x4000,
                    blocks: MAX_COPY_BLOCKS,
                },
                wake: true,
            },
        ] {
            let (w, p0, p1) = a.encode();
            assert_eq!(EventAction::decode(w, p0, p1), Ok(a));
        }
        assert_eq!(
            EventAction::decode(3, 0, 0),
            Err(ErrorCode::ReservedNonZero)
        );
        assert_eq!(EventAction::decode(1, 3, 0), Err(ErrorCode::Misaligned));
        assert_eq!(
            EventAction::decode(1, 8, 1 << 48),
            Err(ErrorCode::ReservedNonZero)
        );
        assert_eq!(
            EventAction::decode(1 << 9, 0, 0),
            Err(ErrorCode::ReservedNonZero)
        );
        // COPY: 0 and 1 both mean one block (1.0 wrote 0); more than
        // MAX_COPY_BLOCKS is refused.
        assert_eq!(EventAction::decode(2, 64, 1), EventAction::decode(2, 64, 0));
        assert_eq!(
            EventAction::decode(2, 64, MAX_COPY_BLOCKS as u64 + 1),
            Err(ErrorCode::BadLength)
        );
    }

    #[test]
    fn completion_word_packs_status() {
        let w = CompletionWord::pack(12345, Err(ErrorCode::Protection));
        assert_eq!(w >> 48, 7);
        assert_eq!(
            CompletionWord::unpack(w),
            CompletionWord {
                value: 12345,
                status: Some(Err(ErrorCode::Protection))
            }
        );
        let ok = CompletionWord::pack(7, Ok(()));
        assert_eq!(ok, 7, "success is 0 in bits 63:48");
        assert_eq!(CompletionWord::unpack(ok).status, Some(Ok(())));
        assert_eq!(CompletionWord::unpack(24 << 48).status, None);
    }

    #[test]
    fn event_ids_are_bounded() {
        assert_eq!(EventId::decode(u32::MAX, 16), Ok(None));
        assert_eq!(EventId::decode(15, 16), Ok(Some(EventId(15))));
        assert_eq!(EventId::decode(16, 16), Err(ErrorCode::BadEvent));
    }
}
