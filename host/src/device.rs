//! The device boundary: what the driver needs from a node's NICs.
//!
//! One [`Device`] object stands for all rails' NICs of one node, as one
//! rank sees them. Backends: the emulator's (ranks as threads of the
//! emulator's process, sharing one object per node), and the vfio-user
//! client of `process::nicd` (feature `vfio-user`; ranks as
//! processes, each with its own object over the node's shared memory);
//! and boards behind Linux VFIO (`vfio`, feature `vfio`: a mapped BAR0 per
//! NIC, DMA memory mapped through the IOMMU, MSI-X vectors as eventfds).

use railcoll_mem::dma_mem::DmaMemory;
use railcoll_mem::regio::RegisterIo;

/// A buffer the NICs can reach by host physical (IOVA) address.
#[derive(Clone, Debug)]
pub struct DmaBuffer {
    /// Address the NIC uses.
    pub phys: u64,
    /// The CPU's view.
    pub mem: DmaMemory,
}

/// Device-level failures.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum DeviceError {
    /// DMA-able memory is exhausted.
    #[error("out of DMA memory: asked {asked} bytes, {free} free")]
    OutOfMemory {
        /// Bytes asked.
        asked: usize,
        /// Bytes left.
        free: usize,
    },
    /// The alignment is not a power of two or too large.
    #[error("invalid DMA alignment {0} (a power of two up to 4096)")]
    BadAlignment(usize),
    /// No such rail.
    #[error("rail {rail} does not exist (the device has {rails})")]
    NoSuchRail {
        /// Rail asked.
        rail: usize,
        /// Rails present.
        rails: usize,
    },
    /// The device could not be reached (no `nicd` serving that socket,
    /// no such device file).
    #[error("cannot reach {what}: {reason}")]
    Connect {
        /// The socket or device file.
        what: String,
        /// Why.
        reason: String,
    },
    /// The backend failed (a system call, a mapping).
    #[error("device backend: {0}")]
    Backend(String),
    /// A board behind VFIO could not be brought up (feature `vfio`).
    #[cfg(feature = "vfio")]
    #[error(transparent)]
    Vfio(VfioProblem),
}

#[cfg(feature = "vfio")]
/// What went wrong bringing a board up through VFIO.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VfioProblem {
    /// No usable `/dev/vfio/vfio` (no VFIO in this kernel, or the
    /// `vfio-pci` module not loaded, or no permission).
    #[error("no VFIO container: {0}")]
    NoVfio(String),
    /// The device is not there.
    #[error("no PCI device {device}: {reason}")]
    NoDevice {
        /// The device asked for.
        device: String,
        /// Why.
        reason: String,
    },
    /// The device has no usable IOMMU group (no IOMMU, not bound to
    /// `vfio-pci`, or a group another process holds or that is not
    /// viable).
    #[error("PCI device {device}: IOMMU group: {reason}")]
    NoIommuGroup {
        /// The device.
        device: String,
        /// Why.
        reason: String,
    },
    /// BAR0 is missing, too small, or cannot be read and written.
    #[error("PCI device {device}: BAR0: {what}")]
    Bar0 {
        /// The device.
        device: String,
        /// What is wrong.
        what: String,
    },
    /// The DMA pool could not be made or mapped through the IOMMU.
    #[error("DMA memory: {0}")]
    Dma(String),
    /// The device's MSI-X vectors could not be bound.
    #[error("PCI device {device}: interrupts: {what}")]
    Interrupts {
        /// The device.
        device: String,
        /// What is wrong.
        what: String,
    },
}

impl DeviceError {
    /// `align` as every backend's `alloc_dma` takes it: a power of two up
    /// to a page, else [`DeviceError::BadAlignment`].
    pub fn check_alignment(align: usize) -> Result<(), DeviceError> {
        if align.is_power_of_two() && align <= 4096 {
            Ok(())
        } else {
            Err(DeviceError::BadAlignment(align))
        }
    }
}

/// Rail `rail`'s entry of a backend's per-rail `items`, or
/// [`DeviceError::NoSuchRail`]: how each backend's
/// [`Device::registers`] finds a rail.
pub fn rail_of<T>(items: &[T], rail: usize) -> Result<&T, DeviceError> {
    items.get(rail).ok_or(DeviceError::NoSuchRail {
        rail,
        rails: items.len(),
    })
}

/// A held admin lock, whatever lock the backend takes (a mutex, a record
/// lock across processes): released when dropped.
pub struct AdminGuard<'a> {
    _held: Box<dyn Held + 'a>,
}

/// Anything a backend holds while the lock is taken.
trait Held {}
impl<T> Held for T {}

impl<'a> AdminGuard<'a> {
    /// Hold `guard` (the backend's own guard) until this drops.
    pub fn new<T: 'a>(guard: T) -> Self {
        Self {
            _held: Box::new(guard),
        }
    }
}

impl std::fmt::Debug for AdminGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminGuard")
    }
}

/// A node's NICs as the driver sees them.
pub trait Device: Send + Sync {
    /// Number of rails (NICs) on this node.
    fn rails(&self) -> usize;
    /// BAR0 of rail `rail`'s NIC.
    fn registers(&self, rail: usize) -> Result<&dyn RegisterIo, DeviceError>;
    /// Allocate zeroed DMA-able memory.
    fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaBuffer, DeviceError>;
    /// Serialises use of the NICs' admin mailboxes among a node's ranks (the
    /// kernel driver's lock, on hardware; a lock across the node's
    /// processes when ranks are processes), held until the guard drops.
    fn admin_lock(&self) -> Result<AdminGuard<'_>, DeviceError>;
    /// The node-wide shared-memory segment named `key`, created zeroed with
    /// `len` bytes by the first caller; later callers on the same node get
    /// the same memory (a real `mmap` shared by the node's ranks). A later
    /// call with a larger `len` fails with `OutOfMemory`.
    fn node_segment(&self, key: u64, len: usize) -> Result<DmaMemory, DeviceError>;
    /// The CPU's view of DMA memory that any rank of this node allocated
    /// (`phys`, `len` as [`DmaBuffer`] reported them): how a rank reaches a
    /// node peer's arena for the shared-memory phases. With ranks as
    /// processes the node's DMA pool would be one memory file mapped by
    /// every rank (`railcoll_mem::SharedMapping::memfd`).
    fn dma_view(&self, phys: u64, len: usize) -> Result<DmaMemory, DeviceError>;
}
