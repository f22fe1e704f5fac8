//! All-gather generators: Direct, Standard Exchange, Bruck, ring, recursive
//! doubling, the SMP-aware variants, multi-leader and the native baseline.

#![allow(clippy::needless_range_loop)]

use super::blocks::*;
use super::gather::{native_gather, smp_gather};
use super::*;
use crate::sched::algo::{Aggregation, LeaderExchange};

pub(crate) fn allgather_direct(b: &mut Builder) -> Result<(), Error> {
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

/// k-port Standard Exchange [QA08 §5.1.2, Fig. 4]. For N a power of k+1:
/// log_{k+1} N exchange steps among groups of k+1. Otherwise a correction
/// step before and after: the N - P extra ranks hand their block to a core
/// rank (at most k per core, one per rail), the P core ranks run the
/// exchange carrying their extras' blocks, and each core returns the full
/// result to its extras.
pub(crate) fn allgather_exchange(b: &mut Builder) -> Result<(), Error> {
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

pub(crate) fn allgather_rd(b: &mut Builder) -> Result<(), Error> {
    let n = b.n;
    for p in 0..n {
        own_block(b, p);
    }
    let ranks: Vec<usize> = (0..n).collect();
    recursive_doubling(b, &ranks, &|i| vec![i as u32]);
    Ok(())
}

pub(crate) fn allgather_ring(b: &mut Builder) -> Result<(), Error> {
    let n = b.n;
    for p in 0..n {
        own_block(b, p);
    }
    let ranks: Vec<usize> = (0..n).collect();
    ring(b, &ranks, &|i| vec![i as u32]);
    Ok(())
}

pub(crate) fn allgather_bruck(b: &mut Builder) -> Result<(), Error> {
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

/// SMP-aware Direct all-gather [QA08 §5.2.2, Fig. 8]: shm gather into the
/// master's receive buffer (it is the node's shared buffer), Direct among
/// masters straight into the other masters' receive buffers, and the shm
/// broadcast, whose copies of the node's own blocks overlap phase 2.
pub(crate) fn smp_allgather_direct(b: &mut Builder) -> Result<(), Error> {
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
pub(crate) fn smp_allgather_bruck(b: &mut Builder) -> Result<(), Error> {
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
pub(super) fn smp_gather_bcast(b: &mut Builder, tree: bool) -> Result<(), Error> {
    smp_gather(b, 0, tree)?;
    super::barrier::hardware_barrier(b);
    bcast_and_spread(b, b.topo.nodes())
}

/// Multi-leader all-gather [KSSKP09 §4]: one leader per socket (the
/// socket groups of [`Shape::socket_groups`](crate::topology::Shape::socket_groups), the public socket
/// split's), each aggregating its socket's ranks through shm or
/// point-to-point puts into its receive buffer; recursive doubling or ring
/// among all leaders; then every rank copies the result from its leader.
pub(super) fn multi_leader(
    b: &mut Builder,
    agg: Aggregation,
    ex: LeaderExchange,
) -> Result<(), Error> {
    // The groups `Comm::split_type(Socket)` forms: one definition of a
    // socket for the algorithm and the public split.
    let groups = b.p.shape.socket_groups();
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
pub(crate) fn native_allgather(b: &mut Builder) -> Result<(), Error> {
    if b.p.block_bytes > NATIVE_HWBCAST_MAX {
        return allgather_ring(b);
    }
    native_gather(b, 0)?;
    let nodes = b.topo.nodes();
    bcast_and_spread(b, nodes)
}

/// SMP-aware gather (tree) and hardware broadcast.
pub(crate) fn smp_gather_tree(b: &mut Builder) -> Result<(), Error> {
    smp_gather_bcast(b, true)
}

/// SMP-aware gather (Direct) and hardware broadcast.
pub(crate) fn smp_gather_direct(b: &mut Builder) -> Result<(), Error> {
    smp_gather_bcast(b, false)
}

/// Multi-leader, shared-memory aggregation, recursive doubling.
pub(crate) fn ml_shm_rd(b: &mut Builder) -> Result<(), Error> {
    multi_leader(b, Aggregation::Shm, LeaderExchange::RecursiveDoubling)
}

/// Multi-leader, shared-memory aggregation, ring.
pub(crate) fn ml_shm_ring(b: &mut Builder) -> Result<(), Error> {
    multi_leader(b, Aggregation::Shm, LeaderExchange::Ring)
}

/// Multi-leader, point-to-point aggregation, recursive doubling.
pub(crate) fn ml_p2p_rd(b: &mut Builder) -> Result<(), Error> {
    multi_leader(b, Aggregation::P2p, LeaderExchange::RecursiveDoubling)
}

/// Multi-leader, point-to-point aggregation, ring.
pub(crate) fn ml_p2p_ring(b: &mut Builder) -> Result<(), Error> {
    multi_leader(b, Aggregation::P2p, LeaderExchange::Ring)
}
