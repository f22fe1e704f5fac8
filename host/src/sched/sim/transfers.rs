//! The replay's network side: a put's rail parts queued on their
//! sender's port and occupying the receiver's (k-port Hockney), their
//! delivery (data moved, accesses closed, signals counted), 8-byte
//! messages (barrier words, queued sends), hardware broadcasts, and the
//! chained puts a counter fires.

use super::*;

impl<T: Timing> Sim<'_, T> {
    /// Issue a put from `r` (at step `step`, graph node `issue`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn issue_put(
        &mut self,
        r: usize,
        step: u32,
        issue: NodeId,
        to: usize,
        src: Region,
        dst: Region,
        lane: Lane,
        signal: Option<Counter>,
    ) -> Option<u32> {
        if !self.check(r, step, r, &src) || !self.check(r, step, to, &dst) {
            return None;
        }
        if src.count != dst.count {
            self.fault(r, step, format!("put of {src} into {dst}: lengths differ"));
            return None;
        }
        let p = &self.set.params;
        let bytes = self.bytes(&src);
        let parts: Vec<(usize, usize)> =
            put_parts(lane, p.shape.rails, p.stripe_threshold, r, to, bytes)
                .into_iter()
                .map(|x| (x.rail, x.len))
                .collect();
        if parts.iter().any(|&(rail, _)| rail >= p.shape.rails) {
            self.fault(
                r,
                step,
                format!("put on {lane}: there are {} rails", p.shape.rails),
            );
            return None;
        }
        let id = self.send_parts(r, step, issue, to, parts, signal);
        // Reads and writes span issue..delivery; the end node is patched on
        // delivery (accesses refer to the put through `pending`).
        let a = self.access(r, src, false, issue, u32::MAX, r, step);
        let b = self.access(to, dst, true, issue, u32::MAX, r, step);
        self.track(id, issue, [a, b]);
        self.ranks[r].step_puts.entry(step).or_default().push(id);
        Some(id)
    }

    /// Queue every rail part of a transfer from `r` to `to` on its port
    /// and record it; returns its index in [`Replay::puts`].
    pub(super) fn send_parts(
        &mut self,
        r: usize,
        step: u32,
        issue: NodeId,
        to: usize,
        parts: Vec<(usize, usize)>,
        signal: Option<Counter>,
    ) -> u32 {
        let id = self.out.puts.len() as u32;
        for (i, &(rail, len)) in parts.iter().enumerate() {
            self.in_flight[r][rail] += 1;
            let m = &mut self.out.max_in_flight[r][rail];
            *m = (*m).max(self.in_flight[r][rail]);
            let cost = self.t.part(len);
            self.enqueue(
                r,
                rail,
                Xfer {
                    parts: vec![(id, i as u32)],
                    targets: vec![to],
                    cost,
                },
            );
        }
        self.part_left.push(parts.len() as u32);
        self.out.puts.push(PutRecord {
            from: r as Rank,
            step,
            to: to as Rank,
            parts,
            issued: self.now,
            delivered: f64::NAN,
            node: u32::MAX,
            issue,
            signal,
            set_only: false,
        });
        id
    }

    /// A set of `counter` on rank `r`'s NIC of `rail` that the NIC firing
    /// `issue` makes (a relay, a chained put's feed): over the node's bus
    /// or inside the NIC, never the network, so it takes no port and
    /// arrives now (the caller has charged the NIC's firing).
    pub(super) fn issue_set(
        &mut self,
        r: usize,
        step: u32,
        issue: NodeId,
        rail: usize,
        counter: Counter,
    ) -> u32 {
        let id = self.out.puts.len() as u32;
        // Counted in flight only to keep part_arrived's bookkeeping even.
        self.in_flight[r][rail] += 1;
        self.part_left.push(1);
        self.out.puts.push(PutRecord {
            from: r as Rank,
            step,
            to: r as Rank,
            parts: vec![(rail, 0)],
            issued: self.now,
            delivered: f64::NAN,
            node: u32::MAX,
            issue,
            signal: Some(counter),
            set_only: true,
        });
        self.track(id, issue, [None, None]);
        self.schedule(self.now, Ev::Part { put: id, part: 0 });
        id
    }

    pub(super) fn enqueue(&mut self, r: usize, rail: usize, x: Xfer) {
        self.send_q[r][rail].push_back(x);
        if !self.port_armed[r][rail] {
            self.port_armed[r][rail] = true;
            let at = self.now.max(self.send_free[r][rail]);
            self.schedule(at, Ev::Port { rank: r, rail });
        }
    }

    /// The sender's port on `rail` is free or its head transfer may start:
    /// it starts when every target's receive port is free, else the port
    /// retries when they are (first come, first served; ties by sequence).
    pub(super) fn port(&mut self, r: usize, rail: usize) {
        self.port_armed[r][rail] = false;
        let Some(head) = self.send_q[r][rail].front() else {
            return;
        };
        let ready = head
            .targets
            .iter()
            .map(|&t| self.recv_free[t][rail])
            .fold(self.send_free[r][rail], f64::max);
        if ready > self.now {
            self.port_armed[r][rail] = true;
            self.schedule(ready, Ev::Port { rank: r, rail });
            return;
        }
        let Some(x) = self.send_q[r][rail].pop_front() else {
            return;
        };
        let end = self.now + x.cost;
        self.send_free[r][rail] = end;
        for &t in &x.targets {
            self.recv_free[t][rail] = end;
        }
        for &(put, part) in &x.parts {
            self.schedule(end, Ev::Part { put, part });
        }
        if !self.send_q[r][rail].is_empty() {
            self.port_armed[r][rail] = true;
            self.schedule(end, Ev::Port { rank: r, rail });
        }
    }

    pub(super) fn part_arrived(&mut self, put: u32, part: u32) {
        let rec = self.out.puts[put as usize].clone();
        let (rail, _) = rec.parts[part as usize];
        let from = rec.from as usize;
        self.in_flight[from][rail] = self.in_flight[from][rail].saturating_sub(1);
        self.part_left[put as usize] -= 1;
        if self.part_left[put as usize] == 0 {
            // Delivered: the data is in place before the last part's event.
            let src_step = rec.step;
            let issue = self.put_issue[put as usize];
            let node = self.node(NodeKind::Delivered { put }, vec![issue]);
            self.out.puts[put as usize].node = node;
            self.out.puts[put as usize].delivered = self.now;
            let op = self.set.ranks[from].steps[src_step as usize].op.clone();
            let to = rec.to as usize;
            // A chained put's sets on completion (its source event's
            // COPY), once delivered: acknowledged, in the replay.
            if let (false, Op::ChainPut { done, .. }) = (rec.set_only, &op) {
                for f in done {
                    self.issue_set(from, src_step, node, usize::from(f.rail), f.into);
                }
            }
            match op {
                _ if rec.set_only => {}
                Op::Put { src, dst, .. }
                | Op::ChainPut { src, dst, .. }
                | Op::HwBcast { src, dst, .. } => {
                    self.move_data(from, src, to, dst);
                    for &i in &self.put_accesses[put as usize] {
                        self.out.accesses[i].end = node;
                    }
                }
                Op::WordPut { words, slot, .. } => {
                    self.notify(to, Notice::Word(words, slot), node, None);
                }
                Op::QueueSend { .. } => {
                    self.notify(to, Notice::Queue(rec.from), node, None);
                }
                Op::Ready { .. } => {
                    self.notify(to, Notice::Ready(rec.from), node, None);
                }
                _ => {}
            }
            self.wake(from);
        }
        if let Some(c) = rec.signal {
            let to = rec.to as usize;
            self.arrivals.entry((to, c)).or_default()[rail].push_back((put, part));
            self.try_chains(to);
            self.wake(to);
        }
    }

    /// Issue an 8-byte message (a barrier word write, a queued message)
    /// from `r` to `to`: ports as a put, no data region.
    pub(super) fn message(&mut self, r: usize, step: u32, issue: NodeId, to: usize) {
        if to >= self.set.ranks.len() {
            self.fault(
                r,
                step,
                format!("message to rank {to}, which does not exist"),
            );
            return;
        }
        let p = &self.set.params;
        let parts: Vec<(usize, usize)> =
            put_parts(Lane::Stripe, p.shape.rails, p.stripe_threshold, r, to, 8)
                .into_iter()
                .map(|x| (x.rail, x.len))
                .collect();
        let id = self.send_parts(r, step, issue, to, parts, None);
        self.track(id, issue, [None, None]);
        self.ranks[r].step_puts.entry(step).or_default().push(id);
    }

    /// Take `need[rail]` arrivals of `counter` at `r` if all are there.
    pub(super) fn take(
        &mut self,
        r: usize,
        counter: Counter,
        need: &[u32; MAX_RAILS],
    ) -> Option<Vec<(u32, u32)>> {
        let q = self.arrivals.entry((r, counter)).or_default();
        if q.iter().zip(need).any(|(q, &n)| q.len() < n as usize) {
            return None;
        }
        let mut taken = Vec::new();
        for (q, &n) in q.iter_mut().zip(need) {
            for _ in 0..n {
                if let Some(x) = q.pop_front() {
                    taken.push(x);
                }
            }
        }
        Some(taken)
    }

    pub(super) fn delivered_nodes(&self, parts: &[(u32, u32)]) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = parts
            .iter()
            .map(|&(p, _)| self.out.puts[p as usize].node)
            .filter(|&n| n != u32::MAX)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub(super) fn try_chains(&mut self, r: usize) {
        let mut i = 0;
        while i < self.ranks[r].chains.len() {
            let ch = self.ranks[r].chains[i].clone();
            let mut need = [0u32; MAX_RAILS];
            need[ch.rail] = ch.count;
            if let Some(parts) = self.take(r, ch.trigger, &need) {
                self.ranks[r].chains.remove(i);
                let mut preds = vec![ch.node];
                preds.extend(self.delivered_nodes(&parts));
                let fired = self.node(
                    NodeKind::Fired {
                        rank: r as Rank,
                        step: ch.step,
                    },
                    preds,
                );
                self.out.consumed.push(Consumption {
                    rank: r as Rank,
                    step: ch.step,
                    counter: ch.trigger,
                    node: fired,
                    parts,
                });
                // What the firing injects: the put (a relay has none),
                // then its sets (no network: modeled mode charges a
                // sibling's one bus latency, the replay nothing).
                let (put, sets) = match ch.put {
                    Op::ChainPut {
                        to,
                        src,
                        dst,
                        signal,
                        lane,
                        feeds,
                        ..
                    } => (
                        Some((to, src, dst, signal, lane)),
                        feeds.iter().map(|f| (f.into, f.rail)).collect(),
                    ),
                    Op::Relay { into, to, .. } => (None, vec![(into, to)]),
                    _ => (None, Vec::new()),
                };
                let saved = self.now;
                self.now += self.t.chain();
                if let Some((to, src, dst, signal, lane)) = put {
                    self.issue_put(r, ch.step, fired, to as usize, src, dst, lane, signal);
                }
                for (counter, rail) in sets {
                    let id = self.issue_set(r, ch.step, fired, usize::from(rail), counter);
                    // A relay's completion is its set; a chained put's is
                    // its put alone.
                    if put.is_none() {
                        self.ranks[r].step_puts.entry(ch.step).or_default().push(id);
                    }
                }
                self.now = saved;
            } else {
                i += 1;
            }
        }
    }

    pub(super) fn hw_bcast(
        &mut self,
        r: usize,
        s: u32,
        node: NodeId,
        src: Region,
        dst: Region,
        signal: Option<Counter>,
    ) {
        let topo = self.set.params.shape.topology;
        let Ok((my_node, local)) = topo.locate(r) else {
            return;
        };
        let targets: Vec<usize> = (0..topo.nodes())
            .filter(|&x| x != my_node)
            .filter_map(|x| topo.rank_of(x, local).ok())
            .collect();
        if !self.check(r, s, r, &src) || targets.iter().any(|&t| !self.check(r, s, t, &dst)) {
            return;
        }
        let bytes = self.bytes(&src);
        let mut parts = Vec::new();
        for &t in &targets {
            let id = self.out.puts.len() as u32;
            parts.push((id, 0));
            self.part_left.push(1);
            self.out.puts.push(PutRecord {
                from: r as Rank,
                step: s,
                to: t as Rank,
                parts: vec![(0, bytes)],
                issued: self.now,
                delivered: f64::NAN,
                node: u32::MAX,
                issue: node,
                signal,
                set_only: false,
            });
            let a = self.access(r, src, false, node, u32::MAX, r, s);
            let b = self.access(t, dst, true, node, u32::MAX, r, s);
            self.track(id, node, [a, b]);
            self.ranks[r].step_puts.entry(s).or_default().push(id);
            self.in_flight[r][0] += 1;
        }
        if !targets.is_empty() {
            let cost = self.t.bcast(bytes);
            self.enqueue(
                r,
                0,
                Xfer {
                    parts,
                    targets,
                    cost,
                },
            );
        }
    }
}
