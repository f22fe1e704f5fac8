//! Modeled mode: the same firmware, driver and schedules against a virtual
//! clock, with costs from a calibration profile.
//!
//! - [`profile`]: the profiles (hardware costs, with sources).
//! - [`board`]: the firmware's hardware traits over virtual time.
//! - [`kernel`]: the sequencer: composes the parts below, runs the commit
//!   loop (ranks that run one at a time, NICs as polled state machines),
//!   and answers the ranks' waits.
//! - `queue`: the ordered action queue (a radix heap over virtual time of
//!   (virtual time, entity, sequence) keys into a slab) and the NICs'
//!   receive ports (packets served in the order their first bits arrive);
//!   knows nothing of ranks or NICs.
//! - `ranks`: rank and fiber state, structured waits and their wake-up
//!   tests.
//! - `witness`: what observes a run: the trace hash and recording, the
//!   watchdog and its report, the timeline hookup.
//! - [`fiber`]: ranks as stackful coroutines on the sequencer's thread
//!   (`railcoll_mem::fiber`, where its one unsafe dereference lives).
//!
//! This module's types plug into the host library's seams: [`ModelRegs`]
//! is a NIC's BAR as the driver sees it (writes are committed at the
//! writing rank's virtual time), [`ModelWait`] is a rank's wait hook
//! (blocking hands the baton to the sequencer).

pub mod board;
pub use railcoll_mem::fiber;
pub mod kernel;
pub mod profile;
mod queue;
mod ranks;
mod witness;

use std::sync::Arc;
use std::time::Duration;

use railcoll_host::env::{HostObserver, LibraryWork, WaitHook, WaitTimeout, WordWatch};
use railcoll_mem::regio::RegisterIo;

pub use kernel::{Kernel, ModelStats, Stalled, TraceDigest, TraceRecord};
pub use profile::{DEFAULT_PROFILE, Profile, ProfileError};

use crate::hw::registers::SharedRegisters;

/// A NIC's registers as the host sees them in modeled mode.
#[derive(Debug)]
pub struct ModelRegs {
    pub(crate) regs: Arc<SharedRegisters>,
    pub(crate) kernel: Arc<Kernel>,
    pub(crate) nic: usize,
}

impl RegisterIo for ModelRegs {
    fn read(&self, offset: u32) -> u64 {
        self.regs.nic_read(offset)
    }

    fn write(&self, offset: u32, value: u64) {
        self.kernel
            .post_register(kernel::current_rank(), self.nic, offset, value);
    }
}

fn timeout(_: Stalled) -> WaitTimeout {
    WaitTimeout(Duration::ZERO)
}

/// A rank's wait hook in modeled mode.
#[derive(Debug)]
pub struct ModelWait {
    pub(crate) kernel: Arc<Kernel>,
    pub(crate) rank: usize,
}

impl WaitHook for ModelWait {
    fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), WaitTimeout> {
        self.kernel.wait_until(self.rank, ready).map_err(timeout)
    }

    fn wait_words(&self, words: &[WordWatch]) -> Result<(), WaitTimeout> {
        self.kernel
            .wait_words(self.rank, words, None)
            .map(|_| ())
            .map_err(timeout)
    }

    fn wait_words_or(&self, words: &[WordWatch], notice: &WordWatch) -> Result<bool, WaitTimeout> {
        self.kernel
            .wait_words(self.rank, words, Some(notice))
            .map_err(timeout)
    }

    fn wake_local(&self, local: usize) {
        self.kernel.wake_local(self.rank, local);
    }

    fn compute(&self, d: std::time::Duration) {
        self.kernel.compute(self.rank, d);
    }

    fn observer(&self) -> &dyn HostObserver {
        self
    }
}

/// Modeled mode charges a rank's host activity in virtual time and names
/// its schedule step to the watchdog.
impl HostObserver for ModelWait {
    fn before_shared_write(&self) {
        let _ = self.kernel.sync(self.rank);
    }

    fn host_copy(&self, bytes: usize, cross_socket: bool) {
        self.kernel.host_copy(self.rank, bytes, cross_socket);
    }

    fn idle_poll(&self) -> Result<(), WaitTimeout> {
        self.kernel.idle_poll(self.rank).map_err(timeout)
    }

    fn at_step(&self, step: u32, what: &'static str) {
        self.kernel.at_step(self.rank, step, what);
    }

    fn library(&self, work: LibraryWork) {
        self.kernel.library(self.rank, work);
    }
}

/// The wait hook of a thread that is not a rank (cluster set-up): it drives
/// the sequencer itself.
#[derive(Debug)]
pub struct SetupWait {
    pub(crate) kernel: Arc<Kernel>,
}

impl WaitHook for SetupWait {
    fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), WaitTimeout> {
        self.kernel.drive_until(ready).map_err(timeout)
    }
}
