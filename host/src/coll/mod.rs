//! Collective operations built on puts, events and the node segment.
//!
//! Each collective has several algorithms, selected per call; the plain
//! call (`comm.barrier()`) uses the default. The algorithms follow the
//! papers: the barriers of 002 (RDMA pairwise exchange with recursive
//! doubling and its non-power-of-two scheme, the intra-node flat tree, and
//! their SMP combination) and the broadcasts used by 001 (binomial tree over
//! puts, shared memory, and the SMP combination). `docs/algorithms.md` gives
//! each one's steps and Hockney cost.
//!
//! Submodules: [`barrier`], [`bcast`].

pub mod barrier;
pub mod bcast;

use std::cell::Cell;
use std::sync::Arc;

use crate::arena::{SymAllocator, SymBuffer};
use crate::comm::{Comm, DestEvent};
use crate::driver::Driver;
use crate::env::WaitHook;
use crate::error::Error;

pub use barrier::BarrierAlgorithm;
pub use bcast::BcastAlgorithm;

/// Arena buffers and events reserved by every communicator at creation
/// (before user allocations, so they are symmetric).
#[derive(Debug)]
pub struct CollBuffers {
    /// RDMA barrier among all ranks: one 8-byte word per rank.
    pub(crate) flat_words: SymBuffer,
    /// RDMA barrier among node masters: one 8-byte word per node.
    pub(crate) master_words: SymBuffer,
    /// RDMA barrier: the word the barrier number is put from.
    pub(crate) barrier_source: SymBuffer,
    /// Zero-length buffer for notifications.
    pub(crate) scratch: SymBuffer,
    /// Set when broadcast data arrives.
    pub(crate) bcast_data: DestEvent,
    /// Set when a child is ready to receive a broadcast.
    pub(crate) bcast_ready: DestEvent,
}

impl CollBuffers {
    pub(crate) fn reserve(
        alloc: &mut SymAllocator,
        driver: &mut Driver,
        size: usize,
    ) -> Result<Self, Error> {
        Ok(Self {
            flat_words: alloc.alloc(size * 8, 64)?,
            master_words: alloc.alloc(size * 8, 64)?,
            barrier_source: alloc.alloc(8, 64)?,
            scratch: alloc.alloc(0, 64)?,
            bcast_data: DestEvent::from_id(driver.alloc_dest_event()?),
            bcast_ready: DestEvent::from_id(driver.alloc_dest_event()?),
        })
    }
}

/// Collective sequence numbers, advanced identically on every rank.
#[derive(Debug, Default)]
pub struct CollSeq {
    /// Number of the current RDMA barrier among all ranks (002's "barrier
    /// number").
    pub(crate) flat_barrier: Cell<u64>,
    /// Number of the current RDMA barrier among node masters.
    pub(crate) master_barrier: Cell<u64>,
    /// Number of the current send/recv barrier.
    pub(crate) sendrecv_barrier: Cell<u64>,
    /// Number of the current hardware barrier (wrapping, 32-bit on the wire).
    pub(crate) hw_barrier: Cell<u32>,
}

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

/// The shm protocol's blocking and waking, through the rank's wait hook.
pub(crate) struct HookSync {
    hook: Arc<dyn WaitHook>,
}

impl crate::shm::Sync for HookSync {
    fn wait(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), Error> {
        Ok(self.hook.wait_until(ready)?)
    }

    fn wake(&self, local: usize) {
        self.hook.wake_local(local);
    }

    fn before_write(&self) {
        self.hook.before_shared_write();
    }
}

impl Comm {
    pub(crate) fn hook_sync(&self) -> HookSync {
        HookSync {
            hook: self.wait_arc(),
        }
    }

    /// Members of the inter-node phase: one leader per node, the node's
    /// local rank 0 except on `root`'s node, where it is `root`.
    pub(crate) fn node_leaders(&self, root: usize) -> Result<Vec<usize>, Error> {
        let topo = *self.topology();
        let (root_node, _) = topo.locate(root)?;
        (0..topo.nodes())
            .map(|n| {
                if n == root_node {
                    Ok(root)
                } else {
                    topo.rank_of(n, 0)
                }
            })
            .collect()
    }
}
