//! Register access.
//!
//! [`RegisterIo`] is how the driver reads and writes a NIC's BAR0. The
//! emulator implements it over atomics in shared memory (and a rank
//! process over a `nicd`'s BAR0 mapped from its file); [`MmioRegisters`]
//! implements it over a mapped BAR with volatile accesses, and
//! [`MappedRegisters`] over a [`DeviceRegion`] it keeps mapped (a board's BAR0
//! mapped through VFIO).

use std::ptr::NonNull;

use volatile::VolatilePtr;

/// 64-bit register access at byte offsets.
pub trait RegisterIo: Send + Sync {
    /// Read the register at `offset` (8-byte aligned).
    fn read(&self, offset: u32) -> u64;
    /// Write the register at `offset`; writing a doorbell register rings it.
    fn write(&self, offset: u32, value: u64);
}

/// A memory-mapped register window.
#[derive(Debug)]
pub struct MmioRegisters {
    base: NonNull<u64>,
    len: usize,
}

// SAFETY: accesses are volatile reads/writes of device registers, which the
// device serialises; the struct holds only the address.
unsafe impl Send for MmioRegisters {}
// SAFETY: as above.
unsafe impl Sync for MmioRegisters {}

impl MmioRegisters {
    /// Wrap a mapped register window.
    ///
    /// # Safety
    ///
    /// `base..base + len` must be a mapping of device registers (or memory
    /// standing in for them), 8-byte aligned, valid for the lifetime of the
    /// returned value, and accessed by nothing through Rust references.
    pub unsafe fn new(base: NonNull<u64>, len: usize) -> Self {
        Self { base, len }
    }

    fn slot(&self, offset: u32) -> Option<VolatilePtr<'_, u64>> {
        let offset = offset as usize;
        if !offset.is_multiple_of(8) || offset.checked_add(8)? > self.len {
            return None;
        }
        // SAFETY: offset is in bounds and aligned (checked above), and the
        // window is valid for 'self (constructor contract).
        Some(unsafe { VolatilePtr::new(self.base.add(offset / 8)) })
    }
}

impl RegisterIo for MmioRegisters {
    fn read(&self, offset: u32) -> u64 {
        // An out-of-range read returns all ones, as a PCI master abort does.
        self.slot(offset)
            .map_or(u64::MAX, |p| u64::from_le(p.read()))
    }

    fn write(&self, offset: u32, value: u64) {
        if let Some(p) = self.slot(offset) {
            p.write(value.to_le());
        }
    }
}

/// A device's register window mapped into this process (a VFIO region of
/// its file), or memory standing in for one: reachable only as registers,
/// through [`MappedRegisters`]' volatile accesses, never as memory (whose
/// copies, atomics or page release would be wrong on device registers).
#[derive(Debug)]
pub struct DeviceRegion {
    mapping: crate::mmap::SharedMapping,
}

impl DeviceRegion {
    /// Map `len` bytes of the device file `fd` at `offset` (a VFIO
    /// region's offset in it).
    pub fn map(fd: std::os::fd::BorrowedFd<'_>, offset: u64, len: usize) -> std::io::Result<Self> {
        Ok(Self {
            mapping: crate::mmap::SharedMapping::device_region(fd, offset, len)?,
        })
    }

    /// Memory standing in for a device's registers (a fake board's BAR,
    /// which its owner may read and write as memory).
    pub fn stand_in(memory: &crate::mmap::SharedMapping) -> Self {
        Self {
            mapping: memory.clone(),
        }
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.mapping.len()
    }

    /// Is it empty?
    pub fn is_empty(&self) -> bool {
        self.mapping.is_empty()
    }
}

/// A register window over a [`DeviceRegion`] this object keeps mapped:
/// the safe form of [`MmioRegisters`].
#[derive(Debug)]
pub struct MappedRegisters {
    mmio: MmioRegisters,
    _region: DeviceRegion,
}

impl MappedRegisters {
    /// Registers over all of `region`.
    pub fn new(region: DeviceRegion) -> Self {
        let base =
            NonNull::new(region.mapping.raw_base().cast::<u64>()).unwrap_or_else(NonNull::dangling);
        // A dangling base only stands for an empty region, whose window
        // admits no access.
        // SAFETY: the region is page-aligned, `len` bytes long, kept mapped
        // by the returned value, and reached only here, volatilely.
        let mmio = unsafe { MmioRegisters::new(base, region.len()) };
        Self {
            mmio,
            _region: region,
        }
    }
}

impl RegisterIo for MappedRegisters {
    fn read(&self, offset: u32) -> u64 {
        self.mmio.read(offset)
    }

    fn write(&self, offset: u32, value: u64) {
        self.mmio.write(offset, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mmap::SharedMapping;

    #[test]
    fn mmio_window_reads_back_and_refuses_out_of_range() {
        let map = SharedMapping::new(4096).expect("mmap");
        let mem = map.memory();
        let ptr = NonNull::new(map_ptr(&map)).expect("non-null");
        // SAFETY: 4096 page-aligned bytes that outlive `regs` (same scope),
        // accessed only through `regs` and DmaMemory here.
        let regs = unsafe { MmioRegisters::new(ptr, 4096) };
        regs.write(0x10, 0xdead_beef);
        assert_eq!(regs.read(0x10), 0xdead_beef);
        assert_eq!(
            mem.load_u64(0x10, std::sync::atomic::Ordering::Relaxed),
            Ok(0xdead_beef)
        );
        assert_eq!(regs.read(4096), u64::MAX);
        assert_eq!(regs.read(3), u64::MAX);
        regs.write(4096, 1);
    }

    fn map_ptr(map: &SharedMapping) -> *mut u64 {
        map.raw_base().cast()
    }
}
