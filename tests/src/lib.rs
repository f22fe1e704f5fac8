//! railcoll-tests: cross-crate integration tests (in `tests/`) and the
//! helpers they share.
//!
//! Map: [`pattern`] makes verifiable data; [`cluster`] builds small clusters
//! with the settings tests need (small packets, so that splitting is
//! exercised); [`coll`] runs one collective call and checks every rank's
//! output against the MPI definition; [`differential`] is the library's
//! differential fuzzer (random programs against the definitions);
//! [`jobs`] is what the tests of ranks as processes share;
//! [`loom_models`] is the loom models'
//! machinery, shared with the `loom_planted` binary.

pub mod differential;
pub mod jobs;
pub mod loom_models;

use railcoll_emu::{Cluster, ClusterConfig, Mode};
use railcoll_host::Placement;
use railcoll_host::sched::Shape;

/// A shape for tests (`nodes x rpn`, `sockets`, `rails`); panics on a
/// shape the test got wrong.
pub fn shape(
    nodes: usize,
    rpn: usize,
    sockets: usize,
    rails: usize,
    placement: Placement,
) -> Shape {
    Shape::new(nodes, rpn, sockets, rails, placement).expect("test shape")
}

/// Deterministic, position- and seed-dependent bytes (the conformance
/// suite's: one generator for every check of the workspace).
pub use railcoll_conformance::pattern;

/// A small seeded generator (xorshift64*), for tests whose random
/// choices must be a function of their seed.
#[derive(Clone, Debug)]
pub struct Draw(pub u64);

impl Draw {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (0 if `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// The emulator mode the suite runs in: `RAILCOLL_TEST_MODE=modeled` runs
/// every emulator test in modeled mode (CI runs the suite in both).
pub fn mode() -> Mode {
    match std::env::var("RAILCOLL_TEST_MODE") {
        Ok(m) => m
            .parse()
            .unwrap_or_else(|e: String| panic!("RAILCOLL_TEST_MODE: {e}")),
        Err(_) => Mode::Threads,
    }
}

/// Whether the suite, in this run's [`mode`], takes the `index`-th shape of
/// a space the two modes share: threads mode the even ones, modeled mode
/// the odd ones. The README's test command runs both, so every shape still
/// runs; the largest shape spaces are shared this way to keep CI within
/// its time (both modes run the same host code and firmware; what differs
/// is the transport underneath, and each shape class still meets both).
pub fn shared_shape(index: usize) -> bool {
    let threads = matches!(mode(), Mode::Threads);
    index.is_multiple_of(2) == threads
}

/// A cluster for tests: `nodes x rpn x rails`, 2 KiB packets (Elan4's), one
/// worker per rail, `arena` bytes per rank, in the suite's [`mode`], with
/// the argument check on.
pub fn cluster(nodes: usize, rpn: usize, rails: usize, arena: usize) -> Cluster {
    Cluster::new(cluster_config(nodes, rpn, rails, arena)).expect("test cluster")
}

/// The configuration of [`cluster`], for tests that change a field.
pub fn cluster_config(nodes: usize, rpn: usize, rails: usize, arena: usize) -> ClusterConfig {
    ClusterConfig {
        mode: mode(),
        shape: shape(nodes, rpn, 1, rails, Placement::Block),
        arena_size: arena,
        packet_size: 2048,
        // A deadlock fails the test in seconds, not minutes.
        wait_timeout: std::time::Duration::from_secs(20),
        // Ranks that disagree get a typed error, whatever the profile.
        check: true,
        ..ClusterConfig::default()
    }
}

/// One collective call and its check, shared by the byte-exact suite and
/// the fault suite.
pub mod coll {
    use railcoll_host::Comm;
    use railcoll_host::arena::SymBuffer;
    use railcoll_host::sched::{Choice, Collective};

    use crate::pattern;

    /// How a case is called.
    #[derive(Clone, Copy, Debug)]
    pub enum Form {
        /// `collective_with`.
        Blocking,
        /// `icollective_with`, then `wait`.
        Wait,
        /// `icollective_with`, then `test` until it is complete.
        Test,
    }

    /// One collective call and its check.
    #[derive(Clone, Copy, Debug)]
    pub struct Case {
        /// The collective.
        pub c: Collective,
        /// Its algorithm and drive.
        pub a: Choice,
        /// The root (rooted collectives).
        pub root: usize,
        /// Block bytes.
        pub bytes: usize,
        /// How it is called.
        pub form: Form,
    }

    /// The `test` loop's bound that [`set_poll_deadline`] set, in
    /// milliseconds; 0 while none was set.
    static POLL_DEADLINE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

    /// Bound every later case's `test` loop by `limit` (at least 1 ms),
    /// in place of `RAILCOLL_TEST_POLL_SECONDS`: a program that bounds its
    /// waits by a timeout of its own bounds its polls by the same one, so
    /// that a rank whose peers died ends as soon through either form. It
    /// holds for the rest of the process: a program's setting, not one
    /// test's.
    pub fn set_poll_deadline(limit: std::time::Duration) {
        let ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX).max(1);
        POLL_DEADLINE_MS.store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// How long a `test` loop polls before the case fails: what
    /// [`set_poll_deadline`] set, else `RAILCOLL_TEST_POLL_SECONDS`
    /// (default 120).
    fn poll_deadline() -> std::time::Duration {
        match POLL_DEADLINE_MS.load(std::sync::atomic::Ordering::Relaxed) {
            0 => {
                let seconds = std::env::var("RAILCOLL_TEST_POLL_SECONDS")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(120);
                std::time::Duration::from_secs(seconds)
            }
            ms => std::time::Duration::from_millis(ms),
        }
    }

    /// Rank `origin`'s `index`-th block.
    pub fn block_of(origin: usize, index: usize, bytes: usize) -> Vec<u8> {
        pattern(bytes, (origin * 7919 + index) as u64 + 1)
    }

    /// Run one case on `comm` and check its output against the MPI
    /// definition, byte for byte.
    pub fn run_case(comm: &Comm, case: Case) -> Result<(), String> {
        let n = comm.size();
        let send_blocks = if case.c == Collective::Alltoall { n } else { 1 };
        let send = comm
            .alloc(send_blocks * case.bytes)
            .map_err(|e| e.to_string())?;
        let recv = comm.alloc(n * case.bytes).map_err(|e| e.to_string())?;
        run_case_on(comm, case, &send, &recv)?;
        comm.reset_arena().map_err(|e| e.to_string())
    }

    /// [`run_case`] on buffers the caller allocated (at least as large as
    /// the case needs; the job's arena is the caller's to reset): what a
    /// communicator split off the job's runs on.
    pub fn run_case_on(
        comm: &Comm,
        case: Case,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<(), String> {
        let Case {
            c,
            a,
            root,
            bytes,
            form,
        } = case;
        let n = comm.size();
        let me = comm.rank();
        let send_blocks = if c == Collective::Alltoall { n } else { 1 };
        let send = send
            .slice(0, send_blocks * bytes)
            .map_err(|e| e.to_string())?;
        let recv = recv.slice(0, n * bytes).map_err(|e| e.to_string())?;
        for j in 0..send_blocks {
            comm.write_local(&send, j * bytes, &block_of(me, j, bytes))
                .map_err(|e| e.to_string())?;
        }
        // A sentinel: an unwritten output would keep it.
        comm.write_local(&recv, 0, &vec![0xA5; n * bytes])
            .map_err(|e| e.to_string())?;
        comm.barrier().map_err(|e| e.to_string())?;
        // Whatever the suite's mode: a modeled cluster's ranks run on the
        // sequencer's fibers.
        let threads = railcoll_emu::modeled::kernel::current_rank().is_none();
        // `name@nic`: the set compiled onto the NICs, proved to fit this
        // communicator's NICs, run by the same executor.
        let what =
            |e: railcoll_host::Error| format!("{c} {a} root {root} block {bytes} ({form:?}): {e}");
        match form {
            Form::Blocking => comm
                .collective_with(c, a, &send, &recv, root)
                .map_err(what)?,
            Form::Wait => comm
                .icollective_with(c, a, &send, &recv, root)
                .and_then(|r| r.wait())
                .map_err(what)?,
            Form::Test => {
                let mut r = comm
                    .icollective_with(c, a, &send, &recv, root)
                    .map_err(what)?;
                // `test` never gives up (MPI's doesn't): the loop does, so
                // that a job whose NICs went away ends instead of polling
                // forever (`poll_deadline`).
                let limit = poll_deadline();
                // None: a bound too far to reach (no deadline).
                let deadline = std::time::Instant::now().checked_add(limit);
                let mut nap = std::time::Duration::from_micros(20);
                let mut polls = 0u32;
                while !r.test().map_err(what)? {
                    // Modeled, the clock every 64th poll: a modeled rank's
                    // polls come thousands to a wall-clock millisecond, and
                    // reading it at each was 3 % of the modeled byte-exact
                    // suite. Threads mode naps between polls: every poll.
                    polls = polls.wrapping_add(1);
                    if (threads || polls.is_multiple_of(64))
                        && deadline.is_some_and(|d| std::time::Instant::now() > d)
                    {
                        return Err(format!(
                            "{c} {a} root {root} block {bytes} ({form:?}): test() never \
                             completed within {limit:?}"
                        ));
                    }
                    // A rank with other work between polls: in threads mode,
                    // ranks spinning on `test` would take the cores from the
                    // NIC workers (modeled mode lets time pass in `test`).
                    // The naps grow (to 1 ms): dozens of rank threads waking
                    // every 20 us spent a third of a 2-core machine's time
                    // switching between them.
                    if threads {
                        std::thread::sleep(nap);
                        nap = (nap * 2).min(std::time::Duration::from_millis(1));
                    }
                }
            }
        }
        let mut got = vec![0u8; n * bytes];
        comm.read_local(&recv, 0, &mut got)
            .map_err(|e| e.to_string())?;
        // What each receive block must hold: its output, or the sentinel where
        // the collective writes nothing (a gather's non-roots, everything a
        // broadcast leaves alone, the root's buffer included, and a barrier).
        let sentinel = vec![0xA5; bytes];
        {
            for i in 0..n {
                let want = match c {
                    Collective::Gather if me != root => sentinel.clone(),
                    Collective::Gather | Collective::Allgather => block_of(i, 0, bytes),
                    Collective::Alltoall => block_of(i, me, bytes),
                    Collective::Bcast if i == 0 && me != root => block_of(root, 0, bytes),
                    Collective::Bcast | Collective::Barrier => sentinel.clone(),
                };
                if got[i * bytes..(i + 1) * bytes] != want[..] {
                    let at = got[i * bytes..(i + 1) * bytes]
                        .iter()
                        .zip(&want)
                        .position(|(x, y)| x != y)
                        .unwrap_or(0);
                    return Err(format!(
                        "{c} {a} root {root} block {bytes}: rank {me} block {i} differs from byte {at} (got {:#x}, want {:#x})",
                        got[i * bytes + at],
                        want[at]
                    ));
                }
            }
        }
        // Every rank's buffers are free again before the next case.
        comm.barrier().map_err(|e| e.to_string())
    }
}
