//! railcoll-fw-selftest: the NIC firmware's self-test, for any board.
//!
//! Two unmodified engines of `railcoll-fw` (nodes 0 and 1 of one rail)
//! run on loopback boards whose host memory is a slice, whose link is a
//! pair of frame queues, and whose rail switch is the firmware crate's
//! own switch logic. A host side drives them as railcoll's driver does
//! (mailbox calls, command rings and doorbells, completion words and
//! error records) through the steps of [`steps::Step::ALL`]: probe,
//! attach, puts of one to six packets, a get, an event counting two
//! arrivals, a chained put, the hardware barrier, a put over a lossy link
//! and a malformed command. It needs no allocator, no `std` and no
//! `unsafe`, so the same test runs as a unit test on the build machine
//! and on a RISC-V core (`nic-fw/boards/qemu-virt`, booted under QEMU in
//! CI), where it reports through the board's UART.
//!
//! Map of the crate:
//!
//! - [`board`]: the loopback board (the engine's hardware traits over
//!   memory) and its frame queues.
//! - [`fabric`]: two NICs, the switch between them, the virtual clock,
//!   and the host side's operations; the node memory layout.
//! - [`steps`]: the steps and the checks each makes.
//! - [`report`]: the verdict, and the [`report::Console`] a board prints
//!   it through.
//!
//! ```
//! use railcoll_fw_selftest::{MEM_LEN, report::Console, run};
//!
//! struct Out(String);
//! impl Console for Out {
//!     fn write_str(&mut self, s: &str) {
//!         self.0.push_str(s);
//!     }
//! }
//! let (mut a, mut b) = (vec![0u8; MEM_LEN], vec![0u8; MEM_LEN]);
//! let mut out = Out(String::new());
//! let verdict = run(&mut a, &mut b, &mut out);
//! assert!(verdict.ok(), "{}", out.0);
//! assert!(out.0.ends_with("PASS (9 steps)\n"));
//! ```
#![no_std]
#![forbid(unsafe_code)]
#![deny(
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::unreachable,
    clippy::todo,
    clippy::unimplemented
)]
#![cfg_attr(
    test,
    allow(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]
#![warn(missing_docs)]

pub mod board;
pub mod fabric;
pub mod report;
pub mod steps;

use core::cell::Cell;

use fabric::Fabric;
pub use fabric::MEM_LEN;
use report::{Console, Failure, Verdict};
use steps::Step;

/// Run every step on two fresh NICs over `mem_a` and `mem_b`, printing
/// one line per step and the verdict to `console`.
///
/// Contract: `mem_a` and `mem_b` are the two nodes' host memories, at
/// least [`MEM_LEN`] bytes each (shorter memories fail the first step
/// that touches them, with a host-memory failure); their contents are
/// overwritten. The run is deterministic: the same memories give the
/// same report, on any machine.
pub fn run(mem_a: &mut [u8], mem_b: &mut [u8], console: &mut impl Console) -> Verdict {
    let clock = Cell::new(0);
    let mut fabric = Fabric::new(mem_a, mem_b, &clock);
    run_on(&mut fabric, console)
}

/// Run every step on `fabric` (as [`run`] does on a fresh one).
pub fn run_on(fabric: &mut Fabric<'_>, console: &mut impl Console) -> Verdict {
    console.write_str("railcoll firmware self-test: two engines, one rail\n");
    let mut verdict = Verdict {
        passed: 0,
        failure: None,
    };
    for step in Step::ALL {
        console.write_str("  ");
        console.write_str(step.name());
        match step.run(fabric) {
            Ok(()) => {
                console.write_str(": ok\n");
                verdict.passed = verdict.passed.wrapping_add(1);
            }
            Err(failure) => {
                console.write_str(": FAILED\n");
                verdict.failure = Some(failure);
                break;
            }
        }
    }
    verdict.write(console);
    verdict
}

/// A failure of `step` because `check` did not hold.
pub fn failure(step: Step, check: &'static str, expected: u64, found: u64) -> Failure {
    Failure {
        step,
        check,
        expected,
        found,
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::String;
    use std::vec;

    use super::*;

    struct Out(String);

    impl Console for Out {
        fn write_str(&mut self, s: &str) {
            self.0.push_str(s);
        }
    }

    fn memories(len: usize) -> (std::vec::Vec<u8>, std::vec::Vec<u8>) {
        (vec![0u8; len], vec![0u8; len])
    }

    #[test]
    fn every_step_passes_and_the_report_says_so() {
        let (mut a, mut b) = memories(MEM_LEN);
        let mut out = Out(String::new());
        let verdict = run(&mut a, &mut b, &mut out);
        assert_eq!(verdict.failure, None, "{}", out.0);
        assert_eq!(verdict.passed as usize, Step::ALL.len());
        for step in Step::ALL {
            assert!(out.0.contains(&std::format!("  {}: ok\n", step.name())));
        }
    }

    /// Two runs on fresh memories leave the same bytes: the run is
    /// deterministic.
    #[test]
    fn two_runs_leave_the_same_memory() {
        let (mut a1, mut b1) = memories(MEM_LEN);
        let (mut a2, mut b2) = memories(MEM_LEN);
        let mut out = Out(String::new());
        assert!(run(&mut a1, &mut b1, &mut out).ok());
        assert!(run(&mut a2, &mut b2, &mut out).ok());
        assert!(a1 == a2 && b1 == b2);
    }

    /// A link that loses every frame: the first step that needs the
    /// network fails, naming the check, and nothing panics.
    #[test]
    fn a_dead_link_fails_the_first_put() {
        let (mut a, mut b) = memories(MEM_LEN);
        let clock = Cell::new(0);
        let mut fabric = Fabric::new(&mut a, &mut b, &clock);
        fabric.loss = Some(1);
        let mut out = Out(String::new());
        let verdict = run_on(&mut fabric, &mut out);
        let failure = verdict.failure.expect("a dead link fails");
        assert_eq!((verdict.passed, failure.step), (2, Step::Put));
        assert_eq!(failure.check, "completion word written, without error");
        assert!(out.0.contains("FAIL in put: "), "{}", out.0);
        assert!(out.0.contains("  put: FAILED\n"));
    }

    /// Memories too short for the layout fail with a typed failure, on
    /// every length, and never panic.
    #[test]
    fn short_memories_fail_without_panicking() {
        for len in [0, 64, 0x1000, 0x9000] {
            let (mut a, mut b) = memories(len);
            let mut out = Out(String::new());
            let verdict = run(&mut a, &mut b, &mut out);
            assert!(!verdict.ok(), "{len} bytes: {}", out.0);
        }
    }
}
