//! Collectives and algorithm names: which algorithm applies to which
//! collective, and their stable names (CLI, tuning table, benchmarks).

use std::fmt;

/// A collective operation with a schedule generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collective {
    /// Every rank's block to the root, in rank order.
    Gather,
    /// Every rank's block to every rank, in rank order.
    Allgather,
    /// Block `j` of rank `i`'s send buffer to block `i` of rank `j`'s
    /// receive buffer.
    Alltoall,
}

impl Collective {
    /// Every collective.
    pub const ALL: [Collective; 3] = [Self::Gather, Self::Allgather, Self::Alltoall];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Gather => "gather",
            Self::Allgather => "allgather",
            Self::Alltoall => "alltoall",
        }
    }

    /// The algorithms that apply, in catalogue order (native last).
    pub fn algorithms(self) -> &'static [Algorithm] {
        use Algorithm::*;
        match self {
            Self::Gather => &[Binomial, Direct, SmpTree, SmpDirect, Native],
            Self::Allgather => &[
                Direct,
                Exchange,
                Bruck,
                Ring,
                RecursiveDoubling,
                SmpGatherTree,
                SmpGatherDirect,
                SmpDirect,
                SmpBruck,
                MultiLeader(Aggregation::Shm, LeaderExchange::RecursiveDoubling),
                MultiLeader(Aggregation::Shm, LeaderExchange::Ring),
                MultiLeader(Aggregation::P2p, LeaderExchange::RecursiveDoubling),
                MultiLeader(Aggregation::P2p, LeaderExchange::Ring),
                Native,
            ],
            Self::Alltoall => &[Direct, Exchange, Bruck, Pairwise, Native],
        }
    }

    /// Parse an algorithm name valid for this collective; the error names
    /// the accepted ones.
    pub fn parse_algorithm(self, s: &str) -> Result<Algorithm, String> {
        self.algorithms()
            .iter()
            .copied()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = self.algorithms().iter().map(|a| a.name()).collect();
                format!(
                    "unknown {} algorithm '{s}' (accepted: {})",
                    self.name(),
                    names.join(", ")
                )
            })
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Collective {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .iter()
            .copied()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                format!("unknown collective '{s}' (accepted: gather, allgather, alltoall)")
            })
    }
}

/// How a multi-leader all-gather aggregates within a node [KSSKP09 §4].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Aggregation {
    /// Ranks copy their block into the leader's buffer through shared
    /// memory.
    Shm,
    /// Ranks put their block to the leader through the NIC (loopback).
    P2p,
}

/// How multi-leader all-gather exchanges among leaders [KSSKP09 §4].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LeaderExchange {
    /// Recursive doubling.
    RecursiveDoubling,
    /// Ring.
    Ring,
}

/// An algorithm of the catalogue (papers \[QA08\] and \[KSSKP09\], and the native
/// baselines of [QA08 §3.1]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Gather: the k-port spanning binomial tree ((k+1)-ary), [QA08 eq. 1].
    Binomial,
    /// Direct (gather, all-gather, all-to-all), [QA08 eq. 2].
    Direct,
    /// k-port Standard Exchange (all-gather eqs. 3-4, all-to-all).
    Exchange,
    /// k-port Bruck (all-gather Fig. 5, all-to-all Fig. 6).
    Bruck,
    /// All-gather ring.
    Ring,
    /// All-gather recursive doubling.
    RecursiveDoubling,
    /// All-to-all pairwise exchange.
    Pairwise,
    /// Gather: shm gather per node, then the k-port tree among masters.
    /// All-gather: not applicable (see [`Algorithm::SmpGatherTree`]).
    SmpTree,
    /// Gather: shm gather per node, then Direct among masters.
    /// All-gather: SMP-aware Direct [QA08 §5.2.2].
    SmpDirect,
    /// All-gather: SMP-aware Bruck [QA08 §5.2.2].
    SmpBruck,
    /// All-gather: SMP-aware Gather (tree) and hardware Broadcast [QA08 §5.2.1].
    SmpGatherTree,
    /// All-gather: SMP-aware Gather (Direct) and hardware Broadcast.
    SmpGatherDirect,
    /// All-gather: multi-leader \[KSSKP09\], one leader per socket.
    MultiLeader(Aggregation, LeaderExchange),
    /// The native Elan baseline modelled on [QA08 §3.1].
    Native,
}

impl Algorithm {
    /// Stable name.
    pub fn name(self) -> &'static str {
        use Aggregation::*;
        use LeaderExchange::*;
        match self {
            Self::Binomial => "binomial",
            Self::Direct => "direct",
            Self::Exchange => "exchange",
            Self::Bruck => "bruck",
            Self::Ring => "ring",
            Self::RecursiveDoubling => "recursive-doubling",
            Self::Pairwise => "pairwise",
            Self::SmpTree => "smp-tree",
            Self::SmpDirect => "smp-direct",
            Self::SmpBruck => "smp-bruck",
            Self::SmpGatherTree => "smp-gather-tree",
            Self::SmpGatherDirect => "smp-gather-direct",
            Self::MultiLeader(Shm, RecursiveDoubling) => "ml-shm-rd",
            Self::MultiLeader(Shm, Ring) => "ml-shm-ring",
            Self::MultiLeader(P2p, RecursiveDoubling) => "ml-p2p-rd",
            Self::MultiLeader(P2p, Ring) => "ml-p2p-ring",
            Self::Native => "native",
        }
    }

    /// Where the algorithm comes from.
    pub fn source(self) -> &'static str {
        match self {
            Self::Binomial => "[QA08 §5.1.1, eq. 1]",
            Self::Direct => "[QA08 §5.1.1-5.1.3, eq. 2]",
            Self::Exchange => "[QA08 §5.1.2-5.1.3, eqs. 3-4, Fig. 4]",
            Self::Bruck => "[QA08 §5.1.2-5.1.3, Figs. 5-6]",
            Self::Ring | Self::RecursiveDoubling => "[KSSKP09 §2] (leader exchanges), classic",
            Self::Pairwise => "[QA08 §3.1] (elan_alltoall), classic",
            Self::SmpTree | Self::SmpGatherTree | Self::SmpGatherDirect => "[QA08 §5.2.1, Fig. 7]",
            Self::SmpDirect | Self::SmpBruck => "[QA08 §5.2.2, Fig. 8]",
            Self::MultiLeader(..) => "[KSSKP09 §4]",
            Self::Native => "[QA08 §3.1] (elan_gather, elan_alltoall)",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique_per_collective() {
        for c in Collective::ALL {
            let mut names: Vec<&str> = c.algorithms().iter().map(|a| a.name()).collect();
            for a in c.algorithms() {
                assert_eq!(c.parse_algorithm(a.name()), Ok(*a));
            }
            let n = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), n, "{c}");
            let err = c.parse_algorithm("nope").expect_err("unknown");
            assert!(err.contains("accepted") && err.contains("direct"), "{err}");
        }
    }
}
