//! A board's NIC behind Linux VFIO (feature `vfio`): the container, a PCI
//! device's regions and MSI-X vectors, and DMA memory mapped through the
//! IOMMU, over rust-vmm's `vfio-ioctls`. What needs `unsafe` here: handing
//! the IOMMU a mapping the device may then write at any time, mapping a
//! device region, and making `vfio-ioctls`' own eventfd objects from
//! duplicates of ours.
//! The host library's VFIO backend (`railcoll_host::vfio`) is built on
//! these, through a seam its tests replace with a fake.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd};
use std::path::Path;
use std::sync::Arc;

use crate::event_fd::EventFd;
use crate::mmap::SharedMapping;
use crate::regio::DeviceRegion;

/// Which step of bringing a device up failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VfioStep {
    /// Opening `/dev/vfio/vfio`, or its API version and IOMMU type.
    Container,
    /// The device's IOMMU group: found, opened, viable, added.
    Group,
    /// The device itself: its file, its information, its regions.
    Device,
    /// A region's mapping.
    Region,
    /// Mapping memory through the IOMMU.
    Dma,
    /// Its interrupts.
    Irq,
}

/// A VFIO failure: the step, and the kernel's or `vfio-ioctls`' words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VfioSysError {
    /// The step that failed.
    pub step: VfioStep,
    /// What was said.
    pub message: String,
}

impl std::fmt::Display for VfioSysError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.step, self.message)
    }
}

impl std::error::Error for VfioSysError {}

fn classify(e: vfio_ioctls::VfioError) -> VfioSysError {
    use vfio_ioctls::VfioError as E;
    let step = match &e {
        E::OpenContainer(_)
        | E::VfioApiVersion
        | E::VfioExtension
        | E::VfioInvalidType
        | E::VfioType1V2
        | E::ContainerSetIOMMU(_) => VfioStep::Container,
        E::OpenGroup(..)
        | E::GetGroupStatus
        | E::GroupViable
        | E::GroupSetContainer
        | E::UnsetContainer
        | E::InvalidPath => VfioStep::Group,
        E::IommuDmaMap(_) | E::IommuDmaUnmap(_) => VfioStep::Dma,
        E::VfioDeviceGetIrqInfo
        | E::VfioDeviceSetIrq
        | E::VfioDeviceEnableIrq
        | E::VfioDeviceDisableIrq
        | E::VfioDeviceUnmaskIrq
        | E::VfioDeviceTriggerIrq
        | E::VfioDeviceSetIrqResampleFd => VfioStep::Irq,
        _ => VfioStep::Device,
    };
    VfioSysError {
        step,
        message: e.to_string(),
    }
}

/// A VFIO container: the process's IOMMU context.
pub struct VfioContainer {
    inner: Arc<vfio_ioctls::VfioContainer>,
}

impl std::fmt::Debug for VfioContainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VfioContainer")
    }
}

impl VfioContainer {
    /// Open `/dev/vfio/vfio` (the type-1 v2 IOMMU).
    pub fn open() -> Result<Self, VfioSysError> {
        let inner = vfio_ioctls::VfioContainer::new(None).map_err(classify)?;
        Ok(Self {
            inner: Arc::new(inner),
        })
    }

    /// The PCI device at `sysfs` (`/sys/bus/pci/devices/<address>`), its
    /// IOMMU group added to this container.
    pub fn open_device(&self, sysfs: &Path) -> Result<VfioPciDevice, VfioSysError> {
        let ops: Arc<dyn vfio_ioctls::VfioOps> = self.inner.clone();
        let device = vfio_ioctls::VfioDevice::new(sysfs, ops).map_err(classify)?;
        Ok(VfioPciDevice { device })
    }

    /// Map `pool` into the IOMMU at `iova`: the container's devices may
    /// read and write it by DMA from now until the returned window drops
    /// (which unmaps it; the window keeps the memory alive until then).
    pub fn map_dma(&self, iova: u64, pool: &SharedMapping) -> Result<DmaWindow, VfioSysError> {
        // `vfio_dma_map` asks that the range stay mapped while the device
        // may reach it and that no Rust reference to it live across the
        // device's accesses. A `SharedMapping` is only reached through
        // `DmaMemory`: raw copies (not volatile: a byte a device writes
        // concurrently may be read torn, which the ABI rules out by never
        // having host and NIC write the same bytes at once, except aligned
        // 8-byte words) and 8-byte atomics, whose `&AtomicU64` lives for
        // one load or store; the emulator's NICs share memory with ranks
        // on the same terms.
        // SAFETY: as above; the window holds the mapping until it has
        // unmapped it.
        unsafe {
            self.inner
                .vfio_dma_map(iova, pool.len(), pool.raw_base())
                .map_err(classify)?;
        }
        Ok(DmaWindow {
            container: Arc::clone(&self.inner),
            iova,
            len: pool.len(),
            _pool: pool.clone(),
        })
    }
}

/// Memory mapped through the IOMMU; unmapped when dropped (before its
/// memory can go).
pub struct DmaWindow {
    container: Arc<vfio_ioctls::VfioContainer>,
    iova: u64,
    len: usize,
    _pool: SharedMapping,
}

impl std::fmt::Debug for DmaWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaWindow")
            .field("iova", &self.iova)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for DmaWindow {
    fn drop(&mut self) {
        let _ = self.container.vfio_dma_unmap(self.iova, self.len);
    }
}

/// A region of a device, as VFIO describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// Bytes.
    pub size: u64,
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Mappable into the process.
    pub mmap: bool,
}

/// A PCI device opened through VFIO.
pub struct VfioPciDevice {
    device: vfio_ioctls::VfioDevice,
}

impl std::fmt::Debug for VfioPciDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VfioPciDevice")
    }
}

const REGION_READ: u32 = 1;
const REGION_WRITE: u32 = 2;
const REGION_MMAP: u32 = 4;
const MSIX_INDEX: u32 = 2;

impl VfioPciDevice {
    /// Region `index` (0: BAR0), if the device has it.
    pub fn region(&self, index: u32) -> Option<RegionInfo> {
        let size = self.device.get_region_size(index);
        let flags = self.device.get_region_flags(index);
        (size > 0).then_some(RegionInfo {
            size,
            read: flags & REGION_READ != 0,
            write: flags & REGION_WRITE != 0,
            mmap: flags & REGION_MMAP != 0,
        })
    }

    /// Map region `index` into this process (it must be mappable).
    pub fn map_region(&self, index: u32) -> Result<DeviceRegion, VfioSysError> {
        let fail = |message: String| VfioSysError {
            step: VfioStep::Region,
            message,
        };
        let info = self
            .region(index)
            .ok_or_else(|| fail(format!("no region {index}")))?;
        let len = usize::try_from(info.size).map_err(|e| fail(e.to_string()))?;
        let offset = self.device.get_region_offset(index);
        // SAFETY: the device's file stays open for the call; mapping a
        // VFIO region at its offset is what the region's MMAP flag offers.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.device.as_raw_fd()) };
        DeviceRegion::map(fd, offset, len).map_err(|e| fail(e.to_string()))
    }

    /// Read `buf.len()` bytes of region `index` at `offset` (a system
    /// call: for a region that is not mappable).
    pub fn read_region(&self, index: u32, offset: u64, buf: &mut [u8]) {
        self.device.region_read(index, buf, offset);
    }

    /// Write `data` to region `index` at `offset`.
    pub fn write_region(&self, index: u32, offset: u64, data: &[u8]) {
        self.device.region_write(index, data, offset);
    }

    /// MSI-X vectors the device has.
    pub fn msix_vectors(&self) -> u32 {
        self.device.get_irq_info(MSIX_INDEX).map_or(0, |i| i.count)
    }

    /// Vector `i` of MSI-X signals `fds[i]`.
    pub fn enable_msix(&self, fds: &[&EventFd]) -> Result<(), VfioSysError> {
        let mut owned = Vec::with_capacity(fds.len());
        for fd in fds {
            let dup = fd.as_fd().try_clone_to_owned().map_err(|e| VfioSysError {
                step: VfioStep::Irq,
                message: e.to_string(),
            })?;
            // SAFETY: `dup` is a fresh descriptor of an eventfd, owned by
            // nothing else; the new object takes it over (and closes it).
            owned.push(unsafe { vmm_sys_util::eventfd::EventFd::from_raw_fd(dup.into_raw_fd()) });
        }
        self.device
            .enable_msix(owned.iter().collect())
            .map_err(classify)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without `/dev/vfio/vfio` (CI's machine), opening fails at the
    /// container, naming it; with it, opening fails, if at all, at the
    /// container too (nothing else is touched), and nothing panics.
    #[test]
    fn opening_fails_only_at_the_container_and_says_why() {
        let present = Path::new("/dev/vfio/vfio").exists();
        match VfioContainer::open() {
            Ok(_) => assert!(present, "a container without /dev/vfio/vfio"),
            Err(e) => {
                assert_eq!(e.step, VfioStep::Container, "{e}");
                assert!(present || e.message.contains("/dev/vfio/vfio"), "{e}");
            }
        }
    }
}
