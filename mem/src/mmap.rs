//! Shared memory mappings: the backing of emulated node memory and of
//! shared-memory segments. Anonymous ones are shared by the threads of one
//! process; memfd-backed ones ([`SharedMapping::memfd`],
//! [`SharedMapping::from_fd`]) by every process that maps the same file,
//! which is how a node's ranks as processes will share their segment.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use crate::dma_mem::{DataLines, DmaMemory};

/// An anonymous `MAP_SHARED` mapping, unmapped when the last view drops
/// (a clone is another handle on the same mapping).
#[derive(Clone, Debug)]
pub struct SharedMapping {
    inner: Arc<Mapping>,
}

#[derive(Debug)]
struct Mapping {
    base: *mut u8,
    len: usize,
    /// Data elision's bookkeeping ([`SharedMapping::new_elided`]).
    lines: Option<Arc<DataLines>>,
}

// SAFETY: the mapping is memory owned by this process (or a device's
// registers, held only by a `DeviceRegion` and reached only by volatile
// accesses); the struct only stores its address for munmap, and all other
// access goes through DmaMemory.
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

/// `len` rounded up to whole pages (at least one).
fn page_rounded(len: usize) -> std::io::Result<usize> {
    let page = 4096;
    len.max(1).div_ceil(page).checked_mul(page).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "mapping size overflows")
    })
}

impl SharedMapping {
    /// Map `len` zeroed bytes (rounded up to a page).
    pub fn new(len: usize) -> std::io::Result<Self> {
        Self::map(
            page_rounded(len)?,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    }

    /// [`SharedMapping::new`] under data elision: every view of it knows
    /// which lines were given data and moves only data (the `dma_mem`
    /// module's documentation), so pages that never get any are never
    /// touched.
    pub fn new_elided(len: usize) -> std::io::Result<Self> {
        let mut map = Self::new(len)?;
        let inner = Arc::get_mut(&mut map.inner)
            .ok_or_else(|| std::io::Error::other("a new mapping has no other handle"))?;
        inner.lines = Some(Arc::new(DataLines::new(inner.len)));
        Ok(map)
    }

    /// Lines (64 bytes) given data so far (0 without elision).
    pub fn data_lines(&self) -> usize {
        self.inner.lines.as_ref().map_or(0, |p| p.count())
    }

    /// A new memory file of `len` zeroed bytes (rounded up to a page),
    /// mapped here: the mapping, and the file for other processes to map
    /// with [`SharedMapping::from_fd`] (inherited across `exec` only if the
    /// caller clears its close-on-exec flag, or passed over a Unix socket).
    /// `name` shows in `/proc/PID/fd` and nowhere else.
    pub fn memfd(name: &str, len: usize) -> std::io::Result<(Self, OwnedFd)> {
        let len = page_rounded(len)?;
        let cname = std::ffi::CString::new(name).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "a name with a NUL")
        })?;
        // SAFETY: a valid C string; the call creates a new file descriptor
        // and touches no memory of ours.
        let raw = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor memfd_create just returned, owned by
        // nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(len)
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "too large"))?;
        // SAFETY: resizing a file we own; no memory is involved.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mapping = Self::map(len, libc::MAP_SHARED, fd.as_raw_fd(), 0)?;
        Ok((mapping, fd))
    }

    /// Map `len` bytes (rounded up to a page) of the memory file `fd` made
    /// by [`SharedMapping::memfd`], here or in another process: every
    /// mapping of one file sees the others' writes. Refused if the file is
    /// shorter than that.
    pub fn from_fd(fd: BorrowedFd<'_>, len: usize) -> std::io::Result<Self> {
        let len = page_rounded(len)?;
        let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
        // SAFETY: fstat writes a `stat` into the buffer, which is large
        // enough and exclusively ours.
        if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fstat succeeded, so it initialised the whole struct.
        let size = unsafe { st.assume_init() }.st_size;
        if usize::try_from(size).map_or(true, |s| s < len) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("the memory file holds {size} bytes, {len} asked"),
            ));
        }
        Self::map(len, libc::MAP_SHARED, fd.as_raw_fd(), 0)
    }

    /// Map `len` bytes (rounded up to a page) of the device file `fd` at
    /// `offset`, shared: a VFIO device's mappable region (its BAR), whose
    /// file offset VFIO gives. Refused by the kernel if the region is not
    /// mappable there. Only [`crate::regio::DeviceRegion`] holds such a
    /// mapping (registers are not memory).
    pub(crate) fn device_region(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
    ) -> std::io::Result<Self> {
        let len = page_rounded(len)?;
        let offset = libc::off_t::try_from(offset)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        Self::map(len, libc::MAP_SHARED, fd.as_raw_fd(), offset)
    }

    /// `mmap` `len` bytes read-write with `flags` of `fd` (-1: none) at
    /// `offset`.
    fn map(
        len: usize,
        flags: libc::c_int,
        fd: libc::c_int,
        offset: libc::off_t,
    ) -> std::io::Result<Self> {
        // No address hint: the kernel picks a fresh range. `fd`, if any, is
        // a descriptor the caller holds open for the call.
        // SAFETY: a fresh mapping; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            inner: Arc::new(Mapping {
                base: ptr.cast(),
                len,
                lines: None,
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
        // Zeros are not data: an elided line stays as it was counted.
        let mem = self.memory().without_elision();
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
        let view = unsafe { DmaMemory::from_raw_parts(self.inner.base, self.inner.len, owner) };
        match &self.inner.lines {
            Some(lines) => view.with_lines(Arc::clone(lines), 0),
            None => view,
        }
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

    /// Two mappings of one memory file are one memory: a write through
    /// either is read through the other, words and bytes; a file shorter
    /// than asked is refused.
    #[test]
    fn two_mappings_of_a_memfd_share_their_bytes() {
        use std::os::fd::AsFd;
        let (a, fd) = SharedMapping::memfd("railcoll-test", 10_000).expect("memfd");
        assert_eq!(a.len(), 12_288);
        let b = SharedMapping::from_fd(fd.as_fd(), 10_000).expect("map again");
        let (ma, mb) = (a.memory(), b.memory());
        ma.write(4096, b"from a").expect("write");
        mb.store_u64(64, 0xfeed, std::sync::atomic::Ordering::Release)
            .expect("store");
        let mut got = [0u8; 6];
        mb.read(4096, &mut got).expect("read");
        assert_eq!(&got, b"from a");
        assert_eq!(
            ma.load_u64(64, std::sync::atomic::Ordering::Acquire),
            Ok(0xfeed)
        );
        assert!(SharedMapping::from_fd(fd.as_fd(), 1 << 20).is_err());
    }

    /// Across processes: a forked child writes through its inherited
    /// mapping of the memory file and exits; the parent reads the bytes.
    #[test]
    fn a_forked_process_writes_what_its_parent_reads() {
        let (m, _fd) = SharedMapping::memfd("railcoll-fork", 4096).expect("memfd");
        let mem = m.memory();
        // The child only copies bytes into the mapping (no lock, no
        // allocation) and leaves with _exit.
        // SAFETY: so fork in a threaded test process cannot deadlock it.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let ok = mem.write(100, b"child").is_ok();
            // SAFETY: ends the child at once, running nothing of the parent's.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked; `status` is ours.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(waited, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        let mut got = [0u8; 5];
        mem.read(100, &mut got).expect("read");
        assert_eq!(&got, b"child");
    }
}
