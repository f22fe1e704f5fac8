//! Deferring the termination signals (SIGINT, SIGTERM, SIGHUP) around a
//! step that must not be cut in half, such as moving a command's output
//! files into place together.
//!
//! Contract: while a [`Deferred`] lives, those signals are blocked on the
//! calling thread; one that arrives stays pending and is delivered when
//! the guard drops (the old mask is restored), so the process ends after
//! the step, not inside it. The mask is per thread: the step runs on a
//! thread of its own process's choosing with no other thread left that
//! could take a process-directed signal (the CLI's commit runs on the main
//! thread after its emulator threads are gone).

/// Termination signals blocked on this thread until it drops.
#[derive(Debug)]
#[must_use = "the signals are deferred only while the guard lives"]
pub struct Deferred {
    old: libc::sigset_t,
}

/// The signals [`defer_termination`] blocks.
pub const DEFERRED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Block SIGINT, SIGTERM and SIGHUP on this thread until the guard drops.
pub fn defer_termination() -> std::io::Result<Deferred> {
    let set = signal_set(&DEFERRED)?;
    // SAFETY: an all-zero sigset_t is a valid (empty) value of this plain C
    // type; pthread_sigmask overwrites it below before it is read.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    let (how, new) = (libc::SIG_BLOCK, &set);
    // SAFETY: `new` and `old` are valid sigset_t values of this frame.
    let rc = unsafe { libc::pthread_sigmask(how, new, &mut old) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(Deferred { old })
}

impl Drop for Deferred {
    fn drop(&mut self) {
        // Restoring the old mask delivers a signal that came meanwhile.
        let (how, old, none) = (libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        // SAFETY: `old` is the mask pthread_sigmask returned for the guard.
        let _restored = unsafe { libc::pthread_sigmask(how, old, none) };
    }
}

/// A signal set holding `signals`.
fn signal_set(signals: &[libc::c_int]) -> std::io::Result<libc::sigset_t> {
    // SAFETY: an all-zero sigset_t is a valid value of this plain C type,
    // and sigemptyset initialises it before any use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t owned by this frame.
    if unsafe { libc::sigemptyset(&mut set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    for &s in signals {
        // SAFETY: as above; `s` is one of libc's signal numbers.
        if unsafe { libc::sigaddset(&mut set, s) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `signal` is pending on this thread.
    fn pending(signal: libc::c_int) -> bool {
        // SAFETY: as in `signal_set`.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid sigset_t owned by this frame.
        assert_eq!(unsafe { libc::sigpending(&mut set) }, 0);
        // SAFETY: `set` was filled by sigpending.
        unsafe { libc::sigismember(&set, signal) == 1 }
    }

    #[test]
    fn a_signal_during_the_guard_waits_for_its_end() {
        let guard = defer_termination().expect("mask");
        // SAFETY: raise sends SIGHUP to this thread, where it is blocked.
        assert_eq!(unsafe { libc::raise(libc::SIGHUP) }, 0);
        assert!(pending(libc::SIGHUP), "blocked, so pending, not delivered");
        // Ignoring a pending signal discards it: the test process lives on
        // when the guard restores the mask.
        // SAFETY: SIG_IGN is a valid disposition for SIGHUP.
        unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
        assert!(!pending(libc::SIGHUP));
        drop(guard);
        // The old mask is back: SIGHUP is not blocked any more.
        // SAFETY: as in `signal_set`; pthread_sigmask with a null new set
        // only reports the current mask into `now`.
        let mut now: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: see above.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut now) };
        assert_eq!(rc, 0);
        // SAFETY: `now` was filled by pthread_sigmask.
        assert_eq!(unsafe { libc::sigismember(&now, libc::SIGHUP) }, 0);
        // SAFETY: SIG_DFL restores the default disposition.
        unsafe { libc::signal(libc::SIGHUP, libc::SIG_DFL) };
    }
}
