//! Node memory: one anonymous shared mapping per node, handed out as DMA
//! buffers. A buffer's "physical" address is its offset in the mapping; the
//! first page is never allocated, so physical address 0 is always invalid.

use std::sync::Mutex;

use railcoll_host::device::{DeviceError, DmaBuffer};
use railcoll_mem::dma_mem::DmaMemory;
use railcoll_mem::mmap::SharedMapping;

/// First allocatable physical address.
pub const PHYS_BASE: usize = 4096;

/// A node's memory.
#[derive(Debug)]
pub struct NodeMemory {
    map: SharedMapping,
    state: Mutex<Bump>,
}

#[derive(Debug)]
struct Bump {
    next: usize,
    /// Memory above this offset has never been handed out (still zero).
    high_water: usize,
}

impl NodeMemory {
    /// Reserve `len` bytes (pages are only touched when used).
    pub fn new(len: usize) -> std::io::Result<Self> {
        Ok(Self {
            map: SharedMapping::new(len.saturating_add(PHYS_BASE))?,
            state: Mutex::new(Bump {
                next: PHYS_BASE,
                high_water: PHYS_BASE,
            }),
        })
    }

    /// The whole memory (offset = physical address).
    pub fn memory(&self) -> DmaMemory {
        self.map.memory()
    }

    /// Allocate zeroed memory.
    pub fn alloc(&self, len: usize, align: usize) -> Result<DmaBuffer, DeviceError> {
        if !align.is_power_of_two() || align > 4096 {
            return Err(DeviceError::BadAlignment(align));
        }
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let size = self.map.len();
        let free = size.saturating_sub(st.next);
        let start = st
            .next
            .checked_next_multiple_of(align)
            .ok_or(DeviceError::OutOfMemory { asked: len, free })?;
        let end = start
            .checked_add(len)
            .filter(|e| *e <= size)
            .ok_or(DeviceError::OutOfMemory { asked: len, free })?;
        let mem = self
            .map
            .memory()
            .slice(start, len)
            .map_err(|_| DeviceError::OutOfMemory { asked: len, free })?;
        // Reused memory (after a reset) may hold old data: zero that part
        // (large ranges by giving their pages back, not by writing them).
        let dirty = st.high_water.min(end).saturating_sub(start);
        if dirty > 0 {
            self.map.zero(start, dirty);
        }
        st.next = end;
        st.high_water = st.high_water.max(end);
        Ok(DmaBuffer {
            phys: start as u64,
            mem,
        })
    }

    /// Free every allocation (between runs, when no rank holds buffers).
    pub fn reset(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).next = PHYS_BASE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_zeroed_and_bounded() {
        let m = NodeMemory::new(1 << 16).expect("mmap");
        let a = m.alloc(100, 64).expect("alloc");
        assert_eq!(a.phys % 64, 0);
        assert!(a.phys as usize >= PHYS_BASE);
        a.mem.fill(0, 100, 0xff).expect("fill");
        m.reset();
        let b = m.alloc(100, 64).expect("alloc");
        assert_eq!(a.phys, b.phys);
        let mut out = [1u8; 100];
        b.mem.read(0, &mut out).expect("read");
        assert_eq!(out, [0u8; 100], "reused memory is zeroed");
        assert!(matches!(
            m.alloc(1 << 20, 64),
            Err(DeviceError::OutOfMemory { .. })
        ));
        assert!(matches!(m.alloc(8, 3), Err(DeviceError::BadAlignment(3))));
    }
}
