//! How a transfer is spread over rails.
//!
//! Striping ([QA08 §4.1, Fig. 1]): above a threshold a put is split evenly
//! across all rails, each rail's part with its own destination event; at or
//! below it the whole put goes on one rail. Multiplexing instead sends whole
//! messages round-robin over rails. The plan is a pure function of its
//! inputs (plus the round-robin counter), so a target can compute which
//! rails will set its event and how often.

/// Most rails a rank drives (the NIC ABI's contexts carry up to four).
pub const MAX_RAILS: usize = 4;

/// Default striping threshold: QsNetII striped at 1 KiB [QA08 §4.1].
pub const DEFAULT_STRIPE_THRESHOLD: usize = 1024;

/// Rail choice for a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RailPolicy {
    /// Split evenly over all rails when longer than `threshold` bytes;
    /// otherwise one rail, `(src + dst) % rails` (deterministic, and spread
    /// over rails across pairs).
    Stripe {
        /// Bytes above which a transfer is striped.
        threshold: usize,
    },
    /// Always this rail.
    Rail(usize),
    /// Whole transfers rotate over rails, one rail per call.
    RoundRobin,
}

impl Default for RailPolicy {
    fn default() -> Self {
        RailPolicy::Stripe {
            threshold: DEFAULT_STRIPE_THRESHOLD,
        }
    }
}

/// One rail's share of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    /// Rail.
    pub rail: usize,
    /// Offset within the transfer.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// Split `len` bytes. `rr` is the caller's round-robin counter (used only by
/// `RoundRobin`). `rails >= 1`; a `Rail(r)` policy needs `r < rails`
/// (checked by the caller).
pub fn plan(
    policy: RailPolicy,
    rails: usize,
    src: usize,
    dst: usize,
    len: usize,
    rr: usize,
) -> Vec<Part> {
    let rails = rails.max(1);
    match policy {
        RailPolicy::Stripe { threshold } if len > threshold && rails > 1 => {
            let base = len / rails;
            let extra = len % rails;
            let mut offset = 0;
            (0..rails)
                .map(|rail| {
                    let part_len = base + usize::from(rail < extra);
                    let p = Part {
                        rail,
                        offset,
                        len: part_len,
                    };
                    offset += part_len;
                    p
                })
                .filter(|p| p.len > 0)
                .collect()
        }
        RailPolicy::Stripe { .. } => vec![Part {
            rail: (src + dst) % rails,
            offset: 0,
            len,
        }],
        RailPolicy::Rail(r) => vec![Part {
            rail: r,
            offset: 0,
            len,
        }],
        RailPolicy::RoundRobin => vec![Part {
            rail: rr % rails,
            offset: 0,
            len,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parts_tile_the_transfer_exactly(len in 0usize..100_000, rails in 1usize..=4, threshold in 0usize..5000, src in 0usize..64, dst in 0usize..64) {
            let parts = plan(RailPolicy::Stripe { threshold }, rails, src, dst, len, 0);
            let mut next = 0;
            for p in &parts {
                prop_assert_eq!(p.offset, next);
                prop_assert!(p.rail < rails);
                next += p.len;
            }
            prop_assert_eq!(next, len);
            if len > threshold && rails > 1 {
                prop_assert_eq!(parts.len(), rails.min(len));
                let max = parts.iter().map(|p| p.len).max().unwrap_or(0);
                let min = parts.iter().map(|p| p.len).min().unwrap_or(0);
                prop_assert!(max - min <= 1, "even split");
            } else {
                prop_assert_eq!(parts.len(), 1);
            }
        }
    }

    #[test]
    fn forced_and_round_robin() {
        assert_eq!(
            plan(RailPolicy::Rail(1), 2, 0, 1, 5000, 0),
            vec![Part {
                rail: 1,
                offset: 0,
                len: 5000
            }]
        );
        let rails: Vec<usize> = (0..4)
            .map(|i| plan(RailPolicy::RoundRobin, 3, 0, 1, 10, i)[0].rail)
            .collect();
        assert_eq!(rails, vec![0, 1, 2, 0]);
    }
}
