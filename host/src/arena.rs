//! The symmetric arena allocator.
//!
//! Every rank runs the same sequence of allocations, so every rank gets the
//! same offsets (SHMEM's symmetric heap): a remote address is just (rank,
//! offset), with no address exchange. The allocator is a bump allocator with
//! alignment; `reset` frees everything at once.

use crate::error::Error;

/// Virtual base of every rank's arena on its NICs (the same on all ranks:
/// symmetric), where the driver maps it.
pub const ARENA_VA: u64 = 0x1000_0000_0000;

/// A range of the symmetric arena, valid on every rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SymBuffer {
    offset: usize,
    len: usize,
}

impl SymBuffer {
    /// Offset in the arena (the same on every rank).
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The NIC virtual address of this buffer's byte `at` (the same on
    /// every rank), what a DMA command names.
    pub fn va(&self, at: usize) -> u64 {
        ARENA_VA + (self.offset + at) as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if zero-length.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A sub-range, bounds-checked.
    pub fn slice(&self, offset: usize, len: usize) -> Result<SymBuffer, Error> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(SymBuffer {
                offset: self.offset + offset,
                len,
            }),
            _ => Err(Error::OutOfBounds {
                what: "the buffer",
                offset,
                len,
                limit: self.len,
            }),
        }
    }
}

/// Bump allocator over `[0, size)`.
#[derive(Debug)]
pub struct SymAllocator {
    size: usize,
    next: usize,
    /// `reset` returns here: what the communicator reserved for itself.
    floor: usize,
    /// Allocations end at or below here: above are the communicators'
    /// slots (`crate::comm_slots`), taken from the top down.
    limit: usize,
}

/// Default alignment of allocations: a cache line.
pub const DEFAULT_ALIGN: usize = 64;

impl SymAllocator {
    /// An allocator over `size` bytes.
    pub fn new(size: usize) -> Self {
        Self {
            size,
            next: 0,
            floor: 0,
            limit: size,
        }
    }

    /// Allocate `len` bytes aligned to `align` (a power of two).
    pub fn alloc(&mut self, len: usize, align: usize) -> Result<SymBuffer, Error> {
        if !align.is_power_of_two() {
            return Err(Error::Misaligned {
                what: "alignment",
                align: 1,
                value: align,
            });
        }
        let start = self
            .next
            .checked_next_multiple_of(align)
            .ok_or(Error::ArenaExhausted {
                asked: len,
                free: 0,
            })?;
        let free = self.limit.saturating_sub(self.next);
        match start.checked_add(len) {
            Some(end) if end <= self.limit => {
                self.next = end;
                Ok(SymBuffer { offset: start, len })
            }
            _ => Err(Error::ArenaExhausted { asked: len, free }),
        }
    }

    /// Free everything allocated since the last [`SymAllocator::keep`].
    pub fn reset(&mut self) {
        self.next = self.floor;
    }

    /// Make everything allocated so far permanent (survives `reset`).
    pub fn keep(&mut self) {
        self.floor = self.next;
    }

    /// Bytes not yet allocated.
    pub fn free(&self) -> usize {
        self.limit.saturating_sub(self.next)
    }

    /// Where the next allocation would start (before alignment): the
    /// high-water mark of the allocations.
    pub fn used(&self) -> usize {
        self.next
    }

    /// Allocations may not go beyond `limit` (at most the size; below
    /// what is allocated, nothing more is).
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit.min(self.size);
    }

    /// The range `[offset, offset + len)` of the arena, unchecked against
    /// the allocations: for a region the caller reserved by other means
    /// (a communicator slot above the limit).
    pub(crate) fn region(offset: usize, len: usize) -> SymBuffer {
        SymBuffer { offset, len }
    }

    /// Arena size.
    pub fn size(&self) -> usize {
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reset_keeps_what_was_kept() {
        let mut a = SymAllocator::new(4096);
        let reserved = a.alloc(100, 64).expect("alloc");
        a.keep();
        let user = a.alloc(100, 64).expect("alloc");
        assert!(user.offset() >= reserved.offset() + reserved.len());
        a.reset();
        let again = a.alloc(100, 64).expect("alloc");
        assert_eq!(
            again.offset(),
            user.offset(),
            "reset returns to the kept floor"
        );
    }

    #[test]
    fn same_sequence_same_offsets_and_bounds() {
        let mut a = SymAllocator::new(1000);
        let mut b = SymAllocator::new(1000);
        for len in [1, 100, 7, 300] {
            assert_eq!(a.alloc(len, 64), b.alloc(len, 64));
        }
        assert!(matches!(
            a.alloc(600, 64),
            Err(Error::ArenaExhausted { .. })
        ));
        assert!(a.alloc(usize::MAX, 64).is_err());
        assert!(a.alloc(1, 3).is_err());
        let buf = a.alloc(10, 1).expect("fits");
        assert!(buf.slice(5, 6).is_err());
        assert_eq!(buf.slice(5, 5).expect("fits").offset(), buf.offset() + 5);
    }
}
