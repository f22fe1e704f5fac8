//! What an emulated NIC is in both modes: its table sizes, and how a
//! received payload lands in node memory (the one copy of the put path).

use railcoll_fw::engine::hw::BusError;
use railcoll_mem::dma_mem::DmaMemory;

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
