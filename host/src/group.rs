//! A communicator's members: which job ranks it holds, in its own rank
//! order, and the shape its schedules are generated for.
//!
//! Contract: a [`Group`] is built identically on every member from the
//! same member list (the world's from the job's topology, a split's from
//! the records every rank of the parent exchanged), so every member derives
//! the same [`Shape`] and the same numbering. Communicator rank `r` is job
//! rank `members[r]`; its *local index* is its position among the
//! communicator's members on its node, in communicator rank order, which
//! is the index of its lines in the communicator's node segment.
//!
//! The schedule shape says what the algorithms may assume
//! ([`Grouping`]): a communicator whose nodes hold the same number of its
//! ranks, numbered by node (block) or across nodes (cyclic), gets a
//! regular topology of its own nodes, and the node-aware algorithms run
//! on it; the switch serves it only if its nodes are contiguous and each
//! local index is the same NIC context on every node (the switch's span
//! operations address a context on every node of a range). Any other
//! communicator is scheduled as one rank per "node", where only the flat
//! algorithms run.

use crate::error::Error;
use crate::topology::{Grouping, Placement, Shape, Topology};

/// The members of a communicator and the shape its schedules use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Job rank of each communicator rank.
    members: Vec<usize>,
    /// (job node, local index in this communicator) of each member.
    located: Vec<(usize, usize)>,
    /// This rank's communicator rank.
    me: usize,
    /// Communicator ranks on this rank's node, by local index.
    node_ranks: Vec<usize>,
    /// The job's local index (the thread or process a wake-up reaches) of
    /// each of them.
    node_job_locals: Vec<usize>,
    /// The shape schedules are generated for.
    shape: Shape,
    /// Lowest and highest job node (the switch's span).
    span: (usize, usize),
}

impl Group {
    /// The whole job, numbered as the job is: the identity group.
    pub fn world(shape: Shape, rank: usize) -> Result<Self, Error> {
        let members: Vec<usize> = (0..shape.size()).collect();
        Self::build(
            members,
            rank,
            shape.topology,
            shape.sockets,
            shape.rails,
            Some(shape),
        )
    }

    /// The communicator of job ranks `members` (in communicator rank
    /// order, distinct) of a job shaped `job`, seen from job rank `rank`
    /// (a member).
    pub fn of(job: &Shape, members: Vec<usize>, rank: usize) -> Result<Self, Error> {
        Self::build(members, rank, job.topology, job.sockets, job.rails, None)
    }

    fn build(
        members: Vec<usize>,
        rank: usize,
        job: Topology,
        sockets: usize,
        rails: usize,
        given: Option<Shape>,
    ) -> Result<Self, Error> {
        if members.is_empty() {
            return Err(Error::BadShape("a communicator needs a member".into()));
        }
        let mut seen = vec![false; job.size()];
        // Nodes in order of their first member; members per node in rank
        // order.
        let mut node_order: Vec<usize> = Vec::new();
        let mut per_node: std::collections::HashMap<usize, Vec<usize>> = Default::default();
        let mut located = Vec::with_capacity(members.len());
        let mut job_local = Vec::with_capacity(members.len());
        for (r, &m) in members.iter().enumerate() {
            let (node, local) = job.locate(m)?;
            match seen.get_mut(m) {
                Some(s) if !*s => *s = true,
                _ => {
                    return Err(Error::BadShape(format!(
                        "job rank {m} is listed twice in a communicator"
                    )));
                }
            }
            let on = per_node.entry(node).or_insert_with(|| {
                node_order.push(node);
                Vec::new()
            });
            located.push((node, on.len()));
            on.push(r);
            job_local.push(local);
        }
        let me = members
            .iter()
            .position(|&m| m == rank)
            .ok_or(Error::BadShape(format!(
                "job rank {rank} is not a member of the communicator"
            )))?;
        let node_ranks = per_node.get(&located[me].0).cloned().unwrap_or_default();
        let node_job_locals = node_ranks.iter().map(|&r| job_local[r]).collect();
        let lo = node_order.iter().copied().min().unwrap_or(0);
        let hi = node_order.iter().copied().max().unwrap_or(0);
        let shape = match given {
            Some(s) => s,
            None => {
                let nodes = node_order.len();
                let per = members.len() / nodes;
                let even = node_order.iter().all(|n| per_node[n].len() == per);
                let index_of: std::collections::HashMap<usize, usize> = node_order
                    .iter()
                    .enumerate()
                    .map(|(i, &n)| (n, i))
                    .collect();
                let numbered = |placement: Placement| {
                    (0..members.len()).all(|r| {
                        let (node, local) = located[r];
                        let idx = index_of.get(&node).copied().unwrap_or(0);
                        let expect = match placement {
                            Placement::Block => idx * per + local,
                            Placement::Cyclic => local * nodes + idx,
                        };
                        expect == r
                    })
                };
                let placement = [Placement::Block, Placement::Cyclic]
                    .into_iter()
                    .find(|&p| even && numbered(p));
                match placement {
                    Some(placement) => {
                        // Local index l is one context on every node, and
                        // the nodes are contiguous: the switch reaches
                        // exactly the members.
                        let contexts = |node: usize| {
                            per_node[&node]
                                .iter()
                                .map(|&r| job_local[r])
                                .collect::<Vec<_>>()
                        };
                        let same_contexts = node_order
                            .iter()
                            .all(|&n| contexts(n) == contexts(node_order[0]));
                        let grouping = if same_contexts && hi - lo + 1 == nodes {
                            Grouping::Nodes
                        } else {
                            Grouping::NodesWithoutSwitch
                        };
                        // Sockets carry over when each member's socket of
                        // the job is its socket in the communicator.
                        let job_socket = |r: usize| job_local[r] * sockets / job.ranks_per_node();
                        let keeps_sockets = per >= sockets
                            && (0..members.len())
                                .all(|r| located[r].1 * sockets / per == job_socket(r));
                        let mut s = Shape::new(
                            nodes,
                            per,
                            if keeps_sockets { sockets } else { 1 },
                            rails,
                            placement,
                        )?;
                        s.grouping = grouping;
                        s
                    }
                    None => {
                        let mut s = Shape::new(members.len(), 1, 1, rails, Placement::Block)?;
                        s.grouping = Grouping::Scattered;
                        s
                    }
                }
            }
        };
        Ok(Self {
            members,
            located,
            me,
            node_ranks,
            node_job_locals,
            shape,
            span: (lo, hi),
        })
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// This rank's communicator rank.
    pub fn rank(&self) -> usize {
        self.me
    }

    /// Job ranks of the members, in communicator rank order.
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// The job rank of communicator rank `rank`.
    pub fn job_rank(&self, rank: usize) -> Result<usize, Error> {
        self.members
            .get(rank)
            .copied()
            .ok_or(Error::RankOutOfRange {
                rank,
                size: self.size(),
            })
    }

    /// (job node, local index in this communicator) of communicator rank
    /// `rank`.
    pub fn locate(&self, rank: usize) -> Result<(usize, usize), Error> {
        self.located
            .get(rank)
            .copied()
            .ok_or(Error::RankOutOfRange {
                rank,
                size: self.size(),
            })
    }

    /// Members on this rank's node (its node segment's ranks).
    pub fn node_size(&self) -> usize {
        self.node_ranks.len()
    }

    /// The job's local index on this node of the member with local index
    /// `local` here: whom a wake-up for it reaches.
    pub fn job_local(&self, local: usize) -> usize {
        self.node_job_locals.get(local).copied().unwrap_or(local)
    }

    /// This rank's local index.
    pub fn local(&self) -> usize {
        self.located[self.me].1
    }

    /// The shape its schedules are generated for.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Lowest and highest job node holding a member.
    pub fn node_span(&self) -> (usize, usize) {
        self.span
    }

    /// The communicator rank of job rank `job_rank`, if a member.
    pub fn rank_of_job(&self, job_rank: usize) -> Option<usize> {
        self.members.iter().position(|&m| m == job_rank)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(nodes: usize, rpn: usize, sockets: usize, placement: Placement) -> Shape {
        Shape::new(nodes, rpn, sockets, 2, placement).expect("shape")
    }

    #[test]
    fn the_world_is_the_identity() {
        let s = job(4, 4, 2, Placement::Cyclic);
        let g = Group::world(s, 6).expect("group");
        assert_eq!((g.rank(), g.size(), g.shape()), (6, 16, s));
        for r in 0..16 {
            assert_eq!(
                g.locate(r).expect("rank"),
                s.topology.locate(r).expect("rank")
            );
        }
        assert_eq!(g.node_size(), 4);
    }

    #[test]
    fn shapes_of_splits() {
        let s = job(4, 4, 2, Placement::Block);
        // Even locals: 4 nodes x 2, block-numbered, contexts {0, 2}
        // everywhere, contiguous: the switch serves it. Sockets: local 0 is
        // socket 0, local 2 socket 1: kept.
        let even: Vec<usize> = (0..16).filter(|r| r % 2 == 0).collect();
        let g = Group::of(&s, even, 4).expect("group");
        let sh = g.shape();
        assert_eq!((sh.nodes(), sh.ranks_per_node(), sh.sockets), (4, 2, 2));
        assert_eq!(
            (sh.placement(), sh.grouping),
            (Placement::Block, Grouping::Nodes)
        );
        assert_eq!(
            (g.rank(), g.locate(2).expect("rank"), g.local()),
            (2, (1, 0), 0)
        );
        // Nodes 0 and 2 only: regular, but the switch would reach node 1.
        let gap: Vec<usize> = (0..4).chain(8..12).collect();
        assert_eq!(
            Group::of(&s, gap, 0).expect("group").shape().grouping,
            Grouping::NodesWithoutSwitch
        );
        // Local 0 on node 0, local 1 on node 1: contexts differ.
        let skew = vec![0, 5];
        let g = Group::of(&s, skew, 5).expect("group");
        assert_eq!(g.shape().grouping, Grouping::NodesWithoutSwitch);
        assert_eq!(g.shape().sockets, 1);
        // Ranks 0, 5, 6 and 11: one, two and one per node.
        let g = Group::of(&s, vec![0, 5, 6, 11], 6).expect("group");
        let sh = g.shape();
        assert_eq!(
            (sh.nodes(), sh.ranks_per_node(), sh.grouping),
            (4, 1, Grouping::Scattered)
        );
        assert_eq!(
            (g.node_size(), g.local(), g.locate(3).expect("rank")),
            (2, 1, (2, 0))
        );
        // Nodes are numbered in order of their first member, locals in
        // rank order: a reversed order is still block-numbered, and local
        // 0 is context 1 on both nodes.
        let g = Group::of(&s, vec![5, 4, 1, 0], 0).expect("group");
        assert_eq!(g.shape().grouping, Grouping::Nodes);
        assert_eq!((g.rank(), g.locate(0).expect("rank")), (3, (1, 0)));
        // Ranks interleaved across nodes out of order: neither numbering.
        let g = Group::of(&s, vec![0, 4, 5, 1], 0).expect("group");
        assert_eq!(g.shape().grouping, Grouping::Scattered);
    }

    #[test]
    fn bad_member_lists_are_refused() {
        let s = job(2, 2, 1, Placement::Block);
        assert!(matches!(Group::of(&s, vec![], 0), Err(Error::BadShape(_))));
        assert!(matches!(
            Group::of(&s, vec![0, 0], 0),
            Err(Error::BadShape(_))
        ));
        assert!(matches!(
            Group::of(&s, vec![0, 4], 0),
            Err(Error::RankOutOfRange { .. })
        ));
        assert!(matches!(
            Group::of(&s, vec![1, 2], 0),
            Err(Error::BadShape(_))
        ));
    }
}
