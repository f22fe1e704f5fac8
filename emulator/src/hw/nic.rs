//! What an emulated NIC is in both modes: its table sizes, how a received
//! payload lands in node memory (the one copy of the put path), and the
//! node's NIC-to-NIC path (`PEER_SET`).

use std::sync::Arc;

use railcoll_fw::abi::error::ErrorCode;
use railcoll_fw::engine::hw::BusError;
use railcoll_mem::dma_mem::DmaMemory;

use crate::hw::registers::{PEER_FIFO_DEPTH, SharedRegisters};
use crate::hw::wire::{Damage, Payload, PayloadRef, WirePacket};

/// Peers an emulated NIC exchanges packets with between resets (slots are
/// not freed when idle): its flow slots
/// per direction, taken on first use (docs/abi.md §8.1), and the most
/// nodes one hardware broadcast spans. A fabric of at most this many
/// nodes never runs out; a larger one holds each NIC's actual peers.
pub const EMU_PEERS: usize = 256;

/// Events per context on an emulated NIC.
pub const EMU_EVENTS: usize = 512;

/// A physical address as an offset into node memory.
pub(crate) fn range(phys: u64) -> Result<usize, BusError> {
    usize::try_from(phys).map_err(|_| BusError)
}

/// Write a received payload into `memory` (this node's) at `phys`, copying
/// it straight from the sender node's memory: the one copy of the put path.
pub(crate) fn deliver_payload(
    memory: &DmaMemory,
    memories: &[DmaMemory],
    payload: &Option<PayloadRef>,
    phys: u64,
) -> Result<(), BusError> {
    let Some(p) = payload else {
        return Ok(());
    };
    let src = memories.get(p.node as usize).ok_or(BusError)?;
    let (dst_off, src_off) = (range(phys)?, range(p.phys)?);
    let len = p.len as usize;
    if !(len == 8 && dst_off.is_multiple_of(8)) {
        // Data elision (modeled `--data none`) is the copy's own.
        return memory
            .copy_from(dst_off, src, src_off, len)
            .map_err(|_| BusError);
    }
    // The word copy follows the same rule under elision: a word never
    // written is zero, stored where the target holds data and skipped
    // where it holds none, so the sender's page is never read.
    let word = if src.holds_data(src_off, len).map_err(|_| BusError)? {
        let mut word = [0u8; 8];
        src.read(src_off, &mut word).map_err(|_| BusError)?;
        word
    } else if memory.holds_data(dst_off, len).map_err(|_| BusError)? {
        [0; 8]
    } else {
        return Ok(());
    };
    store_word(memory, dst_off, word)
}

/// An aligned 8-byte payload lands as one atomic store, as an aligned
/// 8-byte PCIe write does: hosts poll such words (RDMA barrier flags) and
/// must never see them torn.
fn store_word(memory: &DmaMemory, offset: usize, word: [u8; 8]) -> Result<(), BusError> {
    memory
        .store_u64(
            offset,
            u64::from_le_bytes(word),
            std::sync::atomic::Ordering::Release,
        )
        .map_err(|_| BusError)
}

/// [`deliver_payload`] for a threads-mode rail's payload, which may be
/// bytes that came from another machine.
pub(crate) fn deliver_any(
    memory: &DmaMemory,
    memories: &[DmaMemory],
    payload: &Option<Payload>,
    phys: u64,
) -> Result<(), BusError> {
    match payload {
        None => Ok(()),
        Some(Payload::Memory(r)) => deliver_payload(memory, memories, &Some(*r), phys),
        Some(Payload::Carried { bytes, .. }) => {
            let dst_off = range(phys)?;
            if let Ok(word) = <[u8; 8]>::try_from(&bytes[..])
                && dst_off.is_multiple_of(8)
            {
                return store_word(memory, dst_off, word);
            }
            memory.write(dst_off, bytes).map_err(|_| BusError)
        }
    }
}

/// Bytes a NIC's CRC unit takes at a time (a stack buffer: memory others
/// may write is never borrowed, only copied out).
const CRC_CHUNK: usize = 4096;

/// The CRC-32 (IEEE 802.3) of `len` bytes of `memory` at `offset`, with
/// `damage` applied to the bytes as read. `None` if the range is outside
/// the memory.
fn crc_of(memory: &DmaMemory, offset: usize, len: usize, damage: Option<Damage>) -> Option<u32> {
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = [0u8; CRC_CHUNK];
    let mut done = 0;
    while done < len {
        let n = CRC_CHUNK.min(len - done);
        let chunk = &mut buf[..n];
        memory.read(offset.checked_add(done)?, chunk).ok()?;
        if let Some(d) = damage
            && let Some(at) = (d.offset as usize).checked_sub(done).filter(|&at| at < n)
        {
            chunk[at] ^= d.xor;
        }
        hasher.update(chunk);
        done += n;
    }
    Some(hasher.finalize())
}

/// The receive port's check of a packet's payload against its CRC trailer
/// (docs/abi.md §8). The emulator's wire carries a reference to the
/// sender's bytes and the trailer the sender's transmit path computed over
/// them; bytes change in flight only when a fault damages them. So an
/// undamaged payload matches its trailer by construction, and the port
/// computes both CRCs, over the bytes as sent and as received, only for a
/// damaged one (computing them for every payload would cost threads mode
/// two thirds of its put bandwidth: docs/performance.md). A packet without
/// a payload passes.
pub(crate) fn payload_intact(memories: &[DmaMemory], packet: &WirePacket) -> bool {
    let (Some(p), Some(damage)) = (packet.payload, packet.damage) else {
        return true;
    };
    let Some(src) = memories.get(usize::from(p.node)) else {
        return false;
    };
    let Ok(offset) = range(p.phys) else {
        return false;
    };
    let trailer = crc_of(src, offset, p.len as usize, None);
    let received = crc_of(src, offset, p.len as usize, Some(damage));
    trailer.is_some() && trailer == received
}

/// A payload in this process's memory as the bytes a datagram carries,
/// with the CRC trailer a transmit path computes over them; `None` if the
/// range is outside the memories (the packet then goes without its
/// payload and fails its receiver's checks).
pub(crate) fn carry(memories: &[DmaMemory], r: &PayloadRef) -> Option<Payload> {
    let memory = memories.get(usize::from(r.node))?;
    let mut bytes = vec![0u8; r.len as usize];
    memory.read(range(r.phys).ok()?, &mut bytes).ok()?;
    Some(Payload::Carried {
        trailer: crc32fast::hash(&bytes),
        bytes: Arc::from(bytes),
    })
}

/// [`payload_intact`] for a threads-mode rail's packet. Bytes that came
/// from another machine are checked against the trailer that came with
/// them, always: the receive port's real check.
pub(crate) fn intact_any(memories: &[DmaMemory], packet: &WirePacket<Payload>) -> bool {
    match &packet.payload {
        None => true,
        Some(Payload::Memory(r)) => {
            let by_ref = WirePacket {
                header: packet.header,
                payload: Some(*r),
                damage: packet.damage,
                tunnel: packet.tunnel,
                born_ns: packet.born_ns,
            };
            payload_intact(memories, &by_ref)
        }
        Some(Payload::Carried { bytes, trailer }) => {
            let mut hasher = crc32fast::Hasher::new();
            match packet.damage {
                Some(d) if (d.offset as usize) < bytes.len() => {
                    let at = d.offset as usize;
                    hasher.update(&bytes[..at]);
                    hasher.update(&[bytes[at] ^ d.xor]);
                    hasher.update(&bytes[at + 1..]);
                }
                _ => hasher.update(bytes),
            }
            hasher.finalize() == *trailer
        }
    }
}

/// Reserve an entry of the `PEER_SET` FIFO of this node's NIC on rail `to`
/// for the NIC on rail `from`; `siblings` holds the node's register files
/// by rail. `PeerUnreachable`: no NIC there, or it is the sender;
/// `Busy`: its FIFO is full.
pub(crate) fn reserve_peer_set(
    siblings: &[Arc<SharedRegisters>],
    from: u8,
    to: u8,
) -> Result<&SharedRegisters, ErrorCode> {
    if to == from {
        return Err(ErrorCode::PeerUnreachable);
    }
    let target = siblings
        .get(usize::from(to))
        .ok_or(ErrorCode::PeerUnreachable)?;
    if !target.peer_reserve() {
        return Err(ErrorCode::Busy);
    }
    Ok(target)
}

/// The `PEER_SET` depth a NIC with these siblings reports: none alone.
pub(crate) fn peer_fifo_depth(siblings: &[Arc<SharedRegisters>]) -> u8 {
    if siblings.len() > 1 {
        PEER_FIFO_DEPTH
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::memory::NodeMemory;
    use proptest::prelude::*;
    use railcoll_fw::abi::packet::PacketHeader;
    use zerocopy::FromZeros;

    fn packet(len: u32, damage: Option<Damage>) -> WirePacket {
        WirePacket {
            header: PacketHeader::new_zeroed(),
            payload: Some(PayloadRef {
                node: 0,
                phys: 4096,
                len,
            }),
            damage,
            tunnel: None,
            born_ns: 0,
        }
    }

    proptest! {
        /// Whatever the payload, a byte changed anywhere in it (across the
        /// CRC unit's chunks too) fails the trailer; an unchanged one
        /// passes.
        #[test]
        fn every_damaged_byte_is_caught(
            seed in any::<u64>(),
            len in 1u32..20_000,
            at in any::<u32>(),
            xor in 1u8..=255,
        ) {
            let node = NodeMemory::new(1 << 16, false).expect("memory");
            let bytes: Vec<u8> = (0..len as u64)
                .map(|i| (seed.wrapping_mul(i | 1) >> 13) as u8)
                .collect();
            node.memory().write(4096, &bytes).expect("write");
            let memories = [node.memory()];
            prop_assert!(payload_intact(&memories, &packet(len, None)));
            let damage = Damage { offset: at % len, xor };
            prop_assert!(!payload_intact(&memories, &packet(len, Some(damage))));
        }
    }

    #[test]
    fn a_damaged_payload_from_nowhere_is_refused() {
        let node = NodeMemory::new(1 << 16, false).expect("memory");
        let memories = [node.memory()];
        let mut p = packet(64, Some(Damage { offset: 0, xor: 1 }));
        p.payload = Some(PayloadRef {
            node: 0,
            phys: 1 << 40,
            len: 64,
        });
        assert!(!payload_intact(&memories, &p));
        p.payload = Some(PayloadRef {
            node: 7,
            phys: 0,
            len: 64,
        });
        assert!(!payload_intact(&memories, &p));
    }
}
