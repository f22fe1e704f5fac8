//! NIC workers: a small pool of threads that run the firmware engines.
//!
//! There are never more workers than cores (a 2-core machine cannot afford
//! spinning threads beyond that). Each engine belongs to one worker for its
//! whole life, so no engine state is shared between threads. A worker polls
//! the engines that were notified (doorbell, packet), that reported pending
//! work, or whose retransmission timer is due; when none is busy it spins
//! briefly (a hand-off between running threads costs 25-200 ns), then yields,
//! then parks until notified (a futex wake costs ~25 us).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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

struct Slot {
    engine: Box<EmuEngine>,
    notifier: Notifier,
    active: bool,
    timer: Option<u64>,
}

/// Builds an engine inside its worker thread (engines are large; they are
/// built on the worker's big stack and boxed there).
pub type EngineFactory = Box<dyn FnOnce() -> (Box<EmuEngine>, Notifier) + Send>;

/// The running pool.
#[derive(Debug)]
pub struct WorkerPool {
    shutdown: Arc<AtomicBool>,
    signals: Vec<Arc<WorkerSignal>>,
    threads: Vec<JoinHandle<()>>,
}

impl WorkerPool {
    /// Signals for `workers` workers, to build notifiers before the engines.
    pub fn signals(workers: usize) -> Vec<Arc<WorkerSignal>> {
        (0..workers)
            .map(|_| Arc::new(WorkerSignal::default()))
            .collect()
    }

    /// Start one thread per signal; `factories[w]` build worker `w`'s engines.
    /// A NIC that `faults` stalls is not polled while it is stalled.
    pub fn start(
        signals: Vec<Arc<WorkerSignal>>,
        factories: Vec<Vec<EngineFactory>>,
        epoch: Instant,
        faults: Arc<FaultSpec>,
    ) -> std::io::Result<Self> {
        let shutdown = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (w, (signal, builders)) in signals.iter().cloned().zip(factories).enumerate() {
            let stop = Arc::clone(&shutdown);
            let faults = Arc::clone(&faults);
            let handle = std::thread::Builder::new()
                .name(format!("nic-worker-{w}"))
                .stack_size(64 << 20)
                .spawn(move || {
                    let slots: Vec<Slot> = builders
                        .into_iter()
                        .map(|build| {
                            let (engine, notifier) = build();
                            Slot {
                                engine,
                                notifier,
                                active: true,
                                timer: None,
                            }
                        })
                        .collect();
                    run_worker(&signal, slots, &stop, epoch, &faults);
                })?;
            threads.push(handle);
        }
        Ok(Self {
            shutdown,
            signals,
            threads,
        })
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

fn run_worker(
    signal: &WorkerSignal,
    mut slots: Vec<Slot>,
    stop: &AtomicBool,
    epoch: Instant,
    faults: &FaultSpec,
) {
    let _ = signal.thread.set(std::thread::current());
    let mut idle = 0u32;
    let mut idle_since = Instant::now();
    while !stop.load(Ordering::Acquire) {
        // Clear before scanning: a notification during the scan sets it
        // again, so the park below cannot miss it.
        signal.flag.store(false, Ordering::Release);
        let now = epoch.elapsed().as_nanos() as u64;
        let mut busy = false;
        let mut next_timer: Option<u64> = None;
        for slot in &mut slots {
            if !faults.stalls.is_empty() {
                let board = slot.engine.hardware();
                if let Some(until) = faults.stalled_until(board.node, board.rail_index(), now) {
                    // A stalled processor: whatever arrives waits for it.
                    next_timer = Some(next_timer.map_or(until, |n: u64| n.min(until)));
                    continue;
                }
            }
            let notified = slot.notifier.take();
            let due = slot.timer.is_some_and(|t| now >= t);
            if notified || slot.active || due {
                let out = slot.engine.poll();
                slot.active = out.progressed || out.pending;
                slot.timer = out.timer_ns;
                busy |= slot.active;
            }
            if let Some(t) = slot.timer {
                next_timer = Some(next_timer.map_or(t, |n: u64| n.min(t)));
            }
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
