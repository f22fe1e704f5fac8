//! Communicators split off another: [`Comm::split`], [`Comm::split_type`],
//! [`Comm::dup`] and [`Comm::free`] (see `crate::slots` for what a split
//! communicator keeps, and `crate::group` for its shape).

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use super::{Comm, SplitType};
use crate::coll::signature::{from_le_bytes, to_le_bytes};
use crate::coll::state::{CollState, Identity, Progress, SPLIT_RECORD};
use crate::error::Error;
use crate::group::Group;
use crate::sched::{Algorithm, Collective};
use crate::shm::NodeShm;

impl Comm {
    /// Split the communicator: the ranks that pass the same `colour` form
    /// a new communicator, numbered by `key` (ties by their rank here),
    /// which this rank gets; `None` (`MPI_UNDEFINED`) joins none and gets
    /// `None`. Collective: every rank of this communicator calls it, in
    /// the same order as its other collectives.
    ///
    /// The new communicator has its own collective state: sequence
    /// numbers, counters and scratch in a slot of the arena and the
    /// destination events ([`crate::slots`]: at most
    /// [`MAX_SLOTS`](crate::slots::MAX_SLOTS) per rank, each
    /// [`CommConfig::comm_reserve`](crate::CommConfig::comm_reserve) bytes), its own node segment, its own
    /// revoke, and its own group on the switch. Its ranks may sit on the
    /// nodes in any way: where they do not form a regular shape, only the
    /// flat algorithms run on it ([`crate::Grouping`]), the others are
    /// refused in words. It is freed by [`Comm::free`] or by dropping it,
    /// which every member does, in the same order.
    ///
    /// ```
    /// use railcoll_emu::{Cluster, ClusterConfig};
    /// use railcoll_host::Shape;
    ///
    /// let cfg = ClusterConfig { shape: Shape::new(2, 2, 1, 2, Default::default())?, ..Default::default() };
    /// let cluster = Cluster::new(cfg)?; // 2 nodes x 2 ranks
    /// for r in cluster.run(|comm| -> Result<(), railcoll_host::Error> {
    ///     // Even and odd ranks: two communicators of two ranks each.
    ///     let half = comm.split(Some(comm.rank() as u32 % 2), 0)?.expect("a colour");
    ///     assert_eq!((half.size(), half.rank()), (2, comm.rank() / 2));
    ///     let send = half.alloc(8)?;
    ///     let recv = half.alloc(16)?;
    ///     half.write_local(&send, 0, &(comm.rank() as u64).to_le_bytes())?;
    ///     half.allgather(&send, &recv)?;
    ///     let mut got = [0u8; 16];
    ///     half.read_local(&recv, 0, &mut got)?;
    ///     let parity = comm.rank() as u64 % 2;
    ///     assert_eq!(got[..8], parity.to_le_bytes());
    ///     assert_eq!(got[8..], (parity + 2).to_le_bytes());
    ///     half.free()
    /// }) {
    ///     r??;
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn split(&self, colour: Option<u32>, key: i64) -> Result<Option<Comm>, Error> {
        let span = self.ep.config().comm_reserve;
        let colour_word = colour.map_or(0, |c| (1 << 32) | u64::from(c));
        let records = self
            .exchange([
                colour_word,
                key as u64,
                u64::from(self.ep.free_slots(span)),
                self.ep.rank() as u64,
            ])?
            .into_iter()
            .map(|w| (w[0], w[1] as i64, w[2] as u32, w[3] as usize))
            .collect::<Vec<_>>();
        let number = self.coll.splits.get();
        self.coll.splits.set(number.wrapping_add(1));
        // Each member sets its new communicator up; then the parent's
        // ranks trade how it went, which also synchronises them: no member
        // puts into another's slot before that one has cleared it (a slot
        // may hold an earlier communicator's words, or user data of before
        // an arena reset), and no member frees the new communicator before
        // every other has its node segment open. A refusal (no slot free
        // on all the group's members) is the same on every member; a
        // failure on one member (its node segment, say) fails the split
        // on all of the group's members, and revokes nothing.
        let made = self.split_member(colour, number, &records, span);
        let outcomes = self.exchange([colour_word, u64::from(made.is_ok()), 0, 0])?;
        let failed = colour.is_some() && outcomes.iter().any(|w| w[0] == colour_word && w[1] == 0);
        match made {
            Ok(Some(comm)) if failed => {
                comm.abandon();
                Err(Error::Split(
                    "another member could not set it up (its own call says why)".into(),
                ))
            }
            other => other,
        }
    }

    /// All-gather one 32-byte record of four words over this
    /// communicator (a split's exchange), failing together.
    fn exchange(&self, words: [u64; 4]) -> Result<Vec<[u64; 4]>, Error> {
        let c = self.coll();
        c.together(|| {
            let bufs = &self.coll.bufs;
            let mine: [u8; SPLIT_RECORD] = to_le_bytes(words);
            self.ep.write_local(&bufs.split_send, 0, &mine)?;
            c.run_collective(
                Collective::Allgather,
                None,
                &bufs.split_send,
                &bufs.split_recv,
                0,
            )?;
            let mut all = vec![0u8; self.size() * SPLIT_RECORD];
            self.ep.read_local(&bufs.split_recv, 0, &mut all)?;
            Ok(all.chunks(SPLIT_RECORD).map(from_le_bytes).collect())
        })
    }

    /// Let go of a split communicator no collective ran on (its split
    /// failed on another member): its slot goes back, with no barrier.
    fn abandon(&self) {
        self.closed.set(true);
        if let Some(split) = &self.coll.split {
            self.ep.release_slot(split.slot.index, split.span);
        }
    }

    /// This rank's part of [`Comm::split`] once the records are in.
    fn split_member(
        &self,
        colour: Option<u32>,
        number: u64,
        records: &[(u64, i64, u32, usize)],
        span: usize,
    ) -> Result<Option<Comm>, Error> {
        let Some(colour) = colour else {
            return Ok(None);
        };
        let colour_word = (1 << 32) | u64::from(colour);
        let mut chosen: Vec<(i64, usize, usize, u32)> = records
            .iter()
            .enumerate()
            .filter(|(_, r)| r.0 == colour_word)
            .map(|(rank, r)| (r.1, rank, r.3, r.2))
            .collect();
        chosen.sort_by_key(|&(key, rank, _, _)| (key, rank));
        let members: Vec<usize> = chosen.iter().map(|m| m.2).collect();
        let free = chosen.iter().fold(u32::MAX, |m, c| m & c.3);
        let Some(slot) = (1..=crate::slots::MAX_SLOTS).find(|&s| free & (1 << s) != 0) else {
            return Err(Error::Split(format!(
                "no communicator slot is free on all {} of its ranks (each rank holds at most {} \
                 communicators besides the job's, each within its arena's top {} bytes and \
                 its destination events): free one first",
                members.len(),
                crate::slots::MAX_SLOTS,
                span
            )));
        };
        let group = Group::of(&self.ep.config().shape, members, self.ep.rank())?;
        let id = mix(mix(self.coll.who.id, number), group.members()[0] as u64);
        let who = Identity {
            tag: mix(u64::from(self.ep.config().instance), id) as u32,
            id,
            group,
        };
        let locals = who.group.node_size();
        let key = mix(u64::from(self.ep.config().job_key), id) | 1 << 63;
        let segment = self
            .device
            .node_segment(key, NodeShm::segment_len(locals))?;
        let shm = NodeShm::new(segment, locals, who.group.local())?;
        let coll = Rc::new(CollState::split_off(
            &self.ep,
            who,
            (slot, span),
            shm,
            self.coll.lineage(),
        )?);
        coll.family.join(&coll);
        Ok(Some(Comm {
            ep: Rc::clone(&self.ep),
            coll,
            device: Arc::clone(&self.device),
            closed: Cell::new(false),
        }))
    }

    /// Split by where ranks run: one communicator per node, or per socket
    /// of a node (ranks in the order of their rank here). Collective, as
    /// [`Comm::split`].
    pub fn split_type(&self, by: SplitType) -> Result<Comm, Error> {
        let shape = self.ep.config().shape;
        let colour = match by {
            SplitType::Node => shape.topology.locate(self.ep.rank())?.0,
            SplitType::Socket => shape.socket_index(self.ep.rank())?,
        };
        let colour =
            u32::try_from(colour).map_err(|_| Error::Internal("colour overflow".into()))?;
        self.split(Some(colour), self.rank() as i64)?
            .ok_or(Error::Internal(
                "a split with a colour gave no communicator".into(),
            ))
    }

    /// A communicator of the same ranks in the same order, with state of
    /// its own (a library's collectives apart from the program's).
    /// Collective, as [`Comm::split`].
    pub fn dup(&self) -> Result<Comm, Error> {
        self.split(Some(0), self.rank() as i64)?
            .ok_or(Error::Internal(
                "a split with a colour gave no communicator".into(),
            ))
    }

    /// Free this communicator: complete what is in flight, synchronise its
    /// members (collective, like `MPI_Comm_free`: each member frees its
    /// communicators in the same order) and give back its slot. Dropping
    /// it does the same, ignoring errors; the job's communicator is freed
    /// by dropping it.
    pub fn free(self) -> Result<(), Error> {
        self.close()
    }

    pub(super) fn close(&self) -> Result<(), Error> {
        if self.closed.replace(true) {
            return Ok(());
        }
        let c = self.coll();
        let done = c.in_scope(|| c.progress(None, Progress::Block));
        // A revoked communicator's members may not all come to a barrier.
        let synced = match (done, self.revoked()) {
            (Ok(_), None) => self.barrier_with(Algorithm::Rdma),
            (Err(e), _) => Err(e),
            (Ok(_), Some(e)) => Err(e),
        };
        // The slot goes back only after a clean close: after a failure
        // or a revoke, NICs may still hold chained puts triggered by its
        // events and peers may still put into it, so it stays taken (the
        // rank has one communicator fewer to split off).
        if let Some(split) = &self.coll.split {
            match synced {
                Ok(()) => self.ep.release_slot(split.slot.index, split.span),
                // And the arena is not reset under those puts either.
                Err(_) => self.coll.family.keep_failed(&self.coll),
            }
        }
        synced
    }

    /// The communicator's members: their job ranks, and the shape its
    /// schedules use.
    pub fn group(&self) -> &Group {
        &self.coll.who.group
    }

    /// The job rank of communicator rank `rank` (what one-sided calls
    /// take).
    pub fn job_rank(&self, rank: usize) -> Result<usize, Error> {
        self.coll.who.group.job_rank(rank)
    }
}

/// A 64-bit mix of two words (splitmix64's finaliser over their sum):
/// communicator identities derived the same on every member.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a
        .wrapping_add(b.wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
