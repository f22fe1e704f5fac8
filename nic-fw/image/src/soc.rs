//! The reference SoC: the engine's hardware traits over memory-mapped
//! peripherals. Every access is a volatile MMIO access; this is the only
//! module with `unsafe` code in the image.
//!
//! | base | block | registers (32-bit unless noted) |
//! |---|---|---|
//! | `0x1000_0000` | register file (BAR0, dual-ported with PCIe) | 64-bit words at BAR0 offsets |
//! | `0x1000_1000` | doorbells | `+0x0` pending mask lo, `+0x4` hi (read clears) |
//! | `0x1001_0000` | host DMA | `+0x0/4` host addr lo/hi, `+0x8` local addr, `+0xc` len, `+0x10` ctrl (1 = host->local, 2 = local->host, 3 = word write release), `+0x14` status (bit 0 busy, bit 1 error), `+0x18/1c` word lo/hi |
//! | `0x1002_0000` | MAC TX | `+0x000..0x040` header, `+0x40/44` payload host addr lo/hi, `+0x48` payload len, `+0x4c` go (reads 0 when the FIFO is full) |
//! | `0x1003_0000` | MAC RX | `+0x000..0x040` header, `+0x40` payload len, `+0x44` status (bit 0 packet present), `+0x48/4c` deliver host addr lo/hi, `+0x50` deliver go, `+0x54` deliver status (bit 0 busy, bit 1 error), `+0x58` pop |
//! | `0x1004_0000` | host interrupt | `+0x0` wake context (write) |
//! | `0x1005_0000` | board | `+0x0` straps: node in 15:0, rail in 23:16 |
//! | `0x0200_bff8` | CLINT `mtime` | 64-bit, `MTIME_HZ` ticks per second |
//! | `0x2000_0000` | bounce SRAM | 4 KiB, for host reads/writes by the CPU |

use core::ptr::NonNull;

use railcoll_fw::abi::ContextIndex;
use railcoll_fw::abi::packet::{HEADER_LEN, PacketHeader};
use railcoll_fw::engine::hw::{
    BusError, Clock, HostMemory, HostWake, Link, Meter, PayloadSource, RegisterFile,
};
use volatile::VolatilePtr;

const REGS: usize = 0x1000_0000;
const DOORBELLS: usize = 0x1000_1000;
const DMA: usize = 0x1001_0000;
const TX: usize = 0x1002_0000;
const RX: usize = 0x1003_0000;
const IRQ: usize = 0x1004_0000;
const BOARD: usize = 0x1005_0000;
const MTIME: usize = 0x0200_bff8;
const SRAM: usize = 0x2000_0000;
const SRAM_LEN: usize = 4096;
const MTIME_HZ: u64 = 100_000_000;

fn reg32(addr: usize) -> VolatilePtr<'static, u32> {
    // SAFETY: every address passed here is a fixed peripheral register of
    // the reference SoC map above, 4-byte aligned and always mapped.
    unsafe { VolatilePtr::new(NonNull::new_unchecked(addr as *mut u32)) }
}

fn reg64(addr: usize) -> VolatilePtr<'static, u64> {
    // SAFETY: as for reg32, for the 64-bit register file and mtime.
    unsafe { VolatilePtr::new(NonNull::new_unchecked(addr as *mut u64)) }
}

fn byte(addr: usize) -> VolatilePtr<'static, u8> {
    // SAFETY: used only for the bounce SRAM and header windows, which are
    // byte-addressable memory of the SoC map above.
    unsafe { VolatilePtr::new(NonNull::new_unchecked(addr as *mut u8)) }
}

/// Sleep until an interrupt (doorbell, packet, timer).
pub fn wait_for_interrupt() {
    // SAFETY: `wfi` only pauses the hart until an interrupt is pending.
    unsafe { core::arch::asm!("wfi", options(nomem, nostack)) };
}

/// The board.
#[derive(Debug)]
pub struct SocBoard {
    _private: (),
}

impl SocBoard {
    /// The board (peripherals are global; one engine per core).
    pub fn new() -> Self {
        Self { _private: () }
    }

    /// Strap pins.
    pub fn straps(&self) -> u32 {
        reg32(BOARD).read()
    }

    fn dma(&mut self, host: u64, local: usize, len: usize, ctrl: u32) -> Result<(), BusError> {
        reg32(DMA).write(host as u32);
        reg32(DMA + 4).write((host >> 32) as u32);
        reg32(DMA + 8).write(local as u32);
        reg32(DMA + 0xc).write(len as u32);
        reg32(DMA + 0x10).write(ctrl);
        loop {
            let status = reg32(DMA + 0x14).read();
            if status & 1 == 0 {
                return if status & 2 == 0 {
                    Ok(())
                } else {
                    Err(BusError)
                };
            }
        }
    }
}

impl HostMemory for SocBoard {
    fn read(&mut self, phys: u64, buf: &mut [u8]) -> Result<(), BusError> {
        let mut done = 0usize;
        for chunk in buf.chunks_mut(SRAM_LEN) {
            self.dma(phys.wrapping_add(done as u64), SRAM, chunk.len(), 1)?;
            for (i, b) in chunk.iter_mut().enumerate() {
                *b = byte(SRAM + i).read();
            }
            done = done.wrapping_add(chunk.len());
        }
        Ok(())
    }

    fn write(&mut self, phys: u64, data: &[u8]) -> Result<(), BusError> {
        let mut done = 0usize;
        for chunk in data.chunks(SRAM_LEN) {
            for (i, b) in chunk.iter().enumerate() {
                byte(SRAM + i).write(*b);
            }
            self.dma(phys.wrapping_add(done as u64), SRAM, chunk.len(), 2)?;
            done = done.wrapping_add(chunk.len());
        }
        Ok(())
    }

    fn write_word_release(&mut self, phys: u64, value: u64) -> Result<(), BusError> {
        reg32(DMA + 0x18).write(value as u32);
        reg32(DMA + 0x1c).write((value >> 32) as u32);
        // The DMA block orders this write after all earlier writes (PCIe
        // posted writes are ordered).
        self.dma(phys, 0, 8, 3)
    }
}

impl Link for SocBoard {
    /// The payload stays in the MAC's RX FIFO until delivered.
    type Payload = u32;

    fn send(&mut self, header: &PacketHeader, payload: Option<PayloadSource>) -> bool {
        if reg32(TX + 0x4c).read() == 0 {
            return false;
        }
        for (i, b) in header.to_bytes().iter().enumerate() {
            byte(TX + i).write(*b);
        }
        let (addr, len) = payload.map_or((0, 0), |p| (p.phys, p.len));
        reg32(TX + 0x40).write(addr as u32);
        reg32(TX + 0x44).write((addr >> 32) as u32);
        reg32(TX + 0x48).write(len);
        reg32(TX + 0x4c).write(1);
        true
    }

    fn recv(&mut self) -> Option<(PacketHeader, u32)> {
        if reg32(RX + 0x44).read() & 1 == 0 {
            return None;
        }
        let mut raw = [0u8; HEADER_LEN];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = byte(RX + i).read();
        }
        let len = reg32(RX + 0x40).read();
        reg32(RX + 0x58).write(1);
        Some((PacketHeader::from_bytes(&raw), len))
    }

    fn payload_len(&self, payload: &u32) -> usize {
        *payload as usize
    }

    fn deliver(&mut self, _payload: &u32, phys: u64) -> Result<(), BusError> {
        reg32(RX + 0x48).write(phys as u32);
        reg32(RX + 0x4c).write((phys >> 32) as u32);
        reg32(RX + 0x50).write(1);
        loop {
            let status = reg32(RX + 0x54).read();
            if status & 1 == 0 {
                return if status & 2 == 0 {
                    Ok(())
                } else {
                    Err(BusError)
                };
            }
        }
    }
}

impl RegisterFile for SocBoard {
    fn reg_read(&self, offset: u32) -> u64 {
        if offset >= railcoll_fw::abi::regs::BAR0_SIZE || !offset.is_multiple_of(8) {
            return u64::MAX;
        }
        reg64(REGS + offset as usize).read()
    }

    fn reg_write(&mut self, offset: u32, value: u64) {
        if offset < railcoll_fw::abi::regs::BAR0_SIZE && offset.is_multiple_of(8) {
            reg64(REGS + offset as usize).write(value);
        }
    }

    fn take_doorbells(&mut self) -> u64 {
        let lo = reg32(DOORBELLS).read() as u64;
        let hi = reg32(DOORBELLS + 4).read() as u64;
        lo | (hi << 32)
    }
}

impl Clock for SocBoard {
    fn now_ns(&self) -> u64 {
        let ticks = reg64(MTIME).read();
        ticks.wrapping_mul(1_000_000_000 / MTIME_HZ)
    }
}

impl HostWake for SocBoard {
    fn wake(&mut self, ctx: ContextIndex) {
        reg32(IRQ).write(ctx as u32);
    }
}

/// The soft core keeps no activity accounting (the engine's calls compile
/// to nothing); a performance-counter block could count them here.
impl Meter for SocBoard {}
