//! A NIC's register file, shared by the host driver and the firmware.
//!
//! Registers are atomics (release stores, acquire loads), so a doorbell
//! write orders every command block written before it. Writes to a
//! doorbell register (`CQ_TAIL`, `MBOX_CMD`) also set a bit in the pending
//! doorbell mask and wake the NIC's worker.
//!
//! The file also holds the NIC's `PEER_SET` FIFO (ABI 1.2): the node's
//! other NICs post [`railcoll_fw::abi::event::PeerSet`] words into it
//! (a PCIe peer-to-peer write on hardware), [`PEER_FIFO_DEPTH`] deep. A
//! sender reserves an entry first, so a set still on its way (modeled
//! mode's bus latency) counts against the depth and a full FIFO refuses
//! the sender (`Busy`) instead of dropping a set.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use railcoll_fw::abi::regs::{self, Access, Reg};
use railcoll_fw::engine::hw::DOORBELL_MAILBOX;
use railcoll_mem::dma_mem::DmaMemory;
use railcoll_mem::mmap::SharedMapping;
use railcoll_mem::regio::RegisterIo;
use std::os::fd::OwnedFd;

use crate::hw::notify::Notifier;

/// A register address on the firmware side: a raw offset (what the board
/// traits pass) or a typed register of any host access (the NIC owns the
/// file).
pub trait NicOffset {
    /// The byte offset in BAR0.
    fn nic_offset(self) -> u32;
}

impl NicOffset for u32 {
    fn nic_offset(self) -> u32 {
        self
    }
}

impl<A: Access> NicOffset for Reg<u64, A> {
    fn nic_offset(self) -> u32 {
        self.offset()
    }
}

/// Entries of an emulated NIC's `PEER_SET` FIFO.
pub const PEER_FIFO_DEPTH: u8 = 64;

/// One NIC's BAR0: 64-bit words in a shared mapping (an anonymous one in
/// the emulator's own process; a memory file `railcoll nicd` hands to
/// rank processes as the device's BAR0 region, [`SharedRegisters::in_file`]).
#[derive(Debug)]
pub struct SharedRegisters {
    words: DmaMemory,
    _mapping: SharedMapping,
    doorbells: AtomicU64,
    notifier: Option<Notifier>,
    peer: Mutex<PeerFifo>,
}

/// The `PEER_SET` FIFO: the words posted, and the entries reserved by
/// senders (posted or still on their way).
#[derive(Debug, Default)]
struct PeerFifo {
    words: VecDeque<u64>,
    reserved: usize,
}

impl SharedRegisters {
    /// A zeroed register file whose doorbells wake `notifier` (threads
    /// mode); with `None` the owner polls the NIC itself (modeled mode).
    pub fn new(notifier: Option<Notifier>) -> std::io::Result<Arc<Self>> {
        Ok(Self::over(
            SharedMapping::new(regs::BAR0_SIZE as usize)?,
            notifier,
        ))
    }

    /// As [`SharedRegisters::new`], in a memory file other processes can
    /// map (the file is returned with it): the BAR0 region a `nicd`
    /// serves.
    pub fn in_file(notifier: Option<Notifier>) -> std::io::Result<(Arc<Self>, OwnedFd)> {
        let (mapping, fd) = SharedMapping::memfd("railcoll-bar0", regs::BAR0_SIZE as usize)?;
        Ok((Self::over(mapping, notifier), fd))
    }

    fn over(mapping: SharedMapping, notifier: Option<Notifier>) -> Arc<Self> {
        Arc::new(Self {
            words: mapping.memory(),
            _mapping: mapping,
            doorbells: AtomicU64::new(0),
            notifier,
            peer: Mutex::new(PeerFifo::default()),
        })
    }

    fn peer(&self) -> std::sync::MutexGuard<'_, PeerFifo> {
        self.peer.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A sibling NIC: reserve a `PEER_SET` entry (false: the FIFO is full).
    pub fn peer_reserve(&self) -> bool {
        let mut fifo = self.peer();
        if fifo.reserved >= usize::from(PEER_FIFO_DEPTH) {
            return false;
        }
        fifo.reserved += 1;
        true
    }

    /// A sibling NIC: the reserved entry's word arrives; the NIC's worker
    /// is woken (threads mode).
    pub fn peer_push(&self, word: u64) {
        self.peer().words.push_back(word);
        if let Some(n) = &self.notifier {
            n.notify();
        }
    }

    /// Firmware-side: take the oldest posted word, freeing its entry.
    pub fn peer_take(&self) -> Option<u64> {
        let mut fifo = self.peer();
        let word = fifo.words.pop_front()?;
        fifo.reserved = fifo.reserved.saturating_sub(1);
        Some(word)
    }

    /// The byte offset of a register inside BAR0 (8-byte aligned).
    fn word(offset: u32) -> Option<usize> {
        (offset.is_multiple_of(8) && offset < regs::BAR0_SIZE).then_some(offset as usize)
    }

    /// Firmware-side read (all ones outside BAR0, as a master abort).
    pub fn nic_read(&self, reg: impl NicOffset) -> u64 {
        Self::word(reg.nic_offset())
            .and_then(|at| self.words.load_u64(at, Ordering::Acquire).ok())
            .unwrap_or(u64::MAX)
    }

    /// Firmware-side write (no doorbell).
    pub fn nic_write(&self, reg: impl NicOffset, value: u64) {
        if let Some(at) = Self::word(reg.nic_offset()) {
            let _ = self.words.store_u64(at, value, Ordering::Release);
        }
    }

    /// Firmware-side: take the pending doorbells.
    pub fn take_doorbells(&self) -> u64 {
        if self.doorbells.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        self.doorbells.swap(0, Ordering::AcqRel)
    }
}

impl RegisterIo for SharedRegisters {
    fn read(&self, offset: u32) -> u64 {
        self.nic_read(offset)
    }

    fn write(&self, offset: u32, value: u64) {
        let Some(at) = Self::word(offset) else {
            return;
        };
        let _ = self.words.store_u64(at, value, Ordering::Release);
        let bell = if offset == regs::MBOX_CMD.offset() {
            DOORBELL_MAILBOX
        } else {
            match regs::CQ_TAIL.context_of(offset) {
                Some(ctx) => 1u64 << ctx,
                None => 0,
            }
        };
        if bell != 0 {
            self.doorbells.fetch_or(bell, Ordering::AcqRel);
            if let Some(n) = &self.notifier {
                n.notify();
            }
        }
    }
}
