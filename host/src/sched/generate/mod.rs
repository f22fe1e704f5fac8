//! Schedule generators: the catalogue of \[QA08\], \[KSSKP09\] and
//! \[GTNP02\] and the native baselines, each written once as a function
//! from [`Params`] to every rank's steps. One module per collective
//! (`gather`, `allgather`, `alltoall`, `bcast`, `barrier`), and `blocks`:
//! the building blocks they share (trees, recursive doubling, ring, Bruck
//! rounds, node phases).
//!
//! Conventions (all generators):
//! - `k` = rails = ports. A multi-port step sends its (up to) k messages one
//!   per rail ([`Lane::Rail`]); an algorithm with one message per step
//!   stripes it ([`Lane::Stripe`]).
//! - Each logical wait has its own counter, waited on once per rank, so
//!   that counting is never ambiguous; [`ScheduleSet::seal`] fills in the
//!   counts from the puts addressed to it.
//! - Output blocks are written exactly once: working data lives in scratch
//!   or in a master's buffer, and reaches `recv` once.
//! - Node phases: a node's *master* is its local rank 0 (the root on the
//!   root's node for rooted collectives); node peers copy to and from it
//!   through shared memory ([`Op::PeerCopy`]), announced with flags.

// Generators index ranks, nodes and digits by number: the loops say so.
#![allow(clippy::needless_range_loop)]

pub(crate) mod allgather;
pub(crate) mod alltoall;
pub(crate) mod barrier;
pub(crate) mod bcast;
mod blocks;
pub(crate) mod gather;

use super::*;
use crate::topology::Topology;

/// Most destination counters a schedule may use: the communicator keeps a
/// pool of this many symmetric destination events.
pub const MAX_COUNTERS: u16 = 120;

/// Most nodes a hardware barrier spans (the switch's barrier group,
/// [`railcoll_fw::switch::MAX_GROUP_NODES`]). A hardware broadcast is held
/// to the same bound: what limits it is the NICs' flow slots (256 on the
/// reference NIC), checked with the rest of the budget (`budget::fits`).
pub const HW_COLLECTIVE_NODES: usize = railcoll_fw::switch::MAX_GROUP_NODES;

/// Largest block a native gather moves through the node segment [QA08 §3.1].
pub const NATIVE_SHM_GATHER_MAX: usize = 2048;
/// Largest block the native gather sends over its NIC-chained tree of all
/// ranks; above it, send/receive [QA08 §3.1].
pub const NATIVE_TREE_MAX: usize = 4096;
/// Largest block the native all-gather broadcasts in hardware; above it,
/// a ring [QA08 §3.1].
pub const NATIVE_HWBCAST_MAX: usize = 32 << 10;
/// Largest block the native all-to-all moves through the node segment and
/// the node masters, on nodes with several ranks [QA08 §3.1].
pub const NATIVE_SHM_ALLTOALL_MAX: usize = 2048;
/// Largest block the native all-to-all sends by plain pairwise exchange;
/// above it, permission to send first [QA08 §3.1].
pub const NATIVE_PAIRWISE_MAX: usize = 8 << 10;

/// A generator: writes every rank's steps of one algorithm into the
/// builder (the catalogue names one per entry).
pub(crate) type Generator = fn(&mut Builder) -> Result<(), Error>;

/// Run `generator` for `p`: every rank's steps, sealed (counts filled in,
/// budgets computed).
pub(crate) fn run(p: &Params, generator: Generator) -> Result<ScheduleSet, Error> {
    let n = p.shape.size();
    if p.collective.rooted() && p.root >= n {
        return Err(Error::RankOutOfRange {
            rank: p.root,
            size: n,
        });
    }
    let mut b = Builder::new(*p);
    generator(&mut b)?;
    let nodes = b.topo.nodes();
    if nodes > HW_COLLECTIVE_NODES
        && b.ranks
            .iter()
            .flatten()
            .any(|s| matches!(s.op, Op::HwBarrier | Op::HwBcast { .. }))
    {
        return Err(Error::Unsupported {
            algorithm: p.algorithm.name(),
            reason: format!(
                "the switch's barrier (its group table) and the hardware broadcast (the reference NIC's flow slots) span at most {HW_COLLECTIVE_NODES} nodes; the communicator has {nodes}"
            ),
        });
    }
    let set = b.finish()?;
    if set.counters > MAX_COUNTERS {
        return Err(Error::Unsupported {
            algorithm: p.algorithm.name(),
            reason: format!(
                "it needs {} destination counters for {n} ranks; the communicator has {MAX_COUNTERS}",
                set.counters
            ),
        });
    }
    Ok(set)
}

/// Accumulates every rank's steps.
pub(crate) struct Builder {
    p: Params,
    k: usize,
    n: usize,
    topo: Topology,
    ranks: Vec<Vec<Step>>,
    next_after: Vec<Vec<u32>>,
    scratch: u32,
    next_counter: Counter,
    next_flag: Flag,
}

impl Builder {
    fn new(p: Params) -> Self {
        let n = p.shape.size();
        Self {
            p,
            k: p.shape.rails,
            n,
            topo: p.shape.topology,
            ranks: vec![Vec::new(); n],
            next_after: vec![Vec::new(); n],
            scratch: 0,
            next_counter: 0,
            next_flag: 0,
        }
    }

    fn counter(&mut self) -> Counter {
        self.next_counter += 1;
        self.next_counter - 1
    }

    fn flag(&mut self) -> Flag {
        self.next_flag += 1;
        self.next_flag - 1
    }

    fn note(&mut self, r: &Region) {
        if r.buf == Buf::Scratch {
            self.scratch = self.scratch.max(r.end());
        }
    }

    fn push(&mut self, rank: usize, op: Op) -> u32 {
        match &op {
            Op::Put { src, dst, .. } | Op::ChainPut { src, dst, .. } => {
                self.note(&src.clone());
                self.note(&dst.clone());
            }
            Op::Copy { src, dst } | Op::HwBcast { src, dst, .. } => {
                self.note(&src.clone());
                self.note(&dst.clone());
            }
            Op::PeerCopy { local, remote, .. } => {
                self.note(&local.clone());
                self.note(&remote.clone());
            }
            _ => {}
        }
        let after = std::mem::take(&mut self.next_after[rank]);
        self.ranks[rank].push(Step { op, after });
        (self.ranks[rank].len() - 1) as u32
    }

    /// The next step of `rank` needs step `step`'s local completion.
    fn after(&mut self, rank: usize, step: u32) {
        self.next_after[rank].push(step);
    }

    fn put(
        &mut self,
        from: usize,
        to: usize,
        src: Region,
        dst: Region,
        lane: Lane,
        signal: Counter,
    ) -> u32 {
        self.push(
            from,
            Op::Put {
                to: to as Rank,
                src,
                dst,
                lane,
                signal: Some(signal),
            },
        )
    }

    fn wait(&mut self, rank: usize, counter: Counter) {
        self.push(
            rank,
            Op::Wait {
                counter,
                arrivals: [0; MAX_RAILS],
            },
        );
    }

    fn copy(&mut self, rank: usize, src: Region, dst: Region) {
        if src.count > 0 {
            self.push(rank, Op::Copy { src, dst });
        }
    }

    fn peer(&mut self, rank: usize, peer: usize, dir: PeerDir, local: Region, remote: Region) {
        if local.count > 0 {
            self.push(
                rank,
                Op::PeerCopy {
                    peer: peer as Rank,
                    dir,
                    local,
                    remote,
                },
            );
        }
    }

    fn signal(&mut self, rank: usize, to: usize, flag: Flag) {
        self.push(
            rank,
            Op::Signal {
                to: to as Rank,
                flag,
            },
        );
    }

    fn wait_flag(&mut self, rank: usize, flag: Flag) {
        self.push(
            rank,
            Op::WaitFlag {
                flag,
                count: 0,
                from: 0,
            },
        );
    }

    fn rail(&self, i: usize) -> Lane {
        Lane::Rail((i % self.k) as u8)
    }

    fn rank_of(&self, node: usize, local: usize) -> usize {
        self.topo.rank_of(node, local).unwrap_or(0)
    }

    fn locate(&self, rank: usize) -> (usize, usize) {
        self.topo.locate(rank).unwrap_or((0, 0))
    }

    fn node_ranks(&self, node: usize) -> Vec<usize> {
        (0..self.topo.ranks_per_node())
            .map(|l| self.rank_of(node, l))
            .collect()
    }

    fn finish(self) -> Result<ScheduleSet, Error> {
        ScheduleSet {
            params: self.p,
            scratch_blocks: self.scratch,
            counters: 0,
            flags: 0,
            ranks: self
                .ranks
                .into_iter()
                .enumerate()
                .map(|(r, steps)| Schedule {
                    rank: r as Rank,
                    steps,
                })
                .collect(),
        }
        .seal()
    }
}

/// Maximal runs of consecutive positions: `(first, count)`.
pub(super) fn runs(mut positions: Vec<u32>) -> Vec<(u32, u32)> {
    positions.sort_unstable();
    positions.dedup();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for p in positions {
        match out.last_mut() {
            Some((start, count)) if *start + *count == p => *count += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

/// Maximal runs of a mapping `src block -> dst block` that are consecutive
/// on both sides: `(src, dst, count)`, in source order.
pub(super) fn paired_runs(mut pairs: Vec<(u32, u32)>) -> Vec<(u32, u32, u32)> {
    pairs.sort_unstable();
    let mut out: Vec<(u32, u32, u32)> = Vec::new();
    for (s, d) in pairs {
        match out.last_mut() {
            Some((s0, d0, c)) if *s0 + *c == s && *d0 + *c == d => *c += 1,
            _ => out.push((s, d, 1)),
        }
    }
    out
}

/// The rail a group member with digit `from` uses towards the member with
/// digit `to`: a Latin square, so every member sends on k distinct rails and
/// receives on k distinct rails (contention-free under the k-port model).
pub(super) fn latin_rail(from: usize, to: usize, radix: usize) -> Lane {
    Lane::Rail(((to + radix - from) % radix - 1) as u8)
}

#[cfg(test)]
mod tests {
    use super::blocks::fold;
    use super::*;

    #[test]
    fn runs_merge_consecutive_positions() {
        assert_eq!(runs(vec![5, 1, 2, 3, 7, 6]), vec![(1, 3), (5, 3)]);
        assert_eq!(
            paired_runs(vec![(0, 4), (1, 5), (2, 0), (3, 1)]),
            vec![(0, 4, 2), (2, 0, 2)]
        );
        assert_eq!(log_ceil(3, 9), 2);
        assert_eq!(log_ceil(3, 10), 3);
        assert_eq!(log_ceil(2, 1), 0);
    }

    #[test]
    fn fold_gives_each_core_at_most_radix_minus_one_extras() {
        for n in 1..60 {
            for radix in 2..5 {
                let (core, extras) = fold(n, radix);
                assert!(core <= n && core * radix > n);
                assert!(extras.iter().all(|e| e.len() < radix));
                assert_eq!(extras.iter().map(Vec::len).sum::<usize>(), n - core);
            }
        }
    }
}
