//! Who runs the firmware engines: a small pool of NIC worker threads, and,
//! in an in-process cluster, the ranks themselves while they wait.
//!
//! Every engine sits in a [`NicSlot`] behind a lock. Its worker polls it
//! when it was notified (doorbell, packet), reported pending work, or has
//! a retransmission timer due; a rank that waits ([`NicHelper`]) polls any
//! NIC with work the same way. The lock is only ever tried, never waited
//! for: whoever holds it is running that engine, so its work is in hand.
//! When the waiting ranks and the workers outnumber the cores, the ranks
//! run the NICs and the workers stand back, until 20 us after the crowd
//! ([`NicHelp`]); otherwise the workers run them. Workers remain what
//! guarantees progress (a rank that computes helps nobody); ranks that help take the hand-offs between a
//! rank and a worker off a waiting rank's path, and, on a machine with
//! more busy threads than cores, the context switches a worker needs to
//! get a core.
//!
//! By default there are no more workers than the cores the ranks leave,
//! and at least one (a 2-core machine cannot afford spinning threads
//! beyond its cores). When none of its NICs is busy, a
//! worker spins briefly (a hand-off between running threads costs
//! 25-200 ns), then yields, then parks until notified (a futex wake costs
//! ~25 us).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::hw::faults::FaultSpec;
use crate::hw::notify::{Notifier, WorkerSignal};
use crate::threads::board::EmuEngine;

/// Idle polls that spin before yielding.
const SPIN_POLLS: u32 = 64;
/// How long an idle worker keeps polling (yielding) before it parks: about
/// twice a futex wake-up, so back-to-back operations never pay one.
const IDLE_YIELD: Duration = Duration::from_micros(50);
/// Longest park, as a guard against a lost wakeup.
const MAX_PARK: Duration = Duration::from_millis(20);
/// `NicSlot::timer` when the engine asked for none.
const NO_TIMER: u64 = u64::MAX;

/// One NIC as the pool runs it (two cache lines of its own: workers and
/// ranks write its atomics).
#[derive(Debug)]
#[repr(align(128))]
pub struct NicSlot {
    engine: Mutex<Box<EmuEngine>>,
    notifier: Notifier,
    /// The engine's last poll reported progress or pending work: poll
    /// again without a notification.
    active: AtomicBool,
    /// When the engine's last poll asked to be polled again (ns since the
    /// epoch), or [`NO_TIMER`].
    timer: AtomicU64,
    /// Where the NIC is, for the faults that stall its processor.
    node: u16,
    rail: u8,
}

/// Who runs a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Runner {
    /// Its worker.
    Worker,
    /// A waiting rank.
    Rank,
}

/// What one attempt to run a slot found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ran {
    /// Nothing to do, or the NIC is stalled.
    Idle,
    /// Polled; it may have more to do at once.
    Busy,
    /// Polled; nothing more until notified or its timer.
    Done,
    /// Someone else is running it now.
    Taken,
}

impl NicSlot {
    fn new(engine: Box<EmuEngine>, notifier: Notifier) -> Self {
        let board = engine.hardware();
        let (node, rail) = (board.node, board.rail_index());
        Self {
            engine: Mutex::new(engine),
            notifier,
            active: AtomicBool::new(true),
            timer: AtomicU64::new(NO_TIMER),
            node,
            rail,
        }
    }

    /// The NIC's timer, if it has one.
    fn timer(&self) -> Option<u64> {
        Some(self.timer.load(Ordering::Acquire)).filter(|&t| t != NO_TIMER)
    }

    /// Nothing to run now: the NIC's timer, if any, is when it next is.
    fn idle(&self, next_timer: &mut Option<u64>) -> Ran {
        if let Some(t) = self.timer() {
            note(next_timer, t);
        }
        Ran::Idle
    }

    /// Poll the engine if it has work and nobody else is polling it.
    /// `next_timer` learns when a stalled or waiting NIC wants its next
    /// poll. A rank's poll that leaves the NIC with work, or with a timer
    /// due before the worker's park deadline, wakes the worker.
    fn run(&self, now: u64, faults: &FaultSpec, next_timer: &mut Option<u64>, by: Runner) -> Ran {
        if !faults.stalls.is_empty()
            && let Some(until) = faults.stalled_until(self.node, self.rail, now)
        {
            // A stalled processor: whatever arrives waits for it.
            note(next_timer, until);
            return Ran::Idle;
        }
        let due = self.timer().is_some_and(|t| now >= t);
        if !(self.notifier.pending() || self.active.load(Ordering::Acquire) || due) {
            return self.idle(next_timer);
        }
        let mut engine = match self.engine.try_lock() {
            Ok(e) => e,
            Err(TryLockError::WouldBlock) => return Ran::Taken,
            // Only a panic inside a poll poisons the lock (the firmware
            // never panics; the board might, on a bug of its own). Its
            // thread reports that panic; the NIC goes on from where the
            // poll stopped, as a processor would after a fault.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        // Taken under the lock: a notification that comes during the
        // poll sets it again, so the next pass sees it.
        let notified = self.notifier.take();
        let due = self.timer().is_some_and(|t| now >= t);
        if !(notified || self.active.load(Ordering::Acquire) || due) {
            // Another thread ran it since the check above: its timer may
            // be new.
            drop(engine);
            return self.idle(next_timer);
        }
        engine.hardware().start_poll();
        let out = engine.poll();
        // Stored under the lock, so that the slot shows the latest poll's
        // result, not an earlier poll's that lost a race to store it.
        let active = out.progressed || out.pending;
        let was_active = self.active.swap(active, Ordering::AcqRel);
        let before = self
            .timer
            .swap(out.timer_ns.unwrap_or(NO_TIMER), Ordering::AcqRel);
        drop(engine);
        if let Some(t) = out.timer_ns {
            note(next_timer, t);
        }
        // The worker may have parked while a rank ran its NIC, on a scan
        // that found the slot idle: it must hear of work the rank left
        // behind (the ranks may stop running NICs at any time) and of a
        // timer earlier than its park deadline.
        let soon = now.saturating_add(MAX_PARK.as_nanos() as u64);
        let earlier = out.timer_ns.is_some_and(|t| t < before && t < soon);
        if by == Runner::Rank && ((active && !was_active) || earlier) {
            self.notifier.wake_worker();
        }
        if active { Ran::Busy } else { Ran::Done }
    }
}

/// `next` becomes the earlier of itself and `t`.
fn note(next: &mut Option<u64>, t: u64) {
    *next = Some(next.map_or(t, |n| n.min(t)));
}

/// Builds an engine (engines are large: they are built on a thread with a
/// big stack and boxed there).
pub type EngineFactory = Box<dyn FnOnce() -> (Box<EmuEngine>, Notifier) + Send>;

/// The running pool.
#[derive(Debug)]
pub struct WorkerPool {
    shutdown: Arc<AtomicBool>,
    signals: Vec<Arc<WorkerSignal>>,
    threads: Vec<JoinHandle<()>>,
    help: Arc<NicHelp>,
}

impl WorkerPool {
    /// Signals for `workers` workers, to build notifiers before the engines.
    pub fn signals(workers: usize) -> Vec<Arc<WorkerSignal>> {
        (0..workers)
            .map(|_| Arc::new(WorkerSignal::default()))
            .collect()
    }

    /// Build every engine, then start one thread per signal;
    /// `factories[w]` build worker `w`'s engines. A NIC that `faults`
    /// stalls is not polled while it is stalled.
    pub fn start(
        signals: Vec<Arc<WorkerSignal>>,
        factories: Vec<Vec<EngineFactory>>,
        epoch: Instant,
        faults: Arc<FaultSpec>,
    ) -> std::io::Result<Self> {
        let counts: Vec<usize> = factories.iter().map(Vec::len).collect();
        let built = std::thread::Builder::new()
            .name("nic-build".into())
            .stack_size(64 << 20)
            .spawn(move || {
                factories
                    .into_iter()
                    .flatten()
                    .map(|build| {
                        let (engine, notifier) = build();
                        NicSlot::new(engine, notifier)
                    })
                    .collect::<Vec<_>>()
            })?
            .join()
            .map_err(|_| std::io::Error::other("building a NIC engine panicked"))?;
        let slots: Arc<[NicSlot]> = built.into();
        let help = Arc::new(NicHelp {
            slots: Arc::clone(&slots),
            epoch,
            faults: Arc::clone(&faults),
            crowd: Crowd::default(),
            spare_cores: AtomicUsize::new(
                std::thread::available_parallelism()
                    .map_or(2, |n| n.get())
                    .saturating_sub(signals.len()),
            ),
            signals: signals.clone(),
            rank_polls: AtomicU64::new(0),
        });
        let shutdown = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut first = 0;
        for (w, (signal, count)) in signals.iter().cloned().zip(counts).enumerate() {
            let stop = Arc::clone(&shutdown);
            let faults = Arc::clone(&faults);
            let help = Arc::clone(&help);
            let mine = first..first + count;
            first += count;
            let handle = std::thread::Builder::new()
                .name(format!("nic-worker-{w}"))
                .spawn(move || {
                    let mine = help.slots.get(mine).unwrap_or(&[]);
                    run_worker(&signal, mine, &help, &stop, epoch, &faults);
                })?;
            threads.push(handle);
        }
        Ok(Self {
            shutdown,
            signals,
            threads,
            help,
        })
    }

    /// What a waiting rank needs to run these NICs itself.
    pub fn help(&self) -> Arc<NicHelp> {
        Arc::clone(&self.help)
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shutdown.store(true, Ordering::Release);
        for s in &self.signals {
            s.notify();
            if let Some(t) = s.thread.get() {
                t.unpark();
            }
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Every NIC of a pool, as waiting ranks run them: the same polls as
/// the workers', on any NIC with work whose lock is free, when the
/// machine is crowded: the ranks waiting and the workers together
/// outnumber the cores, so a worker would need a context switch (~10 us
/// here) to get one. While it is, and for 20 us after, the workers leave
/// their NICs alone: the same engine run by two threads in turn would
/// move its state between their caches at every turn. When every waiting
/// thread has a core, ranks leave the NICs to the workers, which then run
/// beside the ranks instead of after them.
#[derive(Debug)]
pub struct NicHelp {
    slots: Arc<[NicSlot]>,
    epoch: Instant,
    faults: Arc<FaultSpec>,
    /// Who waits, on a cache line pair of its own (every wait writes it).
    crowd: Crowd,
    /// Cores the workers leave: more waiting ranks than this crowd the
    /// machine.
    spare_cores: AtomicUsize,
    /// The workers, woken when a crowd ends.
    signals: Vec<Arc<WorkerSignal>>,
    /// Engine polls made by ranks whose [`NicHelper`] is gone.
    rank_polls: AtomicU64,
}

/// The ranks' waits, as the workers see them.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Crowd {
    /// Ranks waiting now ([`NicHelper::helping`]), crowded or not.
    waiting: AtomicUsize,
    /// When a wait on a crowded machine last succeeded (ns since the
    /// epoch; 0: not within the last [`STAND_BACK`]).
    won_at: AtomicU64,
}

/// How long the workers stay back after a wait on a crowded machine last
/// succeeded: a rank that posts its next operation within it finds its
/// NICs still in its cache. Short beside a futex wake-up (~25 us), so a
/// rank that went on to compute leaves the NICs without a worker for no
/// longer than a parked worker would.
const STAND_BACK: u64 = 20_000;

impl NicHelp {
    /// A rank's hold on the NICs.
    pub(crate) fn helper(self: &Arc<Self>) -> NicHelper {
        NicHelper {
            pool: Arc::clone(self),
            polls: AtomicU64::new(0),
        }
    }

    /// Engine polls made so far by ranks whose [`NicHelper`] is gone (the
    /// rest are the workers').
    pub fn rank_polls(&self) -> u64 {
        self.rank_polls.load(Ordering::Relaxed)
    }

    /// Should the workers leave the NICs to the ranks now?
    fn ranks_run_them(&self, now: u64) -> bool {
        self.crowded() || self.lately_crowded(now)
    }

    /// Did a wait on a crowded machine succeed less than [`STAND_BACK`]
    /// ago?
    fn lately_crowded(&self, now: u64) -> bool {
        let won_at = self.crowd.won_at.load(Ordering::Relaxed);
        won_at != 0 && now.saturating_sub(won_at) < STAND_BACK
    }

    /// Do the waiting ranks and the workers outnumber the cores?
    fn crowded(&self) -> bool {
        self.crowd.waiting.load(Ordering::Acquire) > self.spare_cores.load(Ordering::Relaxed)
    }

    /// Count the machine as having `cores` cores beside the workers (a
    /// test's way to make it crowded, or not, whatever the machine).
    #[cfg(test)]
    pub(crate) fn set_spare_cores(&self, cores: usize) {
        self.spare_cores.store(cores, Ordering::Relaxed);
    }
}

/// A rank's hold on its cluster's NICs ([`NicHelp`]).
#[derive(Debug)]
pub struct NicHelper {
    pool: Arc<NicHelp>,
    /// Engine polls this rank made (added to the pool's count when it
    /// goes: a count of the pool's own would be one more line every
    /// rank writes).
    polls: AtomicU64,
}

impl Drop for NicHelper {
    fn drop(&mut self) {
        let polls = self.polls.load(Ordering::Relaxed);
        self.pool.rank_polls.fetch_add(polls, Ordering::Relaxed);
    }
}

impl NicHelper {
    /// Run `wait`, during which the caller calls [`Self::help`] between
    /// its tests; while the machine is crowded the workers stand back.
    /// `wait` says whether what the caller waited for happened: if so, on
    /// a crowded machine, the workers stand back for 20 us more
    /// (the caller is likely to post again at once); if not, the caller
    /// goes on to sleep and leaves the NICs to them. `wait` must not
    /// sleep: the NICs would wait for the caller to wake.
    pub fn helping(&self, wait: impl FnOnce() -> bool) -> bool {
        struct Stop<'a> {
            pool: &'a NicHelp,
            succeeded: bool,
        }
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                let pool = self.pool;
                let was = pool.crowd.waiting.fetch_sub(1, Ordering::AcqRel);
                let spare = pool.spare_cores.load(Ordering::Relaxed);
                if was > spare && self.succeeded {
                    let now = pool.epoch.elapsed().as_nanos().max(1) as u64;
                    pool.crowd.won_at.fetch_max(now, Ordering::Relaxed);
                }
                if was == spare.saturating_add(1) {
                    // This wait ended the crowd: a worker that parked
                    // meanwhile takes its NICs back.
                    for s in &pool.signals {
                        s.notify();
                    }
                }
            }
        }
        self.pool.crowd.waiting.fetch_add(1, Ordering::AcqRel);
        let mut stop = Stop {
            pool: &self.pool,
            succeeded: false,
        };
        stop.succeeded = wait();
        stop.succeeded
    }

    /// One pass over every NIC with work, if the workers leave them to
    /// the ranks now (the machine is crowded, or was 20 us ago). True if
    /// some NIC ran, or was being run by another thread: the caller's
    /// condition may change soon, so it should test it again rather than
    /// sleep.
    pub fn help(&self) -> bool {
        let pool = &*self.pool;
        // The clock only when it can matter: an uncrowded wait's every
        // spin comes here. Once a crowd's stand-back is over, its time is
        // cleared, so the clock is read again only after the next crowd.
        let crowded = pool.crowded();
        let won_at = pool.crowd.won_at.load(Ordering::Relaxed);
        if !crowded && won_at == 0 {
            return false;
        }
        let now = pool.epoch.elapsed().as_nanos() as u64;
        if !crowded && !pool.lately_crowded(now) {
            let _ =
                pool.crowd
                    .won_at
                    .compare_exchange(won_at, 0, Ordering::Relaxed, Ordering::Relaxed);
            return false;
        }
        let mut next_timer = None;
        let (mut busy, mut polls) = (false, 0);
        for slot in pool.slots.iter() {
            let ran = slot.run(now, &pool.faults, &mut next_timer, Runner::Rank);
            polls += u64::from(matches!(ran, Ran::Busy | Ran::Done));
            busy |= ran != Ran::Idle;
        }
        if polls > 0 {
            self.polls.fetch_add(polls, Ordering::Relaxed);
        }
        busy
    }
}

fn run_worker(
    signal: &WorkerSignal,
    slots: &[NicSlot],
    help: &NicHelp,
    stop: &AtomicBool,
    epoch: Instant,
    faults: &FaultSpec,
) {
    let _ = signal.thread.set(std::thread::current());
    let mut idle = 0u32;
    let mut idle_since = Instant::now();
    while !stop.load(Ordering::Acquire) {
        // Clear before scanning: a notification during the scan sets it
        // again, so the park below cannot miss it. A swap, so that the
        // scan's reads cannot be served before the clear is visible (a
        // notifier that still saw the flag set would skip its unpark).
        signal.flag.swap(false, Ordering::AcqRel);
        let now = epoch.elapsed().as_nanos() as u64;
        if help.ranks_run_them(now) {
            // Stay awake, but off the NICs and mostly off the core: when
            // the ranks stop, a parked worker would cost the next doorbell
            // a futex wake.
            idle = 0;
            std::thread::yield_now();
            continue;
        }
        let mut busy = false;
        let mut next_timer: Option<u64> = None;
        for slot in slots {
            // A slot another thread is running counts as busy: it may
            // leave work behind that only this worker is sure to see.
            busy |= matches!(
                slot.run(now, faults, &mut next_timer, Runner::Worker),
                Ran::Busy | Ran::Taken
            );
        }
        if busy {
            idle = 0;
            continue;
        }
        idle = idle.saturating_add(1);
        if idle < SPIN_POLLS {
            if idle == 1 {
                idle_since = Instant::now();
            }
            std::hint::spin_loop();
            continue;
        }
        if idle_since.elapsed() < IDLE_YIELD {
            std::thread::yield_now();
            continue;
        }
        if signal.flag.load(Ordering::Acquire) {
            continue;
        }
        let wait = next_timer
            .map(|t| Duration::from_nanos(t.saturating_sub(now)))
            .unwrap_or(MAX_PARK)
            .min(MAX_PARK);
        std::thread::park_timeout(wait);
    }
}
