//! Threads mode: free-running OS threads and wall-clock time, the mirror of
//! [`crate::modeled`]: [`board`] implements the firmware's hardware traits
//! over the shared hardware of [`crate::hw`], [`rail`] is a rail's switch as
//! per-node channels, and [`worker`] is the pool of NIC worker threads
//! (never more than cores; idle workers park and are woken by doorbells
//! and packets). [`RankWait`] is a rank's wait hook.

pub mod board;
pub mod rail;
pub mod worker;

use std::time::Duration;

use railcoll_host::env::{HostObserver, NodeWait, WaitHook, WaitTimeout};

/// A threads-mode rank's wait hook: the host's [`NodeWait`], except that
/// the application's compute ([`WaitHook::compute`]) sleeps instead of
/// spinning. The emulated NICs are threads on the ranks' cores: a rank
/// spinning through its compute would take the core its NIC needs, which
/// real NIC hardware (a processor of its own) never shares, and every
/// offloaded collective would look as if it could not overlap.
#[derive(Debug)]
pub struct RankWait(pub NodeWait);

impl WaitHook for RankWait {
    fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), WaitTimeout> {
        self.0.wait_until(ready)
    }

    fn wake_local(&self, local: usize) {
        self.0.wake_local(local);
    }

    fn compute(&self, d: Duration) {
        std::thread::sleep(d);
    }

    fn observer(&self) -> &dyn HostObserver {
        self.0.observer()
    }
}
