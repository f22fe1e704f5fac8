//! The barrier mechanisms the schedule executor drives ([`crate::sched`]'s
//! barrier steps): barrier numbers, the RDMA word arrays [GTNP02 §6.4],
//! the message-passing barrier's queue and its unexpected-message stash,
//! and the switch's combined barrier. No algorithm lives here: the
//! generators in `sched::generate::barrier` say which step runs when.

use super::state::{Coll, Progress, Stop};
use crate::endpoint::{PutHandle, TransferOptions};
use crate::env::{LibraryWork, WordTest, WordWatch};
use crate::error::Error;
use crate::sched::{Numbers, Words};

/// After the switch failed, it is tried again at the next barrier number
/// that is a multiple of this.
pub(crate) const SWITCH_RETRY_EVERY: u32 = 64;

/// Switch barrier number `a` comes before `b`, in wrapping arithmetic
/// (the 32-bit numbers on the wire).
fn precedes(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

impl<'a> Coll<'a> {
    /// Advance the barrier number of `which` and write it to the barrier
    /// source word (what word puts and queued messages carry).
    pub(crate) fn next_barrier_number(&self, which: Numbers) -> Result<u64, Error> {
        let seq = &self.st.seq;
        let counter = match which {
            Numbers::Words(Words::Flat) => &seq.flat_barrier,
            Numbers::Words(Words::Masters) => &seq.master_barrier,
            Numbers::Queue => &seq.sendrecv_barrier,
        };
        let number = counter.get().wrapping_add(1);
        counter.set(number);
        self.write_local(&self.st.bufs.barrier_source, 0, &number.to_le_bytes())?;
        Ok(number)
    }

    fn word_array(&self, words: Words) -> &crate::arena::SymBuffer {
        match words {
            Words::Flat => &self.st.bufs.flat_words,
            Words::Masters => &self.st.bufs.master_words,
        }
    }

    /// RDMA-write the barrier number into word `slot` of rank `to`'s
    /// `words`, waking it.
    pub(crate) fn word_put(
        &self,
        words: Words,
        to: usize,
        slot: usize,
    ) -> Result<PutHandle<'a>, Error> {
        let dst = self.word_array(words).slice(slot * 8, 8)?;
        let opts = TransferOptions {
            wake: true,
            ..TransferOptions::default()
        };
        self.ep
            .put_with(&self.st.bufs.barrier_source, self.job_rank(to)?, &dst, opts)
    }

    /// Poll this rank's word `slot` of `words` until it reaches `number`
    /// (`>=` in wrapping arithmetic).
    pub(crate) fn word_wait(
        &self,
        words: Words,
        slot: usize,
        number: u64,
        how: Progress,
    ) -> Result<(), Stop> {
        let watch = WordWatch {
            mem: self.local_memory(self.word_array(words))?,
            offset: slot * 8,
            mask: u64::MAX,
            test: WordTest::Reaches(number),
        };
        self.await_words(how, &[watch])
    }

    /// Queue the barrier number into rank `to`'s barrier queue.
    pub(crate) fn queue_number(&self, to: usize) -> Result<PutHandle<'a>, Error> {
        self.ep.wait_arc().observer().library(LibraryWork::Send);
        self.ep
            .queue_send(self.barrier_queue()?, to, &self.st.bufs.barrier_source)
    }

    /// Receive from this rank's barrier queue until `from`'s message with
    /// `number` has come; others are kept aside for the receives they
    /// belong to.
    pub(crate) fn recv_number(&self, from: usize, number: u64, how: Progress) -> Result<(), Stop> {
        let want = (from, number);
        let matched = |unexpected_bytes| {
            let work = LibraryWork::Receive { unexpected_bytes };
            self.ep.wait_arc().observer().library(work);
        };
        let mut stash = self.st.unexpected.borrow_mut();
        if let Some(at) = stash.iter().position(|m| *m == want) {
            stash.swap_remove(at);
            drop(stash);
            matched(8);
            return Ok(());
        }
        drop(stash);
        loop {
            let mut word = [0u8; 8];
            let item = match how {
                Progress::Block => self.queue_recv(self.barrier_queue()?, &mut word)?,
                Progress::Poll => self
                    .try_queue_recv(self.barrier_queue()?, &mut word)?
                    .ok_or(Stop::NotYet)?,
            };
            let got = (item.src, u64::from_le_bytes(word));
            if got == want {
                matched(0);
                return Ok(());
            }
            // Another receive's message: kept aside until it is posted.
            self.st.unexpected.borrow_mut().push(got);
        }
    }

    /// Arrive at the switch's combined barrier among node masters (context
    /// 0 of every node), on rail 0, with the next sequence number; the
    /// handle completes when every master has arrived. The number is
    /// recorded in this master's `switch_entered` word first, for
    /// [`Coll::switch_barrier_without_switch`]; `None` after a recent
    /// failure of the switch: run that instead.
    pub(crate) fn switch_barrier(&self) -> Result<Option<PutHandle<'a>>, Error> {
        let seq = self.st.seq.hw_barrier.get().wrapping_add(1);
        self.st.seq.hw_barrier.set(seq);
        self.ep.write_local(
            &self.st.bufs.switch_entered,
            0,
            &u64::from(seq).to_le_bytes(),
        )?;
        let until = self.st.seq.switch_avoid_until.get();
        if precedes(seq, until) {
            return Ok(None);
        }
        let tag = self.st.who.tag;
        self.ep
            .hw_barrier_span_post(self.group().node_span(), seq, tag)
            .map(Some)
    }

    /// The current switch barrier failed (`PeerUnreachable`: the switch or
    /// the link to it stopped answering, docs/abi.md §8.4): the barriers
    /// up to the next multiple of [`SWITCH_RETRY_EVERY`] run without it.
    /// The window ends at the same number on every master, whichever
    /// barrier each saw fail, so they all try the switch again together.
    pub(crate) fn switch_failed(&self) {
        let seq = self.st.seq.hw_barrier.get();
        let next = (seq / SWITCH_RETRY_EVERY)
            .wrapping_add(1)
            .wrapping_mul(SWITCH_RETRY_EVERY);
        self.st.seq.switch_avoid_until.set(next);
    }

    /// The current switch barrier without the switch: over once every
    /// node master has entered it, which this master reads with gets of
    /// their `switch_entered` words. A master the switch released just
    /// before it died has entered and gone on, so the barrier needs
    /// nothing more from it; and masters may mix the two ways freely.
    pub(crate) fn switch_barrier_without_switch(&self, how: Progress) -> Result<(), Stop> {
        let seq = self.st.seq.hw_barrier.get();
        let topo = self.group().shape().topology;
        let bufs = &self.st.bufs;
        loop {
            let mut all = true;
            for node in 0..topo.nodes() {
                let master = topo.rank_of(node, 0)?;
                if master == self.rank() {
                    continue;
                }
                self.ep
                    .get(
                        self.job_rank(master)?,
                        &bufs.switch_entered,
                        &bufs.switch_seen,
                    )?
                    .wait()?;
                let mut word = [0u8; 8];
                self.ep.read_local(&bufs.switch_seen, 0, &mut word)?;
                if precedes(u64::from_le_bytes(word) as u32, seq) {
                    all = false;
                    break;
                }
            }
            if all {
                return Ok(());
            }
            if how == Progress::Poll {
                return Err(Stop::NotYet);
            }
        }
    }
}
