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
//! Parts: this module holds the replay's records and its clock;
//! `transfers` the network side (ports, parts, deliveries, chained puts);
//! `steps` the host side (each op's meaning, the notices steps consume).
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

mod steps;
mod transfers;

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
    /// A NIC's set of a counter on this rank's own NICs (a relay's or a
    /// chained put's feed): no data, no network.
    pub set_only: bool,
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

/// What a shm flag raise, a barrier word write, a queued message or a
/// node barrier or broadcast flag tells its target (consumed by the
/// matching wait, once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Notice {
    /// A raise of schedule flag `f` ([`Op::Signal`]).
    Flag(Flag),
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
    /// This rank entered the call ([`Op::Ready`]).
    Ready(Rank),
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::Flag(flag) => write!(f, "flag f{flag}"),
            Notice::Word(w, slot) => write!(f, "the {w} barrier word {slot}"),
            Notice::Queue(from) => write!(f, "a queued message from rank {from}"),
            Notice::Arrive => f.write_str("a node barrier arrival"),
            Notice::Release => f.write_str("the node barrier release"),
            Notice::Bcast => f.write_str("a node broadcast's data"),
            Notice::Ready(from) => write!(f, "rank {from}'s readiness"),
        }
    }
}

/// A chained put whose trigger never collects its count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StuckChain {
    /// Rank whose NIC holds it.
    pub rank: Rank,
    /// Its arming step.
    pub step: u32,
    /// Rail of the trigger and the put.
    pub rail: usize,
    /// The trigger.
    pub trigger: Counter,
    /// Sets it waits for.
    pub needs: u32,
    /// Sets that arrived (and were left unconsumed).
    pub arrived: u32,
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
    /// Chained puts whose trigger never filled (the NIC would never start
    /// them).
    pub stuck_chains: Vec<StuckChain>,
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
            stuck_chains: Vec::new(),
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
            for ch in &self.ranks[r].chains {
                let arrived = self
                    .arrivals
                    .get(&(r, ch.trigger))
                    .and_then(|q| q.get(ch.rail))
                    .map_or(0, |q| q.len() as u32);
                self.out.stuck_chains.push(StuckChain {
                    rank: r as Rank,
                    step: ch.step,
                    rail: ch.rail,
                    trigger: ch.trigger,
                    needs: ch.count,
                    arrived,
                });
            }
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
        let mut notices: Vec<_> = self
            .notices
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(&(r, n), q)| (r as Rank, n, q.len() as u32))
            .collect();
        notices.sort_unstable();
        // Flag raises are reported as such (the verifier's words for them).
        for &(r, n, count) in &notices {
            if let Notice::Flag(f) = n {
                self.out.leftover_flags.push((r, f, count));
            }
        }
        notices.retain(|(_, n, _)| !matches!(n, Notice::Flag(_)));
        self.out.leftover_notices = notices;
    }
}
