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

/// How many parts will set a destination event on each rail.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrivals {
    per_rail: [u32; MAX_RAILS],
}

impl Arrivals {
    /// No arrivals.
    pub fn new() -> Self {
        Self::default()
    }

    /// Count the parts of one transfer.
    pub fn add_parts(&mut self, parts: &[Part]) {
        for p in parts {
            if let Some(c) = self.per_rail.get_mut(p.rail) {
                *c += 1;
            }
        }
    }

    /// Add `n` arrivals on `rail`.
    pub fn add(&mut self, rail: usize, n: u32) {
        if let Some(c) = self.per_rail.get_mut(rail) {
            *c += n;
        }
    }

    /// Add another set of arrivals.
    pub fn merge(&mut self, other: &Arrivals) {
        for (mine, theirs) in self.per_rail.iter_mut().zip(other.per_rail) {
            *mine += theirs;
        }
    }

    /// Per-rail counts.
    pub fn per_rail(&self) -> &[u32; MAX_RAILS] {
        &self.per_rail
    }
}

/// A destination event armed for its arrivals and not yet waited on
/// ([`Endpoint::arm_arrivals`]).
#[derive(Debug)]
#[must_use = "an armed wait is only over once waited or tested complete"]
pub struct ArmedWait {
    waits: Vec<Completion>,
}

/// Options of one put or get.
#[derive(Clone, Copy, Debug, Default)]
pub struct TransferOptions {
    /// Rail policy (default: the communicator's).
    pub policy: Option<RailPolicy>,
    /// Event to set at the destination, once per rail part.
    pub dest_event: Option<DestEvent>,
    /// Wake the destination's host once the data has landed (for targets
    /// that poll the written memory itself).
    pub wake: bool,
}

/// Completion handle of a put, get or other tracked operation. Dropping
/// it waits for completion, because the NIC may still read the source or
/// write the destination.
#[derive(Debug)]
#[must_use = "a transfer is only known complete once its handle is waited on"]
pub struct PutHandle<'e> {
    ep: &'e Endpoint,
    posted: Posted,
}

/// A tracked operation in flight, owned with no borrow of its endpoint:
/// what a run the communicator keeps (a request, even one leaked with
/// `mem::forget`) holds. Settled through the endpoint that posted it
/// ([`Endpoint::settle`]); whoever holds one settles it before the buffers
/// it names are reused (nothing does it on drop).
#[derive(Debug, Default)]
pub(crate) struct Posted {
    parts: Vec<Completion>,
    layout: Vec<Part>,
    done: bool,
}

impl PutHandle<'_> {
    /// Block until complete; the first NIC error of any part is returned.
    pub fn wait(mut self) -> Result<(), Error> {
        self.ep.settle(&mut self.posted, true).unwrap_or(Ok(()))
    }

    /// Complete without blocking? `None` while in flight.
    pub fn test(&mut self) -> Option<Result<(), Error>> {
        self.ep.settle(&mut self.posted, false)
    }

    /// How the transfer was split over rails.
    pub fn parts(&self) -> &[Part] {
        &self.posted.layout
    }

    /// The operation, for a holder that keeps it beyond this borrow (its
    /// completion is then the holder's to settle).
    pub(crate) fn into_posted(mut self) -> Posted {
        // What the handle's drop then settles: nothing.
        let settled = Posted {
            done: true,
            ..Posted::default()
        };
        std::mem::replace(&mut self.posted, settled)
    }
}

impl Drop for PutHandle<'_> {
    fn drop(&mut self) {
        let _ = self.ep.settle(&mut self.posted, true);
    }
}

/// A put that a NIC runs by itself when a destination event fires.
#[derive(Clone, Copy, Debug)]
pub struct ChainedPut {
    /// The local event whose firing starts the put.
    pub trigger: DestEvent,
    /// Rail of the trigger event, and of the put.
    pub rail: usize,
    /// Sets of `trigger` (on `rail`) that start it.
    pub count: u32,
    /// Local source.
    pub src: SymBuffer,
    /// Target rank.
    pub dst_rank: usize,
    /// Target buffer (same length as `src`).
    pub dst: SymBuffer,
    /// Event to set at the target.
    pub dst_event: Option<DestEvent>,
    /// Events this rank's NICs set once each when the put is started, each
    /// on its rail (at most [`crate::driver::MAX_FEEDS`], less one per
    /// other rail of a striped put): how a later chained put's join learns
    /// that this one's trigger fired.
    pub feeds: Feeds,
    /// The put's rails: `RailPolicy::Rail(rail)`, or striped over every
    /// rail above a threshold (the part on `rail` leads: its COPY sets a
    /// trigger of each other part on its sibling NIC, ABI 1.2 §5.1).
    pub policy: RailPolicy,
    /// Events this rank's NICs set once each when the put has completed
    /// (delivered and acknowledged; at most [`crate::driver::MAX_FEEDS`]):
    /// how a later chained put ordered after this one's completion learns
    /// of it. Not for a striped put.
    pub done: Feeds,
}

/// An input queue for queued DMAs (QDMA, [ELAN-SEM §13 rule 7]): created
/// collectively (same index and layout on every rank), on rail 0.
#[derive(Debug)]
pub struct InputQueue {
    index: u8,
    buf: SymBuffer,
    /// Its slots (validated once, when the queue is created).
    ring: Ring,
    slot_size: u32,
    consumed: Cell<u64>,
}

/// One received queue item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueItem {
    /// Sending rank.
    pub src: usize,
    /// Payload bytes copied out.
    pub len: usize,
}

impl InputQueue {
    /// Largest payload one item carries.
    pub fn max_payload(&self) -> usize {
        self.slot_size as usize - QueueItemHeader::SIZE
    }
}

/// `len` as a command's length field: a typed error above the NIC's
/// largest single transfer, never a silent truncation.
pub fn dma_len(len: usize) -> Result<u32, Error> {
    u32::try_from(len)
        .ok()
        .filter(|&l| l <= MAX_DMA_LEN)
        .ok_or(Error::TooLarge {
            len,
            max: MAX_DMA_LEN as usize,
        })
}

/// An access outside the arena's DMA memory, as a host error.
fn arena_error(e: railcoll_mem::dma_mem::OutOfRange) -> Error {
    out_of_range("the arena", e)
}

/// Which side of the transfer is remote.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Put,
    Get,
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

    /// Settle `posted`: `Some` once complete (blocking until then if
    /// `block`), with the first NIC error of any part; `None` while in
    /// flight. Complete, what the parts took goes back to the pools; a part
    /// that never completed (a timeout) may still be armed on its NIC,
    /// with a COPY of its chain blocks, so its events and blocks are kept
    /// out of the pools rather than reused under it.
    pub(crate) fn settle(&self, posted: &mut Posted, block: bool) -> Option<Result<(), Error>> {
        if posted.done {
            return Some(Ok(()));
        }
        if !block {
            // Complete, or the poll given up (what a wait would have got).
            let polled = self.driver.borrow().test_completions(&posted.parts)?;
            if let Err(e @ Error::Timeout(_)) = polled {
                return Some(Err(e));
            }
        }
        posted.done = true;
        let result = self.driver.borrow().wait_completions(&posted.parts);
        let mut driver = self.driver.borrow_mut();
        for c in &posted.parts {
            if driver.test_completion(c).is_some() {
                driver.release(c);
            }
        }
        Some(result)
    }

    /// Post `posts` (all or nothing) and return the handle of their
    /// completions; `layout` is how the caller split the data over rails.
    fn post(&self, posts: &[Post], layout: Vec<Part>) -> Result<PutHandle<'_>, Error> {
        let parts = self
            .driver
            .borrow_mut()
            .post_tracked(posts, self.rank() as u32)?;
        Ok(PutHandle {
            ep: self,
            posted: Posted {
                parts,
                layout,
                done: false,
            },
        })
    }

    /// Post one operation on `rail` moving `len` bytes, tracked.
    fn post_one(&self, rail: usize, what: Tracked, len: usize) -> Result<PutHandle<'_>, Error> {
        self.post(
            &[Post { rail, what }],
            vec![Part {
                rail,
                offset: 0,
                len,
            }],
        )
    }

    /// Put `src` (local) into `dst` on `dst_rank`, with the default policy.
    pub fn put(
        &self,
        src: &SymBuffer,
        dst_rank: usize,
        dst: &SymBuffer,
    ) -> Result<PutHandle<'_>, Error> {
        self.put_with(src, dst_rank, dst, TransferOptions::default())
    }

    /// Put with options (rail policy, destination event).
    pub fn put_with(
        &self,
        src: &SymBuffer,
        dst_rank: usize,
        dst: &SymBuffer,
        opts: TransferOptions,
    ) -> Result<PutHandle<'_>, Error> {
        self.transfer(Direction::Put, src, dst_rank, dst, opts)
    }

    /// Get `src` on `src_rank` into local `dst`, with the default policy.
    pub fn get(
        &self,
        src_rank: usize,
        src: &SymBuffer,
        dst: &SymBuffer,
    ) -> Result<PutHandle<'_>, Error> {
        self.get_with(src_rank, src, dst, TransferOptions::default())
    }

    /// Get with options. A destination event, if given, is set locally.
    pub fn get_with(
        &self,
        src_rank: usize,
        src: &SymBuffer,
        dst: &SymBuffer,
        opts: TransferOptions,
    ) -> Result<PutHandle<'_>, Error> {
        self.transfer(Direction::Get, dst, src_rank, src, opts)
    }

    /// The rail plan of a transfer from `src` to `dst` of `len` bytes under
    /// `policy` (what a target needs to build its [`Arrivals`]).
    pub fn plan(&self, policy: RailPolicy, src: usize, dst: usize, len: usize) -> Vec<Part> {
        stripe::plan(
            policy,
            self.cfg.shape.rails,
            src,
            dst,
            len,
            self.round_robin.get(),
        )
    }

    /// Arrivals at `dst` of `count` puts of `len` bytes each from `src`
    /// under `policy` (not meaningful for round-robin, whose rails depend on
    /// the sender's history: use [`PutHandle::parts`] there).
    pub fn expected_arrivals(
        &self,
        policy: RailPolicy,
        src: usize,
        dst: usize,
        len: usize,
        count: u32,
    ) -> Arrivals {
        let mut a = Arrivals::new();
        for p in stripe::plan(policy, self.cfg.shape.rails, src, dst, len, 0) {
            a.add(p.rail, count);
        }
        a
    }

    /// `local` is this rank's buffer; `remote` is `peer`'s. For a put data
    /// flows local -> remote, for a get remote -> local. Every part is
    /// posted, or none.
    fn transfer(
        &self,
        dir: Direction,
        local: &SymBuffer,
        peer: usize,
        remote: &SymBuffer,
        opts: TransferOptions,
    ) -> Result<PutHandle<'_>, Error> {
        self.check_rank(peer)?;
        Self::check_same_len("the remote buffer", local, remote)?;
        dma_len(local.len())?;
        self.check_in_arena(local)?;
        self.check_in_arena(remote)?;
        let policy = opts.policy.unwrap_or(self.cfg.policy);
        if let RailPolicy::Rail(r) = policy {
            self.check_rail(r)?;
        }
        let (src_rank, dst_rank) = match dir {
            Direction::Put => (self.rank(), peer),
            Direction::Get => (peer, self.rank()),
        };
        let rr = self.round_robin.get();
        let layout = stripe::plan(
            policy,
            self.cfg.shape.rails,
            src_rank,
            dst_rank,
            local.len(),
            rr,
        );
        let dest = opts.dest_event.map(|d| d.0);
        // Each part completes through an event the driver takes for it
        // (`with_completion`): the source event of a put, the destination
        // event of a get (a user destination event cannot also be set by
        // the same DMA, so gets complete through the handle only).
        let posts: Vec<Post> = layout
            .iter()
            .map(|p| -> Result<Post, Error> {
                let len = dma_len(p.len)?;
                let local_va = local.va(p.offset);
                let remote_va = remote.va(p.offset);
                let (kind, src_addr, dst_addr, dst_event, wake) = match dir {
                    Direction::Put => (DmaKind::Put, local_va, remote_va, dest, opts.wake),
                    Direction::Get => (DmaKind::Get, remote_va, local_va, None, false),
                };
                Ok(Post {
                    rail: p.rail,
                    what: Tracked::Now(Command::Dma(DmaCommand {
                        kind,
                        len,
                        vp: peer as u32,
                        src_addr,
                        dst_addr,
                        src_event: None,
                        dst_event,
                        wake,
                    })),
                })
            })
            .collect::<Result<_, _>>()?;
        let handle = self.post(&posts, layout)?;
        if policy == RailPolicy::RoundRobin {
            self.round_robin.set(rr.wrapping_add(1));
        }
        Ok(handle)
    }

    /// Block until `arrivals` parts have set `event` on each rail, then
    /// re-arm it for the next use. Early arrivals are never lost: the NIC
    /// keeps them in the event's count ([ELAN-SEM §13 rule 2]).
    pub fn wait_arrivals(&self, event: &DestEvent, arrivals: &Arrivals) -> Result<(), Error> {
        let armed = self.arm_arrivals(event, arrivals)?;
        self.wait_armed(&armed)
    }

    /// The first half of [`Endpoint::wait_arrivals`]: arm `event` for
    /// `arrivals` on each rail. Complete it with [`Endpoint::wait_armed`]
    /// or [`Endpoint::test_armed`], exactly once.
    pub fn arm_arrivals(&self, event: &DestEvent, arrivals: &Arrivals) -> Result<ArmedWait, Error> {
        let mut waits = Vec::new();
        let mut driver = self.driver.borrow_mut();
        for (rail, &n) in arrivals.per_rail().iter().enumerate() {
            if n == 0 {
                continue;
            }
            self.check_rail(rail)?;
            let generation = driver.push_arm_write(rail, event.0, n)?;
            driver.ring(rail)?;
            waits.push(Completion::of_dest_event(rail, event.0, generation));
        }
        Ok(ArmedWait { waits })
    }

    /// Block until an armed wait's arrivals are all in.
    pub fn wait_armed(&self, armed: &ArmedWait) -> Result<(), Error> {
        self.driver.borrow().wait_completions(&armed.waits)
    }

    /// Are an armed wait's arrivals all in? `None` while some are missing
    /// (a modeled environment lets a poll's worth of time pass).
    pub fn test_armed(&self, armed: &ArmedWait) -> Option<Result<(), Error>> {
        self.driver.borrow().test_completions(&armed.waits)
    }

    /// Tell `dst_rank` something happened: a zero-length put on rail 0 that
    /// sets `event` there once (a flag write, in RDMA terms).
    pub fn notify(
        &self,
        dst_rank: usize,
        event: &DestEvent,
        scratch: &SymBuffer,
    ) -> Result<(), Error> {
        let empty = scratch.slice(0, 0)?;
        self.put_with(
            &empty,
            dst_rank,
            &empty,
            TransferOptions {
                policy: Some(RailPolicy::Rail(0)),
                dest_event: Some(*event),
                wake: false,
            },
        )?
        .wait()
    }

    /// Arrange a [`ChainedPut`]: when its trigger has been set `count` times
    /// on `rail`, this rank's NIC runs the put with no host involvement (the
    /// event's COPY action injects the RUN_DMA, [ELAN-SEM §5.4]). The
    /// handle completes once the NIC has run the put and it was delivered;
    /// the chain block holding the command is reused after that.
    pub fn chain_put(&self, chain: &ChainedPut) -> Result<PutHandle<'_>, Error> {
        let ChainedPut {
            trigger,
            rail,
            count,
            src,
            dst_rank,
            dst,
            dst_event,
            feeds,
            policy,
            done,
        } = *chain;
        self.check_rank(dst_rank)?;
        self.check_rail(rail)?;
        for &(_, to) in feeds.as_slice().iter().chain(done.as_slice()) {
            self.check_rail(usize::from(to))?;
        }
        Self::check_same_len("the remote buffer", &src, &dst)?;
        let len = dma_len(src.len())?;
        self.check_in_arena(&src)?;
        self.check_in_arena(&dst)?;
        let layout = stripe::plan(
            policy,
            self.cfg.shape.rails,
            self.rank(),
            dst_rank,
            len as usize,
            0,
        );
        let dma = |part: &Part| -> Result<Command, Error> {
            Ok(Command::Dma(DmaCommand {
                kind: DmaKind::Put,
                len: dma_len(part.len)?,
                vp: dst_rank as u32,
                src_addr: src.va(part.offset),
                dst_addr: dst.va(part.offset),
                src_event: None,
                dst_event: dst_event.map(|d| d.0),
                wake: false,
            }))
        };
        // The lead's COPY: the put, its feeds and one set per other part;
        // a done put's source COPY: its completion and the done sets.
        let limit = self.driver.borrow().nic_limits().feeds as usize;
        let sets = feeds.as_slice().len() + layout.len().saturating_sub(1);
        if sets > limit || done.as_slice().len() > limit {
            return Err(Error::Config(format!(
                "a chained put makes {} sets when it fires and {} when done; these NICs' COPY takes {limit}",
                sets,
                done.as_slice().len()
            )));
        }
        if layout.len() > 1 && !done.as_slice().is_empty() {
            return Err(Error::Config(
                "a striped chained put completes part by part: it cannot set events when done"
                    .into(),
            ));
        }
        let Some(lead) = layout.iter().position(|p| p.rail == rail) else {
            return Err(Error::Config(format!(
                "a chained put triggered on rail {rail} has no part there ({policy:?})"
            )));
        };
        // Every other part waits for a completion event of its rail lent as
        // its trigger, which the lead's COPY sets on that sibling NIC.
        let mut lent: Vec<(usize, EventId)> = Vec::new();
        let taken = (|| -> Result<Vec<Post>, Error> {
            let mut driver = self.driver.borrow_mut();
            for p in layout.iter().filter(|p| p.rail != rail) {
                lent.push((p.rail, driver.take_completion_event(p.rail)?));
            }
            let mut lead_feeds: Vec<(EventId, u8)> = feeds.as_slice().to_vec();
            lead_feeds.extend(lent.iter().map(|&(r, ev)| (ev, r as u8)));
            let mut lent_iter = lent.iter();
            layout
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let what = if i == lead {
                        Tracked::Chained {
                            trigger: trigger.0,
                            count,
                            command: dma(p)?,
                            feeds: Feeds::new(&lead_feeds)?,
                            done,
                        }
                    } else {
                        let &(_, ev) = lent_iter
                            .next()
                            .ok_or(Error::EventsExhausted("completion"))?;
                        Tracked::Chained {
                            trigger: ev,
                            count: 1,
                            command: dma(p)?,
                            feeds: Feeds::default(),
                            done: Feeds::default(),
                        }
                    };
                    Ok(Post { rail: p.rail, what })
                })
                .collect()
        })();
        let give_back = |lent: &[(usize, EventId)]| {
            let mut driver = self.driver.borrow_mut();
            for &(r, ev) in lent {
                driver.release_completion_event(r, ev);
            }
        };
        let posts = match taken {
            Ok(posts) => posts,
            Err(e) => {
                give_back(&lent);
                return Err(e);
            }
        };
        let mut handle = match self.post(&posts, layout) {
            Ok(h) => h,
            Err(e) => {
                give_back(&lent);
                return Err(e);
            }
        };
        let mut lent_iter = lent.iter();
        for (i, c) in handle.posted.parts.iter_mut().enumerate() {
            if i != lead
                && let Some(&(_, ev)) = lent_iter.next()
            {
                c.lend_trigger(ev);
            }
        }
        Ok(handle)
    }

    /// Arrange a relay: once `trigger` has been set `count` times on rail
    /// `from`, this rank's NIC there sets `into` once on rail `to`: on its
    /// sibling NIC of that rail (ABI 1.2 §5.1), or on itself for `to` =
    /// `from` (a join's feed), with no host involvement. The handle
    /// completes once the relay has run (its chain block is reused then).
    pub fn relay(
        &self,
        trigger: DestEvent,
        count: u32,
        from: usize,
        into: DestEvent,
        to: usize,
    ) -> Result<PutHandle<'_>, Error> {
        self.check_rail(from)?;
        self.check_rail(to)?;
        if from == to && trigger == into {
            return Err(Error::Config(format!(
                "a relay of event {} to itself on rail {from} would fire it again",
                trigger.0.0
            )));
        }
        self.post_one(
            from,
            Tracked::Relay {
                trigger: trigger.0,
                count,
                event: into.0,
                to: to as u8,
            },
            0,
        )
    }

    /// A put to a raw virtual address in `dst_rank`'s context, on one rail,
    /// with no host-side bounds check of the target: the NIC's
    /// receiver-side protection is the only check. For testing that
    /// protection (and for FPGA bring-up); use [`Endpoint::put`] otherwise.
    pub fn put_unchecked(
        &self,
        src: &SymBuffer,
        dst_rank: usize,
        dst_va: u64,
        rail: usize,
    ) -> Result<PutHandle<'_>, Error> {
        self.check_rank(dst_rank)?;
        self.check_rail(rail)?;
        let len = dma_len(src.len())?;
        self.check_in_arena(src)?;
        let src_addr = src.va(0);
        let command = Command::Dma(DmaCommand {
            kind: DmaKind::Put,
            len,
            vp: dst_rank as u32,
            src_addr,
            dst_addr: dst_va,
            src_event: None,
            dst_event: None,
            wake: false,
        });
        self.post_one(rail, Tracked::Now(command), src.len())
    }

    /// Post a hardware broadcast (BCAST_DMA on rail 0) of `src` into `dst`
    /// at the rank with this rank's local index on every other node; each
    /// target's `dst_event` is set once. No readiness handshake: the caller
    /// knows the targets are ready.
    pub fn hw_bcast_post(
        &self,
        src: &SymBuffer,
        dst: &SymBuffer,
        dst_event: Option<DestEvent>,
    ) -> Result<PutHandle<'_>, Error> {
        self.hw_bcast_span_post(self.job_span(), src, dst, dst_event)
    }

    /// [`Endpoint::hw_bcast_post`] to the nodes `span` (lowest, highest)
    /// only: a communicator's.
    pub(crate) fn hw_bcast_span_post(
        &self,
        span: (usize, usize),
        src: &SymBuffer,
        dst: &SymBuffer,
        dst_event: Option<DestEvent>,
    ) -> Result<PutHandle<'_>, Error> {
        Self::check_same_len("the broadcast target", src, dst)?;
        let len = dma_len(src.len())?;
        self.check_in_arena(src)?;
        self.check_in_arena(dst)?;
        let (low_node, high_node) = self.switch_span(span)?;
        let (src_addr, dst_addr) = (src.va(0), dst.va(0));
        let command = Command::Bcast {
            len,
            low_node,
            high_node,
            src_addr,
            dst_addr,
            src_event: None,
            dst_event: dst_event.map(|d| d.0),
        };
        self.post_one(0, Tracked::Now(command), src.len())
    }

    /// The rail switch's combined barrier (HW_BARRIER on rail 0) among the
    /// ranks with this rank's local index on every node, number `seq`
    /// (wrapping, the same on every participant; numbers only move
    /// forward within one `tag`, see [`CommConfig::instance`]): returns
    /// when all have arrived ([ELAN-SEM §13 rule 17]).
    ///
    /// [`CommConfig::instance`]: crate::CommConfig::instance
    pub fn hw_barrier(&self, seq: u32, tag: u32) -> Result<(), Error> {
        self.hw_barrier_post(seq, tag)?.wait()
    }

    /// Post [`Endpoint::hw_barrier`]'s arrival; its handle completes when
    /// every participant has arrived.
    pub fn hw_barrier_post(&self, seq: u32, tag: u32) -> Result<PutHandle<'_>, Error> {
        self.hw_barrier_span_post(self.job_span(), seq, tag)
    }

    /// [`Endpoint::hw_barrier_post`] among the nodes `span` (lowest,
    /// highest) only: a communicator's.
    pub(crate) fn hw_barrier_span_post(
        &self,
        span: (usize, usize),
        seq: u32,
        tag: u32,
    ) -> Result<PutHandle<'_>, Error> {
        let (low_node, high_node) = self.switch_span(span)?;
        let command = Command::HwBarrier {
            low_node,
            high_node,
            seq,
            tag,
            event: None,
        };
        self.post(
            &[Post {
                rail: 0,
                what: Tracked::Now(command),
            }],
            Vec::new(),
        )
    }

    /// The job's nodes, lowest and highest.
    fn job_span(&self) -> (usize, usize) {
        (0, self.topology().nodes().saturating_sub(1))
    }

    /// Nodes `span` as the switch's span operations take them.
    fn switch_span(&self, (low, high): (usize, usize)) -> Result<(u16, u16), Error> {
        let id = |n: usize| {
            u16::try_from(n)
                .map_err(|_| Error::BadShape(format!("node {n} exceeds the switch's node ids")))
        };
        Ok((id(low)?, id(high)?))
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

    /// Create an input queue of `slots` items of up to `max_payload` bytes.
    /// Collective: every rank calls it in the same order. When it returns,
    /// this rank's NIC knows the queue; other ranks may send to it only
    /// after that (a barrier after creating is the usual way): an item for
    /// a queue its target NIC does not know yet fails with `BadEvent`.
    pub fn create_queue(&self, slots: u32, max_payload: usize) -> Result<InputQueue, Error> {
        let index = self.next_queue.get();
        if u32::from(index) >= MAX_QUEUES {
            return Err(Error::EventsExhausted("input queue"));
        }
        let slot_size = (max_payload + QueueItemHeader::SIZE).next_multiple_of(8);
        let ring = Ring::new(u64::from(slots))
            .ok()
            .filter(|_| slots <= 65_536 && slot_size <= 4096 && max_payload > 0)
            .ok_or_else(|| {
                Error::Config(format!(
                    "queues hold 1..=65536 slots of 1..=4088 bytes, asked {slots} x {max_payload}"
                ))
            })?;
        let buf = self.alloc_aligned(QueueHeader::SIZE + slots as usize * slot_size, 64)?;
        // The NIC starts producing at the consumer count it finds in the
        // header: clear what an earlier user of this arena range left.
        self.write_local(&buf, 0, &[0; QueueHeader::SIZE])?;
        self.next_queue.set(index + 1);
        let mut driver = self.driver.borrow_mut();
        let cmd = Command::QueueInit {
            queue: index,
            slots,
            slot_size: slot_size as u32,
            event: None,
            base: buf.va(0),
        };
        driver.push(0, &cmd, 0)?;
        driver.fence(0)?;
        Ok(InputQueue {
            index,
            buf,
            ring,
            slot_size: slot_size as u32,
            consumed: Cell::new(0),
        })
    }

    /// Send `src` (at most `queue.max_payload()` bytes) as one item into
    /// `dst_rank`'s queue. The handle completes when the item is in a slot
    /// there; a full queue, or one not created yet, delays it (the NIC
    /// sends it again, in order), never drops it, for up to the NIC's
    /// queue wait (1 s): then it fails with `QueueFull` or `NoQueue`.
    pub fn queue_send(
        &self,
        queue: &InputQueue,
        dst_rank: usize,
        src: &SymBuffer,
    ) -> Result<PutHandle<'_>, Error> {
        self.check_rank(dst_rank)?;
        if src.len() > queue.max_payload() {
            return Err(Error::TooLarge {
                len: src.len(),
                max: queue.max_payload(),
            });
        }
        let len = dma_len(src.len())?;
        self.check_in_arena(src)?;
        let (index, src_addr) = (queue.index, src.va(0));
        let command = Command::Dma(DmaCommand {
            kind: DmaKind::Queued(index),
            len,
            vp: dst_rank as u32,
            src_addr,
            dst_addr: 0,
            src_event: None,
            dst_event: None,
            wake: false,
        });
        self.post_one(0, Tracked::Now(command), src.len())
    }

    /// Take the next item, blocking until one arrives; its payload is
    /// copied into `out` (which must hold `queue.max_payload()` bytes, or at
    /// least the item).
    pub fn queue_recv(&self, queue: &InputQueue, out: &mut [u8]) -> Result<QueueItem, Error> {
        let mem = self.local_memory(&queue.buf)?;
        let consumed = queue.consumed.get();
        self.wait_until(&mut || queue_filled(&mem, consumed))?;
        self.take_item(queue, &mem, out)
    }

    /// [`Endpoint::queue_recv`] without blocking: `None` if no item has
    /// arrived (a modeled environment lets a poll's worth of time pass).
    pub fn try_queue_recv(
        &self,
        queue: &InputQueue,
        out: &mut [u8],
    ) -> Result<Option<QueueItem>, Error> {
        let mem = self.local_memory(&queue.buf)?;
        if !queue_filled(&mem, queue.consumed.get()) {
            self.driver.borrow().wait_hook().observer().idle_poll()?;
            return Ok(None);
        }
        self.take_item(queue, &mem, out).map(Some)
    }

    /// Copy out the item at the queue's consumer position and free its slot.
    fn take_item(
        &self,
        queue: &InputQueue,
        mem: &DmaMemory,
        out: &mut [u8],
    ) -> Result<QueueItem, Error> {
        let consumed = queue.consumed.get();
        let slot = slot_offset(queue.ring, consumed, queue.slot_size) as usize;
        let mut header = QueueItemHeader::new_zeroed();
        mem.read(slot, header.as_mut_bytes())
            .map_err(|e| out_of_range("the queue", e))?;
        let len = header.len.get() as usize;
        let src = self.topology().rank_of(
            usize::from(header.src_node.get()),
            usize::from(header.src_ctx),
        )?;
        if len > out.len() {
            return Err(Error::OutOfBounds {
                what: "the receive buffer",
                offset: 0,
                len,
                limit: out.len(),
            });
        }
        mem.read(slot + QueueItemHeader::SIZE, &mut out[..len])
            .map_err(|e| out_of_range("the queue", e))?;
        // Free the slot: the NIC reads the consumer count when the queue
        // looks full.
        let next = consumed.wrapping_add(1);
        queue.consumed.set(next);
        mem.store_u64(QueueHeader::CONSUMED, next, Ordering::Release)
            .map_err(|e| out_of_range("the queue", e))?;
        Ok(QueueItem { src, len })
    }
}

/// Has the NIC produced past `consumed` in a queue's header?
fn queue_filled(mem: &DmaMemory, consumed: u64) -> bool {
    mem.load_u64(QueueHeader::PRODUCED, Ordering::Acquire)
        .is_ok_and(|p| p != consumed)
}
