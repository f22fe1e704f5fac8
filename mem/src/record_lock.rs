//! A lock shared by the processes (and threads) of a node: the admin
//! mailbox's lock when a node's ranks are processes.
//!
//! Contract: [`RecordLock::lock`] excludes every other holder of the same
//! lock *object* in this process (a mutex) and every holder in another
//! process that locks the same file (a POSIX record lock on its first
//! byte, `fcntl(F_SETLKW)`); the lock is released when the guard drops,
//! and the kernel releases it when the holding process dies, so a rank
//! killed while holding it does not leave its node locked. POSIX record
//! locks belong to a process: each process must lock through one
//! `RecordLock` per file, and keep the descriptor open while it uses it
//! (closing any descriptor of the file drops the process's locks).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};

/// A lock on a file's first byte, across processes and threads.
#[derive(Debug)]
pub struct RecordLock {
    fd: OwnedFd,
    threads: Mutex<()>,
}

/// A held [`RecordLock`].
#[derive(Debug)]
pub struct RecordGuard<'a> {
    lock: &'a RecordLock,
    _threads: MutexGuard<'a, ()>,
}

impl RecordLock {
    /// A lock over the file `fd` (any file the node's processes share).
    pub fn new(fd: OwnedFd) -> Self {
        Self {
            fd,
            threads: Mutex::new(()),
        }
    }

    fn fcntl(&self, kind: libc::c_short, wait: bool) -> std::io::Result<()> {
        loop {
            // SAFETY: a zeroed flock is a valid value of the plain C struct.
            let mut fl: libc::flock = unsafe { std::mem::zeroed() };
            fl.l_type = kind;
            fl.l_whence = libc::SEEK_SET as libc::c_short;
            fl.l_start = 0;
            fl.l_len = 1;
            let cmd = if wait { libc::F_SETLKW } else { libc::F_SETLK };
            // SAFETY: fcntl reads the flock we own for the call's duration.
            if unsafe { libc::fcntl(self.fd.as_raw_fd(), cmd, &raw mut fl) } == 0 {
                return Ok(());
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }

    /// Take the lock, waiting for other threads and processes.
    pub fn lock(&self) -> std::io::Result<RecordGuard<'_>> {
        let threads = self.threads.lock().unwrap_or_else(|p| p.into_inner());
        self.fcntl(libc::F_WRLCK as libc::c_short, true)?;
        Ok(RecordGuard {
            lock: self,
            _threads: threads,
        })
    }
}

impl Drop for RecordGuard<'_> {
    fn drop(&mut self) {
        // Failing to unlock a lock we hold on an open descriptor cannot
        // happen; if it did, the process's exit would release it.
        let _ = self.lock.fcntl(libc::F_UNLCK as libc::c_short, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mmap::SharedMapping;
    use std::os::fd::AsFd;

    /// A child process blocks on the lock its parent holds, and takes it
    /// once the parent lets go: the word it writes then comes after the
    /// parent's.
    #[test]
    fn a_forked_child_waits_for_the_parent() {
        let (map, fd) = SharedMapping::memfd("railcoll-lock-test", 4096).expect("memfd");
        let lock = RecordLock::new(fd.as_fd().try_clone_to_owned().expect("dup"));
        let mem = map.memory();
        let guard = lock.lock().expect("lock");
        // SAFETY: fork in a test; the child only locks, writes a word of
        // shared memory and exits without running destructors.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            // The child's own open file description, as another process's
            // would be: record locks are per process anyway.
            let child_lock = RecordLock::new(fd.as_fd().try_clone_to_owned().expect("dup"));
            let ok = child_lock.lock().is_ok();
            let seen = mem
                .load_u64(0, std::sync::atomic::Ordering::Acquire)
                .unwrap_or(0);
            let _ = mem.store_u64(
                8,
                if ok { seen + 1 } else { 99 },
                std::sync::atomic::Ordering::Release,
            );
            // SAFETY: leaves the forked test process at once.
            unsafe { libc::_exit(0) };
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(
            mem.load_u64(8, std::sync::atomic::Ordering::Acquire),
            Ok(0),
            "the child got the lock while the parent held it"
        );
        mem.store_u64(0, 41, std::sync::atomic::Ordering::Release)
            .expect("store");
        drop(guard);
        let mut status = 0;
        // SAFETY: waits for our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &raw mut status, 0) }, pid);
        assert_eq!(
            mem.load_u64(8, std::sync::atomic::Ordering::Acquire),
            Ok(42),
            "the child saw the parent's write once it had the lock"
        );
    }
}
