//! railcoll-mem: the unsafe foundation under the host library and the
//! emulator, kept in one small crate so that the compiler confines it:
//! `railcoll-host` and the emulator forbid `unsafe` outright.
//!
//! Map of the crate:
//!
//! - [`dma_mem`]: [`dma_mem::DmaMemory`], the only way to touch memory a
//!   NIC or another rank may write concurrently: bounds-checked copies and
//!   aligned 64-bit atomics, never a Rust reference.
//! - [`mmap`]: shared mappings (node memory, shared-memory segments):
//!   anonymous ones, and memfd-backed ones other processes can map; and
//!   returning a range's pages to zero them.
//! - [`regio`]: register access ([`regio::RegisterIo`]), with a volatile
//!   MMIO implementation for a real BAR.
//! - [`event_fd`]: eventfds, how a NIC's interrupt reaches a rank in
//!   another process (VFIO and vfio-user deliver interrupts as eventfds).
//! - [`record_lock`]: a lock across a node's processes and threads (a
//!   POSIX record lock, released by the kernel if its holder dies).
//! - [`signals`]: termination signals deferred around a step that must
//!   not be cut in half (a command's outputs moved into place together).
//! - `vfio` (feature `vfio`): a board's NIC behind Linux VFIO over
//!   rust-vmm's `vfio-ioctls`: the container, a device's regions and
//!   MSI-X vectors, memory mapped through the IOMMU.
//! - [`socket_buffers`]: a UDP socket's receive buffer enlarged (the
//!   datagrams of rails between hosts come in bursts).
//! - [`fiber`]: the modeled mode's ranks as stackful coroutines, and the
//!   suspend a wait deep inside the host library calls.
//!
//! Every `unsafe` block carries a `// SAFETY:` argument (clippy's
//! `undocumented_unsafe_blocks` is denied workspace-wide) and
//! `unsafe_op_in_unsafe_fn` is denied.

pub mod dma_mem;
pub mod event_fd;
pub mod fiber;
pub mod mmap;
pub mod record_lock;
pub mod regio;
pub mod signals;
pub mod socket_buffers;
#[cfg(feature = "vfio")]
pub mod vfio;

pub use dma_mem::{DmaMemory, OutOfRange};
pub use mmap::SharedMapping;
pub use regio::RegisterIo;
