//! Shared-memory phases among the ranks of one node.
//!
//! One real `mmap`ed segment per node and communicator
//! ([`crate::device::Device::node_segment`]) holds:
//!
//! - *flag lines*: one 64-byte cache line per flag, so that no two ranks'
//!   flags share a line [GTNP02 §5.2], each holding a 64-bit **epoch**;
//! - a broadcast buffer and one gather slot per local rank.
//!
//! Flags are never reset. Each operation kind keeps a per-rank epoch
//! counter that every rank advances identically (the calls are collective),
//! and a flag means "reached epoch `e`" when its value is `>= e` in wrapping
//! arithmetic ([`reached`]). Back-to-back operations therefore never race
//! on a reset. Stores are `Release`, loads `Acquire`; there are no locks.
//! Waiting goes through the environment's wait hook, and whoever sets a
//! flag wakes the ranks that may be waiting on it.
//!
//! The protocol functions ([`barrier`] and its halves, [`broadcast_round`],
//! [`gather_round`]) are generic over [`Flags`], so the loom model in the
//! test suite checks the very code the segment runs.

use crate::env::{WordTest, WordWatch};
use crate::error::Error;
use railcoll_mem::dma_mem::DmaMemory;

pub use crate::env::reached;

/// Epoch flags, one per cache line.
pub trait Flags {
    /// Acquire-load flag `index`.
    fn load(&self, index: usize) -> u64;
    /// Release-store flag `index`.
    fn store(&self, index: usize, value: u64);
}

/// How a protocol step blocks and wakes others.
pub trait Sync {
    /// What a wait that does not end in `ready()` returns, and so what the
    /// protocol's steps return: the library's [`Error`], or (the
    /// executor's polling steps) an error that can also say "not yet",
    /// which the caller resumes from.
    type Error: From<Error>;
    /// Block until `ready()`.
    fn wait(&self, ready: &mut dyn FnMut() -> bool) -> Result<(), Self::Error>;
    /// Wake local rank `local` (it may be blocked on a flag just set).
    fn wake(&self, local: usize);
    /// About to raise a flag others poll (see
    /// [`crate::env::HostObserver::before_shared_write`]).
    fn before_write(&self) {}
}

/// Flag indices of the segment's layout, for `locals` ranks.
#[derive(Clone, Copy, Debug)]
pub struct FlagMap {
    locals: usize,
}

impl FlagMap {
    /// Layout for `locals` ranks on the node.
    pub fn new(locals: usize) -> Self {
        Self { locals }
    }

    /// Ranks on the node.
    pub fn locals(&self) -> usize {
        self.locals
    }

    /// Barrier: rank `r` arrived.
    pub fn barrier_arrive(&self, r: usize) -> usize {
        r
    }
    /// Barrier: the master released.
    pub fn barrier_release(&self) -> usize {
        self.locals
    }
    /// Broadcast: the root posted a round.
    pub fn bcast_posted(&self) -> usize {
        self.locals + 1
    }
    /// Broadcast: rank `r` consumed a round.
    pub fn bcast_done(&self, r: usize) -> usize {
        self.locals + 2 + r
    }
    /// Gather: rank `r` filled its slot.
    pub fn gather_ready(&self, r: usize) -> usize {
        2 * self.locals + 2 + r
    }
    /// Gather: the root emptied the slots.
    pub fn gather_taken(&self) -> usize {
        3 * self.locals + 2
    }
    /// Number of flags.
    pub fn count(&self) -> usize {
        3 * self.locals + 3
    }
}

/// One step of a node protocol: who, where, which epoch.
pub struct Round<'a, F: Flags, S: Sync> {
    /// The flags.
    pub flags: &'a F,
    /// How to wait and wake.
    pub sync: &'a S,
    /// The flag layout.
    pub map: FlagMap,
    /// This rank's local index.
    pub me: usize,
    /// The master (barrier) or root (broadcast, gather).
    pub root: usize,
    /// The epoch this round raises flags to.
    pub epoch: u64,
}

impl<F: Flags, S: Sync> std::fmt::Debug for Round<'_, F, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Round")
            .field("me", &self.me)
            .field("root", &self.root)
            .field("epoch", &self.epoch)
            .finish()
    }
}

impl<F: Flags, S: Sync> Round<'_, F, S> {
    fn others(&self) -> impl Iterator<Item = usize> + Clone + use<F, S> {
        let root = self.root;
        (0..self.map.locals()).filter(move |&r| r != root)
    }

    fn wait_all(&self, index: impl Fn(usize) -> usize, epoch: u64) -> Result<(), S::Error> {
        let others = self.others();
        self.sync.wait(&mut || {
            others
                .clone()
                .all(|r| reached(self.flags.load(index(r)), epoch))
        })
    }

    fn raise(&self, index: usize, epoch: u64) {
        self.sync.before_write();
        self.flags.store(index, epoch);
    }

    fn wake_others(&self) {
        for r in self.others() {
            self.sync.wake(r);
        }
    }
}

/// Flat-tree barrier among a node's ranks [GTNP02 §5.2]: everyone raises its
/// arrival flag; the master (`round.root`) waits for all of them, runs
/// `between` (the inter-node phase of an SMP barrier; nothing for a
/// node-only barrier), then raises the release flag that everyone else
/// waits for. The schedule executor runs the two halves as separate steps
/// with the inter-node phase's steps between them; this composition is
/// what the loom model checks.
pub fn barrier<F: Flags, S: Sync>(
    round: &Round<'_, F, S>,
    between: &mut dyn FnMut() -> Result<(), S::Error>,
) -> Result<(), S::Error> {
    barrier_arrive(round)?;
    if round.me == round.root {
        between()?;
    }
    barrier_release(round)
}

/// The barrier's first half: raise this rank's arrival flag; the master
/// then waits for every other rank's, the others wake it.
pub fn barrier_arrive<F: Flags, S: Sync>(round: &Round<'_, F, S>) -> Result<(), S::Error> {
    let (map, epoch) = (round.map, round.epoch);
    round.raise(map.barrier_arrive(round.me), epoch);
    if round.me == round.root {
        round.wait_all(|r| map.barrier_arrive(r), epoch)
    } else {
        round.sync.wake(round.root);
        Ok(())
    }
}

/// The barrier's second half: the master raises the release flag and
/// wakes the others; they wait for it.
pub fn barrier_release<F: Flags, S: Sync>(round: &Round<'_, F, S>) -> Result<(), S::Error> {
    let (map, epoch) = (round.map, round.epoch);
    if round.me == round.root {
        round.raise(map.barrier_release(), epoch);
        round.wake_others();
        Ok(())
    } else {
        round
            .sync
            .wait(&mut || reached(round.flags.load(map.barrier_release()), epoch))
    }
}

/// One round of a broadcast from `round.root`. The root waits until every
/// rank consumed the previous round, fills the buffer (`fill`), and posts;
/// the others wait for the post, copy out (`drain`), and report.
pub fn broadcast_round<F: Flags, S: Sync>(
    round: &Round<'_, F, S>,
    fill: &mut dyn FnMut() -> Result<(), S::Error>,
    drain: &mut dyn FnMut() -> Result<(), S::Error>,
) -> Result<(), S::Error> {
    let (map, epoch) = (round.map, round.epoch);
    if round.me == round.root {
        round.wait_all(|r| map.bcast_done(r), epoch.wrapping_sub(1))?;
        fill()?;
        // The root has trivially consumed its own round: without this, a
        // later round with another root would wait for our stale flag.
        round.raise(map.bcast_done(round.me), epoch);
        round.raise(map.bcast_posted(), epoch);
        round.wake_others();
        Ok(())
    } else {
        round
            .sync
            .wait(&mut || reached(round.flags.load(map.bcast_posted()), epoch))?;
        drain()?;
        round.raise(map.bcast_done(round.me), epoch);
        // The next round's root, not necessarily this one's, waits for this
        // flag: wake every other rank (waking only this root lost the
        // wake-up when the root changed; threads mode hid it behind its
        // park timeout, modeled mode deadlocked on it).
        for r in (0..map.locals()).filter(|&r| r != round.me) {
            round.sync.wake(r);
        }
        Ok(())
    }
}

/// One round of a gather to `round.root`. Each other rank waits until the
/// root emptied the previous round's slots, fills its slot (`fill`) and
/// reports; the root stores its own block directly (`fill` on the root:
/// the optimisation of [QA08 Fig. 7]), waits for every slot, copies them out
/// (`collect`) and releases the slots.
pub fn gather_round<F: Flags, S: Sync>(
    round: &Round<'_, F, S>,
    fill: &mut dyn FnMut() -> Result<(), S::Error>,
    collect: &mut dyn FnMut() -> Result<(), S::Error>,
) -> Result<(), S::Error> {
    let (map, epoch) = (round.map, round.epoch);
    if round.me == round.root {
        fill()?;
        round.wait_all(|r| map.gather_ready(r), epoch)?;
        collect()?;
        round.raise(map.gather_taken(), epoch);
        round.wake_others();
        Ok(())
    } else {
        round
            .sync
            .wait(&mut || reached(round.flags.load(map.gather_taken()), epoch.wrapping_sub(1)))?;
        fill()?;
        round.raise(map.gather_ready(round.me), epoch);
        round.sync.wake(round.root);
        Ok(())
    }
}

/// A copy of one chunk between a rank's buffer (at the byte offset given)
/// and the node segment's memory given.
pub type SegmentChunk<'f, E> = dyn FnMut(usize, &DmaMemory) -> Result<(), E> + 'f;

/// Cache line size: one flag per line.
pub const LINE: usize = 64;

/// Flags in a segment's [`DmaMemory`].
#[derive(Debug)]
pub struct SegmentFlags<'a> {
    mem: &'a DmaMemory,
}

impl Flags for SegmentFlags<'_> {
    fn load(&self, index: usize) -> u64 {
        self.mem
            .load_u64(index * LINE, std::sync::atomic::Ordering::Acquire)
            .unwrap_or(0)
    }

    fn store(&self, index: usize, value: u64) {
        let _ = self
            .mem
            .store_u64(index * LINE, value, std::sync::atomic::Ordering::Release);
    }
}

/// How far a node broadcast has gone ([`NodeShm::broadcast`]): bytes
/// done, and whether the current round's epoch is taken. A fresh cursor
/// starts a broadcast; a caller that stopped at a wait resumes with the
/// same cursor.
#[derive(Clone, Copy, Debug, Default)]
pub struct BcastCursor {
    done: usize,
    round_taken: bool,
}

/// A node's shared segment, as one rank uses it.
#[derive(Debug)]
pub struct NodeShm {
    mem: DmaMemory,
    map: FlagMap,
    me: usize,
    bcast_offset: usize,
    bcast_len: usize,
    slot_offset: usize,
    slot_len: usize,
    dir_offset: usize,
    sched_offset: usize,
    barrier_epoch: u64,
    bcast_epoch: u64,
    gather_epoch: u64,
}

/// Broadcast buffer size in the segment (a broadcast larger than this runs
/// in rounds).
pub const BCAST_BUFFER: usize = 256 << 10;
/// Gather slot size per rank (larger blocks run in rounds).
pub const GATHER_SLOT: usize = 64 << 10;
/// Schedule flags per local rank; each counts the raises of every node
/// peer apart (a line per flag and peer).
pub const SCHED_FLAG_LINES: usize = 16;

impl NodeShm {
    /// Segment size for `locals` ranks.
    pub fn segment_len(locals: usize) -> usize {
        FlagMap::new(locals).count() * LINE
            + BCAST_BUFFER
            + locals * GATHER_SLOT
            + locals * LINE
            + locals * SCHED_FLAG_LINES * locals * LINE
    }

    /// Use `mem` (the node segment) as local rank `me` of `locals`.
    pub fn new(mem: DmaMemory, locals: usize, me: usize) -> Result<Self, Error> {
        let map = FlagMap::new(locals);
        let need = Self::segment_len(locals);
        if mem.len() < need || me >= locals {
            return Err(Error::Internal(format!(
                "node segment of {} bytes for rank {me} of {locals} (needs {need})",
                mem.len()
            )));
        }
        let bcast_offset = map.count() * LINE;
        Ok(Self {
            mem,
            map,
            me,
            bcast_offset,
            bcast_len: BCAST_BUFFER,
            slot_offset: bcast_offset + BCAST_BUFFER,
            slot_len: GATHER_SLOT,
            dir_offset: bcast_offset + BCAST_BUFFER + locals * GATHER_SLOT,
            sched_offset: bcast_offset + BCAST_BUFFER + locals * GATHER_SLOT + locals * LINE,
            barrier_epoch: 0,
            bcast_epoch: 0,
            gather_epoch: 0,
        })
    }

    /// Ranks on the node.
    pub fn locals(&self) -> usize {
        self.map.locals()
    }

    /// This rank's local index.
    pub fn me(&self) -> usize {
        self.me
    }

    fn flags(&self) -> SegmentFlags<'_> {
        SegmentFlags { mem: &self.mem }
    }
    /// Take the next node barrier epoch: once per barrier, before
    /// [`NodeShm::barrier_arrive`].
    pub fn barrier_begin(&mut self) {
        self.barrier_epoch = self.barrier_epoch.wrapping_add(1);
    }

    /// Arrive at the node barrier whose epoch [`NodeShm::barrier_begin`]
    /// took: raise this rank's flag; the master waits for every arrival.
    /// Raising again is harmless, so a non-blocking caller repeats this
    /// until the master's wait is over.
    pub fn barrier_arrive<S: Sync>(&self, sync: &S, master: usize) -> Result<(), S::Error> {
        let flags = self.flags();
        barrier_arrive(&self.barrier_round(&flags, sync, master))
    }

    /// Leave the node barrier whose arrival this rank made last.
    pub fn barrier_release<S: Sync>(&self, sync: &S, master: usize) -> Result<(), S::Error> {
        let flags = self.flags();
        barrier_release(&self.barrier_round(&flags, sync, master))
    }

    fn barrier_round<'a, S: Sync>(
        &self,
        flags: &'a SegmentFlags<'a>,
        sync: &'a S,
        master: usize,
    ) -> Round<'a, SegmentFlags<'a>, S> {
        Round {
            flags,
            sync,
            map: self.map,
            me: self.me,
            root: master,
            epoch: self.barrier_epoch,
        }
    }

    /// Broadcast `len` bytes from local rank `root`: the root's data is read
    /// with `src(offset, chunk)` and everyone else's written with
    /// `dst(offset, chunk)`, each chunk given as segment memory.
    pub fn broadcast<S: Sync>(
        &mut self,
        sync: &S,
        root: usize,
        len: usize,
        cursor: &mut BcastCursor,
        src: &mut SegmentChunk<'_, S::Error>,
        dst: &mut SegmentChunk<'_, S::Error>,
    ) -> Result<(), S::Error> {
        loop {
            let offset = cursor.done;
            let chunk = len.saturating_sub(offset).min(self.bcast_len);
            let buffer = self.segment(self.bcast_offset, chunk)?;
            if !cursor.round_taken {
                self.bcast_epoch = self.bcast_epoch.wrapping_add(1);
                cursor.round_taken = true;
            }
            let flags = SegmentFlags { mem: &self.mem };
            let round = Round {
                flags: &flags,
                sync,
                map: self.map,
                me: self.me,
                root,
                epoch: self.bcast_epoch,
            };
            // A round waits only before it touches anything, so a wait
            // that gives up (a non-blocking caller) is resumed by calling
            // again with the same cursor.
            broadcast_round(&round, &mut || src(offset, &buffer), &mut || {
                dst(offset, &buffer)
            })?;
            cursor.round_taken = false;
            cursor.done = offset + chunk;
            if cursor.done >= len {
                return Ok(());
            }
        }
    }

    /// Gather `block` bytes from every local rank to local rank `root`.
    /// `own(offset, chunk)` stores the root's own chunk directly; non-roots
    /// fill their slot with `fill(offset, slot)`; the root copies each
    /// rank's slot with `collect(rank, offset, slot)`.
    #[allow(clippy::type_complexity)]
    pub fn gather<S: Sync>(
        &mut self,
        sync: &S,
        root: usize,
        block: usize,
        own: &mut dyn FnMut(usize, usize) -> Result<(), S::Error>,
        fill: &mut SegmentChunk<'_, S::Error>,
        collect: &mut dyn FnMut(usize, usize, &DmaMemory) -> Result<(), S::Error>,
    ) -> Result<(), S::Error> {
        let mut offset = 0;
        loop {
            let chunk = (block - offset).min(self.slot_len);
            self.gather_epoch = self.gather_epoch.wrapping_add(1);
            let me = self.me;
            let slots: Vec<DmaMemory> = (0..self.locals())
                .map(|r| self.segment(self.slot_offset + r * self.slot_len, chunk))
                .collect::<Result<_, Error>>()?;
            let flags = SegmentFlags { mem: &self.mem };
            let mut fill_step = || -> Result<(), S::Error> {
                if me == root {
                    own(offset, chunk)
                } else {
                    fill(offset, &slots[me])
                }
            };
            let mut collect_step = || -> Result<(), S::Error> {
                for (r, slot) in slots.iter().enumerate() {
                    if r != root {
                        collect(r, offset, slot)?;
                    }
                }
                Ok(())
            };
            gather_round(
                &Round {
                    flags: &flags,
                    sync,
                    map: self.map,
                    me,
                    root,
                    epoch: self.gather_epoch,
                },
                &mut fill_step,
                &mut collect_step,
            )?;
            offset += chunk;
            if offset >= block {
                return Ok(());
            }
        }
    }

    /// Publish this rank's arena (physical address and length) in the node
    /// directory, for node peers' shared-memory copies.
    pub fn publish_arena(&self, phys: u64, len: usize) -> Result<(), Error> {
        let at = self.dir_offset + self.me * LINE;
        let err = |e| crate::error::out_of_range("the node directory", e);
        self.mem
            .store_u64(at + 8, len as u64, std::sync::atomic::Ordering::Relaxed)
            .map_err(err)?;
        // Release: a peer that sees the address also sees the length.
        self.mem
            .store_u64(at, phys + 1, std::sync::atomic::Ordering::Release)
            .map_err(err)
    }

    /// Local rank `local`'s published arena, if it has published it.
    pub fn arena_of(&self, local: usize) -> Option<(u64, usize)> {
        let at = self.dir_offset + local.checked_mul(LINE)?;
        if local >= self.locals() {
            return None;
        }
        let phys = self
            .mem
            .load_u64(at, std::sync::atomic::Ordering::Acquire)
            .ok()?;
        let len = self
            .mem
            .load_u64(at + 8, std::sync::atomic::Ordering::Relaxed)
            .ok()?;
        (phys != 0).then(|| (phys - 1, len as usize))
    }

    /// The line of local rank `local`'s flag `flag` that peer `from`
    /// raises.
    fn sched_line(&self, local: usize, flag: usize, from: usize) -> Result<usize, Error> {
        let locals = self.locals();
        if local >= locals || from >= locals || flag >= SCHED_FLAG_LINES {
            return Err(Error::Internal(format!(
                "schedule flag {flag} of local rank {local} raised by local rank {from}: the node has {locals} ranks and {SCHED_FLAG_LINES} flags each"
            )));
        }
        Ok(self.sched_offset + ((local * SCHED_FLAG_LINES + flag) * locals + from) * LINE)
    }

    /// Raise schedule flag `flag` of local rank `local` by one, as this
    /// rank (Release).
    pub fn sched_raise(&self, local: usize, flag: usize) -> Result<(), Error> {
        let at = self.sched_line(local, flag, self.me)?;
        self.mem
            .fetch_add_u64(at, 1, std::sync::atomic::Ordering::Release)
            .map(|_| ())
            .map_err(|e| crate::error::out_of_range("the node segment", e))
    }

    /// A watch that passes once local rank `from` has raised this rank's
    /// schedule flag `flag` `target` times (wrapping).
    pub fn sched_watch(&self, flag: usize, from: usize, target: u64) -> Result<WordWatch, Error> {
        Ok(WordWatch {
            mem: self.mem.clone(),
            offset: self.sched_line(self.me, flag, from)?,
            mask: u64::MAX,
            test: WordTest::Reaches(target),
        })
    }

    fn segment(&self, offset: usize, len: usize) -> Result<DmaMemory, Error> {
        self.mem
            .slice(offset, len)
            .map_err(|e| crate::error::out_of_range("the node segment", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reached_is_wrap_safe() {
        assert!(reached(5, 5));
        assert!(reached(6, 5));
        assert!(!reached(4, 5));
        assert!(reached(0, u64::MAX), "0 follows u64::MAX");
        assert!(reached(3, u64::MAX - 2));
        assert!(!reached(u64::MAX, 0));
    }

    #[test]
    fn flag_lines_are_distinct_and_within_the_layout() {
        let m = FlagMap::new(4);
        let mut all = vec![m.barrier_release(), m.bcast_posted(), m.gather_taken()];
        for r in 0..4 {
            all.extend([m.barrier_arrive(r), m.bcast_done(r), m.gather_ready(r)]);
        }
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        assert!(all.iter().all(|&i| i < m.count()));
    }
}
