//! An input queue's memory (`QUEUE_INIT`, docs/abi.md §4.3): the bytes the
//! NIC writes and the host reads at the queue's base, little-endian.
//!
//! ```text
//! base + 0     QueueHeader (64 bytes): produced u64 (NIC), consumed u64 (host)
//! base + 64    slot 0: QueueItemHeader (8 bytes), payload
//! base + 64 + slot_size * (seq mod slots)   slot of item `seq`
//! ```
//!
//! Both counts are free-running (the [`Ring`] arithmetic). The NIC writes
//! an item's payload and header, then `produced` with release ordering;
//! the host reads `produced` with acquire ordering, copies the item out,
//! then writes `consumed`, which the NIC reads only when the queue looks
//! full. `QUEUE_INIT` starts producing at the `consumed` it finds.

use core::mem::{offset_of, size_of};

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::ring::Ring;

/// The queue's first 64 bytes.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct QueueHeader {
    /// Items the NIC has written (free-running).
    pub produced: U64,
    /// Items the host has taken (free-running).
    pub consumed: U64,
    /// Reserved, zero: the header fills a cache line, so the NIC's and the
    /// host's words are not shared with slot 0.
    pub reserved: [u8; 48],
}

impl QueueHeader {
    /// Bytes of the header; slot 0 starts here.
    pub const SIZE: usize = size_of::<Self>();
    /// Byte offset of `produced`.
    pub const PRODUCED: usize = offset_of!(Self, produced);
    /// Byte offset of `consumed`.
    pub const CONSUMED: usize = offset_of!(Self, consumed);
}

/// The first 8 bytes of a slot; the payload follows.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct QueueItemHeader {
    /// Payload bytes, at most `slot_size - 8`.
    pub len: U32,
    /// The sender's node.
    pub src_node: U16,
    /// The sender's context on its node.
    pub src_ctx: u8,
    /// Zero.
    pub zero: u8,
}

impl QueueItemHeader {
    /// Bytes of the item header; the payload starts here in the slot.
    pub const SIZE: usize = size_of::<Self>();
}

const _: () = assert!(QueueHeader::SIZE == 64);
const _: () = assert!(QueueHeader::PRODUCED == 0 && QueueHeader::CONSUMED == 8);
const _: () = assert!(QueueItemHeader::SIZE == 8);

/// Bytes a queue of `ring` slots of `slot_size` bytes occupies from its
/// base (saturating: an oversized queue fails translation, not arithmetic).
pub fn queue_bytes(ring: Ring, slot_size: u32) -> u64 {
    ring.entries()
        .saturating_mul(u64::from(slot_size))
        .saturating_add(QueueHeader::SIZE as u64)
}

/// Byte offset from the queue's base of the slot of item `seq`.
pub fn slot_offset(ring: Ring, seq: u64, slot_size: u32) -> u64 {
    (QueueHeader::SIZE as u64).wrapping_add(ring.byte_offset(seq, slot_size))
}
