//! The host executor: runs one rank's schedule on the driver and the node
//! segment, and the public collective calls built on it
//! (`Comm::gather`, `allgather`, `alltoall`, `broadcast`, `barrier` and
//! their `_with` forms).
//!
//! Execution is in program order with non-blocking puts: every put is
//! posted as soon as the steps before it have been, so a multi-port step
//! has its k puts (one per rail) in flight together, and the copies that
//! follow a put in the schedule overlap it [QA08 §5.2.2]. A step waits only
//! for the puts it names in `after`, for the counters and flags it names,
//! and, at the end, for every put of the schedule. At most
//! [`MAX_OUTSTANDING`](super::budget::MAX_OUTSTANDING) puts are in flight; beyond that the oldest is
//! completed first (a put's completion never depends on its target's host,
//! so this never deadlocks).
//!
//! Counters map to a pool of symmetric destination events that grows on
//! demand, and scratch to a symmetric buffer; both come in two sets used
//! by alternate calls, so that back-to-back all-gathers or all-to-alls
//! moving the same data need no barrier between them (a rank is at most one
//! call ahead of another there). Flags are counting lines in the node segment, and the executor
//! remembers how many raises of each it has consumed, so flags are never
//! reset between calls. A set that needs neither counters nor scratch (a
//! barrier) takes no turn in that alternation. Barrier numbers only grow
//! ([`crate::coll`]'s `sync`). A failed call leaves that bookkeeping
//! undefined: an error from a collective is fatal to the communicator.

use std::collections::HashMap;
use std::sync::Arc;

use super::budget::Outstanding;
use super::tuning::TuningTable;
use super::*;
use crate::arena::SymBuffer;
use crate::coll::state::{CACHE_LIMIT, Coll};
use crate::endpoint::{Arrivals, ChainedPut, DestEvent, PutHandle, TransferOptions};
use railcoll_mem::dma_mem::DmaMemory;

/// Schedule sets generated in this process, shared by its communicators.
/// A set holds every rank's schedule, so N communicators of one process
/// (emulated ranks) would otherwise generate N identical sets. Weak: a set
/// lives as long as some communicator caches it.
fn shared_schedule(params: &Params) -> Result<Arc<ScheduleSet>, Error> {
    static SHARED: std::sync::Mutex<Option<HashMap<Params, std::sync::Weak<ScheduleSet>>>> =
        std::sync::Mutex::new(None);
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    let map = shared.get_or_insert_with(HashMap::new);
    if let Some(set) = map.get(params).and_then(std::sync::Weak::upgrade) {
        return Ok(set);
    }
    let set = Arc::new(generate(params)?);
    if map.len() >= CACHE_LIMIT {
        map.retain(|_, w| w.strong_count() > 0);
    }
    map.insert(*params, Arc::downgrade(&set));
    Ok(set)
}

/// This call's barrier numbers, set by the schedule's
/// [`Op::BarrierNumber`] steps.
#[derive(Debug, Default)]
struct BarrierNumbers {
    flat: Option<u64>,
    masters: Option<u64>,
    queue: Option<u64>,
}

impl BarrierNumbers {
    fn slot(&mut self, which: Numbers) -> &mut Option<u64> {
        match which {
            Numbers::Words(Words::Flat) => &mut self.flat,
            Numbers::Words(Words::Masters) => &mut self.masters,
            Numbers::Queue => &mut self.queue,
        }
    }

    fn set(&mut self, which: Numbers, number: u64) {
        *self.slot(which) = Some(number);
    }

    fn get(&mut self, which: Numbers) -> Result<u64, Error> {
        self.slot(which).ok_or_else(|| {
            Error::Config(format!(
                "a schedule waits for a {which:?} barrier number it never took"
            ))
        })
    }
}

fn region_of(base: &SymBuffer, r: &Region, block: usize) -> Result<SymBuffer, Error> {
    base.slice(r.block as usize * block, r.count as usize * block)
}

fn mem_err(e: railcoll_mem::dma_mem::OutOfRange) -> Error {
    crate::error::out_of_range("a schedule buffer", e)
}

impl Coll<'_> {
    /// The schedules of `collective` with `algorithm` for this
    /// communicator, `block_bytes` per block (cached).
    pub(crate) fn schedule(
        &self,
        collective: Collective,
        algorithm: Choice,
        block_bytes: usize,
        root: usize,
    ) -> Result<Arc<ScheduleSet>, Error> {
        let mut params = Params::new(
            collective,
            algorithm.algorithm,
            self.config().shape,
            root,
            block_bytes,
        )
        .with_choice(algorithm);
        if let crate::stripe::RailPolicy::Stripe { threshold } = self.config().policy {
            params.stripe_threshold = threshold;
        }
        if let Some(s) = self.st.exec.cache.borrow().get(&params) {
            return Ok(Arc::clone(s));
        }
        let set = shared_schedule(&params)?;
        // Proved to fit this communicator's NICs before anything is
        // posted: a set over budget would fail halfway through.
        budget::fits(&set, &budget::Budget::for_nic(self.nic_limits())).map_err(|o| {
            Error::OverBudget {
                algorithm: algorithm.name(),
                resource: o.resource,
                needed: o.needed,
                available: o.available,
                where_: o.place(),
            }
        })?;
        let mut cache = self.st.exec.cache.borrow_mut();
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(params, Arc::clone(&set));
        Ok(set)
    }

    /// The tuning table in use: the file named by `RAILCOLL_TUNING`, else
    /// the user's table written by `railcoll tune`, else the built-in
    /// default ([`TuningTable::locate`]).
    pub(crate) fn tuning(&self) -> Result<Arc<TuningTable>, Error> {
        if let Some(t) = self.st.exec.tuning.get() {
            return Ok(Arc::clone(t));
        }
        let table = Arc::new(TuningTable::from_env()?);
        let _ = self.st.exec.tuning.set(Arc::clone(&table));
        Ok(table)
    }

    /// Use `table` for this communicator's algorithm choices (every rank
    /// must use the same table).
    pub(crate) fn set_tuning(&self, table: Arc<TuningTable>) -> Result<(), Error> {
        self.st
            .exec
            .tuning
            .set(table)
            .map_err(|_| Error::Config("the tuning table was already chosen".into()))
    }

    /// The algorithm the tuning table picks for `collective` with blocks of
    /// `block_bytes` on this communicator (the first applicable rule whose
    /// algorithm can run here; the collective's fallback otherwise).
    pub(crate) fn tuned_algorithm(
        &self,
        collective: Collective,
        block_bytes: usize,
    ) -> Result<Choice, Error> {
        let shape = self.config().shape;
        let table = self.tuning()?;
        Ok(table.select(collective, block_bytes, &shape, &mut |a| {
            self.schedule(collective, a, block_bytes, 0).is_ok()
        }))
    }

    /// Gather `send` (one block) of every rank into `recv` (one block per
    /// rank, in rank order) on `root`, with the tuned algorithm. See the
    /// buffer contract in [`crate::sched`].
    pub(crate) fn gather(
        &self,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<(), Error> {
        let a = self.tuned_algorithm(Collective::Gather, send.len())?;
        self.collective_with(Collective::Gather, a, send, recv, root)
    }

    /// All-gather `send` (one block) of every rank into `recv` of every
    /// rank (one block per rank, in rank order), with the tuned algorithm.
    pub(crate) fn allgather(&self, send: &SymBuffer, recv: &SymBuffer) -> Result<(), Error> {
        let a = self.tuned_algorithm(Collective::Allgather, send.len())?;
        self.collective_with(Collective::Allgather, a, send, recv, 0)
    }

    /// All-to-all: block `j` of `send` (N equal blocks) goes to block
    /// `rank` of rank `j`'s `recv`, with the tuned algorithm.
    pub(crate) fn alltoall(&self, send: &SymBuffer, recv: &SymBuffer) -> Result<(), Error> {
        let block = self.alltoall_block(send)?;
        let a = self.tuned_algorithm(Collective::Alltoall, block)?;
        self.collective_with(Collective::Alltoall, a, send, recv, 0)
    }

    fn alltoall_block(&self, send: &SymBuffer) -> Result<usize, Error> {
        let n = self.size();
        if !send.len().is_multiple_of(n) {
            return Err(Error::Config(format!(
                "an all-to-all send buffer holds one equal block per rank: {} bytes is not a multiple of {n}",
                send.len()
            )));
        }
        Ok(send.len() / n)
    }

    /// Run `collective` with `algorithm`.
    pub(crate) fn collective_with(
        &self,
        collective: Collective,
        algorithm: Choice,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<(), Error> {
        let block = match collective {
            Collective::Alltoall => self.alltoall_block(send)?,
            Collective::Barrier => 0,
            Collective::Gather | Collective::Allgather | Collective::Bcast => send.len(),
        };
        let set = self.schedule(collective, algorithm, block, root)?;
        self.run_schedule(&set, send, recv)
    }

    /// Execute this rank's part of `set` on `send` and `recv` (every rank
    /// of the communicator must run the same set).
    pub(crate) fn run_schedule(
        &self,
        set: &ScheduleSet,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<(), Error> {
        let p = &set.params;
        let b = p.block_bytes;
        let me = self.rank();
        let sched = set.rank(me).ok_or(Error::RankOutOfRange {
            rank: me,
            size: set.ranks.len(),
        })?;
        for (what, buf, blocks) in [
            ("the send buffer", send, p.send_blocks()),
            ("the receive buffer", recv, p.recv_blocks()),
        ] {
            let need = blocks as usize * b;
            if buf.len() < need {
                return Err(Error::OutOfBounds {
                    what,
                    offset: 0,
                    len: need,
                    limit: buf.len(),
                });
            }
        }
        let parity = (self.st.exec.calls.get() % 2) as usize;
        if set.counters > 0 || set.scratch_blocks > 0 {
            self.prepare(set, parity)?;
            self.st
                .exec
                .calls
                .set(self.st.exec.calls.get().wrapping_add(1));
        }
        let events = self.st.exec.events.borrow()[parity].clone();
        let scratch = self.st.exec.scratch.borrow()[parity].unwrap_or(self.st.bufs.scratch);
        let arena = self.arena().0;
        let hook = self.wait_arc();
        let socket_of = |rank: usize| -> Result<usize, Error> {
            Ok(p.shape.socket_of(self.topology().locate(rank)?.1))
        };
        let my_socket = socket_of(me)?;
        let region = |r: &Region| -> Result<SymBuffer, Error> {
            let base = match r.buf {
                Buf::Send => send,
                Buf::Recv => recv,
                Buf::Scratch => &scratch,
            };
            region_of(base, r, b)
        };
        let event = |c: Counter| -> Result<DestEvent, Error> {
            events
                .get(usize::from(c))
                .copied()
                .ok_or(Error::EventsExhausted("schedule counter"))
        };
        let mut handles: Outstanding<PutHandle<'_>> = Outstanding::new(sched.steps.len());
        let mut numbers = BarrierNumbers::default();
        for (i, step) in sched.steps.iter().enumerate() {
            hook.observer().at_step(i as u32, step.op.kind());
            handles.release_after(&step.after, PutHandle::wait)?;
            match &step.op {
                Op::Put {
                    to,
                    src,
                    dst,
                    lane,
                    signal,
                } => {
                    handles.make_room(PutHandle::wait)?;
                    let opts = TransferOptions {
                        policy: Some(lane.policy(p.stripe_threshold)),
                        dest_event: signal.map(event).transpose()?,
                        wake: false,
                    };
                    handles.hold(
                        i,
                        self.put_with(&region(src)?, *to as usize, &region(dst)?, opts)?,
                    );
                }
                Op::ChainPut {
                    trigger,
                    count,
                    rail,
                    to,
                    src,
                    dst,
                    signal,
                } => {
                    let chain = ChainedPut {
                        trigger: event(*trigger)?,
                        rail: usize::from(*rail),
                        count: *count,
                        src: region(src)?,
                        dst_rank: *to as usize,
                        dst: region(dst)?,
                        dst_event: signal.map(event).transpose()?,
                    };
                    handles.hold(i, self.chain_put(&chain)?);
                }
                Op::Wait { counter, arrivals } => {
                    let mut a = Arrivals::new();
                    for (rail, &n) in arrivals.iter().enumerate() {
                        a.add(rail, n);
                    }
                    self.wait_arrivals(&event(*counter)?, &a)?;
                }
                Op::Copy { src, dst } => {
                    let (s, d) = (region(src)?, region(dst)?);
                    hook.observer().host_copy(s.len().min(d.len()), false);
                    arena
                        .copy_from(d.offset(), &arena, s.offset(), s.len().min(d.len()))
                        .map_err(mem_err)?;
                }
                Op::PeerCopy {
                    peer,
                    dir,
                    local,
                    remote,
                } => {
                    let peer_mem = self.peer_memory(*peer as usize)?;
                    let (l, r) = (region(local)?, region(remote)?);
                    let len = l.len().min(r.len());
                    hook.observer()
                        .host_copy(len, socket_of(*peer as usize)? != my_socket);
                    match dir {
                        PeerDir::Push => peer_mem.copy_from(r.offset(), &arena, l.offset(), len),
                        PeerDir::Pull => arena.copy_from(l.offset(), &peer_mem, r.offset(), len),
                    }
                    .map_err(mem_err)?;
                }
                Op::Signal { to, flag } => {
                    let (_, local) = self.topology().locate(*to as usize)?;
                    hook.observer().before_shared_write();
                    self.st
                        .shm
                        .borrow()
                        .sched_raise(local, usize::from(*flag))?;
                    hook.wake_local(local);
                }
                Op::WaitFlag { flag, count } => {
                    if *count == 0 {
                        continue;
                    }
                    let f = usize::from(*flag);
                    let target = {
                        let mut consumed = self.st.exec.flag_consumed.borrow_mut();
                        let slot = consumed
                            .get_mut(f)
                            .ok_or(Error::EventsExhausted("schedule flag"))?;
                        *slot = slot.wrapping_add(u64::from(*count));
                        *slot
                    };
                    let watch = self.st.shm.borrow().sched_watch(f, target)?;
                    hook.wait_words(&[watch]).map_err(Error::from)?;
                }
                Op::BarrierNumber(which) => {
                    numbers.set(*which, self.next_barrier_number(*which)?);
                }
                Op::WordPut { to, words, slot } => {
                    handles.hold(i, self.word_put(*words, *to as usize, *slot as usize)?);
                }
                Op::WordWait { words, slot } => {
                    let number = numbers.get(Numbers::Words(*words))?;
                    self.word_wait(*words, *slot as usize, number)?;
                }
                Op::QueueSend { to } => {
                    handles.hold(i, self.queue_number(*to as usize)?);
                }
                Op::QueueRecv { from } => {
                    let number = numbers.get(Numbers::Queue)?;
                    self.recv_number(*from as usize, number)?;
                }
                Op::NodeArrive => self.node_arrive()?,
                Op::NodeRelease => self.node_release()?,
                Op::HwBarrier => self.switch_barrier()?,
                Op::NodeBcast { root, region: r } => {
                    let (_, root_local) = self.topology().locate(*root as usize)?;
                    self.node_bcast(&region(r)?, root_local)?;
                }
                Op::HwBcast { src, dst, signal } => {
                    let h = self.hw_bcast_post(
                        &region(src)?,
                        &region(dst)?,
                        signal.map(event).transpose()?,
                    )?;
                    handles.hold(i, h);
                }
            }
        }
        for h in handles.into_rest() {
            h.wait()?;
        }
        Ok(())
    }

    /// Run `collective` with `algorithm` on one buffer: a broadcast of
    /// `buf` from `root` (the same symmetric buffer on every rank), or a
    /// barrier (`buf` unused).
    pub(crate) fn run_on_one_buffer(
        &self,
        collective: Collective,
        algorithm: Choice,
        buf: &SymBuffer,
        root: usize,
    ) -> Result<(), Error> {
        self.collective_with(collective, algorithm, buf, buf, root)
    }

    /// Broadcast `buf` from `root` with the tuned algorithm.
    pub(crate) fn broadcast(&self, buf: &SymBuffer, root: usize) -> Result<(), Error> {
        let a = self.tuned_algorithm(Collective::Bcast, buf.len())?;
        self.run_on_one_buffer(Collective::Bcast, a, buf, root)
    }

    /// Barrier with the tuned algorithm.
    pub(crate) fn barrier(&self) -> Result<(), Error> {
        let a = self.tuned_algorithm(Collective::Barrier, 0)?;
        self.barrier_with(a)
    }

    /// Barrier with `algorithm`: no rank returns before every rank has
    /// entered.
    pub(crate) fn barrier_with(&self, algorithm: Choice) -> Result<(), Error> {
        let none = self.st.bufs.barrier_source.slice(0, 0)?;
        self.run_on_one_buffer(Collective::Barrier, algorithm, &none, 0)
    }

    /// Grow the counter pool and the scratch buffer to what `set` needs
    /// (symmetric: every rank runs the same sets in the same order).
    fn prepare(&self, set: &ScheduleSet, parity: usize) -> Result<(), Error> {
        {
            let mut pools = self.st.exec.events.borrow_mut();
            for events in pools.iter_mut() {
                while events.len() < usize::from(set.counters) {
                    events.push(self.alloc_dest_event()?);
                }
            }
        }
        let need = set.scratch_blocks as usize * set.params.block_bytes;
        let mut scratch = self.st.exec.scratch.borrow_mut();
        let slot = &mut scratch[parity];
        if slot.as_ref().is_none_or(|s| s.len() < need) {
            *slot = Some(self.alloc(need)?);
        }
        Ok(())
    }

    /// The arena of node peer `rank`, through the node directory.
    fn peer_memory(&self, rank: usize) -> Result<DmaMemory, Error> {
        let (node, local) = self.topology().locate(rank)?;
        if node != self.node() {
            return Err(Error::Config(format!(
                "rank {rank} is not on this rank's node: no shared memory with it"
            )));
        }
        if let Some(m) = self.st.exec.peers.borrow().get(local).cloned().flatten() {
            return Ok(m);
        }
        let mut found = None;
        {
            let shm = self.st.shm.borrow();
            self.wait_until(&mut || {
                found = shm.arena_of(local);
                found.is_some()
            })?;
        }
        let (phys, len) = found.ok_or(Error::Config("node directory entry vanished".into()))?;
        let mem = self.dma_view(phys, len)?;
        if let Some(slot) = self.st.exec.peers.borrow_mut().get_mut(local) {
            *slot = Some(mem.clone());
        }
        Ok(mem)
    }
}
