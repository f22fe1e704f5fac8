//! Collective algorithms as data: per-rank *schedules*.
//!
//! A generator ([`generate()`]) turns [`Params`] (collective, algorithm,
//! shape, root, block size, striping threshold, and who drives the puts:
//! the host, or the NICs after [`offload`]) into one [`Schedule`] per rank: a list of [`Step`]s in
//! program order, each an [`Op`] (put, wait on a destination counter, local
//! copy, copy to or from a node peer's memory, shm flag signal and wait,
//! hardware barrier and broadcast, a NIC-chained put, a relay of a
//! counter's sets to another rail's NIC, the barrier
//! mechanisms of \[GTNP02\]: word writes and polls, queued messages, the
//! node's flat tree; the node segment's broadcast) with explicit
//! dependencies on earlier puts' local completion. Regions are counted in
//! *blocks* of the collective's block size, so the same schedule describes
//! every size except for rail striping, which depends on bytes.
//!
//! This module is the compiler: it imports nothing of the runtime that
//! runs its output (the executor and the requests live in
//! [`crate::coll`], above it; `tests/tests/layers.rs` keeps it so).
//!
//! One [`ScheduleSet`] serves four uses:
//! - the host executor (`coll::exec`) runs a rank's schedule on the driver
//!   and the node segment, as a resumable run: blocking calls, and the
//!   non-blocking and persistent collectives of `coll::request`;
//! - [`verify`]: proves a set correct without running it (no unsatisfiable
//!   wait, no signal counted twice or ambiguously, every output block
//!   written exactly once with the right source block, no unordered
//!   conflicting accesses, budgets);
//! - [`cost`]: evaluates it under Hockney (t_s, tau, k ports) next to the
//!   papers' closed forms;
//! - [`sim`]: the discrete-event replay both of those are built on.
//!
//! Contract of every collective: under the MPI buffer contract (the
//! default, [`crate::config::BufferContract`]) a rank's `send`, `recv`
//! and scratch are written only after it has entered the call, every set
//! that could write earlier carrying the readiness guard of [`persist`];
//! under the SHMEM contract, on entry they may be written by any rank
//! that has entered the same call, and a program that reads or rewrites a
//! collective's buffers and then runs another collective on them must
//! separate the two with a barrier. Under both, on return nobody touches
//! the rank's buffers any more (verified), and a persistent collective's
//! set is guarded, so its starts need no barrier between them.
//!
//! Submodules: [`algo`] (names), [`budget`] (what a schedule takes from
//! the NICs, proved before posting), [`catalogue`] (one entry per algorithm:
//! reference, constraints, generator, closed form), [`mod@generate`] (generators),
//! [`offload`] (puts moved onto the NICs as chained puts; `counted`,
//! crate-private, first turns barrier words and node flags into
//! destination counters for it), [`persist`]
//! (the readiness guard), [`sim`], [`verify`], [`cost`], [`tuning`].

pub mod algo;
pub mod budget;
pub mod catalogue;
pub mod cost;
pub(crate) mod counted;
pub mod generate;
pub mod offload;
pub mod persist;
pub mod sim;
pub mod tuning;
pub mod verify;

use std::fmt;

use crate::error::Error;
use crate::stripe::MAX_RAILS;
use crate::stripe::{self, RailPolicy};
pub use crate::topology::Shape;

pub use algo::{Algorithm, Choice, Collective, Drive};

/// A rank index.
pub type Rank = u32;

/// Which of a rank's buffers a region is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Buf {
    /// The caller's send buffer.
    Send,
    /// The caller's receive buffer.
    Recv,
    /// The communicator's symmetric scratch buffer.
    Scratch,
}

/// `count` blocks from block `block` of buffer `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    /// Buffer.
    pub buf: Buf,
    /// First block.
    pub block: u32,
    /// Blocks.
    pub count: u32,
}

impl Region {
    /// `count` blocks of `buf` from `block`.
    pub const fn new(buf: Buf, block: u32, count: u32) -> Self {
        Self { buf, block, count }
    }

    /// One block.
    pub const fn one(buf: Buf, block: u32) -> Self {
        Self::new(buf, block, 1)
    }

    /// One past the last block.
    pub fn end(&self) -> u32 {
        self.block + self.count
    }

    /// Whether the two share a block.
    pub fn overlaps(&self, other: &Region) -> bool {
        self.buf == other.buf
            && self.block < other.end()
            && other.block < self.end()
            && self.count > 0
            && other.count > 0
    }
}

/// Which rails a put uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lane {
    /// All of it on this rail (multi-port algorithms: one message per port).
    Rail(u8),
    /// Striped over every rail above the threshold, one rail below it
    /// ([`crate::stripe::plan`]).
    Stripe,
}

impl Lane {
    /// The rail policy a put on this lane uses (striping above
    /// `threshold`).
    pub fn policy(self, threshold: usize) -> RailPolicy {
        match self {
            Lane::Rail(r) => RailPolicy::Rail(usize::from(r)),
            Lane::Stripe => RailPolicy::Stripe { threshold },
        }
    }
}

/// Direction of a copy between node peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerDir {
    /// Local region -> peer's region.
    Push,
    /// Peer's region -> local region.
    Pull,
}

/// A destination counter: the same NIC destination event on every rank.
pub type Counter = u16;
/// An shm flag: a line in the node segment, one set per local rank.
pub type Flag = u8;

/// Most [`Feed`]s one chained put makes: its chain slot holds the put and
/// one `SET_EVENT` block per feed.
pub const MAX_FEEDS: usize = crate::driver::MAX_FEEDS;

/// A set of counter `into` on this rank's NIC of `rail` that a chained
/// put's firing makes after starting the put (the same COPY injects it:
/// a local `SET_EVENT`, or one to the sibling NIC of `rail`, ABI 1.2
/// §5.1). A later chained put whose data came with this one's trigger
/// waits for it through a join counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Feed {
    /// The join counter set once.
    pub into: Counter,
    /// The rail of the NIC it is set on.
    pub rail: u8,
}

/// The barrier word arrays of the communicator [GTNP02 §6.4]: one word per
/// group member in every member's memory. Each group has its own words
/// and numbers: sharing them would let a number written in one group
/// satisfy a wait in the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Words {
    /// All ranks; a rank's slot is its rank.
    Flat,
    /// Node masters; a master's slot is its node.
    Masters,
}

/// Which barrier number an [`Op::BarrierNumber`] advances.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Numbers {
    /// The number written into a word array.
    Words(Words),
    /// The number queued messages carry.
    Queue,
}

/// One operation of a schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// RDMA write of `src` (local) into `dst` of rank `to`; every rail part
    /// sets counter `signal` there once. Non-blocking: later steps wait for
    /// its local completion only if they name it in `after`.
    Put {
        /// Target rank.
        to: Rank,
        /// Local source.
        src: Region,
        /// Target region.
        dst: Region,
        /// Rails.
        lane: Lane,
        /// Counter set at the target per part.
        signal: Option<Counter>,
    },
    /// A put that this rank's NIC starts by itself once `trigger` has
    /// collected `count` sets on `rail` ([ELAN-SEM §5.4]: the event's
    /// COPY action injects the command). Arming is non-blocking. Striped
    /// (`lane`), its part on `rail` leads and the same COPY starts the
    /// others, each waiting on its own rail's NIC for a sibling set.
    ChainPut {
        /// Local counter that starts it.
        trigger: Counter,
        /// Sets of `trigger` needed (filled by [`ScheduleSet::seal`]).
        count: u32,
        /// Rail of the trigger (and of the put, or of its leading part).
        rail: u8,
        /// The put's rails: `Lane::Rail(rail)`, or striped.
        lane: Lane,
        /// Target rank.
        to: Rank,
        /// Local source.
        src: Region,
        /// Target region.
        dst: Region,
        /// Counter set at the target.
        signal: Option<Counter>,
        /// Sets the same firing makes on this rank's NICs after starting
        /// the put (at most [`MAX_FEEDS`]): how the joins of later chained
        /// puts learn that this one's trigger has fired.
        feeds: Vec<Feed>,
        /// Sets this rank's NICs make once the put has completed (its
        /// source event's COPY; at most [`MAX_FEEDS`], one rail only): how
        /// a later chained put ordered after its completion learns of it.
        done: Vec<Feed>,
    },
    /// Relay `counter`'s sets from one rail's NIC to a join: once
    /// `counter` has collected `count` sets on rail `from`, this rank's NIC
    /// there sets counter `into` once on rail `to`: on its sibling NIC (a
    /// `SET_EVENT` to a sibling, ABI 1.2 §5.1) when `to` is another rail,
    /// on itself otherwise. A chained put waits for `into` on `to`: a
    /// cross-rail trigger (`into` = `counter`: the relayed sets add to the
    /// rail's own) or a combined one (`into` a join counter that only
    /// relays and feeds set). Arming is non-blocking.
    Relay {
        /// The counter.
        counter: Counter,
        /// Sets on `from` (filled by [`ScheduleSet::seal`]).
        count: u32,
        /// The rail whose sets are relayed.
        from: u8,
        /// The rail they are relayed to.
        to: u8,
        /// The counter set there.
        into: Counter,
    },
    /// Block until `counter` has collected `arrivals[rail]` sets on each
    /// rail (filled by [`ScheduleSet::seal`]: every part addressed to it).
    Wait {
        /// Counter.
        counter: Counter,
        /// Sets per rail.
        arrivals: [u32; MAX_RAILS],
    },
    /// Local copy.
    Copy {
        /// Source.
        src: Region,
        /// Destination.
        dst: Region,
    },
    /// Copy between this rank's memory and a node peer's (shared memory).
    PeerCopy {
        /// Peer on the same node.
        peer: Rank,
        /// Direction.
        dir: PeerDir,
        /// This rank's region.
        local: Region,
        /// The peer's region.
        remote: Region,
    },
    /// Raise `flag` of node peer `to` by one (Release), waking it.
    Signal {
        /// Peer on the same node (may be this rank).
        to: Rank,
        /// Flag.
        flag: Flag,
    },
    /// Block until each node peer of `from` has raised this rank's `flag`
    /// for this call (filled by [`ScheduleSet::seal`]). A flag counts each
    /// peer's raises apart: with several collectives in flight, a peer
    /// already in a later call may raise the same flag again, which must
    /// not stand in for a raise this call still waits for.
    WaitFlag {
        /// Flag.
        flag: Flag,
        /// Raises (one per peer of `from`).
        count: u32,
        /// The node peers that raise it, a bit per local rank (a node has at
        /// most `MAX_CONTEXTS` ranks, which a `u16` holds).
        from: u16,
    },
    /// Advance this call's barrier number of `numbers` and write it to the
    /// communicator's barrier source word: what [`Op::WordPut`] and
    /// [`Op::QueueSend`] carry and [`Op::WordWait`] and [`Op::QueueRecv`]
    /// expect. Numbers only grow, so nothing is reset between calls.
    BarrierNumber(Numbers),
    /// RDMA write of the barrier number into word `slot` of rank `to`'s
    /// `words`, waking it [GTNP02 §6.4]. Non-blocking, like a put.
    WordPut {
        /// Target rank.
        to: Rank,
        /// Which word array.
        words: Words,
        /// The word (the sender's id in the group).
        slot: u32,
    },
    /// Poll this rank's word `slot` of `words` until it *reaches* the
    /// barrier number (`>=` in wrapping arithmetic, so a partner already
    /// in the next barrier cannot be missed [GTNP02 §6.4]).
    WordWait {
        /// Which word array.
        words: Words,
        /// The word (the partner's id in the group).
        slot: u32,
    },
    /// Readiness ([`persist`]): tell rank `to`, which touches this rank's
    /// buffers in this call, that this rank has entered the call. On
    /// another node an RDMA write of the call's number into this rank's
    /// word of `to`'s readiness words (non-blocking, like a put); on this
    /// node a wake-up (`to` reads the number in this rank's memory).
    Ready {
        /// The rank that touches this rank's buffers.
        to: Rank,
    },
    /// Readiness ([`persist`]): wait until rank `from`, whose buffers this
    /// rank touches in this call, has entered the call (its number
    /// reaches this call's, `>=`: a rank already in a later call has
    /// entered this one).
    AwaitReady {
        /// The rank whose buffers this rank touches.
        from: Rank,
    },
    /// Queued DMA (QDMA) of the barrier number into rank `to`'s barrier
    /// input queue [ELAN-SEM §4.4]. Non-blocking, like a put.
    QueueSend {
        /// Target rank.
        to: Rank,
    },
    /// Receive from this rank's barrier queue until the message of rank
    /// `from` with this call's number has come; messages from other
    /// senders are kept aside for later receives (an MPI library's
    /// unexpected queue).
    QueueRecv {
        /// Sender waited for.
        from: Rank,
    },
    /// Arrive at the node's flat-tree barrier [GTNP02 §5.2] (its master is
    /// local rank 0): raise this rank's arrival flag; the master then waits
    /// for every local rank's. What runs between this and
    /// [`Op::NodeRelease`] on the master is the inter-node phase.
    NodeArrive,
    /// Leave the node barrier: the master raises the release flag, the
    /// others wait for it.
    NodeRelease,
    /// The rail-0 switch's combined barrier among the node masters (local
    /// rank 0 of every node) [ELAN-SEM §13 rule 17]; only masters run it.
    HwBarrier,
    /// Shared-memory broadcast within this node from node peer `root`,
    /// through the node segment's broadcast buffer in chunks: on `root`,
    /// `region` is the source, on every other rank of the node the
    /// destination. Every rank of the node runs it.
    NodeBcast {
        /// The node's source rank.
        root: Rank,
        /// This rank's region.
        region: Region,
    },
    /// Hardware broadcast (BCAST_DMA, rail 0) of `src` to `dst` of the rank
    /// with this rank's local index on every other node; each sets
    /// `signal` once.
    HwBcast {
        /// Local source.
        src: Region,
        /// Targets' region.
        dst: Region,
        /// Counter set at each target.
        signal: Option<Counter>,
    },
}

/// The regions of its own memory a step reads and writes (`true`:
/// writes), as the offload compiler and its counting pass see them.
pub(crate) fn touches(op: &Op) -> Vec<(Region, bool)> {
    match op {
        Op::Put { src, .. } | Op::ChainPut { src, .. } | Op::HwBcast { src, .. } => {
            vec![(*src, false)]
        }
        Op::Copy { src, dst } => vec![(*src, false), (*dst, true)],
        Op::PeerCopy { dir, local, .. } => vec![(*local, *dir == PeerDir::Pull)],
        Op::NodeBcast { region, .. } => vec![(*region, true)],
        _ => Vec::new(),
    }
}

/// A step: an operation and the earlier puts whose local completion it
/// needs (indices into the same schedule).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The operation.
    pub op: Op,
    /// Put or chained-put steps that must have completed locally first.
    pub after: Vec<u32>,
}

/// One rank's plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// The rank.
    pub rank: Rank,
    /// Steps in program order.
    pub steps: Vec<Step>,
}

/// Steps of a radix-`base` process that reaches `n` ranks:
/// ceil(log_base n), 0 for n <= 1 (generators' round counts and the closed
/// forms' start-up terms).
pub(crate) fn log_ceil(base: usize, n: usize) -> u32 {
    let mut steps = 0;
    let mut reach = 1usize;
    while reach < n {
        reach = reach.saturating_mul(base);
        steps += 1;
    }
    steps
}

/// What to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    /// Collective.
    pub collective: Collective,
    /// Algorithm.
    pub algorithm: Algorithm,
    /// Cluster shape.
    pub shape: Shape,
    /// Root (gather, broadcast; ignored otherwise).
    pub root: usize,
    /// Bytes per block (the per-rank contribution; all-to-all: per pair).
    pub block_bytes: usize,
    /// Striping threshold for [`Lane::Stripe`] puts.
    pub stripe_threshold: usize,
    /// Host-driven, or compiled onto the NICs ([`offload`]).
    pub drive: Drive,
    /// Guarded so that no rank touches the buffers of a rank that has not
    /// entered the call yet ([`persist::guard`]): what the MPI buffer
    /// contract and every persistent collective need to run back to back
    /// on the same buffers.
    pub guarded: bool,
    /// What the set may take of the NICs it runs on: the offload compiler
    /// compiles within it (no relays where `peer_fifo` is 0, no combined
    /// triggers where `feeds` is, join counters up to `counters`), and the
    /// runtime proves the set fits it before posting. A communicator
    /// computes its own once, from its NICs' registers and its share of
    /// them, and every set it generates carries it; the default is
    /// [`budget::Budget::default`].
    pub budget: budget::Budget,
}

impl Params {
    /// Parameters with the default striping threshold. A collective
    /// without a root (all-gather, all-to-all, barrier) ignores `root`.
    pub fn new(
        collective: Collective,
        algorithm: Algorithm,
        shape: Shape,
        root: usize,
        block_bytes: usize,
    ) -> Self {
        Self {
            collective,
            algorithm,
            shape,
            root: if collective.rooted() { root } else { 0 },
            block_bytes,
            stripe_threshold: stripe::DEFAULT_STRIPE_THRESHOLD,
            drive: Drive::Host,
            guarded: false,
            budget: budget::Budget::default(),
        }
    }

    /// The same parameters for `choice` (its algorithm and its drive).
    pub fn with_choice(mut self, choice: Choice) -> Self {
        self.algorithm = choice.algorithm;
        self.drive = choice.drive;
        self
    }

    /// The algorithm as it runs.
    pub fn choice(&self) -> Choice {
        Choice {
            algorithm: self.algorithm,
            drive: self.drive,
        }
    }

    /// Blocks of each rank's send buffer.
    pub fn send_blocks(&self) -> u32 {
        match self.collective {
            Collective::Alltoall => self.shape.size() as u32,
            Collective::Barrier => 0,
            Collective::Gather | Collective::Allgather | Collective::Bcast => 1,
        }
    }

    /// Blocks of the receive buffer (at every rank; for gather only the
    /// root's is written).
    pub fn recv_blocks(&self) -> u32 {
        match self.collective {
            Collective::Gather | Collective::Allgather | Collective::Alltoall => {
                self.shape.size() as u32
            }
            Collective::Bcast => 1,
            Collective::Barrier => 0,
        }
    }
}

/// The schedules of every rank, plus what they need from the communicator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleSet {
    /// What was generated.
    pub params: Params,
    /// Scratch blocks every rank needs (the largest over ranks: scratch is
    /// symmetric).
    pub scratch_blocks: u32,
    /// Destination counters used (ids `0..counters`).
    pub counters: u16,
    /// Shm flags used per local rank (ids `0..flags`).
    pub flags: u8,
    /// One schedule per rank, indexed by rank.
    pub ranks: Vec<Schedule>,
}

/// One rail part of a put, as the target counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartShape {
    /// Rail.
    pub rail: usize,
    /// Byte offset within the put.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// How a put from `from` to `to` of `bytes` is split over rails: the same
/// computation the executor's put makes.
pub fn put_parts(
    lane: Lane,
    rails: usize,
    threshold: usize,
    from: usize,
    to: usize,
    bytes: usize,
) -> Vec<PartShape> {
    stripe::plan(lane.policy(threshold), rails, from, to, bytes, 0)
        .into_iter()
        .map(|p| PartShape {
            rail: p.rail,
            offset: p.offset,
            len: p.len,
        })
        .collect()
}

impl ScheduleSet {
    /// Fill every wait's arrival counts and every flag wait's count from the
    /// signals addressed to it, and compute the budgets. A rank may wait on
    /// each counter and each flag at most once per schedule (what makes the
    /// counts unambiguous); a generator that breaks this gets an error.
    pub fn seal(mut self) -> Result<Self, Error> {
        let n = self.ranks.len();
        let rails = self.params.shape.rails;
        let b = self.params.block_bytes;
        let threshold = self.params.stripe_threshold;
        let mut incoming: std::collections::HashMap<(usize, Counter), [u32; MAX_RAILS]> =
            std::collections::HashMap::new();
        let mut raises: std::collections::HashMap<(usize, Flag), (u32, u16)> =
            std::collections::HashMap::new();
        let mut counters: u16 = 0;
        let mut flags: u8 = 0;
        let mut add = |to: usize, c: Counter, rail: usize, counters: &mut u16| {
            *counters = (*counters).max(c + 1);
            if let Some(slot) = incoming.entry((to, c)).or_default().get_mut(rail) {
                *slot += 1;
            }
        };
        for s in &self.ranks {
            let me = s.rank as usize;
            for step in &s.steps {
                match step.op {
                    Op::Put {
                        to,
                        src,
                        lane,
                        signal: Some(c),
                        ..
                    } => {
                        let bytes = src.count as usize * b;
                        for p in put_parts(lane, rails, threshold, me, to as usize, bytes) {
                            add(to as usize, c, p.rail, &mut counters);
                        }
                    }
                    Op::ChainPut {
                        to,
                        src,
                        lane,
                        signal,
                        trigger,
                        ref feeds,
                        ref done,
                        ..
                    } => {
                        counters = counters.max(trigger + 1);
                        for f in done {
                            add(me, f.into, usize::from(f.rail), &mut counters);
                        }
                        if let Some(c) = signal {
                            let bytes = src.count as usize * b;
                            for p in put_parts(lane, rails, threshold, me, to as usize, bytes) {
                                add(to as usize, c, p.rail, &mut counters);
                            }
                        }
                        for f in feeds {
                            add(me, f.into, usize::from(f.rail), &mut counters);
                        }
                    }
                    Op::HwBcast {
                        signal: Some(c), ..
                    } => {
                        let topo = self.params.shape.topology;
                        let (my_node, local) = topo.locate(me)?;
                        for node in (0..topo.nodes()).filter(|&x| x != my_node) {
                            add(topo.rank_of(node, local)?, c, 0, &mut counters);
                        }
                    }
                    Op::Signal { to, flag } => {
                        flags = flags.max(flag + 1);
                        let (_, local) = self.params.shape.topology.locate(me)?;
                        let bit = 1u16 << local;
                        let (count, from) = raises.entry((to as usize, flag)).or_default();
                        if *from & bit != 0 {
                            return Err(Error::BadSchedule(format!(
                                "rank {me} raises flag {flag} of rank {to} twice in one call"
                            )));
                        }
                        *count += 1;
                        *from |= bit;
                    }
                    Op::Wait { counter, .. } => counters = counters.max(counter + 1),
                    Op::Relay {
                        counter, to, into, ..
                    } => {
                        counters = counters.max(counter + 1);
                        add(me, into, usize::from(to), &mut counters);
                    }
                    Op::WaitFlag { flag, .. } => flags = flags.max(flag + 1),
                    _ => {}
                }
            }
        }
        let mut waited = std::collections::HashSet::new();
        for s in &mut self.ranks {
            let me = s.rank as usize;
            // A counter is consumed once: by one wait (every rail), or by
            // chained puts and relays on distinct rails.
            let mut seen_counters: std::collections::HashSet<(Counter, Option<u8>)> =
                std::collections::HashSet::new();
            let mut consume = |counter: Counter, rail: Option<u8>| -> Result<(), Error> {
                let clash = match rail {
                    None => seen_counters.iter().any(|&(c, _)| c == counter),
                    Some(_) => {
                        seen_counters.contains(&(counter, None))
                            || seen_counters.contains(&(counter, rail))
                    }
                };
                if clash || !seen_counters.insert((counter, rail)) {
                    return Err(Error::BadSchedule(format!(
                        "rank {me} consumes counter {counter} twice"
                    )));
                }
                Ok(())
            };
            let mut seen_flags = std::collections::HashSet::new();
            for step in &mut s.steps {
                match &mut step.op {
                    Op::Wait { counter, arrivals } => {
                        consume(*counter, None).map_err(|_| {
                            Error::BadSchedule(format!(
                                "rank {me} waits on counter {counter} twice"
                            ))
                        })?;
                        *arrivals = incoming.get(&(me, *counter)).copied().unwrap_or_default();
                    }
                    // A chained put's trigger and a relay's counter: the
                    // sets on one rail.
                    Op::ChainPut {
                        trigger: counter,
                        count,
                        rail,
                        ..
                    }
                    | Op::Relay {
                        counter,
                        count,
                        from: rail,
                        ..
                    } => {
                        consume(*counter, Some(*rail))?;
                        let per_rail = incoming.get(&(me, *counter)).copied().unwrap_or_default();
                        *count = per_rail.get(usize::from(*rail)).copied().unwrap_or(0);
                    }
                    Op::WaitFlag { flag, count, from } => {
                        if !seen_flags.insert(*flag) {
                            return Err(Error::BadSchedule(format!(
                                "rank {me} waits on flag {flag} twice"
                            )));
                        }
                        (*count, *from) = raises.get(&(me, *flag)).copied().unwrap_or((0, 0));
                        waited.insert((me, *flag));
                    }
                    _ => {}
                }
            }
        }
        // A raise nobody waits for would leave that raiser's count one
        // ahead for the rest of the communicator's life.
        if let Some((to, flag)) = raises.keys().find(|k| !waited.contains(k)) {
            return Err(Error::BadSchedule(format!(
                "rank {to}'s flag {flag} is raised but never waited for"
            )));
        }
        debug_assert_eq!(self.ranks.len(), n);
        self.counters = counters;
        self.flags = flags;
        Ok(self)
    }

    /// The schedule of `rank`.
    pub fn rank(&self, rank: usize) -> Option<&Schedule> {
        self.ranks.get(rank)
    }
}

/// Generate the schedules of every rank with the generator the catalogue
/// names for the collective and algorithm (see [`mod@generate`]), and
/// compile them onto the NICs for [`Drive::Nic`] and [`Drive::NicDma`] (within
/// `params.budget`; the executor proves the result fits that budget before
/// it runs it).
pub fn generate(params: &Params) -> Result<ScheduleSet, Error> {
    let entry = catalogue::entry(params.collective, params.algorithm).ok_or_else(|| {
        Error::Unsupported {
            algorithm: params.algorithm.name(),
            reason: format!("it is not a {} algorithm", params.collective),
        }
    })?;
    // A collective without a root ignores one (the native all-gather's
    // generator used it, and wrote rank 0's block nowhere: found by
    // fuzzing).
    let root = if params.collective.rooted() {
        params.root
    } else {
        0
    };
    let grouping = params.shape.grouping;
    if entry.node_aware && !grouping.nodes() {
        return Err(Error::Unsupported {
            algorithm: params.choice().name(),
            reason: "it works node by node, and the communicator's ranks per node differ \
                     (or are not numbered by node): only flat algorithms run on it"
                .into(),
        });
    }
    let mut set = generate::run(
        &Params {
            drive: Drive::Host,
            guarded: false,
            root,
            ..*params
        },
        entry.generator,
    )?;
    let switch_op = set
        .ranks
        .iter()
        .flat_map(|r| &r.steps)
        .find(|s| matches!(s.op, Op::HwBarrier | Op::HwBcast { .. }));
    if let (Some(step), false) = (switch_op, grouping.switch()) {
        return Err(Error::Unsupported {
            algorithm: params.choice().name(),
            reason: format!(
                "its {} needs the switch, which spans contiguous nodes at one NIC context \
                 per local index, and this communicator's nodes or contexts are not so",
                step.op.kind()
            ),
        });
    }
    if params.drive.offloaded() {
        let copies = match params.drive {
            Drive::NicDma => offload::Copies::Nic,
            _ => offload::Copies::Host,
        };
        set = offload::compile_with(&set, &params.budget, copies)?.set;
        set.params.drive = params.drive;
    }
    // The guard goes last: its waits then come before the arming of any
    // chained put that touches another rank, so every NIC-started put is
    // after the readiness it needs (compiled after the guard, a put
    // chained on a later counter would no longer wait for it).
    if params.guarded {
        // Broadcasts and barriers too: they write no buffer of a rank that
        // has not entered, but their puts may set its counters.
        set = persist::guard(&set)?;
        set.params.guarded = true;
    }
    Ok(set)
}

impl fmt::Display for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Buf::Send => "send",
            Buf::Recv => "recv",
            Buf::Scratch => "scratch",
        })
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count == 1 {
            write!(f, "{}[{}]", self.buf, self.block)
        } else {
            write!(f, "{}[{}..{}]", self.buf, self.block, self.end())
        }
    }
}

impl fmt::Display for Words {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Words::Flat => "flat",
            Words::Masters => "masters'",
        })
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lane::Rail(r) => write!(f, "rail {r}"),
            Lane::Stripe => f.write_str("striped"),
        }
    }
}

pub(crate) fn fmt_signal(signal: Option<Counter>) -> String {
    signal.map_or(String::new(), |c| format!(", signal c{c}"))
}

const _: () = assert!(railcoll_fw::abi::MAX_CONTEXTS <= 16);

impl Op {
    /// A chained put of `src` into `dst` of rank `to` on `lane`, started by
    /// `trigger`'s sets on `rail` (counted by [`ScheduleSet::seal`]), with
    /// no feeds and no sets on completion yet.
    pub fn chained(
        trigger: Counter,
        rail: u8,
        lane: Lane,
        to: Rank,
        src: Region,
        dst: Region,
        signal: Option<Counter>,
    ) -> Op {
        Op::ChainPut {
            trigger,
            count: 0,
            rail,
            lane,
            to,
            src,
            dst,
            signal,
            feeds: Vec::new(),
            done: Vec::new(),
        }
    }

    /// The other ranks whose destination counters the step, run by rank
    /// `me` of `topology`, sets (a put's or a chained put's signal; a
    /// switch broadcast's, at the same local rank of every other node).
    /// The counters are in the pool of the call each of them is in, which
    /// may still be an older one ([`persist::guard`] waits for them).
    pub fn counters_set_on(
        &self,
        me: usize,
        topology: &crate::topology::Topology,
    ) -> Result<Vec<usize>, Error> {
        let targets = match *self {
            Op::Put {
                to,
                signal: Some(_),
                ..
            }
            | Op::ChainPut {
                to,
                signal: Some(_),
                ..
            } => vec![to as usize],
            Op::HwBcast {
                signal: Some(_), ..
            } => {
                let (node, local) = topology.locate(me)?;
                (0..topology.nodes())
                    .filter(|&x| x != node)
                    .map(|x| topology.rank_of(x, local))
                    .collect::<Result<_, _>>()?
            }
            _ => Vec::new(),
        };
        Ok(targets.into_iter().filter(|&t| t != me).collect())
    }

    /// Whether the step uses the communicator's sequential state (barrier
    /// numbers and words, the barrier queue, node flags, the node barrier
    /// and broadcast, the switch, a node peer's buffers), which every rank
    /// must take in the same order: with several collectives in flight,
    /// only the oldest takes such steps. Puts, chained puts, relays,
    /// counter waits, local copies and readiness touch only the call's own
    /// buffers and counters.
    pub fn sequential(&self) -> bool {
        !matches!(
            self,
            Op::Put { .. }
                | Op::ChainPut { .. }
                | Op::Relay { .. }
                | Op::Wait { .. }
                | Op::Copy { .. }
                | Op::Ready { .. }
                | Op::AwaitReady { .. }
        )
    }

    /// The step's kind in one word.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Put { .. } => "put",
            Op::ChainPut { .. } => "chained put",
            Op::Relay { .. } => "relay",
            Op::Wait { .. } => "wait for a counter",
            Op::Copy { .. } => "copy",
            Op::PeerCopy { .. } => "shm copy",
            Op::Signal { .. } => "signal",
            Op::WaitFlag { .. } => "wait for a flag",
            Op::BarrierNumber(_) => "barrier number",
            Op::WordPut { .. } => "barrier word put",
            Op::WordWait { .. } => "wait for a barrier word",
            Op::Ready { .. } => "readiness notice",
            Op::AwaitReady { .. } => "wait for readiness",
            Op::QueueSend { .. } => "queued send",
            Op::QueueRecv { .. } => "queued receive",
            Op::NodeArrive => "node barrier arrival",
            Op::NodeRelease => "node barrier release",
            Op::HwBarrier => "hardware barrier",
            Op::NodeBcast { .. } => "node broadcast",
            Op::HwBcast { .. } => "hardware broadcast",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Put {
                to,
                src,
                dst,
                lane,
                signal,
            } => write!(
                f,
                "put      {src} -> rank {to} {dst} ({lane}{})",
                fmt_signal(*signal)
            ),
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
                let striped = match lane {
                    Lane::Stripe => " (striped)",
                    Lane::Rail(_) => "",
                };
                write!(
                    f,
                    "chain    when c{trigger} x{count} on rail {rail}: NIC puts {src} -> rank {to} {dst}{striped}{}",
                    fmt_signal(*signal)
                )?;
                for feed in feeds {
                    write!(f, ", sets c{} on rail {}", feed.into, feed.rail)?;
                }
                for feed in done {
                    write!(f, ", when done sets c{} on rail {}", feed.into, feed.rail)?;
                }
                Ok(())
            }
            Op::Relay {
                counter,
                count,
                from,
                to,
                into,
            } => write!(
                f,
                "relay    when c{counter} x{count} on rail {from}: NIC sets c{into} on rail {to}"
            ),
            Op::Wait { counter, arrivals } => {
                let parts: Vec<String> = arrivals
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| **n > 0)
                    .map(|(r, n)| format!("{n} on rail {r}"))
                    .collect();
                let parts = if parts.is_empty() {
                    "nothing".to_string()
                } else {
                    parts.join(", ")
                };
                write!(f, "wait     c{counter}: {parts}")
            }
            Op::Copy { src, dst } => write!(f, "copy     {src} -> {dst}"),
            Op::PeerCopy {
                peer,
                dir,
                local,
                remote,
            } => match dir {
                PeerDir::Push => write!(f, "shm copy {local} -> rank {peer} {remote}"),
                PeerDir::Pull => write!(f, "shm copy rank {peer} {remote} -> {local}"),
            },
            Op::Signal { to, flag } => write!(f, "signal   flag f{flag} of rank {to}"),
            Op::WaitFlag { flag, count, .. } => write!(f, "wait     flag f{flag} x{count}"),
            Op::BarrierNumber(Numbers::Words(w)) => write!(f, "number   next {w} barrier number"),
            Op::BarrierNumber(Numbers::Queue) => f.write_str("number   next queued barrier number"),
            Op::WordPut { to, words, slot } => {
                write!(f, "word put number -> rank {to} {words} word {slot}")
            }
            Op::WordWait { words, slot } => {
                write!(f, "wait     {words} word {slot} reaches the number")
            }
            Op::Ready { to } => write!(f, "ready    tell rank {to} this rank entered the call"),
            Op::AwaitReady { from } => write!(f, "wait     rank {from} entered the call"),
            Op::QueueSend { to } => write!(f, "qdma     number -> rank {to}'s barrier queue"),
            Op::QueueRecv { from } => {
                write!(f, "qrecv    rank {from}'s number from the barrier queue")
            }
            Op::NodeArrive => f.write_str("node     arrive (flat tree; the master waits for all)"),
            Op::NodeRelease => f.write_str("node     release (the master releases the rest)"),
            Op::HwBarrier => f.write_str("barrier  hardware, node masters (rail 0)"),
            Op::NodeBcast { root, region } => {
                write!(f, "shm bcast {region} from rank {root} to its node")
            }
            Op::HwBcast { src, dst, signal } => write!(
                f,
                "hw bcast {src} -> every node's {dst} (rail 0{})",
                fmt_signal(*signal)
            ),
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "rank {}: {} steps", self.rank, self.steps.len())?;
        for (i, s) in self.steps.iter().enumerate() {
            write!(f, "  {i:>4}  {}", s.op)?;
            if !s.after.is_empty() {
                let after: Vec<String> = s.after.iter().map(|a| format!("#{a}")).collect();
                write!(f, "   [after {} complete]", after.join(", "))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
