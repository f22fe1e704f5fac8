//! What a communicator's collectives keep between calls, and the context
//! every collective algorithm runs in.
//!
//! [`CollState`] is reserved when the communicator is created (arena
//! buffers and destination events before any user allocation, so they are
//! symmetric; the node segment; the send/recv barrier's input queue) and
//! carries the sequence numbers every rank advances identically, the
//! schedule executor's pools and cache, and the message-passing barrier's
//! unexpected-message stash. [`Coll`] pairs it with the rank's
//! [`Endpoint`]: the collective layer reaches the NICs only through that
//! endpoint.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;

use crate::arena::SymBuffer;
use crate::endpoint::{DestEvent, Endpoint, InputQueue};
use crate::env::{NoticeWait, WaitHook, WordWatch};
use crate::error::Error;
use crate::sched::tuning::TuningTable;
use crate::sched::{Params, ScheduleSet};
use crate::shm::{NodeShm, SCHED_FLAG_LINES};
use railcoll_fw::abi::MAX_CONTEXTS;
use railcoll_mem::dma_mem::DmaMemory;

/// Bytes of the argument check's slots ([`super::check`]): this rank's
/// signature, then two slots from each neighbour (alternate calls), 48
/// bytes each.
pub(crate) const CHECK_LEN: usize = 240;

/// Arena buffers and events reserved by every communicator at creation
/// (before user allocations, so they are symmetric).
#[derive(Debug)]
pub(crate) struct CollBuffers {
    /// RDMA barrier among all ranks: one 8-byte word per rank.
    pub(crate) flat_words: SymBuffer,
    /// RDMA barrier among node masters: one 8-byte word per node.
    pub(crate) master_words: SymBuffer,
    /// RDMA barrier: the word the barrier number is put from.
    pub(crate) barrier_source: SymBuffer,
    /// Zero-length buffer: the scratch of a schedule that needs none.
    pub(crate) scratch: SymBuffer,
    /// The number of the last switch barrier this rank entered (node
    /// masters), what the barrier without the switch reads.
    pub(crate) switch_entered: SymBuffer,
    /// Where that barrier's gets land.
    pub(crate) switch_seen: SymBuffer,
    /// The revoke notice record ([`super::notice`]): in the cache line of
    /// `switch_seen`, so that reserving it moved no user allocation.
    pub(crate) notices: SymBuffer,
    /// The argument check's slots ([`super::check`]), when it is on.
    pub(crate) checks: Option<SymBuffer>,
    /// The number of the last guarded call this rank entered (the
    /// readiness guard, `sched::persist`): node peers read it here, and
    /// it is what readiness notices carry.
    pub(crate) entered: SymBuffer,
    /// Readiness words: one per rank, where a rank on another node writes
    /// the number of the last guarded call it entered.
    pub(crate) ready_words: SymBuffer,
}

impl CollBuffers {
    fn reserve(ep: &Endpoint) -> Result<Self, Error> {
        let size = ep.size();
        Ok(Self {
            flat_words: ep.alloc_aligned(size * 8, 64)?,
            master_words: ep.alloc_aligned(size * 8, 64)?,
            barrier_source: ep.alloc_aligned(8, 64)?,
            scratch: ep.alloc_aligned(0, 64)?,
            switch_entered: ep.alloc_aligned(8, 64)?,
            switch_seen: ep.alloc_aligned(8, 64)?,
            notices: ep.alloc_aligned(super::notice::NOTICE_LEN, 8)?,
            checks: match ep.config().check {
                true => Some(ep.alloc_aligned(CHECK_LEN, 64)?),
                false => None,
            },
            entered: ep.alloc_aligned(8, 64)?,
            ready_words: ep.alloc_aligned(size * 8, 64)?,
        })
    }
}

/// Collective sequence numbers, advanced identically on every rank.
#[derive(Debug, Default)]
pub(crate) struct CollSeq {
    /// Number of the current RDMA barrier among all ranks (\[GTNP02\]'s
    /// "barrier number").
    pub(crate) flat_barrier: Cell<u64>,
    /// Number of the current RDMA barrier among node masters.
    pub(crate) master_barrier: Cell<u64>,
    /// Number of the current send/recv barrier.
    pub(crate) sendrecv_barrier: Cell<u64>,
    /// Number of the current hardware barrier (wrapping, 32-bit on the wire).
    pub(crate) hw_barrier: Cell<u32>,
    /// Switch barriers before this number run without the switch (one
    /// failed; see `Coll::switch_failed`).
    pub(crate) switch_avoid_until: Cell<u32>,
    /// Collective calls the argument check has seen.
    pub(crate) checked_calls: Cell<u64>,
    /// Guarded calls entered (the readiness guard's numbers).
    pub(crate) entered: Cell<u64>,
}

/// Schedules a communicator caches (persistent collectives reuse theirs).
pub(crate) const CACHE_LIMIT: usize = 256;

/// The schedule executor's per-communicator state.
#[derive(Debug)]
pub(crate) struct ExecState {
    /// Two counter pools, used by alternate calls: a rank can be one call
    /// ahead of another, never two, in a collective where every rank's
    /// completion needs every rank's data (all-gather, all-to-all).
    pub(crate) events: RefCell<[Vec<DestEvent>; 2]>,
    pub(crate) calls: Cell<u64>,
    /// Two scratch buffers, alternating like the counter pools.
    pub(crate) scratch: RefCell<[Option<SymBuffer>; 2]>,
    /// Raises of each schedule flag taken so far, per node peer that
    /// raised them.
    pub(crate) flag_consumed: RefCell<[[u64; MAX_CONTEXTS]; SCHED_FLAG_LINES]>,
    pub(crate) peers: RefCell<Vec<Option<DmaMemory>>>,
    pub(crate) cache: RefCell<HashMap<Params, Arc<ScheduleSet>>>,
    /// The table plain calls choose algorithms by, from the configuration.
    pub(crate) tuning: Arc<TuningTable>,
    /// The collectives in flight, oldest first (`sched::request`).
    pub(crate) in_flight: crate::sched::run::InFlight,
}

impl ExecState {
    fn new(locals: usize, tuning: Arc<TuningTable>) -> Self {
        Self {
            events: RefCell::new([Vec::new(), Vec::new()]),
            calls: Cell::new(0),
            scratch: RefCell::new([None, None]),
            flag_consumed: RefCell::new([[0; MAX_CONTEXTS]; SCHED_FLAG_LINES]),
            peers: RefCell::new(vec![None; locals]),
            cache: RefCell::new(HashMap::new()),
            tuning,
            in_flight: Default::default(),
        }
    }
}

/// Everything a communicator's collectives keep.
#[derive(Debug)]
pub(crate) struct CollState {
    pub(crate) bufs: CollBuffers,
    pub(crate) seq: CollSeq,
    /// The node's shared segment (intra-node phases).
    pub(crate) shm: RefCell<NodeShm>,
    /// The send/recv barrier's input queue.
    pub(crate) barrier_queue: InputQueue,
    /// Barrier messages that arrived before they were waited for.
    pub(crate) unexpected: RefCell<Vec<(usize, u64)>>,
    pub(crate) exec: ExecState,
    /// The rank's wait hook, whose waits end on a revoke notice.
    pub(crate) notice_wait: Arc<NoticeWait>,
}

impl CollState {
    /// Reserve the collectives' buffers and events on `ep` (before any user
    /// allocation), publish this rank's arena in the node directory of
    /// `shm`, and create the barrier queue.
    /// `notice_wait` is the hook `ep` was opened with; it is armed here
    /// with the notice word.
    pub(crate) fn new(
        ep: &Endpoint,
        shm: NodeShm,
        tuning: Arc<TuningTable>,
        notice_wait: Arc<NoticeWait>,
    ) -> Result<Self, Error> {
        let bufs = CollBuffers::reserve(ep)?;
        notice_wait.arm(super::notice::notice_watch(ep.local_memory(&bufs.notices)?));
        {
            let (mem, phys) = ep.arena();
            ep.wait_arc().observer().before_shared_write();
            shm.publish_arena(phys, mem.len())?;
        }
        // Every barrier step carries one 8-byte message; a rank can be one
        // barrier ahead of a partner, so 64 slots never limit progress (a
        // full queue would only delay a sender).
        let barrier_queue = ep.create_queue(64, 8)?;
        Ok(Self {
            bufs,
            seq: CollSeq::default(),
            shm: RefCell::new(shm),
            barrier_queue,
            unexpected: RefCell::new(Vec::new()),
            exec: ExecState::new(ep.topology().ranks_per_node(), tuning),
            notice_wait,
        })
    }

    /// The arena was reset: forget the scratch buffers allocated in it.
    pub(crate) fn forget_scratch(&self) {
        *self.exec.scratch.borrow_mut() = [None, None];
    }
}

/// One rank's collectives: its endpoint and its collective state. Derefs
/// to the endpoint, so algorithms read as the operations they post.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Coll<'a> {
    pub(crate) ep: &'a Endpoint,
    pub(crate) st: &'a CollState,
}

impl Deref for Coll<'_> {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        self.ep
    }
}

/// How far a step may go: wait for what it needs, or only look once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Wait through the wait hook (a blocking call, `wait`).
    Block,
    /// Look once; what is not ready is [`Error::WouldBlock`], after a
    /// poll's worth of time passes for a modeled environment (`test`).
    Poll,
}

/// The shm protocol's blocking and waking, through the rank's wait hook.
pub(crate) struct HookSync {
    hook: Arc<dyn WaitHook>,
    how: Progress,
}

impl crate::shm::Sync for HookSync {
    fn wait(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), Error> {
        await_ready(&*self.hook, self.how, ready)
    }

    fn wake(&self, local: usize) {
        self.hook.wake_local(local);
    }

    fn before_write(&self) {
        self.hook.observer().before_shared_write();
    }
}

/// Wait for `ready` through `hook`, or (polling) look once.
pub(crate) fn await_ready(
    hook: &dyn WaitHook,
    how: Progress,
    ready: &mut dyn FnMut() -> bool,
) -> Result<(), Error> {
    match how {
        Progress::Block => Ok(hook.wait_until(ready)?),
        Progress::Poll if ready() => Ok(()),
        Progress::Poll => {
            hook.observer().idle_poll()?;
            Err(Error::WouldBlock)
        }
    }
}

impl Coll<'_> {
    pub(crate) fn hook_sync(&self, how: Progress) -> HookSync {
        HookSync {
            hook: self.wait_arc(),
            how,
        }
    }

    /// Wait until every watched word passes (or, polling, look once).
    pub(crate) fn await_words(&self, how: Progress, words: &[WordWatch]) -> Result<(), Error> {
        let hook = self.wait_arc();
        match how {
            Progress::Block => Ok(hook.wait_words(words)?),
            Progress::Poll => await_ready(&*hook, how, &mut || words.iter().all(WordWatch::ready)),
        }
    }
}
