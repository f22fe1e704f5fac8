//! The RDMA endpoint: one rank's one-sided operations on its NICs.
//!
//! An [`Endpoint`] owns the rank's driver and symmetric arena and offers
//! puts and gets striped over rails, destination events, NIC-chained puts,
//! the switch's broadcast and barrier, queued DMAs into input queues, and
//! notifications. It holds no collective state: the collective layer
//! (`coll`, `sched`) is built on top of it, and [`crate::Comm`] owns one
//! endpoint and the collective state.
//!
//! Completion semantics ([ELAN-SEM §13 rules 4-5]):
//! - a put's handle completes when every rail part has been delivered and
//!   acknowledged: the source may be reused and the data is at the target;
//! - a get's handle completes when every part has landed locally;
//! - a target learns of arrivals through a [`DestEvent`] named by the put:
//!   [`Endpoint::wait_arrivals`] waits for "all parts of these puts" in one
//!   call.
//!
//! Every operation the host waits for is started through one driver call,
//! [`Driver::post_tracked`], which is all or nothing: a post that fails
//! (no event, no chain block, no ring space, a striped transfer whose
//! later part cannot be posted) leaves nothing in flight and every
//! resource it took released. Every length is checked against the NIC's
//! largest transfer ([`MAX_DMA_LEN`]) before it is narrowed for a command.
//! Every wait goes through the environment's [`WaitHook`].

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use railcoll_fw::abi::MAX_DMA_LEN;
use railcoll_fw::abi::command::{Command, CommandBlock, DmaCommand, DmaKind, MAX_QUEUES};
use railcoll_fw::abi::event::EventId;
use railcoll_fw::abi::queue::{QueueHeader, QueueItemHeader, slot_offset};
use railcoll_fw::abi::regs::Status;
use railcoll_fw::abi::ring::Ring;
use zerocopy::{FromZeros, IntoBytes};

use crate::arena::{DEFAULT_ALIGN, SymAllocator, SymBuffer};
use crate::config::CommConfig;
use crate::device::Device;
use crate::driver::{Completion, Driver, DriverConfig, Feeds, MAX_RAILS, NicError, Post, Tracked};
use crate::env::WaitHook;
use crate::error::{Error, out_of_range};
use crate::stripe::{self, Part, RailPolicy};
use crate::topology::Topology;
use railcoll_mem::dma_mem::DmaMemory;

mod chain;
mod handle;
mod queue;
mod switch;
mod transfer;

pub use chain::ChainedPut;
pub(crate) use handle::Posted;
pub use handle::PutHandle;
pub use queue::{InputQueue, QueueItem};
pub use transfer::{ArmedWait, Arrivals, TransferOptions, dma_len};

/// A destination event: the same index on every rank, one NIC event per rail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DestEvent(EventId);

impl DestEvent {
    /// The NIC event index.
    pub fn id(&self) -> EventId {
        self.0
    }

    /// The destination event at index `id`, reserved by other means (a
    /// communicator slot, `crate::slots`).
    pub(crate) fn from_id(id: EventId) -> Self {
        Self(id)
    }
}

/// An access outside the arena's DMA memory, as a host error.
fn arena_error(e: railcoll_mem::dma_mem::OutOfRange) -> Error {
    out_of_range("the arena", e)
}

/// One rank's RDMA endpoint. Not `Sync`: one thread drives a rank.
pub struct Endpoint {
    cfg: CommConfig,
    node: usize,
    pub(crate) driver: RefCell<Driver>,
    pub(crate) alloc: RefCell<SymAllocator>,
    /// Communicator slots taken (`crate::slots`), one bit each.
    pub(crate) slots: Cell<u32>,
    round_robin: Cell<usize>,
    /// Next input queue index (symmetric).
    next_queue: Cell<u8>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("rank", &self.cfg.rank)
            .field("rails", &self.cfg.shape.rails)
            .finish()
    }
}

impl Endpoint {
    /// Open the rank's NICs on `device` and set up its arena.
    pub fn open(
        cfg: CommConfig,
        device: Arc<dyn Device>,
        wait: Arc<dyn WaitHook>,
    ) -> Result<Self, Error> {
        let (node, _) = cfg.shape.topology.locate(cfg.rank)?;
        if let RailPolicy::Rail(r) = cfg.policy
            && r >= cfg.shape.rails
        {
            return Err(Error::NoSuchRail {
                rail: r,
                rails: cfg.shape.rails,
            });
        }
        let driver = Driver::open(
            device,
            wait,
            DriverConfig {
                topology: cfg.shape.topology,
                rank: cfg.rank,
                rails: cfg.shape.rails,
                arena_size: cfg.arena_size,
                job_key: cfg.job_key,
                cq_log2: cfg.cq_log2,
            },
        )?;
        Ok(Self {
            cfg,
            node,
            driver: RefCell::new(driver),
            alloc: RefCell::new(SymAllocator::new(cfg.arena_size)),
            slots: Cell::new(0),
            round_robin: Cell::new(0),
            next_queue: Cell::new(0),
        })
    }

    fn check_rank(&self, rank: usize) -> Result<(), Error> {
        if rank >= self.size() {
            return Err(Error::RankOutOfRange {
                rank,
                size: self.size(),
            });
        }
        Ok(())
    }

    fn check_rail(&self, rail: usize) -> Result<(), Error> {
        if rail >= self.cfg.shape.rails {
            return Err(Error::NoSuchRail {
                rail,
                rails: self.cfg.shape.rails,
            });
        }
        Ok(())
    }

    /// `buf` lies inside the arena.
    fn check_in_arena(&self, buf: &SymBuffer) -> Result<(), Error> {
        let arena = self.cfg.arena_size;
        if buf
            .offset()
            .checked_add(buf.len())
            .is_none_or(|end| end > arena)
        {
            return Err(Error::OutOfBounds {
                what: "the arena",
                offset: buf.offset(),
                len: buf.len(),
                limit: arena,
            });
        }
        Ok(())
    }

    /// `remote` can receive all of `local`.
    fn check_same_len(
        what: &'static str,
        local: &SymBuffer,
        remote: &SymBuffer,
    ) -> Result<(), Error> {
        if local.len() != remote.len() {
            return Err(Error::OutOfBounds {
                what,
                offset: 0,
                len: local.len(),
                limit: remote.len(),
            });
        }
        Ok(())
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.cfg.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.cfg.shape.topology.size()
    }

    /// This rank's node.
    pub fn node(&self) -> usize {
        self.node
    }

    /// Job shape.
    pub fn topology(&self) -> &Topology {
        &self.cfg.shape.topology
    }

    /// Rails in use.
    pub fn rails(&self) -> usize {
        self.cfg.shape.rails
    }

    /// The configuration.
    pub fn config(&self) -> &CommConfig {
        &self.cfg
    }

    /// Allocate `len` bytes of the symmetric arena (cache-line aligned).
    /// Every rank must make the same sequence of calls.
    pub fn alloc(&self, len: usize) -> Result<SymBuffer, Error> {
        self.alloc.borrow_mut().alloc(len, DEFAULT_ALIGN)
    }

    /// Allocate with an explicit alignment (a power of two).
    pub fn alloc_aligned(&self, len: usize, align: usize) -> Result<SymBuffer, Error> {
        self.alloc.borrow_mut().alloc(len, align)
    }

    /// Free every allocation made since [`Endpoint::keep_allocations`].
    pub fn reset_arena(&self) {
        self.alloc.borrow_mut().reset();
    }

    /// Make every allocation so far survive [`Endpoint::reset_arena`] (a
    /// communicator's own buffers).
    pub fn keep_allocations(&self) {
        self.alloc.borrow_mut().keep();
    }

    /// Copy `data` into the local arena at `buf + offset`.
    pub fn write_local(&self, buf: &SymBuffer, offset: usize, data: &[u8]) -> Result<(), Error> {
        let r = buf.slice(offset, data.len())?;
        self.driver
            .borrow()
            .arena()
            .mem
            .write(r.offset(), data)
            .map_err(arena_error)
    }

    /// Copy from the local arena at `buf + offset` into `out`.
    pub fn read_local(&self, buf: &SymBuffer, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        let r = buf.slice(offset, out.len())?;
        self.driver
            .borrow()
            .arena()
            .mem
            .read(r.offset(), out)
            .map_err(arena_error)
    }

    /// The local arena memory of `buf`, for zero-copy use.
    pub fn local_memory(&self, buf: &SymBuffer) -> Result<DmaMemory, Error> {
        self.driver
            .borrow()
            .arena()
            .mem
            .slice(buf.offset(), buf.len())
            .map_err(arena_error)
    }

    /// The whole local arena's memory and its DMA address.
    pub fn arena(&self) -> (DmaMemory, u64) {
        let driver = self.driver.borrow();
        (driver.arena().mem.clone(), driver.arena().phys)
    }

    /// What this rank may use of its NICs without the host (the smallest
    /// over its rails).
    pub fn nic_limits(&self) -> crate::driver::NicLimits {
        self.driver.borrow().nic_limits()
    }

    /// The CPU view of a node peer's DMA memory (see [`Device::dma_view`]).
    pub fn dma_view(&self, phys: u64, len: usize) -> Result<DmaMemory, Error> {
        self.driver.borrow().dma_view(phys, len)
    }

    /// Allocate a symmetric destination event (same order on every rank).
    pub fn alloc_dest_event(&self) -> Result<DestEvent, Error> {
        self.driver.borrow_mut().alloc_dest_event().map(DestEvent)
    }

    /// Free completion events on `rail` (diagnostics: every failed or
    /// completed operation gives its event back).
    pub fn free_completion_events(&self, rail: usize) -> usize {
        self.driver.borrow().free_completion_events(rail)
    }

    /// Free chain blocks (diagnostics).
    pub fn free_chain_blocks(&self) -> usize {
        self.driver.borrow().free_chain_blocks()
    }

    /// The rails whose NIC has flows running through their alternate
    /// rail (`STATUS.MIGRATED`): the rail's direct path stopped answering
    /// and the NIC went round it (docs/abi.md §8.4). Puts posted on such a
    /// rail still complete, exactly once, through its sibling; the NIC
    /// takes the rail back by itself once it answers again.
    pub fn failed_over_rails(&self) -> Result<Vec<usize>, Error> {
        let driver = self.driver.borrow();
        let mut failed = Vec::new();
        for rail in 0..self.rails() {
            if driver.status(rail)?.contains(Status::MIGRATED) {
                failed.push(rail);
            }
        }
        Ok(failed)
    }

    /// What the NIC on `rail` says of itself in its identity registers
    /// (ID, version, geometry, location, status, packet size, resources).
    pub fn nic_identity(&self, rail: usize) -> Result<crate::driver::NicIdentity, Error> {
        self.driver.borrow().identity(rail)
    }

    /// NIC error records reported to this rank since the last call.
    pub fn take_nic_errors(&self) -> Result<Vec<NicError>, Error> {
        self.driver.borrow_mut().take_errors()
    }

    /// Post a raw command block on `rail` (NIC bring-up and fault testing:
    /// the firmware must survive anything posted here).
    pub fn post_raw(&self, rail: usize, block: &CommandBlock) -> Result<(), Error> {
        let mut driver = self.driver.borrow_mut();
        driver.push_block(rail, block)?;
        driver.ring(rail)
    }

    /// The wait hook, shared (for layers built on top).
    pub fn wait_arc(&self) -> Arc<dyn WaitHook> {
        self.driver.borrow().wait_arc()
    }

    /// Wait through the environment's hook (for layers built on top).
    pub fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), Error> {
        Ok(self.driver.borrow().wait_hook().wait_until(ready)?)
    }
}
