//! The library's differential fuzzer ([`railcoll_tests::differential`]),
//! in the suite's mode: random programs of collectives (every collective,
//! algorithm, drive and call form the communicator accepts; requests
//! interleaved and completed in each rank's own order; ranks that err; one
//! cluster reused by each program's closures), each call's output checked
//! against the definition on every rank.
//!
//! CI runs `RAILCOLL_DIFF_PROGRAMS` programs (default 12) from seed
//! `RAILCOLL_DIFF_SEED` (default 1): the same programs every run. A longer
//! campaign is the same test with a larger count (docs/reliability.md
//! gives the command and its figures). A failure names the program's seed,
//! which reruns it alone: `RAILCOLL_DIFF_SEED=<seed> RAILCOLL_DIFF_PROGRAMS=1`
//! (`RAILCOLL_DIFF_VERBOSE=1` prints each program as it starts).

use railcoll_tests::differential::{Program, Tally, run};

fn env(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("{name}={v}: {e}"))
        }
        Err(_) => default,
    }
}

#[test]
fn random_programs_match_the_definitions() {
    let programs = env("RAILCOLL_DIFF_PROGRAMS", 12);
    let first = env("RAILCOLL_DIFF_SEED", 1);
    let mode = railcoll_tests::mode();
    let mut tally = Tally::default();
    let started = std::time::Instant::now();
    for seed in first..first + programs {
        let program = Program::new(seed);
        if std::env::var_os("RAILCOLL_DIFF_VERBOSE").is_some() {
            eprintln!("{program}");
        }
        match run(&program, mode) {
            Ok(t) => tally += t,
            Err(wrong) => {
                panic!("{wrong}\n(rerun alone: RAILCOLL_DIFF_SEED={seed} RAILCOLL_DIFF_PROGRAMS=1)")
            }
        }
    }
    eprintln!(
        "{programs} programs from seed {first} in {mode:?} mode: {} closures, {} calls ({} outputs checked on the ranks, {} non-blocking or persistent starts on the ranks), {} closures ended by ranks that err, 0 wrong, {:.1} s",
        tally.closures,
        tally.calls,
        tally.checked,
        tally.in_flight,
        tally.failures,
        started.elapsed().as_secs_f64()
    );
    assert!(tally.checked > 0, "the programs checked nothing");
}
