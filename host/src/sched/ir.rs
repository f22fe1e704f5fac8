//! The schedule IR: a rank's steps, each an [`Op`] on regions of its
//! buffers, counters and flags, and what an op touches, sets and is.

use super::*;

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
