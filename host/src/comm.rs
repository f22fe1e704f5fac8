//! The communicator: the public, MPI/SHMEM-like API of one rank.
//!
//! ```text
//! let buf = comm.alloc(4096)?;                  // same offset on every rank
//! comm.write_local(&buf, 0, &data)?;
//! let h = comm.put(&buf, peer, &buf)?;          // striped over rails
//! h.wait()?;                                    // source reusable, data delivered
//! ```
//!
//! Completion semantics (elan-semantics §13 rules 4-5):
//! - a put's handle completes when every rail part has been delivered and
//!   acknowledged: the source may be reused and the data is at the target;
//! - a get's handle completes when every part has landed locally;
//! - a target learns of arrivals through a [`DestEvent`] named by the put:
//!   [`Comm::wait_arrivals`] waits for "all parts of these puts" in one call.
//!
//! Every wait goes through the environment's [`WaitHook`].

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use railcoll_fw::abi::MAX_DMA_LEN;
use railcoll_fw::abi::command::{Command, CommandBlock, DmaCommand, DmaKind};
use railcoll_fw::abi::event::EventId;

use crate::arena::{DEFAULT_ALIGN, SymAllocator, SymBuffer};
use crate::device::Device;
use crate::driver::{ARENA_VA, Driver, DriverConfig, NicError};
use crate::env::WaitHook;
use crate::error::Error;
use crate::stripe::{self, Part, RailPolicy};
use crate::topology::Topology;

/// Most rails a communicator drives.
pub const MAX_RAILS: usize = 4;

/// Settings of a communicator.
#[derive(Clone, Copy, Debug)]
pub struct CommConfig {
    /// Job shape.
    pub topology: Topology,
    /// This rank.
    pub rank: usize,
    /// Rails, `1..=4`.
    pub rails: usize,
    /// Symmetric arena size per rank.
    pub arena_size: usize,
    /// Job key.
    pub job_key: u32,
    /// Default rail policy for puts and gets.
    pub policy: RailPolicy,
    /// log2 of command ring entries per rail.
    pub cq_log2: u8,
    /// Sockets per node (multi-leader all-gather: one leader per socket).
    pub sockets: usize,
}

impl CommConfig {
    /// Defaults: 2 rails, 64 MiB arena, striping at 1 KiB, 256-entry rings.
    pub fn new(topology: Topology, rank: usize) -> Self {
        Self {
            topology,
            rank,
            rails: 2,
            arena_size: 64 << 20,
            job_key: 0x5241_494c,
            policy: RailPolicy::default(),
            cq_log2: 8,
            sockets: 1,
        }
    }
}

/// A destination event: the same index on every rank, one NIC event per rail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DestEvent(EventId);

impl DestEvent {
    pub(crate) fn from_id(id: EventId) -> Self {
        DestEvent(id)
    }

    /// The NIC event index.
    pub fn id(&self) -> EventId {
        self.0
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

/// The communicator of one rank. Not `Sync`: one thread drives a rank.
pub struct Comm {
    pub(crate) cfg: CommConfig,
    node: usize,
    driver: RefCell<Driver>,
    alloc: RefCell<SymAllocator>,
    round_robin: Cell<usize>,
    /// The node's shared segment (intra-node phases).
    pub(crate) shm: RefCell<crate::shm::NodeShm>,
    /// Buffers and events the collectives reserve at creation.
    pub(crate) coll: crate::coll::CollBuffers,
    /// Per-communicator collective sequence numbers.
    pub(crate) seq: crate::coll::CollSeq,
    /// Next input queue index (symmetric).
    next_queue: Cell<u8>,
    /// The send/recv barrier's input queue (created with the communicator).
    pub(crate) barrier_queue: std::cell::OnceCell<InputQueue>,
    /// Barrier messages that arrived before they were waited for.
    pub(crate) unexpected: RefCell<Vec<(usize, u64)>>,
    /// State of the schedule executor (counters, scratch, flags, peers,
    /// cached schedules).
    pub(crate) sched: crate::sched::exec::ExecState,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.cfg.rank)
            .field("rails", &self.cfg.rails)
            .finish()
    }
}

/// Completion handle of a put or get. Dropping it waits for completion,
/// because the NIC may still read the source or write the destination.
#[derive(Debug)]
#[must_use = "a transfer is only known complete once its handle is waited on"]
pub struct PutHandle<'c> {
    comm: &'c Comm,
    parts: Vec<(usize, EventId, u64)>,
    layout: Vec<Part>,
    done: bool,
}

impl PutHandle<'_> {
    /// Block until complete; the first NIC error of any part is returned.
    pub fn wait(mut self) -> Result<(), Error> {
        self.finish()
    }

    /// Complete without blocking? `None` while in flight.
    pub fn test(&mut self) -> Option<Result<(), Error>> {
        if self.done {
            return Some(Ok(()));
        }
        {
            let driver = self.comm.driver.borrow();
            if !self
                .parts
                .iter()
                .all(|&(r, e, g)| driver.test_completion(r, e, g).is_some())
            {
                driver.wait_hook().idle_poll();
                return None;
            }
        }
        Some(self.finish())
    }

    /// How the transfer was split over rails.
    pub fn parts(&self) -> &[Part] {
        &self.layout
    }

    fn finish(&mut self) -> Result<(), Error> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        let result = self.comm.driver.borrow().wait_completions(&self.parts);
        let mut driver = self.comm.driver.borrow_mut();
        for &(rail, ev, _) in &self.parts {
            driver.release_completion_event(rail, ev);
        }
        result
    }
}

impl Drop for PutHandle<'_> {
    fn drop(&mut self) {
        let _ = self.finish();
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
}

/// An access outside the arena's DMA memory, as a host error.
fn arena_error(e: crate::dma_mem::OutOfRange) -> Error {
    Error::OutOfBounds {
        what: "the arena",
        offset: e.offset,
        len: e.len,
        limit: e.size,
    }
}

/// Which side of the transfer is remote.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Put,
    Get,
}

impl Comm {
    /// Open the rank's NICs on `device` and set up its arena.
    pub fn new(
        cfg: CommConfig,
        device: Arc<dyn Device>,
        wait: Arc<dyn WaitHook>,
    ) -> Result<Self, Error> {
        let (node, _) = cfg.topology.locate(cfg.rank)?;
        if let RailPolicy::Rail(r) = cfg.policy
            && r >= cfg.rails
        {
            return Err(Error::NoSuchRail {
                rail: r,
                rails: cfg.rails,
            });
        }
        let (_, local) = cfg.topology.locate(cfg.rank)?;
        let segment = device.node_segment(
            u64::from(cfg.job_key),
            crate::shm::NodeShm::segment_len(cfg.topology.ranks_per_node()),
        )?;
        let shm = crate::shm::NodeShm::new(segment, cfg.topology.ranks_per_node(), local)?;
        let driver = Driver::open(
            device,
            wait,
            DriverConfig {
                topology: cfg.topology,
                rank: cfg.rank,
                rails: cfg.rails,
                arena_size: cfg.arena_size,
                job_key: cfg.job_key,
                cq_log2: cfg.cq_log2,
            },
        )?;
        let mut alloc = SymAllocator::new(cfg.arena_size);
        let mut driver = driver;
        // Reserved before any user allocation, so the same on every rank.
        let coll = crate::coll::CollBuffers::reserve(&mut alloc, &mut driver, cfg.topology.size())?;
        let comm = Self {
            cfg,
            node,
            driver: RefCell::new(driver),
            alloc: RefCell::new(alloc),
            round_robin: Cell::new(0),
            shm: RefCell::new(shm),
            coll,
            seq: crate::coll::CollSeq::default(),
            next_queue: Cell::new(0),
            barrier_queue: std::cell::OnceCell::new(),
            unexpected: RefCell::new(Vec::new()),
            sched: crate::sched::exec::ExecState::new(cfg.topology.ranks_per_node()),
        };
        {
            let driver = comm.driver.borrow();
            let arena = driver.arena();
            driver.wait_hook().before_shared_write();
            comm.shm
                .borrow()
                .publish_arena(arena.phys, arena.mem.len())?;
        }
        // Every barrier step carries one 8-byte message; a rank can be one
        // barrier ahead of a partner, so 64 slots never limit progress (a
        // full queue would only delay a sender).
        let queue = comm.create_queue(64, 8)?;
        let _ = comm.barrier_queue.set(queue);
        // The communicator's own buffers survive `reset_arena`.
        comm.alloc.borrow_mut().keep();
        Ok(comm)
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
        if rail >= self.cfg.rails {
            return Err(Error::NoSuchRail {
                rail,
                rails: self.cfg.rails,
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
        self.cfg.topology.size()
    }

    /// This rank's node.
    pub fn node(&self) -> usize {
        self.node
    }

    /// Job shape.
    pub fn topology(&self) -> &Topology {
        &self.cfg.topology
    }

    /// Rails in use.
    pub fn rails(&self) -> usize {
        self.cfg.rails
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

    /// Free every user allocation of the arena (all ranks together; the
    /// communicator's own buffers stay).
    pub fn reset_arena(&self) {
        self.alloc.borrow_mut().reset();
        self.sched.forget_scratch();
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
    pub fn local_memory(&self, buf: &SymBuffer) -> Result<crate::dma_mem::DmaMemory, Error> {
        self.driver
            .borrow()
            .arena()
            .mem
            .slice(buf.offset(), buf.len())
            .map_err(arena_error)
    }

    /// Allocate a symmetric destination event (same order on every rank).
    pub fn alloc_dest_event(&self) -> Result<DestEvent, Error> {
        self.driver.borrow_mut().alloc_dest_event().map(DestEvent)
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
            self.cfg.rails,
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
        for p in stripe::plan(policy, self.cfg.rails, src, dst, len, 0) {
            a.add(p.rail, count);
        }
        a
    }

    /// `local` is this rank's buffer; `remote` is `peer`'s. For a put data
    /// flows local -> remote, for a get remote -> local.
    fn transfer(
        &self,
        dir: Direction,
        local: &SymBuffer,
        peer: usize,
        remote: &SymBuffer,
        opts: TransferOptions,
    ) -> Result<PutHandle<'_>, Error> {
        self.check_rank(peer)?;
        let len = local.len();
        if remote.len() != len {
            return Err(Error::OutOfBounds {
                what: "the remote buffer",
                offset: 0,
                len,
                limit: remote.len(),
            });
        }
        if len > MAX_DMA_LEN as usize {
            return Err(Error::TooLarge {
                len,
                max: MAX_DMA_LEN as usize,
            });
        }
        let arena = self.cfg.arena_size;
        for b in [local, remote] {
            if b.offset()
                .checked_add(b.len())
                .is_none_or(|end| end > arena)
            {
                return Err(Error::OutOfBounds {
                    what: "the arena",
                    offset: b.offset(),
                    len: b.len(),
                    limit: arena,
                });
            }
        }
        let policy = opts.policy.unwrap_or(self.cfg.policy);
        if let RailPolicy::Rail(r) = policy {
            self.check_rail(r)?;
        }
        let (src_rank, dst_rank) = match dir {
            Direction::Put => (self.rank(), peer),
            Direction::Get => (peer, self.rank()),
        };
        let rr = self.round_robin.get();
        if policy == RailPolicy::RoundRobin {
            self.round_robin.set(rr.wrapping_add(1));
        }
        let layout = stripe::plan(policy, self.cfg.rails, src_rank, dst_rank, len, rr);
        let mut driver = self.driver.borrow_mut();
        let mut parts = Vec::with_capacity(layout.len());
        for p in &layout {
            let ev = match driver.take_completion_event(p.rail) {
                Ok(ev) => ev,
                Err(e) => {
                    for &(rail, ev, _) in &parts {
                        driver.release_completion_event(rail, ev);
                    }
                    return Err(e);
                }
            };
            let generation = driver.push_arm_write(p.rail, ev, 1)?;
            let local_va = ARENA_VA + (local.offset() + p.offset) as u64;
            let remote_va = ARENA_VA + (remote.offset() + p.offset) as u64;
            let dest = opts.dest_event.map(|d| d.0);
            let cmd = match dir {
                Direction::Put => DmaCommand {
                    kind: DmaKind::Put,
                    len: p.len as u32,
                    vp: peer as u32,
                    src_addr: local_va,
                    dst_addr: remote_va,
                    src_event: Some(ev),
                    dst_event: dest,
                    wake: opts.wake,
                },
                // The completion event is this side's destination event; a
                // user destination event cannot also be set by the same
                // DMA, so gets complete through the handle only.
                Direction::Get => DmaCommand {
                    kind: DmaKind::Get,
                    len: p.len as u32,
                    vp: peer as u32,
                    src_addr: remote_va,
                    dst_addr: local_va,
                    src_event: None,
                    dst_event: Some(ev),
                    wake: false,
                },
            };
            driver.push(p.rail, &Command::Dma(cmd), self.rank() as u32)?;
            parts.push((p.rail, ev, generation));
        }
        for p in &layout {
            driver.ring(p.rail)?;
        }
        drop(driver);
        Ok(PutHandle {
            comm: self,
            parts,
            layout,
            done: false,
        })
    }

    /// Block until `arrivals` parts have set `event` on each rail, then
    /// re-arm it for the next use. Early arrivals are never lost: the NIC
    /// keeps them in the event's count (elan-semantics rule 2).
    pub fn wait_arrivals(&self, event: &DestEvent, arrivals: &Arrivals) -> Result<(), Error> {
        let mut waits = Vec::new();
        {
            let mut driver = self.driver.borrow_mut();
            for (rail, &n) in arrivals.per_rail().iter().enumerate() {
                if n == 0 {
                    continue;
                }
                self.check_rail(rail)?;
                let generation = driver.push_arm_write(rail, event.0, n)?;
                driver.ring(rail)?;
                waits.push((rail, event.0, generation));
            }
        }
        self.driver.borrow().wait_completions(&waits)
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
    /// event's COPY action injects the RUN_DMA, elan-semantics §5.4).
    pub fn chain_put(&self, chain: &ChainedPut) -> Result<(), Error> {
        self.post_chain(chain, None)
    }

    /// Store `chain`'s put as a chain block and arm its trigger; the put
    /// sets `completion` locally (if any) once delivered.
    fn post_chain(&self, chain: &ChainedPut, completion: Option<EventId>) -> Result<(), Error> {
        let ChainedPut {
            trigger,
            rail,
            count,
            src,
            dst_rank,
            dst,
            dst_event,
        } = *chain;
        self.check_rank(dst_rank)?;
        self.check_rail(rail)?;
        if src.len() != dst.len() {
            return Err(Error::OutOfBounds {
                what: "the remote buffer",
                offset: 0,
                len: src.len(),
                limit: dst.len(),
            });
        }
        let block: CommandBlock = Command::Dma(DmaCommand {
            kind: DmaKind::Put,
            len: src.len() as u32,
            vp: dst_rank as u32,
            src_addr: ARENA_VA + src.offset() as u64,
            dst_addr: ARENA_VA + dst.offset() as u64,
            src_event: completion,
            dst_event: dst_event.map(|d| d.0),
            wake: false,
        })
        .emit(self.rank() as u32);
        let mut driver = self.driver.borrow_mut();
        let index = driver.store_chain_block(&block)?;
        driver.push_arm_copy(rail, trigger.0, count, index)?;
        driver.ring(rail)
    }

    /// A put to a raw virtual address in `dst_rank`'s context, on one rail,
    /// with no host-side bounds check: the NIC's receiver-side protection is
    /// the only check. For testing that protection (and for FPGA bring-up);
    /// use [`Comm::put`] otherwise.
    pub fn put_unchecked(
        &self,
        src: &SymBuffer,
        dst_rank: usize,
        dst_va: u64,
        rail: usize,
    ) -> Result<PutHandle<'_>, Error> {
        self.check_rank(dst_rank)?;
        self.check_rail(rail)?;
        let mut driver = self.driver.borrow_mut();
        let ev = driver.take_completion_event(rail)?;
        let generation = driver.push_arm_write(rail, ev, 1)?;
        let cmd = DmaCommand {
            kind: DmaKind::Put,
            len: src.len() as u32,
            vp: dst_rank as u32,
            src_addr: ARENA_VA + src.offset() as u64,
            dst_addr: dst_va,
            src_event: Some(ev),
            dst_event: None,
            wake: false,
        };
        driver.push(rail, &Command::Dma(cmd), self.rank() as u32)?;
        driver.ring(rail)?;
        drop(driver);
        let layout = vec![Part {
            rail,
            offset: 0,
            len: src.len(),
        }];
        Ok(PutHandle {
            comm: self,
            parts: vec![(rail, ev, generation)],
            layout,
            done: false,
        })
    }

    /// Like [`Comm::chain_put`], with a handle that completes when the NIC
    /// has run the chained put and it was delivered.
    pub fn chain_put_tracked(&self, chain: &ChainedPut) -> Result<PutHandle<'_>, Error> {
        self.check_rail(chain.rail)?;
        let (ev, generation) = {
            let mut driver = self.driver.borrow_mut();
            let ev = driver.take_completion_event(chain.rail)?;
            match driver.push_arm_write(chain.rail, ev, 1) {
                Ok(g) => (ev, g),
                Err(e) => {
                    driver.release_completion_event(chain.rail, ev);
                    return Err(e);
                }
            }
        };
        // On failure the armed completion word is never set: the event is
        // lost to this communicator, as after any failed post.
        self.post_chain(chain, Some(ev))?;
        Ok(PutHandle {
            comm: self,
            parts: vec![(chain.rail, ev, generation)],
            layout: vec![Part {
                rail: chain.rail,
                offset: 0,
                len: chain.src.len(),
            }],
            done: false,
        })
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
        let nodes = self.topology().nodes();
        if src.len() != dst.len() {
            return Err(Error::OutOfBounds {
                what: "the broadcast target",
                offset: 0,
                len: src.len(),
                limit: dst.len(),
            });
        }
        let mut driver = self.driver.borrow_mut();
        let ev = driver.take_completion_event(0)?;
        let generation = driver.push_arm_write(0, ev, 1)?;
        let cmd = Command::Bcast {
            len: src.len() as u32,
            low_node: 0,
            high_node: (nodes - 1) as u16,
            src_addr: ARENA_VA + src.offset() as u64,
            dst_addr: ARENA_VA + dst.offset() as u64,
            src_event: Some(ev),
            dst_event: dst_event.map(|d| d.0),
        };
        driver.push(0, &cmd, self.rank() as u32)?;
        driver.ring(0)?;
        drop(driver);
        Ok(PutHandle {
            comm: self,
            parts: vec![(0, ev, generation)],
            layout: vec![Part {
                rail: 0,
                offset: 0,
                len: src.len(),
            }],
            done: false,
        })
    }

    /// The whole local arena's memory.
    pub(crate) fn arena_memory(&self) -> crate::dma_mem::DmaMemory {
        self.driver.borrow().arena().mem.clone()
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

    pub(crate) fn driver_mut(&self) -> std::cell::RefMut<'_, Driver> {
        self.driver.borrow_mut()
    }

    pub(crate) fn driver_ref(&self) -> std::cell::Ref<'_, Driver> {
        self.driver.borrow()
    }

    pub(crate) fn wait_arc(&self) -> Arc<dyn WaitHook> {
        self.driver.borrow().wait_arc()
    }

    /// Wait through the environment's hook (for layers built on top).
    pub fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), Error> {
        Ok(self.driver.borrow().wait_hook().wait_until(ready)?)
    }
}

/// An input queue for queued DMAs (QDMA, elan-semantics rule 7): created
/// collectively (same index and layout on every rank), on rail 0.
#[derive(Debug)]
pub struct InputQueue {
    index: u8,
    buf: SymBuffer,
    slots: u32,
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
        self.slot_size as usize - 8
    }
}

impl Comm {
    /// Create an input queue of `slots` items of up to `max_payload` bytes.
    /// Collective: every rank calls it in the same order. When it returns,
    /// this rank's NIC knows the queue; other ranks may send to it only
    /// after that (a barrier after creating is the usual way): an item for
    /// a queue its target NIC does not know yet fails with `BadEvent`.
    pub fn create_queue(&self, slots: u32, max_payload: usize) -> Result<InputQueue, Error> {
        let index = self.next_queue.get();
        if u32::from(index) >= railcoll_fw::abi::command::MAX_QUEUES {
            return Err(Error::EventsExhausted("input queue"));
        }
        let slot_size = (max_payload + 8).next_multiple_of(8);
        if !(1..=65_536).contains(&slots) || slot_size > 4096 || max_payload == 0 {
            return Err(Error::Config(format!(
                "queues hold 1..=65536 slots of 1..=4088 bytes, asked {slots} x {max_payload}"
            )));
        }
        let buf = self
            .alloc
            .borrow_mut()
            .alloc(64 + slots as usize * slot_size, 64)?;
        self.next_queue.set(index + 1);
        let mut driver = self.driver.borrow_mut();
        let cmd = Command::QueueInit {
            queue: index,
            slots,
            slot_size: slot_size as u32,
            event: None,
            base: ARENA_VA + buf.offset() as u64,
        };
        driver.push(0, &cmd, 0)?;
        driver.fence(0)?;
        Ok(InputQueue {
            index,
            buf,
            slots,
            slot_size: slot_size as u32,
            consumed: Cell::new(0),
        })
    }

    /// Send `src` (at most `queue.max_payload()` bytes) as one item into
    /// `dst_rank`'s queue. The handle completes when the item is in a slot
    /// there; a full queue delays it (the NIC retries), never drops it.
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
        let mut driver = self.driver.borrow_mut();
        let ev = driver.take_completion_event(0)?;
        let generation = driver.push_arm_write(0, ev, 1)?;
        let cmd = DmaCommand {
            kind: DmaKind::Queued(queue.index),
            len: src.len() as u32,
            vp: dst_rank as u32,
            src_addr: ARENA_VA + src.offset() as u64,
            dst_addr: 0,
            src_event: Some(ev),
            dst_event: None,
            wake: false,
        };
        driver.push(0, &Command::Dma(cmd), self.rank() as u32)?;
        driver.ring(0)?;
        drop(driver);
        let layout = vec![Part {
            rail: 0,
            offset: 0,
            len: src.len(),
        }];
        Ok(PutHandle {
            comm: self,
            parts: vec![(0, ev, generation)],
            layout,
            done: false,
        })
    }

    /// Take the next item, blocking until one arrives; its payload is
    /// copied into `out` (which must hold `queue.max_payload()` bytes, or at
    /// least the item).
    pub fn queue_recv(&self, queue: &InputQueue, out: &mut [u8]) -> Result<QueueItem, Error> {
        let mem = self.local_memory(&queue.buf)?;
        let consumed = queue.consumed.get();
        self.wait_until(&mut || {
            mem.load_u64(0, Ordering::Acquire)
                .is_ok_and(|p| p != consumed)
        })?;
        let slot = 64 + (consumed % u64::from(queue.slots)) as usize * queue.slot_size as usize;
        let mut header = [0u8; 8];
        mem.read(slot, &mut header)
            .map_err(|e| crate::driver::out_of_range("the queue", e))?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let node = u16::from_le_bytes([header[4], header[5]]) as usize;
        let src = self.topology().rank_of(node, header[6] as usize)?;
        if len > out.len() {
            return Err(Error::OutOfBounds {
                what: "the receive buffer",
                offset: 0,
                len,
                limit: out.len(),
            });
        }
        mem.read(slot + 8, &mut out[..len])
            .map_err(|e| crate::driver::out_of_range("the queue", e))?;
        // Free the slot: the NIC reads the consumer count when the queue
        // looks full.
        queue.consumed.set(consumed + 1);
        mem.store_u64(8, consumed + 1, Ordering::Release)
            .map_err(|e| crate::driver::out_of_range("the queue", e))?;
        Ok(QueueItem { src, len })
    }
}
