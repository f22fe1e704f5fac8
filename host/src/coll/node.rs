//! The node segment's phases as the collective layer runs them: the flat
//! tree barrier's two halves (arrival, release) [GTNP02 §5.2], the node
//! broadcast, and the node gather ([`crate::Comm::node_gather`]). The
//! protocols themselves are [`crate::shm`]'s; this module hands them the
//! rank's buffers, wait hook and cost observer.

use super::state::{Coll, Progress, Stop};
use crate::arena::SymBuffer;
use crate::error::Error;
use crate::shm::BcastCursor;

impl Coll<'_> {
    /// Take the next node barrier epoch (once per arrival, before
    /// [`Coll::node_arrive`]).
    pub(crate) fn node_arrive_begin(&self) {
        self.st.shm.borrow_mut().barrier_begin();
    }

    /// Arrive at the node barrier (master: local rank 0); the master
    /// returns once every local rank has arrived. Repeatable until it
    /// succeeds (polling).
    pub(crate) fn node_arrive(&self, how: Progress) -> Result<(), Stop> {
        let sync = self.hook_sync(how);
        self.st.shm.borrow().barrier_arrive(&sync, 0)
    }

    /// Leave the node barrier: the master releases, the others wait for
    /// the release. Repeatable until it succeeds (polling).
    pub(crate) fn node_release(&self, how: Progress) -> Result<(), Stop> {
        let sync = self.hook_sync(how);
        self.st.shm.borrow().barrier_release(&sync, 0)
    }

    /// Shared-memory broadcast of `buf` within this node from local rank
    /// `root_local`, from where `cursor` stands (a fresh cursor starts it;
    /// polling stops at the first wait, to be resumed with the same cursor).
    pub(crate) fn node_bcast(
        &self,
        buf: &SymBuffer,
        root_local: usize,
        cursor: &mut BcastCursor,
        how: Progress,
    ) -> Result<(), Stop> {
        if self.group().node_size() == 1 {
            return Ok(());
        }
        let mine = self.local_memory(buf)?;
        let sync = self.hook_sync(how);
        let hook = self.wait_arc();
        let to_segment = |offset: usize, seg: &railcoll_mem::dma_mem::DmaMemory| {
            hook.observer().host_copy(seg.len(), false);
            seg.copy_from(0, &mine, offset, seg.len())
                .map_err(|e| crate::error::out_of_range("the buffer", e).into())
        };
        let from_segment = |offset: usize, seg: &railcoll_mem::dma_mem::DmaMemory| {
            hook.observer().host_copy(seg.len(), false);
            mine.copy_from(offset, seg, 0, seg.len())
                .map_err(|e| crate::error::out_of_range("the buffer", e).into())
        };
        let (mut fill, mut drain) = (to_segment, from_segment);
        self.st.shm.borrow_mut().broadcast(
            &sync,
            root_local,
            buf.len(),
            cursor,
            &mut fill,
            &mut drain,
        )
    }

    /// Gather `send` (the same length on every rank of this node) into
    /// `recv` on local rank `root_local`, block `i` from local rank `i`,
    /// through the node segment. The root's own block is copied straight
    /// to its place [QA08 Fig. 7]. `recv` must hold `locals * send.len()`
    /// bytes on the root (it is ignored elsewhere).
    pub(crate) fn node_gather(
        &self,
        send: &SymBuffer,
        recv: &SymBuffer,
        root_local: usize,
    ) -> Result<(), Error> {
        let locals = self.group().node_size();
        let me = self.group().local();
        if root_local >= locals {
            return Err(Error::RankOutOfRange {
                rank: root_local,
                size: locals,
            });
        }
        let block = send.len();
        if me == root_local && recv.len() < locals * block {
            return Err(Error::OutOfBounds {
                what: "the receive buffer",
                offset: 0,
                len: locals * block,
                limit: recv.len(),
            });
        }
        let src = self.local_memory(send)?;
        let dst = if me == root_local {
            Some(self.local_memory(recv)?)
        } else {
            None
        };
        let range_err = |e| Stop::from(crate::error::out_of_range("the gather buffers", e));
        let sync = self.hook_sync(Progress::Block);
        let hook = self.wait_arc();
        let mut own = |offset: usize, chunk: usize| -> Result<(), Stop> {
            match &dst {
                Some(d) => {
                    hook.observer().host_copy(chunk, false);
                    d.copy_from(root_local * block + offset, &src, offset, chunk)
                        .map_err(range_err)
                }
                None => Ok(()),
            }
        };
        let mut fill = |offset: usize, slot: &railcoll_mem::dma_mem::DmaMemory| {
            hook.observer().host_copy(slot.len(), false);
            slot.copy_from(0, &src, offset, slot.len())
                .map_err(range_err)
        };
        let mut collect = |rank: usize,
                           offset: usize,
                           slot: &railcoll_mem::dma_mem::DmaMemory|
         -> Result<(), Stop> {
            match &dst {
                Some(d) => {
                    hook.observer().host_copy(slot.len(), false);
                    d.copy_from(rank * block + offset, slot, 0, slot.len())
                        .map_err(range_err)
                }
                None => Ok(()),
            }
        };
        if block == 0 {
            return Ok(());
        }
        self.st
            .shm
            .borrow_mut()
            .gather(&sync, root_local, block, &mut own, &mut fill, &mut collect)
            .map_err(Stop::blocking)
    }
}
