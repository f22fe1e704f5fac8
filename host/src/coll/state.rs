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
use std::rc::{Rc, Weak};
use std::sync::Arc;

use crate::arena::SymBuffer;
use crate::endpoint::{DestEvent, Endpoint, InputQueue};
use crate::env::{NoticeWait, WaitHook, WordWatch};
use crate::error::Error;
use crate::group::Group;
use crate::sched::budget::Budget;
use crate::sched::tuning::TuningTable;
use crate::sched::{Params, ScheduleSet};
use crate::shm::{NodeShm, SCHED_FLAG_LINES};
use crate::slots::Slot;
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
    /// A split's exchange: this rank's record, and every rank's.
    pub(crate) split_send: SymBuffer,
    pub(crate) split_recv: SymBuffer,
}

/// Bytes of a rank's record in a split's exchange (`crate::comm`'s
/// `split`): colour, key, free slots, job rank.
pub(crate) const SPLIT_RECORD: usize = 32;

/// Where a communicator's reserved buffers come from: `(len, align)` to a
/// buffer.
pub(crate) type Reserve<'r> = &'r mut dyn FnMut(usize, usize) -> Result<SymBuffer, Error>;

impl CollBuffers {
    /// Reserve the buffers of a communicator of `size` ranks, in the same
    /// order on every member.
    fn reserve(size: usize, check: bool, alloc: Reserve<'_>) -> Result<Self, Error> {
        Ok(Self {
            flat_words: alloc(size * 8, 64)?,
            master_words: alloc(size * 8, 64)?,
            barrier_source: alloc(8, 64)?,
            scratch: alloc(0, 64)?,
            switch_entered: alloc(8, 64)?,
            switch_seen: alloc(8, 64)?,
            notices: alloc(super::notice::NOTICE_LEN, 8)?,
            checks: match check {
                true => Some(alloc(CHECK_LEN, 64)?),
                false => None,
            },
            entered: alloc(8, 64)?,
            ready_words: alloc(size * 8, 64)?,
            split_send: alloc(SPLIT_RECORD, 64)?,
            split_recv: alloc(size * SPLIT_RECORD, 64)?,
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
    /// What this communicator's schedules may take of its NICs, computed
    /// once ([`nic_share`]) and carried by every set's [`Params`].
    pub(crate) budget: Budget,
    /// The collectives in flight, oldest first (`coll::request`).
    pub(crate) in_flight: super::run::InFlight,
}

impl ExecState {
    fn new(locals: usize, tuning: Arc<TuningTable>, budget: Budget) -> Self {
        Self {
            events: RefCell::new([Vec::new(), Vec::new()]),
            calls: Cell::new(0),
            scratch: RefCell::new([None, None]),
            flag_consumed: RefCell::new([[0; MAX_CONTEXTS]; SCHED_FLAG_LINES]),
            peers: RefCell::new(vec![None; locals]),
            cache: RefCell::new(HashMap::new()),
            tuning,
            budget,
            in_flight: Default::default(),
        }
    }
}

/// What a communicator's schedules may take of the NICs of `ep`: what
/// the NICs' registers offer ([`Budget::for_nic`]); a split
/// communicator's share of it: its slot's counters, and of what a NIC's
/// ranks share (chain queue, sibling FIFO), what its ranks on the node
/// would get were every context of the NIC a rank of it (the compiler
/// divides by the communicator's ranks per node, the NIC by the job's).
fn nic_share(ep: &Endpoint, group: &Group, split: bool) -> Budget {
    let mut nic = Budget::for_nic(ep.nic_limits());
    if split {
        nic.counters = nic.counters.min(crate::slots::SLOT_COUNTERS);
        let mine = group.shape().ranks_per_node() as u32;
        let job = (ep.topology().ranks_per_node() as u32).max(1);
        nic.chain_queue = nic.chain_queue * mine / job;
        nic.peer_fifo = nic.peer_fifo * mine / job;
    }
    nic
}

/// Who a communicator is: its members, and what tells it apart from
/// every other communicator of the job.
#[derive(Debug)]
pub(crate) struct Identity {
    /// Its members and the shape its schedules use.
    pub(crate) group: Group,
    /// The same on every member, different for every communicator of the
    /// job over time (the job's is 0; a split's derives from its parent's,
    /// the parent's split count and its lowest member).
    pub(crate) id: u64,
    /// Its switch barrier group's tag (docs/abi.md §4.5): the job's
    /// [`crate::CommConfig::instance`], mixed with `id` for a split one.
    pub(crate) tag: u32,
}

/// A communicator split off another: its slot (`crate::slots`) and the
/// scratch halves of it.
#[derive(Debug)]
pub(crate) struct SplitResources {
    pub(crate) slot: Slot,
    /// The slot's bytes after the reserved buffers, in two halves (the
    /// executor's alternating scratch).
    pub(crate) scratch: [SymBuffer; 2],
    /// The slot's destination events not yet in the counter pools.
    pub(crate) spare_events: RefCell<Vec<DestEvent>>,
    /// The reserve each slot spans (`CommConfig::comm_reserve`).
    pub(crate) span: usize,
}

/// Everything a communicator's collectives keep.
#[derive(Debug)]
pub(crate) struct CollState {
    pub(crate) who: Identity,
    /// `None` for the job's own communicator.
    pub(crate) split: Option<SplitResources>,
    /// Splits made of this communicator (each member counts the same).
    pub(crate) splits: Cell<u64>,
    /// This communicator's revoke notice word (its waits end on it).
    pub(crate) notice: WordWatch,
    pub(crate) bufs: CollBuffers,
    pub(crate) seq: CollSeq,
    /// The node's shared segment (intra-node phases).
    pub(crate) shm: RefCell<NodeShm>,
    /// The send/recv barrier's input queue (the job's communicator only:
    /// queue numbers are symmetric only in job order).
    pub(crate) barrier_queue: Option<InputQueue>,
    /// Barrier messages that arrived before they were waited for.
    pub(crate) unexpected: RefCell<Vec<(usize, u64)>>,
    pub(crate) exec: ExecState,
    /// The rank's wait hook, whose waits end on a revoke notice.
    pub(crate) notice_wait: Arc<NoticeWait>,
    /// Every communicator of the rank (this one joins once shared).
    pub(crate) family: Family,
}

/// What every communicator of a rank shares with the job's: the tuning
/// table, the wait hook and the family of communicators.
pub(crate) struct Lineage {
    pub(crate) tuning: Arc<TuningTable>,
    pub(crate) notice_wait: Arc<NoticeWait>,
    pub(crate) family: Family,
}

/// Every communicator of a rank: the job's and every one split off it (a
/// dropped one leaves by itself: the family holds them weakly). What must
/// have no collective in flight before the arena they share is reset.
#[derive(Clone, Debug, Default)]
pub(crate) struct Family(Rc<FamilyInner>);

#[derive(Debug, Default)]
struct FamilyInner {
    members: RefCell<Vec<Weak<CollState>>>,
    /// Communicators whose close failed, kept alive: their NICs may still
    /// hold chained puts into the arena, so it is never reset again.
    failed: RefCell<Vec<Rc<CollState>>>,
}

impl Family {
    /// `st` joins (once it is shared: the communicator holds it in an `Rc`).
    pub(crate) fn join(&self, st: &Rc<CollState>) {
        let mut members = self.0.members.borrow_mut();
        members.retain(|m| m.strong_count() > 0);
        members.push(Rc::downgrade(st));
    }

    /// `st`'s close failed: keep it (see [`Family::running`]).
    pub(crate) fn keep_failed(&self, st: &Rc<CollState>) {
        self.0.failed.borrow_mut().push(Rc::clone(st));
    }

    /// A collective in flight on any member, by name; a member whose close
    /// failed counts as one for ever (its NICs may still write the arena).
    pub(crate) fn running(&self) -> Option<&'static str> {
        if !self.0.failed.borrow().is_empty() {
            return Some("a communicator whose close failed");
        }
        self.0
            .members
            .borrow()
            .iter()
            .filter_map(Weak::upgrade)
            .find_map(|m| m.exec.in_flight.running())
    }
}

impl CollState {
    /// The job's own communicator on `ep`: reserve the collectives'
    /// buffers and events (before any user allocation), publish this
    /// rank's arena in the node directory of `shm`, and create the barrier
    /// queue. `notice_wait` is the hook `ep` was opened with; it is armed
    /// here with the notice word.
    pub(crate) fn new(
        ep: &Endpoint,
        shm: NodeShm,
        tuning: Arc<TuningTable>,
        notice_wait: Arc<NoticeWait>,
    ) -> Result<Self, Error> {
        let group = Group::world(ep.config().shape, ep.rank())?;
        let bufs = CollBuffers::reserve(group.size(), ep.config().check, &mut |len, align| {
            ep.alloc_aligned(len, align)
        })?;
        let who = Identity {
            group,
            id: 0,
            tag: ep.config().instance,
        };
        let lineage = Lineage {
            tuning,
            notice_wait,
            family: Family::default(),
        };
        let mut st = Self::assemble(ep, who, None, bufs, shm, lineage)?;
        // Every barrier step carries one 8-byte message; a rank can be one
        // barrier ahead of a partner, so 64 slots never limit progress (a
        // full queue would only delay a sender).
        st.barrier_queue = Some(ep.create_queue(64, 8)?);
        st.notice_wait.arm(st.notice.clone());
        Ok(st)
    }

    /// What a communicator split off this one shares with it: the tuning
    /// table, the rank's wait hook and the family of communicators.
    pub(crate) fn lineage(&self) -> Lineage {
        Lineage {
            tuning: Arc::clone(&self.exec.tuning),
            notice_wait: Arc::clone(&self.notice_wait),
            family: self.family.clone(),
        }
    }

    /// A communicator split off another: `who` its identity, `slot` the
    /// slot its members agreed on (taken on `ep` here), `shm` its node
    /// segment, `lineage` what it shares with its parent.
    pub(crate) fn split_off(
        ep: &Endpoint,
        who: Identity,
        (slot_index, span): (usize, usize),
        shm: NodeShm,
        lineage: Lineage,
    ) -> Result<Self, Error> {
        let slot = ep.take_slot(slot_index, span)?;
        let region = slot.region;
        let inner = RefCell::new(crate::arena::SymAllocator::new(region.len()));
        let carve = |len: usize, align: usize| {
            inner
                .borrow_mut()
                .alloc(len, align)
                .and_then(|b| region.slice(b.offset(), b.len()))
        };
        let reserved = CollBuffers::reserve(who.group.size(), ep.config().check, &mut { carve });
        let bufs = match reserved {
            Ok(b) => b,
            Err(e) => {
                ep.release_slot(slot_index, span);
                return Err(Error::Split(format!(
                    "its buffers for {} ranks do not fit the {span}-byte slot \
                     (CommConfig::comm_reserve): {e}",
                    who.group.size()
                )));
            }
        };
        // What the communicator's words start from: zero (the slot may
        // hold an earlier communicator's, or user data of before an arena
        // reset). The split synchronises its members after this.
        let reserved = inner.borrow().used();
        let cleared = ep.local_memory(&region).and_then(|m| {
            m.fill(0, reserved, 0)
                .map_err(|e| crate::error::out_of_range("the communicator slot", e))
        });
        if let Err(e) = cleared {
            ep.release_slot(slot_index, span);
            return Err(e);
        }
        let rest = inner.borrow().free() / 2 / 64 * 64;
        let scratch = [carve(rest, 64), carve(rest, 64)];
        let (scratch, spare) = match scratch {
            [Ok(a), Ok(b)] => ([a, b], slot.events.clone()),
            _ => ([bufs.scratch, bufs.scratch], slot.events.clone()),
        };
        let split = SplitResources {
            slot,
            scratch,
            spare_events: RefCell::new(spare),
            span,
        };
        Self::assemble(ep, who, Some(split), bufs, shm, lineage).inspect_err(|_| {
            ep.release_slot(slot_index, span);
        })
    }

    fn assemble(
        ep: &Endpoint,
        who: Identity,
        split: Option<SplitResources>,
        bufs: CollBuffers,
        shm: NodeShm,
        lineage: Lineage,
    ) -> Result<Self, Error> {
        let Lineage {
            tuning,
            notice_wait,
            family,
        } = lineage;
        let notice = super::notice::notice_watch(ep.local_memory(&bufs.notices)?);
        {
            let (mem, phys) = ep.arena();
            ep.wait_arc().observer().before_shared_write();
            shm.publish_arena(phys, mem.len())?;
        }
        let locals = who.group.node_size();
        let budget = nic_share(ep, &who.group, split.is_some());
        let exec = ExecState::new(locals, tuning, budget);
        Ok(Self {
            who,
            split,
            splits: Cell::new(0),
            notice,
            bufs,
            seq: CollSeq::default(),
            shm: RefCell::new(shm),
            barrier_queue: None,
            unexpected: RefCell::new(Vec::new()),
            exec,
            notice_wait,
            family,
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
    /// Look once; what is not ready is [`Stop::NotYet`], after a
    /// poll's worth of time passes for a modeled environment (`test`).
    Poll,
}

/// Why a step of progress did not complete: it failed, or, polling, it
/// cannot go on yet. `NotYet` never leaves the executor (`advance_gated`
/// turns it into "not complete": a request's `test` answers so), which is
/// why it is not a variant of the public [`Error`].
#[derive(Debug)]
pub(crate) enum Stop {
    /// The step failed.
    Failed(Error),
    /// Polling, the step must wait: what it began is kept to resume from.
    NotYet,
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

impl From<crate::env::WaitTimeout> for Stop {
    fn from(e: crate::env::WaitTimeout) -> Self {
        Stop::Failed(e.into())
    }
}

impl Stop {
    /// The error of a step run with [`Progress::Block`], which waits
    /// instead of stopping short: `NotYet` there is a bug.
    pub(crate) fn blocking(self) -> Error {
        match self {
            Stop::Failed(e) => e,
            Stop::NotYet => Error::Internal("a blocking step stopped short of its wait".into()),
        }
    }
}

/// The shm protocol's blocking and waking, through the rank's wait hook.
pub(crate) struct HookSync<'a> {
    hook: Arc<dyn WaitHook>,
    how: Progress,
    group: &'a Group,
}

impl crate::shm::Sync for HookSync<'_> {
    type Error = Stop;

    fn wait(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), Stop> {
        await_ready(&*self.hook, self.how, ready)
    }

    fn wake(&self, local: usize) {
        self.hook.wake_local(self.group.job_local(local));
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
) -> Result<(), Stop> {
    match how {
        Progress::Block => Ok(hook.wait_until(ready)?),
        Progress::Poll if ready() => Ok(()),
        Progress::Poll => {
            hook.observer().idle_poll()?;
            Err(Stop::NotYet)
        }
    }
}

impl<'a> Coll<'a> {
    /// This rank in the communicator (shadows the endpoint's job rank).
    pub(crate) fn rank(&self) -> usize {
        self.st.who.group.rank()
    }

    /// The communicator's size (shadows the endpoint's job size).
    pub(crate) fn size(&self) -> usize {
        self.st.who.group.size()
    }

    /// The communicator's members.
    pub(crate) fn group(&self) -> &'a Group {
        &self.st.who.group
    }

    /// The job rank of communicator rank `rank`: what the endpoint's
    /// transfers address.
    pub(crate) fn job_rank(&self, rank: usize) -> Result<usize, Error> {
        self.st.who.group.job_rank(rank)
    }

    /// (job node, local index in the communicator) of `rank`.
    pub(crate) fn locate(&self, rank: usize) -> Result<(usize, usize), Error> {
        self.st.who.group.locate(rank)
    }

    /// Run `f` with the rank's waits ending on this communicator's
    /// revoke notice (a split communicator's own; the job's is the hook's
    /// default).
    pub(crate) fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        match self.st.split {
            Some(_) => self.st.notice_wait.scoped(&self.st.notice, f),
            None => f(),
        }
    }

    /// The send/recv barrier's queue, which only the job's communicator
    /// has.
    pub(crate) fn barrier_queue(&self) -> Result<&'a InputQueue, Error> {
        self.st.barrier_queue.as_ref().ok_or(Error::Unsupported {
            algorithm: crate::sched::Algorithm::SendRecv.name(),
            reason: "its input queue is the job communicator's: queue numbers are \
                     symmetric only in the job's order"
                .into(),
        })
    }

    pub(crate) fn hook_sync(&self, how: Progress) -> HookSync<'a> {
        HookSync {
            group: self.group(),
            hook: self.wait_arc(),
            how,
        }
    }

    /// Wait until every watched word passes (or, polling, look once).
    pub(crate) fn await_words(&self, how: Progress, words: &[WordWatch]) -> Result<(), Stop> {
        let hook = self.wait_arc();
        match how {
            Progress::Block => Ok(hook.wait_words(words)?),
            Progress::Poll => await_ready(&*hook, how, &mut || words.iter().all(WordWatch::ready)),
        }
    }
}
