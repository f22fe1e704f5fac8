//! Runs one loom model with a bug planted in it (`loom_planted
//! broadcast-wake` or `loom_planted ring-tail`); loom's failure makes the
//! process fail, which `tests/tests/loom_protocols.rs` checks. The bugs:
//! - `broadcast-wake`: the shared-memory broadcast's old lost wake-up (a
//!   non-root woke only the round's root, but the next round's root waits
//!   for its done flag), among 3 ranks;
//! - `ring-tail`: a command ring tail published with a Relaxed store and
//!   no fence.

use railcoll_tests::loom_models::{broadcast_rounds, model, ring_and_completion};

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("broadcast-wake") => model(|| broadcast_rounds(3, &[(1, 0), (2, 1)], true)),
        Some("ring-tail") => model(|| ring_and_completion(true)),
        other => {
            eprintln!("loom_planted: unknown bug {other:?} (broadcast-wake, ring-tail)");
            std::process::exit(2);
        }
    }
}
