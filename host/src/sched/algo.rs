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
    /// The root's buffer to every rank's (the same symmetric buffer
    /// everywhere: the root's is its send buffer, the others' their
    /// receive buffer).
    Bcast,
    /// No rank leaves before every rank has entered (no data).
    Barrier,
}

impl Collective {
    /// Every collective.
    pub const ALL: [Collective; 5] = [
        Self::Gather,
        Self::Allgather,
        Self::Alltoall,
        Self::Bcast,
        Self::Barrier,
    ];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Gather => "gather",
            Self::Allgather => "allgather",
            Self::Alltoall => "alltoall",
            Self::Bcast => "bcast",
            Self::Barrier => "barrier",
        }
    }

    /// Does it move data (take a message size)?
    pub fn sized(self) -> bool {
        self != Self::Barrier
    }

    /// The algorithm used where no tuning rule applies: one that runs on
    /// every shape.
    pub fn fallback(self) -> Algorithm {
        match self {
            Self::Gather | Self::Allgather | Self::Alltoall => Algorithm::Direct,
            Self::Bcast | Self::Barrier => Algorithm::Smp,
        }
    }

    /// The algorithm speedups are measured against: the native
    /// (vendor-library) reconstruction of [QA08 §3.1] where there is one,
    /// the point-to-point tree for broadcast, the message-passing barrier
    /// \[GTNP02\] compares against.
    pub fn baseline(self) -> Algorithm {
        match self {
            Self::Gather | Self::Allgather | Self::Alltoall => Algorithm::Native,
            Self::Bcast => Algorithm::Binomial,
            Self::Barrier => Algorithm::SendRecv,
        }
    }

    /// Does it have a root?
    pub fn rooted(self) -> bool {
        matches!(self, Self::Gather | Self::Bcast)
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
                let names: Vec<&str> = Self::ALL.iter().map(|c| c.name()).collect();
                format!("unknown collective '{s}' (accepted: {})", names.join(", "))
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

/// An algorithm of the catalogue (papers \[QA08\], \[KSSKP09\] and
/// \[GTNP02\], and the native baselines of [QA08 §3.1]). One name may serve
/// several collectives (`binomial` is a gather and a broadcast tree); the
/// catalogue says which.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Gather: the k-port spanning binomial tree ((k+1)-ary), [QA08 eq. 1].
    /// Broadcast: the binomial tree over puts.
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
    /// Barrier: RDMA pairwise exchange among all ranks [GTNP02 §5.1].
    Rdma,
    /// Barrier: the node's flat tree; broadcast: through the node segment
    /// (one node only) [GTNP02 §5.2].
    Shm,
    /// Barrier: flat tree per node, RDMA exchange among masters [GTNP02
    /// §5.3]. Broadcast: binomial among node leaders, then shm.
    Smp,
    /// Barrier: recursive doubling over queued messages (the two-sided
    /// baseline of \[GTNP02\]).
    SendRecv,
    /// Barrier: flat tree per node, the switch's combined barrier among
    /// masters. Broadcast: the switch's broadcast to one rank per node,
    /// then shm [ELAN-SEM §13 rules 15, 17].
    Hardware,
}

/// Every name of every algorithm from one list: the host-driven name, the
/// `@nic` one (compiled onto the NICs, [`Drive::Nic`]) and the `@nic-dma`
/// one ([`Drive::NicDma`]).
macro_rules! algorithm_names {
    ($($pat:pat => $name:literal,)*) => {
        impl Algorithm {
            /// Stable name.
            pub fn name(self) -> &'static str {
                use Aggregation::*;
                use LeaderExchange::*;
                match self {
                    $($pat => $name,)*
                }
            }

            /// The name of its form compiled onto the NICs (`name@nic`).
            pub fn nic_name(self) -> &'static str {
                use Aggregation::*;
                use LeaderExchange::*;
                match self {
                    $($pat => concat!($name, "@nic"),)*
                }
            }

            /// The name of its form compiled onto the NICs with their DMA
            /// doing the copies too, local and node (`name@nic-dma`).
            pub fn nic_dma_name(self) -> &'static str {
                use Aggregation::*;
                use LeaderExchange::*;
                match self {
                    $($pat => concat!($name, "@nic-dma"),)*
                }
            }
        }
    };
}

algorithm_names! {
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
    Self::Rdma => "rdma",
    Self::Shm => "shm",
    Self::Smp => "smp",
    Self::SendRecv => "sendrecv",
    Self::Hardware => "hardware",
}

/// Who drives an algorithm's puts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Drive {
    /// The host executor posts every put (the schedule as generated).
    #[default]
    Host,
    /// Compiled onto the NICs ([`crate::sched::offload`]): puts on one
    /// rail whose trigger the NICs can learn about are chained, armed
    /// ahead and started by the NIC; local copies stay with the host.
    /// Spelled `name@nic`.
    Nic,
    /// As [`Drive::Nic`], and the local copies that wait for data the
    /// NICs bring become NIC DMAs too (chained puts to the rank itself),
    /// as do the node phases (copies to and from node peers, and the
    /// flags that order them, become puts to the peers and their
    /// counters), so the NICs go on past them without the host. Spelled
    /// `name@nic-dma`.
    NicDma,
}

impl Drive {
    /// Compiled onto the NICs (either way).
    pub fn offloaded(self) -> bool {
        !matches!(self, Drive::Host)
    }
}

/// An algorithm as it runs: which one, and who drives its puts. Every
/// place that takes an algorithm by name (`--algo`, tuning tables, the
/// library's `_with` calls) takes a choice; an [`Algorithm`] converts into
/// its host-driven choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Choice {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Who drives it.
    pub drive: Drive,
}

impl Choice {
    /// `algorithm`, driven by the host.
    pub const fn host(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            drive: Drive::Host,
        }
    }

    /// `algorithm`, compiled onto the NICs.
    pub const fn nic(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            drive: Drive::Nic,
        }
    }

    /// `algorithm`, compiled onto the NICs, their DMA doing the local
    /// copies too.
    pub const fn nic_dma(algorithm: Algorithm) -> Self {
        Self {
            algorithm,
            drive: Drive::NicDma,
        }
    }

    /// Stable name: the algorithm's, with `@nic` (or `@nic-dma`) when
    /// compiled onto the NICs.
    pub fn name(self) -> &'static str {
        match self.drive {
            Drive::Host => self.algorithm.name(),
            Drive::Nic => self.algorithm.nic_name(),
            Drive::NicDma => self.algorithm.nic_dma_name(),
        }
    }
}

impl From<Algorithm> for Choice {
    fn from(algorithm: Algorithm) -> Self {
        Self::host(algorithm)
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
