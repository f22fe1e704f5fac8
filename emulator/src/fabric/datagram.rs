//! A rail's packet in a UDP datagram (docs/abi.md §8.5): a 16-byte
//! encapsulation header saying which hop the datagram is (into the rail's
//! switch, or from it to one node), then the ABI's wire format unchanged:
//! the 64-byte packet header, the payload and its CRC trailer, as RoCEv2
//! carries InfiniBand's packets in UDP.
//!
//! Decoding checks only the encapsulation and the lengths; the packet
//! header is the firmware's to judge (a malformed one is dropped and
//! counted there, §8), and the payload's trailer the receive port's
//! ([`crate::hw::nic`]): a datagram damaged on the way arrives as a packet
//! whose payload fails its trailer, as on a real link.

use std::sync::Arc;

use railcoll_fw::abi::packet::PacketHeader;
use zerocopy::{FromBytes, IntoBytes};

use crate::hw::wire::{Damage, Payload, RailPacket, Tunnel};

/// The encapsulation header's length.
pub const ENCAP_LEN: usize = 16;
pub use railcoll_fw::abi::packet::HEADER_LEN;
/// The CRC trailer's length.
pub const TRAILER_LEN: usize = 4;
/// Largest payload one datagram carries (a UDP datagram holds 65,507
/// bytes; the largest power of two that fits with the headers).
pub const MAX_DATAGRAM_PAYLOAD: usize = 32 * 1024;

const MAGIC: [u8; 2] = *b"RC";
const VERSION: u8 = 1;
const FLAG_PAYLOAD: u8 = 1;
const FLAG_TUNNEL: u8 = 2;

/// Which hop a datagram is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hop {
    /// From a NIC into its rail's switch.
    ToSwitch,
    /// From the switch to this node's NIC on the rail.
    ToNode(u16),
}

impl Hop {
    fn kind(self) -> u8 {
        match self {
            Hop::ToSwitch => 1,
            Hop::ToNode(_) => 2,
        }
    }
}

/// A datagram that is not a rail packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DatagramError {
    /// Shorter than the two headers, or than its payload and trailer.
    #[error("a datagram of {0} bytes is too short for its headers and payload")]
    Truncated(usize),
    /// Longer than a payload of `MAX_DATAGRAM_PAYLOAD` allows.
    #[error("a datagram of {0} bytes is longer than any rail packet")]
    TooLong(usize),
    /// Not railcoll's encapsulation, or another version of it.
    #[error("not a railcoll rail datagram (magic or version)")]
    Foreign,
    /// An unknown hop kind, flag or a non-zero reserved byte.
    #[error("a malformed encapsulation header (kind, flags or reserved bytes)")]
    Malformed,
    /// A payload-less packet with trailing bytes.
    #[error("a packet without payload followed by {0} bytes")]
    Trailing(usize),
}

/// The datagram carrying `packet` on `hop` of rail `rail` (the rail whose
/// switch carries it). Its payload must be carried bytes
/// (`hw::nic::carry` turns a reference into them); a reference
/// goes as an empty payload whose trailer cannot match, which the
/// receiver discards as damaged. A fault's damage is applied to the bytes
/// sent, not to the trailer (the sender computed it over its own bytes).
pub fn encode(packet: &RailPacket, hop: Hop, rail: u8) -> Vec<u8> {
    let (bytes, trailer): (&[u8], Option<u32>) = match &packet.payload {
        None => (&[], None),
        Some(Payload::Carried { bytes, trailer }) => (bytes, Some(*trailer)),
        Some(Payload::Memory(_)) => (&[], Some(!crc32fast::hash(&[]))),
    };
    let mut out = Vec::with_capacity(ENCAP_LEN + HEADER_LEN + bytes.len() + TRAILER_LEN);
    let mut flags = 0;
    if trailer.is_some() {
        flags |= FLAG_PAYLOAD;
    }
    let nic_rail = match packet.tunnel {
        Some(t) => {
            flags |= FLAG_TUNNEL;
            t.nic_rail
        }
        None => rail,
    };
    let to = match hop {
        Hop::ToNode(n) => n,
        Hop::ToSwitch => 0,
    };
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[VERSION, hop.kind(), flags, rail, nic_rail, 0]);
    out.extend_from_slice(&to.to_le_bytes());
    out.extend_from_slice(&[0; 6]);
    out.extend_from_slice(packet.header.as_bytes());
    let body = out.len();
    out.extend_from_slice(bytes);
    if let Some(d) = packet.damage
        && let Some(b) = out.get_mut(body + d.offset as usize)
    {
        *b ^= d.xor;
    }
    if let Some(t) = trailer {
        out.extend_from_slice(&t.to_le_bytes());
    }
    out
}

/// A decoded datagram.
#[derive(Clone, Debug)]
pub struct Decoded {
    /// Its hop.
    pub hop: Hop,
    /// The rail whose switch carries it.
    pub rail: u8,
    /// The packet (payload bytes as they arrived, with the trailer that
    /// came with them).
    pub packet: RailPacket,
}

/// The packet a datagram carries.
pub fn decode(datagram: &[u8]) -> Result<Decoded, DatagramError> {
    let n = datagram.len();
    if n < ENCAP_LEN + HEADER_LEN {
        return Err(DatagramError::Truncated(n));
    }
    if n > ENCAP_LEN + HEADER_LEN + MAX_DATAGRAM_PAYLOAD + TRAILER_LEN {
        return Err(DatagramError::TooLong(n));
    }
    let (encap, rest) = datagram.split_at(ENCAP_LEN);
    if encap[..2] != MAGIC || encap[2] != VERSION {
        return Err(DatagramError::Foreign);
    }
    let (kind, flags, rail, nic_rail) = (encap[3], encap[4], encap[5], encap[6]);
    let to = u16::from_le_bytes([encap[8], encap[9]]);
    let reserved_clear = encap[7] == 0 && encap[10..].iter().all(|&b| b == 0);
    let hop = match kind {
        1 if to == 0 => Hop::ToSwitch,
        2 => Hop::ToNode(to),
        _ => return Err(DatagramError::Malformed),
    };
    let tunnelled = flags & FLAG_TUNNEL != 0;
    if !reserved_clear
        || flags & !(FLAG_PAYLOAD | FLAG_TUNNEL) != 0
        || (tunnelled == (nic_rail == rail))
    {
        return Err(DatagramError::Malformed);
    }
    let (header, body) = rest.split_at(HEADER_LEN);
    let header = PacketHeader::read_from_bytes(header).map_err(|_| DatagramError::Truncated(n))?;
    let payload = if flags & FLAG_PAYLOAD != 0 {
        let Some(split) = body.len().checked_sub(TRAILER_LEN) else {
            return Err(DatagramError::Truncated(n));
        };
        let (bytes, trailer) = body.split_at(split);
        let mut t = [0u8; TRAILER_LEN];
        t.copy_from_slice(trailer);
        Some(Payload::Carried {
            bytes: Arc::from(bytes),
            trailer: u32::from_le_bytes(t),
        })
    } else if body.is_empty() {
        None
    } else {
        return Err(DatagramError::Trailing(body.len()));
    };
    let tunnel = tunnelled.then_some(Tunnel {
        nic_rail,
        via: rail,
    });
    Ok(Decoded {
        hop,
        rail,
        packet: RailPacket {
            header,
            payload,
            damage: None::<Damage>,
            tunnel,
            // From another host: its clock is not this one's.
            born_ns: 0,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::nic::intact_any;
    use proptest::prelude::*;
    use zerocopy::FromZeros;

    fn packet(payload: Option<Vec<u8>>, tunnel: Option<Tunnel>) -> RailPacket {
        let mut header = PacketHeader::new_zeroed();
        header.as_mut_bytes()[..8].copy_from_slice(b"header!!");
        RailPacket {
            header,
            payload: payload.map(|b| Payload::Carried {
                trailer: crc32fast::hash(&b),
                bytes: Arc::from(b),
            }),
            damage: None,
            tunnel,
            born_ns: 0,
        }
    }

    proptest! {
        /// Whatever the packet, its datagram decodes to it: header bytes,
        /// payload bytes, trailer, hop, rail and tunnel.
        #[test]
        fn a_packet_survives_its_datagram(
            bytes in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..3000)),
            to in proptest::option::of(any::<u16>()),
            tunnelled in any::<bool>(),
            rail in 0u8..4,
        ) {
            let tunnel = tunnelled.then_some(Tunnel { nic_rail: rail + 1, via: rail });
            let p = packet(bytes.clone(), tunnel);
            let hop = to.map_or(Hop::ToSwitch, Hop::ToNode);
            let d = decode(&encode(&p, hop, rail)).expect("decodes");
            prop_assert_eq!(d.hop, hop);
            prop_assert_eq!(d.rail, rail);
            prop_assert_eq!(d.packet.tunnel, tunnel);
            prop_assert_eq!(d.packet.header.as_bytes(), p.header.as_bytes());
            prop_assert_eq!(&d.packet.payload, &p.payload);
            prop_assert!(intact_any(&[], &d.packet));
        }

        /// Any bytes at all: a typed error or a packet, never a panic;
        /// also a good datagram with bytes changed, cut or added (random
        /// bytes rarely get past the magic).
        #[test]
        fn any_datagram_is_judged(
            bytes in proptest::collection::vec(any::<u8>(), 0..200),
            payload in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..100)),
            changes in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            cut in any::<usize>(),
            extra in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let _ = decode(&bytes);
            let mut good = encode(&packet(payload, None), Hop::ToNode(1), 0);
            for (at, value) in changes {
                let n = good.len();
                good[at % n] = value;
            }
            let _ = decode(&good);
            good.extend_from_slice(&extra);
            let _ = decode(&good);
            let keep = cut % (good.len() + 1);
            let _ = decode(&good[..keep]);
        }

        /// A payload byte damaged in flight arrives, and fails its trailer.
        #[test]
        fn damage_in_flight_fails_the_trailer(
            bytes in proptest::collection::vec(any::<u8>(), 1..3000),
            at in any::<u32>(),
            xor in 1u8..=255,
        ) {
            let mut p = packet(Some(bytes.clone()), None);
            p.damage = Some(Damage { offset: at % bytes.len() as u32, xor });
            let d = decode(&encode(&p, Hop::ToSwitch, 0)).expect("decodes");
            prop_assert!(!intact_any(&[], &d.packet));
        }
    }

    #[test]
    fn local_bytes_get_their_trailer_and_unread_ones_cannot_pass() {
        let node = crate::hw::memory::NodeMemory::new(1 << 16, false).expect("memory");
        node.memory().write(4096, b"hello").expect("write");
        let memories = [node.memory()];
        let r = crate::hw::wire::PayloadRef {
            node: 0,
            phys: 4096,
            len: 5,
        };
        let mut p = packet(None, None);
        p.payload = crate::hw::nic::carry(&memories, &r);
        let d = decode(&encode(&p, Hop::ToNode(3), 1)).expect("decodes");
        assert!(intact_any(&[], &d.packet));
        assert_eq!(d.hop, Hop::ToNode(3));
        assert!(
            matches!(&d.packet.payload, Some(Payload::Carried { bytes, .. }) if &bytes[..] == b"hello")
        );
        // Outside the memory: nothing to carry; a reference sent anyway
        // cannot pass its receiver's check.
        assert!(
            crate::hw::nic::carry(
                &memories,
                &crate::hw::wire::PayloadRef { phys: 1 << 20, ..r }
            )
            .is_none()
        );
        p.payload = Some(Payload::Memory(r));
        let d = decode(&encode(&p, Hop::ToNode(3), 1)).expect("decodes");
        assert!(!intact_any(&[], &d.packet));
    }

    #[test]
    fn malformed_encapsulations_are_refused() {
        let good = encode(&packet(Some(vec![1, 2, 3]), None), Hop::ToSwitch, 0);
        assert!(decode(&good).is_ok());
        let cases: [(usize, u8, DatagramError); 11] = [
            (0, b'X', DatagramError::Foreign),
            (1, b'X', DatagramError::Foreign),
            (2, 2, DatagramError::Foreign),
            (3, 7, DatagramError::Malformed),
            (4, 0x81, DatagramError::Malformed),
            // A tunnel flag with the packet's own rail, and a NIC rail
            // other than the carrying one without it.
            (4, 3, DatagramError::Malformed),
            (6, 1, DatagramError::Malformed),
            (7, 1, DatagramError::Malformed),
            // A hop to the switch names no node.
            (8, 1, DatagramError::Malformed),
            (10, 1, DatagramError::Malformed),
            (15, 1, DatagramError::Malformed),
        ];
        for (at, value, want) in cases {
            let mut bad = good.clone();
            bad[at] = value;
            assert_eq!(decode(&bad).unwrap_err(), want, "byte {at} = {value}");
        }
        assert_eq!(
            decode(&good[..ENCAP_LEN + HEADER_LEN + 2]).unwrap_err(),
            DatagramError::Truncated(ENCAP_LEN + HEADER_LEN + 2)
        );
        let mut trailing = encode(&packet(None, None), Hop::ToSwitch, 0);
        trailing.push(0);
        assert_eq!(decode(&trailing).unwrap_err(), DatagramError::Trailing(1));
        let long = vec![0u8; ENCAP_LEN + HEADER_LEN + MAX_DATAGRAM_PAYLOAD + TRAILER_LEN + 1];
        assert!(matches!(decode(&long), Err(DatagramError::TooLong(_))));
    }
}
