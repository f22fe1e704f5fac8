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
//! Submodules: `ir` (the IR's types: [`Op`], [`Step`], [`Schedule`], regions,
//! lanes, counters and flags; re-exported here), `seal`
//! ([`ScheduleSet::seal`]), `display` (how a schedule prints), [`algo`] (names), [`budget`] (what a schedule takes from
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

mod display;
mod ir;
mod seal;

pub(crate) use display::fmt_signal;
pub use ir::*;
pub use seal::{PartShape, put_parts};

use std::fmt;

use crate::error::Error;
use crate::stripe::MAX_RAILS;
use crate::stripe::{self, RailPolicy};
pub use crate::topology::Shape;

pub use algo::{Algorithm, Choice, Collective, Drive};

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

const _: () = assert!(railcoll_fw::abi::MAX_CONTEXTS <= 16);
