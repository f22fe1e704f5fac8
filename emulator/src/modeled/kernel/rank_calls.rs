//! What a rank's host code calls on the sequencer (through the wait hook
//! and the emulated device): bring its clock to the present, block on
//! words or a condition, be charged for copies and polls, wake a node
//! peer, post a register write, name its step. Each runs on the rank's own
//! fiber and gives the baton back to the sequencer when it must wait.

use super::*;

impl Kernel {
    /// Hand the sequencer the baton until it resumes `rank`; then, did the
    /// watchdog end its wait? A rank that cannot suspend is unwinding
    /// after the run was given up on (its drops still wait: a request's
    /// drop completes it): its waits fail at once.
    fn suspend(&self, rank: usize) -> Result<(), Stalled> {
        if !fiber::suspend() {
            let w = self.lock();
            let report = w.watchdog.failure().cloned();
            return Err(Stalled(
                report.unwrap_or_else(|| "the run was given up on".into()),
            ));
        }
        self.failed(rank)
    }

    /// Did the watchdog end the wait `rank` just came back from?
    pub(super) fn failed(&self, rank: usize) -> Result<(), Stalled> {
        let mut w = self.lock();
        if !std::mem::take(&mut w.ranks.slots[rank].stalled) {
            return Ok(());
        }
        Err(Stalled(w.watchdog.failure().cloned().unwrap_or_default()))
    }

    /// Bring `rank`'s clock and the global clock together: commit every
    /// action due before the rank's time first.
    pub(crate) fn sync(&self, rank: usize) -> Result<(), Stalled> {
        {
            let mut w = self.lock();
            let t = w.ranks.slots[rank].time.max(w.now);
            let earlier = w.queue.peek().is_some_and(|q| q < (t, rank as u32));
            if !earlier {
                w.now = t;
                w.ranks.slots[rank].time = t;
                return Ok(());
            }
        }
        self.hand_over(rank)
    }

    /// Queue `rank` to run again at its own time and give the sequencer
    /// the baton until then.
    fn hand_over(&self, rank: usize) -> Result<(), Stalled> {
        {
            let mut w = self.lock();
            let t = w.ranks.slots[rank].time.max(w.now);
            w.ranks.slots[rank].state = RankState::Ready;
            self.push(&mut w, t, rank as u32, Action::RankRun(rank));
        }
        self.suspend(rank)
    }

    pub(super) fn block(&self, rank: usize, watch: Watch) -> Result<(), Stalled> {
        {
            let mut w = self.lock();
            let admin = matches!(watch, Watch::Admin);
            w.ranks.slots[rank].state = RankState::Blocked(watch);
            if !admin {
                let node = w.ranks.slots[rank].node;
                self.admin_retry(&mut w, node);
            }
        }
        self.suspend(rank)
    }

    /// Block `rank` until `ready()`.
    pub(crate) fn wait_until(
        &self,
        rank: usize,
        ready: &mut dyn FnMut() -> bool,
    ) -> Result<(), Stalled> {
        self.traced(
            rank,
            "wait",
            || "wait".into(),
            || loop {
                self.sync(rank)?;
                if ready() {
                    return Ok(());
                }
                self.block(rank, Watch::Any)?;
            },
        )
    }

    /// Block `rank` until every word passes its test (`true`), or until
    /// `notice`, if given, passes first (`false`).
    pub(crate) fn wait_words(
        &self,
        rank: usize,
        words: &[WordWatch],
        notice: Option<&WordWatch>,
    ) -> Result<bool, Stalled> {
        self.traced(
            rank,
            "wait",
            || format!("wait: {} word(s)", words.len()),
            || loop {
                self.sync(rank)?;
                if notice.is_some_and(WordWatch::ready) {
                    return Ok(false);
                }
                if words.iter().all(WordWatch::ready) {
                    return Ok(true);
                }
                self.block(rank, Watch::Words(words.to_vec(), notice.cloned()))?;
            },
        )
    }

    /// Block `rank` until its node's admin lock may be free.
    pub(crate) fn wait_admin(&self, rank: usize) -> Result<(), Stalled> {
        self.block(rank, Watch::Admin)
    }

    /// `rank` copies `bytes` with its CPU: the time depends on how many
    /// copies share the node's memory bandwidth at that moment.
    pub(crate) fn host_copy(&self, rank: usize, bytes: usize, cross_socket: bool) {
        if self.sync(rank).is_err() {
            return;
        }
        let c = &self.costs;
        let mut w = self.lock();
        let now = w.now;
        let node = w.ranks.slots[rank].node;
        let active = {
            let copies = &mut w.copies[node];
            copies.retain(|&end| end > now);
            copies.len() as f64 + 1.0
        };
        let core = if cross_socket {
            c.memcpy_xsocket_ps_per_byte
        } else {
            c.memcpy_ps_per_byte
        };
        let dur = transfer(bytes as u64, core.max(c.memory_ps_per_byte * active));
        w.copies[node].push(now + dur);
        w.ranks.slots[rank].time = now + dur;
        if let Some(tl) = w.timeline.as_ref() {
            let name = if cross_socket {
                format!("copy {bytes} B (cross-socket)")
            } else {
                format!("copy {bytes} B")
            };
            tl.rank_span(rank, "shm", name, ns(now), ns(now + dur));
        }
    }

    /// `rank`'s message-passing layer did its per-message work: the
    /// profile's `library` cost passes on its clock, and a message that
    /// came before its receive is copied out of the library's store.
    pub(crate) fn library(&self, rank: usize, work: LibraryWork) {
        if self.sync(rank).is_err() {
            return;
        }
        let (cost, what, unexpected) = match work {
            LibraryWork::Send => (self.costs.library_send, "library: send", 0),
            LibraryWork::Receive { unexpected_bytes } => {
                (self.costs.library_recv, "library: match", unexpected_bytes)
            }
        };
        {
            let mut w = self.lock();
            let now = w.now;
            w.ranks.slots[rank].time = now + cost;
            if let Some(tl) = w.timeline.as_ref() {
                tl.rank_span(rank, "host", what.into(), ns(now), ns(now + cost));
            }
        }
        if unexpected > 0 {
            self.host_copy(rank, unexpected, false);
        }
    }

    /// `rank` polled something that was not ready: a poll's worth of
    /// virtual time passes (at least 10 ns, so that a spinning rank always
    /// lets the model move).
    ///
    /// A rank that polls on while nothing else is queued is the only one
    /// that could still change anything, and it keeps asking for what
    /// others would have to do: past the watchdog's count of such polls,
    /// the run is a deadlock. The blocked ranks' waits fail, and so does
    /// this poll (`Err`), as a wait would; the rank hands the sequencer the
    /// baton, which a rank spinning on an empty queue would otherwise
    /// never do (a rank that polls on regardless is given up on after
    /// repeated stalls).
    pub(crate) fn idle_poll(&self, rank: usize) -> Result<(), Stalled> {
        {
            let mut w = self.lock();
            w.ranks.slots[rank].time += self.costs.host_poll.max(10_000);
            let events = w.stats.events;
            if w.queue.peek().is_none() && w.watchdog.lone_poll(events) {
                let why = format!("deadlock: rank {rank} polls while no event can make progress");
                let report = self.report(&w, &why);
                self.fail(&mut w, report.clone());
                drop(w);
                self.hand_over(rank)?;
                return Err(Stalled(report));
            }
        }
        self.sync(rank)
    }

    /// `rank` computes for `d`: its clock moves on by that much, and the
    /// model runs meanwhile (NICs progress, other ranks go on).
    pub(crate) fn compute(&self, rank: usize, d: std::time::Duration) {
        if self.sync(rank).is_err() {
            return;
        }
        let ps = u64::try_from(d.as_nanos().saturating_mul(1000)).unwrap_or(u64::MAX);
        {
            let mut w = self.lock();
            let now = w.now;
            w.ranks.slots[rank].time = now.saturating_add(ps);
            if let Some(tl) = w.timeline.as_ref() {
                tl.rank_span(
                    rank,
                    "host",
                    "compute".into(),
                    ns(now),
                    ns(now.saturating_add(ps)),
                );
            }
        }
        let _ = self.sync(rank);
    }

    /// `rank` raised a flag local rank `local` of its node may poll.
    pub(crate) fn wake_local(&self, rank: usize, local: usize) {
        let mut w = self.lock();
        let (node, socket, t) = {
            let s = &w.ranks.slots[rank];
            (s.node, s.socket, s.time)
        };
        let Some(target) = w.ranks.local(node, local) else {
            return;
        };
        let handoff = if w.ranks.slots[target].socket == socket {
            self.costs.cacheline
        } else {
            self.costs.cacheline_xsocket
        };
        // The kernel polls on the target's behalf; it sees the line once
        // the hand-off is done.
        self.node_changed(&mut w, node, t + handoff, Some(target), None);
    }

    /// `rank` (or, with `None`, a setup thread) writes a NIC register. The
    /// host pays the post; the NIC sees it one bus latency later.
    pub(crate) fn post_register(&self, rank: Option<usize>, nic: usize, offset: u32, value: u64) {
        let c = &self.costs;
        let mut w = self.lock();
        let mut cost = c.host_post;
        let mut commands = 0;
        if let Some(ctx) = railcoll_fw::abi::regs::CQ_TAIL.context_of(offset)
            && let Some(slot) = w.nics.get_mut(nic)
            && let Some(tail) = slot.tails.get_mut(ctx as usize)
        {
            commands = value.wrapping_sub(*tail).min(1 << 20);
            cost += c.host_command * commands;
            *tail = value;
        }
        let at = match rank {
            Some(r) => {
                let slot = &mut w.ranks.slots[r];
                let start = slot.time;
                slot.time += cost;
                let end = slot.time;
                if let Some(tl) = w.timeline.as_ref() {
                    let name = match commands {
                        0 => format!("register write to NIC {nic}"),
                        n => format!("post {n} command(s) to NIC {nic}"),
                    };
                    tl.rank_span(r, "put", name, ns(start), ns(end));
                }
                end + c.pci_latency
            }
            None => w.now,
        };
        let entity = self.entity_nic(nic);
        self.push(&mut w, at, entity, Action::RegWrite { nic, offset, value });
    }

    /// Record which schedule step `rank` is at (for watchdog reports).
    pub(crate) fn at_step(&self, rank: usize, step: u32, what: &'static str) {
        let mut w = self.lock();
        if let Some(s) = w.ranks.slots.get_mut(rank) {
            s.step = Some((step, what));
            let t = s.time;
            if let Some(tl) = w.timeline.as_ref() {
                tl.step(rank, step, what, ns(t));
            }
        }
    }
}
