//! The catalogue: one entry per algorithm of each schedule collective, the
//! single place that says what the algorithm is called, where it comes
//! from, what it needs of the shape, which generator writes its schedule
//! and which closed form (if a paper gives one) predicts its cost.
//!
//! Everything else reads this table: [`Collective::algorithms`] and
//! [`Collective::parse_algorithm`] (the CLI's `--algo`, tuning tables),
//! [`crate::sched::generate()`], [`formula`] (the cost model's paper
//! column), `railcoll schedule list` and the table in `docs/algorithms.md`
//! (a test holds the two equal). Adding an algorithm is one generator and
//! one entry here (`docs/algorithms.md` walks through an example).

use super::cost::{Formula, Hockney};
use super::generate::{Generator, allgather, alltoall, barrier, bcast, gather};
use super::{Algorithm, Choice, Collective, Params};
use crate::sched::algo::{Aggregation, LeaderExchange};

/// A closed form: the paper's prediction for these parameters under
/// Hockney.
pub type ClosedForm = fn(&Params, &Hockney) -> Formula;

/// One algorithm of one collective.
#[derive(Clone, Copy)]
pub struct Entry {
    /// The collective.
    pub collective: Collective,
    /// The algorithm (its name is [`Algorithm::name`]).
    pub algorithm: Algorithm,
    /// Where it comes from, by the keys of `docs/references.md`.
    pub reference: &'static str,
    /// What it does, in one line.
    pub summary: &'static str,
    /// What it needs of the shape beyond what the collective needs (the
    /// generator refuses other shapes with a typed error).
    pub constraint: Option<&'static str>,
    /// It works node by node (the node segment, node leaders, the
    /// switch): refused on a communicator whose ranks per node differ
    /// ([`crate::topology::Grouping::Scattered`]).
    pub node_aware: bool,
    /// Writes the schedule.
    pub(crate) generator: Generator,
    /// The paper's (or the classic) closed form, where there is one.
    pub formula: Option<ClosedForm>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("collective", &self.collective)
            .field("algorithm", &self.algorithm)
            .field("reference", &self.reference)
            .finish()
    }
}

use Algorithm as A;
use Collective as C;

/// Every entry, grouped by collective, in catalogue order (a native
/// baseline last).
pub static CATALOGUE: [Entry; 33] = [
    // --- gather ---------------------------------------------------------
    Entry {
        collective: C::Gather,
        algorithm: A::Binomial,
        reference: "[QA08 §5.1.1, eq. 1]",
        summary: "k-port spanning binomial ((k+1)-ary) tree of all ranks",
        constraint: None,
        node_aware: false,
        generator: gather::binomial,
        formula: Some(closed::binomial_tree),
    },
    Entry {
        collective: C::Gather,
        algorithm: A::Direct,
        reference: "[QA08 §5.1.1, eq. 2]",
        summary: "every rank puts its block straight to the root, k at a time",
        constraint: None,
        node_aware: false,
        generator: gather::gather_direct,
        formula: Some(closed::direct),
    },
    Entry {
        collective: C::Gather,
        algorithm: A::SmpTree,
        reference: "[QA08 §5.2.1, Fig. 7]",
        summary: "shm gather per node, then the k-port tree among masters",
        constraint: None,
        node_aware: true,
        generator: gather::smp_tree,
        formula: None,
    },
    Entry {
        collective: C::Gather,
        algorithm: A::SmpDirect,
        reference: "[QA08 §5.2.1, Fig. 7]",
        summary: "shm gather per node, then Direct among masters",
        constraint: None,
        node_aware: true,
        generator: gather::smp_direct,
        formula: None,
    },
    Entry {
        collective: C::Gather,
        algorithm: A::Native,
        reference: "[QA08 §3.1] (elan_gather)",
        summary: "shm gather <= 2 KB, NIC-chained tree <= 4 KB, else rendezvous send/receive",
        constraint: None,
        node_aware: true,
        generator: gather::native,
        formula: None,
    },
    // --- all-gather -----------------------------------------------------
    Entry {
        collective: C::Allgather,
        algorithm: A::Direct,
        reference: "[QA08 §5.1.2, eq. 2]",
        summary: "every rank puts its block to every other rank, k at a time",
        constraint: None,
        node_aware: false,
        generator: allgather::allgather_direct,
        formula: Some(closed::direct),
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::Exchange,
        reference: "[QA08 §5.1.2, eqs. 3-4, Fig. 4]",
        summary: "k-port Standard Exchange over Latin-square rails; non-powers folded in and out",
        constraint: None,
        node_aware: false,
        generator: allgather::allgather_exchange,
        formula: Some(closed::standard_exchange),
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::Bruck,
        reference: "[QA08 §5.1.2, Fig. 5]",
        summary: "k-port Bruck: log_(k+1) N rounds, split last round, final shift",
        constraint: None,
        node_aware: false,
        generator: allgather::allgather_bruck,
        formula: Some(closed::bruck_allgather),
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::Ring,
        reference: "[KSSKP09 §2] (leader exchange), classic",
        summary: "N - 1 steps around a ring, each message striped",
        constraint: None,
        node_aware: false,
        generator: allgather::allgather_ring,
        formula: Some(closed::ring),
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::RecursiveDoubling,
        reference: "[KSSKP09 §2] (leader exchange), classic",
        summary: "log2 N steps of doubling exchanges; non-powers folded",
        constraint: None,
        node_aware: false,
        generator: allgather::allgather_rd,
        formula: Some(closed::recursive_doubling),
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::SmpGatherTree,
        reference: "[QA08 §5.2.1, Fig. 7]",
        summary: "SMP gather (tree) to the root, hardware barrier and broadcast, shm copy-out",
        constraint: None,
        node_aware: true,
        generator: allgather::smp_gather_tree,
        formula: None,
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::SmpGatherDirect,
        reference: "[QA08 §5.2.1, Fig. 7]",
        summary: "SMP gather (Direct) to the root, hardware barrier and broadcast, shm copy-out",
        constraint: None,
        node_aware: true,
        generator: allgather::smp_gather_direct,
        formula: None,
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::SmpDirect,
        reference: "[QA08 §5.2.2, Fig. 8]",
        summary: "shm gather to the master, Direct among masters, copies overlapped",
        constraint: None,
        node_aware: true,
        generator: allgather::smp_allgather_direct,
        formula: None,
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::SmpBruck,
        reference: "[QA08 §5.2.2, Fig. 8]",
        summary: "shm gather to the master, Bruck among masters with direct placement",
        constraint: None,
        node_aware: true,
        generator: allgather::smp_allgather_bruck,
        formula: None,
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::MultiLeader(Aggregation::Shm, LeaderExchange::RecursiveDoubling),
        reference: "[KSSKP09 §4]",
        summary: "one leader per socket; shm aggregation; recursive doubling among leaders",
        constraint: None,
        node_aware: true,
        generator: allgather::ml_shm_rd,
        formula: None,
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::MultiLeader(Aggregation::Shm, LeaderExchange::Ring),
        reference: "[KSSKP09 §4]",
        summary: "one leader per socket; shm aggregation; ring among leaders",
        constraint: None,
        node_aware: true,
        generator: allgather::ml_shm_ring,
        formula: None,
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::MultiLeader(Aggregation::P2p, LeaderExchange::RecursiveDoubling),
        reference: "[KSSKP09 §4]",
        summary: "one leader per socket; NIC loopback aggregation; recursive doubling among leaders",
        constraint: None,
        node_aware: true,
        generator: allgather::ml_p2p_rd,
        formula: None,
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::MultiLeader(Aggregation::P2p, LeaderExchange::Ring),
        reference: "[KSSKP09 §4]",
        summary: "one leader per socket; NIC loopback aggregation; ring among leaders",
        constraint: None,
        node_aware: true,
        generator: allgather::ml_p2p_ring,
        formula: None,
    },
    Entry {
        collective: C::Allgather,
        algorithm: A::Native,
        reference: "[QA08 §3.1] (elan_gather + elan_hbcast)",
        summary: "native gather + hardware broadcast <= 32 KB, else ring",
        constraint: None,
        node_aware: true,
        generator: allgather::native_allgather,
        formula: None,
    },
    // --- all-to-all -----------------------------------------------------
    Entry {
        collective: C::Alltoall,
        algorithm: A::Direct,
        reference: "[QA08 §5.1.3, eq. 2]",
        summary: "every rank puts each block straight to its owner, k at a time",
        constraint: None,
        node_aware: false,
        generator: alltoall::alltoall_direct,
        formula: Some(closed::direct),
    },
    Entry {
        collective: C::Alltoall,
        algorithm: A::Exchange,
        reference: "[QA08 §5.1.3]",
        summary: "k-port Standard Exchange by digits, with pack and unpack",
        constraint: Some("N a power of k + 1 (the paper gives no correction steps)"),
        node_aware: false,
        generator: alltoall::alltoall_exchange,
        formula: Some(closed::standard_exchange_alltoall),
    },
    Entry {
        collective: C::Alltoall,
        algorithm: A::Bruck,
        reference: "[QA08 §5.1.3, Fig. 6, eq. 5]",
        summary: "k-port Bruck, radix k + 1: rotate, log_(k+1) N rounds, rotate back",
        constraint: None,
        node_aware: false,
        generator: alltoall::alltoall_bruck,
        formula: Some(closed::bruck_alltoall),
    },
    Entry {
        collective: C::Alltoall,
        algorithm: A::Pairwise,
        reference: "[QA08 §3.1] (elan_alltoall), classic",
        summary: "N - 1 pairwise exchange steps, each message striped",
        constraint: None,
        node_aware: false,
        generator: alltoall::pairwise,
        formula: Some(closed::pairwise),
    },
    Entry {
        collective: C::Alltoall,
        algorithm: A::Native,
        reference: "[QA08 §3.1] (elan_alltoall)",
        summary: "<= 2 KB on SMP nodes through the masters (shm, pairwise among masters), pairwise on one rail <= 8 KB, else striped with permission to send",
        constraint: None,
        node_aware: true,
        generator: alltoall::native,
        formula: None,
    },
    // --- broadcast ------------------------------------------------------
    Entry {
        collective: C::Bcast,
        algorithm: A::Binomial,
        reference: "classic (the point-to-point baseline)",
        summary: "binomial tree over puts, each child ready before its parent sends",
        constraint: None,
        node_aware: false,
        generator: bcast::binomial,
        formula: Some(closed::binomial_bcast),
    },
    Entry {
        collective: C::Bcast,
        algorithm: A::Shm,
        reference: "[GTNP02 §5.2] (flags on own lines)",
        summary: "through the node segment's broadcast buffer, in rounds",
        constraint: Some("one node"),
        node_aware: true,
        generator: bcast::shm,
        formula: None,
    },
    Entry {
        collective: C::Bcast,
        algorithm: A::Smp,
        reference: "[QA08 §5.2.1] (node phases)",
        summary: "binomial tree among node leaders, then the node segment",
        constraint: None,
        node_aware: true,
        generator: bcast::smp,
        formula: None,
    },
    Entry {
        collective: C::Bcast,
        algorithm: A::Hardware,
        reference: "[ELAN-SEM §13 rule 15], [CDMPH04]",
        summary: "switch broadcast (BCAST_DMA) to one rank per node, then the node segment",
        constraint: None,
        node_aware: true,
        generator: bcast::hardware,
        formula: None,
    },
    // --- barrier --------------------------------------------------------
    Entry {
        collective: C::Barrier,
        algorithm: A::Rdma,
        reference: "[GTNP02 §5.1, §6.4]",
        summary: "pairwise exchange of RDMA-written barrier numbers, recursive doubling",
        constraint: None,
        node_aware: false,
        generator: barrier::rdma,
        formula: Some(closed::pairwise_exchange),
    },
    Entry {
        collective: C::Barrier,
        algorithm: A::Shm,
        reference: "[GTNP02 §5.2]",
        summary: "the node's flat tree: arrival flags, one release flag",
        constraint: Some("one node"),
        node_aware: true,
        generator: barrier::shm,
        formula: None,
    },
    Entry {
        collective: C::Barrier,
        algorithm: A::Smp,
        reference: "[GTNP02 §5.3]",
        summary: "flat tree per node around the RDMA exchange among masters",
        constraint: None,
        node_aware: true,
        generator: barrier::smp,
        formula: None,
    },
    Entry {
        collective: C::Barrier,
        algorithm: A::SendRecv,
        reference: "[GTNP02 §7] (MVICH's barrier)",
        summary: "the same exchange over queued messages, early ones kept aside",
        constraint: None,
        node_aware: false,
        generator: barrier::sendrecv,
        formula: Some(closed::pairwise_exchange),
    },
    Entry {
        collective: C::Barrier,
        algorithm: A::Hardware,
        reference: "[ELAN-SEM §13 rule 17], [FP01]",
        summary: "flat tree per node around the switch's combined barrier among masters",
        constraint: None,
        node_aware: true,
        generator: barrier::hardware,
        formula: None,
    },
];

/// The entry of `algorithm` for `collective`, if it has one.
pub fn entry(collective: Collective, algorithm: Algorithm) -> Option<&'static Entry> {
    CATALOGUE
        .iter()
        .find(|e| e.collective == collective && e.algorithm == algorithm)
}

/// The entries of `collective`, in catalogue order.
pub fn entries(collective: Collective) -> impl Iterator<Item = &'static Entry> {
    CATALOGUE.iter().filter(move |e| e.collective == collective)
}

/// The paper's (or the classic) closed form for `p` under `h`, if any.
pub fn formula(p: &Params, h: &Hockney) -> Option<Formula> {
    entry(p.collective, p.algorithm)
        .and_then(|e| e.formula)
        .map(|f| f(p, h))
}

impl Collective {
    /// The algorithms that apply, in catalogue order (native last).
    pub fn algorithms(self) -> Vec<Algorithm> {
        entries(self).map(|e| e.algorithm).collect()
    }

    /// Parse an algorithm as it runs: a name of this collective's
    /// catalogue, host-driven, `name@nic`, compiled onto the NICs, or
    /// `name@nic-dma`, their DMA doing the copies too; the error
    /// names the accepted ones.
    pub fn parse_choice(self, s: &str) -> Result<Choice, String> {
        if let Some(base) = s.strip_suffix("@nic-dma") {
            self.parse_algorithm(base).map(Choice::nic_dma)
        } else if let Some(base) = s.strip_suffix("@nic") {
            self.parse_algorithm(base).map(Choice::nic)
        } else {
            self.parse_algorithm(s).map(Choice::host)
        }
        .map_err(|e| {
            format!(
                "{e}; each also as NAME@nic, compiled onto the NICs, or NAME@nic-dma, their DMA doing the copies too (local and node)"
            )
        })
    }

    /// Parse an algorithm name valid for this collective; the error names
    /// the accepted ones.
    pub fn parse_algorithm(self, s: &str) -> Result<Algorithm, String> {
        entries(self)
            .map(|e| e.algorithm)
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = entries(self).map(|e| e.algorithm.name()).collect();
                format!(
                    "unknown {} algorithm '{s}' (accepted: {})",
                    self.name(),
                    names.join(", ")
                )
            })
    }
}

/// The catalogue as a Markdown table (what `railcoll schedule list` prints
/// and `docs/algorithms.md` carries). The last two columns say what the
/// algorithm's `@nic` and `@nic-dma` forms move onto the NICs on 8
/// single-rank nodes and one rail, at 64-byte blocks: chained puts out of
/// everything the host would post to another rank (puts, barrier words,
/// queued messages, hardware broadcasts), and the local copies the NICs'
/// DMA does.
pub fn markdown() -> String {
    let mut out = String::from(
        "| collective | algorithm | reference | what it does | needs | closed form | `@nic`: chained / puts | `@nic-dma`: chained / puts, copies |\n|---|---|---|---|---|---|---|---|\n",
    );
    // Closed forms whose label depends on the case are shown for N = 9,
    // k = 2 (a power of k + 1).
    let example = super::Shape::new(9, 1, 1, 2, crate::topology::Placement::Block);
    // What the NIC form chains, on 8 single-rank nodes and one rail.
    let one_rail = super::Shape::new(8, 1, 1, 1, crate::topology::Placement::Block);
    for e in &CATALOGUE {
        let form = match (e.formula, &example) {
            (Some(f), Ok(shape)) => {
                f(
                    &Params::new(e.collective, e.algorithm, *shape, 0, 4096),
                    &Hockney::QSNET2,
                )
                .label
            }
            _ => "-",
        };
        let moved = |choice: Choice| {
            one_rail
                .as_ref()
                .ok()
                .and_then(|shape| {
                    let p =
                        Params::new(e.collective, e.algorithm, *shape, 0, 64).with_choice(choice);
                    super::generate(&p).ok()
                })
                .map(|set| super::offload::moved(&set))
        };
        let puts = |m: &super::offload::Moved| match m.chained + m.host_posts {
            0 => "no puts".to_string(),
            all => format!("{} / {all}", m.chained),
        };
        let nic = moved(Choice::nic(e.algorithm)).map_or_else(|| "-".to_string(), |m| puts(&m));
        let dma = moved(Choice::nic_dma(e.algorithm)).map_or_else(
            || "-".to_string(),
            |m| format!("{}, {} copies", puts(&m), m.copies),
        );
        out.push_str(&format!(
            "| {} | `{}` | {} | {} | {} | {} | {} | {} |\n",
            e.collective,
            e.algorithm.name(),
            e.reference,
            e.summary,
            e.constraint.unwrap_or("-"),
            form,
            nic,
            dma,
        ));
    }
    out
}

/// The closed forms, in microseconds: `t_s` start-up, `tau` per byte, `m`
/// the block, `n` ranks, `k` rails, `r = k + 1`.
mod closed {
    use super::super::Params;
    use super::super::cost::{Formula, Hockney};

    fn is_power(n: usize, base: usize) -> bool {
        let mut x = 1;
        while x < n {
            x *= base;
        }
        x == n
    }

    fn log_ceil(base: usize, n: usize) -> f64 {
        f64::from(crate::sched::log_ceil(base, n))
    }

    fn log_floor(base: usize, n: usize) -> f64 {
        let mut steps = 0u32;
        let mut x = base;
        while x <= n {
            x *= base;
            steps += 1;
        }
        f64::from(steps)
    }

    /// (n, k, r, m) of `p`.
    fn dims(p: &Params) -> (usize, usize, usize, f64) {
        let k = p.shape.rails;
        (p.shape.size(), k, k + 1, p.block_bytes as f64)
    }

    /// One striped message of `bytes`: its largest rail part.
    fn striped(p: &Params, h: &Hockney, bytes: usize) -> f64 {
        let k = p.shape.rails;
        if bytes > p.stripe_threshold && k > 1 {
            h.t_s + bytes.div_ceil(k) as f64 * h.tau
        } else {
            h.t_s + bytes as f64 * h.tau
        }
    }

    pub(super) fn binomial_tree(p: &Params, h: &Hockney) -> Formula {
        let (n, k, r, m) = dims(p);
        Formula {
            label: "[QA08 eq. 1]",
            value: h.t_s * log_ceil(r, n) + (n as f64 - 1.0) / k as f64 * m * h.tau,
            exact: is_power(n, r),
        }
    }

    pub(super) fn direct(p: &Params, h: &Hockney) -> Formula {
        let (n, k, _, m) = dims(p);
        Formula {
            label: "[QA08 eq. 2]",
            value: ((n - 1).div_ceil(k)) as f64 * (h.t_s + m * h.tau),
            exact: true,
        }
    }

    pub(super) fn standard_exchange(p: &Params, h: &Hockney) -> Formula {
        let (n, k, r, m) = dims(p);
        let bandwidth = (n as f64 - 1.0) / k as f64 * m * h.tau;
        if is_power(n, r) {
            Formula {
                label: "[QA08 eq. 3]",
                value: h.t_s * log_ceil(r, n) + bandwidth,
                exact: true,
            }
        } else {
            Formula {
                label: "[QA08 eq. 4]",
                value: h.t_s * (r as f64) * log_floor(r, n) + bandwidth,
                exact: false,
            }
        }
    }

    /// Bruck's all-gather has the tree's cost [QA08 eq. 1].
    pub(super) fn bruck_allgather(p: &Params, h: &Hockney) -> Formula {
        Formula {
            label: "[QA08 eq. 1] (Bruck)",
            ..binomial_tree(p, h)
        }
    }

    pub(super) fn standard_exchange_alltoall(p: &Params, h: &Hockney) -> Formula {
        let (n, _, r, m) = dims(p);
        Formula {
            label: "[QA08 §5.1.3] (SE all-to-all)",
            value: h.t_s * log_ceil(r, n) + n as f64 / r as f64 * log_ceil(r, n) * m * h.tau,
            exact: is_power(n, r),
        }
    }

    pub(super) fn bruck_alltoall(p: &Params, h: &Hockney) -> Formula {
        let (n, _, r, m) = dims(p);
        Formula {
            label: "[QA08 eq. 5] (k-port Bruck)",
            value: log_ceil(r, n) * (h.t_s + n as f64 / r as f64 * m * h.tau),
            exact: is_power(n, r),
        }
    }

    pub(super) fn pairwise(p: &Params, h: &Hockney) -> Formula {
        let n = p.shape.size();
        Formula {
            label: "classic pairwise",
            value: (n as f64 - 1.0) * striped(p, h, p.block_bytes),
            exact: true,
        }
    }

    pub(super) fn ring(p: &Params, h: &Hockney) -> Formula {
        let n = p.shape.size();
        Formula {
            label: "classic ring",
            value: (n as f64 - 1.0) * striped(p, h, p.block_bytes),
            exact: true,
        }
    }

    /// The binomial broadcast: ceil(log2 N) rounds of one (striped)
    /// message. The readiness notices add start-ups the form leaves out,
    /// so it is shown for comparison only.
    pub(super) fn binomial_bcast(p: &Params, h: &Hockney) -> Formula {
        let n = p.shape.size();
        Formula {
            label: "classic binomial",
            value: log_ceil(2, n) * striped(p, h, p.block_bytes),
            exact: false,
        }
    }

    /// The pairwise-exchange barrier: log2 N steps of one 8-byte message,
    /// log2 S + 2 when N is not a power of two (S the largest power of two
    /// below N) [GTNP02 §5.1]. The second form counts steps, not the
    /// receive port: a rank of S whose S' partner reports while its first
    /// exchange partner writes receives two messages at once, so it holds
    /// exactly only for powers of two.
    pub(super) fn pairwise_exchange(p: &Params, h: &Hockney) -> Formula {
        let n = p.shape.size();
        let s = if n <= 1 {
            1
        } else {
            1usize << (usize::BITS - 1 - n.leading_zeros())
        };
        let steps = f64::from(s.trailing_zeros()) + if s == n { 0.0 } else { 2.0 };
        Formula {
            label: "[GTNP02 §5.1]",
            value: steps * (h.t_s + 8.0 * h.tau),
            exact: s == n,
        }
    }

    pub(super) fn recursive_doubling(p: &Params, h: &Hockney) -> Formula {
        let n = p.shape.size();
        let mut value = 0.0;
        let mut d = 1;
        while d < n {
            value += striped(p, h, d * p.block_bytes);
            d *= 2;
        }
        Formula {
            label: "classic recursive doubling",
            value,
            exact: n.is_power_of_two(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::Shape;
    use crate::topology::Placement;

    #[test]
    fn names_round_trip_and_are_unique_per_collective() {
        for c in Collective::ALL {
            let mut names: Vec<&str> = c.algorithms().iter().map(|a| a.name()).collect();
            for a in c.algorithms() {
                assert_eq!(c.parse_algorithm(a.name()), Ok(a));
                assert_eq!(c.parse_choice(a.name()), Ok(Choice::host(a)));
                assert_eq!(c.parse_choice(a.nic_name()), Ok(Choice::nic(a)));
                assert_eq!(c.parse_choice(a.nic_dma_name()), Ok(Choice::nic_dma(a)));
                assert_eq!(Choice::nic_dma(a).name(), format!("{}@nic-dma", a.name()));
                assert_eq!(Choice::nic(a).name(), format!("{}@nic", a.name()));
            }
            assert!(
                c.parse_algorithm(&format!("{}@nic", c.algorithms()[0]))
                    .is_err()
            );
            let n = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), n, "{c}");
            let err = c.parse_algorithm("nope").expect_err("unknown");
            let first = c.algorithms()[0].name();
            assert!(err.contains("accepted") && err.contains(first), "{err}");
            // The native baseline, where there is one, comes last.
            let native = c.algorithms().iter().position(|&a| a == Algorithm::Native);
            assert!(native.is_none_or(|i| i + 1 == c.algorithms().len()), "{c}");
        }
    }

    #[test]
    fn every_entry_generates_a_verified_schedule_where_it_applies() {
        // A constrained entry runs on one of these and refuses another
        // with a typed error: N a power of k + 1 (9 x 1, k = 2), one node
        // (1 x 4).
        let shape = Shape::new(4, 2, 2, 2, Placement::Cyclic).expect("shape");
        let nine = Shape::new(9, 1, 1, 2, Placement::Block).expect("shape");
        let one_node = Shape::new(1, 4, 2, 2, Placement::Block).expect("shape");
        for e in &CATALOGUE {
            let mut ran = false;
            for on in [shape, nine, one_node] {
                let p = Params::new(e.collective, e.algorithm, on, 1, 64);
                match crate::sched::generate(&p) {
                    Ok(set) => {
                        crate::sched::verify::verify(
                            &set,
                            &crate::sched::verify::Budget::default(),
                        )
                        .unwrap_or_else(|err| panic!("{} {}: {err}", e.collective, e.algorithm));
                        ran = true;
                    }
                    Err(crate::error::Error::Unsupported { .. }) if e.constraint.is_some() => {}
                    Err(err) => panic!("{} {}: {err}", e.collective, e.algorithm),
                }
            }
            assert!(ran, "{} {} runs nowhere", e.collective, e.algorithm);
            if e.constraint.is_some() {
                assert!(
                    [shape, nine, one_node].iter().any(|&on| matches!(
                        crate::sched::generate(&Params::new(e.collective, e.algorithm, on, 1, 64)),
                        Err(crate::error::Error::Unsupported { .. })
                    )),
                    "{} {} outside its constraint",
                    e.collective,
                    e.algorithm
                );
            }
        }
    }

    #[test]
    fn the_docs_carry_the_catalogue_table() {
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/algorithms.md"
        ))
        .expect("docs/algorithms.md");
        let begin = docs
            .find("<!-- catalogue:begin")
            .and_then(|i| docs[i..].find('\n').map(|j| i + j + 1))
            .expect("begin marker");
        let end = docs.find("<!-- catalogue:end -->").expect("end marker");
        assert_eq!(
            &docs[begin..end],
            markdown(),
            "docs/algorithms.md's catalogue table is stale: paste `railcoll schedule list` between the markers"
        );
    }
}
