//! Broadcasts.
//!
//! - [`BcastAlgorithm::Binomial`]: a binomial tree over puts among all
//!   ranks (relative to the root). A rank first tells its parent it is
//!   ready (so a parent never overwrites a buffer a child's caller may still
//!   be reading), waits for the data (destination event: every rail part),
//!   then serves its children, largest subtree first. ceil(log2 N) rounds.
//! - [`BcastAlgorithm::Shm`]: through the node segment (single node only).
//! - [`BcastAlgorithm::Smp`]: binomial tree among node leaders (the root,
//!   and local rank 0 of every other node), then shm within each node.
//! - [`BcastAlgorithm::Hardware`]: the ranks with the root's local index
//!   (its context on every node) tell the root they are ready; the root's
//!   NIC sends one BCAST_DMA that the rail's switch replicates to every
//!   node [ELAN-SEM §13 rule 15]; then shm within each node.

use super::state::Coll;
use crate::arena::SymBuffer;
use crate::endpoint::{Arrivals, TransferOptions};
use crate::error::Error;

/// Broadcast algorithms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BcastAlgorithm {
    /// Binomial tree over puts, all ranks.
    Binomial,
    /// Shared memory (single node only).
    Shm,
    /// Binomial among node leaders, then shared memory.
    Smp,
    /// The rail switch's broadcast (BCAST_DMA) to the root's context on
    /// every node, then shared memory.
    Hardware,
}

impl BcastAlgorithm {
    /// Every algorithm.
    pub const ALL: [BcastAlgorithm; 4] = [Self::Binomial, Self::Shm, Self::Smp, Self::Hardware];

    /// Stable name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Binomial => "binomial",
            Self::Shm => "shm",
            Self::Smp => "smp",
            Self::Hardware => "hardware",
        }
    }
}

impl std::str::FromStr for BcastAlgorithm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        super::parse_named(&Self::ALL, Self::name, "broadcast", s)
    }
}

impl Coll<'_> {
    /// Broadcast `buf` (the same symmetric buffer on every rank) from
    /// `root`, with the default algorithm ([`BcastAlgorithm::Smp`]).
    pub(crate) fn broadcast(&self, buf: &SymBuffer, root: usize) -> Result<(), Error> {
        self.broadcast_with(BcastAlgorithm::Smp, buf, root)
    }

    /// Broadcast with a chosen algorithm.
    pub(crate) fn broadcast_with(
        &self,
        algorithm: BcastAlgorithm,
        buf: &SymBuffer,
        root: usize,
    ) -> Result<(), Error> {
        if root >= self.size() {
            return Err(Error::RankOutOfRange {
                rank: root,
                size: self.size(),
            });
        }
        match algorithm {
            BcastAlgorithm::Binomial => {
                let members: Vec<usize> = (0..self.size()).collect();
                self.binomial_bcast(&members, root, buf)
            }
            BcastAlgorithm::Shm => {
                if self.topology().nodes() > 1 {
                    return Err(Error::Unsupported {
                        algorithm: "shm broadcast",
                        reason: format!(
                            "it reaches one node, the communicator spans {}",
                            self.topology().nodes()
                        ),
                    });
                }
                let (_, root_local) = self.topology().locate(root)?;
                self.node_bcast(buf, root_local)
            }
            BcastAlgorithm::Hardware => {
                let topo = *self.topology();
                let (_, root_local) = topo.locate(root)?;
                if topo.locate(self.rank())?.1 == root_local {
                    self.hw_bcast_leaders(buf, root)?;
                }
                self.node_bcast(buf, root_local)
            }
            BcastAlgorithm::Smp => {
                let leaders = self.node_leaders(root)?;
                if leaders.contains(&self.rank()) {
                    self.binomial_bcast(&leaders, root, buf)?;
                }
                let leader = leaders[self.node()];
                let (_, leader_local) = self.topology().locate(leader)?;
                self.node_bcast(buf, leader_local)
            }
        }
    }

    /// Binomial-tree broadcast among `members`, from rank `root` (which
    /// must be a member); this rank must be a member.
    pub(crate) fn binomial_bcast(
        &self,
        members: &[usize],
        root: usize,
        buf: &SymBuffer,
    ) -> Result<(), Error> {
        let n = members.len();
        let index = |rank: usize| members.iter().position(|&m| m == rank);
        let (Some(me), Some(root_id)) = (index(self.rank()), index(root)) else {
            return Err(Error::Config(
                "broadcast member list lacks this rank or the root".into(),
            ));
        };
        // Ranks relative to the root: the root is 0.
        let vr = (me + n - root_id) % n;
        let member = |v: usize| members[(v + root_id) % n];
        let coll = &self.st.bufs;
        let mut one_ready = Arrivals::new();
        one_ready.add(0, 1);
        if vr != 0 {
            let parent = vr & (vr - 1);
            self.notify(member(parent), &coll.bcast_ready, &coll.scratch)?;
            let arrivals = self.expected_arrivals(
                self.config().policy,
                member(parent),
                self.rank(),
                buf.len(),
                1,
            );
            self.wait_arrivals(&coll.bcast_data, &arrivals)?;
        }
        // Children: vr + 2^k for every 2^k above vr's lowest set bit
        // (all k for the root), largest subtree first.
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
            return Ok(());
        }
        let mut ready = Arrivals::new();
        ready.add(0, children.len() as u32);
        self.wait_arrivals(&coll.bcast_ready, &ready)?;
        let opts = TransferOptions {
            dest_event: Some(coll.bcast_data),
            ..TransferOptions::default()
        };
        let handles: Vec<_> = children
            .iter()
            .map(|&c| self.put_with(buf, c, buf, opts))
            .collect::<Result<_, _>>()?;
        for h in handles {
            h.wait()?;
        }
        Ok(())
    }

    /// Shared-memory broadcast of `buf` within this node from local rank
    /// `root_local`.
    pub(crate) fn node_bcast(&self, buf: &SymBuffer, root_local: usize) -> Result<(), Error> {
        if self.topology().ranks_per_node() == 1 {
            return Ok(());
        }
        let mine = self.local_memory(buf)?;
        let sync = self.hook_sync();
        let hook = self.wait_arc();
        let to_segment = |offset: usize, seg: &railcoll_mem::dma_mem::DmaMemory| {
            hook.observer().host_copy(seg.len(), false);
            seg.copy_from(0, &mine, offset, seg.len())
                .map_err(|e| crate::error::out_of_range("the buffer", e))
        };
        let from_segment = |offset: usize, seg: &railcoll_mem::dma_mem::DmaMemory| {
            hook.observer().host_copy(seg.len(), false);
            mine.copy_from(offset, seg, 0, seg.len())
                .map_err(|e| crate::error::out_of_range("the buffer", e))
        };
        let (mut fill, mut drain) = (to_segment, from_segment);
        self.st
            .shm
            .borrow_mut()
            .broadcast(&sync, root_local, buf.len(), &mut fill, &mut drain)
    }
}

impl Coll<'_> {
    /// Gather `send` (the same length on every rank of this node) into
    /// `recv` on local rank `root_local`, block `i` from local rank `i`,
    /// through the node segment. The root's own block is copied straight
    /// to its place [QA08 Fig. 7]. `recv` must hold `locals * send.len()`
    /// bytes on the root (it is ignored elsewhere).
    pub(crate) fn node_gather(
        &self,
        send: &SymBuffer,
        recv: &SymBuffer,
        root_local: usize,
    ) -> Result<(), Error> {
        let locals = self.topology().ranks_per_node();
        let (_, me) = self.topology().locate(self.rank())?;
        if root_local >= locals {
            return Err(Error::RankOutOfRange {
                rank: root_local,
                size: locals,
            });
        }
        let block = send.len();
        if me == root_local && recv.len() < locals * block {
            return Err(Error::OutOfBounds {
                what: "the receive buffer",
                offset: 0,
                len: locals * block,
                limit: recv.len(),
            });
        }
        let src = self.local_memory(send)?;
        let dst = if me == root_local {
            Some(self.local_memory(recv)?)
        } else {
            None
        };
        let range_err = |e| crate::error::out_of_range("the gather buffers", e);
        let sync = self.hook_sync();
        let hook = self.wait_arc();
        let mut own = |offset: usize, chunk: usize| -> Result<(), Error> {
            match &dst {
                Some(d) => {
                    hook.observer().host_copy(chunk, false);
                    d.copy_from(root_local * block + offset, &src, offset, chunk)
                        .map_err(range_err)
                }
                None => Ok(()),
            }
        };
        let mut fill = |offset: usize, slot: &railcoll_mem::dma_mem::DmaMemory| {
            hook.observer().host_copy(slot.len(), false);
            slot.copy_from(0, &src, offset, slot.len())
                .map_err(range_err)
        };
        let mut collect = |rank: usize,
                           offset: usize,
                           slot: &railcoll_mem::dma_mem::DmaMemory|
         -> Result<(), Error> {
            match &dst {
                Some(d) => {
                    hook.observer().host_copy(slot.len(), false);
                    d.copy_from(rank * block + offset, slot, 0, slot.len())
                        .map_err(range_err)
                }
                None => Ok(()),
            }
        };
        if block == 0 {
            return Ok(());
        }
        self.st
            .shm
            .borrow_mut()
            .gather(&sync, root_local, block, &mut own, &mut fill, &mut collect)
    }
}

impl Coll<'_> {
    /// The hardware broadcast among the ranks sharing the root's local index
    /// (one per node), on rail 0. This rank must be one of them.
    pub(crate) fn hw_bcast_leaders(&self, buf: &SymBuffer, root: usize) -> Result<(), Error> {
        let nodes = self.topology().nodes();
        if nodes <= 1 {
            return Ok(());
        }
        let coll = &self.st.bufs;
        let mut one = Arrivals::new();
        one.add(0, 1);
        if self.rank() != root {
            self.notify(root, &coll.bcast_ready, &coll.scratch)?;
            return self.wait_arrivals(&coll.bcast_data, &one);
        }
        let mut ready = Arrivals::new();
        ready.add(0, (nodes - 1) as u32);
        self.wait_arrivals(&coll.bcast_ready, &ready)?;
        self.hw_bcast_post(buf, buf, Some(coll.bcast_data))?.wait()
    }
}
