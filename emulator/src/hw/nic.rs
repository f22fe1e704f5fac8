//! What an emulated NIC is in both modes: its table sizes, how a received
//! payload lands in node memory (the one copy of the put path), and the
//! node's NIC-to-NIC path (`PEER_SET`).

use std::sync::Arc;

use railcoll_fw::abi::error::ErrorCode;
use railcoll_fw::engine::hw::BusError;
use railcoll_mem::dma_mem::DmaMemory;

use crate::hw::registers::{PEER_FIFO_DEPTH, SharedRegisters};
use crate::hw::wire::PayloadRef;

/// Largest node count an emulated NIC serves (its flow tables).
pub const EMU_MAX_NODES: usize = 256;
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
    if p.len == 8 && dst_off.is_multiple_of(8) {
        // An aligned 8-byte payload lands as one atomic store, as an
        // aligned 8-byte PCIe write does: hosts poll such words (RDMA
        // barrier flags) and must never see them torn.
        let mut word = [0u8; 8];
        src.read(src_off, &mut word).map_err(|_| BusError)?;
        return memory
            .store_u64(
                dst_off,
                u64::from_le_bytes(word),
                std::sync::atomic::Ordering::Release,
            )
            .map_err(|_| BusError);
    }
    memory
        .copy_from(dst_off, src, src_off, p.len as usize)
        .map_err(|_| BusError)
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
