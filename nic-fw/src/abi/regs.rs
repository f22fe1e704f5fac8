//! The BAR0 register map.
//!
//! All registers are 64 bits wide at 8-byte aligned offsets, little-endian.
//! The map has three parts:
//!
//! - global registers (`0x000..0x100`): identity, version, geometry, control
//!   and status, and the *admin mailbox* through which the privileged driver
//!   attaches contexts, maps regions and sets parameters;
//! - one 64-byte *context page* per hardware context at
//!   `CTX_PAGE_BASE + ctx * CTX_PAGE_SIZE`, which a driver maps into that
//!   rank's process: the command-queue doorbell (`CQ_TAIL`), the consumed
//!   index (`CQ_HEAD`) and the error-record count (`ERR_COUNT`);
//! - nothing else: region and event tables live inside the NIC and are only
//!   reachable through the mailbox and commands.
//!
//! Writing `CQ_TAIL` or `MBOX_CMD` rings a doorbell: the NIC notices the write
//! (an FPGA raises a doorbell bit; the emulator sets a pending mask).
//!
//! Each register is a typed descriptor, [`Reg<T, A>`] (a context-page
//! register: [`CtxReg<T, A>`]), carrying its offset, its value type and the
//! host's access ([`ReadOnly`], [`WriteOnly`], [`ReadWrite`]), so that a
//! host write to a read-only register does not compile.

use core::marker::PhantomData;

use bitflags::bitflags;

use super::error::{ErrorCode, status_from_raw, status_to_raw};
use super::ring::Ring;
use super::{ContextIndex, MAX_CONTEXTS, NodeId};

mod sealed {
    pub trait Sealed {}
}

/// What the *host* may do with a register, as a type: [`ReadOnly`],
/// [`WriteOnly`] or [`ReadWrite`]. The NIC owns the register file and reads
/// and writes every register (it publishes read-only ones, and resets the
/// doorbells when a context is attached), so the firmware side accepts any
/// access; the host side accepts only [`HostRead`] registers for reads and
/// [`HostWrite`] registers for writes.
pub trait Access: sealed::Sealed + Copy {
    /// The access column of `docs/abi.md`: `"RO"`, `"WO"` or `"RW"`.
    const NAME: &'static str;
}

/// Registers the host may read.
pub trait HostRead: Access {}

/// Registers the host may write.
pub trait HostWrite: Access {}

/// Host access: read only (the NIC publishes the value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOnly;

/// Host access: write only (a doorbell or command the NIC consumes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOnly;

/// Host access: read and write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadWrite;

impl sealed::Sealed for ReadOnly {}
impl sealed::Sealed for WriteOnly {}
impl sealed::Sealed for ReadWrite {}
impl Access for ReadOnly {
    const NAME: &'static str = "RO";
}
impl Access for WriteOnly {
    const NAME: &'static str = "WO";
}
impl Access for ReadWrite {
    const NAME: &'static str = "RW";
}
impl HostRead for ReadOnly {}
impl HostRead for ReadWrite {}
impl HostWrite for WriteOnly {}
impl HostWrite for ReadWrite {}

/// A BAR0 register: its byte offset, the type of its value `T` (so its
/// width: every register of ABI 1.0 is a `u64`) and the host's access `A`.
/// Only this module defines registers; everything else names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg<T, A> {
    offset: u32,
    _value: PhantomData<(T, A)>,
}

impl<T, A> Reg<T, A> {
    const fn at(offset: u32) -> Self {
        Self {
            offset,
            _value: PhantomData,
        }
    }

    /// Byte offset in BAR0 (8-byte aligned).
    pub const fn offset(&self) -> u32 {
        self.offset
    }
}

/// A register of every context page: its offset within the page, value
/// type and host access. [`ctx_reg`] gives one context's instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtxReg<T, A> {
    page_offset: u32,
    _value: PhantomData<(T, A)>,
}

impl<T, A> CtxReg<T, A> {
    const fn at(page_offset: u32) -> Self {
        Self {
            page_offset,
            _value: PhantomData,
        }
    }

    /// Byte offset within a context page.
    pub const fn page_offset(&self) -> u32 {
        self.page_offset
    }

    /// The context whose instance of this register sits at BAR0 `offset`,
    /// if any.
    pub const fn context_of(&self, offset: u32) -> Option<ContextIndex> {
        match decode_ctx_reg(offset) {
            Some((ctx, reg)) if reg == self.page_offset => Some(ctx),
            _ => None,
        }
    }
}

/// `ID`: the ASCII bytes `RAILCOLL`, little-endian.
pub const ID: Reg<u64, ReadOnly> = Reg::at(0x000);
/// `VERSION`: [`super::ABI_VERSION`] in bits 31:0.
pub const VERSION: Reg<u64, ReadOnly> = Reg::at(0x008);
/// `GEOMETRY`: table sizes, see [`Geometry`].
pub const GEOMETRY: Reg<u64, ReadOnly> = Reg::at(0x010);
/// `LOCATION`: bits 15:0 node id, bits 23:16 rail index. Set by the board
/// ([`Location`]).
pub const LOCATION: Reg<u64, ReadOnly> = Reg::at(0x018);

/// Where a NIC sits: fixed by the board, reported in [`LOCATION`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Location {
    /// Node id (switch port) on the rail.
    pub node: NodeId,
    /// Rail index.
    pub rail: u8,
}

impl Location {
    /// The `LOCATION` register's value: bits 15:0 node, 23:16 rail.
    pub const fn to_reg(&self) -> u64 {
        (self.node as u64) | ((self.rail as u64) << 16)
    }

    /// Decode a `LOCATION` value (bits above 23 are ignored).
    pub const fn from_reg(v: u64) -> Self {
        Self {
            node: (v & 0xffff) as NodeId,
            rail: ((v >> 16) & 0xff) as u8,
        }
    }
}
/// `CONTROL`: [`Control`] flags.
pub const CONTROL: Reg<u64, ReadWrite> = Reg::at(0x020);
/// `STATUS`: [`Status`] flags.
pub const STATUS: Reg<u64, ReadOnly> = Reg::at(0x028);
/// `PACKET_SIZE`: current packet payload size in bytes.
pub const PACKET_SIZE: Reg<u64, ReadOnly> = Reg::at(0x030);
/// `STATS_ERRORS`: errors that could not be reported to any context
/// (e.g. packets for an unattached context), free-running.
pub const STATS_ERRORS: Reg<u64, ReadOnly> = Reg::at(0x038);
/// `MBOX_ARG0..3`: mailbox arguments, written before `MBOX_CMD`.
pub const MBOX_ARG0: Reg<u64, ReadWrite> = Reg::at(0x040);
/// See [`MBOX_ARG0`].
pub const MBOX_ARG1: Reg<u64, ReadWrite> = Reg::at(0x048);
/// See [`MBOX_ARG0`].
pub const MBOX_ARG2: Reg<u64, ReadWrite> = Reg::at(0x050);
/// See [`MBOX_ARG0`].
pub const MBOX_ARG3: Reg<u64, ReadWrite> = Reg::at(0x058);
/// The four mailbox arguments, in order.
pub const MBOX_ARGS: [Reg<u64, ReadWrite>; 4] = [MBOX_ARG0, MBOX_ARG1, MBOX_ARG2, MBOX_ARG3];
/// `MBOX_CMD` (doorbell): bits 7:0 [`MailboxOp`], bits 63:32 a sequence
/// number chosen by the driver and echoed in `MBOX_STATUS`.
pub const MBOX_CMD: Reg<u64, WriteOnly> = Reg::at(0x060);
/// `MBOX_STATUS`: bits 15:0 the outcome of the last call (0 success, else
/// its [`ErrorCode`]), bit 16 set once it completed, bits 63:32 its
/// sequence number. See [`MailboxStatus`].
pub const MBOX_STATUS: Reg<u64, ReadOnly> = Reg::at(0x068);
/// `MBOX_RESULT`: call-specific result value.
pub const MBOX_RESULT: Reg<u64, ReadOnly> = Reg::at(0x070);
/// `RESOURCES` (ABI 1.1): what the NIC offers programs that run on it
/// without the host, see [`Resources`].
pub const RESOURCES: Reg<u64, ReadOnly> = Reg::at(0x078);
/// `PEER_SET` (ABI 1.2): the FIFO the node's *other NICs* write a
/// [`super::event::PeerSet`] word into (a PCIe peer-to-peer posted write), one entry per
/// write, [`Resources::peer_fifo`] entries deep. The host never writes it:
/// the NIC cannot tell a host write from a sibling's.
pub const PEER_SET: Reg<u64, WriteOnly> = Reg::at(0x080);

/// First context page.
pub const CTX_PAGE_BASE: u32 = 0x100;
/// Size of one context page.
pub const CTX_PAGE_SIZE: u32 = 0x40;
/// In a context page: `CQ_TAIL` (doorbell), free-running count of command
/// blocks the host has written.
pub const CQ_TAIL: CtxReg<u64, WriteOnly> = CtxReg::at(0x00);
/// In a context page: `CQ_HEAD`, free-running count of command blocks the
/// NIC has consumed. Slots below it may be reused by the host.
pub const CQ_HEAD: CtxReg<u64, ReadOnly> = CtxReg::at(0x08);
/// In a context page: `ERR_COUNT`, free-running count of error records
/// written to the context's error ring.
pub const ERR_COUNT: CtxReg<u64, ReadOnly> = CtxReg::at(0x10);

/// Size of the register file in bytes.
pub const BAR0_SIZE: u32 = CTX_PAGE_BASE + CTX_PAGE_SIZE * MAX_CONTEXTS as u32;

const _: () = assert!(
    MBOX_RESULT.offset() < CTX_PAGE_BASE,
    "globals overlap the context pages"
);
const _: () = assert!(
    ERR_COUNT.page_offset() < CTX_PAGE_SIZE,
    "a context register outside its page"
);

/// Value of the `ID` register.
pub const ID_VALUE: u64 = u64::from_le_bytes(*b"RAILCOLL");

/// Context `ctx`'s instance of a context-page register, `None` for a
/// context index out of range.
pub const fn ctx_reg<T, A>(ctx: ContextIndex, reg: CtxReg<T, A>) -> Option<Reg<T, A>> {
    if (ctx as usize) < MAX_CONTEXTS && reg.page_offset < CTX_PAGE_SIZE {
        // Bounded: ctx < 16 and the page offset < 0x40, far from u32::MAX.
        Some(Reg::at(
            CTX_PAGE_BASE
                .wrapping_add((ctx as u32).wrapping_mul(CTX_PAGE_SIZE))
                .wrapping_add(reg.page_offset),
        ))
    } else {
        None
    }
}

/// Which context page (and offset within it) a BAR0 offset falls in.
pub const fn decode_ctx_reg(offset: u32) -> Option<(ContextIndex, u32)> {
    if offset < CTX_PAGE_BASE || offset >= BAR0_SIZE {
        return None;
    }
    let rel = offset.wrapping_sub(CTX_PAGE_BASE);
    Some(((rel / CTX_PAGE_SIZE) as ContextIndex, rel % CTX_PAGE_SIZE))
}

bitflags! {
    /// `CONTROL` register.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Control: u64 {
        /// The engine fetches commands and accepts packets only while set.
        const ENABLE = 1 << 0;
    }

    /// `STATUS` register.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Status: u64 {
        /// The engine is running (set by firmware after init).
        const RUNNING = 1 << 0;
        /// At least one flow is broken (a peer exceeded the retry limit).
        const FLOW_BROKEN = 1 << 1;
        /// At least one flow runs through the alternate sibling path (its
        /// direct path stopped answering; since 1.5).
        const MIGRATED = 1 << 2;
    }

    /// Per-queue command permissions (Elan's `CQ_*EnableBit`), set when the
    /// context is attached. A command its queue does not permit completes
    /// with [`ErrorCode::QueuePermission`].
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct QueuePerms: u8 {
        /// RUN_DMA (put, get, queued DMA).
        const DMA = 1 << 0;
        /// SET_EVENT.
        const SET_EVENT = 1 << 1;
        /// ARM_EVENT.
        const ARM_EVENT = 1 << 2;
        /// WRITE_WORD.
        const WRITE = 1 << 3;
        /// BCAST_DMA and HW_BARRIER (collective hardware).
        const COLLECTIVE = 1 << 4;
        /// QUEUE_INIT (input queues for queued DMAs).
        const QUEUE = 1 << 5;
    }

    /// Region permissions (a reduced form of Elan4's `PERM_*`): local access
    /// by the owning context's own commands and event actions, and remote
    /// access by packets from other processes.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct RegionPerms: u8 {
        /// Source of the context's own DMAs; source of COPY actions.
        const LOCAL_READ = 1 << 0;
        /// Target of WRITE_WORD, WRITE actions and get responses.
        const LOCAL_WRITE = 1 << 1;
        /// Source of gets issued by other processes.
        const REMOTE_READ = 1 << 2;
        /// Target of puts from other processes.
        const REMOTE_WRITE = 1 << 3;
    }
}

wire_enum! {
    /// Admin mailbox operations (`MBOX_CMD` bits 7:0).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum MailboxOp: u8 {
        /// Attach a context: see [`ContextConfig`].
        AttachContext = 1,
        /// Detach a context: `ARG0` = context. Its regions are unmapped.
        DetachContext = 2,
        /// Map a region: see [`RegionConfig`].
        MapRegion = 3,
        /// Unmap a region: `ARG0` = slot.
        UnmapRegion = 4,
        /// Set a parameter: `ARG0` = [`Param`], `ARG1` = value.
        SetParam = 5,
        /// Forget both directions of the flow with node `ARG0` and (since
        /// 1.8) free their flow slots: after `PeerUnreachable`, or to make
        /// room for another peer. Both ends must reset.
        ResetFlow = 6,
    }
}

wire_enum! {
    /// Parameters settable through [`MailboxOp::SetParam`] (`ARG0`, a
    /// 64-bit argument: values above 255 name no parameter).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Param: u8 {
        /// Packet payload size in bytes: a power of two in
        /// `MIN_PACKET_SIZE..=MAX_PACKET_SIZE`. Only while no DMA is in flight.
        PacketSize = 1,
        /// Retransmission timeout in nanoseconds (>= 1000).
        RetryTimeoutNs = 2,
        /// Retransmissions of one window before the flow is declared broken
        /// (>= 1).
        RetryLimit = 3,
        /// How long, in nanoseconds, an input queue may refuse a sender's
        /// item (full, or not yet initialised) before the item fails with
        /// `QueueFull` or `NoQueue` (>= 1000; reset 1 s; since 1.4).
        QueueWaitNs = 4,
        /// The rail of the sibling NIC through which a flow past its retry
        /// limit migrates, plus one (0: none, the flow breaks; reset 0;
        /// since 1.5; docs/abi.md §8.4).
        AlternateRail = 5,
        /// How long, in nanoseconds, a transmit flow stays idle before it
        /// is closed and its slot freed at both ends (0: never; else >=
        /// 1 ms, checked, and at least twice the rail's packet lifetime,
        /// docs/abi.md §4.6, which the host must ensure; reset 2 s; since
        /// 1.9; docs/abi.md §8.1).
        FlowCloseIdleNs = 6,
    }
}

impl Param {
    /// Decode a mailbox argument; `None` for a value naming no parameter.
    pub fn from_arg(arg: u64) -> Option<Self> {
        u8::try_from(arg).ok().and_then(Self::from_raw)
    }
}

/// Encoding of `MBOX_STATUS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MailboxStatus {
    /// Outcome of the call (bits 15:0: 0 for success, else the code).
    pub result: Result<(), ErrorCode>,
    /// The call has completed.
    pub done: bool,
    /// Sequence number of the call.
    pub seq: u32,
}

impl MailboxStatus {
    /// Pack into the register value.
    pub const fn to_reg(self) -> u64 {
        (status_to_raw(self.result) as u64) | ((self.done as u64) << 16) | ((self.seq as u64) << 32)
    }

    /// Unpack a register value; unknown codes read as [`ErrorCode::BadConfig`].
    pub const fn from_reg(v: u64) -> Self {
        let result = match status_from_raw(v as u16) {
            Some(r) => r,
            None => Err(ErrorCode::BadConfig),
        };
        Self {
            result,
            done: (v >> 16) & 1 == 1,
            seq: (v >> 32) as u32,
        }
    }
}

/// Is a host write to `offset` a doorbell (docs/abi.md §2)? `MBOX_CMD`
/// and every context's `CQ_TAIL`: the writes a NIC must notice without
/// polling, which a device that lets the host map BAR0 must still trap
/// (a vfio-user client writes them with `REGION_WRITE`).
pub fn is_doorbell(offset: u32) -> bool {
    offset == MBOX_CMD.offset() || CQ_TAIL.context_of(offset).is_some()
}

/// Pack `MBOX_CMD`.
pub const fn mailbox_cmd(op: MailboxOp, seq: u32) -> u64 {
    (op.as_raw() as u64) | ((seq as u64) << 32)
}

/// Rank placement of a job's capability (Elan's `ELAN_CAP_TYPE_BLOCK` /
/// `_CYCLIC`): how a virtual process number maps to (node, context).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// vp = node_index * ranks_per_node + local: consecutive ranks share a node.
    Block,
    /// vp = local * node_count + node_index: consecutive ranks on
    /// consecutive nodes.
    Cyclic,
}

/// A job capability: which (node, context) slots its virtual processes
/// occupy. Carried in `ARG3` of [`MailboxOp::AttachContext`]:
/// bits 15:0 `low_node`, 31:16 `node_count`, 39:32 `ranks_per_node`,
/// 47:40 `ctx_base`, bit 48 cyclic, other bits zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capability {
    /// First node of the job.
    pub low_node: NodeId,
    /// Number of consecutive nodes, >= 1.
    pub node_count: u16,
    /// Ranks (contexts) per node, >= 1, `ctx_base + ranks_per_node <= MAX_CONTEXTS`.
    pub ranks_per_node: u8,
    /// Hardware context of local rank 0.
    pub ctx_base: ContextIndex,
    /// vp numbering.
    pub placement: Placement,
}

impl Capability {
    /// Number of virtual processes.
    pub const fn vps(&self) -> u32 {
        // u16 * u8 cannot overflow u32.
        (self.node_count as u32).wrapping_mul(self.ranks_per_node as u32)
    }

    /// Pack into the mailbox argument.
    pub const fn to_reg(&self) -> u64 {
        (self.low_node as u64)
            | ((self.node_count as u64) << 16)
            | ((self.ranks_per_node as u64) << 32)
            | ((self.ctx_base as u64) << 40)
            | ((matches!(self.placement, Placement::Cyclic) as u64) << 48)
    }

    /// Unpack and validate.
    pub fn from_reg(v: u64) -> Result<Self, ErrorCode> {
        if v >> 49 != 0 {
            return Err(ErrorCode::ReservedNonZero);
        }
        let cap = Self {
            low_node: v as u16,
            node_count: (v >> 16) as u16,
            ranks_per_node: (v >> 32) as u8,
            ctx_base: (v >> 40) as u8,
            placement: if (v >> 48) & 1 == 1 {
                Placement::Cyclic
            } else {
                Placement::Block
            },
        };
        let ctx_end = (cap.ctx_base as usize).saturating_add(cap.ranks_per_node as usize);
        if cap.node_count == 0
            || cap.ranks_per_node == 0
            || ctx_end > MAX_CONTEXTS
            || (cap.low_node as u32).saturating_add(cap.node_count as u32) > 1 << 16
        {
            return Err(ErrorCode::BadConfig);
        }
        Ok(cap)
    }

    /// Resolve a virtual process to (node, context).
    pub const fn locate(&self, vp: u32) -> Option<(NodeId, ContextIndex)> {
        if vp >= self.vps() {
            return None;
        }
        let (node_index, local) = match self.placement {
            Placement::Block => {
                let rpn = self.ranks_per_node as u32;
                match (vp.checked_div(rpn), vp.checked_rem(rpn)) {
                    (Some(n), Some(l)) => (n, l),
                    _ => return None,
                }
            }
            Placement::Cyclic => {
                let nodes = self.node_count as u32;
                match (vp.checked_rem(nodes), vp.checked_div(nodes)) {
                    (Some(n), Some(l)) => (n, l),
                    _ => return None,
                }
            }
        };
        // Both sums are in range: vp < vps() bounds node_index and local, and
        // from_reg checked the node and context ranges.
        Some((
            (self.low_node as u32).wrapping_add(node_index) as NodeId,
            (self.ctx_base as u32).wrapping_add(local) as u8,
        ))
    }
}

/// Arguments of [`MailboxOp::AttachContext`].
///
/// - `ARG0`: bits 7:0 context, 15:8 log2 command-queue entries (1..=16),
///   23:16 log2 error-ring entries (0..=16), 31:24 [`QueuePerms`],
///   63:32 job key;
/// - `ARG1`: host physical address of the command ring (64-byte aligned);
/// - `ARG2`: host physical address of the error ring (32-byte aligned);
/// - `ARG3`: [`Capability`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextConfig {
    /// Hardware context index.
    pub ctx: ContextIndex,
    /// log2 of the command ring's entries.
    pub cq_log2: u8,
    /// log2 of the error ring's entries.
    pub err_log2: u8,
    /// What the queue may do.
    pub perms: QueuePerms,
    /// Job key; packets must carry it.
    pub job_key: u32,
    /// Command ring base (host physical).
    pub cq_base: u64,
    /// Error ring base (host physical).
    pub err_base: u64,
    /// The job's capability.
    pub cap: Capability,
}

impl ContextConfig {
    /// The command ring: `2^cq_log2` blocks (`cq_log2` clamped to 16, the
    /// largest [`ContextConfig::from_args`] accepts).
    pub const fn cq_ring(&self) -> Ring {
        log2_ring(self.cq_log2)
    }

    /// The error ring: `2^err_log2` records (`err_log2` clamped to 16).
    pub const fn err_ring(&self) -> Ring {
        log2_ring(self.err_log2)
    }

    /// Pack into the four mailbox arguments.
    pub fn to_args(&self) -> [u64; 4] {
        [
            (self.ctx as u64)
                | ((self.cq_log2 as u64) << 8)
                | ((self.err_log2 as u64) << 16)
                | ((self.perms.bits() as u64) << 24)
                | ((self.job_key as u64) << 32),
            self.cq_base,
            self.err_base,
            self.cap.to_reg(),
        ]
    }

    /// Unpack and validate.
    pub fn from_args(a: [u64; 4]) -> Result<Self, ErrorCode> {
        let [a0, cq_base, err_base, cap] = a;
        let cfg = Self {
            ctx: a0 as u8,
            cq_log2: (a0 >> 8) as u8,
            err_log2: (a0 >> 16) as u8,
            perms: QueuePerms::from_bits((a0 >> 24) as u8).ok_or(ErrorCode::ReservedNonZero)?,
            job_key: (a0 >> 32) as u32,
            cq_base,
            err_base,
            cap: Capability::from_reg(cap)?,
        };
        if cfg.ctx as usize >= MAX_CONTEXTS
            || !(1..=16).contains(&cfg.cq_log2)
            || cfg.err_log2 > 16
            || !cq_base.is_multiple_of(64)
            || !err_base.is_multiple_of(32)
            || cq_base == 0
        {
            return Err(ErrorCode::BadConfig);
        }
        Ok(cfg)
    }
}

/// A ring of `2^min(log2, 16)` entries.
const fn log2_ring(log2: u8) -> Ring {
    let log2 = if log2 > 16 { 16 } else { log2 };
    match Ring::from_log2(log2 as u32) {
        Ok(ring) => ring,
        // log2 <= 16 is always accepted.
        Err(_) => Ring::ONE,
    }
}

/// Arguments of [`MailboxOp::MapRegion`].
///
/// - `ARG0`: bits 7:0 context, 15:8 slot, 23:16 [`RegionPerms`];
/// - `ARG1`: virtual base (in the context's address space);
/// - `ARG2`: length in bytes (> 0);
/// - `ARG3`: host physical base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionConfig {
    /// Owning context.
    pub ctx: ContextIndex,
    /// Region table slot.
    pub slot: u8,
    /// Access rights.
    pub perms: RegionPerms,
    /// Virtual base.
    pub va: u64,
    /// Length.
    pub len: u64,
    /// Physical base.
    pub phys: u64,
}

impl RegionConfig {
    /// Pack into the four mailbox arguments.
    pub fn to_args(&self) -> [u64; 4] {
        [
            (self.ctx as u64) | ((self.slot as u64) << 8) | ((self.perms.bits() as u64) << 16),
            self.va,
            self.len,
            self.phys,
        ]
    }

    /// Unpack and validate ranges (not overlap: that is the engine's job).
    pub fn from_args(a: [u64; 4]) -> Result<Self, ErrorCode> {
        let [a0, va, len, phys] = a;
        if a0 >> 24 != 0 {
            return Err(ErrorCode::ReservedNonZero);
        }
        let cfg = Self {
            ctx: a0 as u8,
            slot: (a0 >> 8) as u8,
            perms: RegionPerms::from_bits((a0 >> 16) as u8).ok_or(ErrorCode::ReservedNonZero)?,
            va,
            len,
            phys,
        };
        if cfg.ctx as usize >= MAX_CONTEXTS
            || cfg.slot as usize >= super::MAX_REGIONS
            || len == 0
            || va.checked_add(len).is_none()
            || phys.checked_add(len).is_none()
        {
            return Err(ErrorCode::BadConfig);
        }
        Ok(cfg)
    }
}

/// Resources reported in `RESOURCES` (ABI 1.1, extended in 1.2): bits
/// 15:0 chain queue entries (commands that fired events' COPY actions have
/// injected and the NIC has not run yet), bits 23:16 input queues per
/// context, bits 31:24 the depth of the [`PEER_SET`] FIFO (ABI 1.2; 0: no
/// sibling path, a set naming another rail fails with `PeerUnreachable`),
/// bits 39:32 the most blocks one COPY action injects (ABI 1.2); bits
/// 63:40 read as zero. A zero field means "not reported": the value of
/// the ABI that had no such field ([`Resources::ABI_1_0`]: the chain depth
/// [`super::CHAIN_DEPTH`], [`super::MAX_QUEUES`] queues, no
/// sibling path, one block per COPY).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resources {
    /// Chain queue entries.
    pub chain_depth: u16,
    /// Input (QDMA) queues per context.
    pub queues: u8,
    /// `PEER_SET` FIFO entries (0: no sibling path).
    pub peer_fifo: u8,
    /// Most command blocks one COPY injects.
    pub copy_blocks: u8,
}

impl Resources {
    /// What an ABI 1.0 NIC offered (it had no `RESOURCES` register).
    pub const ABI_1_0: Resources = Resources {
        chain_depth: super::CHAIN_DEPTH as u16,
        queues: super::MAX_QUEUES as u8,
        peer_fifo: 0,
        copy_blocks: 1,
    };

    /// What this firmware offers on a board whose `PEER_SET` FIFO has
    /// `peer_fifo` entries.
    pub const fn this_firmware(peer_fifo: u8) -> Self {
        Resources {
            peer_fifo,
            copy_blocks: super::event::MAX_COPY_BLOCKS,
            ..Self::ABI_1_0
        }
    }

    /// Pack.
    pub const fn to_reg(&self) -> u64 {
        (self.chain_depth as u64)
            | ((self.queues as u64) << 16)
            | ((self.peer_fifo as u64) << 24)
            | ((self.copy_blocks as u64) << 32)
    }

    /// Unpack; a zero field takes its ABI 1.0 value.
    pub const fn from_reg(v: u64) -> Self {
        const fn or(x: u64, d: u64) -> u64 {
            if x == 0 { d } else { x }
        }
        Self {
            chain_depth: or(v & 0xffff, Self::ABI_1_0.chain_depth as u64) as u16,
            queues: or((v >> 16) & 0xff, Self::ABI_1_0.queues as u64) as u8,
            peer_fifo: ((v >> 24) & 0xff) as u8,
            copy_blocks: or((v >> 32) & 0xff, Self::ABI_1_0.copy_blocks as u64) as u8,
        }
    }
}

/// Table sizes reported in `GEOMETRY`: bits 7:0 contexts, 23:8 events per
/// context, 31:24 regions, 47:32 peers, 55:48 DMA slots, 63:56 tx window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Hardware contexts.
    pub contexts: u8,
    /// Events per context.
    pub events_per_ctx: u16,
    /// Region table entries.
    pub regions: u8,
    /// Peers the NIC exchanges packets with between resets (slots are not
    /// freed when idle): its flow slots per
    /// direction, and the most nodes one broadcast spans (since 1.8; the
    /// node numbers themselves span the whole 16-bit space). Before 1.8
    /// the field was the largest node count, the same number.
    pub peers: u16,
    /// DMA slots.
    pub dmas: u8,
    /// Go-back-N window.
    pub tx_window: u8,
}

impl Geometry {
    /// Pack.
    pub const fn to_reg(&self) -> u64 {
        (self.contexts as u64)
            | ((self.events_per_ctx as u64) << 8)
            | ((self.regions as u64) << 24)
            | ((self.peers as u64) << 32)
            | ((self.dmas as u64) << 48)
            | ((self.tx_window as u64) << 56)
    }

    /// Unpack.
    pub const fn from_reg(v: u64) -> Self {
        Self {
            contexts: v as u8,
            events_per_ctx: (v >> 8) as u16,
            regions: (v >> 24) as u8,
            peers: (v >> 32) as u16,
            dmas: (v >> 48) as u8,
            tx_window: (v >> 56) as u8,
        }
    }
}

#[cfg(test)]
mod tests;
