//! The firmware engine on a software board, driven by arbitrary streams of
//! commands, packets, mailbox calls and clock steps: it must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    railcoll_fw::fuzzing::run_engine(data);
});
