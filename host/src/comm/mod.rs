//! The communicator: the public, MPI/SHMEM-like API of one rank, in one
//! place.
//!
//! ```text
//! let buf = comm.alloc(4096)?;                  // same offset on every rank
//! comm.write_local(&buf, 0, &data)?;
//! comm.allgather(&send, &recv)?;                // the tuned algorithm
//! let ep = comm.endpoint();                     // one-sided calls: the endpoint's
//! let h = ep.put(&buf, peer, &buf)?;            // striped over rails
//! h.wait()?;                                    // source reusable, data delivered
//! ```
//!
//! A [`Comm`] is a value: the state of one communicator's collectives
//! (`coll`) and the rank's [`Endpoint`], shared by every communicator of
//! the rank. Collectives and the symmetric arena's calls are its own; the
//! one-sided calls (puts, gets, events, chained puts, queued DMAs: see
//! [`crate::endpoint`] for the completion semantics) are reached through
//! [`Comm::endpoint`], not forwarded.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

mod split;

use crate::arena::SymBuffer;
use crate::coll::request::{Persistent, Request};
use crate::coll::state::{Coll, CollState, Progress};
use crate::config::CommConfig;
use crate::device::Device;
use crate::endpoint::Endpoint;
use crate::env::{NoticeWait, WaitHook};
use crate::error::Error;
use crate::sched::tuning::TuningTable;
use crate::sched::{Choice, Collective, ScheduleSet, Shape};
use crate::shm::NodeShm;
use crate::topology::Topology;

/// The communicator of one rank. Not `Sync`: one thread drives a rank.
///
/// The job's communicator comes from [`Comm::new`]; others are split off
/// it ([`Comm::split`], [`Comm::split_type`], [`Comm::dup`]) and share its
/// endpoint. Collectives take and number ranks of the communicator;
/// one-sided calls (put, get, events, queues) take job ranks, the
/// endpoint's ([`Comm::job_rank`] maps one to the other).
pub struct Comm {
    ep: Rc<Endpoint>,
    coll: Rc<CollState>,
    device: Arc<dyn Device>,
    /// Freed already (by [`Comm::free`]): the drop does nothing more.
    closed: Cell<bool>,
}

/// What [`Comm::split_type`] groups ranks by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SplitType {
    /// The ranks of one node (`MPI_COMM_TYPE_SHARED`).
    Node,
    /// The ranks of one socket of one node (ranks spread evenly over
    /// [`Shape::sockets`](crate::Shape::sockets)).
    Socket,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("rank", &self.ep.rank())
            .field("rails", &self.ep.rails())
            .finish()
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        if self.coll.split.is_some() {
            let _ = self.close();
            return;
        }
        // Collectives still in flight (a leaked request's) complete
        // first: the NICs may still use their buffers. Closing runs on a
        // revoked communicator too (the endpoint's drop detaches its
        // contexts, waiting for the mailbox).
        let _ = self.coll().progress(None, Progress::Block);
        self.coll.notice_wait.disarm();
    }
}

impl Comm {
    /// Open the rank's NICs on `device`, set up its arena, and reserve the
    /// collectives' buffers, events and node segment. Collective: every
    /// rank of the job calls it.
    ///
    /// `tuning` picks the algorithm of every plain collective call
    /// ([`TuningTable::shared_builtin`] unless the program chose another,
    /// read once before: [`TuningTable::locate`]); every rank must be given
    /// the same table.
    pub fn new(
        cfg: CommConfig,
        tuning: Arc<TuningTable>,
        device: Arc<dyn Device>,
        wait: Arc<dyn WaitHook>,
    ) -> Result<Self, Error> {
        let (_, local) = cfg.shape.topology.locate(cfg.rank)?;
        if cfg.comm_reserve == 0 || !cfg.comm_reserve.is_multiple_of(4096) {
            return Err(Error::Config(format!(
                "comm_reserve must be a positive multiple of 4096 bytes, got {}",
                cfg.comm_reserve
            )));
        }
        let locals = cfg.shape.topology.ranks_per_node();
        let segment = device.node_segment(u64::from(cfg.job_key), NodeShm::segment_len(locals))?;
        let shm = NodeShm::new(segment, locals, local)?;
        // Every wait of the rank ends on a revoke notice (fail together).
        let notice_wait = Arc::new(NoticeWait::new(wait));
        let ep = Endpoint::open(
            cfg,
            Arc::clone(&device),
            Arc::clone(&notice_wait) as Arc<dyn WaitHook>,
        )?;
        // Reserved before any user allocation, so the same on every rank,
        // and kept across `reset_arena`.
        let coll = Rc::new(CollState::new(&ep, shm, tuning, notice_wait)?);
        coll.family.join(&coll);
        ep.keep_allocations();
        Ok(Self {
            ep: Rc::new(ep),
            coll,
            device,
            closed: Cell::new(false),
        })
    }

    fn coll(&self) -> Coll<'_> {
        Coll {
            ep: &self.ep,
            st: &self.coll,
        }
    }

    /// Run one collective call, failing together with the other ranks
    /// (see [`Error::Revoked`]).
    fn together<'s, T>(
        &'s self,
        call: impl FnOnce(Coll<'s>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let c = self.coll();
        c.together(|| call(c))
    }

    /// Is the communicator revoked (a collective failed on some rank, and
    /// every collective now returns [`Error::Revoked`])? `Some` names the
    /// rank and the cause.
    ///
    /// Ranks fail together: here rank 1 passes a receive buffer one byte
    /// short. It gets its own error; every other rank gets, promptly, the
    /// revoke naming it, and so does every later collective of every rank.
    /// The cluster's next run opens a new communicator.
    ///
    /// ```
    /// use railcoll_emu::{Cluster, ClusterConfig};
    /// use railcoll_host::{Error, RevokeCause};
    ///
    /// let cluster = Cluster::new(ClusterConfig::default())?; // 2 nodes x 1 rank x 2 rails
    /// let results = cluster.run(|comm| {
    ///     let send = comm.alloc(64)?;
    ///     let recv = comm.alloc(64 * comm.size())?;
    ///     let recv = if comm.rank() == 1 { recv.slice(0, 127)? } else { recv };
    ///     let first = comm.allgather(&send, &recv);
    ///     Ok::<_, Error>((first, comm.barrier(), comm.revoked()))
    /// });
    /// let revoked = Error::Revoked { rank: 1, cause: RevokeCause::Arguments };
    /// let (first, next, seen) = results[0].clone()??;
    /// assert_eq!((first, next, seen), (Err(revoked.clone()), Err(revoked.clone()), Some(revoked.clone())));
    /// let (first, next, _) = results[1].clone()??;
    /// assert!(matches!(first, Err(Error::OutOfBounds { .. })));
    /// assert_eq!(next, Err(revoked));
    /// // A new run, a new communicator: not revoked.
    /// for r in cluster.run(|comm| comm.barrier()) {
    ///     r??;
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn revoked(&self) -> Option<Error> {
        self.coll().notice().map(|n| n.into_error())
    }

    /// The rank's RDMA endpoint, shared by all its communicators: the
    /// one-sided calls (`put`, `get`, `notify`, `chain_put`, destination
    /// events, input queues, NIC errors, raw posts) are the endpoint's,
    /// and take job ranks ([`Comm::job_rank`] maps a communicator rank to
    /// one).
    ///
    /// ```
    /// # use railcoll_emu::{Cluster, ClusterConfig};
    /// # let cluster = Cluster::new(ClusterConfig::default())?;
    /// # let out = cluster.run(|comm| -> Result<(), railcoll_host::Error> {
    /// let ep = comm.endpoint();
    /// let buf = comm.alloc(8)?;
    /// let arrived = ep.alloc_dest_event()?;
    /// let right = comm.job_rank((comm.rank() + 1) % comm.size())?;
    /// let me = comm.job_rank(comm.rank())?;
    /// comm.write_local(&buf, 0, &(comm.rank() as u64).to_le_bytes())?;
    /// comm.barrier()?; // every rank's buf holds its value before any put lands
    /// ep.put_with(&buf, right, &buf, railcoll_host::TransferOptions {
    ///     dest_event: Some(arrived),
    ///     ..Default::default()
    /// })?
    /// .wait()?;
    /// let once = ep.expected_arrivals(comm.config().policy, me, right, 8, 1);
    /// ep.wait_arrivals(&arrived, &once)?;
    /// # Ok(())
    /// # });
    /// # for r in out { r??; }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    // --- The job --------------------------------------------------------

    /// This rank, in this communicator.
    pub fn rank(&self) -> usize {
        self.coll.who.group.rank()
    }

    /// Number of ranks of this communicator.
    pub fn size(&self) -> usize {
        self.coll.who.group.size()
    }

    /// This rank's node.
    pub fn node(&self) -> usize {
        self.ep.node()
    }

    /// The job's shape (of every rank, not only this communicator's:
    /// see [`Comm::shape`]).
    pub fn topology(&self) -> &Topology {
        self.ep.topology()
    }

    /// Rails in use.
    pub fn rails(&self) -> usize {
        self.ep.rails()
    }

    /// The configuration.
    pub fn config(&self) -> &CommConfig {
        self.ep.config()
    }

    // --- Symmetric memory -----------------------------------------------

    /// Allocate `len` bytes of the symmetric arena (cache-line aligned).
    /// Every rank must make the same sequence of calls.
    pub fn alloc(&self, len: usize) -> Result<SymBuffer, Error> {
        self.ep.alloc(len)
    }

    /// Free every user allocation of the arena (all ranks together; the
    /// communicator's own buffers stay). Refused, with nothing freed, while
    /// a non-blocking or persistent collective is in flight on this
    /// communicator or on any communicator split off it
    /// ([`Error::CollectiveInFlight`]): its NICs may still write the
    /// buffers being freed (complete it, or drop it, first).
    ///
    /// ```
    /// # use railcoll_emu::{Cluster, ClusterConfig};
    /// # let cluster = Cluster::new(ClusterConfig::default())?;
    /// # let out = cluster.run(|comm| -> Result<(), railcoll_host::Error> {
    /// let send = comm.alloc(64)?;
    /// let recv = comm.alloc(64 * comm.size())?;
    /// let request = comm.iallgather(&send, &recv)?;
    /// assert!(comm.reset_arena().is_err(), "the all-gather may still write recv");
    /// request.wait()?;
    /// comm.reset_arena()?; // send and recv are gone; the next alloc reuses them
    /// # Ok(())
    /// # });
    /// # for r in out { r??; }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset_arena(&self) -> Result<(), Error> {
        if self.coll.split.is_some() {
            return Err(Error::Config(
                "the arena is the job's: reset it through the job's communicator".into(),
            ));
        }
        // Whatever in flight can end without waiting ends first.
        let coll = self.coll();
        coll.together(|| coll.progress(None, Progress::Poll))?;
        // Every communicator of the rank allocates from this arena: one
        // split off this one may still have a collective writing it.
        if let Some(name) = self.coll.family.running() {
            return Err(Error::CollectiveInFlight(name));
        }
        self.ep.reset_arena();
        self.coll.forget_scratch();
        Ok(())
    }

    /// Copy `data` into the local arena at `buf + offset`.
    pub fn write_local(&self, buf: &SymBuffer, offset: usize, data: &[u8]) -> Result<(), Error> {
        self.ep.write_local(buf, offset, data)
    }

    /// Copy from the local arena at `buf + offset` into `out`.
    pub fn read_local(&self, buf: &SymBuffer, offset: usize, out: &mut [u8]) -> Result<(), Error> {
        self.ep.read_local(buf, offset, out)
    }

    // --- Barriers and broadcasts (schedules, see `crate::sched`) ---------

    /// Barrier with the tuned algorithm (the tuning table's `barrier`
    /// rules; `smp` where none applies).
    pub fn barrier(&self) -> Result<(), Error> {
        let none = self.coll().no_buffer()?;
        self.run(Collective::Barrier, None, &none, &none, 0)
    }

    /// Barrier with a chosen algorithm (a barrier algorithm of the
    /// catalogue: `Collective::Barrier.algorithms()`). No rank returns
    /// before every rank has entered.
    pub fn barrier_with(&self, algorithm: impl Into<Choice>) -> Result<(), Error> {
        let none = self.coll().no_buffer()?;
        self.run(Collective::Barrier, Some(algorithm.into()), &none, &none, 0)
    }

    /// Broadcast `buf` (the same symmetric buffer on every rank) from
    /// `root` with the tuned algorithm (`smp` where no rule applies).
    /// Under either buffer contract a broadcast writes a rank's `buf` only
    /// after that rank has entered the call (by construction, proved for
    /// every broadcast), so broadcasts follow each other with no barrier.
    pub fn broadcast(&self, buf: &SymBuffer, root: usize) -> Result<(), Error> {
        self.run(Collective::Bcast, None, buf, buf, root)
    }

    /// Broadcast with a chosen algorithm (`Collective::Bcast.algorithms()`).
    pub fn broadcast_with(
        &self,
        algorithm: impl Into<Choice>,
        buf: &SymBuffer,
        root: usize,
    ) -> Result<(), Error> {
        self.run(Collective::Bcast, Some(algorithm.into()), buf, buf, root)
    }

    /// Gather `send` of this node's ranks into `recv` on local rank
    /// `root_local` through the node segment (block `i` from local rank
    /// `i`).
    pub fn node_gather(
        &self,
        send: &SymBuffer,
        recv: &SymBuffer,
        root_local: usize,
    ) -> Result<(), Error> {
        let c = self.coll();
        c.in_scope(|| c.node_gather(send, recv, root_local))
    }

    // --- Schedule collectives (see `crate::sched`) ----------------------

    /// Gather `send` (one block) of every rank into `recv` (one block per
    /// rank, in rank order) on `root`, with the tuned algorithm. `recv`
    /// holds `size() * send.len()` bytes on every rank (only the root's is
    /// written). Buffers: as [`Comm::allgather`]'s.
    pub fn gather(&self, send: &SymBuffer, recv: &SymBuffer, root: usize) -> Result<(), Error> {
        self.run(Collective::Gather, None, send, recv, root)
    }

    /// Gather with a chosen algorithm.
    pub fn gather_with(
        &self,
        algorithm: impl Into<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<(), Error> {
        self.run(Collective::Gather, Some(algorithm.into()), send, recv, root)
    }

    /// All-gather `send` (one block) of every rank into `recv` of every
    /// rank (one block per rank, in rank order), with the tuned algorithm.
    ///
    /// Buffers (the same rules for every collective call): `recv` holds at
    /// least `size() * send.len()` bytes, or the call is
    /// [`Error::OutOfBounds`] here and a revoke on the other ranks. Under
    /// the default MPI contract ([`CommConfig::contract`](crate::CommConfig::contract)) the call
    /// writes this rank's buffers only after this rank has entered it, and
    /// nobody touches them once it has returned: read the result, rewrite
    /// `send` and call again on the same buffers, with no barrier. Under
    /// [`BufferContract::Shmem`](crate::BufferContract::Shmem), calls whose buffers overlap need a
    /// barrier between them. A non-blocking call's buffers are the
    /// collective's until its request completes.
    ///
    /// ```
    /// # use railcoll_emu::{Cluster, ClusterConfig};
    /// # let cluster = Cluster::new(ClusterConfig::default())?;
    /// # let results = cluster.run(|comm| -> Result<(), railcoll_host::Error> {
    /// let (n, me) = (comm.size(), comm.rank() as u64);
    /// let send = comm.alloc(8)?;
    /// let recv = comm.alloc(8 * n)?;
    /// let mut got = vec![0u8; 8 * n];
    /// for round in 0..3u64 {
    ///     comm.write_local(&send, 0, &(100 * round + me).to_le_bytes())?;
    ///     comm.allgather(&send, &recv)?; // no barrier between the rounds
    ///     comm.read_local(&recv, 0, &mut got)?;
    ///     for (r, block) in got.chunks(8).enumerate() {
    ///         assert_eq!(block, (100 * round + r as u64).to_le_bytes());
    ///     }
    /// }
    /// # Ok(())
    /// # });
    /// # for r in results { r??; }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn allgather(&self, send: &SymBuffer, recv: &SymBuffer) -> Result<(), Error> {
        self.run(Collective::Allgather, None, send, recv, 0)
    }

    /// All-gather with a chosen algorithm.
    pub fn allgather_with(
        &self,
        algorithm: impl Into<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<(), Error> {
        self.run(Collective::Allgather, Some(algorithm.into()), send, recv, 0)
    }

    /// All-to-all: block `j` of `send` (N equal blocks) goes to block
    /// `rank` of rank `j`'s `recv`, with the tuned algorithm. Buffers: as
    /// [`Comm::allgather`]'s.
    pub fn alltoall(&self, send: &SymBuffer, recv: &SymBuffer) -> Result<(), Error> {
        self.run(Collective::Alltoall, None, send, recv, 0)
    }

    /// All-to-all with a chosen algorithm.
    pub fn alltoall_with(
        &self,
        algorithm: impl Into<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<(), Error> {
        self.run(Collective::Alltoall, Some(algorithm.into()), send, recv, 0)
    }

    /// Run `collective` with `algorithm`.
    pub fn collective_with(
        &self,
        collective: Collective,
        algorithm: impl Into<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<(), Error> {
        self.run(collective, Some(algorithm.into()), send, recv, root)
    }

    /// Run `collective` with `algorithm` (the tuned one where `None`) on
    /// `send` and `recv`, failing together.
    fn run(
        &self,
        collective: Collective,
        algorithm: Option<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<(), Error> {
        self.together(|c| c.run_collective(collective, algorithm, send, recv, root))
    }

    /// Compute for `d`: the application's own work, which a non-blocking
    /// or offloaded collective can overlap (spins on real hardware and in
    /// threads mode; virtual time in modeled mode).
    pub fn compute(&self, d: std::time::Duration) {
        self.ep.wait_arc().compute(d);
    }

    // --- Non-blocking collectives [MPI4 §6.12] ---------------------------

    /// Start an all-gather (the tuned algorithm) and return at once; the
    /// request's `test` and `wait` complete it (see [`Request`]).
    pub fn iallgather(&self, send: &SymBuffer, recv: &SymBuffer) -> Result<Request<'_>, Error> {
        self.istart(Collective::Allgather, None, send, recv, 0)
    }

    /// Start an all-to-all (the tuned algorithm).
    pub fn ialltoall(&self, send: &SymBuffer, recv: &SymBuffer) -> Result<Request<'_>, Error> {
        self.istart(Collective::Alltoall, None, send, recv, 0)
    }

    /// Start a gather to `root` (the tuned algorithm).
    pub fn igather(
        &self,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<Request<'_>, Error> {
        self.istart(Collective::Gather, None, send, recv, root)
    }

    /// Start a broadcast of `buf` from `root` (the tuned algorithm).
    pub fn ibcast(&self, buf: &SymBuffer, root: usize) -> Result<Request<'_>, Error> {
        self.istart(Collective::Bcast, None, buf, buf, root)
    }

    /// Start a barrier (the tuned algorithm): complete once every rank has
    /// entered.
    pub fn ibarrier(&self) -> Result<Request<'_>, Error> {
        let none = self.coll().no_buffer()?;
        self.istart(Collective::Barrier, None, &none, &none, 0)
    }

    /// Start `collective` with a chosen algorithm (`buf`-only collectives
    /// take it as both `send` and `recv`).
    pub fn icollective_with(
        &self,
        collective: Collective,
        algorithm: impl Into<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<Request<'_>, Error> {
        self.istart(collective, Some(algorithm.into()), send, recv, root)
    }

    fn istart(
        &self,
        collective: Collective,
        algorithm: Option<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<Request<'_>, Error> {
        self.together(|c| c.start_collective(collective, algorithm, send, recv, root))
    }

    // --- Persistent collectives [MPI4 §6.13] -----------------------------

    /// An all-gather on these buffers to start many times (the tuned
    /// algorithm; see [`Persistent`]).
    pub fn allgather_init(
        &self,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<Persistent<'_>, Error> {
        self.init(Collective::Allgather, None, send, recv, 0)
    }

    /// A persistent all-to-all.
    pub fn alltoall_init(
        &self,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<Persistent<'_>, Error> {
        self.init(Collective::Alltoall, None, send, recv, 0)
    }

    /// A persistent gather to `root`.
    pub fn gather_init(
        &self,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<Persistent<'_>, Error> {
        self.init(Collective::Gather, None, send, recv, root)
    }

    /// A persistent broadcast of `buf` from `root`.
    pub fn bcast_init(&self, buf: &SymBuffer, root: usize) -> Result<Persistent<'_>, Error> {
        self.init(Collective::Bcast, None, buf, buf, root)
    }

    /// A persistent barrier.
    pub fn barrier_init(&self) -> Result<Persistent<'_>, Error> {
        let none = self.coll().no_buffer()?;
        self.init(Collective::Barrier, None, &none, &none, 0)
    }

    /// A persistent `collective` with a chosen algorithm.
    pub fn collective_init_with(
        &self,
        collective: Collective,
        algorithm: impl Into<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<Persistent<'_>, Error> {
        self.init(collective, Some(algorithm.into()), send, recv, root)
    }

    fn init(
        &self,
        collective: Collective,
        algorithm: Option<Choice>,
        send: &SymBuffer,
        recv: &SymBuffer,
        root: usize,
    ) -> Result<Persistent<'_>, Error> {
        self.together(|c| c.init_collective(collective, algorithm, send, recv, root))
    }

    /// The schedules of `collective` with `algorithm` for this
    /// communicator, `block_bytes` per block (cached).
    pub fn schedule(
        &self,
        collective: Collective,
        algorithm: impl Into<Choice>,
        block_bytes: usize,
        root: usize,
    ) -> Result<Arc<ScheduleSet>, Error> {
        self.coll()
            .schedule(collective, algorithm.into(), block_bytes, root)
    }

    /// Execute this rank's part of `set` on `send` and `recv` (every rank
    /// of the communicator must run the same set).
    pub fn run_schedule(
        &self,
        set: &Arc<ScheduleSet>,
        send: &SymBuffer,
        recv: &SymBuffer,
    ) -> Result<(), Error> {
        let c = self.coll();
        c.in_scope(|| c.run_schedule(set, send, recv))
    }

    /// The shape this communicator runs on (what schedules are generated
    /// for).
    pub fn shape(&self) -> Shape {
        self.coll.who.group.shape()
    }

    /// The tuning table this communicator was created with (the same on
    /// every rank of the job).
    pub fn tuning(&self) -> Arc<TuningTable> {
        self.coll().tuning()
    }

    /// The algorithm the tuning table picks for `collective` with blocks of
    /// `block_bytes` on this communicator: the first candidate whose set
    /// generates and fits here, probed with root 0 and without the
    /// persistent guard (a rooted or persistent call selects with its own
    /// root and guard, and on an unusual root may pick a later candidate).
    /// `Err` is the fallback's refusal when no candidate fits.
    pub fn tuned_algorithm(
        &self,
        collective: Collective,
        block_bytes: usize,
    ) -> Result<Choice, Error> {
        self.coll().tuned_algorithm(collective, block_bytes)
    }
}
