//! The loom models' machinery (`tests/tests/loom_protocols.rs`), shared
//! with `loom_planted`, the binary that runs a model with a bug planted in
//! it: loom reports a failure by panicking inside its scheduler, which
//! cannot be caught in the process, so the test runs that binary and
//! checks that it fails, and why.
//!
//! What the models share with the system is what decides correctness:
//! - every flag, word and register is an atomic with the orderings the
//!   code uses (Release stores, Acquire loads; ring contents Relaxed behind
//!   a Release fence), with no lock around them, so a missing ordering is
//!   a stale read loom finds;
//! - a waiter checks, then parks; a waker stores, then unparks the one
//!   thread it names, through a per-rank slot guarded by a mutex (the
//!   launcher's `env::Waker`). The real `ParkingWait` also re-polls every
//!   2 ms, which turns a lost wake-up into latency; the models park with
//!   no timeout, so a lost wake-up is a deadlock loom reports.

use loom::sync::atomic::{AtomicU64, Ordering, fence};
use loom::sync::{Arc, Mutex};
use loom::thread;
use railcoll_host::Error;
use railcoll_host::shm::{self, FlagMap, Flags, Round};

/// Flags and words: plain atomics, Release stores and Acquire loads (the
/// segment's `SegmentFlags`, the NIC's completion-word stores).
#[derive(Debug)]
pub struct LoomFlags {
    words: Vec<AtomicU64>,
}

impl LoomFlags {
    /// `n` words, all 0.
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            words: (0..n).map(|_| AtomicU64::new(0)).collect(),
        })
    }
}

impl Flags for LoomFlags {
    fn load(&self, i: usize) -> u64 {
        self.words[i].load(Ordering::Acquire)
    }
    fn store(&self, i: usize, v: u64) {
        self.words[i].store(v, Ordering::Release);
    }
}

/// Each thread's parking slot (`env::Waker`: a mutex around the thread to
/// unpark, bound by the thread itself when it starts).
#[derive(Debug)]
pub struct Parking {
    slots: Vec<Mutex<Option<thread::Thread>>>,
}

impl Parking {
    /// `n` unbound slots.
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            slots: (0..n).map(|_| Mutex::new(None)).collect(),
        })
    }

    /// Bind slot `me` to the calling thread.
    pub fn register(&self, me: usize) {
        *self.slots[me].lock().expect("slot") = Some(thread::current());
    }

    /// Wake the thread bound to slot `who`, if any (one that binds later
    /// checks its condition before it first parks).
    pub fn wake(&self, who: usize) {
        if let Some(t) = self.slots[who].lock().expect("slot").as_ref() {
            t.unpark();
        }
    }

    /// Check, then park, until `ready()` (`ParkingWait`'s loop, without its
    /// re-poll timeout).
    pub fn wait(&self, ready: &mut dyn FnMut() -> bool) {
        while !ready() {
            thread::park();
        }
    }
}

/// One rank's `shm::Sync`: waits park, wakes unpark the named rank.
/// `only_wakes`: a planted bug, this rank's wakes reach that rank alone.
#[derive(Debug)]
pub struct RankSync {
    /// The threads' slots.
    pub parking: Arc<Parking>,
    /// The planted bug, if any.
    pub only_wakes: Option<usize>,
}

impl shm::Sync for RankSync {
    type Error = Error;

    fn wait(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), Error> {
        self.parking.wait(ready);
        Ok(())
    }
    fn wake(&self, local: usize) {
        if self.only_wakes.is_none_or(|only| only == local) {
            self.parking.wake(local);
        }
    }
}

/// Run `body(i, shared)` on `n` loom threads, each bound to its parking
/// slot first and with its own clone of `shared`, and join them all.
pub fn run_threads<T: Clone + Send + 'static>(
    n: usize,
    parking: &Arc<Parking>,
    shared: T,
    body: impl Fn(usize, T) + Clone + Send + 'static,
) {
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (shared, body, parking) = (shared.clone(), body.clone(), parking.clone());
            thread::spawn(move || {
                parking.register(i);
                body(i, shared)
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
}

/// Preemption bound: every execution with up to this many involuntary
/// switches is explored (most concurrency bugs need two; three is what CI
/// time allows, docs/reliability.md).
pub const PREEMPTIONS: usize = 3;

/// Rank `me`'s view of round `epoch` (root `root`) over `flags`.
pub fn round_of<'a>(
    flags: &'a LoomFlags,
    sync: &'a RankSync,
    map: FlagMap,
    me: usize,
    root: usize,
    epoch: u64,
) -> Round<'a, LoomFlags, RankSync> {
    Round {
        flags,
        sync,
        map,
        me,
        root,
        epoch,
    }
}

/// Explore every execution of `f` within the bound.
pub fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(PREEMPTIONS);
    b.max_branches = 100_000;
    b.check(f);
}

/// Broadcast `rounds` (epoch, root) among `locals` ranks; `planted`: each
/// non-root's wakes reach the round's root only.
pub fn broadcast_rounds(locals: usize, rounds: &'static [(u64, usize)], planted: bool) {
    {
        let map = FlagMap::new(locals);
        let flags = LoomFlags::new(map.count());
        let parking = Parking::new(locals);
        let buffer = Arc::new(AtomicU64::new(0));
        run_threads(
            locals,
            &parking,
            (flags.clone(), buffer.clone(), parking.clone()),
            move |me, (flags, buffer, parking)| {
                for &(epoch, root) in rounds {
                    let sync = RankSync {
                        parking: parking.clone(),
                        only_wakes: (planted && me != root).then_some(root),
                    };
                    let round = round_of(&flags, &sync, map, me, root, epoch);
                    let value = epoch * 100;
                    let mut fill = || {
                        buffer.store(value, Ordering::Relaxed);
                        Ok(())
                    };
                    let mut drain = || {
                        assert_eq!(buffer.load(Ordering::Relaxed), value, "round {epoch}");
                        Ok(())
                    };
                    shm::broadcast_round(&round, &mut fill, &mut drain).expect("bcast");
                }
            },
        );
    }
}

/// A ring of one command slot, its tail and head registers, the doorbell
/// word, and one completion word with the data it reports.
#[derive(Debug)]
struct RingNic {
    slot: AtomicU64,
    tail: AtomicU64,
    head: AtomicU64,
    doorbells: AtomicU64,
    completion: AtomicU64,
    data: AtomicU64,
}

/// The host posts two commands through a one-slot ring (the second waits
/// for the NIC to consume the first) and waits for the completion word of
/// the last; the NIC consumes each block, writes its data, then the
/// completion word (Release, `write_word_release`), and wakes the host.
/// The orderings are the driver's (`Driver::ring`: a Release fence, then
/// the tail's Release store; `SharedRegisters`: Acquire loads, the
/// doorbells' AcqRel swap). `planted`: the tail is published with a
/// Relaxed store and no fence.
pub fn ring_and_completion(planted: bool) {
    const COMMANDS: u64 = 2;
    let nic = Arc::new(RingNic {
        slot: AtomicU64::new(0),
        tail: AtomicU64::new(0),
        head: AtomicU64::new(0),
        doorbells: AtomicU64::new(0),
        completion: AtomicU64::new(0),
        data: AtomicU64::new(0),
    });
    let parking = Parking::new(2);
    let (host, nic_thread) = (0, 1);
    run_threads(
        2,
        &parking,
        (nic, parking.clone()),
        move |me, (nic, parking)| {
            if me == host {
                for id in 1..=COMMANDS {
                    // Room in the ring: the NIC consumed the previous block.
                    parking.wait(&mut || nic.head.load(Ordering::Acquire) + 1 >= id);
                    nic.slot.store(id, Ordering::Relaxed);
                    if planted {
                        nic.tail.store(id, Ordering::Relaxed);
                    } else {
                        fence(Ordering::Release);
                        nic.tail.store(id, Ordering::Release);
                    }
                    nic.doorbells.fetch_or(1, Ordering::AcqRel);
                    parking.wake(nic_thread);
                }
                parking.wait(&mut || nic.completion.load(Ordering::Acquire) >= COMMANDS);
                assert_eq!(
                    nic.data.load(Ordering::Relaxed),
                    COMMANDS * 10,
                    "the completion word came before its data"
                );
            } else {
                let mut done = 0;
                while done < COMMANDS {
                    if nic.doorbells.load(Ordering::Relaxed) != 0 {
                        nic.doorbells.swap(0, Ordering::AcqRel);
                    }
                    if nic.tail.load(Ordering::Acquire) == done {
                        parking.wait(&mut || nic.tail.load(Ordering::Acquire) > done);
                        continue;
                    }
                    let id = nic.slot.load(Ordering::Relaxed);
                    assert_eq!(id, done + 1, "the NIC read a stale command block");
                    nic.data.store(id * 10, Ordering::Relaxed);
                    nic.completion.store(id, Ordering::Release);
                    done += 1;
                    nic.head.store(done, Ordering::Release);
                    parking.wake(host);
                }
            }
        },
    );
}
