//! The revoke notice's format ([`super::revoke`]).
//!
//! The notice record lives in the cache line of the switch barrier's
//! words (`CollBuffers::notices`): the last word of its 24 bytes is the
//! notice header (bit 63 set, the failing rank in bits 23:0, the cause
//! code in bits 55:48), so the 64-bit word the waits test is non-zero
//! exactly when a notice has come. The first two words are kept for
//! details a later cause may carry (zero now).

use railcoll_mem::dma_mem::DmaMemory;

use crate::env::{WordTest, WordWatch};
use crate::error::{Error, RevokeCause};

/// Bytes of a notice record.
pub(crate) const NOTICE_LEN: usize = 24;
/// Offset of the header word in the record.
pub(crate) const HEADER_AT: usize = 16;
/// Set in every header: a notice from rank 0 is not zero.
const POSTED: u64 = 1 << 63;

/// A decoded notice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Notice {
    pub(crate) rank: usize,
    pub(crate) cause: RevokeCause,
}

impl Notice {
    pub(crate) fn header(self) -> u64 {
        POSTED | (u64::from(self.cause.code()) << 48) | (self.rank as u64 & 0xff_ffff)
    }

    /// The notice of a header word (`None` if none was posted).
    pub(crate) fn of_header(h: u64) -> Option<Self> {
        (h & POSTED != 0).then(|| Notice {
            rank: (h & 0xff_ffff) as usize,
            cause: RevokeCause::from_code((h >> 48) as u8),
        })
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

    #[test]
    fn a_notice_round_trips_through_its_header() {
        for cause in RevokeCause::ALL {
            for rank in [0, 1, 4095, 0xff_ffff] {
                let n = Notice { rank, cause };
                assert_eq!(Notice::of_header(n.header()), Some(n));
                assert_ne!(n.header(), 0, "a posted notice is never zero");
            }
        }
        assert_eq!(Notice::of_header(0), None);
        assert_eq!(
            Notice::of_header(POSTED | (200 << 48) | 3),
            Some(Notice {
                rank: 3,
                cause: RevokeCause::Other
            }),
            "an unknown code reads as Other"
        );
    }
}
