//! Barriers [GTNP02 §5]: no data, only synchronisation; the verifier
//! proves that no rank's last step can happen before every rank's first.
//!
//! - `rdma`: pairwise exchange with recursive doubling among all ranks;
//!   each step one 8-byte RDMA write of the barrier number into the
//!   partner's word for this rank, which the partner polls until it
//!   *reaches* the number [GTNP02 §6.4]. For N not a power of two, the S'
//!   ranks above the largest power of two S first report to a partner in
//!   S, S runs the exchange, then releases S': log2 S + 2 steps [GTNP02
//!   §5.1] ([`pairwise_exchange_steps`]).
//! - `shm`: the node's flat tree [GTNP02 §5.2] (one node only).
//! - `smp`: the flat tree's arrival on every node, the RDMA exchange among
//!   node masters, the flat tree's release [GTNP02 §5.3].
//! - `hardware`: the flat tree around the rail switch's combined barrier
//!   among masters [ELAN-SEM §13 rule 17].
//! - `sendrecv`: the message-passing baseline \[GTNP02\] compares against
//!   (MVICH's recursive doubling over send/receive): the same exchange,
//!   each step a queued DMA into the partner's input queue and a receive
//!   from one's own.

use super::*;

/// One step of the pairwise exchange for one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExchangeStep {
    /// Send the barrier number to member `to`.
    Send(usize),
    /// Wait for member `from`'s number.
    WaitFrom(usize),
}

/// The pairwise-exchange schedule of member `id` among `n` [GTNP02 §5.1]:
/// for a power of two, log2 n (send, wait) pairs with partners `id ^ 2^k`;
/// else the S' members (`id >= S`, S the largest power of two below n)
/// report to `id - S` and wait for its release, and S members absorb their
/// S' partner before the exchange and release it after: log2 S + 2 steps.
pub(crate) fn pairwise_exchange_steps(n: usize, id: usize) -> Vec<ExchangeStep> {
    let mut steps = Vec::new();
    if n <= 1 || id >= n {
        return steps;
    }
    let s = prev_power_of_two(n);
    if id >= s {
        steps.push(ExchangeStep::Send(id - s));
        steps.push(ExchangeStep::WaitFrom(id - s));
        return steps;
    }
    if id + s < n {
        steps.push(ExchangeStep::WaitFrom(id + s));
    }
    let mut distance = 1;
    while distance < s {
        steps.push(ExchangeStep::Send(id ^ distance));
        steps.push(ExchangeStep::WaitFrom(id ^ distance));
        distance <<= 1;
    }
    if id + s < n {
        steps.push(ExchangeStep::Send(id + s));
    }
    steps
}

/// Largest power of two `<= n` (n >= 1).
fn prev_power_of_two(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// The RDMA exchange among `members` on `members[id]`, through `words`.
/// Returns the word puts (whose completion the caller may need).
fn word_exchange(b: &mut Builder, members: &[usize], id: usize, words: Words) -> Vec<u32> {
    let me = members[id];
    let mut puts = Vec::new();
    if members.len() <= 1 {
        return puts;
    }
    b.push(me, Op::BarrierNumber(Numbers::Words(words)));
    for step in pairwise_exchange_steps(members.len(), id) {
        match step {
            ExchangeStep::Send(to) => puts.push(b.push(
                me,
                Op::WordPut {
                    to: members[to] as Rank,
                    words,
                    slot: id as u32,
                },
            )),
            ExchangeStep::WaitFrom(from) => {
                b.push(
                    me,
                    Op::WordWait {
                        words,
                        slot: from as u32,
                    },
                );
            }
        }
    }
    puts
}

/// The node's flat tree around `between` (run on each node's master with
/// the node's index; returns steps the release must wait for).
fn around_node_tree(b: &mut Builder, between: &dyn Fn(&mut Builder, usize, usize) -> Vec<u32>) {
    for r in 0..b.n {
        let (node, local) = b.locate(r);
        b.push(r, Op::NodeArrive);
        if local == 0 {
            for step in between(b, r, node) {
                b.after(r, step);
            }
        }
        b.push(r, Op::NodeRelease);
    }
}

pub(crate) fn rdma(b: &mut Builder) -> Result<(), Error> {
    let members: Vec<usize> = (0..b.n).collect();
    for id in 0..b.n {
        word_exchange(b, &members, id, Words::Flat);
    }
    Ok(())
}

pub(crate) fn shm(b: &mut Builder) -> Result<(), Error> {
    one_node(b, "it synchronises one node")?;
    around_node_tree(b, &|_, _, _| Vec::new());
    Ok(())
}

/// Refuse a communicator that spans more than one node.
pub(super) fn one_node(b: &Builder, what: &str) -> Result<(), Error> {
    let nodes = b.topo.nodes();
    if nodes > 1 {
        return Err(Error::Unsupported {
            algorithm: b.p.algorithm.name(),
            reason: format!("{what}, the communicator spans {nodes}"),
        });
    }
    Ok(())
}

pub(crate) fn smp(b: &mut Builder) -> Result<(), Error> {
    let masters: Vec<usize> = (0..b.topo.nodes()).map(|n| b.rank_of(n, 0)).collect();
    around_node_tree(b, &|b, _, node| {
        word_exchange(b, &masters, node, Words::Masters)
    });
    Ok(())
}

pub(crate) fn hardware(b: &mut Builder) -> Result<(), Error> {
    hardware_barrier(b);
    Ok(())
}

/// The hardware barrier of every rank: node arrival, the switch barrier
/// among masters (when there is more than one node), node release. Also
/// a building block (the SMP-aware gather-and-broadcast all-gathers).
pub(super) fn hardware_barrier(b: &mut Builder) {
    let nodes = b.topo.nodes();
    around_node_tree(b, &|b, master, _| {
        if nodes > 1 {
            b.push(master, Op::HwBarrier);
        }
        Vec::new()
    });
}

pub(crate) fn sendrecv(b: &mut Builder) -> Result<(), Error> {
    let n = b.n;
    if n <= 1 {
        return Ok(());
    }
    for me in 0..n {
        b.push(me, Op::BarrierNumber(Numbers::Queue));
        for step in pairwise_exchange_steps(n, me) {
            let op = match step {
                ExchangeStep::Send(to) => Op::QueueSend { to: to as Rank },
                ExchangeStep::WaitFrom(from) => Op::QueueRecv { from: from as Rank },
            };
            b.push(me, op);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two_below() {
        assert_eq!(prev_power_of_two(1), 1);
        assert_eq!(prev_power_of_two(17), 16);
        assert_eq!(prev_power_of_two(16), 16);
    }

    #[test]
    fn exchanges_match_the_paper_step_counts_and_pair_up() {
        for n in 1..=33usize {
            let s = prev_power_of_two(n);
            let rounds = s.trailing_zeros() as usize;
            for id in 0..n {
                let steps = pairwise_exchange_steps(n, id);
                // Every send has a matching wait on the partner's side.
                for step in &steps {
                    if let ExchangeStep::Send(to) = *step {
                        assert!(
                            pairwise_exchange_steps(n, to).contains(&ExchangeStep::WaitFrom(id)),
                            "n={n} {id}->{to}"
                        );
                    }
                }
                let sends = steps
                    .iter()
                    .filter(|s| matches!(s, ExchangeStep::Send(_)))
                    .count();
                let expected = if n == 1 {
                    0
                } else if id >= s {
                    1
                } else {
                    rounds + usize::from(id + s < n)
                };
                assert_eq!(sends, expected, "n={n} id={id}");
            }
        }
    }
}
