//! The switch of one rail: a crossbar with one inbox per node.
//!
//! A packet is a header plus, for data, a *reference* to the payload in the
//! sender node's memory; the receiving NIC copies the bytes straight from
//! there into its own node's memory (one copy per byte). Delivery between
//! a pair of nodes is in order; nothing is lost in threads mode (the fault
//! injection of later issues sits here).

use crossbeam_channel::{Receiver, Sender, unbounded};
use railcoll_fw::switch::Switch;

use crate::hw::notify::Notifier;
use crate::hw::wire::{WirePacket, is_collective, route_collective};

/// One rail's switch.
#[derive(Debug)]
pub struct Rail {
    inboxes: Vec<Sender<WirePacket>>,
    notifiers: Vec<Notifier>,
    /// Broadcast replication and barrier combining (the firmware crate's
    /// switch model). Only collective packets take the lock.
    switch: std::sync::Mutex<Switch>,
}

impl Rail {
    /// A switch for `notifiers.len()` nodes; returns it and each node's inbox.
    pub fn new(notifiers: Vec<Notifier>) -> (Self, Vec<Receiver<WirePacket>>) {
        let (senders, receivers): (Vec<_>, Vec<_>) = notifiers.iter().map(|_| unbounded()).unzip();
        (
            Self {
                inboxes: senders,
                notifiers,
                switch: std::sync::Mutex::new(Switch::new()),
            },
            receivers,
        )
    }

    /// Switch a packet: unicast to its destination, replicate a broadcast,
    /// absorb a barrier arrival (and release the group once complete).
    pub fn switch(&self, packet: WirePacket) -> bool {
        if !is_collective(&packet) {
            return self.deliver(packet.header.dst_node.get() as usize, packet);
        }
        let mut ok = true;
        let mut sw = self.switch.lock().unwrap_or_else(|p| p.into_inner());
        route_collective(&mut sw, packet, &mut |node, p| ok &= self.deliver(node, p));
        ok
    }

    /// Put a packet in `node`'s inbox. False if there is no such node.
    pub fn deliver(&self, node: usize, packet: WirePacket) -> bool {
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
