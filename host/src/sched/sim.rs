//! Discrete-event replay of a [`ScheduleSet`]: every rank's steps, every
//! rail part on its ports, every signal, in time order under a [`Timing`]
//! model, with ties broken by a sequence number (never by hash order or
//! threads), so a replay is reproducible bit for bit.
//!
//! The replay is the common ground of the verifier and the cost model. It
//! records:
//! - the happens-before graph: one node per executed step, per delivered
//!   put, per NIC-fired chained put and per barrier, with edges for program
//!   order, signal consumption, put completion and barriers;
//! - every memory access as an interval of graph nodes;
//! - the symbolic content of every buffer block (origin rank and block);
//! - which signals each wait consumed, and what was left unconsumed;
//! - finish times per rank, and the ranks still blocked if it deadlocked.
//!
//! A put's parts occupy the sender's and the receiver's port of their rail
//! (Hockney's k-port model: each rank sends and receives one message per
//! rail at a time); a hardware broadcast occupies the root's rail-0 port
//! and every target's. A barrier word write and a queued message are
//! 8-byte messages on the rail their pair stripes to; what they tell the
//! target, like the node barrier's and the node broadcast's flags, is a
//! *notice* ([`Notice`]) the target's wait consumes.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use super::*;

/// Costs of the primitive actions, in microseconds.
pub trait Timing {
    /// Occupancy of one rail part of `bytes` on the sender's and the
    /// receiver's port (Hockney: t_s + bytes * tau).
    fn part(&self, bytes: usize) -> f64;
    /// Host time to post one put.
    fn post(&self) -> f64 {
        0.0
    }
    /// Host time of a copy of `bytes` (local or between node peers).
    fn copy(&self, _bytes: usize) -> f64 {
        0.0
    }
    /// Delay of a shm flag from setter to waiter.
    fn flag(&self) -> f64 {
        0.0
    }
    /// The hardware barrier, from the last arrival to release.
    fn barrier(&self) -> f64 {
        0.0
    }
    /// The hardware broadcast of `bytes`.
    fn bcast(&self, bytes: usize) -> f64 {
        self.part(bytes)
    }
    /// NIC time from a trigger's last set to the chained put's start.
    fn chain(&self) -> f64 {
        0.0
    }
}

/// Every action takes no time (the verifier's replay).
#[derive(Clone, Copy, Debug, Default)]
pub struct Untimed;

impl Timing for Untimed {
    fn part(&self, _bytes: usize) -> f64 {
        0.0
    }
}

/// Index of a happens-before graph node.
pub type NodeId = u32;

/// What a graph node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A rank executed (or, for waits, completed) its step.
    Step {
        /// Rank.
        rank: Rank,
        /// Step index.
        step: u32,
    },
    /// Put `put` was delivered (all parts written at the target).
    Delivered {
        /// Put index in [`Replay::puts`].
        put: u32,
    },
    /// A chained put was started by the NIC.
    Fired {
        /// Rank whose NIC fired it.
        rank: Rank,
        /// The arming step.
        step: u32,
    },
    /// All ranks passed hardware barrier number `index`.
    Barrier {
        /// Barrier number.
        index: u32,
    },
}

/// A graph node: what it is and what happens before it directly.
#[derive(Clone, Debug)]
pub struct Node {
    /// Kind.
    pub kind: NodeKind,
    /// Direct predecessors.
    pub preds: Vec<NodeId>,
}

/// A memory block set, by owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mem {
    /// Owning rank.
    pub rank: Rank,
    /// Buffer.
    pub buf: Buf,
}

/// One access to `count` blocks of `mem` from `block`, during the graph
/// interval `[start, end]`.
#[derive(Clone, Copy, Debug)]
pub struct Access {
    /// Memory.
    pub mem: Mem,
    /// First block.
    pub block: u32,
    /// Blocks.
    pub count: u32,
    /// Write (else read).
    pub write: bool,
    /// The access cannot start before this node.
    pub start: NodeId,
    /// It is over by this node.
    pub end: NodeId,
    /// The step responsible.
    pub rank: Rank,
    /// Its index.
    pub step: u32,
}

/// A put (or one target of a hardware broadcast) as replayed.
#[derive(Clone, Debug)]
pub struct PutRecord {
    /// Source rank.
    pub from: Rank,
    /// Step of `from` that issued (or armed) it.
    pub step: u32,
    /// Target.
    pub to: Rank,
    /// Parts: rail, bytes.
    pub parts: Vec<(usize, usize)>,
    /// Issue time.
    pub issued: f64,
    /// Delivery time (all parts).
    pub delivered: f64,
    /// Graph node of the delivery (`u32::MAX` while in flight).
    pub node: NodeId,
    /// Graph node of the issue (the step, or the NIC's firing).
    pub issue: NodeId,
    /// Counter at the target, if any.
    pub signal: Option<Counter>,
}

/// The signals a wait (or a chain trigger) consumed.
#[derive(Clone, Debug)]
pub struct Consumption {
    /// Waiting rank.
    pub rank: Rank,
    /// Step.
    pub step: u32,
    /// Counter.
    pub counter: Counter,
    /// Graph node of the completed wait (or of the NIC's firing).
    pub node: NodeId,
    /// Parts consumed: (put index, part index).
    pub parts: Vec<(u32, u32)>,
}

/// Something the replay found impossible to execute.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Rank.
    pub rank: Rank,
    /// Step.
    pub step: u32,
    /// What.
    pub what: String,
}

/// What a barrier word write, a queued message or a node flag tells its
/// target (consumed by the matching wait, once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Notice {
    /// The barrier number reached word `slot` of `words`.
    Word(Words, u32),
    /// A queued message from this rank.
    Queue(Rank),
    /// A node peer arrived at the node barrier (to its master).
    Arrive,
    /// The master released the node barrier.
    Release,
    /// The node broadcast's data is in the node segment.
    Bcast,
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::Word(w, slot) => write!(f, "the {w} barrier word {slot}"),
            Notice::Queue(from) => write!(f, "a queued message from rank {from}"),
            Notice::Arrive => f.write_str("a node barrier arrival"),
            Notice::Release => f.write_str("the node barrier release"),
            Notice::Bcast => f.write_str("a node broadcast's data"),
        }
    }
}

/// Unset block content.
pub const UNSET: u64 = u64::MAX;

/// Symbolic content: origin rank and its send block.
pub fn val(origin: u32, block: u32) -> u64 {
    (u64::from(origin) << 32) | u64::from(block)
}

/// The outcome of a replay.
#[derive(Clone, Debug)]
pub struct Replay {
    /// Happens-before graph.
    pub nodes: Vec<Node>,
    /// Memory accesses.
    pub accesses: Vec<Access>,
    /// Puts (hardware broadcast targets included, one record each).
    pub puts: Vec<PutRecord>,
    /// Consumptions by waits and chain triggers.
    pub consumed: Vec<Consumption>,
    /// Signals never consumed: (rank, counter, put, part).
    pub leftover_parts: Vec<(Rank, Counter, u32, u32)>,
    /// Flag raises never consumed: (rank, flag, count).
    pub leftover_flags: Vec<(Rank, Flag, u32)>,
    /// Notices never consumed: (rank, notice, count).
    pub leftover_notices: Vec<(Rank, Notice, u32)>,
    /// Time each rank finished (all its puts complete), `None` if it never
    /// did.
    pub finish: Vec<Option<f64>>,
    /// Ranks that could not finish, with their pending step.
    pub blocked: Vec<(Rank, u32, String)>,
    /// Faults (out-of-range regions, bad peers).
    pub faults: Vec<Fault>,
    /// Content of every buffer block at the end.
    pub content: HashMap<Mem, Vec<u64>>,
    /// Writes per receive block, per rank.
    pub recv_writes: Vec<Vec<u32>>,
    /// Most puts a rank had in flight at once, per rail.
    pub max_in_flight: Vec<[u32; MAX_RAILS]>,
    /// Events processed.
    pub events: u64,
}

impl Replay {
    /// The latest finish time (the collective's latency), if all finished.
    pub fn makespan(&self) -> Option<f64> {
        self.finish
            .iter()
            .try_fold(0.0f64, |acc, f| f.map(|t| acc.max(t)))
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Key(f64, u64);

impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        // Min-heap on (time, seq).
        other.0.total_cmp(&self.0).then(other.1.cmp(&self.1))
    }
}

/// Arrived, unconsumed parts (put, part) of one counter, per rail.
type RailQueues = [VecDeque<(u32, u32)>; MAX_RAILS];

#[derive(Clone, Copy, Debug)]
enum Ev {
    Run(usize),
    Port {
        rank: usize,
        rail: usize,
    },
    Part {
        put: u32,
        part: u32,
    },
    Flag {
        to: usize,
        flag: Flag,
        node: NodeId,
    },
    Notice {
        to: usize,
        notice: Notice,
        node: NodeId,
        data: Option<Region>,
    },
}

/// One transfer waiting for its sender's port: a rail part of a put, or a
/// hardware broadcast (several targets at once).
#[derive(Clone, Debug)]
struct Xfer {
    parts: Vec<(u32, u32)>,
    targets: Vec<usize>,
    cost: f64,
}

#[derive(Clone, Debug)]
struct Chain {
    step: u32,
    trigger: Counter,
    count: u32,
    rail: usize,
    node: NodeId,
    put: Op,
}

#[derive(Debug, Default, Clone)]
struct RankState {
    pc: usize,
    clock: f64,
    last: Option<NodeId>,
    scheduled: bool,
    done: bool,
    /// Put index per step index (puts and chained puts).
    step_puts: HashMap<u32, Vec<u32>>,
    chains: Vec<Chain>,
    barrier_arrival: Option<NodeId>,
}

/// A notice that reached its target: the graph node that sent it and, for
/// a node broadcast, the root's source region.
type Delivered = (NodeId, Option<Region>);

struct Sim<'a, T: Timing> {
    set: &'a ScheduleSet,
    t: &'a T,
    now: f64,
    seq: u64,
    heap: BinaryHeap<(Key, usize)>,
    evs: Vec<Ev>,
    ranks: Vec<RankState>,
    send_free: Vec<[f64; MAX_RAILS]>,
    recv_free: Vec<[f64; MAX_RAILS]>,
    send_q: Vec<[VecDeque<Xfer>; MAX_RAILS]>,
    port_armed: Vec<[bool; MAX_RAILS]>,
    arrivals: HashMap<(usize, Counter), RailQueues>,
    flags: HashMap<(usize, Flag), VecDeque<NodeId>>,
    notices: HashMap<(usize, Notice), VecDeque<Delivered>>,
    part_left: Vec<u32>,
    put_issue: Vec<NodeId>,
    put_accesses: Vec<Vec<usize>>,
    barrier_nodes: Vec<(usize, NodeId)>,
    barriers: u32,
    in_flight: Vec<[u32; MAX_RAILS]>,
    out: Replay,
}

/// Replay `set` under `timing`.
pub fn replay<T: Timing>(set: &ScheduleSet, timing: &T) -> Replay {
    let n = set.ranks.len();
    let mut content = HashMap::new();
    for r in 0..n as Rank {
        let send: Vec<u64> = (0..set.params.send_blocks()).map(|j| val(r, j)).collect();
        content.insert(
            Mem {
                rank: r,
                buf: Buf::Send,
            },
            send,
        );
        content.insert(
            Mem {
                rank: r,
                buf: Buf::Recv,
            },
            vec![UNSET; set.params.recv_blocks() as usize],
        );
        content.insert(
            Mem {
                rank: r,
                buf: Buf::Scratch,
            },
            vec![UNSET; set.scratch_blocks as usize],
        );
    }
    let mut sim = Sim {
        set,
        t: timing,
        now: 0.0,
        seq: 0,
        heap: BinaryHeap::new(),
        evs: Vec::new(),
        ranks: vec![RankState::default(); n],
        send_free: vec![[0.0; MAX_RAILS]; n],
        recv_free: vec![[0.0; MAX_RAILS]; n],
        send_q: (0..n).map(|_| Default::default()).collect(),
        port_armed: vec![[false; MAX_RAILS]; n],
        arrivals: HashMap::new(),
        flags: HashMap::new(),
        notices: HashMap::new(),
        part_left: Vec::new(),
        put_issue: Vec::new(),
        put_accesses: Vec::new(),
        barrier_nodes: Vec::new(),
        barriers: 0,
        in_flight: vec![[0; MAX_RAILS]; n],
        out: Replay {
            nodes: Vec::new(),
            accesses: Vec::new(),
            puts: Vec::new(),
            consumed: Vec::new(),
            leftover_parts: Vec::new(),
            leftover_flags: Vec::new(),
            leftover_notices: Vec::new(),
            finish: vec![None; n],
            blocked: Vec::new(),
            faults: Vec::new(),
            content,
            recv_writes: vec![vec![0; set.params.recv_blocks() as usize]; n],
            max_in_flight: vec![[0; MAX_RAILS]; n],
            events: 0,
        },
    };
    for r in 0..n {
        sim.schedule(0.0, Ev::Run(r));
        sim.ranks[r].scheduled = true;
    }
    while let Some((Key(time, _), idx)) = sim.heap.pop() {
        sim.now = time;
        sim.out.events += 1;
        match sim.evs[idx] {
            Ev::Run(r) => {
                sim.ranks[r].scheduled = false;
                sim.run(r);
            }
            Ev::Part { put, part } => sim.part_arrived(put, part),
            Ev::Port { rank, rail } => sim.port(rank, rail),
            Ev::Flag { to, flag, node } => {
                sim.flags.entry((to, flag)).or_default().push_back(node);
                sim.wake(to);
            }
            Ev::Notice {
                to,
                notice,
                node,
                data,
            } => sim.notify(to, notice, node, data),
        }
    }
    sim.finish_up();
    sim.out
}

impl<T: Timing> Sim<'_, T> {
    fn schedule(&mut self, time: f64, ev: Ev) {
        self.evs.push(ev);
        self.heap.push((Key(time, self.seq), self.evs.len() - 1));
        self.seq += 1;
    }

    fn node(&mut self, kind: NodeKind, preds: Vec<NodeId>) -> NodeId {
        self.out.nodes.push(Node { kind, preds });
        (self.out.nodes.len() - 1) as NodeId
    }

    fn wake(&mut self, r: usize) {
        if !self.ranks[r].scheduled && !self.ranks[r].done {
            self.ranks[r].scheduled = true;
            let at = self.now.max(self.ranks[r].clock);
            self.schedule(at, Ev::Run(r));
        }
    }

    fn fault(&mut self, r: usize, step: u32, what: String) {
        self.out.faults.push(Fault {
            rank: r as Rank,
            step,
            what,
        });
    }

    fn bytes(&self, region: &Region) -> usize {
        region.count as usize * self.set.params.block_bytes
    }

    fn check(&mut self, r: usize, step: u32, owner: usize, region: &Region) -> bool {
        let len = self
            .out
            .content
            .get(&Mem {
                rank: owner as Rank,
                buf: region.buf,
            })
            .map_or(0, Vec::len);
        if region.end() as usize > len || owner >= self.set.ranks.len() {
            self.fault(
                r,
                step,
                format!("region {region} of rank {owner} is outside its buffer of {len} blocks"),
            );
            return false;
        }
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn access(
        &mut self,
        owner: usize,
        region: Region,
        write: bool,
        start: NodeId,
        end: NodeId,
        r: usize,
        step: u32,
    ) -> Option<usize> {
        if region.count == 0 {
            return None;
        }
        self.out.accesses.push(Access {
            mem: Mem {
                rank: owner as Rank,
                buf: region.buf,
            },
            block: region.block,
            count: region.count,
            write,
            start,
            end,
            rank: r as Rank,
            step,
        });
        Some(self.out.accesses.len() - 1)
    }

    /// Register put `id` issued at `issue` with its two accesses.
    fn track(&mut self, id: u32, issue: NodeId, accesses: [Option<usize>; 2]) {
        debug_assert_eq!(self.put_issue.len(), id as usize);
        self.put_issue.push(issue);
        self.put_accesses
            .push(accesses.into_iter().flatten().collect());
    }

    /// Copy content `src` of `from` to `dst` of `to` (now).
    fn move_data(&mut self, from: usize, src: Region, to: usize, dst: Region) {
        let n = src.count.min(dst.count) as usize;
        let values: Vec<u64> = self
            .out
            .content
            .get(&Mem {
                rank: from as Rank,
                buf: src.buf,
            })
            .map(|v| v.iter().skip(src.block as usize).take(n).copied().collect())
            .unwrap_or_default();
        if let Some(d) = self.out.content.get_mut(&Mem {
            rank: to as Rank,
            buf: dst.buf,
        }) {
            for (i, v) in values.into_iter().enumerate() {
                if let Some(slot) = d.get_mut(dst.block as usize + i) {
                    *slot = v;
                }
            }
        }
        if dst.buf == Buf::Recv
            && let Some(w) = self.out.recv_writes.get_mut(to)
        {
            for i in 0..n {
                if let Some(c) = w.get_mut(dst.block as usize + i) {
                    *c += 1;
                }
            }
        }
    }

    fn step_node(&mut self, r: usize, step: u32, extra: Vec<NodeId>) -> NodeId {
        let mut preds: Vec<NodeId> = self.ranks[r].last.into_iter().collect();
        preds.extend(extra);
        let id = self.node(
            NodeKind::Step {
                rank: r as Rank,
                step,
            },
            preds,
        );
        self.ranks[r].last = Some(id);
        id
    }

    /// Issue a put from `r` (at step `step`, graph node `issue`).
    #[allow(clippy::too_many_arguments)]
    fn issue_put(
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
    fn send_parts(
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
        });
        id
    }

    fn enqueue(&mut self, r: usize, rail: usize, x: Xfer) {
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
    fn port(&mut self, r: usize, rail: usize) {
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

    fn part_arrived(&mut self, put: u32, part: u32) {
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
            match op {
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

    /// `notice` reached `to` (sent by graph node `node`).
    fn notify(&mut self, to: usize, notice: Notice, node: NodeId, data: Option<Region>) {
        self.notices
            .entry((to, notice))
            .or_default()
            .push_back((node, data));
        self.wake(to);
    }

    /// Send `notice` to node peer `to` through the node segment (a flag's
    /// delay).
    fn notify_peer(&mut self, to: usize, notice: Notice, node: NodeId, data: Option<Region>) {
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
    fn consume(
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
    fn take_notices(&mut self, r: usize, notice: Notice, count: usize) -> Option<Vec<Delivered>> {
        let q = self.notices.entry((r, notice)).or_default();
        if q.len() < count {
            return None;
        }
        Some(q.drain(..count).collect())
    }

    /// Issue an 8-byte message (a barrier word write, a queued message)
    /// from `r` to `to`: ports as a put, no data region.
    fn message(&mut self, r: usize, step: u32, issue: NodeId, to: usize) {
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

    /// Does `peer` exist and share `r`'s node?
    fn same_node(&self, r: usize, peer: usize) -> bool {
        let topo = self.set.params.shape.topology;
        peer < self.set.ranks.len() && topo.locate(peer).map(|x| x.0) == topo.locate(r).map(|x| x.0)
    }

    /// The other ranks of `r`'s node.
    fn node_peers(&self, r: usize) -> Vec<usize> {
        let topo = self.set.params.shape.topology;
        let Ok((node, _)) = topo.locate(r) else {
            return Vec::new();
        };
        (0..topo.ranks_per_node())
            .filter_map(|l| topo.rank_of(node, l).ok())
            .filter(|&q| q != r)
            .collect()
    }

    /// Take `need[rail]` arrivals of `counter` at `r` if all are there.
    fn take(
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

    fn delivered_nodes(&self, parts: &[(u32, u32)]) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = parts
            .iter()
            .map(|&(p, _)| self.out.puts[p as usize].node)
            .filter(|&n| n != u32::MAX)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn try_chains(&mut self, r: usize) {
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
                if let Op::ChainPut {
                    to,
                    src,
                    dst,
                    signal,
                    rail,
                    ..
                } = ch.put
                {
                    let saved = self.now;
                    self.now += self.t.chain();
                    self.issue_put(
                        r,
                        ch.step,
                        fired,
                        to as usize,
                        src,
                        dst,
                        Lane::Rail(rail),
                        signal,
                    );
                    self.now = saved;
                }
            } else {
                i += 1;
            }
        }
    }

    fn run(&mut self, r: usize) {
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
                    Some(Op::ChainPut { .. })
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
                Op::ChainPut {
                    trigger,
                    count,
                    rail,
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
                    let at = self.now + self.t.flag();
                    self.schedule(at, Ev::Flag { to, flag, node });
                }
                Op::WaitFlag { flag, count } => {
                    let q = self.flags.entry((r, flag)).or_default();
                    if q.len() < count as usize {
                        return;
                    }
                    let mut extra = dep_nodes;
                    for _ in 0..count {
                        if let Some(x) = q.pop_front() {
                            extra.push(x);
                        }
                    }
                    self.step_node(r, s, extra);
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

    fn hw_bcast(
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

    fn try_finish(&mut self, r: usize) {
        if !self.ranks[r].chains.is_empty() {
            return;
        }
        let mut end = self.ranks[r].clock;
        for ids in self.ranks[r].step_puts.values() {
            for &id in ids {
                let p = &self.out.puts[id as usize];
                if p.node == u32::MAX {
                    return;
                }
                end = end.max(p.delivered);
            }
        }
        self.ranks[r].done = true;
        self.out.finish[r] = Some(end);
    }

    fn finish_up(&mut self) {
        for r in 0..self.ranks.len() {
            if self.ranks[r].done {
                continue;
            }
            let pc = self.ranks[r].pc;
            let what = match self.set.ranks[r].steps.get(pc) {
                Some(step) => format!("{}", step.op),
                None if !self.ranks[r].chains.is_empty() => {
                    let ch = &self.ranks[r].chains[0];
                    format!(
                        "chained put of step {} waiting for c{}",
                        ch.step, ch.trigger
                    )
                }
                None => "completion of its puts".to_string(),
            };
            self.out.blocked.push((r as Rank, pc as u32, what));
        }
        let mut left: Vec<_> = self
            .arrivals
            .iter()
            .flat_map(|(&(r, c), q)| {
                q.iter().flat_map(move |rail| {
                    rail.iter().map(move |&(p, part)| (r as Rank, c, p, part))
                })
            })
            .collect();
        left.sort_unstable();
        self.out.leftover_parts = left;
        let mut flags: Vec<_> = self
            .flags
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&(r, f), q)| (r as Rank, f, q.len() as u32))
            .collect();
        flags.sort_unstable();
        self.out.leftover_flags = flags;
        let mut notices: Vec<_> = self
            .notices
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&(r, n), q)| (r as Rank, n, q.len() as u32))
            .collect();
        notices.sort_unstable();
        self.out.leftover_notices = notices;
    }
}
