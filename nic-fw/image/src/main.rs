//! The railcoll NIC firmware, linked for a RISC-V soft core.
//!
//! `soc` implements the engine's hardware traits over the reference SoC
//! memory map of `docs/abi.md`; `main` brings the engine up and polls it
//! forever. The panic handler calls a symbol that does not exist, so this
//! image only links if the optimiser removed every panic path from the
//! firmware: "the firmware never panics" is checked at link time.
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod soc;

use railcoll_fw::engine::{Engine, Location};

/// Flow-slot and event-table sizes of this image: 64 peers per direction,
/// 64 events per context (about 105 KiB of RAM).
type Firmware = Engine<soc::SocBoard, 64, 64>;

core::arch::global_asm!(
    ".section .text.start",
    ".global _start",
    "_start:",
    "  la sp, _stack_top",
    "  j {main}",
    main = sym main,
);

extern "C" fn main() -> ! {
    let board = soc::SocBoard::new();
    let location = board.location();
    let mut engine = Firmware::new(board, location);
    #[cfg(feature = "planted-panic")]
    {
        // Bounds-checked with a value known only at run time: its panic
        // path survives optimisation, and the link must fail.
        let table = [0u8; 4];
        let index = core::hint::black_box(location.rail as usize);
        core::hint::black_box(table[index]);
    }
    loop {
        let outcome = engine.poll();
        if !outcome.progressed && !outcome.pending {
            soc::wait_for_interrupt();
        }
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    unsafe extern "C" {
        /// Deliberately undefined: referencing it fails the link.
        fn railcoll_firmware_must_never_panic() -> !;
    }
    // SAFETY: never executed: the image does not link while any call to
    // this handler survives optimisation, which is the point.
    unsafe { railcoll_firmware_must_never_panic() }
}

// Location of the NIC (node and rail) comes from the board straps.
impl soc::SocBoard {
    fn location(&self) -> Location {
        let raw = self.straps();
        Location {
            node: raw as u16,
            rail: (raw >> 16) as u8,
        }
    }
}
