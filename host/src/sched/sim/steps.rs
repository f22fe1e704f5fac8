//! The replay's host side: one rank's steps in program order (each op's
//! meaning in the model), and the notices that barrier words, queued
//! messages and node flags leave for the step that consumes them.

use super::*;

impl<T: Timing> Sim<'_, T> {
    pub(super) fn run(&mut self, r: usize) {
        let schedule = &self.set.ranks[r];
        let state_clock = self.ranks[r].clock.max(self.now);
        self.ranks[r].clock = state_clock;
        loop {
            let pc = self.ranks[r].pc;
            if self.ranks[r].clock > self.now {
                // Time passed on this rank: resume in time order.
                self.ranks[r].scheduled = true;
                let at = self.ranks[r].clock;
                self.schedule(at, Ev::Run(r));
                return;
            }
            let Some(step) = schedule.steps.get(pc) else {
                self.try_finish(r);
                return;
            };
            let s = pc as u32;
            // Dependencies on earlier puts' completion.
            let mut dep_nodes = Vec::new();
            for &a in &step.after {
                let ids = self.ranks[r].step_puts.get(&a).cloned().unwrap_or_default();
                let armed_chain = matches!(
                    schedule.steps.get(a as usize).map(|x| &x.op),
                    Some(Op::ChainPut { .. } | Op::Relay { .. })
                );
                if ids.is_empty() && armed_chain {
                    return; // the chained put has not fired yet
                }
                for id in ids {
                    let node = self.out.puts[id as usize].node;
                    if node == u32::MAX {
                        return; // wait for delivery
                    }
                    dep_nodes.push(node);
                }
            }
            match step.op.clone() {
                Op::Put {
                    to,
                    src,
                    dst,
                    lane,
                    signal,
                } => {
                    let node = self.step_node(r, s, dep_nodes);
                    self.issue_put(r, s, node, to as usize, src, dst, lane, signal);
                    self.ranks[r].clock += self.t.post();
                }
                // A relay is a chain whose firing sets the counter on
                // another rail (see `try_chains`).
                Op::ChainPut {
                    trigger,
                    count,
                    rail,
                    ..
                }
                | Op::Relay {
                    counter: trigger,
                    count,
                    from: rail,
                    ..
                } => {
                    let node = self.step_node(r, s, dep_nodes);
                    self.ranks[r].chains.push(Chain {
                        step: s,
                        trigger,
                        count,
                        rail: usize::from(rail),
                        node,
                        put: step.op.clone(),
                    });
                    self.ranks[r].clock += self.t.post();
                    self.try_chains(r);
                }
                Op::Wait { counter, arrivals } => {
                    let Some(parts) = self.take(r, counter, &arrivals) else {
                        return;
                    };
                    let mut extra = dep_nodes;
                    extra.extend(self.delivered_nodes(&parts));
                    let node = self.step_node(r, s, extra);
                    self.out.consumed.push(Consumption {
                        rank: r as Rank,
                        step: s,
                        counter,
                        node,
                        parts,
                    });
                }
                Op::Copy { src, dst } => {
                    if !self.check(r, s, r, &src) || !self.check(r, s, r, &dst) {
                        self.ranks[r].pc += 1;
                        continue;
                    }
                    let node = self.step_node(r, s, dep_nodes);
                    self.access(r, src, false, node, node, r, s);
                    self.access(r, dst, true, node, node, r, s);
                    self.move_data(r, src, r, dst);
                    self.ranks[r].clock += self.t.copy(self.bytes(&src));
                }
                Op::PeerCopy {
                    peer,
                    dir,
                    local,
                    remote,
                } => {
                    let peer = peer as usize;
                    if !self.same_node(r, peer) {
                        self.fault(
                            r,
                            s,
                            format!("shm copy with rank {peer}, which is not on this node"),
                        );
                        self.ranks[r].pc += 1;
                        continue;
                    }
                    if !self.check(r, s, r, &local) || !self.check(r, s, peer, &remote) {
                        self.ranks[r].pc += 1;
                        continue;
                    }
                    let node = self.step_node(r, s, dep_nodes);
                    let (from, src, to, dst) = match dir {
                        PeerDir::Push => (r, local, peer, remote),
                        PeerDir::Pull => (peer, remote, r, local),
                    };
                    self.access(from, src, false, node, node, r, s);
                    self.access(to, dst, true, node, node, r, s);
                    self.move_data(from, src, to, dst);
                    self.ranks[r].clock += self.t.copy(self.bytes(&local));
                }
                Op::Signal { to, flag } => {
                    let to = to as usize;
                    if !self.same_node(r, to) {
                        self.fault(
                            r,
                            s,
                            format!("flag signal to rank {to}, which is not on this node"),
                        );
                        self.ranks[r].pc += 1;
                        continue;
                    }
                    let node = self.step_node(r, s, dep_nodes);
                    self.notify_peer(to, Notice::Flag(flag), node, None);
                }
                Op::WaitFlag { flag, count, .. } => {
                    let notice = Notice::Flag(flag);
                    if self
                        .consume(r, s, dep_nodes, notice, count as usize)
                        .is_none()
                    {
                        return;
                    }
                }
                Op::HwBarrier => {
                    let topo = self.set.params.shape.topology;
                    if topo.locate(r).map(|x| x.1) != Ok(0) {
                        self.fault(r, s, "the hardware barrier is for node masters only".into());
                        self.ranks[r].pc += 1;
                        continue;
                    }
                    if self.ranks[r].barrier_arrival.is_none() {
                        let node = self.step_node(r, s, dep_nodes);
                        self.ranks[r].barrier_arrival = Some(node);
                        self.barrier_nodes.push((r, node));
                        if self.barrier_nodes.len() == topo.nodes() {
                            let arrived = std::mem::take(&mut self.barrier_nodes);
                            let preds = arrived.iter().map(|&(_, n)| n).collect();
                            let index = self.barriers;
                            self.barriers += 1;
                            let b = self.node(NodeKind::Barrier { index }, preds);
                            let release = self.now + self.t.barrier();
                            for &(q, _) in &arrived {
                                self.ranks[q].barrier_arrival = None;
                                self.ranks[q].last = Some(b);
                                self.ranks[q].pc += 1;
                                self.ranks[q].clock = self.ranks[q].clock.max(release);
                                if q != r {
                                    self.wake(q);
                                }
                            }
                            continue;
                        }
                    }
                    return;
                }
                Op::BarrierNumber(_) => {
                    self.step_node(r, s, dep_nodes);
                }
                Op::WordPut { to, .. } | Op::QueueSend { to } => {
                    let node = self.step_node(r, s, dep_nodes);
                    self.message(r, s, node, to as usize);
                    self.ranks[r].clock += self.t.post();
                }
                // Readiness: a message across nodes (a word write), a
                // flag's worth on the node (the peer reads this rank's
                // number in its memory).
                Op::Ready { to } => {
                    let to = to as usize;
                    let node = self.step_node(r, s, dep_nodes);
                    if self.same_node(r, to) {
                        self.notify_peer(to, Notice::Ready(r as Rank), node, None);
                    } else {
                        self.message(r, s, node, to);
                        self.ranks[r].clock += self.t.post();
                    }
                }
                Op::AwaitReady { from } => {
                    if self
                        .consume(r, s, dep_nodes, Notice::Ready(from), 1)
                        .is_none()
                    {
                        return;
                    }
                }
                Op::WordWait { words, slot } => {
                    let notice = Notice::Word(words, slot);
                    if self.consume(r, s, dep_nodes, notice, 1).is_none() {
                        return;
                    }
                }
                Op::QueueRecv { from } => {
                    if self
                        .consume(r, s, dep_nodes, Notice::Queue(from), 1)
                        .is_none()
                    {
                        return;
                    }
                    // Copying the item out of its slot: a post's worth.
                    self.ranks[r].clock += self.t.post();
                }
                Op::NodeArrive | Op::NodeRelease => {
                    let topo = self.set.params.shape.topology;
                    let Ok((node, local)) = topo.locate(r) else {
                        self.ranks[r].pc += 1;
                        continue;
                    };
                    let master = topo.rank_of(node, 0).unwrap_or(r);
                    let others = self.node_peers(r);
                    let arrive = matches!(step.op, Op::NodeArrive);
                    // The master collects arrivals and sends the release;
                    // the others send an arrival and collect the release.
                    let collects = (local == 0) == arrive;
                    if collects {
                        let (notice, count) = if arrive {
                            (Notice::Arrive, others.len())
                        } else {
                            (Notice::Release, 1)
                        };
                        if self.consume(r, s, dep_nodes, notice, count).is_none() {
                            return;
                        }
                    } else {
                        let node = self.step_node(r, s, dep_nodes);
                        if arrive {
                            self.notify_peer(master, Notice::Arrive, node, None);
                        } else {
                            for q in others {
                                self.notify_peer(q, Notice::Release, node, None);
                            }
                        }
                    }
                }
                Op::NodeBcast { root, region } => {
                    let root = root as usize;
                    if !self.same_node(r, root) {
                        self.fault(
                            r,
                            s,
                            format!("node broadcast from rank {root}, which is not on this node"),
                        );
                        self.ranks[r].pc += 1;
                        continue;
                    }
                    if !self.check(r, s, r, &region) {
                        self.ranks[r].pc += 1;
                        continue;
                    }
                    if r == root {
                        let node = self.step_node(r, s, dep_nodes);
                        self.access(r, region, false, node, node, r, s);
                        for q in self.node_peers(r) {
                            self.notify_peer(q, Notice::Bcast, node, Some(region));
                        }
                    } else {
                        let Some((node, got)) = self.consume(r, s, dep_nodes, Notice::Bcast, 1)
                        else {
                            return;
                        };
                        self.access(r, region, true, node, node, r, s);
                        if let Some(&(_, Some(src))) = got.first() {
                            self.move_data(root, src, r, region);
                        }
                    }
                    self.ranks[r].clock += self.t.copy(self.bytes(&region));
                }
                Op::HwBcast { src, dst, signal } => {
                    let node = self.step_node(r, s, dep_nodes);
                    self.hw_bcast(r, s, node, src, dst, signal);
                    self.ranks[r].clock += self.t.post();
                }
            }
            self.ranks[r].pc += 1;
        }
    }

    /// `notice` reached `to` (sent by graph node `node`).
    pub(super) fn notify(&mut self, to: usize, notice: Notice, node: NodeId, data: Option<Region>) {
        self.notices
            .entry((to, notice))
            .or_default()
            .push_back((node, data));
        self.wake(to);
    }

    /// Send `notice` to node peer `to` through the node segment (a flag's
    /// delay).
    pub(super) fn notify_peer(
        &mut self,
        to: usize,
        notice: Notice,
        node: NodeId,
        data: Option<Region>,
    ) {
        let at = self.now + self.t.flag();
        self.schedule(
            at,
            Ev::Notice {
                to,
                notice,
                node,
                data,
            },
        );
    }

    /// Step `s` of `r` consumes `count` notices `notice`, if all are
    /// there: its graph node follows their senders' (and `deps`).
    pub(super) fn consume(
        &mut self,
        r: usize,
        s: u32,
        deps: Vec<NodeId>,
        notice: Notice,
        count: usize,
    ) -> Option<(NodeId, Vec<Delivered>)> {
        let got = self.take_notices(r, notice, count)?;
        let mut preds = deps;
        preds.extend(got.iter().map(|&(n, _)| n));
        Some((self.step_node(r, s, preds), got))
    }

    /// Take `count` notices `notice` at `r` if all are there.
    pub(super) fn take_notices(
        &mut self,
        r: usize,
        notice: Notice,
        count: usize,
    ) -> Option<Vec<Delivered>> {
        let q = self.notices.entry((r, notice)).or_default();
        if q.len() < count {
            return None;
        }
        Some(q.drain(..count).collect())
    }

    /// Does `peer` exist and share `r`'s node?
    pub(super) fn same_node(&self, r: usize, peer: usize) -> bool {
        let topo = self.set.params.shape.topology;
        peer < self.set.ranks.len() && topo.locate(peer).map(|x| x.0) == topo.locate(r).map(|x| x.0)
    }

    /// The other ranks of `r`'s node.
    pub(super) fn node_peers(&self, r: usize) -> Vec<usize> {
        let topo = self.set.params.shape.topology;
        let Ok((node, _)) = topo.locate(r) else {
            return Vec::new();
        };
        (0..topo.ranks_per_node())
            .filter_map(|l| topo.rank_of(node, l).ok())
            .filter(|&q| q != r)
            .collect()
    }
}
