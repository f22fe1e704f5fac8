//! The switch of one rail: a crossbar with one inbox per node. When the
//! rail's nodes are on several hosts, packets for another host's nodes,
//! and for a switch on another host, go as datagrams
//! ([`crate::threads::udp`]).
//!
//! A packet is a header plus, for data, a *reference* to the payload in the
//! sender node's memory; the receiving NIC copies the bytes straight from
//! there into its own node's memory (one copy per byte). Delivery between
//! a pair of nodes is in order, and nothing is lost, unless faults are
//! injected ([`crate::hw::faults`]): then every packet taking the rail, and
//! every copy its switch sends on, is judged at wall time since the
//! cluster's start. A delayed packet is held on the rail and goes once
//! its time has passed and the rail carries its next packet (a quiet rail
//! holds it until a retransmission comes: a delay then acts as a loss).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender, unbounded};
use railcoll_fw::switch::Switch;

use crate::hw::faults::{Fate, RailFaults};
use crate::hw::notify::{Notifier, clock_ns};
use crate::hw::wire::{RailPacket, is_collective, route_collective};
use crate::threads::udp::{PacketSink, RailNet};

/// One rail's switch.
#[derive(Debug)]
pub struct Rail {
    inboxes: Vec<Sender<RailPacket>>,
    notifiers: Vec<Notifier>,
    /// Broadcast replication and barrier combining (the firmware crate's
    /// switch model). Only collective packets take the lock.
    switch: Mutex<Switch>,
    /// The injected faults (none: no lock is taken).
    faults: Option<Mutex<RailFaults>>,
    /// Delayed packets: when each may go, and where (None: to the switch).
    held: Mutex<Vec<(u64, Option<usize>, RailPacket)>>,
    epoch: Instant,
    /// Packets the rail's receive ports discarded for a bad payload CRC.
    crc_discards: AtomicU64,
    /// Packets dropped at a receive port past the packet lifetime.
    expired: AtomicU64,
    /// The rail's datagrams to and from other hosts, when its nodes are
    /// on several ([`crate::threads::udp`]).
    net: Option<RailNet>,
}

impl Rail {
    /// A switch for `notifiers.len()` nodes, with `faults` injected (times
    /// from `epoch`); returns it and each node's inbox.
    pub fn new(
        notifiers: Vec<Notifier>,
        faults: Option<RailFaults>,
        epoch: Instant,
        net: Option<RailNet>,
    ) -> (Self, Vec<Receiver<RailPacket>>) {
        let (senders, receivers): (Vec<_>, Vec<_>) = notifiers.iter().map(|_| unbounded()).unzip();
        (
            Self {
                inboxes: senders,
                notifiers,
                switch: Mutex::new(Switch::new()),
                faults: faults.map(Mutex::new),
                held: Mutex::new(Vec::new()),
                epoch,
                crc_discards: AtomicU64::new(0),
                expired: AtomicU64::new(0),
                net,
            },
            receivers,
        )
    }

    /// Switch a packet: unicast to its destination, replicate a broadcast,
    /// absorb a barrier arrival (and release the group once complete).
    /// False if it names no node of the rail.
    pub fn switch(&self, packet: RailPacket) -> bool {
        if let Some(net) = &self.net
            && !net.switch_is_here()
        {
            return net.to_switch(&packet);
        }
        self.switch_here(packet)
    }

    /// [`Rail::switch`] through this process's switch.
    fn switch_here(&self, packet: RailPacket) -> bool {
        if self.faults.is_some() {
            self.release_held();
        }
        self.hop(packet, None)
    }

    /// The counts of the faults injected so far.
    pub fn fault_counts(&self) -> crate::hw::faults::FaultCounts {
        self.faults.as_ref().map_or_else(Default::default, |f| {
            f.lock().unwrap_or_else(|p| p.into_inner()).counts()
        })
    }

    /// A receive port dropped a packet past the packet lifetime.
    pub fn count_expired(&self) {
        self.expired.fetch_add(1, Ordering::Relaxed);
    }

    /// Packets the receive ports dropped past the packet lifetime.
    pub fn expired(&self) -> u64 {
        self.expired.load(Ordering::Relaxed)
    }

    /// A receive port of the rail discarded a packet for its CRC.
    pub fn count_crc_discard(&self) {
        self.crc_discards.fetch_add(1, Ordering::Relaxed);
    }

    /// Packets discarded for their CRC so far.
    pub fn crc_discards(&self) -> u64 {
        self.crc_discards.load(Ordering::Relaxed)
    }

    /// Barrier arrivals the switch held for want of a group entry.
    pub fn held_for_entry(&self) -> u64 {
        self.switch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .held_for_entry()
    }

    /// One hop of `packet`: into the switch (`to` None) or to node `to`,
    /// through the faults.
    fn hop(&self, mut packet: RailPacket, to: Option<usize>) -> bool {
        let fate = match &self.faults {
            None => Fate::Deliver,
            Some(f) => {
                let now = clock_ns(self.epoch);
                let fate = f
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .judge(&mut packet, now);
                if let Fate::Delayed(ns) = fate {
                    let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
                    held.push((now.saturating_add(ns), to, packet.clone()));
                }
                fate
            }
        };
        match fate {
            Fate::Deliver | Fate::Corrupted => self.go(packet, to),
            Fate::Duplicated => self.go(packet.clone(), to) & self.go(packet, to),
            // The sender cannot tell; its retransmission recovers it.
            Fate::Lost(_) | Fate::Delayed(_) => true,
        }
    }

    fn go(&self, packet: RailPacket, to: Option<usize>) -> bool {
        match to {
            Some(node) => self.deliver(node, packet),
            None if is_collective(&packet) => {
                let mut ok = true;
                let mut sw = self.switch.lock().unwrap_or_else(|p| p.into_inner());
                route_collective(&mut sw, packet, &mut |node, p| {
                    ok &= self.hop(p, Some(node))
                });
                ok
            }
            None => self.deliver(packet.header.dst_node.get() as usize, packet),
        }
    }

    /// Send on the held packets whose time has passed.
    fn release_held(&self) {
        let now = clock_ns(self.epoch);
        let due: Vec<_> = {
            let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
            if held.is_empty() {
                return;
            }
            let (due, keep) = held.drain(..).partition(|h| h.0 <= now);
            *held = keep;
            due
        };
        for (_, to, packet) in due {
            self.go(packet, to);
        }
    }

    /// The rail's side of the network, if its nodes are on several hosts.
    pub fn net(&self) -> Option<&RailNet> {
        self.net.as_ref()
    }

    /// Put a packet in `node`'s inbox, or send it to `node`'s host. False
    /// if there is no such node.
    pub fn deliver(&self, node: usize, packet: RailPacket) -> bool {
        if let Some(net) = &self.net
            && !net.is_local(node)
        {
            return net.to_node(node, &packet);
        }
        self.deliver_here(node, packet)
    }

    /// Put a packet in `node`'s inbox (a node of this process).
    fn deliver_here(&self, node: usize, packet: RailPacket) -> bool {
        match (self.inboxes.get(node), self.notifiers.get(node)) {
            (Some(inbox), Some(n)) => {
                let ok = inbox.send(packet).is_ok();
                n.notify();
                ok
            }
            _ => false,
        }
    }
}

impl PacketSink for Rail {
    fn switch_here(&self, packet: RailPacket) -> bool {
        Rail::switch_here(self, packet)
    }

    fn deliver_here(&self, node: usize, packet: RailPacket) -> bool {
        Rail::deliver_here(self, node, packet)
    }

    fn net(&self) -> Option<&RailNet> {
        Rail::net(self)
    }
}
