//! The ABI: every byte layout that crosses the host/NIC or NIC/NIC boundary.
//!
//! Contract, for every format in this module (smoltcp's `Packet`/`Repr`
//! split):
//!
//! - The *layout* type (`CommandBlock`, `PacketHeader`, ...) is a
//!   `#[repr(C)]` `zerocopy` struct of little-endian fields whose size and
//!   alignment are asserted at compile time. It can hold any bytes at all.
//! - The *validated representation* (`Command`, `Packet`, ...) is produced by
//!   a `parse` function that checks every field (opcode, reserved bits,
//!   lengths, indices, checksum) and can only hold legal values. Untrusted
//!   bytes are never used except through `parse`.
//! - `emit` (or a constructor on the layout type) is the only way to produce
//!   bytes; `parse(emit(x)) == x` for every legal `x`.
//!
//! Every enum carried as an integer (opcodes, packet types, error codes,
//! mailbox operations, ...) is declared with `wire_enum!`, which derives its
//! decoder: see [`WireEnum`].
//!
//! All multi-byte fields are little-endian. Reserved fields must be zero on
//! emission and are rejected if non-zero on parse, so that later ABI minor
//! versions can give them meaning.

// First: the macro is used by the modules below.
#[macro_use]
mod wire_enum;

pub mod command;
pub mod error;
pub mod event;
pub mod packet;
pub mod queue;
pub mod regs;
pub mod ring;

pub use command::{Command, CommandBlock, DmaDescriptor, DmaKind, Opcode};
pub use error::{ErrorCode, ErrorKind, ErrorRecord};
pub use event::{CompletionWord, EventAction, EventId};
pub use packet::{
    BarrierPacket, BcastPacket, DataPacket, GetRequestPacket, Packet, PacketHeader, PacketType,
};
pub use ring::{MAX_RING_ENTRIES, Overrun, Ring, RingError, Unread};
pub use wire_enum::{Unknown, WireEnum};

/// ABI version: major in bits 31:16, minor in bits 15:0. A host driver must
/// refuse a NIC whose major version differs from the one it was built for.
/// 1.1 added the `RESOURCES` register; 1.2 the node's NIC-to-NIC path
/// (`SET_EVENT` on a sibling rail, the `PEER_SET` FIFO) and COPY actions of
/// several blocks; 1.3 the `BarrierLeave` packet (a detached context's
/// pending hardware barrier is left, not re-announced) and `UNMAP_REGION`
/// refused while a broadcast of the owner is in flight; 1.4 wire format 2
/// (a payload CRC trailer, checked by the receive port) and, in the
/// go-back-N, probes and a backed-off timeout on silence and one nack per
/// gap; queued items a queue cannot take refused for now (the acks'
/// refusal bitmap, the RETRY flag) instead of stalling the flow, and
/// failed with `QueueFull` or `NoQueue` after the queue wait (parameter
/// 4); 1.5 flow migration: a flow past its retry limit goes on through
/// the alternate sibling rail (parameter 5, `STATUS.MIGRATED`), and back
/// once its direct path answers; broadcasts likewise; `BarrierHeld`
/// (type 10) answers a re-sent barrier arrival, and a barrier whose switch
/// stays silent past the retry limit fails; a get's destination needs
/// `REMOTE_WRITE` too (a forged response wrote completion words); 1.6 a
/// barrier group has a tag (`HW_BARRIER`'s `tag`, the barrier packets'
/// `aux2`): a communicator opened over the contexts and nodes of an
/// earlier one is a new group, not the old one's numbers again; 1.7 a get
/// request that finds no free DMA slot is refused for now, as a queued item
/// a queue cannot take (consumed, the refusal bitmap, the sender's
/// back-off), instead of nacked: a nack sent the whole window back and
/// reset the flow's retry count; 1.8 flow state is kept per peer in a
/// bounded table taken on first use (`GEOMETRY` bits 47:32, formerly the
/// node count, now `peers` slots per direction); node numbers span the
/// whole 16-bit space ([`NODE_SPACE`]: `ATTACH_CONTEXT`'s range,
/// `RESET_FLOW`'s node); `RESET_FLOW` frees the slots; a peer the table
/// has no room for meets [`error::ErrorCode::NoPeerSlot`] (a receiver
/// without a slot acks with both bitmaps full); `HW_BARRIER` over more
/// than the switch's 256-node group is `BadVp` at once; 1.9 idle flows
/// close (wire format 3): every sequenced packet and ack carries the
/// flow's instance (header bytes 56..60), a transmit flow idle for
/// `FLOW_CLOSE_IDLE` (parameter 6, reset 2 s) is closed by a `FlowClose`
/// (type 11) that the receiver answers (type 12), freeing the slot at
/// both ends, a receive slot meeting a later instance starts afresh, a
/// NIC that refused a sender for want of a slot opens none for it (and
/// its quiet bucket) for the close idle time, and a rail bounds a
/// packet's lifetime to 1 s.
pub const ABI_VERSION: u32 = (1 << 16) | 9;

/// Major part of [`ABI_VERSION`].
pub const ABI_MAJOR: u16 = (ABI_VERSION >> 16) as u16;

/// Hardware contexts (ranks on one node) a NIC serves, one command queue each.
pub const MAX_CONTEXTS: usize = 16;

/// Entries in the NIC's region (translation and protection) table.
pub const MAX_REGIONS: usize = 64;

/// DMAs a NIC has in flight at once (put, get request, get response).
pub const MAX_DMAS: usize = 64;

/// Packets a sender keeps unacknowledged per destination node (go-back-N
/// window). Must stay below 64: acks carry a 64-bit error bitmap.
pub const TX_WINDOW: usize = 32;

/// Command blocks the chain queue (event COPY actions) holds.
pub const CHAIN_DEPTH: usize = 64;

/// Input queues per context.
pub const MAX_QUEUES: u32 = 8;

/// Largest single DMA, as on Elan4 (`dma_typeSize[63:32]`, 2^31 - 1).
pub const MAX_DMA_LEN: u32 = (1 << 31) - 1;

/// Smallest and largest packet payload sizes the NIC accepts (powers of two).
pub const MIN_PACKET_SIZE: u32 = 64;
/// See [`MIN_PACKET_SIZE`].
pub const MAX_PACKET_SIZE: u32 = 1 << 20;

/// Payload size of a packet after reset: Elan4's 2 KiB DMA packets.
pub const DEFAULT_PACKET_SIZE: u32 = 2048;

/// Index of a NIC hardware context, `0..MAX_CONTEXTS`.
pub type ContextIndex = u8;

/// A node number on a rail (the switch port).
pub type NodeId = u16;

/// Nodes a rail can number: every [`NodeId`] (since 1.8; a NIC's flow
/// state is per peer it talks to, not per node of the fabric).
pub const NODE_SPACE: usize = 1 << 16;
