//! Error codes and the error record the NIC writes into a context's error
//! ring in host memory.
//!
//! Codes are `#[repr(u16)]` with fixed discriminants that never change
//! meaning (Tock's `ErrorCode`, Hubris' IPC errors). [`ErrorCode`] holds
//! errors only: where the wire carries an outcome that may be success, `0`
//! encodes success and the Rust side is `Result<(), ErrorCode>` (or
//! `Option<ErrorCode>`, "the error, if any"); see [`status_to_raw`]. Which
//! codes each completion can carry is listed in `docs/abi.md`.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::{ContextIndex, NodeId};

wire_enum! {
    /// Why a command, packet or mailbox call failed. Fits in 16 bits; carried
    /// in completion words, acks and error records. Every code is non-zero:
    /// `0` on the wire means success and is no `ErrorCode` (see
    /// [`status_to_raw`]).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum ErrorCode: u16 {
        /// Command opcode is not defined by this ABI version.
        UnknownOpcode = 1,
        /// A reserved field or flag bit was non-zero.
        ReservedNonZero = 2,
        /// A length is zero where forbidden, too large, or inconsistent.
        BadLength = 3,
        /// An event index is outside the context's event table.
        BadEvent = 4,
        /// A virtual process (rank) is outside the context's capability.
        BadVp = 5,
        /// The addressed context is not attached on the receiving NIC.
        NoContext = 6,
        /// Address range not inside a region of the context with the needed
        /// permission (receiver-side protection, or a local source/target).
        Protection = 7,
        /// Address arithmetic overflowed (`addr + len` wraps).
        AddressOverflow = 8,
        /// The command queue does not grant the permission this command needs.
        QueuePermission = 9,
        /// The chain queue was full when an event's COPY action fired.
        ChainOverflow = 10,
        /// The peer never acknowledged within the retry limit; the flow to that
        /// node is broken until reset.
        PeerUnreachable = 11,
        /// The packet's job key does not match the receiving context.
        JobKeyMismatch = 12,
        /// A packet failed validation (checksum, type, lengths).
        BadPacket = 13,
        /// Host memory access failed (bus error on the NIC's host DMA).
        HostBus = 14,
        /// An admin mailbox call named an invalid slot, context or value.
        BadConfig = 15,
        /// The command queue's tail moved more than its size past the head.
        QueueOverrun = 16,
        /// An event's count would overflow.
        EventOverflow = 17,
        /// The operation is refused because the resource is in use or busy.
        Busy = 18,
        /// The addressed nodes are not one contiguous range on this rail.
        NotContiguous = 19,
        /// An address is not aligned as the command requires.
        Misaligned = 20,
        /// A queued item's target input queue stayed full for the NIC's
        /// queue wait (since 1.4; before, the item was refused for ever).
        QueueFull = 21,
        /// A queued item's target input queue was not initialised within
        /// the NIC's queue wait (since 1.4; before, `BadEvent` at once).
        NoQueue = 22,
        /// Every slot of the NIC's per-peer flow table (`GEOMETRY.peers`)
        /// is taken by other peers, so this one cannot be sent to (the
        /// sender's command) or received from (the receiver, as an ack
        /// error), or a broadcast spans more nodes than it has slots
        /// (since 1.8).
        NoPeerSlot = 23,
    }
}

impl ErrorCode {
    /// A short, stable, human-readable name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::UnknownOpcode => "unknown opcode",
            Self::ReservedNonZero => "reserved field non-zero",
            Self::BadLength => "bad length",
            Self::BadEvent => "bad event index",
            Self::BadVp => "virtual process outside capability",
            Self::NoContext => "context not attached",
            Self::Protection => "protection fault",
            Self::AddressOverflow => "address overflow",
            Self::QueuePermission => "queue lacks permission",
            Self::ChainOverflow => "chain queue overflow",
            Self::PeerUnreachable => "peer unreachable",
            Self::JobKeyMismatch => "job key mismatch",
            Self::BadPacket => "bad packet",
            Self::HostBus => "host bus error",
            Self::BadConfig => "bad configuration",
            Self::QueueOverrun => "command queue overrun",
            Self::EventOverflow => "event count overflow",
            Self::Busy => "busy",
            Self::NotContiguous => "node range not contiguous",
            Self::Misaligned => "misaligned address",
            Self::QueueFull => "input queue full",
            Self::NoQueue => "no such input queue",
            Self::NoPeerSlot => "no free peer slot",
        }
    }
}

/// The wire encoding of an outcome (completion-word status, `MBOX_STATUS`
/// code, an ack's error code): `0` for success, the error's code otherwise.
pub const fn status_to_raw(status: Result<(), ErrorCode>) -> u16 {
    match status {
        Ok(()) => 0,
        Err(code) => code.as_raw(),
    }
}

/// Decode an outcome encoded by [`status_to_raw`]; `None` for a non-zero
/// value that is no [`ErrorCode`].
pub const fn status_from_raw(raw: u16) -> Option<Result<(), ErrorCode>> {
    if raw == 0 {
        return Some(Ok(()));
    }
    match ErrorCode::from_raw(raw) {
        Some(code) => Some(Err(code)),
        None => None,
    }
}

impl core::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

wire_enum! {
    /// Where an error record comes from.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum ErrorKind: u8 {
        /// A command from this context's queue failed locally.
        Command = 0,
        /// A command injected by an event COPY action (a chain) failed.
        Chained = 1,
        /// An inbound packet addressed to this context was rejected; nothing of
        /// it was written.
        Inbound = 2,
        /// A DMA this context issued completed with an error reported by the
        /// peer or the network.
        Remote = 3,
        /// An event action (write or copy) could not be carried out.
        EventAction = 4,
    }
}

/// 32-byte error record, written by the NIC into a context's error ring at
/// index `ERR_COUNT % entries`, after which `ERR_COUNT` is incremented.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, PartialEq, Eq)]
#[repr(C)]
pub struct ErrorRecord {
    /// [`ErrorCode`] value (never 0: a record always reports an error).
    pub code: U16,
    /// [`ErrorKind`] value.
    pub kind: u8,
    /// Peer context (inbound: the sender's; otherwise the target's).
    pub peer_ctx: u8,
    /// Cookie of the command or DMA concerned (0 if none).
    pub cookie: U32,
    /// Address concerned (virtual, in the context named by the record).
    pub addr: U64,
    /// Length concerned, in bytes.
    pub len: U32,
    /// Peer node (inbound: the sender; otherwise the target).
    pub peer_node: U16,
    /// Opcode of the failing command, or packet type of the failing packet.
    pub op: u8,
    /// Reserved, zero.
    pub reserved: u8,
    /// Free-running record number (equals the `ERR_COUNT` value it was
    /// written under), so a reader can tell fresh records from stale ones.
    pub seq: U64,
}

const _: () = assert!(core::mem::size_of::<ErrorRecord>() == 32);
const _: () = assert!(core::mem::align_of::<ErrorRecord>() == 1);

/// Validated form of an [`ErrorRecord`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorInfo {
    /// What went wrong.
    pub code: ErrorCode,
    /// Which path produced the record.
    pub kind: ErrorKind,
    /// Command or DMA cookie.
    pub cookie: u32,
    /// Address concerned.
    pub addr: u64,
    /// Length concerned.
    pub len: u32,
    /// Peer node.
    pub peer_node: NodeId,
    /// Peer context.
    pub peer_ctx: ContextIndex,
    /// Opcode or packet type.
    pub op: u8,
    /// Record sequence number.
    pub seq: u64,
}

impl ErrorInfo {
    /// Encode into the record layout.
    pub fn emit(&self) -> ErrorRecord {
        ErrorRecord {
            code: U16::new(self.code.as_raw()),
            kind: self.kind.as_raw(),
            peer_ctx: self.peer_ctx,
            cookie: U32::new(self.cookie),
            addr: U64::new(self.addr),
            len: U32::new(self.len),
            peer_node: U16::new(self.peer_node),
            op: self.op,
            reserved: 0,
            seq: U64::new(self.seq),
        }
    }

    /// Decode a record read from host memory; `None` for a non-zero
    /// reserved byte, or a code (including 0) or kind that names nothing.
    pub fn parse(rec: &ErrorRecord) -> Option<Self> {
        if rec.reserved != 0 {
            return None;
        }
        Some(Self {
            code: ErrorCode::from_raw(rec.code.get())?,
            kind: ErrorKind::from_raw(rec.kind)?,
            cookie: rec.cookie.get(),
            addr: rec.addr.get(),
            len: rec.len.get(),
            peer_node: rec.peer_node.get(),
            peer_ctx: rec.peer_ctx,
            op: rec.op,
            seq: rec.seq.get(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_and_unknown_is_rejected() {
        for raw in 0..=u16::MAX {
            match status_from_raw(raw) {
                Some(status) => assert_eq!(status_to_raw(status), raw),
                None => assert!(raw > 20),
            }
        }
        assert_eq!(status_from_raw(0), Some(Ok(())));
        assert_eq!(status_from_raw(7), Some(Err(ErrorCode::Protection)));
    }

    #[test]
    fn a_record_with_code_zero_is_refused() {
        let mut rec = ErrorInfo {
            code: ErrorCode::Busy,
            kind: ErrorKind::Command,
            cookie: 0,
            addr: 0,
            len: 0,
            peer_node: 0,
            peer_ctx: 0,
            op: 0,
            seq: 0,
        }
        .emit();
        rec.code = U16::new(0);
        assert_eq!(ErrorInfo::parse(&rec), None);
    }

    #[test]
    fn record_round_trips() {
        let info = ErrorInfo {
            code: ErrorCode::Protection,
            kind: ErrorKind::Inbound,
            cookie: 7,
            addr: 0xdead_beef,
            len: 99,
            peer_node: 3,
            peer_ctx: 2,
            op: 1,
            seq: 42,
        };
        assert_eq!(ErrorInfo::parse(&info.emit()), Some(info));
    }
}
