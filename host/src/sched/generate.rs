//! Schedule generators: the catalogue of \[QA08\] and \[KSSKP09\] and the native
//! baselines, each written once as a function from [`Params`] to every
//! rank's steps.
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

use super::algo::{Aggregation, LeaderExchange};
use super::*;

/// Most destination counters a schedule may use: the communicator keeps a
/// pool of this many symmetric destination events.
pub const MAX_COUNTERS: u16 = 120;

/// Largest block a native gather moves through the node segment [QA08 §3.1].
pub const NATIVE_SHM_GATHER_MAX: usize = 2048;
/// Largest block the native gather sends over its NIC-chained tree of all
/// ranks; above it, send/receive [QA08 §3.1].
pub const NATIVE_TREE_MAX: usize = 4096;
/// Largest block the native all-gather broadcasts in hardware; above it,
/// a ring [QA08 §3.1].
pub const NATIVE_HWBCAST_MAX: usize = 32 << 10;
/// Largest block the native all-to-all sends by plain pairwise exchange;
/// above it, permission to send first [QA08 §3.1].
pub const NATIVE_PAIRWISE_MAX: usize = 8 << 10;

/// Generate the schedules of every rank.
pub fn generate(p: &Params) -> Result<ScheduleSet, Error> {
    let n = p.shape.size();
    if p.collective == Collective::Gather && p.root >= n {
        return Err(Error::RankOutOfRange {
            rank: p.root,
            size: n,
        });
    }
    if !p.collective.algorithms().contains(&p.algorithm) {
        return Err(Error::Unsupported {
            algorithm: p.algorithm.name(),
            reason: format!("it is not a {} algorithm", p.collective),
        });
    }
    let mut b = Builder::new(*p);
    use Algorithm as A;
    use Collective as C;
    match (p.collective, p.algorithm) {
        (C::Gather, A::Direct) => gather_direct(&mut b),
        (C::Gather, A::Binomial) => {
            let k = b.k;
            gather_tree_flat(&mut b, k, false)
        }
        (C::Gather, A::SmpTree) => smp_gather(&mut b, p.root, true),
        (C::Gather, A::SmpDirect) => smp_gather(&mut b, p.root, false),
        (C::Gather, A::Native) => native_gather(&mut b, p.root),
        (C::Allgather, A::Direct) => allgather_direct(&mut b),
        (C::Allgather, A::Exchange) => allgather_exchange(&mut b),
        (C::Allgather, A::Bruck) => allgather_bruck(&mut b),
        (C::Allgather, A::Ring) => allgather_ring(&mut b),
        (C::Allgather, A::RecursiveDoubling) => allgather_rd(&mut b),
        (C::Allgather, A::SmpGatherTree) => smp_gather_bcast(&mut b, true),
        (C::Allgather, A::SmpGatherDirect) => smp_gather_bcast(&mut b, false),
        (C::Allgather, A::SmpDirect) => smp_allgather_direct(&mut b),
        (C::Allgather, A::SmpBruck) => smp_allgather_bruck(&mut b),
        (C::Allgather, A::MultiLeader(agg, ex)) => multi_leader(&mut b, agg, ex),
        (C::Allgather, A::Native) => native_allgather(&mut b),
        (C::Alltoall, A::Direct) => alltoall_direct(&mut b),
        (C::Alltoall, A::Exchange) => alltoall_exchange(&mut b),
        (C::Alltoall, A::Bruck) => alltoall_bruck(&mut b),
        (C::Alltoall, A::Pairwise) => alltoall_pairwise(&mut b, Lane::Stripe, false),
        (C::Alltoall, A::Native) => {
            if p.block_bytes <= NATIVE_PAIRWISE_MAX {
                alltoall_pairwise(&mut b, Lane::Rail(0), false)
            } else {
                alltoall_pairwise(&mut b, Lane::Stripe, true)
            }
        }
        _ => Err(Error::Unsupported {
            algorithm: p.algorithm.name(),
            reason: format!("it is not a {} algorithm", p.collective),
        }),
    }?;
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
struct Builder {
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
        self.push(rank, Op::WaitFlag { flag, count: 0 });
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
fn runs(mut positions: Vec<u32>) -> Vec<(u32, u32)> {
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
fn paired_runs(mut pairs: Vec<(u32, u32)>) -> Vec<(u32, u32, u32)> {
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
fn latin_rail(from: usize, to: usize, radix: usize) -> Lane {
    Lane::Rail(((to + radix - from) % radix - 1) as u8)
}

fn log_ceil(base: usize, n: usize) -> u32 {
    let mut steps = 0;
    let mut reach = 1usize;
    while reach < n {
        reach = reach.saturating_mul(base);
        steps += 1;
    }
    steps
}

// ---------------------------------------------------------------- gather --

fn gather_direct(b: &mut Builder) -> Result<(), Error> {
    let (n, root) = (b.n, b.p.root);
    let c = b.counter();
    for v in 1..n {
        let q = (root + v) % n;
        let lane = b.rail(v - 1);
        b.put(
            q,
            root,
            Region::one(Buf::Send, 0),
            Region::one(Buf::Recv, q as u32),
            lane,
            c,
        );
    }
    b.copy(
        root,
        Region::one(Buf::Send, 0),
        Region::one(Buf::Recv, root as u32),
    );
    b.wait(root, c);
    Ok(())
}

/// One member of a tree gather.
struct TreeMember {
    rank: usize,
    /// Where the member's own unit is at the start (a leaf sends from
    /// there; an inner member copies it to scratch[0..unit] first, unless it
    /// is already there).
    own: Region,
}

/// The (k+1)-ary spanning binomial tree gather [QA08 eq. 1] of `members`
/// (index 0 is the root), each contributing `unit` blocks. Every member
/// collects its subtree in scratch in member order; the root ends with all
/// units in scratch[0..M*unit] and the caller places them. With `chained`,
/// inner members forward on the NIC (single rail, no host in the path).
fn tree_gather(b: &mut Builder, members: &[TreeMember], unit: u32, ports: usize, chained: bool) {
    let m = members.len();
    let radix = ports + 1;
    let c = b.counter();
    for (v, mem) in members.iter().enumerate() {
        // The level at which v sends: its lowest nonzero base-(k+1) digit.
        let mut stride = 1usize;
        while v != 0 && (v / stride).is_multiple_of(radix) {
            stride *= radix;
        }
        let has_children = if v == 0 {
            m > 1
        } else {
            stride > 1 && v + 1 < m
        };
        let in_scratch = mem.own.buf == Buf::Scratch && mem.own.block == 0;
        // The root's own unit is placed by the caller.
        if v != 0 && has_children && !in_scratch {
            b.copy(mem.rank, mem.own, Region::new(Buf::Scratch, 0, unit));
        }
        if v == 0 {
            if m > 1 {
                b.wait(mem.rank, c);
            }
            continue;
        }
        let digit = (v / stride) % radix;
        let parent = v - digit * stride;
        let count = stride.min(m - v) as u32 * unit;
        let dst = Region::new(Buf::Scratch, (digit * stride) as u32 * unit, count);
        let to = members[parent].rank;
        if chained {
            let src = Region::new(Buf::Scratch, 0, count);
            if has_children {
                b.push(
                    mem.rank,
                    Op::ChainPut {
                        trigger: c,
                        count: 0,
                        rail: 0,
                        to: to as Rank,
                        src,
                        dst,
                        signal: Some(c),
                    },
                );
            } else {
                b.put(mem.rank, to, mem.own, dst, Lane::Rail(0), c);
            }
        } else {
            if has_children {
                b.wait(mem.rank, c);
            }
            let src = if has_children {
                Region::new(Buf::Scratch, 0, count)
            } else {
                mem.own
            };
            let lane = b.rail(digit - 1);
            b.put(mem.rank, to, src, dst, lane, c);
        }
    }
}

/// Place the root's scratch units (member order) into recv: unit `u`
/// holds the blocks `blocks_of(u)` (recv positions, in unit order).
fn place_units(
    b: &mut Builder,
    rank: usize,
    units: usize,
    unit: u32,
    blocks_of: &dyn Fn(usize) -> Vec<u32>,
) {
    let mut pairs = Vec::new();
    for u in 0..units {
        for (i, pos) in blocks_of(u).into_iter().enumerate() {
            pairs.push((u as u32 * unit + i as u32, pos));
        }
    }
    for (s, d, c) in paired_runs(pairs) {
        b.copy(
            rank,
            Region::new(Buf::Scratch, s, c),
            Region::new(Buf::Recv, d, c),
        );
    }
}

fn gather_tree_flat(b: &mut Builder, ports: usize, chained: bool) -> Result<(), Error> {
    let (n, root) = (b.n, b.p.root);
    let members: Vec<TreeMember> = (0..n)
        .map(|v| TreeMember {
            rank: (root + v) % n,
            own: Region::one(Buf::Send, 0),
        })
        .collect();
    tree_gather(b, &members, 1, ports, chained);
    if n > 1 {
        // The root's own block goes straight to its place; the others from
        // scratch.
        b.copy(
            root,
            Region::one(Buf::Send, 0),
            Region::one(Buf::Recv, root as u32),
        );
        let mut pairs = Vec::new();
        for v in 1..n {
            pairs.push((v as u32, ((root + v) % n) as u32));
        }
        for (s, d, c) in paired_runs(pairs) {
            b.copy(
                root,
                Region::new(Buf::Scratch, s, c),
                Region::new(Buf::Recv, d, c),
            );
        }
    } else {
        b.copy(
            root,
            Region::one(Buf::Send, 0),
            Region::one(Buf::Recv, root as u32),
        );
    }
    Ok(())
}

/// The node masters for a collective rooted at `root`: the root on its
/// node, local rank 0 elsewhere.
fn masters(b: &Builder, root: usize) -> Vec<usize> {
    let (root_node, _) = b.locate(root);
    (0..b.topo.nodes())
        .map(|n| {
            if n == root_node {
                root
            } else {
                b.rank_of(n, 0)
            }
        })
        .collect()
}

/// Phase 1 of the SMP-aware algorithms: every rank of every node puts its
/// block into its master's `target(rank)` region; the master waits.
/// Returns the flag the master waited on.
fn node_gather(b: &mut Builder, masters: &[usize], target: &dyn Fn(usize) -> Region) -> Flag {
    let f = b.flag();
    for (node, &m) in masters.iter().enumerate() {
        for q in b.node_ranks(node) {
            if q == m {
                continue;
            }
            b.peer(q, m, PeerDir::Push, Region::one(Buf::Send, 0), target(q));
            b.signal(q, m, f);
        }
        b.copy(m, Region::one(Buf::Send, 0), target(m));
        if b.topo.ranks_per_node() > 1 {
            b.wait_flag(m, f);
        }
    }
    f
}

/// Position in node order of each local rank of `node`'s blocks.
fn node_positions(b: &Builder, node: usize) -> Vec<u32> {
    b.node_ranks(node).into_iter().map(|r| r as u32).collect()
}

/// SMP-aware gather ([QA08 §5.2.1] phases 1-2): shm gather into each master's
/// scratch (local order), then a tree or Direct among masters into the
/// root's receive buffer.
fn smp_gather(b: &mut Builder, root: usize, tree: bool) -> Result<(), Error> {
    let masters = masters(b, root);
    let l = b.topo.ranks_per_node() as u32;
    let topo = b.topo;
    let local_of = move |q: usize| topo.locate(q).map(|x| x.1).unwrap_or(0) as u32;
    let (root_node, _) = b.locate(root);
    node_gather(b, &masters, &|q| Region::one(Buf::Scratch, local_of(q)));
    let nodes = b.topo.nodes();
    if tree {
        let members: Vec<TreeMember> = (0..nodes)
            .map(|v| {
                let node = (root_node + v) % nodes;
                TreeMember {
                    rank: masters[node],
                    own: Region::new(Buf::Scratch, 0, l),
                }
            })
            .collect();
        tree_gather(b, &members, l, b.k, false);
        let positions: Vec<Vec<u32>> = (0..nodes)
            .map(|v| node_positions(b, (root_node + v) % nodes))
            .collect();
        place_units(b, root, nodes, l, &|u| positions[u].clone());
    } else {
        let c = b.counter();
        for v in 1..nodes {
            let node = (root_node + v) % nodes;
            let pairs: Vec<(u32, u32)> = node_positions(b, node)
                .into_iter()
                .enumerate()
                .map(|(i, pos)| (i as u32, pos))
                .collect();
            let lane = b.rail(v - 1);
            for (s, d, cnt) in paired_runs(pairs) {
                b.put(
                    masters[node],
                    root,
                    Region::new(Buf::Scratch, s, cnt),
                    Region::new(Buf::Recv, d, cnt),
                    lane,
                    c,
                );
            }
        }
        let positions = node_positions(b, root_node);
        place_units(b, root, 1, l, &|_| positions.clone());
        if nodes > 1 {
            b.wait(root, c);
        }
    }
    Ok(())
}

/// The native `elan_gather()` of [QA08 §3.1]: up to 2 KB a node-level shm
/// gather, then a single-port tree among node masters with NIC-chained
/// forwarding; up to 4 KB the chained tree among all ranks; above, every
/// rank sends to the root with send/receive (a rendezvous: the root grants
/// each sender, the data is striped).
fn native_gather(b: &mut Builder, root: usize) -> Result<(), Error> {
    let bytes = b.p.block_bytes;
    if bytes <= NATIVE_SHM_GATHER_MAX {
        let masters = masters(b, root);
        let l = b.topo.ranks_per_node() as u32;
        let topo = b.topo;
        let local_of = move |q: usize| topo.locate(q).map(|x| x.1).unwrap_or(0) as u32;
        let (root_node, _) = b.locate(root);
        let nodes = b.topo.nodes();
        node_gather(b, &masters, &|q| Region::one(Buf::Scratch, local_of(q)));
        let members: Vec<TreeMember> = (0..nodes)
            .map(|v| TreeMember {
                rank: masters[(root_node + v) % nodes],
                own: Region::new(Buf::Scratch, 0, l),
            })
            .collect();
        tree_gather(b, &members, l, 1, true);
        let positions: Vec<Vec<u32>> = (0..nodes)
            .map(|v| node_positions(b, (root_node + v) % nodes))
            .collect();
        place_units(b, root, nodes, l, &|u| positions[u].clone());
        Ok(())
    } else if bytes <= NATIVE_TREE_MAX {
        gather_tree_flat(b, 1, true)
    } else {
        let n = b.n;
        let grant = b.counter();
        let data = b.counter();
        let empty = Region::new(Buf::Scratch, 0, 0);
        for v in 1..n {
            let q = (root + v) % n;
            b.put(root, q, empty, empty, Lane::Rail(0), grant);
        }
        for v in 1..n {
            let q = (root + v) % n;
            b.wait(q, grant);
            b.put(
                q,
                root,
                Region::one(Buf::Send, 0),
                Region::one(Buf::Recv, q as u32),
                Lane::Stripe,
                data,
            );
        }
        b.copy(
            root,
            Region::one(Buf::Send, 0),
            Region::one(Buf::Recv, root as u32),
        );
        if n > 1 {
            b.wait(root, data);
        }
        Ok(())
    }
}

// ------------------------------------------------------------- all-gather --

fn own_block(b: &mut Builder, r: usize) {
    b.copy(
        r,
        Region::one(Buf::Send, 0),
        Region::one(Buf::Recv, r as u32),
    );
}

fn allgather_direct(b: &mut Builder) -> Result<(), Error> {
    let n = b.n;
    let c = b.counter();
    for p in 0..n {
        for o in 1..n {
            let lane = b.rail(o - 1);
            b.put(
                p,
                (p + o) % n,
                Region::one(Buf::Send, 0),
                Region::one(Buf::Recv, p as u32),
                lane,
                c,
            );
        }
        own_block(b, p);
        if n > 1 {
            b.wait(p, c);
        }
    }
    Ok(())
}

/// Put the recv blocks at `positions` of `from` into the same positions of
/// `to`'s recv (one put per run).
fn put_positions(
    b: &mut Builder,
    from: usize,
    to: usize,
    positions: Vec<u32>,
    lane: Lane,
    c: Counter,
) {
    for (start, count) in runs(positions) {
        let r = Region::new(Buf::Recv, start, count);
        b.put(from, to, r, r, lane, c);
    }
}

/// The core/extra fold used by exchange and recursive doubling for
/// non-power sizes: returns (core size P, extra ranks of each core).
fn fold(n: usize, radix: usize) -> (usize, Vec<Vec<usize>>) {
    let mut core = 1;
    while core * radix <= n {
        core *= radix;
    }
    let mut extras = vec![Vec::new(); core];
    for e in core..n {
        extras[(e - core) % core].push(e);
    }
    (core, extras)
}

/// k-port Standard Exchange [QA08 §5.1.2, Fig. 4]. For N a power of k+1:
/// log_{k+1} N exchange steps among groups of k+1. Otherwise a correction
/// step before and after: the N - P extra ranks hand their block to a core
/// rank (at most k per core, one per rail), the P core ranks run the
/// exchange carrying their extras' blocks, and each core returns the full
/// result to its extras.
fn allgather_exchange(b: &mut Builder) -> Result<(), Error> {
    let (n, k) = (b.n, b.k);
    let radix = k + 1;
    let (core, extras) = fold(n, radix);
    for p in 0..n {
        own_block(b, p);
    }
    // Blocks a core carries for the core range [lo, hi).
    let carried = |lo: usize, hi: usize| -> Vec<u32> {
        let mut v: Vec<u32> = (lo..hi).map(|x| x as u32).collect();
        for c in lo..hi {
            v.extend(extras[c].iter().map(|&e| e as u32));
        }
        v
    };
    if n > core {
        let pre = b.counter();
        for (c, ex) in extras.iter().enumerate() {
            for (j, &e) in ex.iter().enumerate() {
                b.put(
                    e,
                    c,
                    Region::one(Buf::Send, 0),
                    Region::one(Buf::Recv, e as u32),
                    Lane::Rail(j as u8),
                    pre,
                );
            }
            if !ex.is_empty() {
                b.wait(c, pre);
            }
        }
    }
    let mut stride = 1;
    while stride < core {
        let c = b.counter();
        for p in 0..core {
            let digit = (p / stride) % radix;
            let lo = p - p % stride;
            let mine = carried(lo, lo + stride);
            for d in (0..radix).filter(|&d| d != digit) {
                let mate = p - digit * stride + d * stride;
                put_positions(b, p, mate, mine.clone(), latin_rail(digit, d, radix), c);
            }
            b.wait(p, c);
        }
        stride *= radix;
    }
    if n > core {
        let post = b.counter();
        for (c, ex) in extras.iter().enumerate() {
            for (j, &e) in ex.iter().enumerate() {
                let others: Vec<u32> = (0..n).filter(|&x| x != e).map(|x| x as u32).collect();
                // A lone extra gets the result striped over every rail.
                let lane = if ex.len() == 1 {
                    Lane::Stripe
                } else {
                    Lane::Rail(j as u8)
                };
                put_positions(b, c, e, others, lane, post);
            }
        }
        for ex in &extras {
            for &e in ex {
                b.wait(e, post);
            }
        }
    }
    Ok(())
}

/// Recursive doubling among the members of `ranks` (index = position in
/// the doubling), where member `i` contributes the recv positions
/// `unit_of(i)` (already in its recv). Non-powers of two fold the extras
/// in and out (one step each). Single message per step: striped.
fn recursive_doubling(b: &mut Builder, ranks: &[usize], unit_of: &dyn Fn(usize) -> Vec<u32>) {
    let m = ranks.len();
    let (core, extras) = fold(m, 2);
    let carried = |lo: usize, hi: usize| -> Vec<u32> {
        let mut v = Vec::new();
        for c in lo..hi {
            v.extend(unit_of(c));
            for &e in &extras[c] {
                v.extend(unit_of(e));
            }
        }
        v
    };
    if m > core {
        let pre = b.counter();
        for (c, ex) in extras.iter().enumerate() {
            for &e in ex {
                put_positions(b, ranks[e], ranks[c], unit_of(e), Lane::Stripe, pre);
            }
            if !ex.is_empty() {
                b.wait(ranks[c], pre);
            }
        }
    }
    let mut dist = 1;
    while dist < core {
        let c = b.counter();
        for v in 0..core {
            let lo = v - v % dist;
            put_positions(
                b,
                ranks[v],
                ranks[v ^ dist],
                carried(lo, lo + dist),
                Lane::Stripe,
                c,
            );
            b.wait(ranks[v], c);
        }
        dist *= 2;
    }
    if m > core {
        let post = b.counter();
        let all = carried(0, core);
        for (c, ex) in extras.iter().enumerate() {
            for &e in ex {
                let mine = unit_of(e);
                let others: Vec<u32> = all.iter().copied().filter(|x| !mine.contains(x)).collect();
                put_positions(b, ranks[c], ranks[e], others, Lane::Stripe, post);
            }
        }
        for ex in &extras {
            for &e in ex {
                b.wait(ranks[e], post);
            }
        }
    }
}

fn allgather_rd(b: &mut Builder) -> Result<(), Error> {
    let n = b.n;
    for p in 0..n {
        own_block(b, p);
    }
    let ranks: Vec<usize> = (0..n).collect();
    recursive_doubling(b, &ranks, &|i| vec![i as u32]);
    Ok(())
}

/// Ring among `ranks`: step s, member i forwards unit (i - s) to i + 1.
fn ring(b: &mut Builder, ranks: &[usize], unit_of: &dyn Fn(usize) -> Vec<u32>) {
    let m = ranks.len();
    for s in 0..m.saturating_sub(1) {
        let c = b.counter();
        for i in 0..m {
            let unit = (i + m - s) % m;
            put_positions(
                b,
                ranks[i],
                ranks[(i + 1) % m],
                unit_of(unit),
                Lane::Stripe,
                c,
            );
        }
        for &r in ranks {
            b.wait(r, c);
        }
    }
}

fn allgather_ring(b: &mut Builder) -> Result<(), Error> {
    let n = b.n;
    for p in 0..n {
        own_block(b, p);
    }
    let ranks: Vec<usize> = (0..n).collect();
    ring(b, &ranks, &|i| vec![i as u32]);
    Ok(())
}

/// k-port Bruck rounds among `ranks` on scratch: member i starts with its
/// unit (`unit` blocks) at scratch[0..unit] and ends with member (i + j)'s
/// unit at scratch[j*unit..]. Round with stride s: from each of (i + d*s)
/// for d = 1..k, the first min(s, M - d*s) units, on rail d-1.
/// `overlap(b, i)` adds member i's steps that overlap its first round
/// (after posting its puts, before waiting); with one member, it runs alone.
fn bruck_rounds(
    b: &mut Builder,
    ranks: &[usize],
    unit: u32,
    overlap: &mut dyn FnMut(&mut Builder, usize),
) {
    let m = ranks.len();
    let radix = b.k + 1;
    if m == 1 {
        overlap(b, 0);
    }
    let mut have = 1;
    while have < m {
        let c = b.counter();
        for i in 0..m {
            for d in 1..radix {
                if d * have >= m {
                    break;
                }
                let count = have.min(m - d * have) as u32 * unit;
                let to = ranks[(i + m - (d * have) % m) % m];
                b.put(
                    ranks[i],
                    to,
                    Region::new(Buf::Scratch, 0, count),
                    Region::new(Buf::Scratch, (d * have) as u32 * unit, count),
                    Lane::Rail((d - 1) as u8),
                    c,
                );
            }
            if have == 1 {
                overlap(b, i);
            }
            b.wait(ranks[i], c);
        }
        have = (have * radix).min(m);
    }
}

fn allgather_bruck(b: &mut Builder) -> Result<(), Error> {
    let n = b.n;
    for p in 0..n {
        b.copy(p, Region::one(Buf::Send, 0), Region::one(Buf::Scratch, 0));
    }
    let ranks: Vec<usize> = (0..n).collect();
    bruck_rounds(b, &ranks, 1, &mut |_, _| {});
    for p in 0..n {
        // The final local shift: scratch[j] holds rank (p + j)'s block.
        let pairs = (0..n).map(|j| (j as u32, ((p + j) % n) as u32)).collect();
        for (s, d, c) in paired_runs(pairs) {
            b.copy(
                p,
                Region::new(Buf::Scratch, s, c),
                Region::new(Buf::Recv, d, c),
            );
        }
    }
    Ok(())
}

/// Phase 3 of the SMP algorithms for a node: local ranks (not the master)
/// pull `positions_of(master_region)` pairs `(master block, recv block)`
/// from the master's `buf` once `flag` is raised.
fn node_pull(b: &mut Builder, master: usize, q: usize, buf: Buf, pairs: Vec<(u32, u32)>) {
    for (s, d, c) in paired_runs(pairs) {
        b.peer(
            q,
            master,
            PeerDir::Pull,
            Region::new(Buf::Recv, d, c),
            Region::new(buf, s, c),
        );
    }
}

/// Tell every non-master rank of the node that `flag` is up.
fn node_announce(b: &mut Builder, master: usize, node: usize, flag: Flag) {
    for q in b.node_ranks(node) {
        if q != master {
            b.signal(master, q, flag);
        }
    }
}

/// The final node synchronisation: every local rank tells the master it
/// has finished reading the master's buffers.
fn node_done(b: &mut Builder, master: usize, node: usize, flag: Flag) {
    for q in b.node_ranks(node) {
        if q != master {
            b.signal(q, master, flag);
        }
    }
    if b.topo.ranks_per_node() > 1 {
        b.wait_flag(master, flag);
    }
}

/// SMP-aware Direct all-gather [QA08 §5.2.2, Fig. 8]: shm gather into the
/// master's receive buffer (it is the node's shared buffer), Direct among
/// masters straight into the other masters' receive buffers, and the shm
/// broadcast, whose copies of the node's own blocks overlap phase 2.
fn smp_allgather_direct(b: &mut Builder) -> Result<(), Error> {
    let masters = masters(b, 0);
    let nodes = b.topo.nodes();
    node_gather(b, &masters, &|q| Region::one(Buf::Recv, q as u32));
    let c = b.counter();
    let local_ready = b.flag();
    let all_ready = b.flag();
    let done = b.flag();
    for node in 0..nodes {
        let m = masters[node];
        let mine = node_positions(b, node);
        for o in 1..nodes {
            let lane = b.rail(o - 1);
            put_positions(b, m, masters[(node + o) % nodes], mine.clone(), lane, c);
        }
        node_announce(b, m, node, local_ready);
        if nodes > 1 {
            b.wait(m, c);
        }
        node_announce(b, m, node, all_ready);
        for q in b.node_ranks(node) {
            if q == m {
                continue;
            }
            own_block(b, q);
            b.wait_flag(q, local_ready);
            let near: Vec<(u32, u32)> = mine
                .iter()
                .filter(|&&x| x != q as u32)
                .map(|&x| (x, x))
                .collect();
            node_pull(b, m, q, Buf::Recv, near);
            b.wait_flag(q, all_ready);
            let far: Vec<(u32, u32)> = (0..b.n as u32)
                .filter(|x| !mine.contains(x))
                .map(|x| (x, x))
                .collect();
            node_pull(b, m, q, Buf::Recv, far);
        }
        node_done(b, m, node, done);
    }
    Ok(())
}

/// SMP-aware Bruck all-gather [QA08 §5.2.2]: shm gather into the master's
/// scratch (node order), Bruck among masters with a node's blocks as the
/// unit, then every rank copies each block straight to its place (no
/// shift).
fn smp_allgather_bruck(b: &mut Builder) -> Result<(), Error> {
    let masters = masters(b, 0);
    let nodes = b.topo.nodes();
    let l = b.topo.ranks_per_node() as u32;
    let topo = b.topo;
    let local_of = move |q: usize| topo.locate(q).map(|x| x.1).unwrap_or(0) as u32;
    node_gather(b, &masters, &|q| Region::one(Buf::Scratch, local_of(q)));
    let local_ready = b.flag();
    let all_ready = b.flag();
    let done = b.flag();
    // Pairs (scratch block, recv block) for node `node`'s view, units from
    // `lo` to `hi`.
    let pairs = |b: &Builder, node: usize, lo: usize, hi: usize| -> Vec<(u32, u32)> {
        let mut v = Vec::new();
        for j in lo..hi {
            for (i, pos) in node_positions(b, (node + j) % nodes)
                .into_iter()
                .enumerate()
            {
                v.push((j as u32 * l + i as u32, pos));
            }
        }
        v
    };
    // Phase 2 with the overlap: masters post round one, then place their
    // own node's blocks while it flies.
    for node in 0..nodes {
        let m = masters[node];
        node_announce(b, m, node, local_ready);
    }
    bruck_rounds(b, &masters, l, &mut |b, node| {
        let own = pairs(b, node, 0, 1);
        for (s, d, cnt) in paired_runs(own) {
            b.copy(
                masters[node],
                Region::new(Buf::Scratch, s, cnt),
                Region::new(Buf::Recv, d, cnt),
            );
        }
    });
    for node in 0..nodes {
        let m = masters[node];
        let rest = pairs(b, node, 1, nodes);
        node_announce(b, m, node, all_ready);
        for (s, d, cnt) in paired_runs(rest) {
            b.copy(
                m,
                Region::new(Buf::Scratch, s, cnt),
                Region::new(Buf::Recv, d, cnt),
            );
        }
        for q in b.node_ranks(node) {
            if q == m {
                continue;
            }
            b.wait_flag(q, local_ready);
            let near = pairs(b, node, 0, 1);
            node_pull(b, m, q, Buf::Scratch, near);
            b.wait_flag(q, all_ready);
            let far = pairs(b, node, 1, nodes);
            node_pull(b, m, q, Buf::Scratch, far);
        }
        node_done(b, m, node, done);
    }
    Ok(())
}

/// SMP-aware Gather and Broadcast [QA08 §5.2.1]: the SMP gather to rank 0,
/// a hardware barrier (`elan_hgsync`), the hardware broadcast to every
/// node's master, and the node shm broadcast.
fn smp_gather_bcast(b: &mut Builder, tree: bool) -> Result<(), Error> {
    smp_gather(b, 0, tree)?;
    let nodes = b.topo.nodes();
    let n = b.n;
    for r in 0..n {
        b.push(r, Op::Barrier);
    }
    bcast_and_spread(b, nodes)
}

/// Rank 0's receive buffer to every node's master by hardware broadcast,
/// then to every rank of the node through shared memory.
fn bcast_and_spread(b: &mut Builder, nodes: usize) -> Result<(), Error> {
    let masters = masters(b, 0);
    let n = b.n as u32;
    let all = Region::new(Buf::Recv, 0, n);
    if nodes > 1 {
        let c = b.counter();
        b.push(
            0,
            Op::HwBcast {
                src: all,
                dst: all,
                signal: Some(c),
            },
        );
        for &m in &masters[1..] {
            b.wait(m, c);
        }
    }
    let ready = b.flag();
    let done = b.flag();
    for node in 0..nodes {
        let m = masters[node];
        node_announce(b, m, node, ready);
        for q in b.node_ranks(node) {
            if q != m {
                b.wait_flag(q, ready);
                node_pull(b, m, q, Buf::Recv, (0..n).map(|x| (x, x)).collect());
            }
        }
        node_done(b, m, node, done);
    }
    Ok(())
}

/// Multi-leader all-gather [KSSKP09 §4]: one leader per socket (at most
/// `sockets` per node), each aggregating its socket's ranks through shm or
/// point-to-point puts into its receive buffer; recursive doubling or ring
/// among all leaders; then every rank copies the result from its leader.
fn multi_leader(b: &mut Builder, agg: Aggregation, ex: LeaderExchange) -> Result<(), Error> {
    let nodes = b.topo.nodes();
    let rpn = b.topo.ranks_per_node();
    let sockets = b.p.shape.sockets.min(rpn);
    // groups[g] = ranks of leader g's socket, leader first.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for node in 0..nodes {
        for s in 0..sockets {
            let members: Vec<usize> = (0..rpn)
                .filter(|&l| b.p.shape.socket_of(l).min(sockets - 1) == s)
                .map(|l| b.rank_of(node, l))
                .collect();
            if !members.is_empty() {
                groups.push(members);
            }
        }
    }
    let gather_flag = b.flag();
    let gather_counter = b.counter();
    for g in &groups {
        let leader = g[0];
        own_block(b, leader);
        for &q in &g[1..] {
            match agg {
                Aggregation::Shm => {
                    b.peer(
                        q,
                        leader,
                        PeerDir::Push,
                        Region::one(Buf::Send, 0),
                        Region::one(Buf::Recv, q as u32),
                    );
                    b.signal(q, leader, gather_flag);
                }
                Aggregation::P2p => {
                    b.put(
                        q,
                        leader,
                        Region::one(Buf::Send, 0),
                        Region::one(Buf::Recv, q as u32),
                        Lane::Stripe,
                        gather_counter,
                    );
                }
            }
        }
        if g.len() > 1 {
            match agg {
                Aggregation::Shm => b.wait_flag(leader, gather_flag),
                Aggregation::P2p => b.wait(leader, gather_counter),
            }
        }
    }
    let leaders: Vec<usize> = groups.iter().map(|g| g[0]).collect();
    let unit_of = |i: usize| -> Vec<u32> { groups[i].iter().map(|&r| r as u32).collect() };
    match ex {
        LeaderExchange::RecursiveDoubling => recursive_doubling(b, &leaders, &unit_of),
        LeaderExchange::Ring => ring(b, &leaders, &unit_of),
    }
    let ready = b.flag();
    let done = b.flag();
    for g in &groups {
        let leader = g[0];
        for &q in &g[1..] {
            b.signal(leader, q, ready);
        }
        for &q in &g[1..] {
            own_block(b, q);
            b.wait_flag(q, ready);
            let pairs = (0..b.n as u32)
                .filter(|&x| x != q as u32)
                .map(|x| (x, x))
                .collect();
            node_pull(b, leader, q, Buf::Recv, pairs);
            b.signal(q, leader, done);
        }
        if g.len() > 1 {
            b.wait_flag(leader, done);
        }
    }
    Ok(())
}

/// The native all-gather of [QA08 §3.1]: `elan_gather()` to rank 0 and the
/// hardware broadcast up to 32 KB, a ring above.
fn native_allgather(b: &mut Builder) -> Result<(), Error> {
    if b.p.block_bytes > NATIVE_HWBCAST_MAX {
        return allgather_ring(b);
    }
    native_gather(b, 0)?;
    let nodes = b.topo.nodes();
    bcast_and_spread(b, nodes)
}

// ------------------------------------------------------------ all-to-all --

fn alltoall_direct(b: &mut Builder) -> Result<(), Error> {
    let n = b.n;
    let c = b.counter();
    for p in 0..n {
        for o in 1..n {
            let to = (p + o) % n;
            let lane = b.rail(o - 1);
            b.put(
                p,
                to,
                Region::one(Buf::Send, to as u32),
                Region::one(Buf::Recv, p as u32),
                lane,
                c,
            );
        }
        b.copy(
            p,
            Region::one(Buf::Send, p as u32),
            Region::one(Buf::Recv, p as u32),
        );
        if n > 1 {
            b.wait(p, c);
        }
    }
    Ok(())
}

/// Pairwise exchange: step s sends to (p + s) (p XOR s for powers of two),
/// one message in flight at a time. With `permission`, every rank first
/// grants all its senders (a zero-byte put) and sends only once granted.
fn alltoall_pairwise(b: &mut Builder, lane: Lane, permission: bool) -> Result<(), Error> {
    let n = b.n;
    let c = b.counter();
    let grant = if permission { Some(b.counter()) } else { None };
    let empty = Region::new(Buf::Scratch, 0, 0);
    for p in 0..n {
        b.copy(
            p,
            Region::one(Buf::Send, p as u32),
            Region::one(Buf::Recv, p as u32),
        );
        if let Some(g) = grant {
            for s in 1..n {
                b.put(p, (p + n - s) % n, empty, empty, Lane::Rail(0), g);
            }
            if n > 1 {
                b.wait(p, g);
            }
        }
        let mut last = None;
        for s in 1..n {
            let to = if n.is_power_of_two() {
                p ^ s
            } else {
                (p + s) % n
            };
            if let Some(prev) = last {
                b.after(p, prev);
            }
            last = Some(b.put(
                p,
                to,
                Region::one(Buf::Send, to as u32),
                Region::one(Buf::Recv, p as u32),
                lane,
                c,
            ));
        }
        if n > 1 {
            b.wait(p, c);
        }
    }
    Ok(())
}

/// k-port Standard Exchange all-to-all [QA08 §5.1.3]: log_{k+1} N steps;
/// at step i a rank sends to each group mate the N/(k+1) blocks whose
/// destination has the mate's digit i, packed into one message. Needs N a
/// power of k + 1 (the paper gives no correction scheme for all-to-all).
fn alltoall_exchange(b: &mut Builder) -> Result<(), Error> {
    let (n, k) = (b.n, b.k);
    let radix = k + 1;
    let steps = log_ceil(radix, n);
    if radix.pow(steps) != n {
        return Err(Error::Unsupported {
            algorithm: "exchange all-to-all",
            reason: format!(
                "it needs the number of ranks to be a power of k + 1 = {radix}, got {n} ([QA08 §5.1.3] gives no correction steps)"
            ),
        });
    }
    let n32 = n as u32;
    let part = n32 / radix as u32; // blocks per message
    // Scratch: W_A [0, N), W_B [N, 2N), send stages [2N, 2N + R*part),
    // receive stages per step [3N + i*N, ...) with one part per sender digit.
    let ss = 2 * n32;
    let rs = 3 * n32;
    let mut sent: Vec<Vec<Option<u32>>> = vec![vec![None; radix]; n];
    for i in 0..steps as usize {
        let s = radix.pow(i as u32); // R^i
        let c = b.counter();
        let cur = |w: u32| -> Region {
            if i == 0 {
                Region::new(Buf::Send, w, 0)
            } else {
                Region::new(Buf::Scratch, ((i - 1) % 2) as u32 * n32 + w, 0)
            }
        };
        let next_base = (i % 2) as u32 * n32;
        let last = i + 1 == steps as usize;
        for p in 0..n {
            let digit = (p / s) % radix;
            // Pack and send to each mate.
            for d in 0..radix {
                if d == digit {
                    continue;
                }
                let mate = p - digit * s + d * s;
                let stage = ss + d as u32 * part;
                if let Some(prev) = sent[p][d] {
                    b.after(p, prev);
                }
                for th in (0..n / s).filter(|t| t % radix == d) {
                    let from = cur((th * s) as u32);
                    b.copy(
                        p,
                        Region::new(from.buf, from.block, s as u32),
                        Region::new(Buf::Scratch, stage + ((th / radix) * s) as u32, s as u32),
                    );
                }
                let dst = rs + i as u32 * n32 + digit as u32 * part;
                let put = b.put(
                    p,
                    mate,
                    Region::new(Buf::Scratch, stage, part),
                    Region::new(Buf::Scratch, dst, part),
                    latin_rail(digit, d, radix),
                    c,
                );
                sent[p][d] = Some(put);
            }
            // Keep own blocks: digit i of the destination is ours.
            let place = |th: usize, x: usize| -> u32 { ((th / radix) * s * radix + x * s) as u32 };
            for th in (0..n / s).filter(|t| t % radix == digit) {
                let from = cur((th * s) as u32);
                let to = if last {
                    Region::new(Buf::Recv, place(th, digit), s as u32)
                } else {
                    Region::new(Buf::Scratch, next_base + place(th, digit), s as u32)
                };
                b.copy(p, Region::new(from.buf, from.block, s as u32), to);
            }
            b.wait(p, c);
            // Unpack what the mates sent.
            for x in 0..radix {
                if x == digit {
                    continue;
                }
                let stage = rs + i as u32 * n32 + x as u32 * part;
                for th_hi in 0..n / (s * radix) {
                    let src = Region::new(Buf::Scratch, stage + (th_hi * s) as u32, s as u32);
                    let pos = (th_hi * s * radix + x * s) as u32;
                    let dst = if last {
                        Region::new(Buf::Recv, pos, s as u32)
                    } else {
                        Region::new(Buf::Scratch, next_base + pos, s as u32)
                    };
                    b.copy(p, src, dst);
                }
            }
        }
    }
    if steps == 0 {
        b.copy(0, Region::one(Buf::Send, 0), Region::one(Buf::Recv, 0));
    }
    Ok(())
}

/// k-port Bruck all-to-all [QA08 §5.1.3, Fig. 6], radix k + 1, any N:
/// rotate, then for each base-(k+1) digit i and value d send the blocks
/// whose digit i is d to (p + d (k+1)^i), packed; finally the inverse
/// rotation.
fn alltoall_bruck(b: &mut Builder) -> Result<(), Error> {
    let (n, k) = (b.n, b.k);
    let radix = k + 1;
    let n32 = n as u32;
    let steps = log_ceil(radix, n) as usize;
    // Scratch: W [0, N), send stages k x N, receive stages per step k x N.
    let ss = n32;
    let rs = n32 + k as u32 * n32;
    for p in 0..n {
        let pairs = (0..n).map(|j| (((p + j) % n) as u32, j as u32)).collect();
        for (s, d, c) in paired_runs(pairs) {
            b.copy(
                p,
                Region::new(Buf::Send, s, c),
                Region::new(Buf::Scratch, d, c),
            );
        }
    }
    let mut sent: Vec<Vec<Option<u32>>> = vec![vec![None; radix]; n];
    for i in 0..steps {
        let s = radix.pow(i as u32);
        let c = b.counter();
        let sets: Vec<Vec<u32>> = (0..radix)
            .map(|d| {
                (0..n)
                    .filter(|j| (j / s) % radix == d)
                    .map(|j| j as u32)
                    .collect()
            })
            .collect();
        for p in 0..n {
            for d in 1..radix {
                let set = &sets[d];
                if set.is_empty() {
                    continue;
                }
                let stage = ss + (d - 1) as u32 * n32;
                if let Some(prev) = sent[p][d] {
                    b.after(p, prev);
                }
                let pairs = set
                    .iter()
                    .enumerate()
                    .map(|(x, &j)| (j, x as u32))
                    .collect();
                for (sj, dx, cnt) in paired_runs(pairs) {
                    b.copy(
                        p,
                        Region::new(Buf::Scratch, sj, cnt),
                        Region::new(Buf::Scratch, stage + dx, cnt),
                    );
                }
                let to = (p + d * s) % n;
                let dst = rs + ((i * k + d - 1) as u32) * n32;
                let put = b.put(
                    p,
                    to,
                    Region::new(Buf::Scratch, stage, set.len() as u32),
                    Region::new(Buf::Scratch, dst, set.len() as u32),
                    Lane::Rail((d - 1) as u8),
                    c,
                );
                sent[p][d] = Some(put);
            }
            b.wait(p, c);
            for d in 1..radix {
                let set = &sets[d];
                let stage = rs + ((i * k + d - 1) as u32) * n32;
                let pairs = set
                    .iter()
                    .enumerate()
                    .map(|(x, &j)| (x as u32, j))
                    .collect();
                for (sx, dj, cnt) in paired_runs(pairs) {
                    b.copy(
                        p,
                        Region::new(Buf::Scratch, stage + sx, cnt),
                        Region::new(Buf::Scratch, dj, cnt),
                    );
                }
            }
        }
    }
    for p in 0..n {
        // Inverse rotation: W[j] came from rank p - j.
        let pairs = (0..n)
            .map(|j| (j as u32, ((p + n - j) % n) as u32))
            .collect();
        for (s, d, c) in paired_runs(pairs) {
            b.copy(
                p,
                Region::new(Buf::Scratch, s, c),
                Region::new(Buf::Recv, d, c),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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
