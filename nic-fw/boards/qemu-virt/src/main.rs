//! The railcoll firmware self-test on QEMU's riscv32 `virt` machine.
//!
//! Boots with `-bios none` at the start of DRAM, zeroes `.bss`, gives the
//! two NICs' host memories the stack, runs every step of
//! `railcoll-fw-selftest` (two unmodified engines, compiled for
//! riscv32imac) and prints each step, the verdict and the guest time it
//! took on the UART; then ends QEMU through the test finisher, with
//! status 0 only if every step passed. The panic handler calls a symbol
//! that does not exist, so the image links only if the optimiser removed
//! every panic path, as for the firmware image.
//!
//! Run it with `cargo run --release` in this directory (the runner is
//! `qemu-system-riscv32 -machine virt -m 64M -nographic -bios none`).
#![no_std]
#![no_main]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

mod virt;

use railcoll_fw_selftest::MEM_LEN;
use railcoll_fw_selftest::report::{Console, write_u64};
use virt::UartConsole;

core::arch::global_asm!(
    ".section .text.start",
    ".global _start",
    "_start:",
    "  la sp, _stack_top",
    "  la t0, _bss_start",
    "  la t1, _bss_end",
    "1:",
    "  bgeu t0, t1, 2f",
    "  sw zero, 0(t0)",
    "  addi t0, t0, 4",
    "  j 1b",
    "2:",
    "  j {main}",
    main = sym main,
);

extern "C" fn main() -> ! {
    let mut console = UartConsole;
    let mut mem_a = [0u8; MEM_LEN];
    let mut mem_b = [0u8; MEM_LEN];
    let start = virt::mtime();
    let clock = core::cell::Cell::new(0);
    let mut fabric = railcoll_fw_selftest::fabric::Fabric::new(&mut mem_a, &mut mem_b, &clock);
    if cfg!(feature = "planted-failure") {
        // A link that loses every frame: the put step must fail.
        fabric.loss = Some(1);
    }
    let verdict = railcoll_fw_selftest::run_on(&mut fabric, &mut console);
    let micros = virt::mtime().wrapping_sub(start) / (virt::MTIME_HZ / 1_000_000);
    console.write_str("guest time: ");
    write_u64(&mut console, micros);
    console.write_str(" us\n");
    virt::exit(verdict.ok())
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    unsafe extern "C" {
        /// Deliberately undefined: referencing it fails the link.
        fn railcoll_selftest_must_never_panic() -> !;
    }
    // SAFETY: never executed: the image does not link while any call to
    // this handler survives optimisation, which is the point.
    unsafe { railcoll_selftest_must_never_panic() }
}
