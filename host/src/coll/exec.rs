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
//! [`Budget::outstanding`](crate::sched::budget::Budget::outstanding)
//! posts are in flight (a share of the NIC's completion events); beyond
//! that the oldest is completed first (a put's completion never depends on
//! its target's host, so this never deadlocks).
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

use super::run::{BarrierNumbers, Pending, Run};
use super::state::{CACHE_LIMIT, Coll, Progress, Stop};
use crate::arena::SymBuffer;
use crate::driver::Feeds;
use crate::endpoint::{Arrivals, ChainedPut, Posted, PutHandle, TransferOptions};
use crate::env::{WordTest, WordWatch};
use crate::error::Error;
use crate::sched::budget::Outstanding;
use crate::sched::tuning::TuningTable;
use crate::sched::*;
use crate::shm::BcastCursor;
use crate::stripe::RailPolicy;
use railcoll_fw::abi::MAX_CONTEXTS;
use railcoll_fw::abi::error::ErrorCode;
use railcoll_mem::dma_mem::DmaMemory;

/// Schedule sets generated in this process, shared by its communicators,
/// with the proof that each fits its budget ([`budget::fits`]). A set holds
/// every rank's schedule, so N communicators of one process (emulated
/// ranks) would otherwise generate N identical sets and prove each N
/// times (the proof walks every rank's schedule: N^2 walks). Weak: a set
/// lives as long as some communicator caches it.
fn shared_schedule(params: &Params) -> Result<(Arc<ScheduleSet>, Fits), Error> {
    type Shared = HashMap<Params, (std::sync::Weak<ScheduleSet>, Fits)>;
    static SHARED: std::sync::Mutex<Option<Shared>> = std::sync::Mutex::new(None);
    let mut shared = SHARED.lock().unwrap_or_else(|p| p.into_inner());
    let map = shared.get_or_insert_with(HashMap::new);
    if let Some((set, fits)) = map
        .get(params)
        .and_then(|(w, fits)| Some((w.upgrade()?, fits.clone())))
    {
        return Ok((set, fits));
    }
    let set = Arc::new(generate(params)?);
    let fits = budget::fits(&set, &params.budget);
    if map.len() >= CACHE_LIMIT {
        map.retain(|_, (w, _)| w.strong_count() > 0);
    }
    map.insert(*params, (Arc::downgrade(&set), fits.clone()));
    Ok((set, fits))
}

/// Whether a set fits the budget it was generated for.
type Fits = Result<(), budget::Overrun>;

fn mem_err(e: railcoll_mem::dma_mem::OutOfRange) -> Error {
    crate::error::out_of_range("a schedule buffer", e)
}

impl<'a> Coll<'a> {
    /// The schedules of `collective` with `algorithm` for this
    /// communicator, `block_bytes` per block (cached).
    pub(crate) fn schedule(
        &self,
        collective: Collective,
        algorithm: Choice,
        block_bytes: usize,
        root: usize,
    ) -> Result<Arc<ScheduleSet>, Error> {
        self.schedule_for(self.params(collective, algorithm, block_bytes, root, false))
    }

    /// The parameters of `collective` with `algorithm` on this
    /// communicator: its shape, striping threshold and NIC budget; guarded
    /// if `persistent` or under the MPI buffer contract.
    fn params(
        &self,
        collective: Collective,
        algorithm: Choice,
        block_bytes: usize,
        root: usize,
        persistent: bool,
    ) -> Params {
        let mut params = Params::new(
            collective,
            algorithm.algorithm,
            self.group().shape(),
            root,
            block_bytes,
        )
        .with_choice(algorithm);
        params.guarded = persistent || self.config().contract == crate::config::BufferContract::Mpi;
        if let RailPolicy::Stripe { threshold } = self.config().policy {
            params.stripe_threshold = threshold;
        }
        params.budget = self.st.exec.budget;
        params
    }

    /// The schedules of `params` (cached), proved to fit this
    /// communicator's NICs and scratch.
    fn schedule_for(&self, params: Params) -> Result<Arc<ScheduleSet>, Error> {
        if params.algorithm == Algorithm::SendRecv {
            self.barrier_queue()?;
        }
        if let Some(s) = self.st.exec.cache.borrow().get(&params) {
            return Ok(Arc::clone(s));
        }
        let (set, fits) = shared_schedule(&params)?;
        // Proved to fit this communicator's NICs before anything is
        // posted: a set over budget would fail halfway through.
        fits.map_err(|o| Error::OverBudget {
            algorithm: params.choice().name(),
            resource: o.resource,
            needed: o.needed,
            available: o.available,
            where_: o.place(),
        })?;
        if let Some(split) = &self.st.split {
            let need = set.scratch_blocks as usize * params.block_bytes;
            let available = split.scratch[0].len();
            if need > available {
                return Err(Error::OverBudget {
                    algorithm: params.choice().name(),
                    resource: "scratch bytes (the communicator's slot: CommConfig::comm_reserve)",
                    needed: need as u64,
                    available: available as u64,
                    where_: String::new(),
                });
            }
        }
        let mut cache = self.st.exec.cache.borrow_mut();
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(params, Arc::clone(&set));
        Ok(set)
    }

    /// The tuning table this communicator was created with.
    pub(crate) fn tuning(&self) -> Arc<TuningTable> {
        Arc::clone(&self.st.exec.tuning)
    }

    /// The algorithm the tuning table picks for `collective` with blocks of
    /// `block_bytes` on this communicator (see [`Coll::set_for`]; rooted
    /// collectives are probed with root 0).
    pub(crate) fn tuned_algorithm(
        &self,
        collective: Collective,
        block_bytes: usize,
    ) -> Result<Choice, Error> {
        self.select(collective, None, block_bytes, 0, false)
            .map(|set| set.params.choice())
    }

    /// The one path from a call to its schedule set: `algorithm`, or where
    /// `None` the tuning table's choice (its first candidate whose set,
    /// generated for this call's root, fits this communicator: the set the
    /// call then runs, not generated twice).
    fn select(
        &self,
        collective: Collective,
        algorithm: Option<Choice>,
        block_bytes: usize,
        root: usize,
        persistent: bool,
    ) -> Result<Arc<ScheduleSet>, Error> {
        let build = |a: Choice| {
            self.schedule_for(self.params(collective, a, block_bytes, root, persistent))
        };
        match algorithm {
            Some(a) => build(a),
            None => {
                let shape = self.group().shape();
                let table = self.tuning();
                table
                    .select_with(collective, block_bytes, &shape, build)
                    .map(|(_, set)| set)
            }
        }
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

    /// The schedule set of `collective` on these buffers: `algorithm`, or
    /// the tuned one where `None` (a barrier's buffers are ignored);
    /// guarded for back-to-back starts if `persistent` (and under the MPI
    /// buffer contract, always).
    pub(crate) fn set_for(
        &self,
        collective: Collective,
        algorithm: Option<Choice>,
        send: &SymBuffer,
        root: usize,
        persistent: bool,
    ) -> Result<Arc<ScheduleSet>, Error> {
        let block = match collective {
            Collective::Alltoall => self.alltoall_block(send)?,
            Collective::Barrier => 0,
            Collective::Gather | Collective::Allgather | Collective::Bcast => send.len(),
        };
        self.select(collective, algorithm, block, root, persistent)
    }

    /// Run `collective` on `send` and `recv` (one buffer, `send`, for a
    /// broadcast; none for a barrier) with `algorithm`, or the tuned one
    /// where `None`. See the buffer contract in [`crate::sched`].
    pub(crate) fn run_collective(
        &self,
        collective: Collective,
        algorithm: Option<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<(), Error> {
        let set = self.set_for(collective, algorithm, send, root, false)?;
        self.run_to_completion(set, send, recv)
    }

    /// Execute this rank's part of `set` on `send` and `recv` (every rank
    /// of the communicator must run the same set).
    pub(crate) fn run_schedule(
        &self,
        set: &Arc<ScheduleSet>,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<(), Error> {
        self.run_to_completion(Arc::clone(set), send, recv)
    }

    /// Begin this rank's part of `set` on `send` and `recv`: check the
    /// buffers, take this call's counters and scratch (completing the
    /// collective in flight that holds them first), and the counter pool
    /// and scratch set it took, if any. Nothing is posted until
    /// [`Coll::advance_gated`].
    pub(crate) fn start_run(
        &self,
        set: Arc<ScheduleSet>,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<(Run, Option<usize>), Error> {
        let p = &set.params;
        let b = p.block_bytes;
        let me = self.rank();
        let steps = set
            .rank(me)
            .ok_or(Error::RankOutOfRange {
                rank: me,
                size: set.ranks.len(),
            })?
            .steps
            .len();
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
        // The call is valid here: on a revoked communicator it posts
        // nothing; then the ranks agree on it (when the check is on).
        if let Some(n) = self.notice() {
            return Err(n.into_error());
        }
        self.check_arguments(p)?;
        let parity = (self.st.exec.calls.get() % 2) as usize;
        let slot = (set.counters > 0 || set.scratch_blocks > 0).then_some(parity);
        if slot.is_some() {
            self.free_slot(parity)?;
            self.prepare(&set, parity)?;
            self.st
                .exec
                .calls
                .set(self.st.exec.calls.get().wrapping_add(1));
        }
        // Entered only once the counters and scratch are this call's: the
        // number lets other ranks write them.
        let entered = if p.guarded { self.enter()? } else { 0 };
        let events = self.st.exec.events.borrow()[parity].clone();
        let scratch = self.st.exec.scratch.borrow()[parity].unwrap_or(self.st.bufs.scratch);
        let my_socket = p.shape.socket_of(self.locate(me)?.1);
        let outstanding = p.budget.outstanding;
        let run = Run {
            set,
            send: *send,
            recv: *recv,
            scratch,
            events,
            my_socket,
            next: 0,
            pending: Pending::None,
            handles: Outstanding::new(steps, outstanding),
            numbers: BarrierNumbers::default(),
            entered,
        };
        Ok((run, slot))
    }

    /// Enter a guarded call: take its number and publish it in this
    /// rank's `entered` word (before any readiness notice tells anyone).
    fn enter(&self) -> Result<u64, Error> {
        let number = self.st.seq.entered.get().wrapping_add(1);
        self.st.seq.entered.set(number);
        self.wait_arc().observer().before_shared_write();
        self.local_memory(&self.st.bufs.entered)?
            .store_u64(0, number, std::sync::atomic::Ordering::Release)
            .map_err(mem_err)?;
        Ok(number)
    }

    /// Readiness notice to `to`, which touches this rank's buffers: a
    /// word put of this rank's number into its slot of `to`'s readiness
    /// words across nodes; a wake-up on the node (`to` reads the number
    /// here). `None`: nothing to wait for.
    fn ready(&self, to: usize) -> Result<Option<PutHandle<'a>>, Error> {
        let (to_node, to_local) = self.locate(to)?;
        if to_node == self.node() {
            self.wait_arc().wake_local(self.group().job_local(to_local));
            return Ok(None);
        }
        let bufs = &self.st.bufs;
        let dst = bufs.ready_words.slice(self.rank() * 8, 8)?;
        let opts = TransferOptions {
            wake: true,
            ..TransferOptions::default()
        };
        self.ep
            .put_with(&bufs.entered, self.job_rank(to)?, &dst, opts)
            .map(Some)
    }

    /// Where rank `from`'s readiness for call `number` shows: its own
    /// `entered` word on this node, its readiness word here otherwise.
    fn readiness(&self, from: usize, number: u64) -> Result<WordWatch, Error> {
        let bufs = &self.st.bufs;
        let (mem, offset) = if self.locate(from)?.0 == self.node() {
            (self.peer_memory(from)?, bufs.entered.offset())
        } else {
            (self.local_memory(&bufs.ready_words)?, from * 8)
        };
        Ok(WordWatch {
            mem,
            offset,
            mask: u64::MAX,
            test: WordTest::Reaches(number),
        })
    }

    /// Run `run`'s steps from where it stands: `Block` waits for what each
    /// step needs and returns complete; `Poll` goes as far as it can
    /// without waiting (`Ok(false)`: not complete yet). With `older_open`
    /// (an earlier collective of the communicator is in flight), it stops
    /// before a step that uses the communicator's sequential state, which
    /// every rank must take in start order. An error leaves the run, and
    /// the communicator's collectives, unusable.
    pub(crate) fn advance_gated(
        &self,
        run: &mut Run,
        how: Progress,
        older_open: bool,
    ) -> Result<bool, Error> {
        let set = Arc::clone(&run.set);
        let me = self.rank();
        let sched = set.rank(me).ok_or(Error::RankOutOfRange {
            rank: me,
            size: set.ranks.len(),
        })?;
        let hook = self.wait_arc();
        let ep = self.ep;
        let settle = |h: &mut Posted| -> Result<bool, Error> {
            match ep.settle(h, how == Progress::Block) {
                Some(r) => r.map(|()| true),
                None => Ok(false),
            }
        };
        while let Some(step) = sched.steps.get(run.next) {
            let i = run.next;
            hook.observer().at_step(i as u32, step.op.kind());
            if older_open && step.op.sequential() {
                return Ok(false);
            }
            if !run.handles.release_after(&step.after, settle)? {
                return Ok(false);
            }
            match self.step(run, i, &step.op, how, settle) {
                Ok(()) => {
                    run.next += 1;
                    run.pending = Pending::None;
                }
                Err(Stop::NotYet) => return Ok(false),
                Err(Stop::Failed(e)) => return Err(e),
            }
        }
        run.handles.release_all(settle)
    }

    /// Let go of `run` after an error: wait for what it posted (the NICs
    /// may still use its buffers), whatever became of it.
    pub(crate) fn abandon(&self, mut run: Run) {
        let ep = self.ep;
        let mut settle = |h: &mut Posted| -> Result<bool, Error> {
            let _ = ep.settle(h, true);
            Ok(true)
        };
        if let Pending::Switch(h) = &mut run.pending {
            let _ = settle(h);
        }
        let _ = run.handles.release_all(&mut settle);
    }

    /// Step `i` of `run`: done (`Ok`), or, polling, not yet
    /// ([`Stop::NotYet`], with what it began kept in `run.pending`).
    fn step(
        &self,
        run: &mut Run,
        i: usize,
        op: &Op,
        how: Progress,
        settle: impl Fn(&mut Posted) -> Result<bool, Error> + Copy,
    ) -> Result<(), Stop> {
        let p = &run.set.params;
        let hook = self.wait_arc();
        match op {
            Op::Put {
                to,
                src,
                dst,
                lane,
                signal,
            } => {
                if !run.handles.make_room(settle)? {
                    return Err(Stop::NotYet);
                }
                let (src, dst) = (run.region(src)?, run.region(dst)?);
                let opts = TransferOptions {
                    policy: Some(self.lane_policy(*lane, p, *to, src.len())),
                    dest_event: signal.map(|c| run.event(c)).transpose()?,
                    wake: false,
                };
                let to = self.job_rank(*to as usize)?;
                let h = self.ep.put_with(&src, to, &dst, opts)?;
                run.handles.hold(i, h.into_posted());
            }
            Op::ChainPut {
                trigger,
                count,
                rail,
                lane,
                to,
                src,
                dst,
                signal,
                feeds,
                done,
            } => {
                let pairs = |list: &[Feed]| {
                    list.iter()
                        .map(|f| Ok((run.event(f.into)?.id(), f.rail)))
                        .collect::<Result<Vec<_>, Error>>()
                };
                let src = run.region(src)?;
                let chain = ChainedPut {
                    trigger: run.event(*trigger)?,
                    rail: usize::from(*rail),
                    count: *count,
                    policy: self.lane_policy(*lane, p, *to, src.len()),
                    src,
                    dst_rank: self.job_rank(*to as usize)?,
                    dst: run.region(dst)?,
                    dst_event: signal.map(|c| run.event(c)).transpose()?,
                    feeds: Feeds::new(&pairs(feeds)?)?,
                    done: Feeds::new(&pairs(done)?)?,
                };
                let h = self.ep.chain_put(&chain)?;
                run.handles.hold(i, h.into_posted());
            }
            Op::Relay {
                counter,
                count,
                from,
                to,
                into,
            } => {
                let h = self.ep.relay(
                    run.event(*counter)?,
                    *count,
                    usize::from(*from),
                    run.event(*into)?,
                    usize::from(*to),
                )?;
                run.handles.hold(i, h.into_posted());
            }
            Op::Wait { counter, arrivals } => {
                if matches!(run.pending, Pending::None) {
                    let mut a = Arrivals::new();
                    for (rail, &n) in arrivals.iter().enumerate() {
                        a.add(rail, n);
                    }
                    run.pending = Pending::Arrivals(self.arm_arrivals(&run.event(*counter)?, &a)?);
                }
                if let Pending::Arrivals(armed) = &run.pending {
                    match how {
                        Progress::Block => self.wait_armed(armed)?,
                        Progress::Poll => self.test_armed(armed).ok_or(Stop::NotYet)??,
                    }
                }
            }
            Op::Copy { src, dst } => {
                let (s, d) = (run.region(src)?, run.region(dst)?);
                let arena = self.arena().0;
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
                let arena = self.arena().0;
                let (l, r) = (run.region(local)?, run.region(remote)?);
                let len = l.len().min(r.len());
                let peer_socket = p.shape.socket_of(self.locate(*peer as usize)?.1);
                hook.observer().host_copy(len, peer_socket != run.my_socket);
                match dir {
                    PeerDir::Push => peer_mem.copy_from(r.offset(), &arena, l.offset(), len),
                    PeerDir::Pull => arena.copy_from(l.offset(), &peer_mem, r.offset(), len),
                }
                .map_err(mem_err)?;
            }
            Op::Signal { to, flag } => {
                let (_, local) = self.locate(*to as usize)?;
                hook.observer().before_shared_write();
                self.st
                    .shm
                    .borrow()
                    .sched_raise(local, usize::from(*flag))?;
                hook.wake_local(self.group().job_local(local));
            }
            Op::WaitFlag { flag, from, .. } => {
                if *from == 0 {
                    return Ok(());
                }
                let f = usize::from(*flag);
                // Each peer's next raise, counted apart; taken only once
                // they are all in, so a poll that finds one missing takes
                // nothing.
                let taken = *self
                    .st
                    .exec
                    .flag_consumed
                    .borrow()
                    .get(f)
                    .ok_or(Error::EventsExhausted("schedule flag"))?;
                let peers = (0..MAX_CONTEXTS).filter(|&l| from & (1 << l) != 0);
                let shm = self.st.shm.borrow();
                let watches = peers
                    .clone()
                    .map(|l| shm.sched_watch(f, l, taken[l].wrapping_add(1)))
                    .collect::<Result<Vec<_>, _>>()?;
                drop(shm);
                self.await_words(how, &watches)?;
                let mut consumed = self.st.exec.flag_consumed.borrow_mut();
                for l in peers {
                    consumed[f][l] = taken[l].wrapping_add(1);
                }
            }
            Op::BarrierNumber(which) => {
                run.numbers.set(*which, self.next_barrier_number(*which)?);
            }
            Op::WordPut { to, words, slot } => {
                let h = self.word_put(*words, *to as usize, *slot as usize)?;
                run.handles.hold(i, h.into_posted());
            }
            Op::WordWait { words, slot } => {
                let number = run.numbers.get(Numbers::Words(*words))?;
                self.word_wait(*words, *slot as usize, number, how)?;
            }
            Op::Ready { to } => {
                if let Some(h) = self.ready(*to as usize)? {
                    run.handles.hold(i, h.into_posted());
                }
            }
            Op::AwaitReady { from } => {
                let watch = self.readiness(*from as usize, run.entered)?;
                self.await_words(how, &[watch])?;
            }
            Op::QueueSend { to } => {
                let h = self.queue_number(*to as usize)?;
                run.handles.hold(i, h.into_posted());
            }
            Op::QueueRecv { from } => {
                let number = run.numbers.get(Numbers::Queue)?;
                self.recv_number(*from as usize, number, how)?;
            }
            Op::NodeArrive => {
                if matches!(run.pending, Pending::None) {
                    self.node_arrive_begin();
                    run.pending = Pending::NodeArrive;
                }
                self.node_arrive(how)?;
            }
            Op::NodeRelease => self.node_release(how)?,
            Op::HwBarrier => {
                if matches!(run.pending, Pending::None) {
                    run.pending = match self.switch_barrier()? {
                        Some(h) => Pending::Switch(h.into_posted()),
                        None => Pending::WithoutSwitch,
                    };
                }
                if let Pending::Switch(h) = &mut run.pending {
                    match settle(h) {
                        Ok(true) => {}
                        Ok(false) => return Err(Stop::NotYet),
                        Err(Error::Nic {
                            code: ErrorCode::PeerUnreachable,
                            ..
                        }) => {
                            self.switch_failed();
                            run.pending = Pending::WithoutSwitch;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                if matches!(run.pending, Pending::WithoutSwitch) {
                    self.switch_barrier_without_switch(how)?;
                }
            }
            Op::NodeBcast { root, region: r } => {
                let (_, root_local) = self.locate(*root as usize)?;
                if matches!(run.pending, Pending::None) {
                    run.pending = Pending::NodeBcast(BcastCursor::default());
                }
                let buf = run.region(r)?;
                if let Pending::NodeBcast(cursor) = &mut run.pending {
                    self.node_bcast(&buf, root_local, cursor, how)?;
                }
            }
            Op::HwBcast { src, dst, signal } => {
                let h = self.ep.hw_bcast_span_post(
                    self.group().node_span(),
                    &run.region(src)?,
                    &run.region(dst)?,
                    signal.map(|c| run.event(c)).transpose()?,
                )?;
                run.handles.hold(i, h.into_posted());
            }
        }
        Ok(())
    }

    /// The empty buffer a barrier runs on.
    pub(crate) fn no_buffer(&self) -> Result<SymBuffer, Error> {
        self.st.bufs.barrier_source.slice(0, 0)
    }

    /// Grow the counter pool and the scratch buffer to what `set` needs
    /// (symmetric: every rank runs the same sets in the same order).
    fn prepare(&self, set: &ScheduleSet, parity: usize) -> Result<(), Error> {
        {
            let mut pools = self.st.exec.events.borrow_mut();
            for events in pools.iter_mut() {
                while events.len() < usize::from(set.counters) {
                    let event =
                        match &self.st.split {
                            // A split communicator's pools fill from its slot.
                            Some(split) => split.spare_events.borrow_mut().pop().ok_or(
                                Error::EventsExhausted("the communicator slot's destination"),
                            )?,
                            None => self.alloc_dest_event()?,
                        };
                    events.push(event);
                }
            }
        }
        if let Some(split) = &self.st.split {
            self.st.exec.scratch.borrow_mut()[parity] = Some(split.scratch[parity]);
            return Ok(());
        }
        let need = set.scratch_blocks as usize * set.params.block_bytes;
        let mut scratch = self.st.exec.scratch.borrow_mut();
        let slot = &mut scratch[parity];
        if slot.as_ref().is_none_or(|s| s.len() < need) {
            *slot = Some(self.alloc(need)?);
        }
        Ok(())
    }

    /// The rails a put of `len` bytes on `lane` to `to` takes: those the
    /// schedule counted its arrivals on. A put too short to stripe goes
    /// on the rail its two *communicator* ranks pick (`stripe::plan`),
    /// which the endpoint, numbering by job rank, would pick differently
    /// on a split communicator.
    fn lane_policy(&self, lane: Lane, p: &Params, to: u32, len: usize) -> RailPolicy {
        let policy = lane.policy(p.stripe_threshold);
        if self.st.split.is_none() {
            // Job ranks are communicator ranks: the endpoint picks the same.
            return policy;
        }
        let parts = crate::stripe::plan(policy, p.shape.rails, self.rank(), to as usize, len, 0);
        match parts.as_slice() {
            [one] => RailPolicy::Rail(one.rail),
            _ => policy,
        }
    }

    /// The arena of node peer `rank`, through the node directory.
    fn peer_memory(&self, rank: usize) -> Result<DmaMemory, Error> {
        let (node, local) = self.locate(rank)?;
        if node != self.node() {
            return Err(Error::Internal(format!(
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
        let (phys, len) = found.ok_or(Error::Internal("node directory entry vanished".into()))?;
        let mem = self.dma_view(phys, len)?;
        if let Some(slot) = self.st.exec.peers.borrow_mut().get_mut(local) {
            *slot = Some(mem.clone());
        }
        Ok(mem)
    }
}
