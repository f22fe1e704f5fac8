//! The library's differential fuzzer (issue 27): random programs run
//! through the public API and checked, call by call, against a plain
//! reference of each collective's definition.
//!
//! A program is a function of its seed: a cluster shape, a buffer
//! contract, the argument check on or off, and one to three closures run
//! on that one cluster (reused). Each closure is a random sequence of
//! collectives (every collective of the catalogue; a tuned call or any
//! algorithm and drive the communicator accepts for that size and root;
//! blocking, non-blocking or persistent), completions of the requests in
//! flight (each rank completing them in an order of its own, by `wait`,
//! `wait_all`, `wait_any`, polling `test_all`, or dropping the request),
//! barriers, and skews (a rank computing for a while, so that ranks enter
//! calls at different times). Calls follow each other on a small pool of
//! buffer pairs with no barrier between them: under MPI's contract
//! (`BufferContract::Mpi`) that is the user's right. Under SHMEM's, the
//! program keeps that contract's discipline (a barrier before a rank
//! rewrites a pair's inputs, and one before the call). A closure may end
//! with ranks that err: some ranks pass a receive buffer one byte short,
//! or, with the check on, a different block size, root or algorithm, or
//! skip the call; then every rank must return a typed error (its own, the
//! mismatch, or the revoke naming an erring rank) at that call or at the
//! barrier after it, and the next closure must run clean.
//!
//! What is checked, on every rank after every call completes: each
//! receive block holds what the definition says (MPI's gather,
//! all-gather, all-to-all and broadcast), everything the call must not
//! write still holds the call's sentinel (the whole pair, not only the
//! blocks), and the send buffer is unchanged. Inputs and sentinels are
//! new for every call (a function of the seed, the call and the rank), so
//! a stale block of an earlier call cannot pass for this one's.
//!
//! The program is drawn on every rank from the same seed (a draw that
//! depends on the communicator, which choices it accepts, is the same on
//! every rank); what ranks may do differently (completion orders, skews)
//! comes from a second generator seeded with the rank.

use std::fmt;
use std::time::Duration;

use railcoll_emu::{Cluster, ClusterConfig, Mode};
use railcoll_host::arena::SymBuffer;
use railcoll_host::sched::{Choice, Collective};
use railcoll_host::{
    BufferContract, Comm, Error, Mismatch, Persistent, Placement, Request, RevokeCause,
};

use crate::{Draw, pattern};

/// Block sizes a call may take (all-to-all on more than eight ranks stops
/// at 1 KiB: N^2 blocks per rank).
const SIZES: [usize; 10] = [0, 1, 3, 8, 24, 64, 100, 512, 1000, 4096];
/// Buffer pairs per closure; at most `PAIRS - 1` are held by requests in
/// flight and persistent collectives, so a blocking call always finds one.
const PAIRS: usize = 4;
/// The shapes programs run on: (nodes, ranks per node, rails).
const SHAPES: [(usize, usize, usize); 8] = [
    (1, 4, 1),
    (2, 2, 2),
    (4, 1, 2),
    (3, 2, 1),
    (2, 3, 2),
    (4, 4, 2),
    (5, 1, 1),
    (2, 4, 3),
];

/// What one program is: all of it follows from `seed`.
#[derive(Clone, Debug)]
pub struct Program {
    /// The seed everything is drawn from.
    pub seed: u64,
    /// Nodes, ranks per node, rails.
    pub shape: (usize, usize, usize),
    /// Rank placement.
    pub placement: Placement,
    /// The buffer contract its communicators run under.
    pub contract: BufferContract,
    /// The argument check.
    pub check: bool,
    /// Closures run on the one cluster.
    pub closures: usize,
    /// Steps per closure.
    pub steps: usize,
}

impl Program {
    /// The program of `seed`.
    pub fn new(seed: u64) -> Program {
        let mut d = Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let shape = SHAPES[d.below(SHAPES.len())];
        let placement = if d.below(3) == 0 {
            Placement::Cyclic
        } else {
            Placement::Block
        };
        let contract = if d.below(4) == 0 {
            BufferContract::Shmem
        } else {
            BufferContract::Mpi
        };
        Program {
            seed,
            shape,
            placement,
            contract,
            check: d.below(4) != 0,
            closures: 1 + d.below(3),
            steps: 8 + d.below(17),
        }
    }

    fn size(&self) -> usize {
        self.shape.0 * self.shape.1
    }

    /// The largest block a call of this program takes.
    fn max_block(&self) -> usize {
        SIZES[SIZES.len() - 1]
    }

    /// Bytes of each buffer of a pair.
    fn pair_bytes(&self) -> usize {
        self.size() * self.max_block()
    }

    /// The cluster this program runs on, in `mode`.
    pub fn cluster_config(&self, mode: Mode) -> ClusterConfig {
        let (nodes, rpn, rails) = self.shape;
        let sockets = if rpn.is_multiple_of(2) { 2 } else { 1 };
        let n = self.size();
        // The pairs, and the scratch of all-to-alls that keep up to
        // (2 + 2 log N) x N^2 blocks.
        let all_to_all = 2 * n * n * if n > 8 { 1024 } else { self.max_block() };
        let arena =
            (2 * PAIRS * self.pair_bytes() + 8 * all_to_all + (4 << 20)).next_power_of_two();
        ClusterConfig {
            mode,
            shape: crate::shape(nodes, rpn, sockets, rails, self.placement),
            contract: self.contract,
            check: self.check,
            ..crate::cluster_config(nodes, rpn, rails, arena)
        }
    }
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (nodes, rpn, rails) = self.shape;
        write!(
            f,
            "program {:#x}: {nodes}x{rpn}x{rails} {:?}, {:?} contract, check {}, {} closure(s) of {} steps",
            self.seed,
            self.placement,
            self.contract,
            if self.check { "on" } else { "off" },
            self.closures,
            self.steps
        )
    }
}

/// What programs did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Closures run.
    pub closures: u64,
    /// Calls made (counted once, not per rank).
    pub calls: u64,
    /// Outputs checked against the definition (one per rank and call).
    pub checked: u64,
    /// Calls started non-blocking or persistent (one per rank and start).
    pub in_flight: u64,
    /// Closures that ended with ranks that err, every rank's error one
    /// the fault explains.
    pub failures: u64,
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, o: Tally) {
        self.closures += o.closures;
        self.calls += o.calls;
        self.checked += o.checked;
        self.in_flight += o.in_flight;
        self.failures += o.failures;
    }
}

/// Run `program` in `mode`: every closure on one cluster. `Err` names the
/// program, the closure, the rank and what was wrong.
pub fn run(program: &Program, mode: Mode) -> Result<Tally, String> {
    let cluster =
        Cluster::new(program.cluster_config(mode)).map_err(|e| format!("{program}: {e}"))?;
    let mut tally = Tally::default();
    for closure in 0..program.closures {
        let results = cluster.run(|comm| run_closure(program, closure, comm));
        let mut wrong = Vec::new();
        let mut closure_tally = Tally::default();
        for (rank, r) in results.into_iter().enumerate() {
            match r {
                Ok(Ok(t)) => {
                    closure_tally.checked += t.checked;
                    closure_tally.in_flight += t.in_flight;
                    // The same on every rank that got that far.
                    closure_tally.calls = closure_tally.calls.max(t.calls);
                    closure_tally.failures = closure_tally.failures.max(t.failures);
                }
                Ok(Err(w)) => wrong.push(format!("rank {rank}: {w}")),
                Err(e) => wrong.push(format!("rank {rank} did not run: {e}")),
            }
        }
        if !wrong.is_empty() {
            let report = cluster
                .stall_report()
                .map_or(String::new(), |r| format!("\n  watchdog: {r}"));
            return Err(format!(
                "{program}: closure {closure}:\n  {}{report}",
                wrong.join("\n  ")
            ));
        }
        closure_tally.closures = 1;
        tally += closure_tally;
    }
    Ok(tally)
}

/// One call: what every rank agrees on.
#[derive(Clone, Copy, Debug)]
struct Call {
    /// Counted over the closure, the same on every rank: keys its data.
    id: u64,
    c: Collective,
    /// `None`: the tuned call.
    choice: Option<Choice>,
    root: usize,
    bytes: usize,
    pair: usize,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = self.choice.map_or("tuned".to_string(), |c| c.to_string());
        write!(
            f,
            "call {} ({} {how}, root {}, {} B blocks, pair {})",
            self.id, self.c, self.root, self.bytes, self.pair
        )
    }
}

/// The bytes of rank `rank`'s buffer `what` (1 send, 2 sentinel) for
/// call `id`.
fn content(seed: u64, id: u64, rank: usize, what: u64, len: usize) -> Vec<u8> {
    let key = seed
        .wrapping_mul(0x100_0000_01b3)
        .wrapping_add(id.wrapping_mul(0x9e37_79b9))
        .wrapping_add((rank as u64) << 40)
        .wrapping_add(what << 60);
    pattern(len, key)
}

/// A closure's buffers and what it has done so far.
struct Closure<'c> {
    comm: &'c Comm,
    seed: u64,
    pairs: Vec<(SymBuffer, SymBuffer)>,
    pair_bytes: usize,
    contract: BufferContract,
    threads: bool,
    tally: Tally,
    /// The call each pair was last checked after: its bytes must still be
    /// there when the pair is next used (nothing writes a rank's buffers
    /// once its call has returned).
    verified: [Option<Call>; PAIRS],
}

/// A request in flight: a non-blocking call, or a persistent one started.
enum Pending<'c> {
    Request(Call, Request<'c>),
    Started(Call, usize),
}

impl<'c> Closure<'c> {
    /// The buffers `call` passes (bcast: its buffer twice).
    fn args(&self, call: &Call, bytes: usize) -> Result<(SymBuffer, SymBuffer), Error> {
        let n = self.comm.size();
        let (send, recv) = &self.pairs[call.pair];
        Ok(match call.c {
            Collective::Allgather | Collective::Gather => {
                (send.slice(0, bytes)?, recv.slice(0, n * bytes)?)
            }
            Collective::Alltoall => (send.slice(0, n * bytes)?, recv.slice(0, n * bytes)?),
            Collective::Bcast => (recv.slice(0, bytes)?, recv.slice(0, bytes)?),
            Collective::Barrier => (send.slice(0, 0)?, recv.slice(0, 0)?),
        })
    }

    /// Write `call`'s inputs and sentinel on this rank (SHMEM: between
    /// barriers, that contract's discipline).
    fn prepare(&mut self, call: &Call) -> Result<(), Stop> {
        self.recheck(call.pair)?;
        self.write_inputs(call)
            .map_err(failed(format!("{call}: inputs")))
    }

    fn write_inputs(&self, call: &Call) -> Result<(), Error> {
        let shmem = self.contract == BufferContract::Shmem;
        if shmem {
            self.comm.barrier()?;
        }
        let me = self.comm.rank();
        let (send, recv) = &self.pairs[call.pair];
        let len = self.pair_bytes;
        self.comm
            .write_local(send, 0, &content(self.seed, call.id, me, 1, len))?;
        let mut sentinel = content(self.seed, call.id, me, 2, len);
        if call.c == Collective::Bcast && me == call.root {
            sentinel[..call.bytes].copy_from_slice(&self.block(call, me, 0));
        }
        self.comm.write_local(recv, 0, &sentinel)?;
        if shmem {
            self.comm.barrier()?;
        }
        Ok(())
    }

    /// Rank `rank`'s send block `j` of `call`.
    fn block(&self, call: &Call, rank: usize, j: usize) -> Vec<u8> {
        let all = content(self.seed, call.id, rank, 1, (j + 1) * call.bytes);
        all[j * call.bytes..].to_vec()
    }

    /// Check this rank's buffers after `call` completed, against the
    /// definition.
    fn verify(&mut self, call: &Call) -> Result<(), String> {
        self.compare(call)?;
        self.tally.checked += 1;
        self.verified[call.pair] = Some(*call);
        Ok(())
    }

    /// Check that the pair `pair` still holds what it held when its last
    /// call was checked (a late write shows here).
    fn recheck(&mut self, pair: usize) -> Result<(), String> {
        match self.verified[pair].take() {
            Some(last) => self
                .compare(&last)
                .map_err(|w| format!("later, before the pair was used again: {w}")),
            None => Ok(()),
        }
    }

    /// Compare this rank's buffers with what `call` leaves in them.
    fn compare(&self, call: &Call) -> Result<(), String> {
        let (n, me, b) = (self.comm.size(), self.comm.rank(), call.bytes);
        let len = self.pair_bytes;
        let (send, recv) = &self.pairs[call.pair];
        let mut want = content(self.seed, call.id, me, 2, len);
        match call.c {
            Collective::Allgather => {
                for i in 0..n {
                    want[i * b..(i + 1) * b].copy_from_slice(&self.block(call, i, 0));
                }
            }
            Collective::Gather if me == call.root => {
                for i in 0..n {
                    want[i * b..(i + 1) * b].copy_from_slice(&self.block(call, i, 0));
                }
            }
            Collective::Alltoall => {
                for i in 0..n {
                    want[i * b..(i + 1) * b].copy_from_slice(&self.block(call, i, me));
                }
            }
            Collective::Bcast => {
                want[..b].copy_from_slice(&self.block(call, call.root, 0));
            }
            Collective::Gather | Collective::Barrier => {}
        }
        let mut got = vec![0u8; len];
        self.comm
            .read_local(recv, 0, &mut got)
            .map_err(|e| format!("{call}: reading the receive buffer: {e}"))?;
        if let Some(at) = got.iter().zip(&want).position(|(g, w)| g != w) {
            let (block, byte) = at.checked_div(b).map_or((0, at), |k| (k, at - k * b));
            let last = got
                .iter()
                .zip(&want)
                .rposition(|(g, w)| g != w)
                .unwrap_or(at);
            let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count();
            let sentinel = content(self.seed, call.id, me, 2, len);
            let left = (at..=last)
                .filter(|&i| got[i] == sentinel[i] && got[i] != want[i])
                .count();
            return Err(format!(
                "{call}: receive byte {at} (block {block}, byte {byte}) is {:#04x}, the definition says {:#04x} ({wrong} bytes wrong between {at} and {last}, {left} of them still the sentinel)",
                got[at], want[at]
            ));
        }
        let sent = content(self.seed, call.id, me, 1, len);
        self.comm
            .read_local(send, 0, &mut got)
            .map_err(|e| format!("{call}: reading the send buffer: {e}"))?;
        if let Some(at) = got.iter().zip(&sent).position(|(g, w)| g != w) {
            return Err(format!("{call}: the call changed send byte {at}"));
        }
        Ok(())
    }

    /// Run `call` blocking (`bytes`, `root` and `choice` as this rank
    /// passes them, which an erring rank changes).
    fn blocking(
        &self,
        call: &Call,
        bytes: usize,
        root: usize,
        choice: Option<Choice>,
    ) -> Result<(), Error> {
        let (s, r) = self.args(call, bytes)?;
        let comm = self.comm;
        match (choice, call.c) {
            (Some(a), c) => comm.collective_with(c, a, &s, &r, root),
            (None, Collective::Allgather) => comm.allgather(&s, &r),
            (None, Collective::Alltoall) => comm.alltoall(&s, &r),
            (None, Collective::Gather) => comm.gather(&s, &r, root),
            (None, Collective::Bcast) => comm.broadcast(&s, root),
            (None, Collective::Barrier) => comm.barrier(),
        }
    }

    fn start(
        &self,
        call: &Call,
        bytes: usize,
        root: usize,
        choice: Option<Choice>,
    ) -> Result<Request<'c>, Error> {
        let (s, r) = self.args(call, bytes)?;
        let comm = self.comm;
        match (choice, call.c) {
            (Some(a), c) => comm.icollective_with(c, a, &s, &r, root),
            (None, Collective::Allgather) => comm.iallgather(&s, &r),
            (None, Collective::Alltoall) => comm.ialltoall(&s, &r),
            (None, Collective::Gather) => comm.igather(&s, &r, root),
            (None, Collective::Bcast) => comm.ibcast(&s, root),
            (None, Collective::Barrier) => comm.ibarrier(),
        }
    }

    fn init(&self, call: &Call) -> Result<Persistent<'c>, Error> {
        let (s, r) = self.args(call, call.bytes)?;
        let comm = self.comm;
        let root = call.root;
        match (call.choice, call.c) {
            (Some(a), c) => comm.collective_init_with(c, a, &s, &r, root),
            (None, Collective::Allgather) => comm.allgather_init(&s, &r),
            (None, Collective::Alltoall) => comm.alltoall_init(&s, &r),
            (None, Collective::Gather) => comm.gather_init(&s, &r, root),
            (None, Collective::Bcast) => comm.bcast_init(&s, root),
            (None, Collective::Barrier) => comm.barrier_init(),
        }
    }

    /// Let other threads run between polls (threads mode; in modeled mode
    /// a poll lets virtual time pass).
    fn between_polls(&self) {
        if self.threads {
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

/// A persistent collective of the closure and the call it was made for.
struct Held<'c> {
    call: Call,
    p: Persistent<'c>,
    active: bool,
}

/// How a closure's ranks err at its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// The erring ranks' receive buffer is one byte short.
    ShortRecv,
    /// They pass half the block size.
    Bytes,
    /// They pass the next rank as the root.
    Root,
    /// They pass another algorithm (or drive).
    Choice(Choice),
    /// They skip the call.
    Skip,
}

/// The call a closure ends with, in which some ranks err. Drawn when the
/// closure starts: a rank may see its revoke in any call before it (a
/// revoke ends whatever the others are waiting in, as ULFM's does).
#[derive(Clone, Debug)]
struct FaultPlan {
    call: Call,
    fault: Fault,
    erring: Vec<usize>,
}

impl FaultPlan {
    fn draw(d: &mut Draw, comm: &Comm, check: bool) -> FaultPlan {
        let n = comm.size();
        // All-gathers and all-to-alls read every rank's receive size; a
        // gather only the root's.
        let c = [
            Collective::Allgather,
            Collective::Alltoall,
            Collective::Gather,
        ][d.below(3)];
        let mut bytes = SIZES[d.below(SIZES.len())].max(2);
        if c == Collective::Alltoall && n > 8 {
            bytes = bytes.min(1024);
        }
        let root = if c.rooted() { d.below(n) } else { 0 };
        let accepted = choices(comm, c, bytes, root);
        let choice = (!accepted.is_empty()).then(|| accepted[d.below(accepted.len())]);
        let mut faults = vec![Fault::ShortRecv];
        if check {
            faults.extend([Fault::Bytes, Fault::Skip]);
            if c.rooted() {
                faults.push(Fault::Root);
            }
            if let Some(other) = accepted.iter().find(|a| Some(**a) != choice) {
                faults.push(Fault::Choice(*other));
            }
        }
        let fault = faults[d.below(faults.len())];
        let erring = if fault == Fault::ShortRecv && c == Collective::Gather {
            vec![root]
        } else {
            let mut set = vec![d.below(n)];
            let other = d.below(n);
            if n > 2 && !set.contains(&other) {
                set.push(other);
            }
            set
        };
        FaultPlan {
            call: Call {
                id: 0,
                c,
                choice,
                root,
                bytes,
                pair: 0,
            },
            fault,
            erring,
        }
    }

    /// Whether `e`, returned by this rank at `stage`, is an error this
    /// fault explains: a revoke naming an erring rank with the fault's
    /// cause (a mismatch between ranks one of which errs); a mismatch
    /// found at the faulty call or the barrier after it (where a skipping
    /// rank meets the others' call), between ranks one of which errs; a
    /// short buffer only on an erring rank at the faulty call.
    fn explains(&self, e: &Error, stage: Stage) -> bool {
        let erring =
            |m: &Mismatch| self.erring.contains(&m.ranks.0) || self.erring.contains(&m.ranks.1);
        let short = self.fault == Fault::ShortRecv;
        match e {
            Error::Revoked { rank, cause } => match cause {
                RevokeCause::Arguments => short && self.erring.contains(rank),
                RevokeCause::Mismatch(m) => !short && erring(m),
                _ => false,
            },
            Error::Mismatch(m) => !short && stage != Stage::Before && erring(m),
            Error::OutOfBounds { .. } => short && stage == Stage::Faulty { own: true },
            _ => false,
        }
    }
}

/// Where in a closure that ends with a fault a rank's error came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// A call before the faulty one (the revoke overtook the rank).
    Before,
    /// The faulty call (`own`: on an erring rank).
    Faulty { own: bool },
    /// The barrier after it.
    After,
}

impl fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} with {:?} on ranks {:?}",
            self.call, self.fault, self.erring
        )
    }
}

/// Why a closure stopped early on a rank.
enum Stop {
    /// Wrong data, or a wrong outcome: what the fuzzer looks for.
    Wrong(String),
    /// A call returned an error (`what` it was doing).
    Failed(String, Error),
}

impl From<String> for Stop {
    fn from(w: String) -> Stop {
        Stop::Wrong(w)
    }
}

fn failed(what: impl fmt::Display) -> impl FnOnce(Error) -> Stop {
    move |e| Stop::Failed(what.to_string(), e)
}

/// Every explicit choice of `c` the communicator accepts for `bytes` and
/// `root`.
fn choices(comm: &Comm, c: Collective, bytes: usize, root: usize) -> Vec<Choice> {
    let mut out = Vec::new();
    for a in c.algorithms() {
        for choice in [Choice::host(a), Choice::nic(a), Choice::nic_dma(a)] {
            if !out.contains(&choice) && comm.schedule(c, choice, bytes, root).is_ok() {
                out.push(choice);
            }
        }
    }
    out
}

/// Draw a call on a free pair (the same on every rank).
fn draw_call(d: &mut Draw, comm: &Comm, id: u64, pair: usize) -> Call {
    let n = comm.size();
    let c = Collective::ALL[d.below(Collective::ALL.len())];
    let mut bytes = SIZES[d.below(SIZES.len())];
    if c == Collective::Alltoall && n > 8 {
        bytes = bytes.min(1024);
    }
    let root = if c.rooted() { d.below(n) } else { 0 };
    let accepted = choices(comm, c, bytes, root);
    // A quarter tuned; the rest spread over what is accepted.
    let choice = if accepted.is_empty() || d.below(4) == 0 {
        None
    } else {
        Some(accepted[d.below(accepted.len())])
    };
    Call {
        id,
        c,
        choice,
        root,
        bytes,
        pair,
    }
}

fn run_closure(program: &Program, closure: usize, comm: &Comm) -> Result<Tally, String> {
    let seed = program.seed ^ ((closure as u64 + 1) << 48);
    // The program's draws (every rank the same), the faulty call's, and
    // this rank's own.
    let mut d = Draw(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
    let mut plan_draw = Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut mine = Draw((seed ^ (comm.rank() as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
    let plan = (comm.size() > 1 && plan_draw.below(3) == 0)
        .then(|| FaultPlan::draw(&mut plan_draw, comm, program.check));
    let pair_bytes = program.pair_bytes();
    let mut pairs = Vec::new();
    for _ in 0..PAIRS {
        let send = comm.alloc(pair_bytes).map_err(|e| e.to_string())?;
        let recv = comm.alloc(pair_bytes).map_err(|e| e.to_string())?;
        pairs.push((send, recv));
    }
    let mut cl = Closure {
        comm,
        seed,
        pairs,
        pair_bytes,
        contract: program.contract,
        threads: railcoll_emu::modeled::kernel::current_rank().is_none(),
        tally: Tally::default(),
        verified: [None; PAIRS],
    };
    let outcome = steps(&mut cl, program.steps, &mut d, &mut mine).and_then(|id| match &plan {
        Some(plan) => err_together(&mut cl, plan, id + 1),
        None => Ok(()),
    });
    match (outcome, &plan) {
        (Ok(()), _) => {}
        (Err(Stop::Wrong(w)), _) => return Err(w),
        (Err(Stop::Failed(what, e)), Some(plan)) if plan.explains(&e, Stage::Before) => {
            // The revoke reached this rank before the faulty call: every
            // later call must fail too.
            match comm.barrier() {
                Err(e) if plan.explains(&e, Stage::Before) => cl.tally.failures = 1,
                other => {
                    return Err(format!(
                        "{plan}: {what} ended by its revoke ({e}), but the barrier after it returned {other:?}"
                    ));
                }
            }
        }
        (Err(Stop::Failed(what, e)), plan) => {
            let during = plan
                .as_ref()
                .map_or(String::new(), |p| format!(" (the closure ends with {p})"));
            return Err(format!("{what}: {e}{during}"));
        }
    }
    Ok(cl.tally)
}

/// The closure's random steps; returns the last call number used.
fn steps<'c>(
    cl: &mut Closure<'c>,
    count: usize,
    d: &mut Draw,
    mine: &mut Draw,
) -> Result<u64, Stop> {
    let comm = cl.comm;
    let mut busy = [false; PAIRS];
    let mut pending: Vec<Pending<'c>> = Vec::new();
    let mut held: Vec<Held<'c>> = Vec::new();
    let mut id = 0u64;
    for step in 0..count {
        let free: Vec<usize> = (0..PAIRS).filter(|&p| !busy[p]).collect();
        let held_pairs = PAIRS - free.len();
        let r = d.below(100);
        if !pending.is_empty() && (r < 25 || held_pairs >= PAIRS - 1) {
            complete(cl, d, mine, &mut pending, &mut held, &mut busy, false)?;
        } else if r < 32 && held.len() < 2 && held_pairs < PAIRS - 1 {
            // A persistent collective on a pair of its own.
            id += 1;
            let call = draw_call(d, comm, id, free[0]);
            let p = cl.init(&call).map_err(failed(format!("{call}: init")))?;
            busy[call.pair] = true;
            held.push(Held {
                call,
                p,
                active: false,
            });
        } else if r < 50 && held.iter().any(|h| !h.active) {
            // Start one: new inputs and a new sentinel for this start.
            let idle: Vec<usize> = (0..held.len()).filter(|&i| !held[i].active).collect();
            let h = idle[d.below(idle.len())];
            id += 1;
            let call = Call { id, ..held[h].call };
            cl.prepare(&call)?;
            held[h]
                .p
                .start()
                .map_err(failed(format!("{call}: start")))?;
            held[h].active = true;
            cl.tally.in_flight += 1;
            pending.push(Pending::Started(call, h));
        } else if r < 55 && held.iter().any(|h| !h.active) {
            // Free an idle persistent collective.
            let i = held.iter().position(|h| !h.active).unwrap_or(0);
            let h = held.remove(i);
            busy[h.call.pair] = false;
            for p in &mut pending {
                if let Pending::Started(_, j) = p
                    && *j > i
                {
                    *j -= 1;
                }
            }
        } else if r < 60 {
            comm.barrier()
                .map_err(failed(format!("step {step}: barrier")))?;
        } else if r < 66 {
            // Ranks enter what follows at different times.
            let us = mine.below(30) as u64;
            comm.compute(Duration::from_micros(us));
        } else {
            id += 1;
            let call = draw_call(d, comm, id, free[0]);
            cl.prepare(&call)?;
            let nb = d.below(2) == 0;
            if nb && held_pairs < PAIRS - 1 {
                let req = cl
                    .start(&call, call.bytes, call.root, call.choice)
                    .map_err(failed(format!("{call}: start")))?;
                busy[call.pair] = true;
                cl.tally.in_flight += 1;
                pending.push(Pending::Request(call, req));
            } else {
                cl.blocking(&call, call.bytes, call.root, call.choice)
                    .map_err(failed(format!("{call}: blocking call")))?;
                cl.verify(&call)?;
            }
        }
    }
    complete(cl, d, mine, &mut pending, &mut held, &mut busy, true)?;
    for pair in 0..PAIRS {
        cl.recheck(pair)?;
    }
    cl.tally.calls = id;
    Ok(id)
}

/// Complete some (`all`: every) request in flight, each rank in an order
/// and a way of its own, and check each call's output.
fn complete<'c>(
    cl: &mut Closure<'c>,
    d: &mut Draw,
    mine: &mut Draw,
    pending: &mut Vec<Pending<'c>>,
    held: &mut [Held<'c>],
    busy: &mut [bool; PAIRS],
    all: bool,
) -> Result<(), Stop> {
    if pending.is_empty() {
        return Ok(());
    }
    // Which ones: the same on every rank (their buffers are free after).
    let mut chosen = Vec::new();
    let mut rest = Vec::new();
    for (i, p) in std::mem::take(pending).into_iter().enumerate() {
        if all || i == 0 || d.below(2) == 0 {
            chosen.push(p);
        } else {
            rest.push(p);
        }
    }
    *pending = rest;
    // This rank's order.
    for i in (1..chosen.len()).rev() {
        chosen.swap(i, mine.below(i + 1));
    }
    let (mut requests, mut calls) = (Vec::new(), Vec::new());
    let mut started = Vec::new();
    for p in chosen {
        match p {
            Pending::Request(call, r) => {
                calls.push(call);
                requests.push(r);
            }
            Pending::Started(call, h) => started.push((call, h)),
        }
    }
    let names: Vec<String> = calls.iter().map(|c| c.to_string()).collect();
    let what = format!("completing {}", names.join(", "));
    match mine.below(5) {
        0 => {
            for r in requests {
                r.wait().map_err(failed(&what))?;
            }
        }
        1 => railcoll_host::wait_all(requests).map_err(failed(&what))?,
        2 => {
            while railcoll_host::wait_any(&mut requests)
                .map_err(failed(&what))?
                .is_some()
            {}
        }
        3 => {
            while !railcoll_host::test_all(&mut requests).map_err(failed(&what))? {
                cl.between_polls();
            }
        }
        // Dropped: a request's drop completes it, unless the communicator
        // was revoked meanwhile (which only `revoked` tells).
        _ => {
            drop(requests);
            if let Some(e) = cl.comm.revoked() {
                return Err(Stop::Failed(format!("{what} (dropped)"), e));
            }
        }
    }
    for (call, h) in &started {
        let p = &mut held[*h].p;
        let what = format!("completing {call}");
        if mine.below(2) == 0 {
            p.wait().map_err(failed(&what))?;
        } else {
            while !p.test().map_err(failed(&what))? {
                cl.between_polls();
            }
        }
        held[*h].active = false;
    }
    for call in &calls {
        busy[call.pair] = false;
        cl.verify(call)?;
    }
    for (call, _) in &started {
        cl.verify(call)?;
    }
    Ok(())
}

/// The closure's last call, in which some ranks err; then a barrier. Every
/// rank must come out with an error the fault explains by the barrier, and
/// any `Ok` on the way must carry the definition's data.
fn err_together(cl: &mut Closure<'_>, plan: &FaultPlan, id: u64) -> Result<(), Stop> {
    let comm = cl.comm;
    let (n, me) = (comm.size(), comm.rank());
    let call = Call { id, ..plan.call };
    let errs = plan.erring.contains(&me);
    cl.prepare(&call)?;
    let (mut bytes, mut root, mut choice) = (call.bytes, call.root, call.choice);
    let short = errs && plan.fault == Fault::ShortRecv;
    if errs {
        match plan.fault {
            Fault::Bytes => bytes /= 2,
            Fault::Root => root = (root + 1) % n,
            Fault::Choice(other) => choice = Some(other),
            Fault::ShortRecv | Fault::Skip => {}
        }
    }
    let outcome = if errs && plan.fault == Fault::Skip {
        None
    } else if short {
        let (s, r) = cl.args(&call, bytes).map_err(failed(&call))?;
        let r = r.slice(0, r.len() - 1).map_err(failed(&call))?;
        Some(match choice {
            Some(a) => comm.collective_with(call.c, a, &s, &r, root),
            None => match call.c {
                Collective::Allgather => comm.allgather(&s, &r),
                Collective::Alltoall => comm.alltoall(&s, &r),
                _ => comm.gather(&s, &r, root),
            },
        })
    } else if me % 2 == 0 {
        Some(cl.blocking(&call, bytes, root, choice))
    } else {
        Some(cl.start(&call, bytes, root, choice).and_then(|r| r.wait()))
    };
    let mut failed_here = false;
    match outcome {
        None => {}
        Some(Ok(())) if errs => {
            return Err(Stop::Wrong(format!("{plan}: an erring rank got Ok")));
        }
        Some(Ok(())) => cl
            .verify(&call)
            .map_err(|w| format!("{plan}: Ok, but {w}"))?,
        Some(Err(e)) if plan.explains(&e, Stage::Faulty { own: errs }) => failed_here = true,
        Some(Err(e)) => {
            return Err(Stop::Wrong(format!(
                "{plan}: not an error the fault explains: {e}"
            )));
        }
    }
    match comm.barrier() {
        Err(e) if plan.explains(&e, Stage::After) => {}
        Err(e) => {
            return Err(Stop::Wrong(format!("{plan}: the barrier after it: {e}")));
        }
        Ok(()) => {
            return Err(Stop::Wrong(format!(
                "{plan}: the barrier after it returned Ok (the call {})",
                if failed_here {
                    "failed here"
                } else {
                    "did not fail here"
                }
            )));
        }
    }
    cl.tally.failures = 1;
    cl.tally.calls += 1;
    Ok(())
}
