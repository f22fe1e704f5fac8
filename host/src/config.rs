//! A communicator's settings, shared by the endpoint (rails, arena, rings)
//! and the collective layer (sockets).

use crate::stripe::RailPolicy;
use crate::topology::Topology;

/// Settings of a communicator.
#[derive(Clone, Copy, Debug)]
pub struct CommConfig {
    /// Job shape.
    pub topology: Topology,
    /// This rank.
    pub rank: usize,
    /// Rails, `1..=4`.
    pub rails: usize,
    /// Symmetric arena size per rank.
    pub arena_size: usize,
    /// Job key.
    pub job_key: u32,
    /// Default rail policy for puts and gets.
    pub policy: RailPolicy,
    /// log2 of command ring entries per rail.
    pub cq_log2: u8,
    /// Sockets per node (multi-leader all-gather: one leader per socket).
    pub sockets: usize,
}

impl CommConfig {
    /// Defaults: 2 rails, 64 MiB arena, striping at 1 KiB, 256-entry rings.
    pub fn new(topology: Topology, rank: usize) -> Self {
        Self {
            topology,
            rank,
            rails: 2,
            arena_size: 64 << 20,
            job_key: 0x5241_494c,
            policy: RailPolicy::default(),
            cq_log2: 8,
            sockets: 1,
        }
    }
}
