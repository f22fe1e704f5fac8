//! railcoll-tests: cross-crate integration tests (in `tests/`) and the
//! helpers they share.
//!
//! Map: [`pattern`] makes verifiable data; [`cluster`] builds small clusters
//! with the settings tests need (small packets, so that splitting is
//! exercised).

use railcoll_emu::{Cluster, ClusterConfig, Mode};
use railcoll_host::Placement;
use railcoll_host::sched::Shape;

/// A shape for tests (`nodes x rpn`, `sockets`, `rails`); panics on a
/// shape the test got wrong.
pub fn shape(
    nodes: usize,
    rpn: usize,
    sockets: usize,
    rails: usize,
    placement: Placement,
) -> Shape {
    Shape::new(nodes, rpn, sockets, rails, placement).expect("test shape")
}

/// Deterministic, position- and seed-dependent bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    // Eight bytes per xorshift step: tests make megabytes of it.
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// The emulator mode the suite runs in: `RAILCOLL_TEST_MODE=modeled` runs
/// every emulator test in modeled mode (CI runs the suite in both).
pub fn mode() -> Mode {
    match std::env::var("RAILCOLL_TEST_MODE") {
        Ok(m) => m
            .parse()
            .unwrap_or_else(|e: String| panic!("RAILCOLL_TEST_MODE: {e}")),
        Err(_) => Mode::Threads,
    }
}

/// Whether the suite, in this run's [`mode`], takes the `index`-th shape of
/// a space the two modes share: threads mode the even ones, modeled mode
/// the odd ones. The README's test command runs both, so every shape still
/// runs; the largest shape spaces are shared this way to keep CI within
/// its time (both modes run the same host code and firmware; what differs
/// is the transport underneath, and each shape class still meets both).
pub fn shared_shape(index: usize) -> bool {
    let threads = matches!(mode(), Mode::Threads);
    index.is_multiple_of(2) == threads
}

/// A cluster for tests: `nodes x rpn x rails`, 2 KiB packets (Elan4's), one
/// worker per rail, `arena` bytes per rank, in the suite's [`mode`].
pub fn cluster(nodes: usize, rpn: usize, rails: usize, arena: usize) -> Cluster {
    Cluster::new(ClusterConfig {
        mode: mode(),
        shape: shape(nodes, rpn, 1, rails, Placement::Block),
        arena_size: arena,
        packet_size: 2048,
        // A deadlock fails the test in seconds, not minutes.
        wait_timeout: std::time::Duration::from_secs(20),
        ..ClusterConfig::default()
    })
    .expect("test cluster")
}
