//! Gather generators: Direct, the k-port binomial tree, the SMP-aware
//! gathers and the native baseline.

#![allow(clippy::needless_range_loop)]

use super::blocks::*;
use super::*;

pub(crate) fn gather_direct(b: &mut Builder) -> Result<(), Error> {
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

pub(super) fn gather_tree_flat(b: &mut Builder, ports: usize, chained: bool) -> Result<(), Error> {
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

/// SMP-aware gather ([QA08 §5.2.1] phases 1-2): shm gather into each master's
/// scratch (local order), then a tree or Direct among masters into the
/// root's receive buffer.
pub(super) fn smp_gather(b: &mut Builder, root: usize, tree: bool) -> Result<(), Error> {
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
pub(super) fn native_gather(b: &mut Builder, root: usize) -> Result<(), Error> {
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

/// The k-port (k+1)-ary binomial tree of all ranks.
pub(crate) fn binomial(b: &mut Builder) -> Result<(), Error> {
    let k = b.k;
    gather_tree_flat(b, k, false)
}

/// Shm gather per node, then the k-port tree among masters.
pub(crate) fn smp_tree(b: &mut Builder) -> Result<(), Error> {
    let root = b.p.root;
    smp_gather(b, root, true)
}

/// Shm gather per node, then Direct among masters.
pub(crate) fn smp_direct(b: &mut Builder) -> Result<(), Error> {
    let root = b.p.root;
    smp_gather(b, root, false)
}

/// The native baseline.
pub(crate) fn native(b: &mut Builder) -> Result<(), Error> {
    let root = b.p.root;
    native_gather(b, root)
}
