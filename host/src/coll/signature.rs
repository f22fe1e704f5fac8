//! The codes of a collective call's signature, as the argument check
//! ([`super::check`]) trades them and a revoke notice ([`super::notice`])
//! carries them: each field of [`CheckField`] as a 64-bit code, and back
//! to a value a mismatch can name.

use crate::error::{CheckField, CheckValue};
use crate::sched::catalogue::CATALOGUE;
use crate::sched::{Choice, Collective, Drive, Params};

const DRIVES: [Drive; 3] = [Drive::Host, Drive::Nic, Drive::NicDma];

/// The code of `field`'s value in `p` and `instance`.
pub(crate) fn code_of(field: CheckField, p: &Params, instance: u32) -> u64 {
    match field {
        CheckField::Collective => Collective::ALL
            .iter()
            .position(|c| *c == p.collective)
            .unwrap_or(0) as u64,
        CheckField::Algorithm => {
            let entry = CATALOGUE
                .iter()
                .position(|e| e.collective == p.collective && e.algorithm == p.algorithm)
                .unwrap_or(usize::MAX >> 8) as u64;
            let drive = DRIVES.iter().position(|d| *d == p.drive).unwrap_or(0) as u64;
            entry << 2 | drive
        }
        CheckField::BlockBytes => p.block_bytes as u64,
        CheckField::Root => match p.collective {
            Collective::Gather | Collective::Bcast => p.root as u64,
            Collective::Allgather | Collective::Alltoall | Collective::Barrier => 0,
        },
        CheckField::Communicator => u64::from(instance),
    }
}

/// The value of `field` whose code is `code` (how a mismatch names it).
pub(crate) fn decode(field: CheckField, code: u64) -> CheckValue {
    match field {
        CheckField::Collective => Collective::ALL
            .get(code as usize)
            .map_or(CheckValue::Unknown(code), |c| CheckValue::Name(c.name())),
        CheckField::Algorithm => {
            let entry = CATALOGUE.get((code >> 2) as usize);
            let drive = DRIVES.get((code & 3) as usize);
            match (entry, drive) {
                (Some(e), Some(&drive)) => CheckValue::Name(
                    Choice {
                        algorithm: e.algorithm,
                        drive,
                    }
                    .name(),
                ),
                _ => CheckValue::Unknown(code),
            }
        }
        CheckField::BlockBytes | CheckField::Root | CheckField::Communicator => {
            CheckValue::Number(code)
        }
    }
}

/// The code of `value` (a notice carries codes): the inverse of
/// [`decode`], up to names shared by several collectives' algorithms.
pub(crate) fn encode(value: CheckValue) -> u64 {
    match value {
        CheckValue::Number(n) | CheckValue::Unknown(n) => n,
        CheckValue::Name(name) => {
            if let Some(i) = Collective::ALL.iter().position(|c| c.name() == name) {
                return i as u64;
            }
            CATALOGUE
                .iter()
                .enumerate()
                .flat_map(|(i, e)| {
                    DRIVES.iter().enumerate().map(move |(d, &drive)| {
                        let choice = Choice {
                            algorithm: e.algorithm,
                            drive,
                        };
                        ((i as u64) << 2 | d as u64, choice.name())
                    })
                })
                .find(|(_, n)| *n == name)
                .map_or(u64::MAX, |(code, _)| code)
        }
    }
}

/// `words` as little-endian bytes (`B` = 8 x `W`): how a signature and
/// a notice record cross to other ranks.
pub(crate) fn to_le_bytes<const W: usize, const B: usize>(words: [u64; W]) -> [u8; B] {
    let mut out = [0u8; B];
    for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// The words of little-endian `bytes` (the inverse of [`to_le_bytes`]).
pub(crate) fn from_le_bytes<const W: usize>(bytes: &[u8]) -> [u64; W] {
    let mut words = [0u64; W];
    for (w, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *w = u64::from_le_bytes(b);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_names_its_value_and_back() {
        for c in Collective::ALL {
            let code = Collective::ALL.iter().position(|x| *x == c).unwrap_or(0) as u64;
            let v = decode(CheckField::Collective, code);
            assert_eq!(v, CheckValue::Name(c.name()));
            assert_eq!(encode(v), code);
        }
        for (i, e) in CATALOGUE.iter().enumerate() {
            for (d, &drive) in DRIVES.iter().enumerate() {
                let code = (i as u64) << 2 | d as u64;
                let v = decode(CheckField::Algorithm, code);
                let name = Choice {
                    algorithm: e.algorithm,
                    drive,
                }
                .name();
                assert_eq!(v, CheckValue::Name(name));
                assert_eq!(decode(CheckField::Algorithm, encode(v)), v);
            }
        }
        assert_eq!(
            decode(CheckField::Algorithm, u64::MAX),
            CheckValue::Unknown(u64::MAX)
        );
        assert_eq!(decode(CheckField::Root, 3), CheckValue::Number(3));
    }
}
