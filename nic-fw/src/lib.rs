//! railcoll-fw: the NIC side of railcoll.
//!
//! This crate is the hardware specification and the firmware of an
//! Elan-style RDMA NIC. It is `#![no_std]` with no allocator, has no `unsafe`
//! code, and never panics on any input: malformed commands, packets,
//! addresses and lengths end in a typed [`abi::ErrorCode`], an error record
//! and an error event, and the engine keeps serving its other queues.
//!
//! Map of the crate:
//!
//! - [`abi`]: everything that crosses the host/NIC or NIC/NIC boundary, as
//!   little-endian `zerocopy` layouts with compile-time size checks, each with
//!   a checked view and a validated representation:
//!   - [`abi::regs`]: the BAR0 register map, the admin mailbox, flag words;
//!   - [`abi::command`]: 64-byte command blocks, opcodes, the DMA descriptor;
//!   - [`abi::event`]: event actions and the completion word they write;
//!   - [`abi::packet`]: the wire header, acks and nacks, the checksum;
//!   - [`abi::error`]: error codes and the error record written to the host;
//!   - [`abi::ring`]: the free-running producer/consumer counter arithmetic
//!     every queue shares (command, chain, error and QDMA rings).
//! - [`engine`]: the poll-driven firmware state machine, generic over the
//!   small hardware traits of [`engine::hw`] (host memory DMA, link, register
//!   file, clock, host wakeup), so the same code runs in the emulator and on
//!   an FPGA soft core.
//!
//! - [`switch`]: what a rail's switch adds to forwarding: broadcast
//!   replication and hardware-barrier combining.
//!
//! `docs/abi.md` at the repository root is the prose version of [`abi`],
//! written for a team implementing the NIC in hardware.
#![no_std]
#![forbid(unsafe_code)]
#![deny(
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects,
    clippy::unreachable,
    clippy::todo,
    clippy::unimplemented
)]
// Tests may index and unwrap: a panic there is a failed test, not a NIC crash.
#![cfg_attr(
    test,
    allow(
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic
    )
)]
#![warn(missing_docs)]

pub mod abi;
pub mod engine;
pub mod fuzzing;
pub mod switch;
