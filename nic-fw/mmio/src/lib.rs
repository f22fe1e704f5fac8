//! railcoll-mmio: the one place a bare-metal railcoll image touches
//! memory-mapped peripherals.
//!
//! A board names each peripheral block of its memory map as a type and
//! implements [`Block`] for it, an `unsafe impl` whose `// SAFETY:`
//! comment is the board's promise that the block is device memory. A
//! block's registers are reached only
//! through volatile accesses: a 32-bit register at a const offset checked
//! when the image is compiled ([`Block::r32`]), or a 64-bit word or a byte
//! at a run-time offset checked against the block's length
//! ([`Block::r64`], [`Block::byte`]). So no safe call names an address
//! outside the map. The accesses' `unsafe` lives here, in three blocks;
//! the boards keep theirs for the `unsafe impl`s, their entry points and
//! `wfi`. Used by the reference-SoC firmware image (`nic-fw/image`) and
//! the QEMU `virt` board (`nic-fw/boards/qemu-virt`); on any other
//! machine the addresses mean nothing, so nothing here runs in the
//! workspace's tests (it is built and linted there).
#![no_std]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use core::ptr::NonNull;

use volatile::VolatilePtr;

/// A peripheral block of a board's memory map: [`Block::LEN`] bytes at
/// [`Block::BASE`]. A board names each block as a type and implements
/// this trait for it; the provided methods are its only way in.
///
/// # Safety
///
/// The implementer vouches that `BASE..BASE + LEN` is a region of the
/// board's memory map that is always mapped, not memory the program uses
/// otherwise, that it may be read and written with volatile accesses of
/// every width the provided methods make (32-bit registers; 64-bit words
/// and bytes where a board uses [`Block::r64`] and [`Block::byte`]) at any
/// time, and that nothing else in the program reaches it except through
/// this trait (a board's peripherals belong to its one engine).
pub unsafe trait Block {
    /// First byte of the block.
    const BASE: usize;
    /// Its length in bytes.
    const LEN: usize;

    /// The 32-bit register at byte offset `OFF`.
    fn r32<const OFF: usize>() -> VolatilePtr<'static, u32> {
        // Checked when the image is compiled.
        const {
            assert!(
                OFF.is_multiple_of(4)
                    && OFF + 4 <= Self::LEN
                    && Self::BASE != 0
                    && (Self::BASE + OFF).is_multiple_of(4)
            );
        };
        // SAFETY: a 4-aligned, non-null register inside the block (asserted
        // above); mapped device memory by the implementer's promise.
        unsafe { VolatilePtr::new(NonNull::new_unchecked((Self::BASE + OFF) as *mut u32)) }
    }

    /// The 64-bit word at byte offset `offset`, if it lies in the block and
    /// is 8-byte aligned.
    fn r64(offset: usize) -> Option<VolatilePtr<'static, u64>> {
        if offset.checked_add(8).is_none_or(|end| end > Self::LEN) {
            return None;
        }
        let address = Self::BASE.checked_add(offset)?;
        if !address.is_multiple_of(8) {
            return None;
        }
        let at = NonNull::new(address as *mut u64)?;
        // SAFETY: an 8-aligned, non-null word inside the block (checked
        // above); mapped device memory by the implementer's promise.
        Some(unsafe { VolatilePtr::new(at) })
    }

    /// Byte `offset` of a byte-addressable block, if inside it.
    fn byte(offset: usize) -> Option<VolatilePtr<'static, u8>> {
        if offset >= Self::LEN {
            return None;
        }
        let at = NonNull::new(Self::BASE.checked_add(offset)? as *mut u8)?;
        // SAFETY: a non-null byte inside the block (checked above); mapped
        // device memory by the implementer's promise.
        Some(unsafe { VolatilePtr::new(at) })
    }
}
