//! Every decoder of untrusted bytes: must never panic, and whatever it
//! accepts must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    railcoll_fw::fuzzing::decode_all(data);
    assert_eq!(
        railcoll_fw::fuzzing::ROUND_TRIP_FAILURES.load(core::sync::atomic::Ordering::Relaxed),
        0
    );
});
