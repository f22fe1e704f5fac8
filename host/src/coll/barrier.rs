//! Barriers [GTNP02 §5].
//!
//! - [`BarrierAlgorithm::Rdma`]: pairwise exchange with recursive doubling
//!   among all ranks. Each step is one 8-byte RDMA write of the barrier
//!   number into the partner's word for this rank; the partner polls its
//!   own memory and accepts any value `>=` the barrier number in wrapping
//!   arithmetic [GTNP02 §6.4], so a fast partner already in the next barrier
//!   cannot be missed. For N not a power of two, the S' ranks above the
//!   largest power of two S first write to a partner in S, S runs the
//!   exchange, then releases S': log2 S + 2 steps [GTNP02 §5.1].
//! - [`BarrierAlgorithm::Shm`]: the intra-node flat tree [GTNP02 §5.2]; only
//!   for a single-node communicator.
//! - [`BarrierAlgorithm::Smp`]: the overall barrier [GTNP02 §5.3]: flat tree
//!   arrival on each node, the RDMA barrier among node masters (local rank
//!   0), flat tree release.
//! - [`BarrierAlgorithm::Hardware`]: flat tree within nodes, the rail
//!   switch's combined barrier (HW_BARRIER) among node masters, flat-tree
//!   release [ELAN-SEM §13 rule 17].
//! - [`BarrierAlgorithm::SendRecv`]: the message-passing baseline \[GTNP02\]
//!   compares against (MVICH's recursive doubling over send/receive): the
//!   same schedule, each step a queued DMA (QDMA) into the partner's input
//!   queue and a receive from one's own, with early messages from other
//!   partners kept aside, as an MPI library's unexpected queue does.

use crate::env::{WordTest, WordWatch};

use super::BarrierGroup;
use super::state::Coll;
use crate::endpoint::TransferOptions;
use crate::error::Error;

/// Barrier algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BarrierAlgorithm {
    /// RDMA pairwise exchange among all ranks.
    Rdma,
    /// Intra-node flat tree (single node only).
    Shm,
    /// Flat tree within nodes, RDMA among masters.
    Smp,
    /// Recursive doubling over queued messages (the two-sided baseline).
    SendRecv,
    /// Flat tree within nodes, the switch-combined hardware barrier among
    /// masters.
    Hardware,
}

impl BarrierAlgorithm {
    /// Every algorithm.
    pub const ALL: [BarrierAlgorithm; 5] = [
        Self::Rdma,
        Self::Shm,
        Self::Smp,
        Self::SendRecv,
        Self::Hardware,
    ];

    /// Stable name (CLI, tables).
    pub fn name(self) -> &'static str {
        match self {
            Self::Rdma => "rdma",
            Self::Shm => "shm",
            Self::Smp => "smp",
            Self::SendRecv => "sendrecv",
            Self::Hardware => "hardware",
        }
    }
}

impl std::str::FromStr for BarrierAlgorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        super::parse_named(&Self::ALL, Self::name, "barrier", s)
    }
}

/// One step of the pairwise-exchange barrier for one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierStep {
    /// Write the barrier number into member `to`'s word for this member.
    Send(usize),
    /// Wait until this member's word for member `from` reaches the number.
    WaitFrom(usize),
}

/// The pairwise-exchange schedule of member `id` among `n` [GTNP02 §5.1]: for
/// a power of two, log2 n (send, wait) pairs with partners `id ^ 2^k`; else
/// the S' members (`id >= S`, S the largest power of two below n) report to
/// `id - S` and wait for its release, and S members absorb their S' partner
/// before the exchange and release it after: log2 S + 2 steps.
pub fn pairwise_exchange_steps(n: usize, id: usize) -> Vec<BarrierStep> {
    let mut steps = Vec::new();
    if n <= 1 || id >= n {
        return steps;
    }
    let s = prev_power_of_two(n);
    if id >= s {
        steps.push(BarrierStep::Send(id - s));
        steps.push(BarrierStep::WaitFrom(id - s));
        return steps;
    }
    if id + s < n {
        steps.push(BarrierStep::WaitFrom(id + s));
    }
    let mut distance = 1;
    while distance < s {
        steps.push(BarrierStep::Send(id ^ distance));
        steps.push(BarrierStep::WaitFrom(id ^ distance));
        distance <<= 1;
    }
    if id + s < n {
        steps.push(BarrierStep::Send(id + s));
    }
    steps
}

/// Largest power of two `<= n` (n >= 1).
fn prev_power_of_two(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

impl Coll<'_> {
    /// Barrier with the default algorithm ([`BarrierAlgorithm::Smp`]).
    pub(crate) fn barrier(&self) -> Result<(), Error> {
        self.barrier_with(BarrierAlgorithm::Smp)
    }

    /// Barrier with a chosen algorithm. No rank returns before every rank
    /// has entered.
    pub(crate) fn barrier_with(&self, algorithm: BarrierAlgorithm) -> Result<(), Error> {
        match algorithm {
            BarrierAlgorithm::Rdma => {
                let members: Vec<usize> = (0..self.size()).collect();
                self.rdma_barrier(BarrierGroup::Flat, &members, self.rank())
            }
            BarrierAlgorithm::Shm => {
                if self.topology().nodes() > 1 {
                    return Err(Error::Unsupported {
                        algorithm: "shm barrier",
                        reason: format!(
                            "it synchronises one node, the communicator spans {}",
                            self.topology().nodes()
                        ),
                    });
                }
                let sync = self.hook_sync();
                self.st.shm.borrow_mut().barrier(&sync, 0, &mut || Ok(()))
            }
            BarrierAlgorithm::Hardware => {
                let nodes = self.topology().nodes();
                let sync = self.hook_sync();
                self.st
                    .shm
                    .borrow_mut()
                    .barrier(&sync, 0, &mut || self.hw_barrier_masters(nodes))
            }
            BarrierAlgorithm::SendRecv => {
                let members: Vec<usize> = (0..self.size()).collect();
                self.sendrecv_barrier(&members, self.rank())
            }
            BarrierAlgorithm::Smp => {
                let topo = *self.topology();
                let masters: Vec<usize> = (0..topo.nodes())
                    .map(|n| topo.rank_of(n, 0))
                    .collect::<Result<_, _>>()?;
                let node = self.node();
                let sync = self.hook_sync();
                self.st.shm.borrow_mut().barrier(&sync, 0, &mut || {
                    self.rdma_barrier(BarrierGroup::Masters, &masters, node)
                })
            }
        }
    }

    /// The RDMA pairwise-exchange barrier among `members` (ranks) of
    /// `group`, where this rank is `members[id]`. Uses word `id` of each
    /// partner's word array for the group.
    pub(crate) fn rdma_barrier(
        &self,
        group: BarrierGroup,
        members: &[usize],
        id: usize,
    ) -> Result<(), Error> {
        let n = members.len();
        if n <= 1 {
            return Ok(());
        }
        let coll = &self.st.bufs;
        let (counter, word_array) = match group {
            BarrierGroup::Flat => (&self.st.seq.flat_barrier, &coll.flat_words),
            BarrierGroup::Masters => (&self.st.seq.master_barrier, &coll.master_words),
        };
        let number = counter.get().wrapping_add(1);
        counter.set(number);
        self.write_local(&coll.barrier_source, 0, &number.to_le_bytes())?;
        let words = self.local_memory(word_array)?;
        let mut handles = Vec::new();
        let send = |to: usize, handles: &mut Vec<_>| -> Result<(), Error> {
            let dst = word_array.slice(id * 8, 8)?;
            let opts = TransferOptions {
                wake: true,
                ..TransferOptions::default()
            };
            handles.push(self.put_with(&coll.barrier_source, members[to], &dst, opts)?);
            Ok(())
        };
        let hook = self.wait_arc();
        let wait_from = |from: usize| -> Result<(), Error> {
            let watch = WordWatch {
                mem: words.clone(),
                offset: from * 8,
                mask: u64::MAX,
                test: WordTest::Reaches(number),
            };
            Ok(hook.wait_words(&[watch])?)
        };
        for step in pairwise_exchange_steps(n, id) {
            match step {
                BarrierStep::Send(to) => send(to, &mut handles)?,
                BarrierStep::WaitFrom(from) => wait_from(from)?,
            }
        }
        for h in handles {
            h.wait()?;
        }
        Ok(())
    }
}

impl Coll<'_> {
    /// The send/recv barrier among `members`, this rank being `members[id]`.
    pub(crate) fn sendrecv_barrier(&self, members: &[usize], id: usize) -> Result<(), Error> {
        let n = members.len();
        if n <= 1 {
            return Ok(());
        }
        let queue = &self.st.barrier_queue;
        let number = self.st.seq.sendrecv_barrier.get().wrapping_add(1);
        self.st.seq.sendrecv_barrier.set(number);
        self.write_local(&self.st.bufs.barrier_source, 0, &number.to_le_bytes())?;
        let mut handles = Vec::new();
        for step in pairwise_exchange_steps(n, id) {
            match step {
                BarrierStep::Send(to) => handles.push(self.queue_send(
                    queue,
                    members[to],
                    &self.st.bufs.barrier_source,
                )?),
                BarrierStep::WaitFrom(from) => {
                    let want = (members[from], number);
                    loop {
                        let mut stash = self.st.unexpected.borrow_mut();
                        if let Some(at) = stash.iter().position(|m| *m == want) {
                            stash.swap_remove(at);
                            break;
                        }
                        drop(stash);
                        let mut word = [0u8; 8];
                        let item = self.queue_recv(queue, &mut word)?;
                        self.st
                            .unexpected
                            .borrow_mut()
                            .push((item.src, u64::from_le_bytes(word)));
                    }
                }
            }
        }
        for h in handles {
            h.wait()?;
        }
        Ok(())
    }
}

impl Coll<'_> {
    /// The hardware barrier among node masters (local rank 0 = context 0 of
    /// every node), on rail 0. Called by the master only.
    pub(crate) fn hw_barrier_masters(&self, nodes: usize) -> Result<(), Error> {
        if nodes <= 1 {
            return Ok(());
        }
        let seq = self.st.seq.hw_barrier.get().wrapping_add(1);
        self.st.seq.hw_barrier.set(seq);
        self.hw_barrier(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_accepted_ones() {
        for a in BarrierAlgorithm::ALL {
            assert_eq!(a.name().parse::<BarrierAlgorithm>(), Ok(a));
        }
        let err = "tree".parse::<BarrierAlgorithm>().unwrap_err();
        assert!(err.contains("rdma, shm, smp, sendrecv, hardware"), "{err}");
        assert_eq!(prev_power_of_two(1), 1);
        assert_eq!(prev_power_of_two(17), 16);
        assert_eq!(prev_power_of_two(16), 16);
    }

    #[test]
    fn schedules_match_the_paper_step_counts_and_pair_up() {
        for n in 1..=33usize {
            let s = prev_power_of_two(n);
            let rounds = s.trailing_zeros() as usize;
            for id in 0..n {
                let steps = pairwise_exchange_steps(n, id);
                // Every send has a matching wait on the partner's side.
                for step in &steps {
                    if let BarrierStep::Send(to) = *step {
                        assert!(
                            pairwise_exchange_steps(n, to).contains(&BarrierStep::WaitFrom(id)),
                            "n={n} {id}->{to}"
                        );
                    }
                }
                let sends = steps
                    .iter()
                    .filter(|s| matches!(s, BarrierStep::Send(_)))
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
            // log2 S + 2 communication steps when n is not a power of two.
            if !n.is_power_of_two() {
                let critical = 1 + rounds + 1;
                assert_eq!(critical, (s.trailing_zeros() + 2) as usize);
            }
        }
    }
}
