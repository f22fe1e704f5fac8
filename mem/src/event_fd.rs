//! Linux eventfds: how a NIC's interrupt reaches a rank in another
//! process (VFIO and vfio-user hand interrupts over as eventfds); and
//! [`shutdown_listener`], which ends a device server's waits for
//! connections.
//!
//! Contract: [`EventFd::signal`] adds one to the counter and never blocks;
//! [`EventFd::wait`] returns `true` as soon as the counter is non-zero
//! (and resets it), `false` when the timeout passes first. Signals are
//! counted, not queued: many signals before one wait wake it once, and no
//! signal is lost between a caller's last check and its wait.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// A non-blocking, close-on-exec eventfd.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new eventfd with counter zero.
    pub fn new() -> std::io::Result<Self> {
        // SAFETY: creates a descriptor; touches no memory of ours.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `raw` was just returned by eventfd and is owned by
        // nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        Ok(Self { fd })
    }

    /// An eventfd received from elsewhere (a vfio-user `SET_IRQS`),
    /// made non-blocking (signalling it must never block the signaller).
    /// A descriptor that is not an eventfd is refused (`InvalidInput`): a
    /// pipe's or a socket's writes could block or mean something else.
    pub fn from_owned(fd: OwnedFd) -> std::io::Result<Self> {
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
        if link.as_os_str() != "anon_inode:[eventfd]" {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("not an eventfd: {}", link.display()),
            ));
        }
        // SAFETY: F_GETFL on a descriptor we own; no memory is involved.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        if flags < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: F_SETFL on a descriptor we own; no memory is involved.
        let set = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) };
        if set < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self { fd })
    }

    /// Add one to the counter (wakes a waiter, here or in another
    /// process). A counter at its limit stays signalled: nothing is lost.
    pub fn signal(&self) -> std::io::Result<()> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a local u64 to our descriptor.
        let n = unsafe { libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8) };
        if n == 8 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        // EAGAIN: the counter is at its maximum, so it is signalled.
        if err.kind() == std::io::ErrorKind::WouldBlock {
            Ok(())
        } else {
            Err(err)
        }
    }

    /// Take the counter if it is non-zero (without waiting): true if it was.
    pub fn take(&self) -> std::io::Result<bool> {
        let mut value: u64 = 0;
        // SAFETY: reads 8 bytes into a local u64 from our descriptor.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&raw mut value).cast(), 8) };
        if n == 8 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() == std::io::ErrorKind::WouldBlock {
            Ok(false)
        } else {
            Err(err)
        }
    }

    /// Wait until the counter is non-zero or `timeout` passes; take it.
    /// True if it was signalled.
    pub fn wait(&self, timeout: Duration) -> std::io::Result<bool> {
        if self.take()? {
            return Ok(true);
        }
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // ppoll: microsecond timeouts (poll's are milliseconds).
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: one valid pollfd and a timespec, exclusively ours, for
        // the call; no signal mask is changed.
        let n = unsafe { libc::ppoll(&raw mut pfd, 1, &raw const ts, std::ptr::null()) };
        if n < 0 {
            let err = std::io::Error::last_os_error();
            return if err.kind() == std::io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(err)
            };
        }
        self.take()
    }
}

/// Shut a listening socket down: every thread blocked in its `accept`
/// returns with an error (Linux), and so does every later `accept`. How a
/// server stops threads that wait for connections, without connecting to
/// its own socket (whose path may be gone).
pub fn shutdown_listener(listener: &std::os::unix::net::UnixListener) -> std::io::Result<()> {
    // SAFETY: shutdown on a descriptor the listener owns and keeps open;
    // no memory is involved.
    if unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RDWR) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_counted_once_and_a_wait_times_out_without_one() {
        let e = EventFd::new().expect("eventfd");
        assert!(!e.wait(Duration::from_millis(1)).expect("wait"));
        e.signal().expect("signal");
        e.signal().expect("signal");
        assert!(e.wait(Duration::from_secs(5)).expect("wait"));
        assert!(!e.take().expect("take"), "two signals wake one wait");
    }

    #[test]
    fn only_an_eventfd_is_taken_from_elsewhere() {
        let e = EventFd::new().expect("eventfd");
        let received = EventFd::from_owned(e.as_fd().try_clone_to_owned().expect("dup"))
            .expect("an eventfd is taken");
        received.signal().expect("signal");
        assert!(e.take().expect("take"), "the same counter");
        let file = std::fs::File::open("/dev/null").expect("open");
        let refused = EventFd::from_owned(OwnedFd::from(file)).expect_err("a file is refused");
        assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_shut_listener_ends_every_accept() {
        let dir = std::env::temp_dir().join(format!("railcoll-shut-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let listener = std::os::unix::net::UnixListener::bind(&dir).expect("bind");
        let waiting = listener.try_clone().expect("clone");
        let t = std::thread::spawn(move || waiting.accept().is_err());
        std::thread::sleep(Duration::from_millis(50));
        // The path goes first: the shutdown needs no connection to it.
        std::fs::remove_file(&dir).expect("unlink");
        shutdown_listener(&listener).expect("shutdown");
        assert!(
            t.join().expect("thread"),
            "accept failed after the shutdown"
        );
    }

    #[test]
    fn a_signal_from_another_thread_ends_a_wait() {
        let e = std::sync::Arc::new(EventFd::new().expect("eventfd"));
        let signaller = std::sync::Arc::clone(&e);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            signaller.signal().expect("signal");
        });
        assert!(e.wait(Duration::from_secs(10)).expect("wait"));
        t.join().expect("thread");
    }
}
