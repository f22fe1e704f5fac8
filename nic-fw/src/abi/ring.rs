//! Rings addressed by free-running producer/consumer counters.
//!
//! Every queue of the ABI is a ring of `entries` fixed-size slots driven by
//! two free-running `u64` counters: the producer's `tail` (items written so
//! far) and the consumer's `head` (items consumed so far). [`Ring`] is the
//! one place their arithmetic is done; it is used for the command queues
//! (`CQ_TAIL` / `CQ_HEAD`), the NIC's chain queue, the error rings
//! (`ERR_COUNT`, no consumer the NIC knows of) and the QDMA input queues
//! (header words 0 and 1).
//!
//! Contract:
//!
//! - Counters are free-running `u64`s that start anywhere and only grow by
//!   one per item, wrapping from `u64::MAX` to 0; all arithmetic is wrapping
//!   and nothing here panics, allocates or overflows.
//! - Item `i` lives in slot `i mod entries`, at byte offset
//!   `(i mod entries) * slot_size` from the first slot.
//! - Items in flight: `tail - head` (wrapping). Every slot is usable: the
//!   ring is empty when `head == tail` and full when `tail - head ==
//!   entries` (no slot is sacrificed to tell the two apart, because the
//!   counters are not reduced modulo `entries`).
//! - `tail - head > entries` cannot come from a well-behaved producer: it is
//!   an [`Overrun`] (a producer that wrote over unconsumed items, or a
//!   malformed counter, e.g. a hostile `CQ_TAIL` or a tail behind its head).
//!   A NIC consumer treats it as an error and never derives a slot from it;
//!   for the command queue it reports `QueueOverrun` and resynchronises.
//! - A ring whose entries are a power of two (command queue, error ring,
//!   chain queue) maps indices to slots continuously across the 2^64 wrap.
//!   Other sizes (QDMA input queues, `1..=65536` slots) restart at slot 0
//!   after `u64::MAX`, so the producer must not write past the wrap while
//!   items before it are unconsumed: [`Ring::producer_slot`] reports such a
//!   ring as full until its consumer has wrapped too.
//! - A reader of an overwriting ring (the error ring: the NIC writes without
//!   waiting for the host) learns with [`Ring::unread`] which records it has
//!   not seen are still intact and how many were lost.

/// Largest ring: slots and byte offsets then fit `u32`/`u64` exactly.
pub const MAX_RING_ENTRIES: u64 = 1 << 32;

// Slots are below 2^32, so they fit `usize` on every target we build for.
const _: () = assert!(usize::BITS >= 32);

/// Why a ring size is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RingError {
    /// Zero entries.
    ZeroEntries,
    /// More than [`MAX_RING_ENTRIES`] entries (or a log2 above 32).
    TooManyEntries,
    /// The ring must be a power of two and is not.
    NotPowerOfTwo,
}

/// The producer is more than `entries` items ahead of the consumer (or
/// behind it): slots were overwritten, or a counter is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Overrun {
    /// `tail - head`, wrapping: the apparent number of items in flight.
    pub distance: u64,
}

/// A ring size: `1..=MAX_RING_ENTRIES` entries. Holds no counters; every
/// method takes them, so one `Ring` serves producer and consumer alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ring {
    /// Invariant: `1..=MAX_RING_ENTRIES`.
    entries: u64,
}

/// What a reader of an overwriting ring may still read: indices
/// `start..end` (wrapping), after `lost` records it never saw were
/// overwritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Unread {
    /// First index still intact and not yet seen.
    pub start: u64,
    /// The producer's count: one past the last record written.
    pub end: u64,
    /// Records written since the reader's last look but overwritten since.
    pub lost: u64,
    /// The producer's count is behind the reader's (the ring was reset,
    /// e.g. by a re-attach): nothing is unread; resynchronise to `end`.
    pub rewound: bool,
}

impl Unread {
    /// Number of intact unread records.
    pub const fn len(&self) -> u64 {
        self.end.wrapping_sub(self.start)
    }

    /// No intact unread record.
    pub const fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The unread indices, oldest first.
    pub fn indices(&self) -> impl Iterator<Item = u64> + use<> {
        let start = self.start;
        (0..self.len()).map(move |i| start.wrapping_add(i))
    }
}

impl Ring {
    /// A one-slot ring.
    pub const ONE: Ring = Ring { entries: 1 };

    /// A ring of `entries` slots, any size in `1..=MAX_RING_ENTRIES`.
    pub const fn new(entries: u64) -> Result<Ring, RingError> {
        if entries == 0 {
            Err(RingError::ZeroEntries)
        } else if entries > MAX_RING_ENTRIES {
            Err(RingError::TooManyEntries)
        } else {
            Ok(Ring { entries })
        }
    }

    /// A ring of `entries` slots, which must be a power of two.
    pub const fn power_of_two(entries: u64) -> Result<Ring, RingError> {
        match Ring::new(entries) {
            Ok(ring) if entries.is_power_of_two() => Ok(ring),
            Ok(_) => Err(RingError::NotPowerOfTwo),
            Err(e) => Err(e),
        }
    }

    /// A ring of `2^log2` slots, `log2 <= 32`.
    pub const fn from_log2(log2: u32) -> Result<Ring, RingError> {
        match 1u64.checked_shl(log2) {
            Some(entries) if log2 <= 32 => Ring::new(entries),
            _ => Err(RingError::TooManyEntries),
        }
    }

    /// Number of slots.
    pub const fn entries(self) -> u64 {
        self.entries
    }

    /// Slots are a power of two (indices map to slots continuously across
    /// the 2^64 wrap).
    pub const fn is_power_of_two(self) -> bool {
        self.entries.is_power_of_two()
    }

    /// Items in flight between consumer `head` and producer `tail`, or an
    /// [`Overrun`] if `tail - head` (wrapping) exceeds the ring.
    pub const fn len(self, head: u64, tail: u64) -> Result<u64, Overrun> {
        let distance = tail.wrapping_sub(head);
        if distance > self.entries {
            Err(Overrun { distance })
        } else {
            Ok(distance)
        }
    }

    /// Free slots, or an [`Overrun`].
    pub const fn space(self, head: u64, tail: u64) -> Result<u64, Overrun> {
        match self.len(head, tail) {
            // len <= entries: cannot underflow.
            Ok(len) => Ok(self.entries.wrapping_sub(len)),
            Err(e) => Err(e),
        }
    }

    /// Nothing in flight.
    pub const fn is_empty(self, head: u64, tail: u64) -> bool {
        head == tail
    }

    /// No slot is free: `tail - head == entries`, or an overrun (a producer
    /// must not write either way).
    pub const fn is_full(self, head: u64, tail: u64) -> bool {
        tail.wrapping_sub(head) >= self.entries
    }

    /// Slot of item `index`: `index mod entries`, always `< entries`.
    pub const fn slot(self, index: u64) -> usize {
        // entries >= 1 by construction; the fallback is never taken.
        let slot = match index.checked_rem(self.entries) {
            Some(s) => s,
            None => 0,
        };
        // slot < entries <= 2^32, and usize has at least 32 bits.
        slot as usize
    }

    /// Byte offset of item `index`'s slot from the first slot, for slots of
    /// `slot_size` bytes. Exact: `slot < 2^32` and `slot_size < 2^32`.
    pub const fn byte_offset(self, index: u64, slot_size: u32) -> u64 {
        (self.slot(index) as u64).wrapping_mul(slot_size as u64)
    }

    /// The slot a producer at `tail` may write next, given the consumer's
    /// `head`; `None` if the ring is full or overrun, or (for a size that is
    /// not a power of two) if item `tail` would wrap past 2^64 while items
    /// before the wrap are unconsumed, where it would share a slot with one
    /// of them.
    pub const fn producer_slot(self, head: u64, tail: u64) -> Option<usize> {
        if self.is_full(head, tail) || (!self.is_power_of_two() && tail < head) {
            None
        } else {
            Some(self.slot(tail))
        }
    }

    /// For a ring the producer overwrites without waiting (the error ring):
    /// what a reader that has seen every record before `seen` can still
    /// read, now that the producer's count is `count`. A `count` more than
    /// 2^63 ahead of `seen` (wrapping) is taken as behind it: `rewound`.
    pub const fn unread(self, seen: u64, count: u64) -> Unread {
        let distance = count.wrapping_sub(seen);
        if distance > i64::MAX as u64 {
            return Unread {
                start: count,
                end: count,
                lost: 0,
                rewound: true,
            };
        }
        let (start, lost) = if distance > self.entries {
            (
                count.wrapping_sub(self.entries),
                distance.wrapping_sub(self.entries),
            )
        } else {
            (seen, 0)
        };
        Unread {
            start,
            end: count,
            lost,
            rewound: false,
        }
    }
}

#[cfg(test)]
mod tests {
    //! Exhaustive checks against reference models that never wrap: indices
    //! are `i128` offsets from a base, reduced to `u64` only when handed to
    //! [`Ring`].
    extern crate std;
    use std::collections::VecDeque;
    use std::vec;
    use std::vec::Vec;

    use super::*;

    const POW2: [u64; 5] = [1, 2, 4, 8, 16];
    const OTHER: [u64; 4] = [3, 5, 6, 7];
    /// Window half-width, larger than twice every ring tested.
    const W: i128 = 40;
    /// Window centres: 0 (which covers the wrap at `u64::MAX`), the
    /// ahead/behind boundary of [`Ring::unread`], and a point far from both.
    const BASES: [u128; 3] = [0, 1 << 63, 1 << 40];

    fn all_sizes() -> impl Iterator<Item = u64> {
        POW2.into_iter().chain(OTHER)
    }

    /// The `u64` counter value of unwrapped position `base + off`.
    fn at(base: u128, off: i128) -> u64 {
        (base as i128 + off).rem_euclid(1i128 << 64) as u64
    }

    #[test]
    fn constructors_validate_sizes() {
        assert_eq!(Ring::new(0), Err(RingError::ZeroEntries));
        assert_eq!(Ring::new(1), Ok(Ring::ONE));
        assert_eq!(Ring::new(3).map(Ring::entries), Ok(3));
        assert_eq!(Ring::new(MAX_RING_ENTRIES).map(Ring::entries), Ok(1 << 32));
        assert_eq!(
            Ring::new(MAX_RING_ENTRIES + 1),
            Err(RingError::TooManyEntries)
        );
        assert_eq!(Ring::new(u64::MAX), Err(RingError::TooManyEntries));
        assert_eq!(Ring::power_of_two(3), Err(RingError::NotPowerOfTwo));
        assert_eq!(Ring::power_of_two(0), Err(RingError::ZeroEntries));
        assert_eq!(Ring::power_of_two(64).map(Ring::entries), Ok(64));
        for log2 in 0..=32 {
            assert_eq!(Ring::from_log2(log2).map(Ring::entries), Ok(1 << log2));
        }
        for log2 in [33, 63, 64, 65, u32::MAX] {
            assert_eq!(Ring::from_log2(log2), Err(RingError::TooManyEntries));
        }
        assert!(Ring::ONE.is_power_of_two());
        assert!(!Ring::new(6).unwrap().is_power_of_two());
    }

    /// len, space, is_empty, is_full, producer_slot for every (head, tail)
    /// pair in a window around each base, against the unwrapped model.
    #[test]
    fn occupancy_matches_the_model_for_all_pairs_near_the_wrap() {
        for n in all_sizes() {
            let ring = Ring::new(n).unwrap();
            for base in BASES {
                for h in -W..W {
                    for t in -W..W {
                        let (head, tail) = (at(base, h), at(base, t));
                        let d = t - h;
                        let ok = (0..=n as i128).contains(&d);
                        let model_len = ok.then_some(d as u64);
                        assert_eq!(ring.len(head, tail).ok(), model_len, "n={n} h={h} t={t}");
                        if let Err(o) = ring.len(head, tail) {
                            assert_eq!(o.distance, tail.wrapping_sub(head));
                        }
                        assert_eq!(
                            ring.space(head, tail).ok(),
                            model_len.map(|l| n - l),
                            "n={n} h={h} t={t}"
                        );
                        assert_eq!(ring.is_empty(head, tail), d == 0);
                        assert_eq!(ring.is_full(head, tail), !(0..n as i128).contains(&d));
                        // The next item may go in iff there is room and, for
                        // sizes that do not divide 2^64, its slot sequence
                        // from head to tail has no discontinuity.
                        let (ph, pt) = (base as i128 + h, base as i128 + t);
                        let crosses = (ph < 0 && pt >= 0) || (ph < 1 << 64 && pt >= 1 << 64);
                        let may = (0..n as i128).contains(&d) && (n.is_power_of_two() || !crosses);
                        assert_eq!(
                            ring.producer_slot(head, tail),
                            may.then(|| ring.slot(tail)),
                            "n={n} base={base} h={h} t={t}"
                        );
                    }
                }
            }
        }
    }

    /// slot and byte_offset for every index near each base; for powers of
    /// two the slot of the unwrapped position (continuous across 2^64).
    #[test]
    fn slots_are_in_range_and_continuous_for_powers_of_two() {
        for n in all_sizes() {
            let ring = Ring::new(n).unwrap();
            for base in BASES {
                for off in -W..W {
                    let i = at(base, off);
                    let slot = ring.slot(i);
                    assert!((slot as u64) < n);
                    assert_eq!(slot as u64, i % n);
                    if n.is_power_of_two() {
                        let model = (base as i128 + off).rem_euclid(n as i128);
                        assert_eq!(slot as i128, model, "n={n} base={base} off={off}");
                        assert_eq!(ring.slot(i.wrapping_add(1)), (slot + 1) % n as usize);
                    }
                    for size in [1u32, 32, 64, 4096, u32::MAX] {
                        assert_eq!(
                            ring.byte_offset(i, size) as u128,
                            slot as u128 * size as u128
                        );
                    }
                }
            }
        }
        // The largest ring and slot: still exact.
        let big = Ring::new(MAX_RING_ENTRIES).unwrap();
        assert_eq!(big.slot(u64::MAX), u32::MAX as usize);
        assert_eq!(
            big.byte_offset(u64::MAX, u32::MAX) as u128,
            u32::MAX as u128 * u32::MAX as u128
        );
    }

    /// unread for every (seen, count) pair near each base, against the
    /// unwrapped model; and against the host driver's formula
    /// (`max(seen, count.saturating_sub(entries))..count`) where no counter
    /// wraps.
    #[test]
    fn unread_matches_the_model_for_all_pairs_near_the_wrap() {
        for n in all_sizes() {
            let ring = Ring::new(n).unwrap();
            for base in BASES {
                for s in -W..W {
                    for c in -W..W {
                        let (seen, count) = (at(base, s), at(base, c));
                        let u = ring.unread(seen, count);
                        assert_eq!(u.end, count);
                        if c < s {
                            assert!(u.rewound && u.is_empty() && u.lost == 0);
                            continue;
                        }
                        let d = c - s;
                        let keep = d.min(n as i128);
                        assert!(!u.rewound);
                        assert_eq!(u.start, at(base, c - keep), "n={n} s={s} c={c}");
                        assert_eq!(u.len() as i128, keep);
                        assert_eq!(u.lost as i128, d - keep);
                        let model: Vec<u64> = (c - keep..c).map(|i| at(base, i)).collect();
                        assert_eq!(u.indices().collect::<Vec<_>>(), model);
                    }
                }
            }
            for seen in 0..3 * n {
                for count in 0..3 * n {
                    let u = ring.unread(seen, count);
                    let first = seen.max(count.saturating_sub(n));
                    assert_eq!(
                        u.indices().collect::<Vec<_>>(),
                        (first..count).collect::<Vec<_>>()
                    );
                }
            }
        }
        // The ahead/behind boundary itself.
        let r = Ring::new(4).unwrap();
        assert!(!r.unread(0, i64::MAX as u64).rewound);
        assert!(r.unread(0, 1 << 63).rewound);
        assert_eq!(r.unread(5, 5).len(), 0);
    }

    /// A producer and a consumer sharing a slot array, every sequence of
    /// `STEPS` push/pop operations, starting at every position near the
    /// wrap: the consumer always reads exactly what the model queue holds
    /// (no item overwritten while unread, none skipped), and the producer
    /// is refused only when the model is full or, for sizes that are not a
    /// power of two, at the wrap.
    #[test]
    fn a_simulated_producer_and_consumer_never_lose_items_across_the_wrap() {
        const STEPS: u32 = 12;
        for n in all_sizes() {
            let ring = Ring::new(n).unwrap();
            for start in -(2 * n as i128 + 2)..=2 {
                for ops in 0..1u32 << STEPS {
                    let (mut head, mut tail) = (at(0, start), at(0, start));
                    let mut slots = vec![u32::MAX; n as usize];
                    let mut model = VecDeque::new();
                    for step in 0..STEPS {
                        if ops >> step & 1 == 1 {
                            match ring.producer_slot(head, tail) {
                                Some(slot) => {
                                    assert!((model.len() as u64) < n);
                                    slots[slot] = step;
                                    model.push_back(step);
                                    tail = tail.wrapping_add(1);
                                }
                                None => assert!(
                                    model.len() as u64 == n
                                        || (!n.is_power_of_two() && tail < head),
                                    "refused with room: n={n} start={start} ops={ops:b}"
                                ),
                            }
                        } else if !ring.is_empty(head, tail) {
                            let want = model.pop_front().unwrap();
                            assert_eq!(
                                slots[ring.slot(head)],
                                want,
                                "n={n} start={start} ops={ops:b}"
                            );
                            head = head.wrapping_add(1);
                        } else {
                            assert!(model.is_empty());
                        }
                        assert_eq!(ring.len(head, tail), Ok(model.len() as u64));
                    }
                }
            }
        }
    }

    /// Overruns: a tail more than `entries` ahead, a tail behind the head,
    /// and the extremes, for each size; none yields a slot to write.
    #[test]
    fn overruns_are_detected_and_yield_no_slot() {
        for n in all_sizes() {
            let ring = Ring::new(n).unwrap();
            for head in [0, 1, u64::MAX, u64::MAX - n, 1 << 63] {
                for tail in [
                    head.wrapping_add(n + 1),
                    head.wrapping_add(n * 7 + 3),
                    head.wrapping_sub(1),
                    head.wrapping_add(1 << 63),
                    head.wrapping_add(u64::MAX),
                ] {
                    let distance = tail.wrapping_sub(head);
                    assert_eq!(ring.len(head, tail), Err(Overrun { distance }));
                    assert_eq!(ring.space(head, tail), Err(Overrun { distance }));
                    assert!(ring.is_full(head, tail) && !ring.is_empty(head, tail));
                    assert_eq!(ring.producer_slot(head, tail), None);
                }
                assert_eq!(ring.len(head, head.wrapping_add(n)), Ok(n));
                assert!(ring.is_full(head, head.wrapping_add(n)));
            }
        }
    }
}
