//! The fuzz runner on the stable toolchain: every fuzz target's entry
//! point replays its corpus (kept in `tests/fuzz/corpus/TARGET/`, grown by
//! coverage-guided campaigns with cargo-fuzz, see `tests/fuzz/README.md`),
//! then runs mutations of it for a fixed wall-time budget. A panic (or a
//! decoder's failed round trip) fails the test, naming the target and the
//! input in hex.
//!
//! Targets: `decode` (every decoder of untrusted bytes in the firmware),
//! `engine` (a firmware engine driven by a byte stream of commands,
//! packets, mailbox calls and clock steps), `texts` (profiles, tuning
//! tables, fault specs, study files and the command line they make, size
//! lists), `schedules` (schedule generation from arbitrary parameters,
//! each generated set checked by the verifier).
//!
//! `RAILCOLL_FUZZ_SECONDS` is each target's mutation budget (default 1;
//! `.ci/fuzz` gives more), `RAILCOLL_FUZZ_SEED` the mutations' seed
//! (default 1; `.ci/fuzz` derives it from the commit, and prints it).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use railcoll_tests::Draw;

type Target = fn(&[u8]) -> usize;

const TARGETS: [(&str, Target, usize); 4] = [
    ("decode", decode, 256),
    ("engine", engine, 4096),
    ("texts", railcoll_emu::fuzzing::parse_texts, 4096),
    ("schedules", railcoll_emu::fuzzing::schedules, 64),
];

fn decode(data: &[u8]) -> usize {
    let before = railcoll_fw::fuzzing::ROUND_TRIP_FAILURES.load(Ordering::Relaxed);
    let accepted = railcoll_fw::fuzzing::decode_all(data);
    let after = railcoll_fw::fuzzing::ROUND_TRIP_FAILURES.load(Ordering::Relaxed);
    assert_eq!(
        before, after,
        "a decoded input does not re-encode to itself"
    );
    // The same bytes as a datagram of a rail between machines: a typed
    // refusal or a packet that encodes back to the same datagram.
    accepted + railcoll_emu::fuzzing::decode_datagram(data)
}

fn engine(data: &[u8]) -> usize {
    railcoll_fw::fuzzing::run_engine(data);
    1
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}: a number")))
        .unwrap_or(default)
}

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read(p).expect("corpus file"))
        .collect()
}

/// A mutation of `base` (libFuzzer's simple mutators: bit flips, random
/// and interesting bytes, insertions, deletions, copies within, splices
/// with another corpus entry), at most `max` bytes long.
fn mutate(rng: &mut Draw, base: &[u8], other: &[u8], max: usize) -> Vec<u8> {
    let mut out = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = out.len();
        match rng.below(7) {
            0 if len > 0 => {
                let at = rng.below(len);
                out[at] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let at = rng.below(len);
                out[at] = [0, 1, 0x7f, 0x80, 0xff, b'=', b',', b'"', b'\n'][rng.below(9)];
            }
            2 if len < max => {
                let at = rng.below(len + 1);
                out.insert(at, rng.next_u64() as u8);
            }
            3 if len > 0 => {
                let at = rng.below(len);
                let n = 1 + rng.below((len - at).min(16));
                out.drain(at..at + n);
            }
            4 if len > 1 => {
                let from = rng.below(len);
                let to = rng.below(len);
                let n = 1 + rng.below((len - from.max(to)).min(32));
                let chunk = out[from..from + n].to_vec();
                out[to..to + n].copy_from_slice(&chunk);
            }
            5 if !other.is_empty() => {
                let cut = rng.below(out.len() + 1);
                let from = rng.below(other.len());
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            _ => {
                let at = rng.below(len + 1);
                out.splice(at..at, (0..1 + rng.below(8)).map(|_| rng.next_u64() as u8));
            }
        }
    }
    out.truncate(max);
    out
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// Run `target` on `input`; a panic fails the test with the input.
fn run_one(name: &str, target: Target, input: &[u8]) -> usize {
    match catch_unwind(AssertUnwindSafe(|| target(input))) {
        Ok(accepted) => accepted,
        Err(_) => panic!("fuzz target {name} panicked on input {}", hex(input)),
    }
}

#[test]
fn every_target_survives_its_corpus_and_mutations() {
    let budget = Duration::from_secs(env_number("RAILCOLL_FUZZ_SECONDS", 1));
    let seed = env_number("RAILCOLL_FUZZ_SEED", 1);
    println!(
        "# fuzz: seed {seed}, {} s of mutations per target",
        budget.as_secs()
    );
    println!("# target      corpus  replayed_accepted  executions  accepted");
    for (name, target, max) in TARGETS {
        let corpus = corpus(name);
        assert!(!corpus.is_empty(), "{name}: empty corpus");
        let mut replay_accepted = 0;
        for input in &corpus {
            replay_accepted += usize::from(run_one(name, target, input) > 0);
        }
        let mut rng = Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ name.len() as u64 | 1);
        let start = Instant::now();
        let (mut runs, mut accepted) = (0u64, 0u64);
        while start.elapsed() < budget {
            let base = &corpus[rng.below(corpus.len())];
            let other = &corpus[rng.below(corpus.len())];
            let input = mutate(&mut rng, base, other, max);
            accepted += u64::from(run_one(name, target, &input) > 0);
            runs += 1;
        }
        println!(
            "  {name:<10} {:>7} {replay_accepted:>18} {runs:>11} {accepted:>9}",
            corpus.len()
        );
        assert!(
            runs > 0 || budget.is_zero(),
            "{name}: no execution in the budget"
        );
    }
}
