//! Memory shared with a NIC or with other ranks.
//!
//! Contract: a [`DmaMemory`] is a byte range that other agents (NIC DMA
//! engines, other ranks' threads) may read or write at any time. Rust code
//! therefore never holds a `&` or `&mut` to it (that would be undefined
//! behaviour the moment the NIC writes, as vfio-ioctls' DMA-map contract and
//! vm-memory's volatile rules say). Every access is one of:
//!
//! - a bulk copy in or out (`read`, `write`, `copy_from`), used only on
//!   ranges the protocol currently gives to this agent (for example a source
//!   buffer between posting a put and its completion event);
//! - an aligned 64-bit atomic load or store (`load_u64`, `store_u64`), used
//!   for completion words and flags that are written concurrently.
//!
//! Bounds are checked on every call; an out-of-range access returns
//! [`OutOfRange`] and touches nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// An access outside the memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfRange {
    /// Offset asked for.
    pub offset: usize,
    /// Length asked for.
    pub len: usize,
    /// Size of the memory.
    pub size: usize,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "range {}+{} outside {} bytes of DMA memory",
            self.offset, self.len, self.size
        )
    }
}

impl std::error::Error for OutOfRange {}

/// A view of shared memory. Cheap to clone; keeps its backing alive.
#[derive(Clone)]
pub struct DmaMemory {
    base: *mut u8,
    len: usize,
    _owner: Arc<dyn Send + Sync>,
}

impl std::fmt::Debug for DmaMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaMemory")
            .field("base", &self.base)
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: DmaMemory never hands out references; every access is a copy or an
// atomic operation through a raw pointer, which is sound from any thread as
// long as the backing stays mapped, which `_owner` guarantees.
unsafe impl Send for DmaMemory {}
// SAFETY: as for Send: no interior references, only copies and atomics.
unsafe impl Sync for DmaMemory {}

impl DmaMemory {
    /// Wrap `len` bytes at `base`, kept alive by `owner`.
    ///
    /// # Safety
    ///
    /// `base..base + len` must be valid for reads and writes, 8-byte
    /// aligned at `base`, and stay mapped for as long as `owner` lives. No
    /// Rust reference to any of its bytes may exist while a `DmaMemory`
    /// over it does.
    pub unsafe fn from_raw_parts(base: *mut u8, len: usize, owner: Arc<dyn Send + Sync>) -> Self {
        Self {
            base,
            len,
            _owner: owner,
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if zero-sized.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), OutOfRange> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(OutOfRange {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// A sub-range view.
    pub fn slice(&self, offset: usize, len: usize) -> Result<DmaMemory, OutOfRange> {
        self.check(offset, len)?;
        Ok(DmaMemory {
            // SAFETY: offset + len <= self.len was checked, so the pointer
            // stays inside the same mapping.
            base: unsafe { self.base.add(offset) },
            len,
            _owner: Arc::clone(&self._owner),
        })
    }

    /// Copy bytes out.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), OutOfRange> {
        self.check(offset, out.len())?;
        // Concurrent writers to this range are excluded by the module contract.
        // SAFETY: in bounds (checked above); `out` is a separate Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(offset), out.as_mut_ptr(), out.len())
        };
        Ok(())
    }

    /// Copy bytes in.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), OutOfRange> {
        self.check(offset, data.len())?;
        // SAFETY: in bounds (checked); `data` is a separate Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(offset), data.len()) };
        Ok(())
    }

    /// Fill a range with one byte value.
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<(), OutOfRange> {
        self.check(offset, len)?;
        // SAFETY: in bounds (checked).
        unsafe { std::ptr::write_bytes(self.base.add(offset), value, len) };
        Ok(())
    }

    /// Copy `len` bytes from `src` at `src_offset` to this memory at
    /// `dst_offset`: the single copy of an emulated DMA. The ranges may be
    /// in the same memory but must not overlap.
    pub fn copy_from(
        &self,
        dst_offset: usize,
        src: &DmaMemory,
        src_offset: usize,
        len: usize,
    ) -> Result<(), OutOfRange> {
        self.check(dst_offset, len)?;
        src.check(src_offset, len)?;
        // memmove: even a faulty overlap (a DMA onto its own source, which the
        // protocol excludes) gives wrong data, never undefined behaviour.
        // SAFETY: both ranges are in bounds (checked above).
        unsafe { std::ptr::copy(src.base.add(src_offset), self.base.add(dst_offset), len) };
        Ok(())
    }

    fn atomic(&self, offset: usize) -> Result<&AtomicU64, OutOfRange> {
        self.check(offset, 8)?;
        // SAFETY: `base` is 8-aligned (constructor contract), so base + offset
        // is aligned whenever offset is; the assert below refuses the rest.
        let ptr = unsafe { self.base.add(offset) };
        if !(ptr as usize).is_multiple_of(8) {
            return Err(OutOfRange {
                offset,
                len: 8,
                size: self.len,
            });
        }
        // Every agent accesses this word atomically (module contract), so a
        // shared reference to the *atomic* is sound.
        // SAFETY: 8 in-bounds, aligned bytes that live as long as `self`.
        Ok(unsafe { AtomicU64::from_ptr(ptr.cast::<u64>()) })
    }

    /// Atomic load of an aligned little-endian 64-bit word.
    pub fn load_u64(&self, offset: usize, order: Ordering) -> Result<u64, OutOfRange> {
        Ok(u64::from_le(self.atomic(offset)?.load(order)))
    }

    /// Atomic add to an aligned little-endian 64-bit word (wrapping);
    /// returns the previous value. Only meaningful on little-endian hosts
    /// (every platform railcoll targets).
    pub fn fetch_add_u64(
        &self,
        offset: usize,
        value: u64,
        order: Ordering,
    ) -> Result<u64, OutOfRange> {
        Ok(self.atomic(offset)?.fetch_add(value, order))
    }

    /// Atomic store of an aligned little-endian 64-bit word.
    pub fn store_u64(&self, offset: usize, value: u64, order: Ordering) -> Result<(), OutOfRange> {
        self.atomic(offset)?.store(value.to_le(), order);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mmap::SharedMapping;

    #[test]
    fn accesses_are_bounds_checked() {
        let map = SharedMapping::new(4096).expect("mmap");
        let m = map.memory();
        assert!(m.write(4090, &[0; 6]).is_ok());
        assert_eq!(
            m.write(4091, &[0; 6]),
            Err(OutOfRange {
                offset: 4091,
                len: 6,
                size: 4096
            })
        );
        assert!(m.read(usize::MAX, &mut [0; 2]).is_err());
        assert!(m.load_u64(4, Ordering::Relaxed).is_err(), "misaligned");
        assert!(m.store_u64(4088, 7, Ordering::Release).is_ok());
        assert_eq!(m.load_u64(4088, Ordering::Acquire), Ok(7));
        let s = m.slice(4000, 96).expect("slice");
        assert!(s.read(90, &mut [0; 7]).is_err());
        let mut b = [0u8; 8];
        s.read(88, &mut b).expect("read");
        assert_eq!(u64::from_le_bytes(b), 7);
    }

    #[test]
    fn copy_from_moves_bytes_between_memories() {
        let a = SharedMapping::new(4096).expect("mmap");
        let b = SharedMapping::new(4096).expect("mmap");
        a.memory().write(10, b"hello").expect("write");
        b.memory().copy_from(100, &a.memory(), 10, 5).expect("copy");
        let mut out = [0u8; 5];
        b.memory().read(100, &mut out).expect("read");
        assert_eq!(&out, b"hello");
        assert!(b.memory().copy_from(4095, &a.memory(), 0, 2).is_err());
    }
}
