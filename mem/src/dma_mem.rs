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
//!
//! **Data elision** (modeled mode's `--data none` and `--data sample=N`):
//! a memory made with [`DataLines`] (`SharedMapping::new_elided`) knows
//! which of its 64-byte lines have ever been given data; a line never
//! given any holds zeros. `write`, `fill`, `store_u64` and `fetch_add_u64`
//! give their lines data. `copy_from` goes a source page at a time: a
//! page whose range holds data is copied (and gives the destination's
//! lines data); one that holds none is zeros, so it is written as zeros
//! where the destination holds data and skipped where it holds none too.
//! The result is byte for byte what a copy without elision gives, and a
//! page no data ever reaches is never read or written, so it never
//! becomes resident (nor does the bookkeeping's own memory for it).

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

/// Elided copies go a source page at a time: a page that holds no data
/// is neither read nor, unless the destination holds data, written.
const ELIDE_CHUNK: usize = 4096;

/// Granule of [`DataLines`]' bookkeeping: a 64-byte line, so that a
/// control word beside a buffer (allocations are 64-byte aligned) does not
/// make the buffer count as data.
const DATA_LINE_SHIFT: u32 = 6;

/// Which lines (64 bytes) of an elided memory have ever been given data
/// (one bit per line; see the module documentation).
pub struct DataLines {
    words: Box<[AtomicU64]>,
}

/// Its size and count, not its millions of words.
impl std::fmt::Debug for DataLines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataLines")
            .field("lines", &(self.words.len() * 64))
            .field("with_data", &self.count())
            .finish()
    }
}

// The bitmap is allocated as zeroed `u64`s and used as atomics.
const _: () = assert!(
    std::mem::align_of::<u64>() == std::mem::align_of::<AtomicU64>()
        && std::mem::size_of::<u64>() == std::mem::size_of::<AtomicU64>()
);

impl DataLines {
    /// Bookkeeping for `len` bytes, no line holding data. The bitmap is
    /// allocated zeroed (by the allocator, which maps large zeroed
    /// blocks lazily), so its own pages become resident only where data
    /// is marked.
    pub fn new(len: usize) -> Self {
        let words = len.div_ceil(1 << DATA_LINE_SHIFT).div_ceil(64);
        let zeroed: Box<[u64]> = vec![0u64; words].into_boxed_slice();
        // `AtomicU64` has `u64`'s size, alignment (asserted above) and bit
        // validity, so the allocation is a valid `[AtomicU64]` as it is.
        let raw = Box::into_raw(zeroed) as *mut [AtomicU64];
        // SAFETY: `raw` is `Box::into_raw` of `words` `u64`s (see above).
        let words = unsafe { Box::from_raw(raw) };
        Self { words }
    }

    /// The lines of `[start, start + len)` (non-empty), as (first, last).
    fn lines(start: usize, len: usize) -> (usize, usize) {
        (
            start >> DATA_LINE_SHIFT,
            (start + len - 1) >> DATA_LINE_SHIFT,
        )
    }

    /// The bitmap words of `[start, start + len)` and, in each, the bits
    /// of its lines (none if `len` is 0).
    fn words_of(start: usize, len: usize) -> impl Iterator<Item = (usize, u64)> {
        let (first, last) = if len == 0 {
            (1, 0)
        } else {
            Self::lines(start, len)
        };
        (first / 64..=last / 64)
            .filter(move |_| len > 0)
            .map(move |w| {
                let lo = first.saturating_sub(w * 64).min(63);
                let hi = (last - w * 64).min(63);
                (w, (u64::MAX >> (63 - hi)) & (u64::MAX << lo))
            })
    }

    fn mark(&self, start: usize, len: usize) {
        for (w, bits) in Self::words_of(start, len) {
            // Most marks are of lines already marked: test before the
            // read-modify-write.
            let word = &self.words[w];
            if word.load(Ordering::Relaxed) & bits != bits {
                word.fetch_or(bits, Ordering::Relaxed);
            }
        }
    }

    fn any(&self, start: usize, len: usize) -> bool {
        Self::words_of(start, len)
            .any(|(w, bits)| self.words[w].load(Ordering::Relaxed) & bits != 0)
    }

    /// Lines (64 bytes) that hold data.
    pub fn count(&self) -> usize {
        self.words
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }
}

/// A view of shared memory. Cheap to clone; keeps its backing alive.
#[derive(Clone)]
pub struct DmaMemory {
    base: *mut u8,
    len: usize,
    _owner: Arc<dyn Send + Sync>,
    /// Data elision: the backing's line bookkeeping and where this view
    /// starts in it (None: no elision).
    lines: Option<(Arc<DataLines>, usize)>,
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
            lines: None,
        }
    }

    /// This view under data elision, `lines` being its backing's
    /// bookkeeping, of which the view covers `[origin, origin + len)`.
    pub(crate) fn with_lines(mut self, lines: Arc<DataLines>, origin: usize) -> Self {
        self.lines = Some((lines, origin));
        self
    }

    /// The same bytes without data elision: writes through it give no
    /// line data, and copies into it from memory that is not elided move
    /// everything (canaries and zeroing, which must not make the buffers
    /// beside them count as data).
    pub fn without_elision(&self) -> DmaMemory {
        DmaMemory {
            lines: None,
            ..self.clone()
        }
    }

    /// Whether `len` bytes at `offset` may hold data: always, without
    /// elision; under it, whether some line of the range was given data
    /// (a range that holds none is all zeros).
    pub fn holds_data(&self, offset: usize, len: usize) -> Result<bool, OutOfRange> {
        self.check(offset, len)?;
        Ok(self.marked(offset, len))
    }

    /// [`DmaMemory::holds_data`] of a range already checked.
    fn marked(&self, offset: usize, len: usize) -> bool {
        match &self.lines {
            None => true,
            Some((lines, origin)) => lines.any(origin + offset, len),
        }
    }

    /// Give the lines of `len` bytes at `offset` (in bounds) data.
    fn mark(&self, offset: usize, len: usize) {
        if let Some((lines, origin)) = &self.lines {
            lines.mark(origin + offset, len);
        }
    }

    /// Where byte `offset` of this view lies in the address space, as a
    /// number (never dereferenced): two views' bytes are the same bytes
    /// exactly when their addresses are equal, so a writer can say what
    /// it changed and a watcher can tell whether that includes its word.
    pub fn address_of(&self, offset: usize) -> usize {
        (self.base as usize).wrapping_add(offset)
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
            lines: self
                .lines
                .as_ref()
                .map(|(lines, origin)| (Arc::clone(lines), origin + offset)),
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
        // Marked first, so that whoever sees the bytes sees the mark.
        self.mark(offset, data.len());
        // SAFETY: in bounds (checked); `data` is a separate Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(offset), data.len()) };
        Ok(())
    }

    /// Fill a range with one byte value.
    pub fn fill(&self, offset: usize, len: usize, value: u8) -> Result<(), OutOfRange> {
        self.check(offset, len)?;
        self.mark(offset, len);
        // SAFETY: in bounds (checked).
        unsafe { std::ptr::write_bytes(self.base.add(offset), value, len) };
        Ok(())
    }

    /// Copy `len` bytes from `src` at `src_offset` to this memory at
    /// `dst_offset`: the single copy of an emulated DMA. The ranges may be
    /// in the same memory but must not overlap. Under data elision the
    /// copy goes a source page at a time and moves only what matters
    /// (module documentation).
    pub fn copy_from(
        &self,
        dst_offset: usize,
        src: &DmaMemory,
        src_offset: usize,
        len: usize,
    ) -> Result<(), OutOfRange> {
        self.check(dst_offset, len)?;
        src.check(src_offset, len)?;
        if self.lines.is_none() && src.lines.is_none() {
            // memmove: even a faulty overlap (a DMA onto its own source, which
            // the protocol excludes) gives wrong data, never undefined
            // behaviour.
            // SAFETY: both ranges are in bounds (checked above).
            unsafe { std::ptr::copy(src.base.add(src_offset), self.base.add(dst_offset), len) };
            return Ok(());
        }
        let mut done = 0;
        while done < len {
            let (from, to) = (src_offset + done, dst_offset + done);
            // To the end of the source's page (mappings are page-aligned).
            let page = ELIDE_CHUNK - (src.base as usize + from) % ELIDE_CHUNK;
            let n = page.min(len - done);
            if src.marked(from, n) {
                self.mark(to, n);
                // SAFETY: a sub-range of the ranges checked above.
                unsafe { std::ptr::copy(src.base.add(from), self.base.add(to), n) };
            } else if self.marked(to, n) {
                // The source holds no data, so it is zeros: write them,
                // without reading (and so touching) the source's page.
                // SAFETY: a sub-range of the destination checked above.
                unsafe { std::ptr::write_bytes(self.base.add(to), 0, n) };
            }
            done += n;
        }
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
        let word = self.atomic(offset)?;
        // Marked before the value is published (a Release store or RMW).
        self.mark(offset, 8);
        Ok(word.fetch_add(value, order))
    }

    /// Atomic store of an aligned little-endian 64-bit word.
    pub fn store_u64(&self, offset: usize, value: u64, order: Ordering) -> Result<(), OutOfRange> {
        let word = self.atomic(offset)?;
        // Marked before the value is published (a Release store).
        self.mark(offset, 8);
        word.store(value.to_le(), order);
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

    /// Under elision: a copy gives exactly the bytes a copy without it
    /// gives (a never-written source is zeros, written over a destination
    /// that holds data), while pages where neither side holds data are
    /// neither read nor written and stay without data; checked byte by
    /// byte on both sides, across slices and onward copies.
    #[test]
    fn elision_moves_only_bytes_that_derive_from_writes() {
        let a = SharedMapping::new_elided(1 << 16).expect("mmap");
        let b = SharedMapping::new_elided(1 << 16).expect("mmap");
        let (ma, mb) = (a.memory(), b.memory());
        // A destination that holds data, and a copy of nothing over it.
        mb.fill(0, 100, 0xee).expect("fill");
        assert_eq!(b.data_lines(), 2);
        mb.copy_from(0, &ma, 8192, 100).expect("copy of zeros");
        let mut out = [1u8; 100];
        mb.read(0, &mut out).expect("read");
        assert_eq!(out, [0; 100], "zeros, as without elision");
        assert_eq!((a.data_lines(), b.data_lines()), (0, 2));
        // Nothing over nothing: no line gets data.
        mb.copy_from(30000, &ma, 8192, 5000)
            .expect("copy of nothing");
        assert_eq!(b.data_lines(), 2);
        // Written bytes move, through a slice, and onward.
        let s = ma.slice(12288, 4096).expect("slice");
        s.write(100, b"payload").expect("write");
        assert!(ma.holds_data(12288 + 100, 7).expect("in range"));
        assert!(ma.holds_data(12288 + 60, 8).expect("in range"), "same line");
        assert!(!ma.holds_data(12288 + 128, 4096).expect("in range"));
        assert!(!ma.holds_data(0, 12288 + 64).expect("in range"));
        mb.copy_from(20000, &s, 100, 7).expect("copy");
        ma.copy_from(40000, &mb, 20000, 7).expect("copy back");
        let mut got = [0u8; 7];
        ma.read(40000, &mut got).expect("read");
        assert_eq!(&got, b"payload");
        assert_eq!((a.data_lines(), b.data_lines()), (2, 3));
        // Bounds are still checked when nothing moves.
        assert!(mb.copy_from(65530, &ma, 0, 64).is_err());
        assert!(mb.copy_from(0, &ma, 65530, 64).is_err());
        // Canary writes and zeroing give no line data.
        ma.without_elision().write(60000, &[1]).expect("write");
        assert!(a.zero(12288, 4096));
        assert_eq!(a.data_lines(), 2);
        // Atomic stores are data (flags and completion words).
        mb.store_u64(50000, 7, Ordering::Release).expect("store");
        assert_eq!(b.data_lines(), 4);
        // A long mark over several bitmap words, and a query inside it.
        mb.fill(1000, 10_000, 1).expect("fill");
        assert!(mb.holds_data(5000, 1).expect("in range"));
        assert_eq!(b.data_lines(), 4 + (11_000usize.div_ceil(64) - 1000 / 64));
    }

    /// A copy over pages of which some hold data: each page as without
    /// elision, and the destination's lines get data only from the
    /// source's pages that held some.
    #[test]
    fn an_elided_copy_goes_page_by_page() {
        let a = SharedMapping::new_elided(1 << 16).expect("mmap");
        let b = SharedMapping::new_elided(1 << 16).expect("mmap");
        let (ma, mb) = (a.memory(), b.memory());
        ma.fill(4096, 100, 7).expect("page 1");
        ma.fill(3 * 4096 + 4000, 96, 9).expect("end of page 3");
        mb.copy_from(100, &ma, 4096, 4 * 4096).expect("copy");
        let mut want = vec![0u8; 4 * 4096];
        want[..100].fill(7);
        want[2 * 4096 + 4000..2 * 4096 + 4096].fill(9);
        let mut got = vec![1u8; 4 * 4096];
        mb.read(100, &mut got).expect("read");
        assert!(got == want, "the bytes a plain copy gives");
        // Each source page that holds data is copied whole: 4096 bytes
        // from offset 100 (or 8292) span 65 destination lines; the two
        // pages without data give none.
        assert_eq!(b.data_lines(), 2 * 65);
    }

    #[test]
    fn without_elision_every_copy_moves() {
        let a = SharedMapping::new(8192).expect("mmap");
        let b = SharedMapping::new(8192).expect("mmap");
        b.memory().fill(0, 8, 0xee).expect("fill");
        b.memory().copy_from(0, &a.memory(), 4096, 8).expect("copy");
        let mut out = [1u8; 8];
        b.memory().read(0, &mut out).expect("read");
        assert_eq!(out, [0; 8], "zeros moved over the data");
        assert_eq!(a.data_lines(), 0);
    }
}
