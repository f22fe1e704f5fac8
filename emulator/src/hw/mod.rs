//! The hardware both modes build on: node memory and its DMA allocator
//! ([`memory`]), a NIC's register file shared by driver and firmware
//! ([`registers`]), how doorbells and packets wake a NIC's worker
//! ([`notify`]; modeled mode passes none), what travels on a rail and how
//! its switch routes collective packets ([`wire`]), and what an emulated
//! NIC is ([`nic`]: table sizes, payload delivery and its CRC trailer),
//! and what goes wrong on the rails when faults are injected
//! ([`faults`]).

pub mod faults;
pub mod memory;
pub mod nic;
pub mod notify;
pub mod registers;
pub mod wire;
