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

/// Read a register the host may read.
pub fn read_reg<A: HostRead>(io: &dyn RegisterIo, reg: Reg<u64, A>) -> u64 {
    io.read(reg.offset())
}

/// Write a register the host may write. A read-only register does not
/// compile, its access type is not [`HostWrite`]:
///
/// ```
/// use railcoll_host::driver::write_reg;
/// use railcoll_host::fw::abi::regs;
/// fn ring(io: &dyn railcoll_host::regio::RegisterIo) {
///     write_reg(io, regs::MBOX_CMD, 0);
/// }
/// ```
///
/// ```compile_fail,E0277
/// use railcoll_host::driver::write_reg;
/// use railcoll_host::fw::abi::regs;
/// fn ring(io: &dyn railcoll_host::regio::RegisterIo) {
///     write_reg(io, regs::MBOX_STATUS, 0);
/// }
/// ```
pub fn write_reg<A: HostWrite>(io: &dyn RegisterIo, reg: Reg<u64, A>, value: u64) {
    io.write(reg.offset(), value);
}

/// The host's failover policy: the rail whose NIC carries rail `rail`'s
/// flows once their direct path stops answering (`SET_PARAM` 5, docs/abi.md
/// §8.4), among `rails` rails: the next one round, so that the load of
/// one dead rail falls on one survivor and every rail has a sibling. None
/// for a single rail.
pub fn alternate_rail(rail: usize, rails: usize) -> Option<usize> {
    (rails > 1 && rail < rails).then(|| (rail + 1) % rails)
}

/// Run one admin mailbox call. The caller holds the device's admin lock.
pub fn mailbox_call(
    regs: &dyn RegisterIo,
    wait: &dyn WaitHook,
    op: MailboxOp,
    args: [u64; 4],
) -> Result<u64, Error> {
    // The next number after the NIC's last completed call: the caller holds
    // the admin lock, so nobody else is between. (Not a process-global
    // counter: that made two emulated clusters in one process perturb each
    // other's register traffic, which modeled mode's determinism check
    // caught.) Never 0, so a fresh NIC's status cannot match.
    let last = MailboxStatus::from_reg(read_reg(regs, regs::MBOX_STATUS)).seq;
    let seq = last.wrapping_add(1).max(1);
    for (reg, a) in regs::MBOX_ARGS.into_iter().zip(args) {
        write_reg(regs, reg, a);
    }
    write_reg(regs, regs::MBOX_CMD, regs::mailbox_cmd(op, seq));
    let mut status = MailboxStatus::from_reg(0);
    wait.wait_until(&mut || {
        status = MailboxStatus::from_reg(read_reg(regs, regs::MBOX_STATUS));
        status.done && status.seq == seq
    })?;
    match status.result {
        Ok(()) => Ok(read_reg(regs, regs::MBOX_RESULT)),
        Err(code) => Err(Error::Nic {
            rail: usize::MAX,
            code,
        }),
    }
}

/// Check a NIC's identity and ABI version, and read its geometry.
pub fn probe(regs: &dyn RegisterIo) -> Result<(Geometry, Resources), Error> {
    let id = read_reg(regs, regs::ID);
    if id != regs::ID_VALUE {
        return Err(Error::AbiMismatch {
            found: id,
            expected: regs::ID_VALUE,
        });
    }
    let version = read_reg(regs, regs::VERSION);
    if (version >> 16) as u16 != ABI_MAJOR {
        return Err(Error::AbiMismatch {
            found: version,
            expected: railcoll_fw::abi::ABI_VERSION as u64,
        });
    }
    Ok((
        Geometry::from_reg(read_reg(regs, regs::GEOMETRY)),
        Resources::from_reg(read_reg(regs, regs::RESOURCES)),
    ))
}

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

/// An operation's completion: the event armed for it on `rail` and the
/// generation its completion word will carry when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// Rail.
    pub rail: usize,
    /// The event.
    pub event: EventId,
    /// The value the event's completion word takes when it fires.
    pub generation: u64,
    /// The chain block holding the command, for a chained post.
    chain_block: Option<usize>,
    /// A completion event of the same rail lent to the post: the trigger
    /// of a part of a striped chained put (set by its lead), or the source
    /// event of a chained put with `done` sets (whose COPY sets `event`
    /// and those).
    trigger: Option<EventId>,
    /// The chain block of that source event's COPY.
    done_block: Option<usize>,
}

impl Completion {
    /// Give `event` (a completion event of this post's rail, lent as its
    /// trigger) back when the post is released.
    pub(crate) fn lend_trigger(&mut self, event: EventId) {
        debug_assert!(self.trigger.is_none(), "one lent event per post");
        self.trigger = Some(event);
    }

    /// A destination event re-armed by [`Driver::push_arm_write`]: the
    /// driver lent nothing for it, so releasing it gives nothing back.
    pub fn of_dest_event(rail: usize, event: EventId, generation: u64) -> Self {
        Self {
            rail,
            event,
            generation,
            chain_block: None,
            trigger: None,
            done_block: None,
        }
    }
}

/// What a tracked post runs (see [`Driver::post_tracked`]).
#[derive(Clone, Copy, Debug)]
pub enum Tracked {
    /// A command from the ring. Its completion field (see
    /// [`with_completion`]) is set to the post's completion event.
    Now(Command),
    /// A command the NIC injects by itself once `trigger` has collected
    /// `count` sets on the post's rail (the event's COPY action); its
    /// completion field is set as for `Now`. The same COPY then sets each
    /// of `feeds` once. With `done` sets, the command completes through a
    /// lent event instead, whose COPY sets the post's completion event and
    /// then each of `done` once: sets made when the put has completed.
    Chained {
        /// The local event that starts it.
        trigger: EventId,
        /// Sets needed.
        count: u32,
        /// The command.
        command: Command,
        /// Events set once after the command is injected, each on its
        /// rail (this NIC's or a sibling's, ABI 1.2 §5.1).
        feeds: Feeds,
        /// Events set once after the command has completed.
        done: Feeds,
    },
    /// Once `trigger` has collected `count` sets on the post's rail, the
    /// NIC sets `event` once on its sibling of rail `to` (ABI 1.2 §5.1),
    /// then the completion event: the event's COPY injects both blocks.
    Relay {
        /// The local event whose sets are relayed.
        trigger: EventId,
        /// Sets needed.
        count: u32,
        /// The event set on the sibling.
        event: EventId,
        /// The sibling's rail.
        to: u8,
    },
    /// Nothing: the completion fires when the NIC reaches it in the ring.
    Marker,
}

/// Up to [`MAX_FEEDS`] (event, rail) pairs a [`Tracked::Chained`] sets
/// when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feeds {
    list: [(EventId, u8); MAX_FEEDS],
    len: u8,
}

impl Default for Feeds {
    fn default() -> Self {
        Self {
            list: [(EventId(0), 0); MAX_FEEDS],
            len: 0,
        }
    }
}

impl Feeds {
    /// `pairs`, or an error if there are more than [`MAX_FEEDS`].
    pub fn new(pairs: &[(EventId, u8)]) -> Result<Self, Error> {
        let mut f = Self::default();
        for &p in pairs {
            let slot = f.list.get_mut(usize::from(f.len)).ok_or_else(|| {
                Error::Config(format!(
                    "a chained put feeds {} events, a chain slot holds {MAX_FEEDS}",
                    pairs.len()
                ))
            })?;
            *slot = p;
            f.len += 1;
        }
        Ok(f)
    }

    /// The pairs.
    pub fn as_slice(&self) -> &[(EventId, u8)] {
        &self.list[..usize::from(self.len)]
    }
}

impl Tracked {
    /// Sets that fire the completion event.
    fn count(&self) -> u32 {
        match self {
            Tracked::Now(_) | Tracked::Chained { .. } | Tracked::Relay { .. } => 1,
            Tracked::Marker => 0,
        }
    }
}

/// `cmd` completing through local event `ev`: the source event of a put or
/// queued DMA and of a switch broadcast (fired once delivered and
/// acknowledged), the destination event of a get (fired once the data has
/// landed here), the event of a switch barrier (fired on release). Any
/// other command has no completion the NIC reports: a typed error.
pub fn with_completion(cmd: Command, ev: EventId) -> Result<Command, Error> {
    Ok(match cmd {
        Command::Dma(mut d) => {
            match d.kind {
                DmaKind::Get => d.dst_event = Some(ev),
                DmaKind::Put | DmaKind::Queued(_) => d.src_event = Some(ev),
            }
            Command::Dma(d)
        }
        Command::Bcast {
            len,
            low_node,
            high_node,
            src_addr,
            dst_addr,
            dst_event,
            ..
        } => Command::Bcast {
            len,
            low_node,
            high_node,
            src_addr,
            dst_addr,
            src_event: Some(ev),
            dst_event,
        },
        Command::HwBarrier {
            low_node,
            high_node,
            seq,
            tag,
            ..
        } => Command::HwBarrier {
            low_node,
            high_node,
            seq,
            tag,
            event: Some(ev),
        },
        other => {
            return Err(Error::Internal(format!(
                "{other:?} has no completion event to track"
            )));
        }
    })
}

/// One post of [`Driver::post_tracked`].
#[derive(Clone, Copy, Debug)]
pub struct Post {
    /// Rail.
    pub rail: usize,
    /// What runs.
    pub what: Tracked,
}

/// A NIC error record, with the rail it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicError {
    /// Rail.
    pub rail: usize,
    /// The record.
    pub info: ErrorInfo,
}

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
            if (geo.max_nodes as usize) < cfg.topology.nodes() {
                return Err(Error::BadShape(format!(
                    "the NIC serves at most {} nodes, the job has {}",
                    geo.max_nodes,
                    cfg.topology.nodes()
                )));
            }
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
            let _admin = device.admin_lock();
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

    /// The `STATUS` register of the NIC on `rail`.
    pub fn status(&self, rail: usize) -> Result<Status, Error> {
        Ok(Status::from_bits_retain(read_reg(
            self.regs(rail)?,
            regs::STATUS,
        )))
    }

    fn regs(&self, rail: usize) -> Result<&dyn RegisterIo, Error> {
        Ok(self.device.registers(rail)?)
    }

    fn port(&mut self, rail: usize) -> Result<&mut RailPort, Error> {
        let rails = self.ports.len();
        self.ports
            .get_mut(rail)
            .ok_or(Error::NoSuchRail { rail, rails })
    }

    /// Wait until rail `rail`'s ring has room for `n` more blocks (first
    /// making what is queued visible, so the NIC can consume it).
    fn wait_space(&mut self, rail: usize, n: u64) -> Result<(), Error> {
        let port = self.port(rail)?;
        let (ring, head, tail, head_reg) = (port.ring, port.head, port.tail, port.head_reg);
        if n > ring.entries() {
            return Err(Error::Config(format!(
                "{n} command blocks do not fit a ring of {}",
                ring.entries()
            )));
        }
        if ring.space(head, tail).is_ok_and(|free| free >= n) {
            return Ok(());
        }
        self.ring(rail)?;
        let regs = self.device.registers(rail)?;
        let mut head = head;
        self.wait.wait_until(&mut || {
            head = read_reg(regs, head_reg);
            ring.space(head, tail).is_ok_and(|free| free >= n)
        })?;
        self.port(rail)?.head = head;
        Ok(())
    }

    /// Write `block` at ring index `index` of rail `rail` (not yet
    /// published: the caller advances the tail).
    fn write_block(&mut self, rail: usize, index: u64, block: &CommandBlock) -> Result<(), Error> {
        let port = self.port(rail)?;
        let offset = port.ring.byte_offset(index, COMMAND_BLOCK_SIZE as u32) as usize;
        port.blocks
            .mem
            .write(offset, &block.to_bytes())
            .map_err(|e| out_of_range("the command ring", e))
    }

    /// Write a command block into rail `rail`'s ring (not yet visible to the
    /// NIC: call [`Driver::ring`]). Waits for ring space if needed.
    pub fn push_block(&mut self, rail: usize, block: &CommandBlock) -> Result<(), Error> {
        self.wait_space(rail, 1)?;
        let tail = self.port(rail)?.tail;
        self.write_block(rail, tail, block)?;
        self.port(rail)?.tail = tail.wrapping_add(1);
        Ok(())
    }

    /// Queue a command (see [`Driver::push_block`]).
    pub fn push(&mut self, rail: usize, cmd: &Command, cookie: u32) -> Result<(), Error> {
        self.push_block(rail, &cmd.emit(cookie))
    }

    /// Ring rail `rail`'s doorbell if commands were queued since last time.
    pub fn ring(&mut self, rail: usize) -> Result<(), Error> {
        let regs = self.device.registers(rail)?;
        let rails = self.ports.len();
        let port = self
            .ports
            .get_mut(rail)
            .ok_or(Error::NoSuchRail { rail, rails })?;
        if port.rung == port.tail {
            return Ok(());
        }
        let (tail, reg) = (port.tail, port.tail_reg);
        port.rung = tail;
        // Blocks must be visible before the NIC sees the new tail.
        fence(Ordering::Release);
        write_reg(regs, reg, tail);
        Ok(())
    }

    /// Ring every rail.
    pub fn ring_all(&mut self) -> Result<(), Error> {
        for rail in 0..self.ports.len() {
            self.ring(rail)?;
        }
        Ok(())
    }

    /// Post commands that each complete through a completion event of
    /// their own: the one way the host starts an operation it will wait
    /// for. All or nothing: either every post is in its ring and rung, or
    /// none is and every event and chain block taken is released (and the
    /// first error is returned).
    ///
    /// Per post, the ring gets `ARM_EVENT(ev, 1, WRITE(word, generation))`
    /// followed by the post's command ([`Tracked::Now`]: completing through
    /// `ev`, [`with_completion`]) or by the `ARM_EVENT` of its trigger whose COPY
    /// action injects the command stored in a chain block
    /// ([`Tracked::Chained`]); a [`Tracked::Marker`] arms `ev` with a
    /// count of 0, so it fires when the NIC reaches it (a fence). Rings
    /// are rung in the order of the posts.
    pub fn post_tracked(&mut self, posts: &[Post], cookie: u32) -> Result<Vec<Completion>, Error> {
        let mut taken: Vec<Completion> = Vec::with_capacity(posts.len());
        let result = self.post_tracked_inner(posts, cookie, &mut taken);
        if result.is_err() {
            for c in &taken {
                self.release(c);
            }
            taken.clear();
        }
        result.map(|()| taken)
    }

    fn post_tracked_inner(
        &mut self,
        posts: &[Post],
        cookie: u32,
        taken: &mut Vec<Completion>,
    ) -> Result<(), Error> {
        // 1. Resources: an event per post, a chain block per chained post.
        for post in posts {
            let event = self.take_completion_event(post.rail)?;
            let mut c = Completion {
                rail: post.rail,
                event,
                generation: 0,
                chain_block: None,
                trigger: None,
                done_block: None,
            };
            if let Tracked::Chained { .. } | Tracked::Relay { .. } = post.what {
                match self.take_chain_block() {
                    Ok(b) => c.chain_block = Some(b),
                    Err(e) => {
                        self.release(&c);
                        return Err(e);
                    }
                }
            }
            // Sets made on completion: a lent source event and the chain
            // block its COPY reads.
            if let Tracked::Chained { done, .. } = &post.what
                && !done.as_slice().is_empty()
            {
                let lent = self.take_completion_event(post.rail).and_then(|ev| {
                    c.trigger = Some(ev);
                    self.take_chain_block()
                });
                match lent {
                    Ok(b) => c.done_block = Some(b),
                    Err(e) => {
                        self.release(&c);
                        return Err(e);
                    }
                }
            }
            taken.push(c);
        }
        // 2. Room in every ring touched (two blocks per post) and its
        // doorbell, before anything is written.
        let mut per_rail = [0u64; MAX_RAILS];
        for post in posts {
            let rails = self.ports.len();
            let slot = per_rail.get_mut(post.rail).ok_or(Error::NoSuchRail {
                rail: post.rail,
                rails,
            })?;
            *slot += match &post.what {
                Tracked::Chained { done, .. } if !done.as_slice().is_empty() => 3,
                _ => 2,
            };
        }
        for (rail, &n) in per_rail.iter().enumerate() {
            if n > 0 {
                self.wait_space(rail, n)?;
                self.device.registers(rail)?;
            }
        }
        // 3. Write; a failure rolls the tails back, so the NIC never sees a
        // partial post.
        let mut tails = [0u64; MAX_RAILS];
        for (saved, port) in tails.iter_mut().zip(&self.ports) {
            *saved = port.tail;
        }
        if let Err(e) = self.write_posts(posts, cookie, taken) {
            for (port, tail) in self.ports.iter_mut().zip(tails) {
                port.tail = tail;
            }
            return Err(e);
        }
        // 4. Publish (every doorbell was checked above).
        for post in posts {
            self.ring(post.rail)?;
        }
        Ok(())
    }

    fn write_posts(
        &mut self,
        posts: &[Post],
        cookie: u32,
        taken: &mut [Completion],
    ) -> Result<(), Error> {
        for (post, c) in posts.iter().zip(taken.iter_mut()) {
            let rail = post.rail;
            let (arm, generation) = self.arm_write_command(rail, c.event, post.what.count())?;
            c.generation = generation;
            // A block to write between the arm and the post's own (the
            // ARM_EVENT of a lent source event).
            let mut before: Option<CommandBlock> = None;
            // One set of `event` on the NIC of rail `to`: this one, or a
            // sibling (ABI 1.2 §5.1).
            let set = |event, to: u8| {
                Command::SetEvent {
                    event,
                    count: 1,
                    rail: (usize::from(to) != rail).then_some(to),
                }
                .emit(cookie)
            };
            let second = match (&post.what, c.chain_block) {
                (Tracked::Now(cmd), _) => Some(with_completion(*cmd, c.event)?.emit(cookie)),
                (
                    Tracked::Chained {
                        trigger,
                        count,
                        command,
                        feeds,
                        done,
                    },
                    Some(block),
                ) => {
                    // With `done` sets the command completes through the
                    // lent event, whose COPY (armed first) sets the
                    // completion event, then `done`.
                    let source = match (c.trigger, c.done_block) {
                        (Some(lent), Some(done_block)) if !done.as_slice().is_empty() => {
                            let mut on_done = vec![set(c.event, rail as u8)];
                            on_done.extend(done.as_slice().iter().map(|&(ev, to)| set(ev, to)));
                            before = Some(self.fill_chain_slot(done_block, &on_done, lent, 1)?);
                            lent
                        }
                        _ => c.event,
                    };
                    let mut blocks = vec![with_completion(*command, source)?.emit(cookie)];
                    blocks.extend(feeds.as_slice().iter().map(|&(ev, to)| set(ev, to)));
                    Some(self.fill_chain_slot(block, &blocks, *trigger, *count)?)
                }
                (
                    Tracked::Relay {
                        trigger,
                        count,
                        event,
                        to,
                    },
                    Some(block),
                ) => {
                    let blocks = [set(*event, *to), set(c.event, rail as u8)];
                    Some(self.fill_chain_slot(block, &blocks, *trigger, *count)?)
                }
                (Tracked::Chained { .. } | Tracked::Relay { .. }, None) => {
                    return Err(Error::EventsExhausted("chain block"));
                }
                (Tracked::Marker, _) => None,
            };
            let tail = self.port(rail)?.tail;
            self.write_block(rail, tail, &arm.emit(0))?;
            let mut next = tail.wrapping_add(1);
            if let Some(block) = before {
                self.write_block(rail, next, &block)?;
                next = next.wrapping_add(1);
            }
            if let Some(block) = second {
                self.write_block(rail, next, &block)?;
                next = next.wrapping_add(1);
            }
            self.port(rail)?.tail = next;
        }
        Ok(())
    }

    /// Give back what a completed (or never posted) tracked post took.
    pub fn release(&mut self, c: &Completion) {
        self.release_completion_event(c.rail, c.event);
        if let Some(t) = c.trigger {
            self.release_completion_event(c.rail, t);
        }
        if let Some(block) = c.done_block {
            self.free_chain_blocks.push(block);
        }
        if let Some(block) = c.chain_block {
            self.free_chain_blocks.push(block);
        }
    }

    /// Free completion events on `rail` (diagnostics: a leak shows here).
    pub fn free_completion_events(&self, rail: usize) -> usize {
        self.ports.get(rail).map_or(0, |p| p.free_events.len())
    }

    /// Free chain blocks (diagnostics).
    pub fn free_chain_blocks(&self) -> usize {
        CHAIN_BLOCKS - self.next_chain_block + self.free_chain_blocks.len()
    }

    /// Take a completion event on `rail`.
    pub fn take_completion_event(&mut self, rail: usize) -> Result<EventId, Error> {
        self.port(rail)?
            .free_events
            .pop()
            .map(EventId)
            .ok_or(Error::EventsExhausted("completion"))
    }

    /// Return a completion event.
    pub fn release_completion_event(&mut self, rail: usize, ev: EventId) {
        if let Ok(port) = self.port(rail) {
            port.free_events.push(ev.0);
        }
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

    fn word_offset(&self, rail: usize, ev: EventId) -> usize {
        (rail * self.events_per_ctx as usize + ev.0 as usize) * 8
    }

    /// The ARM_EVENT that writes a fresh generation into the event's
    /// completion word after `count` sets, and that generation.
    fn arm_write_command(
        &mut self,
        rail: usize,
        ev: EventId,
        count: u32,
    ) -> Result<(Command, u64), Error> {
        let index = rail * self.events_per_ctx as usize + ev.0 as usize;
        let gen_slot = self
            .generations
            .get_mut(index)
            .ok_or(Error::EventsExhausted("any"))?;
        *gen_slot = (*gen_slot % MAX_WRITE_VALUE) + 1;
        let generation = *gen_slot;
        let addr = CONTROL_VA + self.word_offset(rail, ev) as u64;
        let action = EventAction {
            kind: ActionKind::Write {
                addr,
                value: generation,
            },
            wake: true,
        };
        Ok((
            Command::ArmEvent {
                event: ev,
                count,
                action,
            },
            generation,
        ))
    }

    /// Queue an ARM_EVENT that writes a fresh generation into the event's
    /// completion word after `count` sets; returns the generation to wait
    /// for. For destination events, which the driver does not hand out
    /// per operation; completion events go through
    /// [`Driver::post_tracked`].
    pub fn push_arm_write(&mut self, rail: usize, ev: EventId, count: u32) -> Result<u64, Error> {
        let (cmd, generation) = self.arm_write_command(rail, ev, count)?;
        self.push(rail, &cmd, 0)?;
        Ok(generation)
    }

    /// Take a chain block (a command block in the control region that an
    /// event's COPY action injects).
    fn take_chain_block(&mut self) -> Result<usize, Error> {
        match self.free_chain_blocks.pop() {
            Some(i) => Ok(i),
            None if self.next_chain_block < CHAIN_BLOCKS => {
                self.next_chain_block += 1;
                Ok(self.next_chain_block - 1)
            }
            None => Err(Error::EventsExhausted("chain block")),
        }
    }

    /// Write `blocks` into chain slot `index` and return the `ARM_EVENT` of
    /// `trigger` (`count` sets) whose COPY injects them all.
    fn fill_chain_slot(
        &mut self,
        index: usize,
        blocks: &[CommandBlock],
        trigger: EventId,
        count: u32,
    ) -> Result<CommandBlock, Error> {
        if blocks.len() * COMMAND_BLOCK_SIZE > CHAIN_SLOT {
            return Err(Error::Config(format!(
                "{} command blocks do not fit a chain slot",
                blocks.len()
            )));
        }
        let first = self.chain_block_offset(index);
        for (i, block) in blocks.iter().enumerate() {
            self.control
                .mem
                .write(first + i * COMMAND_BLOCK_SIZE, &block.to_bytes())
                .map_err(|e| out_of_range("the control region", e))?;
        }
        let copy = Command::ArmEvent {
            event: trigger,
            count,
            action: EventAction {
                kind: ActionKind::Copy {
                    src: CONTROL_VA + first as u64,
                    blocks: blocks.len() as u8,
                },
                wake: false,
            },
        };
        Ok(copy.emit(0))
    }

    fn chain_block_offset(&self, index: usize) -> usize {
        self.ports.len() * self.events_per_ctx as usize * 8 + index * CHAIN_SLOT
    }

    /// Read an event's completion word.
    pub fn completion_word(&self, rail: usize, ev: EventId) -> CompletionWord {
        let word = self
            .control
            .mem
            .load_u64(self.word_offset(rail, ev), Ordering::Acquire)
            .unwrap_or(0);
        CompletionWord::unpack(word)
    }

    /// Has the event fired with generation `generation`? `Some(outcome)` if
    /// so (a status code that names no error reads as `BadConfig`).
    pub fn test_completion(&self, c: &Completion) -> Option<Result<(), ErrorCode>> {
        let w = self.completion_word(c.rail, c.event);
        (w.value == c.generation).then(|| w.status.unwrap_or(Err(ErrorCode::BadConfig)))
    }

    /// Wait for a set of (rail, event, generation) completions; the first
    /// error is returned after all have completed.
    pub fn wait_completions(&self, parts: &[Completion]) -> Result<(), Error> {
        let watches: Vec<WordWatch> = parts
            .iter()
            .map(|c| WordWatch {
                mem: self.control.mem.clone(),
                offset: self.word_offset(c.rail, c.event),
                mask: MAX_WRITE_VALUE,
                test: WordTest::Equals(c.generation),
            })
            .collect();
        self.wait.wait_words(&watches)?;
        self.first_error(parts)
    }

    /// Have all of `parts` completed? `None` while one has not (a modeled
    /// environment lets a poll's worth of time pass); else how they ended,
    /// or `Error::Timeout` if the environment gave the poll up (nothing
    /// else could complete them: [`HostObserver::idle_poll`]).
    ///
    /// [`HostObserver::idle_poll`]: crate::env::HostObserver::idle_poll
    pub fn test_completions(&self, parts: &[Completion]) -> Option<Result<(), Error>> {
        if parts.iter().all(|c| self.test_completion(c).is_some()) {
            Some(self.first_error(parts))
        } else {
            match self.wait.observer().idle_poll() {
                Ok(()) => None,
                Err(e) => Some(Err(e.into())),
            }
        }
    }

    /// The first error among completed `parts`, or success.
    fn first_error(&self, parts: &[Completion]) -> Result<(), Error> {
        for c in parts {
            if let Some(Err(code)) = self.test_completion(c) {
                return Err(Error::Nic { rail: c.rail, code });
            }
        }
        Ok(())
    }

    /// Wait until the NIC has executed every command queued on `rail` so far
    /// (commands run in order, so a completion armed last fires last).
    pub fn fence(&mut self, rail: usize) -> Result<(), Error> {
        let posted = self.post_tracked(
            &[Post {
                rail,
                what: Tracked::Marker,
            }],
            0,
        )?;
        let result = self.wait_completions(&posted);
        for c in &posted {
            self.release(c);
        }
        result
    }

    /// New NIC error records since the last call, from every rail.
    pub fn take_errors(&mut self) -> Result<Vec<NicError>, Error> {
        let mut out = Vec::new();
        for rail in 0..self.ports.len() {
            let count = read_reg(self.regs(rail)?, self.ports[rail].err_count_reg);
            let port = &mut self.ports[rail];
            // Records older than the ring's size were overwritten.
            for seq in ERROR_RING.unread(port.errors_seen, count).indices() {
                let mut raw = [0u8; ERROR_RECORD_SIZE];
                let offset = ERROR_RING.byte_offset(seq, ERROR_RECORD_SIZE as u32) as usize;
                if port.errors.mem.read(offset, &mut raw).is_ok()
                    && let Ok(rec) = ErrorRecord::read_from_bytes(&raw)
                    && let Some(info) = ErrorInfo::parse(&rec)
                {
                    out.push(NicError { rail, info });
                }
            }
            port.errors_seen = count;
        }
        Ok(out)
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
        let _admin = self.device.admin_lock();
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
