//! The verdict and how a board prints it.
//!
//! A board without `core::fmt` (or without room for it) prints through
//! [`Console`], one string at a time; numbers are written by
//! [`write_u64`] in decimal. The last line of a report is `PASS` or
//! `FAIL` followed by the step that failed: what a harness greps for.

use crate::steps::Step;

/// Where a report goes (a UART, a string in a test).
pub trait Console {
    /// Write `s` as it is.
    fn write_str(&mut self, s: &str);
}

/// Write `value` in decimal.
pub fn write_u64(console: &mut impl Console, value: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at = at.saturating_sub(1);
        if let Some(d) = digits.get_mut(at) {
            *d = b'0'.wrapping_add((rest % 10) as u8);
        }
        rest /= 10;
        if rest == 0 || at == 0 {
            break;
        }
    }
    let text = digits
        .get(at..)
        .and_then(|d| core::str::from_utf8(d).ok())
        .unwrap_or("?");
    console.write_str(text);
}

/// What went wrong in a failed step: the check, and the value it wanted
/// and the one it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The step.
    pub step: Step,
    /// The check that failed, in words.
    pub check: &'static str,
    /// The value the check wanted.
    pub expected: u64,
    /// The value it found.
    pub found: u64,
}

/// The outcome of a self-test run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Steps that passed (they run in [`Step::ALL`]'s order and stop at
    /// the first failure).
    pub passed: u32,
    /// The first failure, if any.
    pub failure: Option<Failure>,
}

impl Verdict {
    /// Every step passed.
    pub fn ok(&self) -> bool {
        self.failure.is_none()
    }

    /// The last line of the report.
    pub fn write(&self, console: &mut impl Console) {
        match &self.failure {
            None => {
                console.write_str("PASS (");
                write_u64(console, u64::from(self.passed));
                console.write_str(" steps)\n");
            }
            Some(f) => {
                console.write_str("FAIL in ");
                console.write_str(f.step.name());
                console.write_str(": ");
                console.write_str(f.check);
                console.write_str(" (expected ");
                write_u64(console, f.expected);
                console.write_str(", found ");
                write_u64(console, f.found);
                console.write_str(")\n");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    extern crate std;
    use std::string::String;

    impl Console for String {
        fn write_str(&mut self, s: &str) {
            self.push_str(s);
        }
    }

    #[test]
    fn numbers_print_in_decimal() {
        for (value, text) in [
            (0, "0"),
            (7, "7"),
            (10, "10"),
            (u64::MAX, "18446744073709551615"),
        ] {
            let mut out = String::new();
            write_u64(&mut out, value);
            assert_eq!(out, text);
        }
    }

    #[test]
    fn a_failure_names_its_step_and_values() {
        let mut out = String::new();
        Verdict {
            passed: 3,
            failure: Some(Failure {
                step: Step::ChainedPut,
                check: "bytes landed",
                expected: 1,
                found: 0,
            }),
        }
        .write(&mut out);
        assert_eq!(
            out,
            "FAIL in chained put: bytes landed (expected 1, found 0)\n"
        );
    }
}
