//! railcoll-emu: the hardware model railcoll runs on for development and CI.
//!
//! A [`cluster::Cluster`] is `nodes x ranks_per_node x rails`. Each node has
//! real (mmap'ed) host memory and one NIC per rail; each NIC runs the
//! unmodified firmware engine of `railcoll-fw` on an [`threads::board::EmuBoard`] (or, in modeled mode, a
//! [`modeled::board`]);
//! each rail has a switch that delivers packets between its NICs. A put
//! moves its bytes with exactly one copy, from the source node's memory into
//! the target node's, performed by the receiving NIC.
//!
//! Map of the crate:
//!
//! - [`hw`]: the hardware both modes build on: node memory and its DMA
//!   allocator, a NIC's register file, doorbell notification, what travels
//!   on a rail and how its switch routes collective packets, payload
//!   delivery and its CRC, and the seeded fault injection of both modes
//!   (`--faults`).
//! - [`threads`]: threads mode: the board over real threads, a rail's
//!   switch as per-node channels (and, for a rail across hosts, UDP
//!   datagrams), who runs the NICs' engines: the NIC worker pool (idle
//!   workers park and are woken by doorbells and packets) and, when
//!   waiting ranks and workers outnumber the cores, the waiting ranks.
//! - [`modeled`]: modeled mode: calibration profiles, the modeled board
//!   and the sequencer that runs everything in deterministic virtual time.
//! - [`cluster`]: building a cluster (threads or modeled) and running a
//!   closure on every rank.
//! - [`data`]: modeled mode's data modes (`--data full|none|sample=N`):
//!   which ranks' payload a run moves and checks.
//! - [`mod@bench`]: the measurements behind `railcoll bench`, each reported
//!   beside a baseline measured in the same run.
//! - [`overlap`]: the OSU-style overlap benchmark (`bench --overlap`):
//!   how much of a non-blocking collective the host's own work hides.
//! - [`soak`]: the soak (`railcoll soak`): many barriers and
//!   all-gathers, with the process's memory, threads and descriptors
//!   sampled.
//! - [`timeline`]: spans of one run (ranks, NICs, rail ports, switches)
//!   for `railcoll trace`.
//! - [`verify`]: the check of every rank's buffers after a benchmark's
//!   timed calls (no figure for a wrong result).
//! - [`workbench`]: the researcher's workbench: sweeps, their tables, CSV,
//!   JSON and plots, Chrome traces, tuning tables, presets and study files.
//! - [`nicd`]: `railcoll nicd`: a job's NICs in this process, each
//!   served as a vfio-user device to rank processes (threads mode's NIC
//!   side over memory files, interrupts as eventfds).
//! - [`fabric`]: rails between machines: which host runs which nodes'
//!   NICs, the rail packets' UDP datagrams, and the bootstrap across
//!   hosts.
//! - [`fake_vfio`]: the emulator's NICs as boards behind the host's VFIO
//!   seam: the VFIO backend tested end to end without an IOMMU.
//! - [`launcher`]: `railcoll launch`: a job of rank processes on this
//!   machine, their NICs in a [`nicd::Nicd`] of the launcher's process.
//! - [`cli`]: the `railcoll` command line.
//! - [`fuzzing`]: the fuzz targets' entry points on the parsers of
//!   untrusted text (profiles, tuning tables, fault specs, study files,
//!   sizes) and on schedule generation.
//!
//! Unsafe code: none (`forbid`). The raw memory, mappings and registers
//! the emulated NICs are built from, and the fiber switch of modeled mode
//! ([`modeled::fiber`], re-exported), come from `railcoll-mem`.

#![forbid(unsafe_code)]

pub mod bench;
pub mod cli;
pub mod cluster;
pub mod data;
pub mod fabric;
pub mod fake_vfio;
pub mod fuzzing;
pub mod hw;
pub mod launcher;
pub mod modeled;
pub mod nicd;
pub mod overlap;
pub mod soak;
pub mod threads;
pub mod timeline;
pub mod verify;
pub mod workbench;

pub use cluster::{Cluster, ClusterConfig, EmuError, Mode};
