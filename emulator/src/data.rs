//! Modeled mode's data modes: whether a run moves its payload bytes.
//!
//! Contract:
//! - [`DataMode::Full`] (the default): every byte is moved and every
//!   benchmark checks every rank's buffers.
//! - [`DataMode::None`]: node memory and shared-memory segments are made
//!   under data elision (`railcoll_mem::dma_mem`'s module documentation):
//!   every DMA and host copy gives the bytes it gives with full data, but
//!   a page that no written byte reaches is never read or written; and the
//!   benchmarks write no payload, so no payload page becomes resident. The
//!   timing is the same as with full data: the NICs, the ports, the
//!   sequencer and the host's costs see the same lengths and addresses,
//!   so the modeled latencies and the trace hash are the same
//!   (tests/tests/data_modes.rs). Correctness then rests on the schedule
//!   verifier's symbolic replay of the set rank 0 executed
//!   ([`railcoll_host::sched::verify`]): the workbench proves it after the
//!   timed calls and reports no figure without the proof
//!   ([`crate::bench::prove_executed`]). Beyond the verifier's bound on
//!   its happens-before closure the ordering rules do not run and the
//!   record says so (`proof: without ordering rules`): the contents of
//!   every output block are then proved in the replay's own order of
//!   events only, which a race could make wrong in another timing.
//! - [`DataMode::Sample`]: elision as `None`, but `N` ranks (rank 0 and
//!   `N - 1` others drawn with the cluster's seed) write their send data,
//!   and every rank's buffers are checked at the blocks those ranks'
//!   data must reach. Their bytes follow every path the schedule takes,
//!   through every intermediate rank, scratch buffer and shared segment,
//!   so a sampled block put in the wrong place on the way is caught (the
//!   proof covers the rest); memory grows with the pages the sample's
//!   data reaches (a host copy moves whole pages), not with the job.

use std::fmt;

/// Whether a modeled run moves its payload bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DataMode {
    /// Every byte moved, every buffer checked.
    #[default]
    Full,
    /// No payload moved: timing only, correctness from the verifier.
    None,
    /// The data of this many ranks moved and checked everywhere it goes.
    Sample(usize),
}

impl DataMode {
    /// Whether memory is made under data elision.
    pub fn elides(self) -> bool {
        self != DataMode::Full
    }
}

impl fmt::Display for DataMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataMode::Full => f.write_str("full"),
            DataMode::None => f.write_str("none"),
            DataMode::Sample(n) => write!(f, "sample={n}"),
        }
    }
}

impl std::str::FromStr for DataMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "full" => Ok(DataMode::Full),
            "none" => Ok(DataMode::None),
            _ => {
                let n = s
                    .strip_prefix("sample=")
                    .ok_or_else(|| {
                        format!("unknown data mode `{s}` (accepted: full, none, sample=N)")
                    })?
                    .parse::<usize>()
                    .map_err(|e| format!("data mode `{s}`: N must be a count of ranks ({e})"))?;
                if n == 0 {
                    return Err(format!(
                        "data mode `{s}`: a sample has at least one rank (none moves no data)"
                    ));
                }
                Ok(DataMode::Sample(n))
            }
        }
    }
}

/// Which ranks' data a run moves: every rank's, none, or a sample's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataSample {
    mode: DataMode,
    /// The sampled ranks, sorted (`Sample` only).
    ranks: Vec<usize>,
}

/// splitmix64: the sample's draw (seeded, the same on every machine).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl DataSample {
    /// The sample of `mode` among `size` ranks, drawn with `seed`: rank 0
    /// and the `N - 1` other ranks with the smallest seeded keys. `None`
    /// if the sample is larger than the job.
    pub fn draw(mode: DataMode, size: usize, seed: u64) -> Option<Self> {
        let ranks = match mode {
            DataMode::Sample(n) if n > size => return None,
            DataMode::Sample(n) => {
                let mut keyed: Vec<(u64, usize)> =
                    (1..size).map(|r| (mix(seed ^ mix(r as u64)), r)).collect();
                let others = n - 1;
                if others < keyed.len() {
                    keyed.select_nth_unstable(others);
                    keyed.truncate(others);
                }
                let mut ranks: Vec<usize> = keyed.into_iter().map(|(_, r)| r).collect();
                ranks.push(0);
                ranks.sort_unstable();
                ranks
            }
            _ => Vec::new(),
        };
        Some(Self { mode, ranks })
    }

    /// The mode.
    pub fn mode(&self) -> DataMode {
        self.mode
    }

    /// Whether every rank's data moves.
    pub fn is_full(&self) -> bool {
        self.mode == DataMode::Full
    }

    /// Whether `rank`'s data moves (and is checked where it lands).
    pub fn holds(&self, rank: usize) -> bool {
        match self.mode {
            DataMode::Full => true,
            DataMode::None => false,
            DataMode::Sample(_) => self.ranks.binary_search(&rank).is_ok(),
        }
    }

    /// The sampled ranks (empty unless `Sample`).
    pub fn ranks(&self) -> &[usize] {
        &self.ranks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print_and_bad_ones_are_named() {
        for s in ["full", "none", "sample=3"] {
            assert_eq!(s.parse::<DataMode>().expect(s).to_string(), s);
        }
        for bad in ["", "some", "sample=", "sample=0", "sample=-1", "sample=x"] {
            let e = bad.parse::<DataMode>().expect_err(bad);
            assert!(e.contains(bad) || bad.is_empty(), "{e}");
        }
    }

    #[test]
    fn a_sample_holds_rank_zero_and_is_seeded() {
        let a = DataSample::draw(DataMode::Sample(4), 1000, 7).expect("fits");
        assert_eq!(a.ranks().len(), 4);
        assert!(a.holds(0));
        assert_eq!(
            a,
            DataSample::draw(DataMode::Sample(4), 1000, 7).expect("fits")
        );
        assert_ne!(
            a,
            DataSample::draw(DataMode::Sample(4), 1000, 8).expect("fits")
        );
        let all = DataSample::draw(DataMode::Sample(5), 5, 1).expect("fits");
        assert_eq!(all.ranks(), [0, 1, 2, 3, 4]);
        assert!(DataSample::draw(DataMode::Sample(6), 5, 1).is_none());
        let none = DataSample::draw(DataMode::None, 5, 1).expect("fits");
        assert!(!none.holds(0) && !none.is_full());
        assert!(
            DataSample::draw(DataMode::Full, 5, 1)
                .expect("fits")
                .holds(4)
        );
    }
}
