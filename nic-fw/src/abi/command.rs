//! Command blocks: the 64-byte units a host (or a chained event) hands the
//! NIC through a command queue.
//!
//! Layout of every block (little-endian):
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0 | opcode | [`Opcode`] |
//! | 1 | flags | opcode-specific flag bits; undefined bits must be 0 |
//! | 2..4 | reserved | must be 0 |
//! | 4..8 | cookie | opaque to the NIC; copied into error records |
//! | 8..64 | body | opcode-specific, see the `*Body` types |
//!
//! A command queue is a ring of `2^cq_log2` blocks in host memory. The host
//! writes block `tail % entries`, issues a release fence, and writes the new
//! free-running `tail` to `CQ_TAIL`; the NIC consumes blocks in order and
//! publishes its free-running `head` in `CQ_HEAD`.
//!
//! Parsing ([`Command::parse`]) checks the opcode, every reserved field, the
//! flags, lengths and event indices. Address *ranges* are checked later,
//! against the region table, when the command runs.

use bitflags::bitflags;
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::MAX_DMA_LEN;
use super::error::ErrorCode;
use super::event::{EventAction, EventId};
use super::regs::QueuePerms;

/// Size of a command block in bytes.
pub const COMMAND_BLOCK_SIZE: usize = 64;

/// One command block as it sits in a queue.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, PartialEq, Eq)]
#[repr(C)]
pub struct CommandBlock {
    /// [`Opcode`].
    pub opcode: u8,
    /// Opcode-specific flags.
    pub flags: u8,
    /// Reserved, zero.
    pub reserved: [u8; 2],
    /// Opaque cookie.
    pub cookie: U32,
    /// Opcode-specific body.
    pub body: [u8; 56],
}

const _: () = assert!(core::mem::size_of::<CommandBlock>() == COMMAND_BLOCK_SIZE);
// Byte-aligned layouts: a block may be read from any address (the ring's
// 64-byte slot alignment is a property of the ring, not of the type).
const _: () = assert!(core::mem::align_of::<CommandBlock>() == 1);
const _: () = assert!(core::mem::align_of::<DmaDescriptor>() == 1);

wire_enum! {
    /// Command opcodes. `0` is deliberately invalid so that zeroed memory is
    /// never mistaken for a command.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Opcode: u8 {
        /// Do nothing.
        Nop = 0x01,
        /// Start a DMA described by a [`DmaDescriptor`] body, with
        /// [`DmaFlags`].
        RunDma = 0x02,
        /// Set a local event: [`SetEventBody`].
        SetEvent = 0x03,
        /// Store a 64-bit word into local memory: [`WriteWordBody`].
        WriteWord = 0x04,
        /// Arm a local event: [`ArmEventBody`].
        ArmEvent = 0x05,
        /// Broadcast DMA replicated by the rail's switch: [`BcastBody`].
        BcastDma = 0x06,
        /// Hardware barrier combined by the rail's switch: [`HwBarrierBody`].
        HwBarrier = 0x07,
        /// Set up a local input queue: [`QueueInitBody`].
        QueueInit = 0x08,
    }
}

bitflags! {
    /// RUN_DMA's flag byte (every other opcode's flags must be 0).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct DmaFlags: u8 {
        /// The DMA is a get (data flows from `vp` to this context).
        const GET = 1 << 0;
        /// Wake the target context's host threads once the data has landed
        /// (for hosts that poll the written memory itself, as the RDMA
        /// barrier does, and may be parked).
        const WAKE = 1 << 1;
        /// A queued DMA (QDMA, [ELAN-SEM §13 rule 7]): the payload goes into
        /// the next free slot of the target's input queue named by the
        /// descriptor's `dst_event` field; `dst_addr` must be 0, the length at
        /// most one slot and one packet. Not combinable with `GET`.
        const QUEUE = 1 << 2;
    }
}

pub use super::MAX_QUEUES;

/// Body of RUN_DMA (Elan4's `E4_DMA`, reduced).
///
/// For a put, `src_addr` is local and `dst_addr` is in `vp`'s context;
/// `src_event` is local and fires when the data is delivered and
/// acknowledged (the source buffer may be reused); `dst_event` is in `vp`'s
/// context and fires there once every byte is in its memory.
///
/// For a get, `vp` owns the data: `src_addr` and `src_event` are on `vp`'s
/// side, `dst_addr` and `dst_event` on this context's side. The NIC ships the
/// descriptor to `vp`'s NIC, which runs it as a put back
/// ([ELAN-SEM §13 rule 5]); `dst_event` fires here when the data has landed.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, PartialEq, Eq)]
#[repr(C)]
pub struct DmaDescriptor {
    /// Bytes to move, `0..=MAX_DMA_LEN`.
    pub len: U32,
    /// Peer virtual process (target of a put, owner of a get's data).
    pub vp: U32,
    /// Source virtual address.
    pub src_addr: U64,
    /// Destination virtual address.
    pub dst_addr: U64,
    /// Event at the data's source, or `EventId::NONE`.
    pub src_event: U32,
    /// Event at the data's destination, or `EventId::NONE`.
    pub dst_event: U32,
    /// Reserved, zero.
    pub reserved: [u8; 24],
}

const _: () = assert!(core::mem::size_of::<DmaDescriptor>() == 56);

/// Body of SET_EVENT.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct SetEventBody {
    /// Event index (of this context, on this NIC or the target sibling).
    pub event: U32,
    /// Number of sets, `1..=i32::MAX` (`1..=2^24 - 1` for a sibling).
    pub count: U32,
    /// ABI 1.2: 0 for this NIC; [`SET_EVENT_SIBLING`] | rail for the
    /// node's NIC on that rail (bits 30:8 reserved, zero).
    pub target: U32,
    /// Reserved, zero.
    pub reserved: [u8; 44],
}

/// `SET_EVENT` target flag: the event is on the sibling NIC whose rail is
/// in bits 7:0 (ABI 1.2).
pub const SET_EVENT_SIBLING: u32 = 1 << 31;

/// Reserved bits of a `SET_EVENT` target.
const SET_EVENT_RESERVED: u32 = 0x7fff_ff00;

/// Body of WRITE_WORD.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct WriteWordBody {
    /// Local virtual address, 8-byte aligned, `LOCAL_WRITE`.
    pub addr: U64,
    /// The value stored.
    pub value: U64,
    /// Reserved, zero.
    pub reserved: [u8; 40],
}

/// Body of ARM_EVENT.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct ArmEventBody {
    /// Local event index.
    pub event: U32,
    /// Sets to wait for, `0..=i32::MAX` (added to the count as `-count`).
    pub count: U32,
    /// Action word, see [`EventAction::encode`].
    pub action: U32,
    /// Reserved, zero.
    pub reserved0: U32,
    /// Action parameter 0 (write address or copy source).
    pub param0: U64,
    /// Action parameter 1 (write value).
    pub param1: U64,
    /// Reserved, zero.
    pub reserved1: [u8; 24],
}

/// Body of BCAST_DMA: `len` bytes from `src_addr` to `dst_addr` in the
/// issuing context's own context number on every node of
/// `low_node..=high_node` except the sender's (same symmetric address
/// everywhere, [ELAN-SEM §13 rule 15]).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct BcastBody {
    /// Bytes.
    pub len: U32,
    /// First node of the range.
    pub low_node: U16,
    /// Last node of the range (inclusive).
    pub high_node: U16,
    /// Local source address.
    pub src_addr: U64,
    /// Target address (the same on every node).
    pub dst_addr: U64,
    /// Local event: every destination has everything.
    pub src_event: U32,
    /// Event set at every destination once its copy is complete.
    pub dst_event: U32,
    /// Reserved, zero.
    pub reserved: [u8; 24],
}

/// Body of HW_BARRIER: the issuing context's barrier number `seq` in the
/// group of its context number on nodes `low_node..=high_node` with tag
/// `tag` (ABI 1.6; every member passes the same tag, and a communicator
/// that reuses the contexts and nodes of an earlier one takes a new tag,
/// docs/abi.md §4.5).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct HwBarrierBody {
    /// First node of the group.
    pub low_node: U16,
    /// Last node of the group (inclusive).
    pub high_node: U16,
    /// Barrier number (wrapping; consecutive barriers increase by one).
    pub seq: U32,
    /// Local event set when the switch releases the barrier.
    pub event: U32,
    /// The group's tag (ABI 1.6).
    pub tag: U32,
    /// Reserved, zero.
    pub reserved: [u8; 40],
}

const _: () = assert!(core::mem::size_of::<BcastBody>() == 56);
const _: () = assert!(core::mem::size_of::<HwBarrierBody>() == 56);

/// Body of QUEUE_INIT.
///
/// The queue occupies `64 + slots * slot_size` bytes at `base` in the
/// context's memory (`LOCAL_READ | LOCAL_WRITE`): a
/// [`QueueHeader`](super::queue::QueueHeader) (the NIC's producer count,
/// the host's consumer count, both free-running), then the slots, each a
/// [`QueueItemHeader`](super::queue::QueueItemHeader) followed by the
/// payload (layout: [`super::queue`]).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct QueueInitBody {
    /// Queue index, `0..MAX_QUEUES`.
    pub queue: U32,
    /// Number of slots, `1..=65536`.
    pub slots: U32,
    /// Slot size in bytes, a multiple of 8 in `16..=4096`.
    pub slot_size: U32,
    /// Local event set once per item, or `EventId::NONE`.
    pub event: U32,
    /// Virtual base, 64-byte aligned.
    pub base: U64,
    /// Reserved, zero.
    pub reserved: [u8; 32],
}

const _: () = assert!(core::mem::size_of::<QueueInitBody>() == 56);
const _: () = assert!(core::mem::size_of::<SetEventBody>() == 56);
const _: () = assert!(core::mem::size_of::<WriteWordBody>() == 56);
const _: () = assert!(core::mem::size_of::<ArmEventBody>() == 56);

/// Put, get or queued put.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaKind {
    /// Local to remote.
    Put,
    /// Remote to local, run by the data owner as a put.
    Get,
    /// Local to the next slot of the target's input queue `0..MAX_QUEUES`.
    Queued(u8),
}

/// A validated RUN_DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaCommand {
    /// Put or get.
    pub kind: DmaKind,
    /// Bytes.
    pub len: u32,
    /// Peer virtual process.
    pub vp: u32,
    /// Source virtual address.
    pub src_addr: u64,
    /// Destination virtual address.
    pub dst_addr: u64,
    /// Event at the data source.
    pub src_event: Option<EventId>,
    /// Event at the data destination.
    pub dst_event: Option<EventId>,
    /// Wake the destination's host once the data has landed.
    pub wake: bool,
}

impl DmaCommand {
    /// The issuer's completion event: a put's (or queued send's) source
    /// event, a get's destination event. It fires with the error when the
    /// DMA fails, so a host waiting on it learns of the failure.
    pub const fn local_event(&self) -> Option<EventId> {
        match self.kind {
            DmaKind::Put | DmaKind::Queued(_) => self.src_event,
            DmaKind::Get => self.dst_event,
        }
    }
}

/// A validated command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// NOP.
    Nop,
    /// RUN_DMA.
    Dma(DmaCommand),
    /// SET_EVENT.
    SetEvent {
        /// Event of this context.
        event: EventId,
        /// Sets, >= 1.
        count: u32,
        /// The rail of the sibling NIC that holds the event (ABI 1.2); `None`:
        /// this NIC. A set naming this NIC's own rail is a local set.
        rail: Option<u8>,
    },
    /// WRITE_WORD.
    WriteWord {
        /// Local address, 8-byte aligned.
        addr: u64,
        /// Value.
        value: u64,
    },
    /// ARM_EVENT.
    ArmEvent {
        /// Local event.
        event: EventId,
        /// Sets to wait for.
        count: u32,
        /// What to do on firing.
        action: EventAction,
    },
    /// BCAST_DMA.
    Bcast {
        /// Bytes.
        len: u32,
        /// First node.
        low_node: u16,
        /// Last node (inclusive).
        high_node: u16,
        /// Local source.
        src_addr: u64,
        /// Target address everywhere.
        dst_addr: u64,
        /// Local completion event.
        src_event: Option<EventId>,
        /// Event at every destination.
        dst_event: Option<EventId>,
    },
    /// HW_BARRIER.
    HwBarrier {
        /// First node.
        low_node: u16,
        /// Last node (inclusive).
        high_node: u16,
        /// Barrier number.
        seq: u32,
        /// The group's tag.
        tag: u32,
        /// Local event set at release.
        event: Option<EventId>,
    },
    /// QUEUE_INIT.
    QueueInit {
        /// Queue index.
        queue: u8,
        /// Slots.
        slots: u32,
        /// Bytes per slot (item header included).
        slot_size: u32,
        /// Event set per item.
        event: Option<EventId>,
        /// Virtual base of the header and slots.
        base: u64,
    },
}

/// Reserved bytes must be zero.
fn reserved_zero(bytes: &[u8]) -> Result<(), ErrorCode> {
    if bytes.iter().all(|b| *b == 0) {
        Ok(())
    } else {
        Err(ErrorCode::ReservedNonZero)
    }
}

/// The block's body as an opcode's body layout.
fn body<T: FromBytes>(block: &CommandBlock) -> Result<T, ErrorCode> {
    T::read_from_bytes(&block.body).map_err(|_| ErrorCode::BadLength)
}

/// A count of event sets: `1..=i32::MAX`, or `0..=i32::MAX` if `zero_ok`.
fn set_count(count: u32, zero_ok: bool) -> Result<u32, ErrorCode> {
    if (count == 0 && !zero_ok) || count > i32::MAX as u32 {
        return Err(ErrorCode::BadLength);
    }
    Ok(count)
}

/// A local event that must be present (SET_EVENT, ARM_EVENT).
fn required_event(raw: u32, events_per_ctx: u32) -> Result<EventId, ErrorCode> {
    EventId::decode(raw, events_per_ctx)?.ok_or(ErrorCode::BadEvent)
}

/// A collective's node range, `low..=high`.
fn node_range(low: U16, high: U16) -> Result<(u16, u16), ErrorCode> {
    let (low, high) = (low.get(), high.get());
    if low > high {
        return Err(ErrorCode::NotContiguous);
    }
    Ok((low, high))
}

/// A DMA length, `0..=MAX_DMA_LEN`.
fn dma_len(len: U32) -> Result<u32, ErrorCode> {
    let len = len.get();
    if len > MAX_DMA_LEN {
        return Err(ErrorCode::BadLength);
    }
    Ok(len)
}

/// The fixed header of every block: the opcode, the reserved bytes, and
/// the flags this opcode allows (only RUN_DMA has any).
fn parse_header(block: &CommandBlock) -> Result<(Opcode, DmaFlags), ErrorCode> {
    let op = Opcode::from_raw(block.opcode).ok_or(ErrorCode::UnknownOpcode)?;
    reserved_zero(&block.reserved)?;
    let flags = match op {
        Opcode::RunDma => DmaFlags::from_bits(block.flags),
        _ if block.flags == 0 => Some(DmaFlags::empty()),
        _ => None,
    };
    Ok((op, flags.ok_or(ErrorCode::ReservedNonZero)?))
}

/// NOP: an all-zero body.
fn parse_nop(block: &CommandBlock) -> Result<Command, ErrorCode> {
    reserved_zero(&block.body)?;
    Ok(Command::Nop)
}

/// RUN_DMA: the kind (flags), length, and the events; a queued DMA's
/// destination-event field names the remote queue instead.
fn parse_dma(
    block: &CommandBlock,
    flags: DmaFlags,
    events_per_ctx: u32,
) -> Result<Command, ErrorCode> {
    let d: DmaDescriptor = body(block)?;
    reserved_zero(&d.reserved)?;
    let len = dma_len(d.len)?;
    let (kind, dst_event) = if flags.contains(DmaFlags::QUEUE) {
        let queue = d.dst_event.get();
        if flags.contains(DmaFlags::GET) || d.dst_addr.get() != 0 {
            return Err(ErrorCode::ReservedNonZero);
        }
        if queue >= MAX_QUEUES {
            return Err(ErrorCode::BadEvent);
        }
        (DmaKind::Queued(queue as u8), None)
    } else {
        let kind = if flags.contains(DmaFlags::GET) {
            DmaKind::Get
        } else {
            DmaKind::Put
        };
        (kind, EventId::decode(d.dst_event.get(), events_per_ctx)?)
    };
    Ok(Command::Dma(DmaCommand {
        kind,
        len,
        vp: d.vp.get(),
        src_addr: d.src_addr.get(),
        dst_addr: d.dst_addr.get(),
        src_event: EventId::decode(d.src_event.get(), events_per_ctx)?,
        dst_event,
        wake: flags.contains(DmaFlags::WAKE),
    }))
}

/// SET_EVENT: a present event, a count of at least one.
fn parse_set_event(block: &CommandBlock, events_per_ctx: u32) -> Result<Command, ErrorCode> {
    let b: SetEventBody = body(block)?;
    reserved_zero(&b.reserved)?;
    let count = set_count(b.count.get(), false)?;
    let event = required_event(b.event.get(), events_per_ctx)?;
    let target = b.target.get();
    let rail = match target {
        0 => None,
        t if t & SET_EVENT_SIBLING != 0 && t & SET_EVENT_RESERVED == 0 => {
            if count > super::event::PeerSet::MAX_COUNT {
                return Err(ErrorCode::BadLength);
            }
            Some(t as u8)
        }
        _ => return Err(ErrorCode::ReservedNonZero),
    };
    Ok(Command::SetEvent { event, count, rail })
}

/// WRITE_WORD: an 8-byte aligned address.
fn parse_write_word(block: &CommandBlock) -> Result<Command, ErrorCode> {
    let b: WriteWordBody = body(block)?;
    reserved_zero(&b.reserved)?;
    let addr = b.addr.get();
    if !addr.is_multiple_of(8) {
        return Err(ErrorCode::Misaligned);
    }
    Ok(Command::WriteWord {
        addr,
        value: b.value.get(),
    })
}

/// ARM_EVENT: a present event, a count, and the action.
fn parse_arm_event(block: &CommandBlock, events_per_ctx: u32) -> Result<Command, ErrorCode> {
    let b: ArmEventBody = body(block)?;
    if b.reserved0.get() != 0 {
        return Err(ErrorCode::ReservedNonZero);
    }
    reserved_zero(&b.reserved1)?;
    let count = set_count(b.count.get(), true)?;
    let event = required_event(b.event.get(), events_per_ctx)?;
    let action = EventAction::decode(b.action.get(), b.param0.get(), b.param1.get())?;
    Ok(Command::ArmEvent {
        event,
        count,
        action,
    })
}

/// QUEUE_INIT: the queue index, its geometry, its alignment and event.
fn parse_queue_init(block: &CommandBlock, events_per_ctx: u32) -> Result<Command, ErrorCode> {
    let b: QueueInitBody = body(block)?;
    reserved_zero(&b.reserved)?;
    let (queue, slots, slot_size) = (b.queue.get(), b.slots.get(), b.slot_size.get());
    if queue >= MAX_QUEUES {
        return Err(ErrorCode::BadEvent);
    }
    if !(1..=65_536).contains(&slots)
        || !(16..=4096).contains(&slot_size)
        || !slot_size.is_multiple_of(8)
    {
        return Err(ErrorCode::BadLength);
    }
    let base = b.base.get();
    if !base.is_multiple_of(64) {
        return Err(ErrorCode::Misaligned);
    }
    Ok(Command::QueueInit {
        queue: queue as u8,
        slots,
        slot_size,
        event: EventId::decode(b.event.get(), events_per_ctx)?,
        base,
    })
}

/// BCAST_DMA: the node range, the length, the events.
fn parse_bcast(block: &CommandBlock, events_per_ctx: u32) -> Result<Command, ErrorCode> {
    let b: BcastBody = body(block)?;
    reserved_zero(&b.reserved)?;
    let (low_node, high_node) = node_range(b.low_node, b.high_node)?;
    let len = dma_len(b.len)?;
    Ok(Command::Bcast {
        len,
        low_node,
        high_node,
        src_addr: b.src_addr.get(),
        dst_addr: b.dst_addr.get(),
        src_event: EventId::decode(b.src_event.get(), events_per_ctx)?,
        dst_event: EventId::decode(b.dst_event.get(), events_per_ctx)?,
    })
}

/// HW_BARRIER: the node range and the event.
fn parse_hw_barrier(block: &CommandBlock, events_per_ctx: u32) -> Result<Command, ErrorCode> {
    let b: HwBarrierBody = body(block)?;
    reserved_zero(&b.reserved)?;
    let (low_node, high_node) = node_range(b.low_node, b.high_node)?;
    Ok(Command::HwBarrier {
        low_node,
        high_node,
        seq: b.seq.get(),
        tag: b.tag.get(),
        event: EventId::decode(b.event.get(), events_per_ctx)?,
    })
}

impl Command {
    /// Validate a block. `events_per_ctx` bounds event indices. Checks run
    /// in a fixed order (header, then the opcode's body field by field), so
    /// a block with several faults always reports the same code.
    pub fn parse(block: &CommandBlock, events_per_ctx: u32) -> Result<Command, ErrorCode> {
        let (op, flags) = parse_header(block)?;
        match op {
            Opcode::Nop => parse_nop(block),
            Opcode::RunDma => parse_dma(block, flags, events_per_ctx),
            Opcode::SetEvent => parse_set_event(block, events_per_ctx),
            Opcode::WriteWord => parse_write_word(block),
            Opcode::ArmEvent => parse_arm_event(block, events_per_ctx),
            Opcode::QueueInit => parse_queue_init(block, events_per_ctx),
            Opcode::BcastDma => parse_bcast(block, events_per_ctx),
            Opcode::HwBarrier => parse_hw_barrier(block, events_per_ctx),
        }
    }

    /// Encode into a block with the given cookie.
    pub fn emit(&self, cookie: u32) -> CommandBlock {
        let mut block = CommandBlock {
            opcode: 0,
            flags: 0,
            reserved: [0; 2],
            cookie: U32::new(cookie),
            body: [0; 56],
        };
        match *self {
            Command::Nop => block.opcode = Opcode::Nop.as_raw(),
            Command::Dma(d) => {
                block.opcode = Opcode::RunDma.as_raw();
                let mut flags = DmaFlags::empty();
                flags.set(DmaFlags::GET, d.kind == DmaKind::Get);
                flags.set(DmaFlags::WAKE, d.wake);
                let dst_event = match d.kind {
                    DmaKind::Queued(queue) => {
                        flags |= DmaFlags::QUEUE;
                        u32::from(queue)
                    }
                    DmaKind::Put | DmaKind::Get => EventId::encode(d.dst_event),
                };
                block.flags = flags.bits();
                let desc = DmaDescriptor {
                    len: U32::new(d.len),
                    vp: U32::new(d.vp),
                    src_addr: U64::new(d.src_addr),
                    dst_addr: U64::new(d.dst_addr),
                    src_event: U32::new(EventId::encode(d.src_event)),
                    dst_event: U32::new(dst_event),
                    reserved: [0; 24],
                };
                block.body = zerocopy::transmute!(desc);
            }
            Command::SetEvent { event, count, rail } => {
                block.opcode = Opcode::SetEvent.as_raw();
                let b = SetEventBody {
                    event: U32::new(event.0),
                    count: U32::new(count),
                    target: U32::new(rail.map_or(0, |r| SET_EVENT_SIBLING | u32::from(r))),
                    reserved: [0; 44],
                };
                block.body = zerocopy::transmute!(b);
            }
            Command::Bcast {
                len,
                low_node,
                high_node,
                src_addr,
                dst_addr,
                src_event,
                dst_event,
            } => {
                block.opcode = Opcode::BcastDma.as_raw();
                let b = BcastBody {
                    len: U32::new(len),
                    low_node: U16::new(low_node),
                    high_node: U16::new(high_node),
                    src_addr: U64::new(src_addr),
                    dst_addr: U64::new(dst_addr),
                    src_event: U32::new(EventId::encode(src_event)),
                    dst_event: U32::new(EventId::encode(dst_event)),
                    reserved: [0; 24],
                };
                block.body = zerocopy::transmute!(b);
            }
            Command::HwBarrier {
                low_node,
                high_node,
                seq,
                tag,
                event,
            } => {
                block.opcode = Opcode::HwBarrier.as_raw();
                let b = HwBarrierBody {
                    low_node: U16::new(low_node),
                    high_node: U16::new(high_node),
                    seq: U32::new(seq),
                    event: U32::new(EventId::encode(event)),
                    tag: U32::new(tag),
                    reserved: [0; 40],
                };
                block.body = zerocopy::transmute!(b);
            }
            Command::QueueInit {
                queue,
                slots,
                slot_size,
                event,
                base,
            } => {
                block.opcode = Opcode::QueueInit.as_raw();
                let b = QueueInitBody {
                    queue: U32::new(u32::from(queue)),
                    slots: U32::new(slots),
                    slot_size: U32::new(slot_size),
                    event: U32::new(EventId::encode(event)),
                    base: U64::new(base),
                    reserved: [0; 32],
                };
                block.body = zerocopy::transmute!(b);
            }
            Command::WriteWord { addr, value } => {
                block.opcode = Opcode::WriteWord.as_raw();
                let b = WriteWordBody {
                    addr: U64::new(addr),
                    value: U64::new(value),
                    reserved: [0; 40],
                };
                block.body = zerocopy::transmute!(b);
            }
            Command::ArmEvent {
                event,
                count,
                action,
            } => {
                block.opcode = Opcode::ArmEvent.as_raw();
                let (word, param0, param1) = action.encode();
                let b = ArmEventBody {
                    event: U32::new(event.0),
                    count: U32::new(count),
                    action: U32::new(word),
                    reserved0: U32::new(0),
                    param0: U64::new(param0),
                    param1: U64::new(param1),
                    reserved1: [0; 24],
                };
                block.body = zerocopy::transmute!(b);
            }
        }
        block
    }

    /// The queue permission the command needs (docs/abi.md §4.1's
    /// table): a command from a queue without it fails with
    /// `QueuePermission` and does nothing.
    pub const fn permission(&self) -> QueuePerms {
        match self {
            Command::Nop => QueuePerms::empty(),
            Command::Dma(_) => QueuePerms::DMA,
            Command::SetEvent { .. } => QueuePerms::SET_EVENT,
            Command::ArmEvent { .. } => QueuePerms::ARM_EVENT,
            Command::WriteWord { .. } => QueuePerms::WRITE,
            Command::QueueInit { .. } => QueuePerms::QUEUE,
            Command::Bcast { .. } | Command::HwBarrier { .. } => QueuePerms::COLLECTIVE,
        }
    }

    /// The opcode this command encodes to.
    pub const fn opcode(&self) -> Opcode {
        match self {
            Command::Nop => Opcode::Nop,
            Command::Dma(_) => Opcode::RunDma,
            Command::SetEvent { .. } => Opcode::SetEvent,
            Command::WriteWord { .. } => Opcode::WriteWord,
            Command::ArmEvent { .. } => Opcode::ArmEvent,
            Command::QueueInit { .. } => Opcode::QueueInit,
            Command::Bcast { .. } => Opcode::BcastDma,
            Command::HwBarrier { .. } => Opcode::HwBarrier,
        }
    }
}

impl CommandBlock {
    /// View 64 raw bytes as a block (any bytes are a valid *layout*; only
    /// [`Command::parse`] says whether they are a valid *command*).
    pub fn from_bytes(bytes: &[u8; COMMAND_BLOCK_SIZE]) -> CommandBlock {
        zerocopy::transmute!(*bytes)
    }

    /// The raw bytes.
    pub fn to_bytes(&self) -> [u8; COMMAND_BLOCK_SIZE] {
        zerocopy::transmute!(*self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::event::{ActionKind, MAX_COPY_BLOCKS};
    use proptest::prelude::*;

    fn samples() -> [Command; 8] {
        [
            Command::Nop,
            Command::Dma(DmaCommand {
                kind: DmaKind::Put,
                len: 4096,
                vp: 3,
                src_addr: 0x1000,
                dst_addr: 0x2000,
                src_event: Some(EventId(1)),
                dst_event: None,
                wake: false,
            }),
            Command::Dma(DmaCommand {
                kind: DmaKind::Get,
                len: MAX_DMA_LEN,
                vp: 0,
                src_addr: u64::MAX,
                dst_addr: 0,
                src_event: None,
                dst_event: Some(EventId(9)),
                wake: true,
            }),
            Command::SetEvent {
                event: EventId(5),
                count: 2,
                rail: None,
            },
            Command::SetEvent {
                event: EventId(6),
                count: 1,
                rail: Some(1),
            },
            Command::WriteWord {
                addr: 64,
                value: u64::MAX,
            },
            Command::ArmEvent {
                event: EventId(0),
                count: 3,
                action: EventAction {
                    kind: ActionKind::Copy {
                        src: 0x40,
                        blocks: 1,
                    },
                    wake: true,
                },
            },
            Command::ArmEvent {
                event: EventId(1),
                count: 1,
                action: EventAction {
                    kind: ActionKind::Copy {
                        src: 0x80,
                        blocks: MAX_COPY_BLOCKS,
                    },
                    wake: false,
                },
            },
        ]
    }

    #[test]
    fn a_sibling_set_event_is_checked() {
        let sibling = |target: u32, count: u32| {
            let mut block = Command::SetEvent {
                event: EventId(2),
                count,
                rail: None,
            }
            .emit(0);
            let mut b: SetEventBody = zerocopy::transmute!(block.body);
            b.target = U32::new(target);
            block.body = zerocopy::transmute!(b);
            Command::parse(&block, 16)
        };
        assert_eq!(
            sibling(SET_EVENT_SIBLING | 3, 5),
            Ok(Command::SetEvent {
                event: EventId(2),
                count: 5,
                rail: Some(3)
            })
        );
        // Reserved bits of the target, a target without the flag, a count
        // a PEER_SET word cannot carry.
        assert_eq!(
            sibling(SET_EVENT_SIBLING | 0x100, 1),
            Err(ErrorCode::ReservedNonZero)
        );
        assert_eq!(sibling(1, 1), Err(ErrorCode::ReservedNonZero));
        assert_eq!(
            sibling(SET_EVENT_SIBLING | 1, 1 << 24),
            Err(ErrorCode::BadLength)
        );
        assert_eq!(
            sibling(0, 1 << 24),
            Ok(Command::SetEvent {
                event: EventId(2),
                count: 1 << 24,
                rail: None
            })
        );
    }

    #[test]
    fn commands_round_trip() {
        for c in samples() {
            let block = c.emit(77);
            assert_eq!(block.cookie.get(), 77);
            assert_eq!(Command::parse(&block, 16), Ok(c));
            assert_eq!(CommandBlock::from_bytes(&block.to_bytes()), block);
        }
    }

    #[test]
    fn malformed_blocks_are_refused() {
        let mut b = Command::Nop.emit(0);
        b.opcode = 0;
        assert_eq!(Command::parse(&b, 16), Err(ErrorCode::UnknownOpcode));
        b.opcode = 0xee;
        assert_eq!(Command::parse(&b, 16), Err(ErrorCode::UnknownOpcode));
        let mut b = Command::Nop.emit(0);
        b.reserved[1] = 1;
        assert_eq!(Command::parse(&b, 16), Err(ErrorCode::ReservedNonZero));
        let mut b = samples()[1].emit(0);
        b.flags = 0x80;
        assert_eq!(Command::parse(&b, 16), Err(ErrorCode::ReservedNonZero));
        let mut b = samples()[1].emit(0);
        b.body[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Command::parse(&b, 16), Err(ErrorCode::BadLength));
        assert_eq!(
            Command::parse(&samples()[6].emit(0), 0),
            Err(ErrorCode::BadEvent)
        );
        let bad_write = Command::WriteWord { addr: 3, value: 0 }.emit(0);
        assert_eq!(Command::parse(&bad_write, 16), Err(ErrorCode::Misaligned));
        let zero_set = Command::SetEvent {
            event: EventId(0),
            count: 0,
            rail: None,
        }
        .emit(0);
        assert_eq!(Command::parse(&zero_set, 16), Err(ErrorCode::BadLength));
    }

    /// Only RUN_DMA takes flags, and only its three; anything else is
    /// `ReservedNonZero` before the body is looked at.
    #[test]
    fn every_flag_byte_of_every_opcode_is_judged_by_the_header() {
        for c in samples() {
            let base = c.emit(0);
            for flags in 0..=u8::MAX {
                let mut b = base;
                b.flags = flags;
                let allowed = if c.opcode() == Opcode::RunDma {
                    flags & !0x07 == 0
                } else {
                    flags == 0
                };
                if allowed {
                    assert_eq!(
                        parse_header(&b),
                        Ok((c.opcode(), DmaFlags::from_bits_retain(flags)))
                    );
                } else {
                    assert_eq!(parse_header(&b), Err(ErrorCode::ReservedNonZero));
                    assert_eq!(Command::parse(&b, 16), Err(ErrorCode::ReservedNonZero));
                }
            }
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics_and_accepted_blocks_round_trip(bytes in proptest::array::uniform32(any::<u8>()), tail in proptest::array::uniform32(any::<u8>()), events in 0u32..1024) {
            let mut raw = [0u8; 64];
            raw[..32].copy_from_slice(&bytes);
            raw[32..].copy_from_slice(&tail);
            let block = CommandBlock::from_bytes(&raw);
            if let Ok(cmd) = Command::parse(&block, events) {
                prop_assert_eq!(cmd.emit(block.cookie.get()), block);
            }
        }
    }
}
