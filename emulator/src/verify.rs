//! The workbench verifies what it times: after the timed calls of a
//! benchmark (outside the timed region) every rank's receive buffer is
//! compared with the collective's definition, so no figure is reported
//! for a collective that delivered wrong data.
//!
//! Send data differs per rank and per block ([`block_data`]), so a block
//! from the wrong rank or in the wrong place is caught, not only a block
//! that never arrived. Before the timed calls every buffer the collective
//! writes is set to the complement of what it must hold, so the check
//! sees what the timed calls wrote and not what the warm-up call left.
//!
//! What must hold, rank `i` of `n`, blocks of `size` bytes:
//! - all-gather: block `j` of rank `i`'s receive buffer is rank `j`'s
//!   send block;
//! - all-to-all: block `j` of rank `i`'s receive buffer is block `i` of
//!   rank `j`'s send buffer;
//! - gather: the root's receive buffer as all-gather's (other ranks'
//!   receive buffers are not the collective's);
//! - broadcast: every rank's buffer is the root's (the root's unchanged);
//! - barrier: nothing.

use railcoll_host::Comm;
use railcoll_host::arena::SymBuffer;
use railcoll_host::sched::Collective;

use crate::data::DataSample;

/// The collective whose results a benchmark checks, and its root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Check {
    /// The collective.
    pub collective: Collective,
    /// Its root (gather, broadcast).
    pub root: usize,
}

/// A collective that returned with wrong data: where, and the first wrong
/// byte.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "wrong result: {collective} '{algorithm}' at {size} B: rank {rank}'s {buffer} block {block} (from rank {from}), byte {offset} is {found:#04x}, expected {expected:#04x}; no figure is reported for it (--no-verify skips the check)"
)]
pub struct WrongResult {
    /// The collective.
    pub collective: &'static str,
    /// The algorithm.
    pub algorithm: &'static str,
    /// Block size, bytes.
    pub size: usize,
    /// The rank whose buffer is wrong.
    pub rank: usize,
    /// "receive buffer" or "buffer" (a broadcast's).
    pub buffer: &'static str,
    /// The block (0 for a broadcast).
    pub block: usize,
    /// The rank whose data the block should hold.
    pub from: usize,
    /// First wrong byte, from the start of the block.
    pub offset: usize,
    /// What it should be.
    pub expected: u8,
    /// What it is.
    pub found: u8,
}

/// Test hook, not an interface: `RAILCOLL_PLANT_WRONG_BYTE=RANK:OFFSET`
/// flips byte OFFSET of rank RANK's checked buffer as it is read back, so
/// the tests can show that a wrong result is caught and reported (the
/// emulator delivers right data, so nothing else can make one).
#[doc(hidden)]
pub const PLANT_ENV: &str = "RAILCOLL_PLANT_WRONG_BYTE";

/// `size` bytes of rank `rank`'s send block `block`: a different sequence
/// per (rank, block) (splitmix64 of the pair and the word index).
pub fn block_data(rank: usize, block: usize, size: usize) -> Vec<u8> {
    let mut out = vec![0; size];
    fill_block_data(rank, block, &mut out);
    out
}

/// [`block_data`] written into `out` (its length is the block's size):
/// word by word, since a check of a 1024-rank all-gather makes 4 GiB of it.
fn fill_block_data(rank: usize, block: usize, out: &mut [u8]) {
    let key = ((rank as u64) << 32) ^ block as u64;
    let word = |i: u64| {
        let mut z = key
            .wrapping_mul(0xD6E8_FEB8_6659_FD93)
            .wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)).to_le_bytes()
    };
    let mut chunks = out.chunks_exact_mut(8);
    let mut i = 0;
    for chunk in &mut chunks {
        chunk.copy_from_slice(&word(i));
        i += 1;
    }
    let tail = chunks.into_remainder();
    let last = word(i);
    tail.copy_from_slice(&last[..tail.len()]);
}

impl Check {
    /// Rank `rank`'s send buffer (of `n` ranks, blocks of `size`): one
    /// block, or one per destination for all-to-all.
    pub fn send_data(&self, rank: usize, n: usize, size: usize) -> Vec<u8> {
        match self.collective {
            Collective::Alltoall => {
                let mut out = vec![0; n * size];
                for (b, block) in out.chunks_exact_mut(size.max(1)).enumerate() {
                    fill_block_data(rank, b, block);
                }
                out
            }
            Collective::Barrier => Vec::new(),
            _ => block_data(rank, 0, size),
        }
    }

    /// The origin of each block of rank `rank`'s checked buffer (of `n`
    /// blocks, one per rank, or one for a broadcast); `None` where the
    /// collective writes nothing of this rank's (a barrier, a gather's
    /// non-root).
    fn blocks(&self, rank: usize, n: usize) -> Option<usize> {
        match self.collective {
            Collective::Allgather | Collective::Alltoall => Some(n),
            Collective::Gather if rank == self.root => Some(n),
            Collective::Bcast => Some(1),
            _ => None,
        }
    }

    /// The rank whose data block `b` of rank `rank`'s checked buffer holds.
    fn origin(&self, b: usize) -> usize {
        if self.collective == Collective::Bcast {
            self.root
        } else {
            b
        }
    }

    /// Write what block `b` of rank `rank`'s checked buffer must hold
    /// into `out` (one block's size).
    fn fill_want(&self, rank: usize, b: usize, out: &mut [u8]) {
        match self.collective {
            Collective::Alltoall => fill_block_data(b, rank, out),
            _ => fill_block_data(self.origin(b), 0, out),
        }
    }

    /// The blocks of rank `rank`'s checked buffer that `data` moves: all
    /// with full data, else those whose origin is sampled (found from the
    /// sample, not by walking every block: a job may have 2^20 ranks).
    fn checked(&self, rank: usize, n: usize, data: &DataSample) -> Vec<usize> {
        let Some(blocks) = self.blocks(rank, n) else {
            return Vec::new();
        };
        if data.is_full() {
            return (0..blocks).collect();
        }
        let mut out: Vec<usize> = if self.collective == Collective::Bcast {
            (data.holds(self.root)).then_some(0).into_iter().collect()
        } else {
            data.ranks()
                .iter()
                .copied()
                .filter(|&r| r < blocks)
                .collect()
        };
        out.sort_unstable();
        out
    }

    /// [`Check::checked`] as runs of consecutive blocks (first, count), so
    /// that a full check reads and writes each buffer in one piece.
    fn runs(&self, rank: usize, n: usize, data: &DataSample) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for b in self.checked(rank, n, data) {
            match runs.last_mut() {
                Some((first, count)) if *first + *count == b => *count += 1,
                _ => runs.push((b, 1)),
            }
        }
        runs
    }

    /// What blocks `first..first + count` of rank `rank`'s checked buffer
    /// must hold.
    fn want_run(&self, rank: usize, (first, count): (usize, usize), size: usize) -> Vec<u8> {
        let mut out = vec![0; count * size];
        for (i, block) in out.chunks_exact_mut(size.max(1)).enumerate() {
            self.fill_want(rank, first + i, block);
        }
        out
    }

    /// The buffer the collective writes on this rank: a broadcast's one
    /// buffer, else the receive buffer.
    fn target<'b>(&self, send: &'b SymBuffer, recv: &'b SymBuffer) -> &'b SymBuffer {
        if self.collective == Collective::Bcast {
            send
        } else {
            recv
        }
    }

    /// Before the timed calls (after the warm-up): set the buffer the
    /// collective writes on this rank to the complement of what it must
    /// hold, so every byte the timed calls fail to write is caught. Under
    /// a data sample ([`DataSample`]) only the blocks the sampled ranks'
    /// data must reach are set (the others are not checked, and a page
    /// written is a page the run keeps).
    pub fn arm(
        &self,
        comm: &Comm,
        size: usize,
        (send, recv): (&SymBuffer, &SymBuffer),
        data: &DataSample,
    ) -> Result<(), railcoll_host::Error> {
        // A broadcast's root keeps its source.
        let source = self.collective == Collective::Bcast && comm.rank() == self.root;
        if source {
            return Ok(());
        }
        let (rank, target) = (comm.rank(), self.target(send, recv));
        for run in self.runs(rank, comm.size(), data) {
            let mut poison = self.want_run(rank, run, size);
            poison.iter_mut().for_each(|x| *x = !*x);
            comm.write_local(target, run.0 * size, &poison)?;
        }
        Ok(())
    }

    /// After the timed calls: this rank's buffer against the definition
    /// (under a data sample, the blocks the sampled ranks' data must
    /// reach); the first wrong byte, if any.
    pub fn check(
        &self,
        comm: &Comm,
        (collective, algorithm, size): (&'static str, &'static str, usize),
        (send, recv): (&SymBuffer, &SymBuffer),
        data: &DataSample,
    ) -> Result<Result<(), WrongResult>, railcoll_host::Error> {
        let rank = comm.rank();
        let target = self.target(send, recv);
        for run in self.runs(rank, comm.size(), data) {
            let want = self.want_run(rank, run, size);
            let mut got = vec![0u8; want.len()];
            comm.read_local(target, run.0 * size, &mut got)?;
            plant(rank, run.0 * size, &mut got);
            if want == got {
                continue;
            }
            let Some(at) = want.iter().zip(&got).position(|(w, g)| w != g) else {
                continue;
            };
            let (b, offset) = (run.0 + at / size.max(1), at % size.max(1));
            return Ok(Err(WrongResult {
                collective,
                algorithm,
                size,
                rank,
                buffer: if self.collective == Collective::Bcast {
                    "buffer"
                } else {
                    "receive buffer"
                },
                block: b,
                from: self.origin(b),
                offset,
                expected: want[at],
                found: got[at],
            }));
        }
        Ok(Ok(()))
    }
}
/// The test hook ([`PLANT_ENV`]): flip one byte of `rank`'s buffer, of
/// which `buf` is the part from byte `at` on.
fn plant(rank: usize, at: usize, buf: &mut [u8]) {
    let Ok(spec) = std::env::var(PLANT_ENV) else {
        return;
    };
    let parsed = spec.split_once(':').and_then(|(r, o)| {
        Some((
            r.trim().parse::<usize>().ok()?,
            o.trim().parse::<usize>().ok()?,
        ))
    });
    if let Some((r, offset)) = parsed
        && r == rank
        && let Some(b) = offset.checked_sub(at).and_then(|o| buf.get_mut(o))
    {
        *b ^= 0xff;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_blocks_differ_per_rank_and_block() {
        let a = block_data(0, 0, 16);
        assert_eq!(a, block_data(0, 0, 16), "deterministic");
        assert_ne!(a, block_data(1, 0, 16));
        assert_ne!(a, block_data(0, 1, 16));
        assert_ne!(block_data(1, 0, 16), block_data(0, 1, 16));
        assert_eq!(block_data(3, 2, 5), block_data(3, 2, 16)[..5]);
    }

    /// What a full check expects of rank `rank`, and each block's origin.
    fn expected(c: &Check, rank: usize, n: usize, size: usize) -> Option<(Vec<u8>, Vec<usize>)> {
        let full = DataSample::draw(crate::data::DataMode::Full, n, 0).expect("full");
        let runs = c.runs(rank, n, &full);
        c.blocks(rank, n)?;
        let want = runs
            .iter()
            .flat_map(|&r| c.want_run(rank, r, size))
            .collect();
        let from = c
            .checked(rank, n, &full)
            .into_iter()
            .map(|b| c.origin(b))
            .collect();
        Some((want, from))
    }

    #[test]
    fn the_expected_buffers_follow_the_definitions() {
        let (n, size) = (3, 4);
        let ag = Check {
            collective: Collective::Allgather,
            root: 0,
        };
        let (want, from) = expected(&ag, 1, n, size).expect("all-gather");
        assert_eq!(&want[8..12], &block_data(2, 0, size)[..]);
        assert_eq!(from, [0, 1, 2]);
        let a2a = Check {
            collective: Collective::Alltoall,
            ..ag
        };
        let (want, _) = expected(&a2a, 1, n, size).expect("all-to-all");
        // Block 2 of rank 1 is rank 2's block 1.
        assert_eq!(&want[8..12], &a2a.send_data(2, n, size)[4..8]);
        let gather = Check {
            collective: Collective::Gather,
            root: 2,
        };
        assert!(expected(&gather, 0, n, size).is_none());
        assert!(expected(&gather, 2, n, size).is_some());
        let bcast = Check {
            collective: Collective::Bcast,
            root: 1,
        };
        assert_eq!(
            expected(&bcast, 0, n, size).expect("bcast").0,
            block_data(1, 0, size)
        );
        assert_eq!(expected(&bcast, 1, n, size).expect("root").1, [1]);
    }

    /// Under a sample, a rank checks exactly the blocks whose origin is
    /// sampled, in runs; with no data, nothing.
    #[test]
    fn a_sample_checks_the_sampled_origins_blocks() {
        use crate::data::DataMode;
        let n = 64;
        let sample = DataSample::draw(DataMode::Sample(5), n, 3).expect("fits");
        let ag = Check {
            collective: Collective::Allgather,
            root: 0,
        };
        assert_eq!(ag.checked(9, n, &sample), sample.ranks());
        let runs = ag.runs(9, n, &sample);
        assert_eq!(runs.iter().map(|r| r.1).sum::<usize>(), 5);
        assert_eq!(
            ag.runs(9, n, &DataSample::draw(DataMode::Full, n, 3).expect("full")),
            [(0, n)]
        );
        let none = DataSample::draw(DataMode::None, n, 3).expect("none");
        assert!(ag.checked(9, n, &none).is_empty());
        let bcast = Check {
            collective: Collective::Bcast,
            root: 0,
        };
        assert_eq!(
            bcast.checked(5, n, &sample),
            [0],
            "rank 0 is always sampled"
        );
    }
}
