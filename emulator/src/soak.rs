//! The soak (`railcoll soak`): many barriers and all-gathers in threads
//! mode on one cluster, with the process's resident memory, threads and
//! open file descriptors sampled along the way. A leak shows as growth
//! from one sample to the next; the all-gathers' data is checked at every
//! sample.
//!
//! Contract: the work is split into `samples` rounds; each round runs
//! its share of the barriers, then of the all-gathers, on every rank (one
//! `Cluster::run`), and is followed by a sample. The first sample is
//! taken after a warm-up round, so that one-time allocations (schedule
//! caches, rank threads' first stacks) are not counted as growth.

use std::time::Instant;

use railcoll_host::Error;

use crate::cluster::{Cluster, EmuError};

/// What the soak runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SoakSpec {
    /// Barriers in all.
    pub barriers: u64,
    /// All-gathers in all.
    pub allgathers: u64,
    /// All-gather block bytes.
    pub block: usize,
    /// Samples (rounds), at least 1.
    pub samples: u64,
}

/// The process's use of the machine, from `/proc/self`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessUse {
    /// Resident set, KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Threads (`Threads`).
    pub threads: u64,
    /// Open file descriptors (`/proc/self/fd`).
    pub fds: u64,
}

impl ProcessUse {
    /// Read it now.
    pub fn now() -> std::io::Result<Self> {
        let status = std::fs::read_to_string("/proc/self/status")?;
        let field = |name: &str| -> std::io::Result<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| std::io::Error::other(format!("/proc/self/status has no {name}")))
        };
        let fds = std::fs::read_dir("/proc/self/fd")?.count() as u64;
        Ok(Self {
            rss_kib: field("VmRSS:")?,
            threads: field("Threads:")?,
            // The directory listing itself holds one descriptor open.
            fds: fds.saturating_sub(1),
        })
    }
}

/// One sample of the soak.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoakSample {
    /// Barriers done so far.
    pub barriers: u64,
    /// All-gathers done so far.
    pub allgathers: u64,
    /// Wall time since the first sample, s.
    pub seconds: f64,
    /// The process then.
    pub usage: ProcessUse,
}

/// The share of `total` that round `round` of `rounds` runs.
fn share(total: u64, round: u64, rounds: u64) -> u64 {
    total / rounds + u64::from(round < total % rounds)
}

/// Rank `origin`'s all-gather block in round `round`.
fn block_byte(origin: usize, round: u64, i: usize) -> u8 {
    (origin as u64)
        .wrapping_mul(131)
        .wrapping_add(round.wrapping_mul(7))
        .wrapping_add(i as u64) as u8
}

/// Run `spec` on `cluster` (threads mode), sampling after a warm-up round
/// and after every round; `progress(done)` is told each round's end.
pub fn soak(
    cluster: &Cluster,
    spec: &SoakSpec,
    progress: &dyn Fn(u64),
) -> Result<Vec<SoakSample>, EmuError> {
    if spec.samples == 0 {
        return Err(EmuError::Config("a soak takes at least 1 sample".into()));
    }
    let round = |barriers: u64, allgathers: u64, tag: u64| -> Result<(), EmuError> {
        let results = cluster.run(|comm| -> Result<(), Error> {
            let n = comm.size();
            let send = comm.alloc(spec.block)?;
            let recv = comm.alloc(n * spec.block)?;
            let mine: Vec<u8> = (0..spec.block)
                .map(|i| block_byte(comm.rank(), tag, i))
                .collect();
            comm.write_local(&send, 0, &mine)?;
            for _ in 0..barriers {
                comm.barrier()?;
            }
            for _ in 0..allgathers {
                comm.allgather(&send, &recv)?;
            }
            if allgathers > 0 {
                let mut got = vec![0u8; n * spec.block];
                comm.read_local(&recv, 0, &mut got)?;
                for (origin, block) in got.chunks(spec.block.max(1)).enumerate() {
                    if block
                        .iter()
                        .enumerate()
                        .any(|(i, &b)| b != block_byte(origin, tag, i))
                    {
                        return Err(Error::Internal(format!(
                            "soak round {tag}: rank {origin}'s block arrived wrong"
                        )));
                    }
                }
            }
            comm.barrier()?;
            comm.reset_arena()?;
            Ok(())
        });
        cluster.check_stalled()?;
        for r in results {
            r?.map_err(EmuError::Host)?;
        }
        Ok(())
    };
    // Warm-up: every path once, outside the samples.
    round(10, 10, u64::MAX)?;
    let start = Instant::now();
    let mut samples = vec![SoakSample {
        barriers: 0,
        allgathers: 0,
        seconds: 0.0,
        usage: ProcessUse::now()?,
    }];
    let (mut barriers, mut allgathers) = (0, 0);
    for r in 0..spec.samples {
        let (b, a) = (
            share(spec.barriers, r, spec.samples),
            share(spec.allgathers, r, spec.samples),
        );
        round(b, a, r)?;
        barriers += b;
        allgathers += a;
        samples.push(SoakSample {
            barriers,
            allgathers,
            seconds: start.elapsed().as_secs_f64(),
            usage: ProcessUse::now()?,
        });
        progress(barriers + allgathers);
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_total() {
        for (total, rounds) in [(0, 1), (10, 3), (1_000_000, 7), (5, 10)] {
            let sum: u64 = (0..rounds).map(|r| share(total, r, rounds)).sum();
            assert_eq!(sum, total, "{total} over {rounds}");
        }
    }

    #[test]
    fn the_process_is_read_from_proc() {
        let u = ProcessUse::now().expect("/proc/self");
        assert!(u.rss_kib > 0 && u.threads >= 1 && u.fds >= 3, "{u:?}");
    }
}
