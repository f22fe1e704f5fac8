//! What a rail's switch does beyond forwarding: broadcast replication and
//! hardware-barrier combining [ELAN-SEM §8, §13 rules 15-17].
//!
//! [`Switch::forward`] decides, for each packet entering the switch, where
//! it goes:
//! - unicast packets go to their `dst_node` (a corrupt header too: the
//!   receiver's checksum drops it);
//! - a broadcast packet is replicated to every node of its contiguous range
//!   except its sender;
//! - a barrier leave (a member's context detached with its barrier
//!   pending) takes back that member's arrival;
//! - a barrier arrival is absorbed and counted for its group (context,
//!   node range, job, tag); when the last member of the group arrives for the
//!   barrier number being collected, the switch sends a release to every
//!   member. An arrival for a number already released (a member that lost
//!   the release and re-sent its arrival) is answered with that release;
//!   a re-sent arrival the switch already counted for the barrier it is
//!   collecting is answered with a [`held`] (since ABI 1.5), which tells the
//!   member's NIC that the switch is alive and the barrier waits for
//!   others (a NIC whose re-sent arrivals go unanswered past its retry
//!   limit gives the barrier up: the switch or its link is dead).
//!
//! The switch keeps a fixed table of [`GROUPS`] groups of at most
//! [`MAX_GROUP_NODES`] nodes; a new group takes a free entry or the least
//! recently completed one. A group that is collecting is not replaced
//! while any member re-announces it: with every entry collecting, a new
//! group's arrival is discarded, as if it had not come yet (answered with
//! a held packet, so that the member keeps waiting), and counted when its
//! member re-announces it (a NIC re-sends an unreleased arrival every
//! timeout, [ELAN-SEM §13] rule 14's "not ready, retry"). A collecting
//! group that no arrival touched for [`STALE_AFTER`] arrivals is
//! abandoned (its members gave up and their leaves were lost) and may be
//! replaced; a member that was only slow re-announces and is counted in a
//! fresh entry.
//!
//! A group's tag (ABI 1.6) is its communicator instance: a communicator
//! opened over the contexts and nodes of an earlier one numbers its
//! barriers from the start again, and without the tag the switch would
//! answer each of them with the earlier communicator's release of that
//! number (a barrier that lets every member out at once).
//!
//! Barrier numbers only move forward within a group: an arrival for a
//! number older than the one being collected comes from a member that
//! lost an earlier release (the others could only start the newer barrier
//! once the older one was released), and is answered with that release
//! instead of wiping the newer barrier's arrivals.

use crate::abi::NodeId;
use crate::abi::packet::{BarrierPacket, HEADER_LEN, Packet, PacketHeader, PacketType, Route};

/// Barrier groups the switch tracks at once.
pub const GROUPS: usize = 32;
/// A collecting group no arrival touched for this many arrivals at the
/// switch is abandoned (its members gave up and their leaves were lost:
/// a live member re-announces its arrival every retransmission timeout)
/// and may be replaced when the table is full.
pub const STALE_AFTER: u64 = 1 << 20;
/// Largest barrier group, in nodes.
pub const MAX_GROUP_NODES: usize = 256;

/// Where a packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// Nowhere (absorbed, or malformed beyond routing).
    Drop,
    /// To one node.
    Unicast(NodeId),
    /// To every node of `low..=high` except `except`.
    Replicate {
        /// First node.
        low: NodeId,
        /// Last node.
        high: NodeId,
        /// The sender, which does not get its own broadcast.
        except: NodeId,
    },
    /// A barrier completed: send [`release`] of `barrier` to every member.
    ReleaseAll(BarrierPacket),
    /// A late arrival: send [`release`] of `barrier` to `node` only.
    ReleaseOne(BarrierPacket, NodeId),
    /// A re-sent arrival already counted: send [`held`] of `barrier` to
    /// `node` only.
    HeldOne(BarrierPacket, NodeId),
}

/// The release packet of `barrier` for `member`.
pub fn release(barrier: &BarrierPacket, member: NodeId) -> PacketHeader {
    Packet::BarrierRelease(to_member(barrier, member)).emit()
}

/// The held packet of `barrier` for `member`.
pub fn held(barrier: &BarrierPacket, member: NodeId) -> PacketHeader {
    Packet::BarrierHeld(to_member(barrier, member)).emit()
}

fn to_member(barrier: &BarrierPacket, member: NodeId) -> BarrierPacket {
    BarrierPacket {
        route: Route {
            dst_node: member,
            ..barrier.route
        },
        ..*barrier
    }
}

#[derive(Clone, Copy, Debug)]
struct Group {
    low: NodeId,
    high: NodeId,
    ctx: u8,
    job_key: u32,
    tag: u32,
    collecting: u32,
    arrived: [u64; MAX_GROUP_NODES / 64],
    count: u32,
    released: Option<u32>,
    /// Completion order, for replacement.
    stamp: u64,
    /// The switch's arrival count when an arrival last touched it.
    touched: u64,
}

impl Group {
    /// Is `b` addressed to this group (context, node range, job, tag)?
    fn is_of(&self, b: &BarrierPacket) -> bool {
        self.low == b.low_node
            && self.high == b.high_node
            && self.ctx == b.route.dst_ctx
            && self.job_key == b.route.job_key
            && self.tag == b.tag
    }

    /// Count `member` as arrived (`true`) or take its arrival back
    /// (`false`); each member counts once. False if it already was so.
    fn mark(&mut self, member: NodeId, arrived: bool) -> bool {
        let bit = (member as usize).wrapping_sub(self.low as usize);
        let Some(word) = self.arrived.get_mut(bit / 64) else {
            return false;
        };
        let mask = 1u64 << (bit % 64);
        if (*word & mask != 0) == arrived {
            return false;
        }
        *word ^= mask;
        self.count = if arrived {
            self.count.wrapping_add(1)
        } else {
            self.count.saturating_sub(1)
        };
        true
    }
}

/// The switch's state.
#[derive(Debug)]
pub struct Switch {
    groups: [Option<Group>; GROUPS],
    clock: u64,
    /// Arrivals of new groups held because every entry was collecting.
    held_for_entry: u64,
}

impl Default for Switch {
    fn default() -> Self {
        Self::new()
    }
}

fn newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl Switch {
    /// An empty switch.
    pub const fn new() -> Self {
        Self {
            groups: [None; GROUPS],
            clock: 0,
            held_for_entry: 0,
        }
    }

    /// Arrivals of new groups the switch held (answered with a held
    /// packet, counted when re-announced) because all [`GROUPS`] entries
    /// were collecting: how often the table's limit was reached.
    pub fn held_for_entry(&self) -> u64 {
        self.held_for_entry
    }

    /// Route one packet (see the module documentation).
    pub fn forward(&mut self, header: &PacketHeader) -> Forward {
        let ptype = PacketType::from_raw(header.ptype);
        if !matches!(
            ptype,
            Some(PacketType::Bcast | PacketType::BarrierArrive | PacketType::BarrierLeave)
        ) {
            return Forward::Unicast(header.dst_node.get());
        }
        match Packet::parse(header) {
            Ok(Packet::Bcast(b)) => Forward::Replicate {
                low: b.route.dst_node,
                high: b.high_node,
                except: b.route.src_node,
            },
            Ok(Packet::BarrierArrive(b)) => self.arrive(b),
            Ok(Packet::BarrierLeave(b)) => {
                self.leave(&b);
                Forward::Drop
            }
            _ => Forward::Drop,
        }
    }

    /// A member left: its arrival for the barrier being collected no
    /// longer counts (a group whose every counted member left is then
    /// free to be replaced).
    fn leave(&mut self, b: &BarrierPacket) {
        let member = b.route.src_node;
        let Some(g) = self.groups.iter_mut().flatten().find(|g| g.is_of(b)) else {
            return;
        };
        if g.count == 0 || g.collecting != b.seq || member < g.low || member > g.high {
            return;
        }
        let _ = g.mark(member, false);
    }

    fn arrive(&mut self, b: BarrierPacket) -> Forward {
        let member = b.route.src_node;
        let members = (b.high_node as usize)
            .saturating_sub(b.low_node as usize)
            .saturating_add(1);
        if member < b.low_node || member > b.high_node || members > MAX_GROUP_NODES {
            return Forward::Drop;
        }
        // Every arrival ages every group (an arrival held for want of an
        // entry too: a table full of abandoned groups must age).
        self.clock = self.clock.wrapping_add(1);
        let clock = self.clock;
        let index = match self
            .groups
            .iter()
            .position(|g| g.as_ref().is_some_and(|g| g.is_of(&b)))
        {
            Some(i) => i,
            None => {
                // A free entry, else the least recently completed group,
                // else an abandoned one; with every group collecting, not
                // yet (see the module doc).
                let free = self.groups.iter().position(Option::is_none);
                let completed = || {
                    self.groups
                        .iter()
                        .enumerate()
                        .filter(|(_, g)| g.is_some_and(|g| g.count == 0))
                        .min_by_key(|(_, g)| g.map_or(0, |g| g.stamp))
                        .map(|(i, _)| i)
                };
                let abandoned = || {
                    self.groups
                        .iter()
                        .enumerate()
                        .filter_map(|(i, g)| g.map(|g| (i, g.touched)))
                        .filter(|(_, t)| clock.wrapping_sub(*t) >= STALE_AFTER)
                        .min_by_key(|(_, t)| *t)
                        .map(|(i, _)| i)
                };
                // Not yet; the member hears the switch is alive.
                let Some(victim) = free.or_else(completed).or_else(abandoned) else {
                    self.held_for_entry = self.held_for_entry.wrapping_add(1);
                    return Forward::HeldOne(b, member);
                };
                if let Some(slot) = self.groups.get_mut(victim) {
                    *slot = Some(Group {
                        low: b.low_node,
                        high: b.high_node,
                        ctx: b.route.dst_ctx,
                        job_key: b.route.job_key,
                        tag: b.tag,
                        collecting: b.seq,
                        arrived: [0; MAX_GROUP_NODES / 64],
                        count: 0,
                        released: None,
                        stamp: 0,
                        touched: clock,
                    });
                }
                victim
            }
        };
        let Some(Some(g)) = self.groups.get_mut(index) else {
            return Forward::Drop;
        };
        g.touched = clock;
        if let Some(r) = g.released
            && !newer(b.seq, r)
        {
            return Forward::ReleaseOne(b, member);
        }
        if g.count > 0 && newer(g.collecting, b.seq) {
            // Older than the barrier being collected: its release was lost.
            return Forward::ReleaseOne(b, member);
        }
        if g.count == 0 || b.seq != g.collecting {
            g.collecting = b.seq;
            g.arrived = [0; MAX_GROUP_NODES / 64];
            g.count = 0;
        }
        if !g.mark(member, true) {
            return Forward::HeldOne(b, member);
        }
        if g.count as usize == members {
            g.released = Some(b.seq);
            g.count = 0;
            g.arrived = [0; MAX_GROUP_NODES / 64];
            g.stamp = clock;
            return Forward::ReleaseAll(b);
        }
        Forward::Drop
    }
}

const _: () = assert!(HEADER_LEN == 64);

#[cfg(test)]
mod tests {
    use super::*;

    /// An arrival of member `node` of `2..=high`, job `job`, barrier `seq`.
    fn group_arrival(job: u32, high: NodeId, node: NodeId, seq: u32) -> PacketHeader {
        Packet::BarrierArrive(BarrierPacket {
            route: Route {
                src_node: node,
                src_ctx: 1,
                dst_node: 2,
                dst_ctx: 1,
                job_key: job,
            },
            low_node: 2,
            high_node: high,
            seq,
            tag: 0,
        })
        .emit()
    }

    fn arrival(node: NodeId, seq: u32) -> PacketHeader {
        group_arrival(5, 4, node, seq)
    }

    #[test]
    fn a_barrier_releases_once_all_members_arrived_and_answers_late_duplicates() {
        let mut s = Switch::new();
        assert_eq!(s.forward(&arrival(2, 7)), Forward::Drop);
        assert!(
            matches!(s.forward(&arrival(2, 7)), Forward::HeldOne(b, 2) if b.seq == 7),
            "a duplicate is counted once, and answered with a held"
        );
        assert_eq!(s.forward(&arrival(3, 7)), Forward::Drop);
        let Forward::ReleaseAll(b) = s.forward(&arrival(4, 7)) else {
            panic!("released");
        };
        assert_eq!(b.seq, 7);
        // A member that lost the release asks again.
        assert!(matches!(
            s.forward(&arrival(3, 7)),
            Forward::ReleaseOne(_, 3)
        ));
        // The next barrier, across the wrap of the sequence.
        let mut s = Switch::new();
        for n in 2..=3 {
            assert_eq!(s.forward(&arrival(n, u32::MAX)), Forward::Drop);
        }
        assert!(matches!(
            s.forward(&arrival(4, u32::MAX)),
            Forward::ReleaseAll(_)
        ));
        assert_eq!(
            s.forward(&arrival(2, 0)),
            Forward::Drop,
            "0 follows u32::MAX"
        );
        assert_eq!(s.forward(&arrival(3, 0)), Forward::Drop);
        assert!(matches!(s.forward(&arrival(4, 0)), Forward::ReleaseAll(b) if b.seq == 0));
    }

    /// An arrival of member `node` of `2..=3`, group `job`, barrier `seq`.
    fn arrival_of(job: u32, node: NodeId, seq: u32) -> PacketHeader {
        group_arrival(job, 3, node, seq)
    }

    #[test]
    fn a_full_table_never_replaces_a_collecting_group() {
        let mut s = Switch::new();
        // Every entry collecting: one of two members arrived in each.
        for job in 0..GROUPS as u32 {
            assert_eq!(s.forward(&arrival_of(job, 2, 1)), Forward::Drop);
        }
        // A new group finds no entry: not counted yet, but the member hears
        // that the switch is alive...
        assert!(matches!(
            s.forward(&arrival_of(99, 2, 1)),
            Forward::HeldOne(b, 2) if b.seq == 1
        ));
        // ...and every collecting group kept its arrival.
        for job in 0..GROUPS as u32 {
            assert!(
                matches!(s.forward(&arrival_of(job, 3, 1)), Forward::ReleaseAll(b) if b.seq == 1),
                "group {job} lost its first arrival"
            );
        }
        // Now completed groups can be replaced: the new group's members
        // re-announce and it completes.
        assert_eq!(s.forward(&arrival_of(99, 2, 1)), Forward::Drop);
        assert!(matches!(
            s.forward(&arrival_of(99, 3, 1)),
            Forward::ReleaseAll(_)
        ));
    }

    /// Groups whose members gave up and whose leaves were lost fill the
    /// table; once no arrival touched them for [`STALE_AFTER`] arrivals,
    /// a new group takes one, while a group a member keeps re-announcing
    /// is kept.
    #[test]
    fn abandoned_groups_are_replaced_live_ones_are_not() {
        let mut s = Switch::new();
        // Group 0 is live (its member re-announces); the others abandoned.
        for job in 0..GROUPS as u32 {
            assert_eq!(s.forward(&arrival_of(job, 2, 1)), Forward::Drop);
        }
        let mut last = Forward::Drop;
        for i in 0..STALE_AFTER {
            // A new group asks for an entry; group 0's member re-announces
            // now and then (a timeout is many arrivals long).
            last = s.forward(&arrival_of(99, 2, 1));
            if i % 1024 == 0 {
                assert!(matches!(
                    s.forward(&arrival_of(0, 2, 1)),
                    Forward::HeldOne(..)
                ));
            }
            if last == Forward::Drop {
                break;
            }
        }
        assert_eq!(last, Forward::Drop, "the new group took an abandoned entry");
        assert!(
            matches!(s.forward(&arrival_of(99, 3, 1)), Forward::ReleaseAll(b) if b.seq == 1),
            "and completes"
        );
        // The live group kept its counted arrival.
        assert!(matches!(
            s.forward(&arrival_of(0, 3, 1)),
            Forward::ReleaseAll(b) if b.seq == 1
        ));
    }

    #[test]
    fn a_stale_arrival_does_not_wipe_the_next_barrier() {
        let mut s = Switch::new();
        for job in 0..GROUPS as u32 {
            s.forward(&arrival_of(job, 2, 7));
            assert!(matches!(
                s.forward(&arrival_of(job, 3, 7)),
                Forward::ReleaseAll(_)
            ));
        }
        // Group 0 (the least recently completed) is replaced; then node 2
        // starts barrier 8 of group 0 again from a fresh entry...
        s.forward(&arrival_of(99, 2, 1));
        assert_eq!(s.forward(&arrival_of(0, 2, 8)), Forward::Drop);
        // ...and node 3, which lost the release of 7, asks again: it is
        // released, and node 2's arrival for 8 is kept.
        assert!(matches!(
            s.forward(&arrival_of(0, 3, 7)),
            Forward::ReleaseOne(b, 3) if b.seq == 7
        ));
        assert!(matches!(
            s.forward(&arrival_of(0, 3, 8)),
            Forward::ReleaseAll(b) if b.seq == 8
        ));
    }

    /// A later communicator over the same contexts and nodes numbers its
    /// barriers from the start again, with a new tag: its first barrier
    /// waits for every member, however far the earlier one counted.
    #[test]
    fn a_new_tag_is_a_new_group_whatever_the_numbers() {
        let tagged = |node: NodeId, seq: u32, tag: u32| {
            let Ok(Packet::BarrierArrive(b)) = Packet::parse(&arrival(node, seq)) else {
                panic!("an arrival");
            };
            Packet::BarrierArrive(BarrierPacket { tag, ..b }).emit()
        };
        let mut s = Switch::new();
        for seq in 1..=100 {
            for n in 2..=3 {
                assert_eq!(s.forward(&tagged(n, seq, 0)), Forward::Drop);
            }
            assert!(matches!(
                s.forward(&tagged(4, seq, 0)),
                Forward::ReleaseAll(_)
            ));
        }
        // Without the tag in the key, this was answered with the release
        // of the earlier communicator's barrier 1.
        assert_eq!(s.forward(&tagged(2, 1, 1)), Forward::Drop);
        assert_eq!(s.forward(&tagged(3, 1, 1)), Forward::Drop);
        assert!(
            matches!(s.forward(&tagged(4, 1, 1)), Forward::ReleaseAll(b) if b.seq == 1 && b.tag == 1)
        );
        // The earlier communicator's late member still hears its release.
        assert!(matches!(
            s.forward(&tagged(3, 100, 0)),
            Forward::ReleaseOne(b, 3) if b.seq == 100 && b.tag == 0
        ));
    }

    #[test]
    fn a_member_that_left_is_no_longer_counted() {
        let mut s = Switch::new();
        let leave = |node: NodeId, seq: u32| {
            let Ok(Packet::BarrierArrive(b)) = Packet::parse(&arrival(node, seq)) else {
                panic!("an arrival");
            };
            Packet::BarrierLeave(b).emit()
        };
        s.forward(&arrival(2, 7));
        s.forward(&arrival(3, 7));
        assert_eq!(s.forward(&leave(3, 7)), Forward::Drop);
        assert_eq!(
            s.forward(&leave(3, 6)),
            Forward::Drop,
            "another barrier: ignored"
        );
        assert_eq!(s.forward(&arrival(4, 7)), Forward::Drop, "node 3 left");
        assert!(matches!(
            s.forward(&arrival(3, 7)),
            Forward::ReleaseAll(b) if b.seq == 7
        ));
    }

    #[test]
    fn broadcasts_replicate_and_unicasts_pass() {
        let mut s = Switch::new();
        let ack = Packet::Ack(crate::abi::packet::AckPacket {
            kind: crate::abi::packet::AckKind::Nack,
            src_node: 1,
            dst_node: 9,
            cum_seq: 0,
            err_bits: 0,
            err_code: None,
            refused: 0,
            flow: 1,
        });
        assert_eq!(s.forward(&ack.emit()), Forward::Unicast(9));
        let b = Packet::Bcast(crate::abi::packet::BcastPacket {
            route: Route {
                src_node: 3,
                src_ctx: 0,
                dst_node: 0,
                dst_ctx: 0,
                job_key: 1,
            },
            high_node: 7,
            id: 1,
            index: 0,
            addr: 0,
            len: 0,
            event: u32::MAX,
            cookie: 0,
            last: true,
            dma_addr: 0,
            dma_len: 0,
        });
        assert_eq!(
            s.forward(&b.emit()),
            Forward::Replicate {
                low: 0,
                high: 7,
                except: 3
            }
        );
    }
}
