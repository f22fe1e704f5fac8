//! What travels on a rail, in both modes: a packet header plus, for data,
//! a *reference* to the payload in the sender node's memory (the receiving
//! NIC copies the bytes straight from there: one copy per byte) or, for a
//! packet that crossed between machines ([`crate::threads::udp`]), the
//! bytes and CRC trailer that came in its datagram; and how a rail's
//! switch routes the collective packets (broadcast replication, barrier
//! combining) through the firmware crate's switch logic.

use railcoll_fw::abi::packet::{PacketHeader, PacketType};
use railcoll_fw::engine::hw::Path;
use railcoll_fw::switch::{self, Forward, Switch};

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

/// A packet's payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// In the memory of a node of this process.
    Memory(PayloadRef),
    /// Bytes that arrived from another machine, with the CRC trailer the
    /// sender computed over its bytes (they differ if the datagram was
    /// damaged on the way).
    Carried {
        /// The bytes as they arrived.
        bytes: std::sync::Arc<[u8]>,
        /// The trailer that came with them.
        trailer: u32,
    },
}

impl Payload {
    /// Its length in bytes.
    pub fn len(&self) -> u32 {
        match self {
            Payload::Memory(r) => r.len,
            // A datagram never carries more than 64 KiB.
            Payload::Carried { bytes, .. } => u32::try_from(bytes.len()).unwrap_or(u32::MAX),
        }
    }

    /// Is it empty?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a packet's payload is, to the rail's faults and switch: a length.
pub trait PayloadLen {
    /// Its length in bytes.
    fn payload_len(&self) -> u32;
}

impl PayloadLen for PayloadRef {
    fn payload_len(&self) -> u32 {
        self.len
    }
}

impl PayloadLen for Payload {
    fn payload_len(&self) -> u32 {
        self.len()
    }
}

/// A packet on the wire: with its payload by reference in modeled mode
/// and on an in-process rail (`Copy`, as the modeled kernel's queue
/// requires), or as a [`Payload`] on a threads-mode rail, whose packets
/// may come from another machine.
#[derive(Clone, Copy, Debug)]
pub struct WirePacket<P = PayloadRef> {
    /// The header.
    pub header: PacketHeader,
    /// The payload, if any.
    pub payload: Option<P>,
    /// A payload byte changed in flight (fault injection): the bytes
    /// received are the sender's with this one altered, and no longer
    /// match the CRC trailer the sender computed over its bytes
    /// (`hw::nic::payload_intact`).
    pub damage: Option<Damage>,
    /// The packet goes round its own rail through siblings (ABI 1.5).
    pub tunnel: Option<Tunnel>,
    /// When its sender's NIC sent it, on the receiving board's clock
    /// (virtual time in modeled mode; 0: not stamped, e.g. a datagram
    /// from another host, or a packet the switch makes): a packet older
    /// than [`PACKET_LIFETIME_NS`] is dropped where it reaches a NIC.
    pub born_ns: u64,
}

/// The rails' packet lifetime (docs/abi.md §4.6): no packet reaches a NIC
/// later than this after its sender sent it, whatever held it (a delay
/// fault, a stalled sibling relaying it, a long queue). The NICs close an
/// idle flow after twice this (`FLOW_CLOSE_IDLE`, abi.md §8.1), which is
/// safe only because of it.
pub const PACKET_LIFETIME_NS: u64 = 1_000_000_000;

impl<P> WirePacket<P> {
    /// A packet as a NIC sends it.
    pub fn new(header: PacketHeader, payload: Option<P>) -> Self {
        Self {
            header,
            payload,
            damage: None,
            tunnel: None,
            born_ns: 0,
        }
    }

    /// Stamp it as sent at `now_ns` (a NIC's send).
    pub fn sent_at(mut self, now_ns: u64) -> Self {
        self.born_ns = now_ns.max(1);
        self
    }

    /// Older than the rails' packet lifetime at `now_ns`.
    pub fn expired(&self, now_ns: u64) -> bool {
        self.born_ns != 0 && now_ns.saturating_sub(self.born_ns) > PACKET_LIFETIME_NS
    }

    /// Its payload's length (0 for none).
    pub fn payload_len(&self) -> u32
    where
        P: PayloadLen,
    {
        self.payload.as_ref().map_or(0, P::payload_len)
    }

    /// The rail whose switch and receive ports carry the packet: the
    /// sibling's for a tunnelled packet, `own` (the sender's) otherwise.
    pub fn wire_rail(&self, own: usize) -> usize {
        self.tunnel.map_or(own, |t| usize::from(t.via))
    }
}

/// A packet on a threads-mode rail.
pub type RailPacket = WirePacket<Payload>;

/// A packet on a sibling path (`Path::Sibling`): sent by the NIC on rail
/// `nic_rail`, carried by rail `via`, for the destination node's NIC on
/// `nic_rail` (the destination's NIC on `via` hands it over).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunnel {
    /// The rail of the sending and the receiving NIC.
    pub nic_rail: u8,
    /// The rail it travels on.
    pub via: u8,
}

/// A sibling path names no other NIC of the node: the packet is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoSibling;

impl Tunnel {
    /// How a packet the NIC on `nic_rail` sends along `path` travels, on
    /// a node of `rails` rails: `None` on its own rail, or a tunnel.
    pub fn along(path: Path, nic_rail: u8, rails: usize) -> Result<Option<Tunnel>, NoSibling> {
        match path {
            Path::Direct => Ok(None),
            Path::Sibling(via) if via != nic_rail && usize::from(via) < rails => {
                Ok(Some(Tunnel { nic_rail, via }))
            }
            Path::Sibling(_) => Err(NoSibling),
        }
    }

    /// The path the receiving NIC is told the packet came by.
    pub fn path(tunnel: Option<Tunnel>) -> Path {
        tunnel.map_or(Path::Direct, |t| Path::Sibling(t.via))
    }
}

/// One payload byte changed in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Its offset in the payload.
    pub offset: u32,
    /// What it was XORed with (never 0).
    pub xor: u8,
}

/// Does the switch (rather than a plain crossbar) handle this packet?
pub fn is_collective<P>(packet: &WirePacket<P>) -> bool {
    matches!(
        PacketType::from_raw(packet.header.ptype),
        Some(PacketType::Bcast | PacketType::BarrierArrive | PacketType::BarrierLeave)
    )
}

/// Route a collective packet through `switch`: `out(node, packet)` for each
/// copy it sends on (none while a barrier is still combining).
pub fn route_collective<P: Clone>(
    switch: &mut Switch,
    packet: WirePacket<P>,
    out: &mut dyn FnMut(usize, WirePacket<P>),
) {
    match switch.forward(&packet.header) {
        Forward::Drop => {}
        Forward::Unicast(node) => out(node as usize, packet),
        Forward::Replicate { low, high, except } => {
            for node in low..=high {
                if node != except {
                    out(node as usize, packet.clone());
                }
            }
        }
        Forward::ReleaseAll(barrier) => {
            for node in barrier.low_node..=barrier.high_node {
                out(node as usize, released(&barrier, node));
            }
        }
        Forward::ReleaseOne(barrier, node) => out(node as usize, released(&barrier, node)),
        Forward::HeldOne(barrier, node) => out(
            node as usize,
            WirePacket::new(switch::held(&barrier, node), None),
        ),
    }
}

/// Is this a link-level control packet (an acknowledgement, or a flow's
/// close and its answer: no data, travels beside data)?
pub fn is_control<P>(packet: &WirePacket<P>) -> bool {
    matches!(
        PacketType::from_raw(packet.header.ptype),
        Some(
            PacketType::Ack
                | PacketType::Nack
                | PacketType::BcastAck
                | PacketType::FlowClose
                | PacketType::FlowCloseAck
        )
    )
}

fn released<P>(barrier: &railcoll_fw::abi::packet::BarrierPacket, node: u16) -> WirePacket<P> {
    WirePacket::new(switch::release(barrier, node), None)
}
