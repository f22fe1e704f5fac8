//! The switch of one rail: a crossbar with one inbox per node.
//!
//! A packet is a header plus, for data, a *reference* to the payload in the
//! sender node's memory; the receiving NIC copies the bytes straight from
//! there into its own node's memory (one copy per byte). Delivery between
//! a pair of nodes is in order; nothing is lost in threads mode (the fault
//! injection of later issues sits here).

use crossbeam_channel::{Receiver, Sender, unbounded};
use railcoll_fw::abi::packet::{PacketHeader, PacketType};
use railcoll_fw::switch::{self, Forward, Switch};

use crate::notify::Notifier;

/// Payload bytes in a node's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadRef {
    /// Node whose memory holds the bytes.
    pub node: u16,
    /// Physical address there.
    pub phys: u64,
    /// Length.
    pub len: u32,
}

/// A packet on the wire.
#[derive(Clone, Copy, Debug)]
pub struct WirePacket {
    /// The header.
    pub header: PacketHeader,
    /// The payload, if any.
    pub payload: Option<PayloadRef>,
}

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

/// Does the switch (rather than a plain crossbar) handle this packet?
pub fn is_collective(packet: &WirePacket) -> bool {
    matches!(
        PacketType::from_raw(packet.header.ptype),
        Some(PacketType::Bcast | PacketType::BarrierArrive)
    )
}

/// Route a collective packet through `switch`: `out(node, packet)` for each
/// copy it sends on (none while a barrier is still combining).
pub fn route_collective(
    switch: &mut Switch,
    packet: WirePacket,
    out: &mut dyn FnMut(usize, WirePacket),
) {
    match switch.forward(&packet.header) {
        Forward::Drop => {}
        Forward::Unicast(node) => out(node as usize, packet),
        Forward::Replicate { low, high, except } => {
            for node in low..=high {
                if node != except {
                    out(node as usize, packet);
                }
            }
        }
        Forward::ReleaseAll(barrier) => {
            for node in barrier.low_node..=barrier.high_node {
                out(node as usize, released(&barrier, node));
            }
        }
        Forward::ReleaseOne(barrier, node) => out(node as usize, released(&barrier, node)),
    }
}

/// Is this a link-level acknowledgement (no data, travels beside data)?
pub fn is_control(packet: &WirePacket) -> bool {
    matches!(
        PacketType::from_raw(packet.header.ptype),
        Some(PacketType::Ack | PacketType::Nack | PacketType::BcastAck)
    )
}

fn released(barrier: &railcoll_fw::abi::packet::BarrierPacket, node: u16) -> WirePacket {
    WirePacket {
        header: switch::release(barrier, node),
        payload: None,
    }
}
