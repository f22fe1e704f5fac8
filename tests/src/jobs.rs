//! What the tests of ranks as processes share: a scratch directory per
//! test, each rank's output, and the check that every rank of a job ran
//! the catalogue (`rank_catalogue`) and said so.

use std::path::{Path, PathBuf};

use railcoll_emu::launcher::JobOutcome;

/// A fresh directory for one test's files (`suite`, `name`: whose).
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("railcoll-{suite}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// What rank `rank` wrote to `stream` (`out`, `err`) in `out`.
pub fn output(out: &Path, rank: usize, stream: &str) -> String {
    std::fs::read_to_string(out.join(format!("rank-{rank}.{stream}"))).unwrap_or_default()
}

/// Every rank the launchers of `outcomes` started succeeded and said it
/// checked more than 30 cases.
pub fn expect_all_ok(outcomes: &[JobOutcome], out: &Path, what: &str) {
    for (rank, end) in outcomes.iter().flat_map(|o| &o.ranks) {
        let rank = *rank;
        assert!(
            end.ok(),
            "{what}: rank {rank} {end}: {}",
            output(out, rank, "err")
        );
        let said = output(out, rank, "out");
        let cases: usize = said
            .trim()
            .strip_prefix("ok: ")
            .and_then(|s| s.strip_suffix(" cases"))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{what}: rank {rank} said {said:?}"));
        assert!(cases > 30, "{what}: rank {rank} ran only {cases} cases");
    }
}
