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
    /// Default rail policy for puts and gets.
    pub policy: RailPolicy,
    /// log2 of command ring entries per rail.
    pub cq_log2: u8,
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
            policy: RailPolicy::default(),
            cq_log2: 8,
        }
    }
}
