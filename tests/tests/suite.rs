//! The README's test command (`.ci/test`) runs every test file that
//! builds an emulated cluster a second time in modeled mode: the list of
//! those files there must be exactly the files here that build one, so a
//! new emulator test cannot silently run in threads mode only.

use std::collections::BTreeSet;
use std::path::Path;

/// What a test file writes when it builds a cluster (the shared helpers
/// of `railcoll_tests`, or the emulator's own constructor).
const BUILDS_A_CLUSTER: [&str; 4] = ["cluster(", "mode()", "Cluster::new", "shared_shape("];

#[test]
fn every_emulator_test_file_runs_in_both_modes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut emulated = BTreeSet::new();
    for entry in std::fs::read_dir(root.join("tests")).expect("tests/") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        let stem = path
            .file_stem()
            .expect("stem")
            .to_string_lossy()
            .into_owned();
        if stem != "suite" && BUILDS_A_CLUSTER.iter().any(|s| text.contains(s)) {
            emulated.insert(stem);
        }
    }
    let script: String = std::fs::read_to_string(root.join("../.ci/test"))
        .expect(".ci/test")
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let modeled = script
        .split("RAILCOLL_TEST_MODE=modeled")
        .nth(1)
        .expect("a modeled run in .ci/test");
    let words: Vec<&str> = modeled.split_whitespace().collect();
    let listed: BTreeSet<String> = words
        .windows(2)
        .filter(|w| w[0] == "--test")
        .map(|w| w[1].to_string())
        .collect();
    assert!(emulated.len() >= 7, "{emulated:?}");
    assert_eq!(
        listed, emulated,
        ".ci/test's modeled run must name exactly the test files that build a cluster"
    );
}
