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
