//! Broadcasts: the root's buffer (its send buffer, block 0) to every
//! other rank's receive buffer (block 0). At run time the two are one
//! symmetric buffer, so a rank that received forwards from its receive
//! buffer.
//!
//! - `binomial`: a binomial tree over puts among all ranks, relative to the
//!   root. A rank first tells its parent it is ready (a zero-length put
//!   on rail 0: the parent never overwrites a buffer the child's caller
//!   may still be reading), waits for the data, then serves its children,
//!   largest subtree first, once they are all ready: ceil(log2 N) rounds.
//! - `shm`: through the node segment (one node only).
//! - `smp`: the binomial tree among node leaders (the root, and local rank
//!   0 of every other node), then the node segment.
//! - `hardware`: the ranks with the root's local index (its context on
//!   every node) tell the root they are ready; the root's NIC sends one
//!   BCAST_DMA that the rail-0 switch replicates to every node
//!   [ELAN-SEM §13 rule 15]; then the node segment.

use super::barrier::one_node;
use super::*;

/// Where rank `r`'s copy of the data is: the root's send buffer, the
/// others' receive buffer.
fn data(b: &Builder, r: usize) -> Region {
    if r == b.p.root {
        Region::one(Buf::Send, 0)
    } else {
        Region::one(Buf::Recv, 0)
    }
}

/// A zero-length put on rail 0 that sets `signal` at `to` (a flag write,
/// in RDMA terms); the next step of `from` waits for its completion.
fn notify(b: &mut Builder, from: usize, to: usize, signal: Counter) {
    let nothing = Region::new(Buf::Recv, 0, 0);
    let step = b.put(from, to, nothing, nothing, Lane::Rail(0), signal);
    b.after(from, step);
}

/// Binomial tree among `members` from `members[root_id]`, with the
/// readiness handshake. Returns, per member, the steps of its puts to its
/// children (the node phase after the tree waits for them).
fn binomial_tree(b: &mut Builder, members: &[usize], root_id: usize) -> Vec<Vec<u32>> {
    let n = members.len();
    let mut puts = vec![Vec::new(); n];
    if n <= 1 {
        return puts;
    }
    let (ready, arrived) = (b.counter(), b.counter());
    let member = |v: usize| members[(v + root_id) % n];
    for me in 0..n {
        // Ranks relative to the root: the root is 0.
        let vr = (me + n - root_id) % n;
        let r = members[me];
        if vr != 0 {
            let parent = vr & (vr - 1);
            notify(b, r, member(parent), ready);
            b.wait(r, arrived);
        }
        // Children: vr + 2^k for every 2^k below vr's lowest set bit (all
        // k for the root), largest subtree first.
        let limit = if vr == 0 {
            n.next_power_of_two()
        } else {
            vr & vr.wrapping_neg()
        };
        let mut children = Vec::new();
        let mut step = limit >> 1;
        while step > 0 {
            if vr + step < n {
                children.push(member(vr + step));
            }
            step >>= 1;
        }
        if children.is_empty() {
            continue;
        }
        b.wait(r, ready);
        let src = data(b, r);
        for c in children {
            let put = b.put(r, c, src, Region::one(Buf::Recv, 0), Lane::Stripe, arrived);
            puts[me].push(put);
        }
    }
    puts
}

/// Every node's segment broadcast from `source(node)`, after `before[r]`
/// completed on rank `r` (nothing to do with one rank per node).
fn node_phase(b: &mut Builder, source: &dyn Fn(usize) -> usize, before: &[Vec<u32>]) {
    if b.topo.ranks_per_node() == 1 {
        return;
    }
    for r in 0..b.n {
        let (node, _) = b.locate(r);
        for &step in before.get(r).map(Vec::as_slice).unwrap_or_default() {
            b.after(r, step);
        }
        let root = source(node);
        let region = data(b, r);
        b.push(
            r,
            Op::NodeBcast {
                root: root as Rank,
                region,
            },
        );
    }
}

pub(crate) fn binomial(b: &mut Builder) -> Result<(), Error> {
    let members: Vec<usize> = (0..b.n).collect();
    binomial_tree(b, &members, b.p.root);
    Ok(())
}

pub(crate) fn shm(b: &mut Builder) -> Result<(), Error> {
    one_node(b, "it reaches one node")?;
    let root = b.p.root;
    node_phase(b, &|_| root, &[]);
    Ok(())
}

pub(crate) fn smp(b: &mut Builder) -> Result<(), Error> {
    let leaders = blocks::masters(b, b.p.root);
    let (root_node, _) = b.locate(b.p.root);
    let tree = binomial_tree(b, &leaders, root_node);
    let mut before = vec![Vec::new(); b.n];
    for (node, puts) in tree.into_iter().enumerate() {
        before[leaders[node]] = puts;
    }
    node_phase(b, &|node| leaders[node], &before);
    Ok(())
}

pub(crate) fn hardware(b: &mut Builder) -> Result<(), Error> {
    let root = b.p.root;
    let (_, root_local) = b.locate(root);
    let nodes = b.topo.nodes();
    let leaders: Vec<usize> = (0..nodes).map(|n| b.rank_of(n, root_local)).collect();
    let mut before = vec![Vec::new(); b.n];
    if nodes > 1 {
        let (ready, arrived) = (b.counter(), b.counter());
        for &l in leaders.iter().filter(|&&l| l != root) {
            notify(b, l, root, ready);
            b.wait(l, arrived);
        }
        b.wait(root, ready);
        let all = b.push(
            root,
            Op::HwBcast {
                src: Region::one(Buf::Send, 0),
                dst: Region::one(Buf::Recv, 0),
                signal: Some(arrived),
            },
        );
        before[root].push(all);
    }
    node_phase(b, &|node| leaders[node], &before);
    Ok(())
}
