//! The reference SoC: the engine's hardware traits over memory-mapped
//! peripherals. Every access is a volatile MMIO access through
//! `railcoll-mmio`; the one `unsafe` block here is `wfi`.
//!
//! | base | block | registers (32-bit unless noted) |
//! |---|---|---|
//! | `0x1000_0000` | register file (BAR0, dual-ported with PCIe) | 64-bit words at BAR0 offsets |
//! | `0x1000_1000` | doorbells | `+0x0` pending mask lo, `+0x4` hi (read clears) |
//! | `0x1001_0000` | host DMA | `+0x0/4` host addr lo/hi, `+0x8` local addr, `+0xc` len, `+0x10` ctrl (1 = host->local, 2 = local->host, 3 = word write release), `+0x14` status (bit 0 busy, bit 1 error), `+0x18/1c` word lo/hi |
//! | `0x1002_0000` | MAC TX | `+0x000..0x040` header, `+0x40/44` payload host addr lo/hi, `+0x48` payload len, `+0x4c` go (reads 0 when the FIFO is full), `+0x50` path (0 direct; bit 8 set: through the sibling on rail 7:0, ABI 1.5) |
//! | `0x1003_0000` | MAC RX | `+0x000..0x040` header, `+0x40` payload len, `+0x44` status (bit 0 packet present), `+0x48/4c` deliver host addr lo/hi, `+0x50` deliver go, `+0x54` deliver status (bit 0 busy, bit 1 error), `+0x58` pop, `+0x5c` the packet's path (as TX `+0x50`) |
//! | `0x1004_0000` | host interrupt | `+0x0` wake context (write) |
//! | `0x1005_0000` | board | `+0x0` straps: node in 15:0, rail in 23:16, `PEER_SET` FIFO depth in 31:24 (0: no sibling NICs) |
//! | `0x1006_0000` | NIC-to-NIC path | `+0x0/4` word lo/hi to post, `+0x8` post to rail (write), `+0xc` post status (bit 0 accepted, bit 1 no such sibling, bit 2 its FIFO full); `+0x10/14` oldest received word lo/hi, `+0x18` status (bit 0 a word is present), `+0x1c` pop (write) |
//! | `0x0200_bff8` | CLINT `mtime` | 64-bit, `MTIME_HZ` ticks per second |
//! | `0x2000_0000` | bounce SRAM | 4 KiB, for host reads/writes by the CPU |

use railcoll_fw::abi::ContextIndex;
use railcoll_fw::abi::error::ErrorCode;
use railcoll_fw::abi::packet::{HEADER_LEN, PacketHeader};
use railcoll_fw::engine::hw::{
    BusError, Clock, HostMemory, HostWake, Link, Meter, Path, PayloadSource, PeerSet, RegisterFile,
    Siblings,
};
use railcoll_mmio::Block;

// The map above, block by block; every register is reached through
// railcoll-mmio.

/// The register file (BAR0, dual-ported with PCIe).
#[derive(Debug)]
struct Regs;
// SAFETY: 0x1000_0000, railcoll_fw::abi::regs::BAR0_SIZE as usize bytes: the the register file (BAR0, dual-ported with PCIe) of the map above, always-mapped device memory reached only through this block.
unsafe impl Block for Regs {
    const BASE: usize = 0x1000_0000;
    const LEN: usize = railcoll_fw::abi::regs::BAR0_SIZE as usize;
}

/// Doorbell pending mask (read clears).
#[derive(Debug)]
struct Doorbells;
// SAFETY: 0x1000_1000..+8 is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Doorbells {
    const BASE: usize = 0x1000_1000;
    const LEN: usize = 8;
}

/// Host DMA.
#[derive(Debug)]
struct Dma;
// SAFETY: 0x1001_0000..+0x20 is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Dma {
    const BASE: usize = 0x1001_0000;
    const LEN: usize = 0x20;
}

/// MAC transmit.
#[derive(Debug)]
struct Tx;
// SAFETY: 0x1002_0000..+0x54 is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Tx {
    const BASE: usize = 0x1002_0000;
    const LEN: usize = 0x54;
}

/// MAC receive.
#[derive(Debug)]
struct Rx;
// SAFETY: 0x1003_0000..+0x60 is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Rx {
    const BASE: usize = 0x1003_0000;
    const LEN: usize = 0x60;
}

/// Host interrupt.
#[derive(Debug)]
struct Irq;
// SAFETY: 0x1004_0000..+4 is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Irq {
    const BASE: usize = 0x1004_0000;
    const LEN: usize = 4;
}

/// Board straps.
#[derive(Debug)]
struct Board;
// SAFETY: 0x1005_0000..+4 is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Board {
    const BASE: usize = 0x1005_0000;
    const LEN: usize = 4;
}

/// NIC-to-NIC path (sibling `PEER_SET` FIFOs).
#[derive(Debug)]
struct Peer;
// SAFETY: 0x1006_0000..+0x20 is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Peer {
    const BASE: usize = 0x1006_0000;
    const LEN: usize = 0x20;
}

/// CLINT `mtime`.
#[derive(Debug)]
struct Mtime;
// SAFETY: 0x0200_bff8..+8 is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Mtime {
    const BASE: usize = 0x0200_bff8;
    const LEN: usize = 8;
}

/// Bounce SRAM for host reads and writes by the CPU.
#[derive(Debug)]
struct Sram;
// SAFETY: 0x2000_0000..+SRAM_LEN is a block of the map above: always-mapped
// device memory, reached only through this type.
unsafe impl Block for Sram {
    const BASE: usize = 0x2000_0000;
    const LEN: usize = SRAM_LEN;
}
/// Local address of the bounce SRAM, as the DMA block takes it.
const SRAM_BASE: usize = 0x2000_0000;
const SRAM_LEN: usize = 4096;
const MTIME_HZ: u64 = 100_000_000;

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
        Board::r32::<0>().read()
    }

    fn dma(&mut self, host: u64, local: usize, len: usize, ctrl: u32) -> Result<(), BusError> {
        Dma::r32::<0>().write(host as u32);
        Dma::r32::<4>().write((host >> 32) as u32);
        Dma::r32::<8>().write(local as u32);
        Dma::r32::<0xc>().write(len as u32);
        Dma::r32::<0x10>().write(ctrl);
        loop {
            let status = Dma::r32::<0x14>().read();
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
            self.dma(phys.wrapping_add(done as u64), SRAM_BASE, chunk.len(), 1)?;
            for (i, b) in chunk.iter_mut().enumerate() {
                *b = Sram::byte(i).ok_or(BusError)?.read();
            }
            done = done.wrapping_add(chunk.len());
        }
        Ok(())
    }

    fn write(&mut self, phys: u64, data: &[u8]) -> Result<(), BusError> {
        let mut done = 0usize;
        for chunk in data.chunks(SRAM_LEN) {
            for (i, b) in chunk.iter().enumerate() {
                Sram::byte(i).ok_or(BusError)?.write(*b);
            }
            self.dma(phys.wrapping_add(done as u64), SRAM_BASE, chunk.len(), 2)?;
            done = done.wrapping_add(chunk.len());
        }
        Ok(())
    }

    fn write_word_release(&mut self, phys: u64, value: u64) -> Result<(), BusError> {
        Dma::r32::<0x18>().write(value as u32);
        Dma::r32::<0x1c>().write((value >> 32) as u32);
        // The DMA block orders this write after all earlier writes (PCIe
        // posted writes are ordered).
        self.dma(phys, 0, 8, 3)
    }
}

impl Link for SocBoard {
    /// The payload stays in the MAC's RX FIFO until delivered.
    type Payload = u32;

    fn send(&mut self, header: &PacketHeader, payload: Option<PayloadSource>, path: Path) -> bool {
        if Tx::r32::<0x4c>().read() == 0 {
            return false;
        }
        for (i, b) in header.to_bytes().iter().enumerate() {
            match Tx::byte(i) {
                Some(r) => r.write(*b),
                None => return false,
            }
        }
        let (addr, len) = payload.map_or((0, 0), |p| (p.phys, p.len));
        Tx::r32::<0x40>().write(addr as u32);
        Tx::r32::<0x44>().write((addr >> 32) as u32);
        Tx::r32::<0x48>().write(len);
        Tx::r32::<0x50>().write(match path {
            Path::Direct => 0,
            Path::Sibling(rail) => 0x100 | u32::from(rail),
        });
        Tx::r32::<0x4c>().write(1);
        true
    }

    fn recv(&mut self) -> Option<(PacketHeader, u32, Path)> {
        if Rx::r32::<0x44>().read() & 1 == 0 {
            return None;
        }
        let mut raw = [0u8; HEADER_LEN];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = Rx::byte(i)?.read();
        }
        let len = Rx::r32::<0x40>().read();
        let path = match Rx::r32::<0x5c>().read() {
            p if p & 0x100 != 0 => Path::Sibling(p as u8),
            _ => Path::Direct,
        };
        Rx::r32::<0x58>().write(1);
        Some((PacketHeader::from_bytes(&raw), len, path))
    }

    fn payload_len(&self, payload: &u32) -> usize {
        *payload as usize
    }

    fn deliver(&mut self, _payload: &u32, phys: u64) -> Result<(), BusError> {
        Rx::r32::<0x48>().write(phys as u32);
        Rx::r32::<0x4c>().write((phys >> 32) as u32);
        Rx::r32::<0x50>().write(1);
        loop {
            let status = Rx::r32::<0x54>().read();
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
        Regs::r64(offset as usize).map_or(u64::MAX, |r| r.read())
    }

    fn reg_write(&mut self, offset: u32, value: u64) {
        if let Some(r) = Regs::r64(offset as usize) {
            r.write(value);
        }
    }

    fn take_doorbells(&mut self) -> u64 {
        let lo = Doorbells::r32::<0>().read() as u64;
        let hi = Doorbells::r32::<4>().read() as u64;
        lo | (hi << 32)
    }
}

impl Clock for SocBoard {
    fn now_ns(&self) -> u64 {
        let ticks = Mtime::r64(0).map_or(0, |r| r.read());
        ticks.wrapping_mul(1_000_000_000 / MTIME_HZ)
    }
}

impl HostWake for SocBoard {
    fn wake(&mut self, ctx: ContextIndex) {
        Irq::r32::<0>().write(ctx as u32);
    }
}

impl Siblings for SocBoard {
    fn peer_set(&mut self, rail: u8, set: PeerSet) -> Result<(), ErrorCode> {
        let word = set.to_word();
        Peer::r32::<0x0>().write(word as u32);
        Peer::r32::<0x4>().write((word >> 32) as u32);
        Peer::r32::<0x8>().write(u32::from(rail));
        let status = Peer::r32::<0xc>().read();
        if status & 1 != 0 {
            Ok(())
        } else if status & 4 != 0 {
            Err(ErrorCode::Busy)
        } else {
            Err(ErrorCode::PeerUnreachable)
        }
    }

    fn take_peer_set(&mut self) -> Option<PeerSet> {
        if Peer::r32::<0x18>().read() & 1 == 0 {
            return None;
        }
        let lo = u64::from(Peer::r32::<0x10>().read());
        let hi = u64::from(Peer::r32::<0x14>().read());
        Peer::r32::<0x1c>().write(1);
        Some(PeerSet::from_word(lo | (hi << 32)))
    }

    fn peer_fifo_depth(&self) -> u8 {
        (Board::r32::<0>().read() >> 24) as u8
    }
}

/// The soft core keeps no activity accounting (the engine's calls compile
/// to nothing); a performance-counter block could count them here.
impl Meter for SocBoard {}
