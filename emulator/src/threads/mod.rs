//! Threads mode: free-running OS threads and wall-clock time, the mirror of
//! [`crate::modeled`]: [`board`] implements the firmware's hardware traits
//! over the shared hardware of [`crate::hw`], [`rail`] is a rail's switch as
//! per-node channels, and [`worker`] is the pool of NIC worker threads
//! (never more than cores; idle workers park and are woken by doorbells
//! and packets).

pub mod board;
pub mod rail;
pub mod worker;
