//! Anonymous shared memory mappings: the backing of emulated node memory and
//! of shared-memory segments.

use std::sync::Arc;

use crate::dma_mem::DmaMemory;

/// An anonymous `MAP_SHARED` mapping, unmapped when the last view drops.
#[derive(Debug)]
pub struct SharedMapping {
    inner: Arc<Mapping>,
}

#[derive(Debug)]
struct Mapping {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this process; the struct only
// stores its address for munmap, and all access goes through DmaMemory.
unsafe impl Send for Mapping {}
// SAFETY: as above; no interior state besides the address.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: base/len are exactly what mmap returned; every DmaMemory
        // view holds an Arc to this Mapping, so none outlives the unmap.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

impl SharedMapping {
    /// Map `len` zeroed bytes (rounded up to a page).
    pub fn new(len: usize) -> std::io::Result<Self> {
        let page = 4096;
        let len = len.max(1).div_ceil(page).checked_mul(page).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "mapping size overflows")
        })?;
        // SAFETY: anonymous mapping with no address hint: the kernel picks a
        // fresh range, so no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            inner: Arc::new(Mapping {
                base: ptr.cast(),
                len,
            }),
        })
    }

    /// Size in bytes (page-rounded).
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// True if empty (never: mappings are at least a page).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Base address, for handing the mapping to code that needs a pointer
    /// (an MMIO window stand-in in tests). Never dereference it directly.
    pub fn raw_base(&self) -> *mut u8 {
        self.inner.base
    }

    /// Zero `len` bytes at `offset` (false if out of range). Whole pages of
    /// a large range are handed back to the kernel instead of cleared:
    /// they read as zero and cost nothing until touched again, so zeroing
    /// a big, mostly untouched region is cheap.
    pub fn zero(&self, offset: usize, len: usize) -> bool {
        const PAGE: usize = 4096;
        const DISCARD_MIN: usize = 256 << 10;
        let Some(end) = offset.checked_add(len).filter(|e| *e <= self.inner.len) else {
            return false;
        };
        let mem = self.memory();
        let (lo, hi) = (offset.next_multiple_of(PAGE), end / PAGE * PAGE);
        if hi > lo && hi - lo >= DISCARD_MIN {
            let start = self.inner.base.wrapping_add(lo).cast();
            // SAFETY: [lo, hi) is page-aligned, inside this mapping, never borrowed
            // (DmaMemory uses raw pointers); MADV_REMOVE only makes it read as zero.
            let rc = unsafe { libc::madvise(start, hi - lo, libc::MADV_REMOVE) };
            if rc == 0 {
                return mem.fill(offset, lo - offset, 0).is_ok()
                    && mem.fill(hi, end - hi, 0).is_ok();
            }
        }
        mem.fill(offset, len, 0).is_ok()
    }

    /// A weak handle: does not keep the mapping alive.
    pub fn downgrade(&self) -> WeakMapping {
        WeakMapping {
            inner: Arc::downgrade(&self.inner),
        }
    }

    /// A view of the whole mapping.
    pub fn memory(&self) -> DmaMemory {
        let owner: Arc<dyn Send + Sync> = self.inner.clone();
        // SAFETY: valid for len bytes, page-aligned, kept alive by `owner`;
        // this crate never creates references into it.
        unsafe { DmaMemory::from_raw_parts(self.inner.base, self.inner.len, owner) }
    }
}

/// A [`SharedMapping`] that may have been unmapped (no strong holder left).
#[derive(Debug, Clone)]
pub struct WeakMapping {
    inner: std::sync::Weak<Mapping>,
}

impl WeakMapping {
    /// The mapping, if some view still keeps it alive.
    pub fn upgrade(&self) -> Option<SharedMapping> {
        self.inner.upgrade().map(|inner| SharedMapping { inner })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroing_clears_exactly_the_range_small_or_large() {
        let m = SharedMapping::new(4 << 20).expect("map");
        let mem = m.memory();
        mem.fill(0, 4 << 20, 0xaa).expect("fill");
        assert!(m.zero(100, 50));
        assert!(m.zero(5000, (2 << 20) + 123));
        let mut buf = vec![0u8; 4 << 20];
        mem.read(0, &mut buf).expect("read");
        for (i, b) in buf.iter().enumerate() {
            let zeroed = (100..150).contains(&i) || (5000..5000 + (2 << 20) + 123).contains(&i);
            assert_eq!(*b, if zeroed { 0 } else { 0xaa }, "byte {i}");
        }
        assert!(!m.zero(4 << 20, 1));
    }
}
