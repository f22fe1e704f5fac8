//! The driver: one rank's view of its NICs.
//!
//! Per rail it owns a command ring (`2^cq_log2` 64-byte blocks in DMA
//! memory), an error ring, and shares with the other rails one *control*
//! region (completion words and chain command blocks) and the rank's
//! symmetric *arena*. It attaches the rank's hardware context on every rail
//! through the admin mailbox and maps two regions:
//!
//! | region | virtual base | permissions |
//! |---|---|---|
//! | arena | [`ARENA_VA`] | local and remote read/write |
//! | control | [`CONTROL_VA`] | local read/write only |
//!
//! so that a remote put can reach the arena but never a completion word.
//!
//! Ring protocol (Hubris' descriptor-ring discipline): write the block,
//! release fence, then the doorbell (`CQ_TAIL`); a slot is reused only once
//! `CQ_HEAD` has passed it.
//!
//! Events of a context are split in two halves: the lower half are
//! *destination* events handed out in the same order on every rank (so the
//! same index names "the same" event everywhere), the upper half are
//! *completion* events, each with a completion word, recycled per rail.

use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};

use railcoll_fw::abi::command::{COMMAND_BLOCK_SIZE, Command, CommandBlock, DmaKind};
use railcoll_fw::abi::error::{ErrorInfo, ErrorRecord};
use railcoll_fw::abi::event::{ActionKind, CompletionWord, EventAction, EventId, MAX_WRITE_VALUE};
use railcoll_fw::abi::regs::{
    self, ContextConfig, Geometry, HostRead, HostWrite, MailboxOp, MailboxStatus, QueuePerms,
    ReadOnly, Reg, RegionConfig, RegionPerms, Resources, Status, WriteOnly,
};
use railcoll_fw::abi::ring::Ring;
use railcoll_fw::abi::{ABI_MAJOR, ErrorCode, MAX_REGIONS};
use zerocopy::FromBytes;

use crate::device::{Device, DmaBuffer};
use crate::env::{WaitHook, WordTest, WordWatch};
use crate::error::{Error, out_of_range};
use crate::topology::Topology;
use railcoll_mem::regio::RegisterIo;

pub use crate::arena::ARENA_VA;

mod completion;
mod mailbox;
mod posting;
mod ring;

pub use completion::{Completion, NicError};
pub use mailbox::{alternate_rail, mailbox_call, probe, read_reg, write_reg};
pub use posting::{Feeds, Post, Tracked, with_completion};
/// Virtual base of every rank's control region.
pub const CONTROL_VA: u64 = 0x2000_0000_0000;
/// Chain command blocks per rank.
pub const CHAIN_BLOCKS: usize = 64;
/// Most sets one chained put's firing makes besides starting the put
/// ([`Tracked::Chained`]'s `feeds`).
pub const MAX_FEEDS: usize = 3;
/// Bytes of one chain slot: what one COPY injects at most, a put and its
/// feeds (a relay takes two blocks: the set, then the completion). Within
/// the firmware's multi-block COPY (`MAX_COPY_BLOCKS`).
const CHAIN_SLOT: usize = (1 + MAX_FEEDS) * COMMAND_BLOCK_SIZE;
const _: () = assert!(MAX_FEEDS < railcoll_fw::abi::event::MAX_COPY_BLOCKS as usize);
/// Error records per rail ring (log2).
const ERR_LOG2: u8 = 6;
/// The error ring's geometry.
const ERROR_RING: Ring = match Ring::from_log2(ERR_LOG2 as u32) {
    Ok(r) => r,
    Err(_) => Ring::ONE,
};
/// Bytes of one error record (the ABI's layout, `abi::error`).
const ERROR_RECORD_SIZE: usize = core::mem::size_of::<ErrorRecord>();

/// What one rank may use of its NICs for work that runs without the host
/// (the smallest over its rails): what the schedule verifier's budget is
/// made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicLimits {
    /// Destination events of this rank's context (half its events; the
    /// other half complete posts).
    pub dest_events: u32,
    /// Chained puts this rank can have armed at once: its chain blocks.
    pub chain_blocks: u32,
    /// Entries of each NIC's chain queue (shared by the contexts of the
    /// node's ranks).
    pub chain_queue: u32,
    /// Sibling sets each NIC can hold unread (its `PEER_SET` FIFO, shared
    /// by the node's ranks); 0 where relays cannot run (no sibling path,
    /// or a COPY of one block only).
    pub peer_fifo: u32,
    /// Sets one chained put's firing can make besides the put (its COPY's
    /// blocks but one, at most [`MAX_FEEDS`]); 0 on NICs that COPY one
    /// block only.
    pub feeds: u32,
    /// Completion events of this rank's context on each rail (the other
    /// half of its events): every post in flight holds one per rail.
    pub completion_events: u32,
    /// Nodes each NIC exchanges packets with between resets (slots are not
    /// freed when idle): its flow slots per
    /// direction (`GEOMETRY.peers`, docs/abi.md §8.1).
    pub peers: u32,
}

/// A NIC's identity registers, as read (docs/abi.md §2): what a
/// conformance run checks first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicIdentity {
    /// `ID` (`regs::ID_VALUE` on a railcoll NIC).
    pub id: u64,
    /// `VERSION`: major in bits 31:16, minor in 15:0.
    pub version: u64,
    /// `GEOMETRY`, decoded.
    pub geometry: regs::Geometry,
    /// `LOCATION`: node in bits 15:0, rail in 23:16.
    pub location: u64,
    /// `STATUS`.
    pub status: Status,
    /// `PACKET_SIZE`.
    pub packet_size: u64,
    /// `RESOURCES`, decoded.
    pub resources: regs::Resources,
}

#[derive(Debug)]
struct RailPort {
    /// The command ring's blocks.
    blocks: DmaBuffer,
    /// Its geometry: `tail` and `head` are free-running counters on it.
    ring: Ring,
    errors: DmaBuffer,
    tail: u64,
    /// Tail last written to the doorbell.
    rung: u64,
    head: u64,
    tail_reg: Reg<u64, WriteOnly>,
    head_reg: Reg<u64, ReadOnly>,
    err_count_reg: Reg<u64, ReadOnly>,
    errors_seen: u64,
    /// Free completion events.
    free_events: Vec<u32>,
}

/// Most rails a rank drives.
pub const MAX_RAILS: usize = crate::stripe::MAX_RAILS;

/// Settings of a driver instance.
#[derive(Clone, Copy, Debug)]
pub struct DriverConfig {
    /// Job shape (for the capability).
    pub topology: Topology,
    /// This rank.
    pub rank: usize,
    /// Rails to use (`1..=device.rails()`).
    pub rails: usize,
    /// Arena size in bytes.
    pub arena_size: usize,
    /// Job key carried by every packet.
    pub job_key: u32,
    /// log2 of command ring entries.
    pub cq_log2: u8,
}

/// One rank's driver. Not `Sync`: a rank drives it from one thread.
pub struct Driver {
    device: Arc<dyn Device>,
    wait: Arc<dyn WaitHook>,
    ctx: u8,
    ports: Vec<RailPort>,
    control: DmaBuffer,
    arena: DmaBuffer,
    events_per_ctx: u32,
    dest_events: u32,
    chain_queue: u32,
    peer_fifo: u32,
    feeds: u32,
    peers: u32,
    next_dest_event: u32,
    /// Destination events at and above this index belong to communicator
    /// slots (`crate::comm_slots`): the bump allocation stops below.
    dest_limit: u32,
    /// Generation per (rail, event), for completion words.
    generations: Vec<u64>,
    next_chain_block: usize,
    free_chain_blocks: Vec<usize>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("ctx", &self.ctx)
            .field("rails", &self.ports.len())
            .finish()
    }
}

impl Driver {
    /// Attach the rank's context on every rail and map its regions.
    pub fn open(
        device: Arc<dyn Device>,
        wait: Arc<dyn WaitHook>,
        cfg: DriverConfig,
    ) -> Result<Self, Error> {
        if cfg.rails == 0 || cfg.rails > MAX_RAILS {
            return Err(Error::BadRails(cfg.rails));
        }
        if cfg.rails > device.rails() {
            return Err(Error::NoSuchRail {
                rail: cfg.rails - 1,
                rails: device.rails(),
            });
        }
        if !(1..=16).contains(&cfg.cq_log2) {
            return Err(Error::Config(format!(
                "cq_log2 must be 1..=16, got {}",
                cfg.cq_log2
            )));
        }
        let (_, local) = cfg.topology.locate(cfg.rank)?;
        let ctx = local as u8;
        // The topology keeps `local` below MAX_CONTEXTS, so the context page
        // exists.
        let (Some(tail_reg), Some(head_reg), Some(err_count_reg)) = (
            regs::ctx_reg(ctx, regs::CQ_TAIL),
            regs::ctx_reg(ctx, regs::CQ_HEAD),
            regs::ctx_reg(ctx, regs::ERR_COUNT),
        ) else {
            return Err(Error::Config(format!(
                "context {local} has no context page"
            )));
        };
        let mut events_per_ctx = u32::MAX;
        let mut chain_queue = u32::MAX;
        let mut peer_fifo = u32::MAX;
        let mut feeds = MAX_FEEDS as u32;
        let mut peers = u32::MAX;
        for rail in 0..cfg.rails {
            let (geo, resources) = probe(device.registers(rail)?)?;
            events_per_ctx = events_per_ctx.min(geo.events_per_ctx as u32);
            chain_queue = chain_queue.min(u32::from(resources.chain_depth));
            let relays = if resources.copy_blocks >= 2 {
                u32::from(resources.peer_fifo)
            } else {
                0
            };
            peer_fifo = peer_fifo.min(relays);
            feeds = feeds.min(u32::from(resources.copy_blocks).saturating_sub(1));
            peers = peers.min(u32::from(geo.peers));
        }
        if events_per_ctx < 4 {
            return Err(Error::Config(format!(
                "NIC has only {events_per_ctx} events per context"
            )));
        }
        let dest_events = events_per_ctx / 2;
        let words_len = cfg.rails * events_per_ctx as usize * 8;
        let control = device.alloc_dma(words_len + CHAIN_BLOCKS * CHAIN_SLOT, 4096)?;
        let arena = device.alloc_dma(cfg.arena_size.max(64), 4096)?;
        let ring = Ring::from_log2(u32::from(cfg.cq_log2))
            .map_err(|e| Error::Config(format!("command ring of 2^{}: {e:?}", cfg.cq_log2)))?;
        let mut ports = Vec::with_capacity(cfg.rails);
        for _ in 0..cfg.rails {
            let blocks = device.alloc_dma(ring.entries() as usize * COMMAND_BLOCK_SIZE, 64)?;
            let errors = device.alloc_dma(ERROR_RING.entries() as usize * ERROR_RECORD_SIZE, 64)?;
            ports.push(RailPort {
                blocks,
                ring,
                errors,
                tail: 0,
                rung: 0,
                head: 0,
                tail_reg,
                head_reg,
                err_count_reg,
                errors_seen: 0,
                free_events: (dest_events..events_per_ctx).rev().collect(),
            });
        }
        {
            let _admin = device.admin_lock()?;
            for (rail, port) in ports.iter().enumerate() {
                let regs = device.registers(rail)?;
                let nic = |e: Error| match e {
                    Error::Nic { code, .. } => Error::Nic { rail, code },
                    other => other,
                };
                let ctx_cfg = ContextConfig {
                    ctx,
                    cq_log2: cfg.cq_log2,
                    err_log2: ERR_LOG2,
                    perms: QueuePerms::all(),
                    job_key: cfg.job_key,
                    cq_base: port.blocks.phys,
                    err_base: port.errors.phys,
                    cap: cfg.topology.capability(),
                };
                mailbox_call(regs, &*wait, MailboxOp::AttachContext, ctx_cfg.to_args())
                    .map_err(nic)?;
                let slot = (ctx as usize * 4) % MAX_REGIONS;
                let arena_region = RegionConfig {
                    ctx,
                    slot: slot as u8,
                    perms: RegionPerms::all(),
                    va: ARENA_VA,
                    len: arena.mem.len() as u64,
                    phys: arena.phys,
                };
                mailbox_call(regs, &*wait, MailboxOp::MapRegion, arena_region.to_args())
                    .map_err(nic)?;
                let control_region = RegionConfig {
                    ctx,
                    slot: slot as u8 + 1,
                    perms: RegionPerms::LOCAL_READ | RegionPerms::LOCAL_WRITE,
                    va: CONTROL_VA,
                    len: control.mem.len() as u64,
                    phys: control.phys,
                };
                mailbox_call(regs, &*wait, MailboxOp::MapRegion, control_region.to_args())
                    .map_err(nic)?;
            }
        }
        Ok(Self {
            device,
            wait,
            ctx,
            ports,
            control,
            arena,
            events_per_ctx,
            dest_events,
            chain_queue,
            peer_fifo,
            feeds,
            peers,
            next_dest_event: 0,
            dest_limit: dest_events,
            generations: vec![0; cfg.rails * events_per_ctx as usize],
            next_chain_block: 0,
            free_chain_blocks: Vec::new(),
        })
    }

    /// Rails in use.
    pub fn rails(&self) -> usize {
        self.ports.len()
    }

    /// What this rank may use of its NICs without the host.
    pub fn nic_limits(&self) -> NicLimits {
        NicLimits {
            dest_events: self.dest_events,
            chain_blocks: CHAIN_BLOCKS as u32,
            chain_queue: self.chain_queue,
            peer_fifo: self.peer_fifo,
            feeds: self.feeds,
            completion_events: self.events_per_ctx - self.dest_events,
            peers: self.peers,
        }
    }

    /// Hardware context of this rank.
    pub fn context(&self) -> u8 {
        self.ctx
    }

    /// The arena's memory.
    pub fn arena(&self) -> &DmaBuffer {
        &self.arena
    }

    /// The CPU view of a node peer's DMA memory (see [`Device::dma_view`]).
    pub fn dma_view(
        &self,
        phys: u64,
        len: usize,
    ) -> Result<railcoll_mem::dma_mem::DmaMemory, Error> {
        Ok(self.device.dma_view(phys, len)?)
    }

    /// The wait hook, shared.
    pub fn wait_arc(&self) -> Arc<dyn WaitHook> {
        Arc::clone(&self.wait)
    }

    /// The wait hook.
    pub fn wait_hook(&self) -> &dyn WaitHook {
        &*self.wait
    }

    /// Events per context on the NICs.
    pub fn events_per_ctx(&self) -> u32 {
        self.events_per_ctx
    }

    /// What the NIC on `rail` says of itself in BAR0 (docs/abi.md §2).
    pub fn identity(&self, rail: usize) -> Result<NicIdentity, Error> {
        let io = self.regs(rail)?;
        Ok(NicIdentity {
            id: read_reg(io, regs::ID),
            version: read_reg(io, regs::VERSION),
            geometry: regs::Geometry::from_reg(read_reg(io, regs::GEOMETRY)),
            location: read_reg(io, regs::LOCATION),
            status: Status::from_bits_retain(read_reg(io, regs::STATUS)),
            packet_size: read_reg(io, regs::PACKET_SIZE),
            resources: regs::Resources::from_reg(read_reg(io, regs::RESOURCES)),
        })
    }

    /// The `STATUS` register of the NIC on `rail`.
    pub fn status(&self, rail: usize) -> Result<Status, Error> {
        Ok(Status::from_bits_retain(read_reg(
            self.regs(rail)?,
            regs::STATUS,
        )))
    }

    /// Destination events: (handed out from the bottom so far, all).
    pub(crate) fn dest_event_use(&self) -> (u32, u32) {
        (self.next_dest_event, self.dest_events)
    }

    /// Bottom-up allocation stops below `limit`.
    pub(crate) fn set_dest_limit(&mut self, limit: u32) {
        self.dest_limit = limit;
    }

    /// Allocate the next symmetric destination event index.
    pub fn alloc_dest_event(&mut self) -> Result<EventId, Error> {
        if self.next_dest_event >= self.dest_limit.min(self.dest_events) {
            return Err(Error::EventsExhausted("destination"));
        }
        let ev = EventId(self.next_dest_event);
        self.next_dest_event += 1;
        Ok(ev)
    }
}

/// Detach calls a closing driver makes while its NIC answers Busy (a DMA
/// of the context still in flight: one whose acknowledgement has not come,
/// as when a revoked communicator abandoned a collective). Each is a
/// mailbox round trip, a few microseconds; enough for a DMA to outlive
/// its retry limit at the reset timeout (docs/abi.md §8.1).
const DETACH_TRIES: u32 = 1 << 20;

impl Drop for Driver {
    fn drop(&mut self) {
        // Detach so that the NIC stops accepting packets for this context,
        // once its DMAs are over: a context left attached would refuse the
        // next attach of its index, and a DMA left in flight would land in
        // the next owner's memory and events.
        // A lock that cannot be taken (its file gone) must not stop the
        // detach: the NICs would keep the context attached.
        let _admin = self.device.admin_lock().ok();
        for rail in 0..self.ports.len() {
            let Ok(regs) = self.device.registers(rail) else {
                continue;
            };
            for _ in 0..DETACH_TRIES {
                let detached = mailbox_call(
                    regs,
                    &*self.wait,
                    MailboxOp::DetachContext,
                    [self.ctx as u64, 0, 0, 0],
                );
                let busy = ErrorCode::Busy;
                if !matches!(detached, Err(Error::Nic { code, .. }) if code == busy) {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use railcoll_fw::abi::command::DmaCommand;

    use super::*;

    fn dma(kind: DmaKind) -> Command {
        Command::Dma(DmaCommand {
            kind,
            len: 8,
            vp: 1,
            src_addr: 0x10,
            dst_addr: 0x20,
            src_event: None,
            dst_event: Some(EventId(3)),
            wake: false,
        })
    }

    #[test]
    fn a_tracked_command_completes_through_the_right_field_and_nothing_else_changes() {
        let ev = EventId(7);
        for kind in [DmaKind::Put, DmaKind::Queued(2)] {
            let Ok(Command::Dma(d)) = with_completion(dma(kind), ev) else {
                panic!("a DMA");
            };
            assert_eq!((d.src_event, d.dst_event), (Some(ev), Some(EventId(3))));
            assert_eq!((d.len, d.vp, d.src_addr, d.dst_addr), (8, 1, 0x10, 0x20));
        }
        let Ok(Command::Dma(get)) = with_completion(dma(DmaKind::Get), ev) else {
            panic!("a DMA");
        };
        assert_eq!((get.src_event, get.dst_event), (None, Some(ev)));
        let bcast = Command::Bcast {
            len: 4,
            low_node: 0,
            high_node: 3,
            src_addr: 1,
            dst_addr: 2,
            src_event: None,
            dst_event: Some(EventId(5)),
        };
        assert_eq!(
            with_completion(bcast, ev),
            Ok(Command::Bcast {
                len: 4,
                low_node: 0,
                high_node: 3,
                src_addr: 1,
                dst_addr: 2,
                src_event: Some(ev),
                dst_event: Some(EventId(5)),
            })
        );
        let barrier = Command::HwBarrier {
            low_node: 0,
            high_node: 1,
            seq: 9,
            tag: 3,
            event: None,
        };
        assert!(matches!(
            with_completion(barrier, ev),
            Ok(Command::HwBarrier {
                seq: 9,
                event: Some(e),
                ..
            }) if e == ev
        ));
        // A command the NIC reports no completion for cannot be tracked.
        let arm = Command::SetEvent {
            event: EventId(1),
            count: 1,
            rail: None,
        };
        assert!(matches!(with_completion(arm, ev), Err(Error::Config(_))));
    }
}
