//! The revoke notice's format ([`super::revoke`]).
//!
//! The notice record (32 bytes) lives in the cache line of the switch
//! barrier's words (`CollBuffers::notices`). Its last word is the header:
//! bit 63 set, the failing rank in bits 23:0, the other rank of a mismatch
//! in bits 47:24, the cause code in bits 55:48 (the order of
//! [`CAUSES`], then [`MISMATCH`]), a mismatch's field in bits 62:56. The
//! 64-bit word the waits test is non-zero exactly when a notice has come.
//! Words 0 and 1 carry a mismatch's two values (as the argument check
//! encodes them), word 2 its call number. A notice is written by one put
//! whose header lands after the rest (the put writes in address order);
//! two ranks that fail at once may mix their details, never the header.

use railcoll_mem::dma_mem::DmaMemory;

use super::signature;
use crate::env::{WordTest, WordWatch};
use crate::error::{CheckField, Error, Mismatch, RevokeCause};

/// Bytes of a notice record.
pub(crate) const NOTICE_LEN: usize = 32;
/// Offset of the header word in the record.
pub(crate) const HEADER_AT: usize = 24;
/// Set in every header: a notice from rank 0 is not zero.
const POSTED: u64 = 1 << 63;
/// The causes without details, by code.
const CAUSES: [RevokeCause; 7] = [
    RevokeCause::Arguments,
    RevokeCause::TooLarge,
    RevokeCause::OverBudget,
    RevokeCause::Unsupported,
    RevokeCause::Timeout,
    RevokeCause::Nic,
    RevokeCause::Other,
];
/// The code of [`RevokeCause::Mismatch`].
const MISMATCH: u64 = CAUSES.len() as u64;
const RANK_MASK: u64 = 0xff_ffff;

/// A decoded notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Notice {
    pub(crate) rank: usize,
    pub(crate) cause: RevokeCause,
}

impl Notice {
    /// The record's four words.
    pub(crate) fn encode(self) -> [u64; 4] {
        let rank = self.rank as u64 & RANK_MASK;
        match self.cause {
            RevokeCause::Mismatch(m) => {
                let field = CheckField::ALL
                    .iter()
                    .position(|f| *f == m.field)
                    .unwrap_or(0) as u64;
                [
                    signature::encode(m.values.0),
                    signature::encode(m.values.1),
                    m.call,
                    POSTED
                        | (field << 56)
                        | (MISMATCH << 48)
                        | ((m.ranks.1 as u64 & RANK_MASK) << 24)
                        | rank,
                ]
            }
            cause => {
                let code = CAUSES
                    .iter()
                    .position(|c| *c == cause)
                    .unwrap_or(CAUSES.len() - 1) as u64;
                [0, 0, 0, POSTED | (code << 48) | rank]
            }
        }
    }

    /// The notice of a record (`None` if none was posted). An unknown
    /// code reads as [`RevokeCause::Other`].
    pub(crate) fn decode(words: [u64; 4]) -> Option<Self> {
        let h = words[3];
        if h & POSTED == 0 {
            return None;
        }
        let rank = (h & RANK_MASK) as usize;
        let code = (h >> 48) & 0xff;
        let cause = if code == MISMATCH {
            let field = CheckField::ALL
                .get(((h >> 56) & 0x7f) as usize)
                .copied()
                .unwrap_or(CheckField::Collective);
            RevokeCause::Mismatch(Mismatch {
                call: words[2],
                field,
                ranks: (rank, ((h >> 24) & RANK_MASK) as usize),
                values: (
                    signature::decode(field, words[0]),
                    signature::decode(field, words[1]),
                ),
            })
        } else {
            CAUSES
                .get(code as usize)
                .copied()
                .unwrap_or(RevokeCause::Other)
        };
        Some(Notice { rank, cause })
    }

    /// The record as bytes.
    pub(crate) fn to_bytes(self) -> [u8; NOTICE_LEN] {
        signature::to_le_bytes(self.encode())
    }

    /// The notice of a record's bytes.
    pub(crate) fn from_bytes(bytes: &[u8; NOTICE_LEN]) -> Option<Self> {
        Self::decode(signature::from_le_bytes(bytes))
    }

    pub(crate) fn into_error(self) -> Error {
        Error::Revoked {
            rank: self.rank,
            cause: self.cause,
        }
    }
}

/// The watch that ends a rank's waits once a notice is in `record` (the
/// memory of the rank's notice record).
pub(crate) fn notice_watch(record: DmaMemory) -> WordWatch {
    WordWatch {
        mem: record,
        offset: HEADER_AT,
        mask: POSTED,
        test: WordTest::Differs(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::CheckValue;

    #[test]
    fn a_notice_round_trips_through_its_record() {
        let mismatches = CheckField::ALL.map(|field| {
            RevokeCause::Mismatch(Mismatch {
                call: 77,
                field,
                ranks: (5, 6),
                values: match field {
                    CheckField::Collective => {
                        (CheckValue::Name("allgather"), CheckValue::Name("barrier"))
                    }
                    CheckField::Algorithm => (
                        CheckValue::Name("ring@nic"),
                        CheckValue::Name("smp-direct@nic-dma"),
                    ),
                    _ => (CheckValue::Number(64), CheckValue::Number(128)),
                },
            })
        });
        for cause in CAUSES.into_iter().chain(mismatches) {
            for rank in [0, 1, 4095, 0xff_ffff] {
                let n = Notice { rank, cause };
                let n = match n.cause {
                    RevokeCause::Mismatch(m) => Notice {
                        cause: RevokeCause::Mismatch(Mismatch {
                            ranks: (rank, m.ranks.1),
                            ..m
                        }),
                        ..n
                    },
                    _ => n,
                };
                assert_eq!(Notice::from_bytes(&n.to_bytes()), Some(n), "{n:?}");
                assert_ne!(n.encode()[3], 0, "a posted notice is never zero");
            }
        }
        assert_eq!(Notice::decode([0; 4]), None);
        assert_eq!(
            Notice::decode([0, 0, 0, POSTED | (200 << 48) | 3]),
            Some(Notice {
                rank: 3,
                cause: RevokeCause::Other
            }),
            "an unknown code reads as Other"
        );
    }
}
