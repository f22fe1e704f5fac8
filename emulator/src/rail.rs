//! The switch of one rail: a crossbar with one inbox per node.
//!
//! A packet is a header plus, for data, a *reference* to the payload in the
//! sender node's memory; the receiving NIC copies the bytes straight from
//! there into its own node's memory (one copy per byte). Delivery between
//! a pair of nodes is in order; nothing is lost in threads mode (the fault
//! injection of later issues sits here).

use crossbeam_channel::{Receiver, Sender, unbounded};
use railcoll_fw::abi::packet::PacketHeader;

use crate::worker::Notifier;

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
}

impl Rail {
    /// A switch for `notifiers.len()` nodes; returns it and each node's inbox.
    pub fn new(notifiers: Vec<Notifier>) -> (Self, Vec<Receiver<WirePacket>>) {
        let (senders, receivers): (Vec<_>, Vec<_>) = notifiers.iter().map(|_| unbounded()).unzip();
        (
            Self {
                inboxes: senders,
                notifiers,
            },
            receivers,
        )
    }

    /// Route a packet to `node`'s NIC. False if there is no such node.
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
