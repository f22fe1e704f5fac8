//! Collective operations built on puts, events and the node segment.
//!
//! Each collective has several algorithms, selected per call; the plain
//! call (`comm.barrier()`) uses the default. The algorithms follow the
//! papers: the barriers of \[GTNP02\] (RDMA pairwise exchange with recursive
//! doubling and its non-power-of-two scheme, the intra-node flat tree, and
//! their SMP combination) and the broadcasts used by \[QA08\] (binomial tree over
//! puts, shared memory, and the SMP combination). `docs/algorithms.md` gives
//! each one's steps and Hockney cost.
//!
//! Submodules: [`barrier`], [`bcast`], and `state` (what the collectives
//! keep per communicator, and the context they run in: the rank's endpoint
//! and that state).

pub mod barrier;
pub mod bcast;
pub(crate) mod state;

pub use barrier::BarrierAlgorithm;
pub use bcast::BcastAlgorithm;

/// Which group an RDMA barrier runs in. Each group has its own words and
/// barrier numbers: sharing them would let a number written in one group
/// satisfy a wait in the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BarrierGroup {
    /// All ranks, id = rank.
    Flat,
    /// Node masters, id = node.
    Masters,
}

/// Parse an algorithm by name; the error names the accepted ones.
pub(crate) fn parse_named<T: Copy>(
    all: &[T],
    name: fn(T) -> &'static str,
    kind: &str,
    s: &str,
) -> Result<T, String> {
    all.iter().copied().find(|a| name(*a) == s).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|a| name(*a)).collect();
        format!(
            "unknown {kind} algorithm '{s}' (accepted: {})",
            names.join(", ")
        )
    })
}
