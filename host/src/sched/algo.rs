//! Collectives and algorithms, and their stable names (CLI, tuning table,
//! benchmarks). Which algorithm applies to which collective, where it
//! comes from and how it is generated is the catalogue's business
//! ([`crate::sched::catalogue`]).

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
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
