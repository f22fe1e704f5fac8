//! Ranks, nodes and placement.

use crate::error::Error;
use crate::stripe::MAX_RAILS;
use railcoll_fw::abi::MAX_CONTEXTS;

/// How ranks are numbered across nodes (Elan capability types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Placement {
    /// Consecutive ranks share a node.
    #[default]
    Block,
    /// Consecutive ranks are on consecutive nodes.
    Cyclic,
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "block" => Ok(Placement::Block),
            "cyclic" => Ok(Placement::Cyclic),
            other => Err(format!(
                "unknown placement '{other}' (accepted: block, cyclic)"
            )),
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Placement::Block => "block",
            Placement::Cyclic => "cyclic",
        })
    }
}

/// The shape of a job: nodes x ranks per node, with a placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Topology {
    nodes: usize,
    ranks_per_node: usize,
    placement: Placement,
}

/// Largest node count a communicator accepts (node ids are 16 bits).
pub const MAX_NODES: usize = 1 << 15;

impl Topology {
    /// Validate a shape.
    pub fn new(nodes: usize, ranks_per_node: usize, placement: Placement) -> Result<Self, Error> {
        if nodes == 0 || nodes > MAX_NODES {
            return Err(Error::BadShape(format!(
                "nodes must be 1..={MAX_NODES}, got {nodes}"
            )));
        }
        if ranks_per_node == 0 || ranks_per_node > MAX_CONTEXTS {
            return Err(Error::BadShape(format!(
                "ranks per node must be 1..={MAX_CONTEXTS}, got {ranks_per_node}"
            )));
        }
        Ok(Self {
            nodes,
            ranks_per_node,
            placement,
        })
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Ranks per node.
    pub fn ranks_per_node(&self) -> usize {
        self.ranks_per_node
    }

    /// Total ranks.
    pub fn size(&self) -> usize {
        self.nodes * self.ranks_per_node
    }

    /// Placement.
    pub fn placement(&self) -> Placement {
        self.placement
    }

    /// (node, local index) of a rank.
    pub fn locate(&self, rank: usize) -> Result<(usize, usize), Error> {
        if rank >= self.size() {
            return Err(Error::RankOutOfRange {
                rank,
                size: self.size(),
            });
        }
        Ok(match self.placement {
            Placement::Block => (rank / self.ranks_per_node, rank % self.ranks_per_node),
            Placement::Cyclic => (rank % self.nodes, rank / self.nodes),
        })
    }

    /// Rank at (node, local index).
    pub fn rank_of(&self, node: usize, local: usize) -> Result<usize, Error> {
        if node >= self.nodes || local >= self.ranks_per_node {
            return Err(Error::BadShape(format!(
                "no rank at node {node}, local {local} in a {}x{} job",
                self.nodes, self.ranks_per_node
            )));
        }
        Ok(match self.placement {
            Placement::Block => node * self.ranks_per_node + local,
            Placement::Cyclic => local * self.nodes + node,
        })
    }

    /// The NIC capability of this job (same numbering as [`Topology::locate`]).
    pub fn capability(&self) -> railcoll_fw::abi::regs::Capability {
        use railcoll_fw::abi::regs::{Capability, Placement as P};
        Capability {
            low_node: 0,
            node_count: self.nodes as u16,
            ranks_per_node: self.ranks_per_node as u8,
            ctx_base: 0,
            placement: match self.placement {
                Placement::Block => P::Block,
                Placement::Cyclic => P::Cyclic,
            },
        }
    }
}

/// The cluster shape, defined once: nodes and ranks per node with their
/// placement, sockets per node, rails. A communicator runs on one
/// ([`crate::CommConfig::shape`]), schedules are generated for one, and the
/// emulator builds its clusters from one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Nodes and ranks per node, with placement.
    pub topology: Topology,
    /// Sockets per node (multi-leader algorithms: at most one leader per
    /// socket).
    pub sockets: usize,
    /// Rails = k ports.
    pub rails: usize,
    /// How the ranks sit on the nodes: what node-aware and switch
    /// algorithms may assume.
    pub grouping: Grouping,
}

/// How a communicator's ranks sit on its nodes: what the algorithms that
/// use the node segment or the switch may assume (docs/library.md,
/// "Communicators").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Grouping {
    /// As the topology says, and the switch's span operations reach
    /// exactly its nodes at one context per local index: the whole job,
    /// and a regular communicator over contiguous nodes whose local
    /// index `l` is the same NIC context on every node.
    #[default]
    Nodes,
    /// As the topology says (node segment phases work), but the switch
    /// cannot serve it: its nodes are not contiguous, or a local index is
    /// a different context on different nodes.
    NodesWithoutSwitch,
    /// Irregular (ranks per node differ): scheduled as one rank per
    /// "node", so only algorithms that need nothing of the shape run.
    Scattered,
}

impl Grouping {
    /// Do the node segment's phases apply (the topology's nodes are real)?
    pub fn nodes(self) -> bool {
        self != Grouping::Scattered
    }

    /// Does the switch serve the communicator?
    pub fn switch(self) -> bool {
        self == Grouping::Nodes
    }
}

impl Default for Shape {
    /// Two single-rank nodes, one socket, two rails: the smallest shape
    /// with a network hop and rail striping (the emulator's default
    /// cluster).
    fn default() -> Self {
        Self {
            topology: Topology {
                nodes: 2,
                ranks_per_node: 1,
                placement: Placement::Block,
            },
            sockets: 1,
            rails: 2,
            grouping: Grouping::Nodes,
        }
    }
}

impl Shape {
    /// Validate a shape.
    pub fn new(
        nodes: usize,
        ranks_per_node: usize,
        sockets: usize,
        rails: usize,
        placement: Placement,
    ) -> Result<Self, Error> {
        let topology = Topology::new(nodes, ranks_per_node, placement)?;
        if !(1..=MAX_RAILS).contains(&rails) {
            return Err(Error::BadRails(rails));
        }
        if !(1..=64).contains(&sockets) {
            return Err(Error::BadShape(format!(
                "sockets must be 1..=64, got {sockets}"
            )));
        }
        Ok(Self {
            topology,
            sockets,
            rails,
            grouping: Grouping::Nodes,
        })
    }

    /// Ranks.
    pub fn size(&self) -> usize {
        self.topology.size()
    }

    /// Nodes.
    pub fn nodes(&self) -> usize {
        self.topology.nodes()
    }

    /// Ranks per node.
    pub fn ranks_per_node(&self) -> usize {
        self.topology.ranks_per_node()
    }

    /// Rank placement.
    pub fn placement(&self) -> Placement {
        self.topology.placement()
    }

    /// The same placement and rails with `nodes` x `ranks_per_node`
    /// ranks and `sockets` sockets per node.
    pub fn resized(
        &self,
        nodes: usize,
        ranks_per_node: usize,
        sockets: usize,
    ) -> Result<Self, Error> {
        Self::new(nodes, ranks_per_node, sockets, self.rails, self.placement())
    }

    /// Socket of local rank `local` (ranks spread evenly over sockets).
    pub fn socket_of(&self, local: usize) -> usize {
        local * self.sockets / self.topology.ranks_per_node()
    }

    /// Which socket of the whole shape rank `rank` is on: `node * sockets
    /// + socket_of(local)`. The one definition of "the same socket": the
    /// colour [`Comm::split_type`](crate::Comm::split_type) splits by, and
    /// the groups of [`Shape::socket_groups`].
    pub fn socket_index(&self, rank: usize) -> Result<usize, Error> {
        let (node, local) = self.topology.locate(rank)?;
        Ok(node * self.sockets + self.socket_of(local))
    }

    /// The ranks of each socket, in rank order, sockets in the order of
    /// [`Shape::socket_index`] (node by node): the groups
    /// `split_type(SplitType::Socket)` forms over a communicator of this
    /// shape, and the multi-leader algorithms' groups, whose first rank is
    /// the socket's leader [KSSKP09 §4]. A socket without ranks (more
    /// sockets than ranks per node) has no group.
    pub fn socket_groups(&self) -> Vec<Vec<usize>> {
        let mut groups: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for rank in 0..self.size() {
            if let Ok(socket) = self.socket_index(rank) {
                groups.entry(socket).or_default().push(rank);
            }
        }
        groups.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_groups_are_ranks_by_node_and_socket_leader_first() {
        let block = Shape::new(2, 4, 2, 1, Placement::Block).expect("shape");
        assert_eq!(
            block.socket_groups(),
            vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6, 7]]
        );
        let cyclic = Shape::new(2, 4, 2, 1, Placement::Cyclic).expect("shape");
        assert_eq!(
            cyclic.socket_groups(),
            vec![vec![0, 2], vec![4, 6], vec![1, 3], vec![5, 7]]
        );
        // More sockets than ranks: every rank its own socket (the
        // multi-leader generator once capped the socket index and put
        // locals 1 and 2 of this shape in one group while the socket split
        // kept them apart).
        let sparse = Shape::new(2, 3, 8, 1, Placement::Block).expect("shape");
        assert_eq!(sparse.socket_groups().len(), 6);
        assert!(sparse.socket_groups().iter().all(|g| g.len() == 1));
    }

    #[test]
    fn host_and_nic_agree_on_rank_locations() {
        for placement in [Placement::Block, Placement::Cyclic] {
            let t = Topology::new(5, 3, placement).expect("shape");
            let cap = t.capability();
            for rank in 0..t.size() {
                let (node, local) = t.locate(rank).expect("rank");
                assert_eq!(t.rank_of(node, local).expect("inverse"), rank);
                assert_eq!(cap.locate(rank as u32), Some((node as u16, local as u8)));
            }
            assert!(t.locate(15).is_err());
        }
        assert!(Topology::new(0, 1, Placement::Block).is_err());
        assert!(Topology::new(1, 17, Placement::Block).is_err());
    }
}
