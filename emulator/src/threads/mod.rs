//! Threads mode: free-running OS threads and wall-clock time, the mirror of
//! [`crate::modeled`]: [`board`] implements the firmware's hardware traits
//! over the shared hardware of [`crate::hw`], [`rail`] is a rail's switch as
//! per-node channels (with [`udp`] its datagrams when its nodes are on
//! several hosts), and [`worker`] is who runs the engines: the pool of
//! NIC worker threads (by default no more than the cores the ranks leave;
//! idle workers park and are woken by doorbells and packets) and, when the
//! machine is crowded, the ranks that wait. [`RankWait`] is a rank's wait
//! hook, followed by the cluster's [`watchdog`].

pub mod board;
pub mod nics;
pub mod rail;
pub mod udp;
pub mod watchdog;
pub mod worker;

use std::sync::Arc;
use std::time::{Duration, Instant};

use railcoll_host::env::{HostObserver, LibraryWork, NodeWait, WaitHook, WaitTimeout};

/// A threads-mode rank's wait hook: the host's [`NodeWait`], except that
/// the application's compute ([`WaitHook::compute`]) sleeps instead of
/// spinning, and that the cluster's [`watchdog::Watchdog`] follows the
/// rank's steps and waits, and that a rank that waits (or tests an
/// operation that is not done) runs the NICs' pending work itself when
/// the cluster lets it and the machine is crowded ([`worker::NicHelper`]).
/// The emulated NICs are threads on the ranks' cores: a rank spinning through its compute would
/// take the core its NIC needs, which real NIC hardware (a processor of
/// its own) never shares, and every offloaded collective would look as if
/// it could not overlap; a rank that computes helps no NIC.
#[derive(Debug)]
pub struct RankWait {
    /// The node's wait.
    pub inner: NodeWait,
    /// The rank.
    pub rank: usize,
    /// The cluster's watchdog.
    pub watchdog: Arc<watchdog::Watchdog>,
    /// The NICs this rank runs while it waits (`None`: it leaves them to
    /// the workers).
    pub nics: Option<worker::NicHelper>,
}

impl RankWait {
    fn watched<T>(&self, wait: impl FnOnce() -> Result<T, WaitTimeout>) -> Result<T, WaitTimeout> {
        self.watchdog.waiting(self.rank, Some(Instant::now()));
        let out = wait();
        if out.is_err() {
            self.watchdog.stalled(self.rank);
        }
        self.watchdog.waiting(self.rank, None);
        out
    }
}

impl WaitHook for RankWait {
    fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), WaitTimeout> {
        self.watched(|| {
            // The node wait's spins and yields, testing `ready` again
            // after each pass over the NICs when the workers leave them to
            // the ranks; then the rank leaves them to the workers and
            // parks, no later than the node wait would have.
            let Some(nics) = &self.nics else {
                return self.inner.wait_until(ready);
            };
            let parking = self.inner.parking();
            if nics.helping(|| parking.spin(&mut || ready() || (nics.help() && ready()))) {
                return Ok(());
            }
            parking.park(ready)
        })
    }

    fn wake_local(&self, local: usize) {
        self.inner.wake_local(local);
    }

    fn compute(&self, d: Duration) {
        std::thread::sleep(d);
    }

    fn observer(&self) -> &dyn HostObserver {
        self
    }
}

/// The rank's steps go to the watchdog; everything reaches the node
/// wait's observer.
impl HostObserver for RankWait {
    fn before_shared_write(&self) {
        self.inner.observer().before_shared_write();
    }

    fn host_copy(&self, bytes: usize, cross_socket: bool) {
        self.inner.observer().host_copy(bytes, cross_socket);
    }

    fn idle_poll(&self) -> Result<(), WaitTimeout> {
        // A test that found its operation incomplete drives the NICs (on
        // a crowded machine), as an MPI library's test drives its
        // progress engine.
        if let Some(nics) = &self.nics {
            nics.help();
        }
        self.inner.observer().idle_poll()
    }

    fn at_step(&self, step: u32, what: &'static str) {
        self.watchdog.at_step(self.rank, step, what);
        self.inner.observer().at_step(step, what);
    }

    fn library(&self, work: LibraryWork) {
        self.inner.observer().library(work);
    }
}
