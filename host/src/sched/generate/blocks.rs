//! Building blocks shared by the generators: trees, node phases (gather
//! to the master, pull from it, announce and finish), the recursive-doubling
//! and ring exchanges, Bruck rounds, the fold of non-powers, and the hardware
//! broadcast spread.

#![allow(clippy::needless_range_loop)]

use super::*;

/// One member of a tree gather.
pub(super) struct TreeMember {
    pub(super) rank: usize,
    /// Where the member's own unit is at the start (a leaf sends from
    /// there; an inner member copies it to scratch[0..unit] first, unless it
    /// is already there).
    pub(super) own: Region,
}

/// The (k+1)-ary spanning binomial tree gather [QA08 eq. 1] of `members`
/// (index 0 is the root), each contributing `unit` blocks. Every member
/// collects its subtree in scratch in member order; the root ends with all
/// units in scratch[0..M*unit] and the caller places them. With `chained`,
/// inner members forward on the NIC (single rail, no host in the path).
pub(super) fn tree_gather(
    b: &mut Builder,
    members: &[TreeMember],
    unit: u32,
    ports: usize,
    chained: bool,
) {
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
                        lane: Lane::Rail(0),
                        to: to as Rank,
                        src,
                        dst,
                        signal: Some(c),
                        feeds: Vec::new(),
                        done: Vec::new(),
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
pub(super) fn place_units(
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

/// The node masters for a collective rooted at `root`: the root on its
/// node, local rank 0 elsewhere.
pub(super) fn masters(b: &Builder, root: usize) -> Vec<usize> {
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
pub(super) fn node_gather(
    b: &mut Builder,
    masters: &[usize],
    target: &dyn Fn(usize) -> Region,
) -> Flag {
    node_gather_moves(b, masters, &|q| {
        vec![(Region::one(Buf::Send, 0), target(q))]
    })
}

/// [`node_gather`] of several regions per rank: `moves(rank)` lists
/// (the rank's region, the master's region) pairs; the master copies its
/// own, the others push theirs and raise the flag the master waits on.
pub(super) fn node_gather_moves(
    b: &mut Builder,
    masters: &[usize],
    moves: &dyn Fn(usize) -> Vec<(Region, Region)>,
) -> Flag {
    let f = b.flag();
    for (node, &m) in masters.iter().enumerate() {
        for q in b.node_ranks(node) {
            if q == m {
                continue;
            }
            for (src, dst) in moves(q) {
                b.peer(q, m, PeerDir::Push, src, dst);
            }
            b.signal(q, m, f);
        }
        for (src, dst) in moves(m) {
            b.copy(m, src, dst);
        }
        if b.topo.ranks_per_node() > 1 {
            b.wait_flag(m, f);
        }
    }
    f
}

/// Position in node order of each local rank of `node`'s blocks.
pub(super) fn node_positions(b: &Builder, node: usize) -> Vec<u32> {
    b.node_ranks(node).into_iter().map(|r| r as u32).collect()
}

pub(super) fn own_block(b: &mut Builder, r: usize) {
    b.copy(
        r,
        Region::one(Buf::Send, 0),
        Region::one(Buf::Recv, r as u32),
    );
}

/// Put the recv blocks at `positions` of `from` into the same positions of
/// `to`'s recv (one put per run).
pub(super) fn put_positions(
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
pub(super) fn fold(n: usize, radix: usize) -> (usize, Vec<Vec<usize>>) {
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

/// Recursive doubling among the members of `ranks` (index = position in
/// the doubling), where member `i` contributes the recv positions
/// `unit_of(i)` (already in its recv). Non-powers of two fold the extras
/// in and out (one step each). Single message per step: striped.
pub(super) fn recursive_doubling(
    b: &mut Builder,
    ranks: &[usize],
    unit_of: &dyn Fn(usize) -> Vec<u32>,
) {
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

/// Ring among `ranks`: step s, member i forwards unit (i - s) to i + 1.
pub(super) fn ring(b: &mut Builder, ranks: &[usize], unit_of: &dyn Fn(usize) -> Vec<u32>) {
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

/// k-port Bruck rounds among `ranks` on scratch: member i starts with its
/// unit (`unit` blocks) at scratch[0..unit] and ends with member (i + j)'s
/// unit at scratch[j*unit..]. Round with stride s: from each of (i + d*s)
/// for d = 1..k, the first min(s, M - d*s) units, on rail d-1.
/// `overlap(b, i)` adds member i's steps that overlap its first round
/// (after posting its puts, before waiting); with one member, it runs alone.
pub(super) fn bruck_rounds(
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

/// Phase 3 of the SMP algorithms for a node: local ranks (not the master)
/// pull `positions_of(master_region)` pairs `(master block, recv block)`
/// from the master's `buf` once `flag` is raised.
pub(super) fn node_pull(
    b: &mut Builder,
    master: usize,
    q: usize,
    buf: Buf,
    pairs: Vec<(u32, u32)>,
) {
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
pub(super) fn node_announce(b: &mut Builder, master: usize, node: usize, flag: Flag) {
    for q in b.node_ranks(node) {
        if q != master {
            b.signal(master, q, flag);
        }
    }
}

/// The final node synchronisation: every local rank tells the master it
/// has finished reading the master's buffers.
pub(super) fn node_done(b: &mut Builder, master: usize, node: usize, flag: Flag) {
    for q in b.node_ranks(node) {
        if q != master {
            b.signal(q, master, flag);
        }
    }
    if b.topo.ranks_per_node() > 1 {
        b.wait_flag(master, flag);
    }
}

/// Rank 0's receive buffer to every node's master by hardware broadcast,
/// then to every rank of the node through shared memory.
pub(super) fn bcast_and_spread(b: &mut Builder, nodes: usize) -> Result<(), Error> {
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
