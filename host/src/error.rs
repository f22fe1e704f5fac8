//! Typed errors of the host library.

use railcoll_fw::abi::ErrorCode;

use railcoll_mem::dma_mem::OutOfRange;

use crate::device::DeviceError;
use crate::env::WaitTimeout;

/// Everything a caller of the host library can get wrong, or that the NIC
/// can report.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// A rank outside the communicator.
    #[error("rank {rank} out of range: the communicator has {size} ranks")]
    RankOutOfRange {
        /// Rank given.
        rank: usize,
        /// Communicator size.
        size: usize,
    },
    /// A range outside a buffer or the arena.
    #[error("range offset {offset} + length {len} is outside {what} of {limit} bytes")]
    OutOfBounds {
        /// What was overrun.
        what: &'static str,
        /// Offset.
        offset: usize,
        /// Length.
        len: usize,
        /// Size of what was overrun.
        limit: usize,
    },
    /// Rails must be 1..=4.
    #[error("rails must be 1..=4, got {0}")]
    BadRails(usize),
    /// A rail index that does not exist.
    #[error("rail {rail} does not exist: there are {rails} rails")]
    NoSuchRail {
        /// Rail given.
        rail: usize,
        /// Rails present.
        rails: usize,
    },
    /// A cluster or communicator shape that is not allowed.
    #[error("bad shape: {0}")]
    BadShape(String),
    /// Misaligned request.
    #[error("{what} must be aligned to {align} bytes, got {value}")]
    Misaligned {
        /// What.
        what: &'static str,
        /// Required alignment.
        align: usize,
        /// Value given.
        value: usize,
    },
    /// Larger than the NIC can move in one DMA.
    #[error("{len} bytes exceeds the largest single transfer of {max} bytes")]
    TooLarge {
        /// Length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The symmetric arena is full.
    #[error("arena exhausted: asked {asked} bytes, {free} free")]
    ArenaExhausted {
        /// Asked.
        asked: usize,
        /// Free.
        free: usize,
    },
    /// No free event of the needed kind.
    #[error("out of {0} events")]
    EventsExhausted(&'static str),
    /// A collective's schedule needs more of a NIC resource than this
    /// communicator has: refused before anything is posted.
    #[error("{algorithm} needs {needed} {resource}{where_}, the NICs offer {available}")]
    OverBudget {
        /// The algorithm.
        algorithm: &'static str,
        /// What runs out (destination counters, chain blocks, ...).
        resource: &'static str,
        /// What the schedule needs.
        needed: u64,
        /// What there is.
        available: u64,
        /// Where the need peaks, in words (" at rank 3, rail 1, step 12"),
        /// or empty.
        where_: String,
    },
    /// The NIC completed an operation with an error.
    #[error("NIC on rail {rail} reported: {code}")]
    Nic {
        /// Rail.
        rail: usize,
        /// Firmware error code.
        code: ErrorCode,
    },
    /// The NIC speaks another ABI.
    #[error("NIC ABI version {found:#x} is not compatible with {expected:#x}")]
    AbiMismatch {
        /// Found.
        found: u64,
        /// Expected.
        expected: u64,
    },
    /// The device backend failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The process's launcher variables are missing, malformed or
    /// disagree ([`crate::launch`]).
    #[error("launcher: {0}")]
    Launch(#[from] LaunchError),
    /// A wait gave up.
    #[error(transparent)]
    Timeout(#[from] WaitTimeout),
    /// The algorithm cannot run on this communicator.
    #[error("{algorithm} is not valid here: {reason}")]
    Unsupported {
        /// Algorithm name.
        algorithm: &'static str,
        /// Why.
        reason: String,
    },
    /// Refused because a collective is still in flight: a persistent
    /// collective started again while its last start is active, or the
    /// arena freed under a collective whose NICs may still write it
    /// (complete it with `wait` or `test` first). Nothing was done.
    #[error("a collective is still in flight on this communicator ({0}): complete it first")]
    CollectiveInFlight(&'static str),
    /// A configuration value or an argument the caller chose is invalid
    /// (a `CommConfig` field, a chained put's feeds, a queue's size, a
    /// call the communicator refuses). Only ever the caller's mistake:
    /// the library's own broken invariants are [`Error::Internal`].
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A schedule set breaks a rule of the schedule IR (a counter or flag
    /// waited on twice in one rank's schedule, a raise nobody waits for, a
    /// set that cannot be replayed): [`crate::sched::ScheduleSet::seal`]
    /// and [`crate::sched::persist::guard`] refuse it. A generator's bug,
    /// the library's or the caller's own.
    #[error("bad schedule: {0}")]
    BadSchedule(String),
    /// A bug of the library: an invariant it keeps did not hold. Please
    /// report it with the message.
    #[error("internal error (a bug of railcoll): {0}")]
    Internal(String),
    /// A communicator could not be split off: no slot is free on all of
    /// its members (each rank holds at most
    /// [`MAX_SLOTS`](crate::slots::MAX_SLOTS) communicators besides the
    /// job's, within its arena and destination events), or the split's
    /// arguments were refused. Nothing was created.
    #[error("cannot create the communicator: {0}")]
    Split(String),
    /// The communicator is revoked: a collective failed on rank `rank`
    /// (`cause`), which told every other rank; every collective of every
    /// rank then returns this, promptly, instead of waiting for the rank
    /// that will not come (ULFM's revoke, \[ULFM\]). The failing rank itself
    /// returns its own error first. Open a new communicator to go on.
    #[error("rank {rank} failed ({cause}): the communicator is revoked")]
    Revoked {
        /// The rank whose collective failed.
        rank: usize,
        /// What failed there.
        cause: RevokeCause,
    },
    /// Two ranks called different collectives at the same point (found by
    /// the argument check, [`CommConfig::check`](crate::CommConfig::check)):
    /// what the rank that found it returns; it revokes the communicator, so
    /// every other rank gets [`Error::Revoked`] with this mismatch.
    #[error("the ranks disagree: {0}")]
    Mismatch(Mismatch),
    /// A tuning table that cannot be used: refused where it is read, once,
    /// before any communicator runs a collective with it.
    #[error("tuning table {origin}: {problem}")]
    Tuning {
        /// Where it came from (a path, or "text").
        origin: String,
        /// What is wrong with it.
        problem: TuningProblem,
    },
}

/// Why a rank revoked its communicator: the kind of error its collective
/// failed with (what crosses to the other ranks in the notice).
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RevokeCause {
    /// Its arguments were refused (a buffer too small, a range out of
    /// bounds, a rank out of range, a misaligned value).
    #[error("its arguments were refused")]
    Arguments,
    /// A transfer larger than the NIC moves in one DMA.
    #[error("a transfer was too large")]
    TooLarge,
    /// The schedule needs more NIC resources than the communicator has.
    #[error("the schedule is over the NICs' budget")]
    OverBudget,
    /// The algorithm cannot run on this communicator.
    #[error("the algorithm is unsupported here")]
    Unsupported,
    /// A wait gave up.
    #[error("a wait timed out")]
    Timeout,
    /// A NIC reported an error (an unreachable peer among them).
    #[error("a NIC reported an error")]
    Nic,
    /// Anything else (the device, the arena, the configuration).
    #[error("another error")]
    Other,
    /// The argument check found two ranks calling different collectives
    /// ([`CommConfig::check`](crate::CommConfig::check)).
    #[error("{0}")]
    Mismatch(Mismatch),
}

impl RevokeCause {
    /// The cause of `e`, a rank's own failure.
    pub fn of(e: &Error) -> Self {
        match e {
            Error::RankOutOfRange { .. }
            | Error::OutOfBounds { .. }
            | Error::Misaligned { .. }
            | Error::NoSuchRail { .. }
            | Error::BadShape(_) => RevokeCause::Arguments,
            Error::TooLarge { .. } => RevokeCause::TooLarge,
            Error::OverBudget { .. } | Error::EventsExhausted(_) | Error::ArenaExhausted { .. } => {
                RevokeCause::OverBudget
            }
            Error::Unsupported { .. } => RevokeCause::Unsupported,
            Error::Timeout(_) => RevokeCause::Timeout,
            Error::Nic { .. } => RevokeCause::Nic,
            Error::Mismatch(m) => RevokeCause::Mismatch(*m),
            _ => RevokeCause::Other,
        }
    }
}

/// Two ranks that called different collectives at the same point of their
/// programs, as the argument check saw them: `ranks.0` (which found it)
/// with `values.0`, its neighbour `ranks.1` with `values.1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mismatch {
    /// The communicator's collective call, counted from 1.
    pub call: u64,
    /// What differs (the first field that does, in the order of
    /// [`CheckField`]).
    pub field: CheckField,
    /// The two ranks.
    pub ranks: (usize, usize),
    /// Their values of `field`.
    pub values: (CheckValue, CheckValue),
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "collective call {}: rank {} passed {} {} where rank {} passed {}",
            self.call, self.ranks.0, self.field, self.values.0, self.ranks.1, self.values.1
        )
    }
}

/// What the argument check compares, in the order it compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CheckField {
    /// The collective.
    Collective,
    /// Its algorithm and drive (`name`, `name@nic`, `name@nic-dma`).
    Algorithm,
    /// Bytes per block.
    BlockBytes,
    /// The root (rooted collectives; 0 otherwise).
    Root,
    /// The communicator instance.
    Communicator,
}

impl CheckField {
    /// Every field, in the order of their codes.
    pub const ALL: [CheckField; 5] = [
        CheckField::Collective,
        CheckField::Algorithm,
        CheckField::BlockBytes,
        CheckField::Root,
        CheckField::Communicator,
    ];
}

impl std::fmt::Display for CheckField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CheckField::Collective => "collective",
            CheckField::Algorithm => "algorithm",
            CheckField::BlockBytes => "block bytes",
            CheckField::Root => "root",
            CheckField::Communicator => "communicator",
        })
    }
}

/// A value the argument check compared: a name where the field has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckValue {
    /// A count (bytes, a rank, an instance).
    Number(u64),
    /// A name (a collective, an algorithm).
    Name(&'static str),
    /// A code this build cannot name (a rank of another build).
    Unknown(u64),
}

impl std::fmt::Display for CheckValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckValue::Number(n) => write!(f, "{n}"),
            CheckValue::Name(s) => f.write_str(s),
            CheckValue::Unknown(c) => write!(f, "code {c:#x}"),
        }
    }
}

/// What is wrong with a tuning table.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum TuningProblem {
    /// The file could not be read.
    #[error("cannot be read: {0}")]
    Unreadable(String),
    /// Not a table of rules (TOML syntax, unknown or mistyped field).
    #[error("{0}")]
    Syntax(String),
    /// A rule names a collective or algorithm that does not exist.
    #[error("rule {rule}: {message}")]
    Rule {
        /// The rule, counted from 1.
        rule: usize,
        /// What it names wrongly.
        message: String,
    },
}

/// An access outside a DMA buffer, as a host error naming the buffer.
pub(crate) fn out_of_range(what: &'static str, e: OutOfRange) -> Error {
    Error::OutOfBounds {
        what,
        offset: e.offset,
        len: e.len,
        limit: e.size,
    }
}

/// The launcher whose variables were read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// railcoll's own (`RAILCOLL_*`).
    Railcoll,
    /// Open MPI's `mpirun`/`prterun` (`OMPI_COMM_WORLD_*`).
    OpenMpi,
    /// MPICH's Hydra (`PMI_*`, `MPI_LOCAL*`).
    Hydra,
    /// Slurm's `srun` (`SLURM_*`).
    Slurm,
}

impl std::fmt::Display for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Launcher::Railcoll => "railcoll",
            Launcher::OpenMpi => "Open MPI",
            Launcher::Hydra => "MPICH Hydra",
            Launcher::Slurm => "Slurm",
        })
    }
}

/// A launcher's variables that are missing, malformed or disagree.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LaunchError {
    /// The launcher set its rank variable but not this one.
    #[error("{launcher} set its rank but not {var}")]
    Missing {
        /// The launcher.
        launcher: Launcher,
        /// The variable.
        var: &'static str,
    },
    /// A variable's value is not what the launcher writes there.
    #[error("{var}={value:?} is not {expected}")]
    Malformed {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What it should be.
        expected: &'static str,
    },
    /// No launcher set a rank: the process was not started as a rank of
    /// a job.
    #[error(
        "no launcher started this process (none of RAILCOLL_RANK, OMPI_COMM_WORLD_RANK, \
         PMI_RANK, SLURM_PROCID is set)"
    )]
    NotLaunched,
    /// The values do not describe one process of one job.
    #[error("{launcher}'s variables disagree: {what}")]
    Inconsistent {
        /// The launcher.
        launcher: Launcher,
        /// What disagrees.
        what: String,
    },
}
