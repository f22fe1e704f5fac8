//! How a rank that is a process of its own waits: poll, yield, then sleep
//! on its interrupt eventfd (the NIC's wake-up for its context, delivered
//! as VFIO and vfio-user deliver MSI-X vectors).
//!
//! Contract: [`InterruptWait::wait_until`] returns as soon as `ready()`
//! holds, or [`WaitTimeout`] once `deadline` has passed without it. A
//! wake-up between the last `ready()` and the sleep is not lost (the
//! eventfd counts it). Nothing wakes a rank when another rank of its node
//! writes the node segment ([`WaitHook::wake_local`] is not delivered
//! across processes yet): such waits end by the sleep's bound, which
//! starts at 20 us and doubles up to 1 ms, so a node phase costs at most
//! about a millisecond more than with threads (docs/performance.md).
//!
//! A device that is gone (its `nicd` died: [`Liveness`]) ends every wait
//! at once, with [`WaitTimeout`] of the time waited, instead of at the
//! deadline, and fails every fruitless poll (`Request::test`, through
//! [`HostObserver::idle_poll`]): the library's calls then fail within
//! milliseconds of the loss, and so do the waits of a communicator's
//! teardown.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use railcoll_mem::event_fd::EventFd;

use crate::env::{HostObserver, WaitHook, WaitTimeout, spin_then_yield};

/// Whether the device's server is still there: a connection it holds
/// open and never writes to, so that reading it finds the end of the
/// stream only once the server's process has gone (the kernel closes its
/// sockets). Once lost, lost for good.
#[derive(Debug)]
pub struct Liveness {
    stream: UnixStream,
    lost: AtomicBool,
}

impl Liveness {
    /// Watch `stream` (a connection the server keeps open).
    pub fn new(stream: UnixStream) -> std::io::Result<Self> {
        stream.set_nonblocking(true)?;
        Ok(Self {
            stream,
            lost: AtomicBool::new(false),
        })
    }

    /// Has the server gone? (One non-blocking read of the connection.)
    pub fn lost(&self) -> bool {
        if self.lost.load(Ordering::Relaxed) {
            return true;
        }
        let gone = peer_closed(&self.stream);
        if gone {
            self.mark_lost();
        }
        gone
    }

    /// The device's owner found it gone another way (a failed doorbell).
    pub fn mark_lost(&self) {
        self.lost.store(true, Ordering::Relaxed);
    }

    /// Lost, as last seen (no system call).
    pub fn seen_lost(&self) -> bool {
        self.lost.load(Ordering::Relaxed)
    }
}

/// Has the peer of `stream` (a non-blocking stream that nobody writes to)
/// closed its end, or its process ended? One read: end of stream (or an
/// error) means closed, nothing to read means open.
pub fn peer_closed(stream: &UnixStream) -> bool {
    let mut byte = [0u8; 1];
    match (&*stream).read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// A process rank's wait hook.
#[derive(Debug)]
pub struct InterruptWait {
    interrupt: Arc<EventFd>,
    liveness: Option<Arc<Liveness>>,
    spins: u32,
    yield_for: Duration,
    deadline: Duration,
}

/// Shortest and longest sleep between checks.
const FIRST_SLEEP: Duration = Duration::from_micros(20);
const LONGEST_SLEEP: Duration = Duration::from_millis(1);

impl InterruptWait {
    /// Wait on `interrupt`, giving up after `deadline`.
    pub fn new(interrupt: Arc<EventFd>, deadline: Duration) -> Self {
        Self {
            interrupt,
            liveness: None,
            spins: 64,
            yield_for: Duration::from_micros(50),
            deadline,
        }
    }

    /// End every wait at once when `liveness` finds the device gone.
    pub fn watching(mut self, liveness: Arc<Liveness>) -> Self {
        self.liveness = Some(liveness);
        self
    }

    /// The eventfd the NICs signal.
    pub fn interrupt(&self) -> &Arc<EventFd> {
        &self.interrupt
    }
}

impl WaitHook for InterruptWait {
    fn observer(&self) -> &dyn HostObserver {
        self
    }

    fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), WaitTimeout> {
        let start = Instant::now();
        if spin_then_yield(self.spins, self.yield_for, ready) {
            return Ok(());
        }
        let mut sleep = FIRST_SLEEP;
        loop {
            if ready() {
                return Ok(());
            }
            if start.elapsed() > self.deadline {
                return Err(WaitTimeout(self.deadline));
            }
            if self.liveness.as_ref().is_some_and(|l| l.lost()) {
                return Err(WaitTimeout(start.elapsed()));
            }
            // An error of the eventfd (closed under us) degrades to a
            // bounded sleep: the deadline still ends the wait.
            match self.interrupt.wait(sleep) {
                Ok(true) => sleep = FIRST_SLEEP,
                Ok(false) => sleep = (sleep * 2).min(LONGEST_SLEEP),
                Err(_) => std::thread::sleep(sleep),
            }
        }
    }
}

/// A lost device also fails a rank that polls (`Request::test`) instead
/// of waiting: each fruitless poll checks it.
impl HostObserver for InterruptWait {
    fn idle_poll(&self) -> Result<(), WaitTimeout> {
        if self.liveness.as_ref().is_some_and(|l| l.lost()) {
            return Err(WaitTimeout(Duration::ZERO));
        }
        Ok(())
    }
}
