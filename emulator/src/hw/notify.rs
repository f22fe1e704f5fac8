//! How threads-mode hardware wakes the NIC workers, and its clock.
//!
//! A [`Notifier`] belongs to one engine: the register file (doorbells) and
//! the rails (packets) call it, and it wakes the worker that owns the
//! engine through that worker's [`WorkerSignal`]. Kept apart from the
//! worker pool so that the hardware the pool runs does not import it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::Instant;

/// Wakes one worker.
#[derive(Debug, Default)]
pub struct WorkerSignal {
    pub(crate) flag: AtomicBool,
    pub(crate) thread: OnceLock<Thread>,
}

impl WorkerSignal {
    pub(crate) fn notify(&self) {
        if !self.flag.swap(true, Ordering::AcqRel)
            && let Some(t) = self.thread.get()
        {
            t.unpark();
        }
    }
}

/// Tells a worker that one of its engines has work.
#[derive(Clone, Debug)]
pub struct Notifier {
    nic: Arc<AtomicBool>,
    worker: Arc<WorkerSignal>,
}

impl Notifier {
    /// A notifier for an engine owned by `worker`.
    pub fn new(worker: Arc<WorkerSignal>) -> Self {
        Self {
            nic: Arc::new(AtomicBool::new(false)),
            worker,
        }
    }

    /// Mark the engine as having work and wake its worker.
    pub fn notify(&self) {
        self.nic.store(true, Ordering::Release);
        self.worker.notify();
    }

    /// Wake the engine's worker without marking the engine: another
    /// thread ran it and left it work, or an earlier timer.
    pub(crate) fn wake_worker(&self) {
        self.worker.notify();
    }

    /// Has the engine been notified since it was last taken?
    pub(crate) fn pending(&self) -> bool {
        self.nic.load(Ordering::Acquire)
    }

    pub(crate) fn take(&self) -> bool {
        self.nic.load(Ordering::Relaxed) && self.nic.swap(false, Ordering::AcqRel)
    }
}

/// A board's view of the clock: nanoseconds since the cluster started.
pub fn clock_ns(epoch: Instant) -> u64 {
    epoch.elapsed().as_nanos() as u64
}
