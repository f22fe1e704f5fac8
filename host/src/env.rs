//! The execution environment's wait hook.
//!
//! Every blocking wait of the host library (a completion word, ring space, a
//! mailbox reply) goes through [`WaitHook::wait_until`]. In threads mode the
//! hook spins briefly and then parks the thread until a NIC wakes it; in a
//! deterministic modeled mode it hands control to the scheduler. The host
//! code is the same in both.
//!
//! The seam has two parts: [`WaitHook`], the plain wait (block until ready,
//! wake a node peer) that every environment provides, and
//! [`HostObserver`], the named hook through which an environment that keeps
//! account of host activity (virtual-time costs, trace spans, the step a
//! watchdog reports) sees it. Threads mode and real hardware observe
//! nothing ([`NoObserver`]).

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use railcoll_mem::dma_mem::DmaMemory;

/// A wait gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("wait did not complete within {0:?}")]
pub struct WaitTimeout(pub Duration);

/// `value` has reached `epoch`, in wrapping (serial number) arithmetic:
/// correct as long as the two are less than 2^63 apart. The shm epoch
/// flags' test, and the RDMA barrier's barrier-number check [GTNP02 §6.4].
pub fn reached(value: u64, epoch: u64) -> bool {
    (value.wrapping_sub(epoch) as i64) >= 0
}

/// How a watched word is tested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WordTest {
    /// The masked word equals this value.
    Equals(u64),
    /// The masked word has reached this count (wrap-safe `>=`, the epoch
    /// comparison of [`reached`]).
    Reaches(u64),
    /// The masked word differs from this value (a notice that was posted).
    Differs(u64),
}

/// A word of DMA or shared memory a rank waits on, in a form the
/// environment can test without running the rank (a modeled environment
/// tests it when a NIC writes it, or writes that node's memory after a rank
/// of the node ran).
#[derive(Clone, Debug)]
pub struct WordWatch {
    /// The memory holding the word.
    pub mem: DmaMemory,
    /// Its offset (8-byte aligned).
    pub offset: usize,
    /// Bits that take part in the test.
    pub mask: u64,
    /// The test.
    pub test: WordTest,
}

impl WordWatch {
    /// Is the condition met now? (A word out of range never is.)
    pub fn ready(&self) -> bool {
        self.mem
            .load_u64(self.offset, Ordering::Acquire)
            .is_ok_and(|v| match self.test {
                WordTest::Equals(x) => v & self.mask == x,
                WordTest::Reaches(x) => reached(v & self.mask, x),
                WordTest::Differs(x) => v & self.mask != x,
            })
    }
}

/// How a rank blocks, and how it wakes the ranks of its node: all that
/// real threads on real hardware need. An environment that keeps account
/// of the rank's host activity (virtual time, a trace, a watchdog) also
/// gives an [`HostObserver`].
pub trait WaitHook: Send + Sync {
    /// Return once `ready()` is true. `ready` is cheap and side-effect free
    /// apart from reading memory; it is called repeatedly.
    fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), WaitTimeout>;
    /// Return once every watched word passes its test (an environment can
    /// test these without running the rank).
    fn wait_words(&self, words: &[WordWatch]) -> Result<(), WaitTimeout> {
        self.wait_until(&mut || words.iter().all(WordWatch::ready))
    }
    /// Return once every watched word passes its test (`Ok(true)`), or
    /// once `notice` passes first (`Ok(false)`): a wait that a notice
    /// (a revoked communicator) ends early. An environment that tests
    /// words without running the rank tests the notice the same way.
    fn wait_words_or(&self, words: &[WordWatch], notice: &WordWatch) -> Result<bool, WaitTimeout> {
        let mut noticed = false;
        self.wait_until(&mut || {
            noticed = notice.ready();
            noticed || words.iter().all(WordWatch::ready)
        })?;
        Ok(!noticed)
    }
    /// Wake the rank with local index `local` on the caller's node if it is
    /// blocked in `wait_until` (after the caller changed memory it polls).
    /// The default does nothing: correct for hooks that never block.
    fn wake_local(&self, local: usize) {
        let _ = local;
    }
    /// The rank computes for `d` (the application's own work, between
    /// starting a non-blocking collective and completing it): by default
    /// the CPU spins for that long; a modeled environment lets that much
    /// virtual time pass instead.
    fn compute(&self, d: std::time::Duration) {
        let start = std::time::Instant::now();
        while start.elapsed() < d {
            std::hint::spin_loop();
        }
    }
    /// This environment's observer of the rank's host activity; by default
    /// one that observes nothing.
    fn observer(&self) -> &dyn HostObserver {
        &NoObserver
    }
}

/// The host activity an environment may charge, trace or watch: the cost
/// hooks of a virtual-time environment (the emulator's modeled mode), the
/// spans of a trace, the step a watchdog names when a rank is stuck. Real
/// hardware needs none of them: every method defaults to nothing.
pub trait HostObserver: Send + Sync {
    /// The rank is about to write memory that other ranks poll directly (a
    /// shared-memory flag, a peer's buffer). A modeled environment first
    /// brings the rank's clock to the present, so that no rank can observe
    /// the write before it happens in virtual time.
    fn before_shared_write(&self) {}
    /// The rank is about to copy `bytes` with the CPU (between sockets if
    /// `cross_socket`); a modeled environment charges the time.
    fn host_copy(&self, bytes: usize, cross_socket: bool) {
        let _ = (bytes, cross_socket);
    }
    /// A non-blocking test found its operation incomplete. A modeled
    /// environment lets virtual time pass (one poll's cost), so that a rank
    /// spinning on `test()` sees the operation complete, and watches it: a
    /// rank that polls on for what nothing else can still do gets the
    /// error its wait would have got (`Err`), and the poll fails with it.
    fn idle_poll(&self) -> Result<(), WaitTimeout> {
        Ok(())
    }
    /// The rank is at step `step` (`what`) of a schedule: an environment
    /// with a watchdog names it when the rank is found stuck.
    fn at_step(&self, step: u32, what: &'static str) {
        let _ = (step, what);
    }
    /// The rank's message-passing layer did its per-message software work
    /// (LogGP's o on the send/receive path, beyond the NIC post an RDMA
    /// put also pays); a modeled environment charges the profile's cost.
    fn library(&self, work: LibraryWork) {
        let _ = work;
    }
}

/// Per-message work of the message-passing layer (send/receive over the
/// NIC's input queues), as a library in the style of MPI does it: what
/// [`HostObserver::library`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LibraryWork {
    /// A send: the request and envelope built before the post.
    Send,
    /// A receive matched its message. `unexpected_bytes` is nonzero when
    /// an earlier receive had already taken the message out of the queue
    /// and kept it aside (it came before this receive was posted): the
    /// library now copies it out. A message still in the queue when its
    /// receive is posted counts as expected (the queue is the library's
    /// own eager buffer).
    Receive {
        /// Bytes copied out of the unexpected-message store (0: expected).
        unexpected_bytes: usize,
    },
}

/// An observer that observes nothing (real hardware, threads mode).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoObserver;

impl HostObserver for NoObserver {}

/// Spin, then yield, then park until woken (or a short timeout, as a guard
/// against a lost wakeup). A NIC wakes the thread through [`Waker`].
#[derive(Debug)]
pub struct ParkingWait {
    spins: u32,
    yield_for: Duration,
    deadline: Duration,
}

impl ParkingWait {
    /// `spins` busy polls, then polls with `yield_now` for `yield_for`, then
    /// park; give up after `deadline`.
    pub fn new(spins: u32, yield_for: Duration, deadline: Duration) -> Self {
        Self {
            spins,
            yield_for,
            deadline,
        }
    }
}

impl Default for ParkingWait {
    /// Tuned for a 2-core host running more threads than cores: a short
    /// spin (a cache-line hand-off costs 25-200 ns), then yielding polls
    /// (which hand the core to a runnable NIC worker) for about twice the
    /// cost of a futex wake-up (~25 us), then park.
    fn default() -> Self {
        Self::new(64, Duration::from_micros(50), Duration::from_secs(120))
    }
}

/// A [`ParkingWait`] that can also wake the other ranks of its node.
#[derive(Debug)]
pub struct NodeWait {
    parking: Arc<ParkingWait>,
    node_wakers: Vec<Waker>,
}

impl NodeWait {
    /// `node_wakers[i]` wakes local rank `i` of this node.
    pub fn new(parking: Arc<ParkingWait>, node_wakers: Vec<Waker>) -> Self {
        Self {
            parking,
            node_wakers,
        }
    }

    /// How this node's ranks wait (its phases, for a wait that does more
    /// between its polls).
    pub fn parking(&self) -> &ParkingWait {
        &self.parking
    }
}

impl WaitHook for NodeWait {
    fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), WaitTimeout> {
        self.parking.wait_until(ready)
    }

    fn wake_local(&self, local: usize) {
        if let Some(w) = self.node_wakers.get(local) {
            w.wake();
        }
    }
}

/// The cheap start of a wait: `spins` busy polls, then polls that yield
/// the core for `yield_for`. True as soon as `ready()` holds; false if it
/// did not in that time (the caller then sleeps its own way).
pub fn spin_then_yield(spins: u32, yield_for: Duration, ready: &mut dyn FnMut() -> bool) -> bool {
    for _ in 0..spins {
        if ready() {
            return true;
        }
        std::hint::spin_loop();
    }
    let yield_start = Instant::now();
    while yield_start.elapsed() < yield_for {
        if ready() {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

impl ParkingWait {
    /// The cheap start of the wait alone: its spins, then its yielding
    /// polls. True as soon as `ready()` holds; false if it did not then.
    pub fn spin(&self, ready: &mut dyn FnMut() -> bool) -> bool {
        spin_then_yield(self.spins, self.yield_for, ready)
    }

    /// The end of the wait alone: park until `ready()` holds, or give up
    /// after the deadline.
    pub fn park(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), WaitTimeout> {
        let start = Instant::now();
        loop {
            if ready() {
                return Ok(());
            }
            if start.elapsed() > self.deadline {
                return Err(WaitTimeout(self.deadline));
            }
            // Unpark tokens make a wake between `ready()` and here harmless;
            // the timeout bounds the cost of a wake that never comes.
            std::thread::park_timeout(Duration::from_millis(2));
        }
    }
}

impl WaitHook for ParkingWait {
    fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), WaitTimeout> {
        if self.spin(ready) {
            return Ok(());
        }
        self.park(ready)
    }
}

/// Wakes a rank: its thread, when ranks are threads of one process (the
/// launcher registers it; a later run may bind another thread), or its
/// interrupt eventfd, when the rank is a process of its own (a `nicd`
/// registers the eventfd the rank handed over, as a device's MSI-X
/// vector).
#[derive(Clone, Debug, Default)]
pub struct Waker {
    target: Arc<Mutex<WakeTarget>>,
}

#[derive(Debug, Default)]
enum WakeTarget {
    #[default]
    Nobody,
    Thread(Thread),
    Interrupt(Arc<railcoll_mem::event_fd::EventFd>),
}

impl Waker {
    /// A waker with no thread yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn set(&self, target: WakeTarget) {
        *self.target.lock().unwrap_or_else(|p| p.into_inner()) = target;
    }

    /// Bind to the calling thread.
    pub fn register_current(&self) {
        self.set(WakeTarget::Thread(std::thread::current()));
    }

    /// Bind to an interrupt eventfd (a rank in another process).
    pub fn register_interrupt(&self, interrupt: Arc<railcoll_mem::event_fd::EventFd>) {
        self.set(WakeTarget::Interrupt(interrupt));
    }

    /// Forget the bound interrupt if it is still `interrupt` (its rank
    /// went away; a rank bound since keeps its own).
    pub fn clear_if(&self, interrupt: &Arc<railcoll_mem::event_fd::EventFd>) {
        let mut target = self.target.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(&*target, WakeTarget::Interrupt(fd) if Arc::ptr_eq(fd, interrupt)) {
            *target = WakeTarget::Nobody;
        }
    }

    /// Wake the bound thread or signal the bound interrupt, if any.
    pub fn wake(&self) {
        match &*self.target.lock().unwrap_or_else(|p| p.into_inner()) {
            WakeTarget::Nobody => {}
            WakeTarget::Thread(t) => t.unpark(),
            // A failed signal (the rank closed its eventfd) wakes nobody,
            // as an interrupt to a gone process would.
            WakeTarget::Interrupt(fd) => {
                let _ = fd.signal();
            }
        }
    }
}

/// A wait hook whose every wait gives up once a notice word is posted:
/// how a revoked communicator's waits end (`coll::revoke`). Until
/// [`NoticeWait::arm`] it is the inner hook. A wait that gives up returns
/// [`WaitTimeout`] of zero; the communicator, which knows it was revoked,
/// reports the revoke instead.
pub struct NoticeWait {
    inner: Arc<dyn WaitHook>,
    /// The job communicator's notice.
    notice: OnceLock<WordWatch>,
    /// The notice of a split communicator whose call is running, instead
    /// (`scoped` is set while there is one: a wait of the job's
    /// communicator takes no lock).
    scope: Mutex<Option<WordWatch>>,
    scoped: AtomicBool,
    /// Waits ignore the notice (while this rank sends its own).
    held: AtomicBool,
}

impl std::fmt::Debug for NoticeWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoticeWait")
            .field("armed", &self.live().is_some())
            .finish()
    }
}

impl NoticeWait {
    /// `inner`, not armed yet.
    pub fn new(inner: Arc<dyn WaitHook>) -> Self {
        Self {
            inner,
            notice: OnceLock::new(),
            scope: Mutex::new(None),
            scoped: AtomicBool::new(false),
            held: AtomicBool::new(false),
        }
    }

    /// From now on, every wait gives up once `notice` passes its test (the
    /// job communicator's notice: the first call arms it, later calls
    /// change nothing).
    pub fn arm(&self, notice: WordWatch) {
        let _ = self.notice.set(notice);
    }

    /// Run `f` with the waits ending on `notice` instead (a call of a
    /// split communicator: its waits end on its own revoke, not on
    /// another communicator's).
    pub fn scoped<T>(&self, notice: &WordWatch, f: impl FnOnce() -> T) -> T {
        /// Puts the earlier scope back, unwinding too.
        struct Restore<'a>(&'a NoticeWait, Option<WordWatch>, bool);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                *self.0.scope.lock().unwrap_or_else(|p| p.into_inner()) = self.1.take();
                self.0.scoped.store(self.2, Ordering::Relaxed);
            }
        }
        let before = self
            .scope
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(notice.clone());
        let was = self.scoped.swap(true, Ordering::Relaxed);
        let _restore = Restore(self, before, was);
        f()
    }

    /// The notice, where it counts now.
    fn live(&self) -> Option<Cow<'_, WordWatch>> {
        if self.held.load(Ordering::Relaxed) {
            return None;
        }
        if self.scoped.load(Ordering::Relaxed) {
            return self
                .scope
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .map(Cow::Owned);
        }
        self.notice.get().map(Cow::Borrowed)
    }

    /// From now on the notice is ignored: the communicator is being
    /// closed, and closing (detaching its contexts through the admin
    /// mailbox) must finish, revoked or not.
    pub fn disarm(&self) {
        self.held.store(true, Ordering::Relaxed);
    }

    /// Run `f` with the notice ignored: the waits of a rank posting its
    /// own notice to the others (its own word is set first).
    pub fn holding<T>(&self, f: impl FnOnce() -> T) -> T {
        // A disarmed hook stays disarmed after.
        let before = self.held.swap(true, Ordering::Relaxed);
        let out = f();
        self.held.store(before, Ordering::Relaxed);
        out
    }
}

/// What a wait that a notice ended returns.
const NOTICED: WaitTimeout = WaitTimeout(Duration::ZERO);

impl WaitHook for NoticeWait {
    fn wait_until(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), WaitTimeout> {
        let Some(notice) = self.live() else {
            return self.inner.wait_until(ready);
        };
        // Checked before the condition: a loop of waits that are always
        // ready (a poll that completes at once) still ends.
        if notice.ready() {
            return Err(NOTICED);
        }
        let mut noticed = false;
        self.inner.wait_until(&mut || {
            noticed = notice.ready();
            noticed || ready()
        })?;
        if noticed { Err(NOTICED) } else { Ok(()) }
    }

    fn wait_words(&self, words: &[WordWatch]) -> Result<(), WaitTimeout> {
        let Some(notice) = self.live() else {
            return self.inner.wait_words(words);
        };
        if notice.ready() {
            return Err(NOTICED);
        }
        match self.inner.wait_words_or(words, &notice)? {
            true => Ok(()),
            false => Err(NOTICED),
        }
    }

    fn wait_words_or(&self, words: &[WordWatch], notice: &WordWatch) -> Result<bool, WaitTimeout> {
        self.inner.wait_words_or(words, notice)
    }

    fn wake_local(&self, local: usize) {
        self.inner.wake_local(local);
    }

    fn compute(&self, d: Duration) {
        self.inner.compute(d);
    }

    fn observer(&self) -> &dyn HostObserver {
        self.inner.observer()
    }
}
