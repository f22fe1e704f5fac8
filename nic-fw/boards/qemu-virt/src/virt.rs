//! QEMU's riscv32 `virt` machine, as far as the self-test needs it.
//!
//! | base | device | used for |
//! |---|---|---|
//! | `0x0010_0000` | SiFive test finisher | `+0x0` (32-bit write): `0x5555` ends QEMU with status 0; `code << 16 \| 0x3333` ends it with status `code` |
//! | `0x0200_0000` | CLINT | `+0xbff8` `mtime` (64-bit, [`MTIME_HZ`] ticks per second) |
//! | `0x1000_0000` | NS16550A UART | `+0x0` transmit holding register, `+0x5` line status (bit 5: ready for a byte) |
//! | `0x8000_0000` | DRAM | the image (`link.x`), its stack at the top of the 64 MiB given by `-m 64M` |
//!
//! The addresses are those of QEMU's `hw/riscv/virt.c` memory map
//! (`VIRT_TEST`, `VIRT_CLINT`, `VIRT_UART0`, `VIRT_DRAM`) and its
//! ACLINT default timebase; with `-bios none` the reset vector jumps to
//! the start of DRAM. Every register is reached through `railcoll-mmio`.

use railcoll_fw_selftest::report::Console;
use railcoll_mmio::Block;

// QEMU's map above, block by block; every register is reached through
// railcoll-mmio.

/// SiFive test finisher.
#[derive(Debug)]
struct Finisher;
// SAFETY: 0x0010_0000..+4 is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Finisher {
    const BASE: usize = 0x0010_0000;
    const LEN: usize = 4;
}

/// CLINT `mtime`, as two 32-bit halves.
#[derive(Debug)]
struct Mtime;
// SAFETY: 0x0200_bff8..+8 is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Mtime {
    const BASE: usize = 0x0200_bff8;
    const LEN: usize = 8;
}

/// NS16550A UART, byte registers.
#[derive(Debug)]
struct Uart;
// SAFETY: 0x1000_0000..+8 is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Uart {
    const BASE: usize = 0x1000_0000;
    const LEN: usize = 8;
}

/// `mtime` ticks per second (QEMU's ACLINT default timebase).
pub const MTIME_HZ: u64 = 10_000_000;

/// The UART as the self-test's console.
#[derive(Debug)]
pub struct UartConsole;

impl UartConsole {
    fn put(byte: u8) {
        let (Some(status), Some(data)) = (Uart::byte(5), Uart::byte(0)) else {
            return;
        };
        while status.read() & 0x20 == 0 {}
        data.write(byte);
    }
}

impl Console for UartConsole {
    fn write_str(&mut self, s: &str) {
        for byte in s.bytes() {
            if byte == b'\n' {
                Self::put(b'\r');
            }
            Self::put(byte);
        }
    }
}

/// `mtime` now, read as high, low, high until the high half holds still
/// (the 32-bit hart reads the 64-bit counter in two halves).
pub fn mtime() -> u64 {
    loop {
        let high = Mtime::r32::<4>().read();
        let low = Mtime::r32::<0>().read();
        if Mtime::r32::<4>().read() == high {
            return (u64::from(high) << 32) | u64::from(low);
        }
    }
}

/// End QEMU: status 0 if `passed`, else status 1.
pub fn exit(passed: bool) -> ! {
    let finisher = Finisher::r32::<0>();
    finisher.write(if passed { 0x5555 } else { (1 << 16) | 0x3333 });
    // The finisher stops the machine at once; should it not exist, stay.
    loop {
        core::hint::spin_loop();
    }
}
