//! All-to-all generators: Direct, pairwise, Standard Exchange, Bruck (and
//! the native baseline: through the node masters for small blocks,
//! pairwise, with a permission handshake above its cut-off).

#![allow(clippy::needless_range_loop)]

use super::blocks::{masters, node_announce, node_done, node_gather_moves, node_pull};
use super::*;

pub(crate) fn alltoall_direct(b: &mut Builder) -> Result<(), Error> {
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
pub(super) fn alltoall_pairwise(
    b: &mut Builder,
    lane: Lane,
    permission: bool,
) -> Result<(), Error> {
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
        pairwise_sends(b, p, p, n, lane, c, &|to| {
            (
                to,
                Region::one(Buf::Send, to as u32),
                Region::one(Buf::Recv, p as u32),
            )
        });
        if n > 1 {
            b.wait(p, c);
        }
    }
    Ok(())
}

/// The partner of `me` at pairwise step `s` of `n` (1 <= s < n): the XOR
/// pairing on powers of two (every step pairs ranks both ways), the shift
/// otherwise.
fn pairwise_partner(me: usize, s: usize, n: usize) -> usize {
    if n.is_power_of_two() {
        me ^ s
    } else {
        (me + s) % n
    }
}

/// `rank`, member `me` of `n` pairwise partners, sends to each other
/// member in the pairwise order, one message in flight at a time;
/// `message(partner)` says to which rank, from where and to where.
fn pairwise_sends(
    b: &mut Builder,
    rank: usize,
    me: usize,
    n: usize,
    lane: Lane,
    c: Counter,
    message: &dyn Fn(usize) -> (usize, Region, Region),
) {
    let mut last = None;
    for s in 1..n {
        let (to, src, dst) = message(pairwise_partner(me, s, n));
        if let Some(prev) = last {
            b.after(rank, prev);
        }
        last = Some(b.put(rank, to, src, dst, lane, c));
    }
}

/// k-port Standard Exchange all-to-all [QA08 §5.1.3]: log_{k+1} N steps;
/// at step i a rank sends to each group mate the N/(k+1) blocks whose
/// destination has the mate's digit i, packed into one message. Needs N a
/// power of k + 1 (the paper gives no correction scheme for all-to-all).
pub(crate) fn alltoall_exchange(b: &mut Builder) -> Result<(), Error> {
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
pub(crate) fn alltoall_bruck(b: &mut Builder) -> Result<(), Error> {
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

/// Pairwise exchange, striped.
pub(crate) fn pairwise(b: &mut Builder) -> Result<(), Error> {
    alltoall_pairwise(b, Lane::Stripe, false)
}

/// The native baseline [QA08 §3.1]: up to its shared-memory cut-off on
/// nodes with several ranks, through the node masters ([`native_shm`]);
/// then pairwise on one rail up to its pairwise cut-off; then striped with
/// a permission to send.
pub(crate) fn native(b: &mut Builder) -> Result<(), Error> {
    let bytes = b.p.block_bytes;
    if bytes <= NATIVE_SHM_ALLTOALL_MAX && b.topo.ranks_per_node() > 1 {
        native_shm(b);
        Ok(())
    } else if bytes <= NATIVE_PAIRWISE_MAX {
        alltoall_pairwise(b, Lane::Rail(0), false)
    } else {
        alltoall_pairwise(b, Lane::Stripe, true)
    }
}

/// The native all-to-all's shared-memory form: `elan_alltoall` "uses
/// shared memory for messages up to 2 KB" as the gather does [QA08 §3.1],
/// which gathers in the node segment and then runs among node masters. How
/// the blocks travel between masters is not published; assumed here (and
/// in `docs/fidelity.md`): one message per node pair, in the single-port
/// pairwise order of the inter-node form.
///
/// 1. Every rank pushes its send buffer into its master's scratch, sorted
///    by destination node: `out[v][q][j]` is the block from local rank `q`
///    to local rank `j` of node `v`.
/// 2. Each master sends `out[v]` to node `v`'s master, one message after
///    another on rail 0, into `in[u][q][j]` there (`u` the sending node).
/// 3. Each rank pulls its column `[.][.][j]` from its master: from `in`,
///    and from `out[own node]` for the blocks that never left the node.
fn native_shm(b: &mut Builder) {
    let (n, nodes, l) = (b.n, b.topo.nodes(), b.topo.ranks_per_node());
    let masters = masters(b, 0);
    let per_pair = (l * l) as u32;
    let out = |v: usize| v as u32 * per_pair;
    let inn = |u: usize| (nodes + u) as u32 * per_pair;
    let topo = b.topo;
    let locate = |r: usize| topo.locate(r).unwrap_or((0, 0));
    node_gather_moves(b, &masters, &|q| {
        let lq = locate(q).1;
        let pairs = (0..n)
            .map(|d| {
                let (v, j) = locate(d);
                (d as u32, out(v) + (lq * l + j) as u32)
            })
            .collect();
        paired_runs(pairs)
            .into_iter()
            .map(|(s, d, c)| {
                (
                    Region::new(Buf::Send, s, c),
                    Region::new(Buf::Scratch, d, c),
                )
            })
            .collect()
    });
    let exchanged = b.counter();
    for (u, &m) in masters.iter().enumerate() {
        pairwise_sends(b, m, u, nodes, Lane::Rail(0), exchanged, &|v| {
            (
                masters[v],
                Region::new(Buf::Scratch, out(v), per_pair),
                Region::new(Buf::Scratch, inn(u), per_pair),
            )
        });
        if nodes > 1 {
            b.wait(m, exchanged);
        }
    }
    let ready = b.flag();
    let done = b.flag();
    for (node, &m) in masters.iter().enumerate() {
        node_announce(b, m, node, ready);
        for p in b.node_ranks(node) {
            let j = b.locate(p).1;
            let pairs: Vec<(u32, u32)> = (0..n)
                .map(|s| {
                    let (u, q) = b.locate(s);
                    let base = if u == node { out(u) } else { inn(u) };
                    (base + (q * l + j) as u32, s as u32)
                })
                .collect();
            if p == m {
                for (s, d, c) in paired_runs(pairs) {
                    b.copy(
                        m,
                        Region::new(Buf::Scratch, s, c),
                        Region::new(Buf::Recv, d, c),
                    );
                }
            } else {
                b.wait_flag(p, ready);
                node_pull(b, m, p, Buf::Scratch, pairs);
            }
        }
        node_done(b, m, node, done);
    }
}
