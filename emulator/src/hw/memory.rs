//! Node memory: one anonymous shared mapping per node, handed out as DMA
//! buffers. A buffer's "physical" address is its offset in the mapping; the
//! first page is never allocated, so physical address 0 is always invalid.
//!
//! Every allocation has canary pages on both sides ([`GUARD`] bytes of a
//! position-dependent pattern, shared between neighbours): nothing the
//! NICs or the host library do may write them, and
//! [`NodeMemory::canary_damage`] names any byte that changed. The
//! emulator checks them after every run, so a write past the end of any
//! buffer (an arena, a command ring, a completion word) fails the run that
//! made it.

use std::sync::Mutex;

use railcoll_host::device::{DeviceError, DmaBuffer};
use railcoll_mem::dma_mem::DmaMemory;
use railcoll_mem::mmap::SharedMapping;

/// First allocatable physical address.
pub const PHYS_BASE: usize = 4096;

/// Canary bytes on each side of every allocation (at least).
pub const GUARD: usize = 4096;

/// The canary byte at physical address `at`.
fn canary(at: usize) -> u8 {
    (at.wrapping_mul(131) ^ (at >> 8)).wrapping_add(0x5b) as u8
}

/// Canary bytes that changed: `len` bytes from `phys` on differ, the
/// first of them at `first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CanaryDamage {
    /// Start of the canary range.
    pub phys: usize,
    /// Its length.
    pub len: usize,
    /// The first changed byte.
    pub first: usize,
    /// How many bytes changed.
    pub changed: usize,
}

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
    /// The canary ranges written: (start, length).
    guards: Vec<(usize, usize)>,
}

impl NodeMemory {
    /// Reserve `len` bytes (pages are only touched when used), under data
    /// elision if `elided` (`railcoll_mem::dma_mem`; modeled mode's
    /// `--data none` and `--data sample=N`).
    pub fn new(len: usize, elided: bool) -> std::io::Result<Self> {
        let len = len.saturating_add(PHYS_BASE);
        Ok(Self {
            map: if elided {
                SharedMapping::new_elided(len)?
            } else {
                SharedMapping::new(len)?
            },
            state: Mutex::new(Bump {
                next: PHYS_BASE,
                high_water: PHYS_BASE,
                guards: Vec::new(),
            }),
        })
    }

    /// Lines (64 bytes) given data so far, under data elision (0 without
    /// it).
    pub fn data_lines(&self) -> usize {
        self.map.data_lines()
    }

    /// The whole memory (offset = physical address).
    pub fn memory(&self) -> DmaMemory {
        self.map.memory()
    }

    /// Allocate zeroed memory.
    pub fn alloc(&self, len: usize, align: usize) -> Result<DmaBuffer, DeviceError> {
        DeviceError::check_alignment(align)?;
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let size = self.map.len();
        let free = size.saturating_sub(st.next);
        let start = st
            .next
            .checked_add(GUARD)
            .and_then(|g| g.checked_next_multiple_of(align))
            .ok_or(DeviceError::OutOfMemory { asked: len, free })?;
        let end = start
            .checked_add(len)
            .filter(|e| e.checked_add(GUARD).is_some_and(|g| g <= size))
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
        // The canary before it (from the end of the previous allocation,
        // whose canary after it this is too) and after it.
        let before = (st.next, start - st.next);
        let after = (end, GUARD);
        for (at, n) in [before, after] {
            let bytes: Vec<u8> = (at..at + n).map(canary).collect();
            // Canaries are not data: the buffers beside them stay elided.
            let _ = self.map.memory().without_elision().write(at, &bytes);
            st.guards.push((at, n));
        }
        st.next = end + GUARD;
        st.high_water = st.high_water.max(end + GUARD);
        Ok(DmaBuffer {
            phys: start as u64,
            mem,
        })
    }

    /// Free every allocation (between runs, when no rank holds buffers).
    pub fn reset(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.next = PHYS_BASE;
        st.guards.clear();
    }

    /// Every canary range around the current allocations in which a byte
    /// changed since it was written (empty when nothing wrote outside an
    /// allocation).
    pub fn canary_damage(&self) -> Vec<CanaryDamage> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let memory = self.map.memory();
        let mut out = Vec::new();
        let mut bytes = Vec::new();
        for &(phys, len) in &st.guards {
            bytes.resize(len, 0);
            if memory.read(phys, &mut bytes).is_err() {
                continue;
            }
            let mut changed = (phys..phys + len)
                .zip(&bytes)
                .filter(|(at, b)| **b != canary(*at));
            if let Some((first, _)) = changed.next() {
                out.push(CanaryDamage {
                    phys,
                    len,
                    first,
                    changed: 1 + changed.count(),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_aligned_zeroed_and_bounded() {
        let m = NodeMemory::new(1 << 16, false).expect("mmap");
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

    /// A write one byte past an allocation, or one byte before it, is
    /// named; writes inside are not.
    #[test]
    fn a_write_outside_an_allocation_damages_its_canary() {
        let m = NodeMemory::new(1 << 20, false).expect("mmap");
        let a = m.alloc(100, 64).expect("alloc");
        let b = m.alloc(5000, 4096).expect("alloc");
        a.mem.fill(0, 100, 0xff).expect("fill");
        b.mem.fill(0, 5000, 0xff).expect("fill");
        assert_eq!(m.canary_damage(), vec![]);
        let whole = m.memory();
        let past_a = a.phys as usize + 100;
        whole.write(past_a, &[!canary(past_a)]).expect("write");
        let before_b = b.phys as usize - 1;
        whole.write(before_b, &[!canary(before_b)]).expect("write");
        let damage = m.canary_damage();
        assert_eq!(damage.len(), 2, "{damage:?}");
        assert_eq!((damage[0].first, damage[0].changed), (past_a, 1));
        assert_eq!((damage[1].first, damage[1].changed), (before_b, 1));
        m.reset();
        assert_eq!(
            m.canary_damage(),
            vec![],
            "a reset forgets the old canaries"
        );
    }
}
