//! railcoll-host: the host side of railcoll.
//!
//! A rank uses this crate to reach its NICs (one per rail), to own a
//! registered symmetric memory arena, and to move data with one-sided puts
//! and gets that are striped over rails. Nothing here knows whether the NIC
//! is emulated: it talks to a [`device::Device`] and blocks only through a
//! [`env::WaitHook`].
//!
//! Map of the crate:
//!
//! - [`dma_mem`], [`regio`]: re-exported from `railcoll-mem`, the crate
//!   that holds all of the host side's `unsafe` code: [`dma_mem::DmaMemory`]
//!   (memory a NIC or another rank may write concurrently: copies and
//!   atomics, never Rust references) and register access
//!   ([`regio::RegisterIo`]). This crate forbids `unsafe`.
//! - [`device`]: the device trait (registers, DMA memory, admin lock).
//! - [`mod@env`]: the wait hook every blocking call goes through.
//! - [`topology`]: ranks, nodes, placement; the shape schedules are made
//!   for, and how a communicator's ranks sit on its nodes ([`Grouping`]).
//! - [`group`]: a communicator's members, and the shape derived from them.
//! - [`arena`]: the symmetric allocator.
//! - [`stripe`]: how a put is split over rails.
//! - [`shm`]: the node's shared-memory segment: epoch flags, the flat-tree
//!   barrier, broadcast and gather among a node's ranks.
//! - [`driver`]: command rings, the admin mailbox, events and completion
//!   words of one rank on every rail.
//! - [`sched`], the compiler: every collective (gather, all-gather,
//!   all-to-all, broadcast, barrier) as per-rank schedules: the IR, the
//!   catalogue, generators, verifier, Hockney cost model, offload compiler
//!   and tuning table. It imports nothing of the runtime.
//! - [`coll`], the runtime: the executor that runs schedule sets, the
//!   non-blocking and persistent requests ([`Request`], [`Persistent`]),
//!   the collectives' per-communicator state, the barrier mechanisms, the
//!   node segment's phases, and the revoke that makes the ranks of a
//!   communicator fail together.
//! - [`config`]: a communicator's configuration (shape, rank, arena,
//!   rail policy).
//! - [`endpoint`]: the RDMA endpoint: put, get, destination events,
//!   chained puts, queued DMA, the switch's broadcast and barrier, NIC
//!   error records; no collective state.
//! - [`slots`]: the arena range and destination events a communicator
//!   split off another keeps for itself.
//! - [`comm`]: the public API in one place: `Comm` is a communicator's
//!   collective state over the rank's shared endpoint; it is split
//!   ([`Comm::split`]) and runs the collectives; the one-sided calls are
//!   the endpoint's ([`Comm::endpoint`]).
//! - [`launch`]: this process's rank, size and node from the variables
//!   its launcher set (railcoll, Open MPI, MPICH Hydra, Slurm), and the
//!   job's topology from them.
//! - [`process`]: ranks as processes: the wait hook on an interrupt
//!   eventfd, and (feature `vfio-user`) the client backend for NICs a
//!   `railcoll nicd` serves, and `Job`, a process's membership of its
//!   job.
//! - `vfio` (feature `vfio`): the backend for NICs on boards behind Linux
//!   VFIO (`VfioNode`: BAR0 mapped, DMA through the IOMMU, MSI-X vectors
//!   as eventfds), reached through a seam a fake can fill.
//! - [`error`]: typed errors.

#![forbid(unsafe_code)]

pub mod arena;
pub mod coll;
pub mod comm;
pub mod config;
pub mod device;
pub mod driver;
pub mod endpoint;
pub mod env;
pub mod error;
pub mod group;
pub mod launch;
pub mod process;
pub mod sched;
pub mod shm;
pub mod slots;
pub mod stripe;
pub mod topology;
#[cfg(feature = "vfio")]
pub mod vfio;

pub use coll::request::{Persistent, Request, test_all, wait_all, wait_any};
pub use comm::{Comm, SplitType};
pub use config::{BufferContract, CommConfig};
pub use endpoint::{
    Arrivals, ChainedPut, DestEvent, Endpoint, InputQueue, PutHandle, QueueItem, TransferOptions,
};
pub use error::{CheckField, CheckValue, Error, Mismatch, RevokeCause, TuningProblem};
pub use group::Group;
pub use sched::{Algorithm, Choice, Collective, Drive};
pub use stripe::RailPolicy;
pub use topology::{Grouping, Placement, Shape, Topology};

pub use railcoll_mem::{dma_mem, regio};

/// Re-export of the firmware crate (ABI types appear in this API).
pub use railcoll_fw as fw;
