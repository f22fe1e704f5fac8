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

use bitflags::bitflags;

use super::error::ErrorCode;
use super::ring::Ring;
use super::{ContextIndex, MAX_CONTEXTS, NodeId};

/// `ID`: the ASCII bytes `RAILCOLL`, little-endian.
pub const ID: u32 = 0x000;
/// `VERSION`: [`super::ABI_VERSION`] in bits 31:0.
pub const VERSION: u32 = 0x008;
/// `GEOMETRY`: table sizes, see [`Geometry`].
pub const GEOMETRY: u32 = 0x010;
/// `LOCATION`: bits 15:0 node id, bits 23:16 rail index. Set by the board.
pub const LOCATION: u32 = 0x018;
/// `CONTROL` (RW): [`Control`] flags.
pub const CONTROL: u32 = 0x020;
/// `STATUS` (RO): [`Status`] flags.
pub const STATUS: u32 = 0x028;
/// `PACKET_SIZE` (RO): current packet payload size in bytes.
pub const PACKET_SIZE: u32 = 0x030;
/// `STATS_ERRORS` (RO): errors that could not be reported to any context
/// (e.g. packets for an unattached context), free-running.
pub const STATS_ERRORS: u32 = 0x038;
/// `MBOX_ARG0..3` (RW): mailbox arguments, written before `MBOX_CMD`.
pub const MBOX_ARG0: u32 = 0x040;
/// See [`MBOX_ARG0`].
pub const MBOX_ARG1: u32 = 0x048;
/// See [`MBOX_ARG0`].
pub const MBOX_ARG2: u32 = 0x050;
/// See [`MBOX_ARG0`].
pub const MBOX_ARG3: u32 = 0x058;
/// `MBOX_CMD` (WO, doorbell): bits 7:0 [`MailboxOp`], bits 63:32 a sequence
/// number chosen by the driver and echoed in `MBOX_STATUS`.
pub const MBOX_CMD: u32 = 0x060;
/// `MBOX_STATUS` (RO): bits 15:0 [`ErrorCode`] of the last call, bit 16 set
/// once it completed, bits 63:32 its sequence number.
pub const MBOX_STATUS: u32 = 0x068;
/// `MBOX_RESULT` (RO): call-specific result value.
pub const MBOX_RESULT: u32 = 0x070;

/// First context page.
pub const CTX_PAGE_BASE: u32 = 0x100;
/// Size of one context page.
pub const CTX_PAGE_SIZE: u32 = 0x40;
/// Offset in a context page: `CQ_TAIL` (WO, doorbell), free-running count of
/// command blocks the host has written.
pub const CQ_TAIL: u32 = 0x00;
/// Offset in a context page: `CQ_HEAD` (RO), free-running count of command
/// blocks the NIC has consumed. Slots below it may be reused by the host.
pub const CQ_HEAD: u32 = 0x08;
/// Offset in a context page: `ERR_COUNT` (RO), free-running count of error
/// records written to the context's error ring.
pub const ERR_COUNT: u32 = 0x10;

/// Size of the register file in bytes.
pub const BAR0_SIZE: u32 = CTX_PAGE_BASE + CTX_PAGE_SIZE * MAX_CONTEXTS as u32;

const _: () = assert!(
    MBOX_RESULT < CTX_PAGE_BASE,
    "globals overlap the context pages"
);

/// Value of the `ID` register.
pub const ID_VALUE: u64 = u64::from_le_bytes(*b"RAILCOLL");

/// Absolute offset of a register in a context page, `None` for a context
/// index out of range.
pub const fn ctx_reg(ctx: ContextIndex, reg: u32) -> Option<u32> {
    if (ctx as usize) < MAX_CONTEXTS && reg < CTX_PAGE_SIZE {
        // Bounded: ctx < 16 and reg < 0x40, far from u32::MAX.
        Some(
            CTX_PAGE_BASE
                .wrapping_add((ctx as u32).wrapping_mul(CTX_PAGE_SIZE))
                .wrapping_add(reg),
        )
    } else {
        None
    }
}

/// Which context page (and register within it) an offset falls in.
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

/// Admin mailbox operations (`MBOX_CMD` bits 7:0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MailboxOp {
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
    /// Reset the flow to node `ARG0` (after `PeerUnreachable`).
    ResetFlow = 6,
}

impl MailboxOp {
    /// Decode; `None` for unknown values.
    pub const fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::AttachContext,
            2 => Self::DetachContext,
            3 => Self::MapRegion,
            4 => Self::UnmapRegion,
            5 => Self::SetParam,
            6 => Self::ResetFlow,
            _ => return None,
        })
    }
}

/// Parameters settable through [`MailboxOp::SetParam`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Param {
    /// Packet payload size in bytes: a power of two in
    /// `MIN_PACKET_SIZE..=MAX_PACKET_SIZE`. Only while no DMA is in flight.
    PacketSize = 1,
    /// Retransmission timeout in nanoseconds (>= 1000).
    RetryTimeoutNs = 2,
    /// Retransmissions of one window before the flow is declared broken
    /// (>= 1).
    RetryLimit = 3,
}

impl Param {
    /// Decode; `None` for unknown values.
    pub const fn from_u64(v: u64) -> Option<Self> {
        Some(match v {
            1 => Self::PacketSize,
            2 => Self::RetryTimeoutNs,
            3 => Self::RetryLimit,
            _ => return None,
        })
    }
}

/// Encoding of `MBOX_STATUS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MailboxStatus {
    /// Result code of the call.
    pub code: ErrorCode,
    /// The call has completed.
    pub done: bool,
    /// Sequence number of the call.
    pub seq: u32,
}

impl MailboxStatus {
    /// Pack into the register value.
    pub const fn to_reg(self) -> u64 {
        (self.code as u64) | ((self.done as u64) << 16) | ((self.seq as u64) << 32)
    }

    /// Unpack a register value; unknown codes read as [`ErrorCode::BadConfig`].
    pub const fn from_reg(v: u64) -> Self {
        let code = match ErrorCode::from_u16(v as u16) {
            Some(c) => c,
            None => ErrorCode::BadConfig,
        };
        Self {
            code,
            done: (v >> 16) & 1 == 1,
            seq: (v >> 32) as u32,
        }
    }
}

/// Pack `MBOX_CMD`.
pub const fn mailbox_cmd(op: MailboxOp, seq: u32) -> u64 {
    (op as u64) | ((seq as u64) << 32)
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

/// Table sizes reported in `GEOMETRY`: bits 7:0 contexts, 23:8 events per
/// context, 31:24 regions, 47:32 max nodes, 55:48 DMA slots, 63:56 tx window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Hardware contexts.
    pub contexts: u8,
    /// Events per context.
    pub events_per_ctx: u16,
    /// Region table entries.
    pub regions: u8,
    /// Largest node count the flow tables cover.
    pub max_nodes: u16,
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
            | ((self.max_nodes as u64) << 32)
            | ((self.dmas as u64) << 48)
            | ((self.tx_window as u64) << 56)
    }

    /// Unpack.
    pub const fn from_reg(v: u64) -> Self {
        Self {
            contexts: v as u8,
            events_per_ctx: (v >> 8) as u16,
            regions: (v >> 24) as u8,
            max_nodes: (v >> 32) as u16,
            dmas: (v >> 48) as u8,
            tx_window: (v >> 56) as u8,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_locates_block_and_cyclic() {
        let block = Capability {
            low_node: 2,
            node_count: 3,
            ranks_per_node: 4,
            ctx_base: 1,
            placement: Placement::Block,
        };
        assert_eq!(block.locate(0), Some((2, 1)));
        assert_eq!(block.locate(5), Some((3, 2)));
        assert_eq!(block.locate(11), Some((4, 4)));
        assert_eq!(block.locate(12), None);
        let cyclic = Capability {
            placement: Placement::Cyclic,
            ..block
        };
        assert_eq!(cyclic.locate(1), Some((3, 1)));
        assert_eq!(cyclic.locate(3), Some((2, 2)));
        assert_eq!(Capability::from_reg(block.to_reg()), Ok(block));
        assert_eq!(Capability::from_reg(cyclic.to_reg()), Ok(cyclic));
    }

    #[test]
    fn capability_rejects_bad_geometry() {
        let bad = Capability {
            low_node: 0,
            node_count: 1,
            ranks_per_node: 16,
            ctx_base: 1,
            placement: Placement::Block,
        };
        assert_eq!(
            Capability::from_reg(bad.to_reg()),
            Err(ErrorCode::BadConfig)
        );
        assert_eq!(
            Capability::from_reg(1 << 60),
            Err(ErrorCode::ReservedNonZero)
        );
        assert_eq!(Capability::from_reg(0), Err(ErrorCode::BadConfig));
    }

    #[test]
    fn context_and_region_configs_round_trip() {
        let ctx = ContextConfig {
            ctx: 3,
            cq_log2: 8,
            err_log2: 4,
            perms: QueuePerms::all(),
            job_key: 0xfeed,
            cq_base: 0x1000,
            err_base: 0x2020,
            cap: Capability {
                low_node: 0,
                node_count: 4,
                ranks_per_node: 4,
                ctx_base: 0,
                placement: Placement::Block,
            },
        };
        assert_eq!(ContextConfig::from_args(ctx.to_args()), Ok(ctx));
        let reg = RegionConfig {
            ctx: 3,
            slot: 63,
            perms: RegionPerms::LOCAL_READ | RegionPerms::REMOTE_WRITE,
            va: 1 << 40,
            len: 4096,
            phys: 0x10_0000,
        };
        assert_eq!(RegionConfig::from_args(reg.to_args()), Ok(reg));
        let wrap = RegionConfig {
            va: u64::MAX,
            ..reg
        };
        assert_eq!(
            RegionConfig::from_args(wrap.to_args()),
            Err(ErrorCode::BadConfig)
        );
    }

    #[test]
    fn context_pages_do_not_overlap_globals() {
        assert_eq!(ctx_reg(0, CQ_TAIL), Some(CTX_PAGE_BASE));
        assert_eq!(
            decode_ctx_reg(ctx_reg(15, ERR_COUNT).unwrap_or(0)),
            Some((15, ERR_COUNT))
        );
        assert_eq!(ctx_reg(16, CQ_TAIL), None);
        assert_eq!(decode_ctx_reg(MBOX_CMD), None);
    }
}
