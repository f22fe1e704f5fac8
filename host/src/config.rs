//! A communicator's settings: the shape it runs on (shared with the
//! collective layer), and the endpoint's arena, rings and rail policy.

use crate::stripe::RailPolicy;
use crate::topology::Shape;

/// Settings of a communicator.
#[derive(Clone, Copy, Debug)]
pub struct CommConfig {
    /// The job's shape: nodes, ranks per node and placement, sockets per
    /// node (multi-leader all-gather: one leader per socket), rails.
    pub shape: Shape,
    /// This rank.
    pub rank: usize,
    /// Symmetric arena size per rank.
    pub arena_size: usize,
    /// Job key.
    pub job_key: u32,
    /// This communicator's instance: the same on every member, and
    /// different from every earlier communicator of the job opened over
    /// the same NIC contexts (the launcher counts them; the emulator's
    /// `Cluster` counts its runs). It tags the switch's barrier group
    /// (docs/abi.md §4.5): a communicator numbers its barriers from the
    /// start, and the switch remembers the last number it released for a
    /// group, so a reused instance would have its barriers released at
    /// once.
    pub instance: u32,
    /// Check each collective call's arguments against the other ranks'
    /// before it runs (collective, algorithm, block size, root,
    /// communicator): a mismatch is a typed error on every rank
    /// ([`Error::Mismatch`](crate::Error::Mismatch), and the revoke naming it)
    /// instead of wrong data or a hang. Two puts and a wait per call; on
    /// by default in debug builds.
    pub check: bool,
    /// When a collective may write another rank's buffers: the MPI
    /// contract (the default) or the faster SHMEM-style one.
    pub contract: BufferContract,
    /// Default rail policy for puts and gets.
    pub policy: RailPolicy,
    /// log2 of command ring entries per rail.
    pub cq_log2: u8,
    /// Bytes of the arena each communicator split off this one keeps
    /// for itself (its slot: reserved buffers, then two scratch halves;
    /// see `crate::slots`), a multiple of 4096. A split communicator's
    /// collective whose scratch does not fit is refused
    /// ([`Error::OverBudget`](crate::Error::OverBudget)).
    pub comm_reserve: usize,
}

impl CommConfig {
    /// Defaults: 64 MiB arena, striping at 1 KiB, 256-entry rings.
    pub fn new(shape: Shape, rank: usize) -> Self {
        Self {
            shape,
            rank,
            arena_size: 64 << 20,
            job_key: 0x5241_494c,
            instance: 0,
            check: cfg!(debug_assertions),
            contract: BufferContract::Mpi,
            policy: RailPolicy::default(),
            cq_log2: 8,
            comm_reserve: 256 << 10,
        }
    }
}

/// When a collective call may write a rank's buffers: what a program must
/// do between two calls whose buffers overlap. docs/performance.md
/// measures both.
///
/// ```
/// use railcoll_host::topology::Shape;
/// use railcoll_host::{BufferContract, CommConfig, Placement};
///
/// let shape = Shape::new(2, 1, 1, 1, Placement::Block).expect("a valid shape");
/// let mut cfg = CommConfig::new(shape, 0);
/// assert_eq!(cfg.contract, BufferContract::Mpi);
/// // The program separates overlapping calls with barriers itself:
/// cfg.contract = BufferContract::Shmem;
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BufferContract {
    /// MPI's: a rank's buffers are written only after it has entered the
    /// call, and nobody touches them once it has returned, so calls may
    /// follow each other on the same buffers with no barrier. Each rank
    /// tells the ranks that write to it that it has entered (the
    /// readiness guard, `sched::persist`), one small message per writer,
    /// where the algorithm could otherwise write a rank's buffers or set
    /// its counters before it entered (a broadcast writes no buffer early,
    /// but its puts set counters, so it is guarded too).
    #[default]
    Mpi,
    /// SHMEM's (and libelan's): a call may write another rank's buffers,
    /// and set its counters, as soon as any rank has entered it, so
    /// consecutive collectives must be separated by a barrier: the ones
    /// whose buffers overlap (or their data may be overwritten before it
    /// is read), and any two that set counters, which come from the
    /// communicator's two pools whatever the buffers (as OpenSHMEM's
    /// collectives share their `pSync` work arrays). No readiness
    /// messages.
    Shmem,
}

impl BufferContract {
    /// Its name on the command line and in records (`mpi`, `shmem`).
    pub fn name(self) -> &'static str {
        match self {
            BufferContract::Mpi => "mpi",
            BufferContract::Shmem => "shmem",
        }
    }
}

impl std::str::FromStr for BufferContract {
    type Err = crate::error::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "mpi" => Ok(BufferContract::Mpi),
            "shmem" => Ok(BufferContract::Shmem),
            other => Err(crate::error::Error::Config(format!(
                "unknown buffer contract {other:?}: mpi or shmem"
            ))),
        }
    }
}
