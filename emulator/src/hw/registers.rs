//! A NIC's register file, shared by the host driver and the firmware.
//!
//! Registers are atomics (release stores, acquire loads), so a doorbell
//! write orders every command block written before it. Writes to a
//! doorbell register (`CQ_TAIL`, `MBOX_CMD`) also set a bit in the pending
//! doorbell mask and wake the NIC's worker.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use railcoll_fw::abi::regs::{self, Access, Reg};
use railcoll_fw::engine::hw::DOORBELL_MAILBOX;
use railcoll_mem::regio::RegisterIo;

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

/// One NIC's BAR0.
#[derive(Debug)]
pub struct SharedRegisters {
    words: Vec<AtomicU64>,
    doorbells: AtomicU64,
    notifier: Option<Notifier>,
}

impl SharedRegisters {
    /// A zeroed register file whose doorbells wake `notifier` (threads
    /// mode); with `None` the owner polls the NIC itself (modeled mode).
    pub fn new(notifier: Option<Notifier>) -> Arc<Self> {
        Arc::new(Self {
            words: (0..regs::BAR0_SIZE / 8)
                .map(|_| AtomicU64::new(0))
                .collect(),
            doorbells: AtomicU64::new(0),
            notifier,
        })
    }

    fn word(&self, offset: u32) -> Option<&AtomicU64> {
        if !offset.is_multiple_of(8) {
            return None;
        }
        self.words.get(offset as usize / 8)
    }

    /// Firmware-side read.
    pub fn nic_read(&self, reg: impl NicOffset) -> u64 {
        self.word(reg.nic_offset())
            .map_or(u64::MAX, |w| w.load(Ordering::Acquire))
    }

    /// Firmware-side write (no doorbell).
    pub fn nic_write(&self, reg: impl NicOffset, value: u64) {
        if let Some(w) = self.word(reg.nic_offset()) {
            w.store(value, Ordering::Release);
        }
    }

    /// Did the last write to `offset` ring a doorbell? (`CQ_TAIL`,
    /// `MBOX_CMD`.)
    pub fn is_doorbell(offset: u32) -> bool {
        offset == regs::MBOX_CMD.offset() || regs::CQ_TAIL.context_of(offset).is_some()
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
        let Some(w) = self.word(offset) else {
            return;
        };
        w.store(value, Ordering::Release);
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
