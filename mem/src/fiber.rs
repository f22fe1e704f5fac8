//! Ranks as stackful coroutines (fibers) on the sequencer's thread.
//!
//! A modeled rank blocks deep inside host-library code (a wait hook), so
//! it needs its own stack; an OS thread per rank would make every switch a
//! futex hand-off (~25 us on the 2-core reference machine, and more with a
//! thousand threads). A [`corosensei`] coroutine switch costs tens of
//! nanoseconds ([EMU-ANCH target 3]: "no OS-thread hand-off on the
//! hot path").
//!
//! Here, and not in the emulator, for its one piece of unsafe code: the
//! running fiber's `Yielder` is reached through a thread-local pointer,
//! because the wait hook that must suspend is a `'static` trait object
//! that cannot borrow it. The emulator (its modeled mode's sequencer and
//! ranks) then forbids `unsafe` outright.

use std::cell::Cell;

use corosensei::Yielder;

/// A fiber's yielder: resumed with `()`, suspends with `()`.
pub type FiberYielder = Yielder<(), ()>;

thread_local! {
    /// The yielder of the fiber running on this thread; null when the
    /// thread runs no fiber (the sequencer itself, a set-up thread).
    static RUNNING: Cell<*const FiberYielder> = const { Cell::new(std::ptr::null()) };
}

/// Run `body` as the fiber's code: marks the fiber as running for
/// [`suspend`]. Call it first thing in a fiber's closure.
pub fn run_fiber<R>(yielder: &FiberYielder, body: impl FnOnce() -> R) -> R {
    RUNNING.with(|c| c.set(yielder));
    let out = body();
    RUNNING.with(|c| c.set(std::ptr::null()));
    out
}

/// Suspend the running fiber until the sequencer resumes it. Returns
/// `false` (without suspending) when no fiber runs on this thread.
pub fn suspend() -> bool {
    let yielder = RUNNING.with(Cell::get);
    if yielder.is_null() {
        return false;
    }
    RUNNING.with(|c| c.set(std::ptr::null()));
    // Why the dereference below is sound: `RUNNING` is non-null only between
    // `run_fiber` setting it and the fiber suspending or returning, and only
    // on the thread that runs the fiber; it then points to the `Yielder`
    // corosensei passed to that fiber's closure, which lives until the
    // closure returns, and it is only used through a shared reference.
    // SAFETY: the fiber that set `yielder` is the one running now (above).
    let y = unsafe { &*yielder };
    y.suspend(());
    // Other fibers ran meanwhile and reset the pointer: restore ours.
    RUNNING.with(|c| c.set(yielder));
    true
}
