//! A node's NICs on boards behind Linux VFIO (feature `vfio`): the
//! [`Device`] an FPGA team's board needs, over rust-vmm's `vfio-ioctls`
//! (through `railcoll_mem::vfio`).
//!
//! [`VfioNode::open`] takes one PCI device per rail (`0000:03:00.0`, or
//! its sysfs path), each bound to the `vfio-pci` driver, and:
//! - opens the VFIO container and each device's IOMMU group (a typed
//!   [`VfioProblem`] when `/dev/vfio/vfio`, the device or its group is
//!   missing, or the group is not viable);
//! - takes BAR0 (region 0, at least `BAR0_SIZE` bytes, readable and
//!   writable): mapped into the process when VFIO offers it, so register
//!   accesses are plain volatile loads and stores, else through the
//!   device file (a system call per access);
//! - allocates the node's DMA pool and maps it through the IOMMU at
//!   `iova`: the addresses the NICs are given are IOVAs in that window;
//! - binds MSI-X vector `c` of every rail to context `c`'s eventfd, which
//!   [`VfioNode::wait_hook`] sleeps on (contexts beyond the vectors the
//!   board has are polled).
//!
//! A VFIO group belongs to one process, so a node's ranks are threads of
//! the process that opened it, sharing this one object (as ranks of one
//! node share the emulator's). The backend reaches VFIO only through the
//! [`Vfio`] and [`VfioPci`] traits: [`SystemVfio`] is the kernel's, and
//! the tests put a fake behind them (the railcoll tests' fake runs the
//! emulator's NICs behind it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use railcoll_fw::abi::MAX_CONTEXTS;
use railcoll_fw::abi::regs::BAR0_SIZE;
use railcoll_mem::dma_mem::DmaMemory;
use railcoll_mem::event_fd::EventFd;
use railcoll_mem::mmap::SharedMapping;
use railcoll_mem::regio::{DeviceRegion, MappedRegisters, RegisterIo};
pub use railcoll_mem::vfio::RegionInfo;

pub use crate::device::VfioProblem;
use crate::device::{AdminGuard, Device, DeviceError, DmaBuffer};
use crate::env::WaitHook;
use crate::process::wait::InterruptWait;

impl From<VfioProblem> for DeviceError {
    fn from(p: VfioProblem) -> Self {
        DeviceError::Vfio(p)
    }
}

/// VFIO as the backend uses it: the seam between the backend and the
/// kernel, which the tests fill with a fake.
pub trait Vfio: Send + Sync {
    /// Open the PCI device at `sysfs` (`/sys/bus/pci/devices/<address>`)
    /// and add its IOMMU group.
    fn open_device(&self, sysfs: &Path) -> Result<Box<dyn VfioPci>, VfioProblem>;
    /// Memory for the DMA pool, `len` bytes, zeroed.
    fn dma_pool(&self, len: usize) -> Result<SharedMapping, VfioProblem>;
    /// Map `pool` through the IOMMU at `iova`, for every device opened.
    fn map_dma(&self, iova: u64, pool: &SharedMapping) -> Result<(), VfioProblem>;
}

/// A PCI device opened through [`Vfio`].
pub trait VfioPci: Send + Sync {
    /// Region `index` (0: BAR0), if the device has it.
    fn region(&self, index: u32) -> Option<RegionInfo>;
    /// Map region `index` into this process.
    fn map_region(&self, index: u32) -> Result<DeviceRegion, VfioProblem>;
    /// Read region `index` at `offset` through the device file.
    fn read_region(&self, index: u32, offset: u64, buf: &mut [u8]);
    /// Write region `index` at `offset` through the device file.
    fn write_region(&self, index: u32, offset: u64, data: &[u8]);
    /// MSI-X vectors.
    fn msix_vectors(&self) -> u32;
    /// Vector `i` signals `fds[i]`.
    fn enable_msix(&self, fds: &[&EventFd]) -> Result<(), VfioProblem>;
}

/// The kernel's VFIO (`/dev/vfio`), through `railcoll_mem::vfio`.
pub struct SystemVfio {
    container: railcoll_mem::vfio::VfioContainer,
    windows: Mutex<Vec<railcoll_mem::vfio::DmaWindow>>,
}

impl std::fmt::Debug for SystemVfio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SystemVfio")
    }
}

impl SystemVfio {
    /// Open the container.
    pub fn open() -> Result<Self, VfioProblem> {
        const CONTAINER: &str = "/dev/vfio/vfio";
        if !Path::new(CONTAINER).exists() {
            return Err(VfioProblem::NoVfio(format!(
                "{CONTAINER} does not exist (is the vfio-pci module loaded?)"
            )));
        }
        let container = railcoll_mem::vfio::VfioContainer::open()
            .map_err(|e| VfioProblem::NoVfio(e.message))?;
        Ok(Self {
            container,
            windows: Mutex::new(Vec::new()),
        })
    }
}

impl Vfio for SystemVfio {
    fn open_device(&self, sysfs: &Path) -> Result<Box<dyn VfioPci>, VfioProblem> {
        use railcoll_mem::vfio::VfioStep;
        let device = sysfs.display().to_string();
        if !sysfs.exists() {
            return Err(VfioProblem::NoDevice {
                device,
                reason: "no such device in sysfs".into(),
            });
        }
        if !sysfs.join("iommu_group").exists() {
            return Err(VfioProblem::NoIommuGroup {
                device,
                reason: "none (is the IOMMU on, and the device bound to vfio-pci?)".into(),
            });
        }
        self.container
            .open_device(sysfs)
            .map(|d| Box::new(SystemPci(d)) as Box<dyn VfioPci>)
            .map_err(|e| match e.step {
                VfioStep::Group | VfioStep::Container => VfioProblem::NoIommuGroup {
                    device,
                    reason: e.message,
                },
                _ => VfioProblem::NoDevice {
                    device,
                    reason: e.message,
                },
            })
    }

    fn dma_pool(&self, len: usize) -> Result<SharedMapping, VfioProblem> {
        SharedMapping::new(len).map_err(|e| VfioProblem::Dma(e.to_string()))
    }

    fn map_dma(&self, iova: u64, pool: &SharedMapping) -> Result<(), VfioProblem> {
        let window = self
            .container
            .map_dma(iova, pool)
            .map_err(|e| VfioProblem::Dma(e.message))?;
        self.windows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(window);
        Ok(())
    }
}

struct SystemPci(railcoll_mem::vfio::VfioPciDevice);

impl VfioPci for SystemPci {
    fn region(&self, index: u32) -> Option<RegionInfo> {
        self.0.region(index)
    }

    fn map_region(&self, index: u32) -> Result<DeviceRegion, VfioProblem> {
        self.0.map_region(index).map_err(|e| VfioProblem::Bar0 {
            device: String::new(),
            what: e.message,
        })
    }

    fn read_region(&self, index: u32, offset: u64, buf: &mut [u8]) {
        self.0.read_region(index, offset, buf);
    }

    fn write_region(&self, index: u32, offset: u64, data: &[u8]) {
        self.0.write_region(index, offset, data);
    }

    fn msix_vectors(&self) -> u32 {
        self.0.msix_vectors()
    }

    fn enable_msix(&self, fds: &[&EventFd]) -> Result<(), VfioProblem> {
        self.0
            .enable_msix(fds)
            .map_err(|e| VfioProblem::Interrupts {
                device: String::new(),
                what: e.message,
            })
    }
}

/// The bytes at the start of the DMA pool that are never handed out.
const FIRST_PAGE: usize = 4096;

/// What [`VfioNode::open`] opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VfioOptions {
    /// One PCI device per rail, in rail order: an address
    /// (`0000:03:00.0`) or a sysfs path.
    pub devices: Vec<String>,
    /// The node's DMA pool, bytes (every rank's arena and control
    /// memory come from it).
    pub dma_bytes: usize,
    /// Where the pool sits in the IOMMU's address space.
    pub iova: u64,
}

impl VfioOptions {
    /// `devices`, a pool of `dma_bytes` at IOVA 4 GiB.
    pub fn new(devices: Vec<String>, dma_bytes: usize) -> Self {
        Self {
            devices,
            dma_bytes,
            iova: 1 << 32,
        }
    }
}

/// The sysfs path of a device named by address or path.
fn sysfs_path(device: &str) -> PathBuf {
    if device.starts_with('/') {
        PathBuf::from(device)
    } else {
        Path::new("/sys/bus/pci/devices").join(device)
    }
}

/// One rail's BAR0.
enum Bar0 {
    /// Mapped into the process.
    Mapped(MappedRegisters),
    /// Reached through the device file.
    Trapped(Arc<dyn VfioPci>),
}

impl RegisterIo for Bar0 {
    fn read(&self, offset: u32) -> u64 {
        match self {
            Bar0::Mapped(m) => m.read(offset),
            Bar0::Trapped(d) => {
                let mut word = [0xff; 8];
                d.read_region(0, u64::from(offset), &mut word);
                u64::from_le_bytes(word)
            }
        }
    }

    fn write(&self, offset: u32, value: u64) {
        match self {
            Bar0::Mapped(m) => m.write(offset, value),
            Bar0::Trapped(d) => d.write_region(0, u64::from(offset), &value.to_le_bytes()),
        }
    }
}

/// A node's NICs on boards behind VFIO, shared by the node's ranks (the
/// threads of this process).
pub struct VfioNode {
    bars: Vec<Bar0>,
    pool: DmaMemory,
    iova: u64,
    next: Mutex<usize>,
    admin: Mutex<()>,
    segments: Mutex<HashMap<u64, SharedMapping>>,
    interrupts: Vec<Arc<EventFd>>,
    // The pool stays mapped through the IOMMU while the container lives
    // (the container's window holds it too); the devices and the
    // container go last.
    _pool_mapping: SharedMapping,
    _devices: Vec<Arc<dyn VfioPci>>,
    _vfio: Box<dyn Vfio>,
}

impl std::fmt::Debug for VfioNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioNode")
            .field("rails", &self.bars.len())
            .field("iova", &self.iova)
            .field("pool", &self.pool.len())
            .finish_non_exhaustive()
    }
}

impl VfioNode {
    /// Open `options.devices` through the kernel's VFIO.
    ///
    /// ```no_run
    /// use railcoll_host::vfio::{VfioNode, VfioOptions};
    /// // Two boards, rails 0 and 1, bound to vfio-pci.
    /// let options = VfioOptions::new(vec!["0000:03:00.0".into(), "0000:04:00.0".into()], 64 << 20);
    /// let node = VfioNode::open(&options)?;
    /// # Ok::<(), railcoll_host::device::DeviceError>(())
    /// ```
    pub fn open(options: &VfioOptions) -> Result<Self, DeviceError> {
        Self::open_with(Box::new(SystemVfio::open()?), options)
    }

    /// Open `options.devices` through `vfio` (the kernel's, or a fake).
    pub fn open_with(vfio: Box<dyn Vfio>, options: &VfioOptions) -> Result<Self, DeviceError> {
        if options.devices.is_empty() {
            return Err(DeviceError::Backend("no devices: one per rail".into()));
        }
        if let Some(twice) = options
            .devices
            .iter()
            .enumerate()
            .find_map(|(i, d)| options.devices[..i].contains(d).then_some(d))
        {
            return Err(DeviceError::Backend(format!(
                "device {twice} named for two rails"
            )));
        }
        let pool_end = u64::try_from(options.dma_bytes)
            .ok()
            .and_then(|len| options.iova.checked_add(len));
        if !options.iova.is_multiple_of(4096) || pool_end.is_none() {
            return Err(VfioProblem::Dma(format!(
                "a pool of {} bytes at IOVA {:#x}: not page-aligned, or past the address space",
                options.dma_bytes, options.iova
            ))
            .into());
        }
        let mut devices: Vec<Arc<dyn VfioPci>> = Vec::new();
        let mut bars = Vec::new();
        for name in &options.devices {
            let device: Arc<dyn VfioPci> = Arc::from(vfio.open_device(&sysfs_path(name))?);
            bars.push(bar0(name, &device)?);
            enable_bus_master(&*device);
            devices.push(device);
        }
        let mapping = vfio.dma_pool(options.dma_bytes)?;
        vfio.map_dma(options.iova, &mapping)?;
        let interrupts: Vec<Arc<EventFd>> = (0..MAX_CONTEXTS)
            .map(|_| EventFd::new().map(Arc::new))
            .collect::<Result<_, _>>()
            .map_err(|e| DeviceError::Backend(format!("an eventfd: {e}")))?;
        for (name, device) in options.devices.iter().zip(&devices) {
            let vectors = (device.msix_vectors() as usize).min(MAX_CONTEXTS);
            if vectors == 0 {
                continue;
            }
            let fds: Vec<&EventFd> = interrupts[..vectors].iter().map(|e| &**e).collect();
            device.enable_msix(&fds).map_err(|p| match p {
                VfioProblem::Interrupts { what, .. } => VfioProblem::Interrupts {
                    device: name.clone(),
                    what,
                },
                other => other,
            })?;
        }
        Ok(Self {
            bars,
            pool: mapping.memory(),
            iova: options.iova,
            // The pool's first page is kept back: no buffer is at IOVA
            // 0 (which the ABI keeps invalid) even in a window at 0.
            next: Mutex::new(FIRST_PAGE),
            admin: Mutex::new(()),
            segments: Mutex::new(HashMap::new()),
            interrupts,
            _pool_mapping: mapping,
            _devices: devices,
            _vfio: vfio,
        })
    }

    /// The wait hook of the rank on context `context`: polls, yields, then
    /// sleeps on the eventfd its MSI-X vector signals, up to `deadline`.
    pub fn wait_hook(&self, context: usize, deadline: Duration) -> Option<Arc<dyn WaitHook>> {
        let interrupt = self.interrupts.get(context)?;
        Some(Arc::new(InterruptWait::new(
            Arc::clone(interrupt),
            deadline,
        )))
    }
}

/// Rail `name`'s BAR0, checked: present, large enough, readable and
/// writable; mapped if VFIO offers that.
fn bar0(name: &str, device: &Arc<dyn VfioPci>) -> Result<Bar0, VfioProblem> {
    let bad = |what: String| VfioProblem::Bar0 {
        device: name.to_string(),
        what,
    };
    let info = device
        .region(0)
        .ok_or_else(|| bad("the device has none".into()))?;
    if info.size < u64::from(BAR0_SIZE) {
        return Err(bad(format!(
            "{} bytes, the registers need {BAR0_SIZE}",
            info.size
        )));
    }
    if !(info.read && info.write) {
        return Err(bad("not both readable and writable".into()));
    }
    // Mapped if VFIO offers it and the mapping works (a BAR whose MSI-X
    // table VFIO keeps back may refuse); else through the device file.
    if info.mmap
        && let Ok(mapping) = device.map_region(0)
        && mapping.len() >= BAR0_SIZE as usize
    {
        return Ok(Bar0::Mapped(MappedRegisters::new(mapping)));
    }
    Ok(Bar0::Trapped(Arc::clone(device)))
}

/// VFIO's index of a PCI device's configuration space.
const CONFIG_REGION: u32 = 7;
/// The command register's offset there, and its memory-space and
/// bus-master bits.
const PCI_COMMAND: u64 = 4;
const COMMAND_MEMORY: u16 = 1 << 1;
const COMMAND_MASTER: u16 = 1 << 2;

/// Let the device reach its BAR and master the bus (its DMA and MSI-X
/// writes): `vfio-pci` leaves bus mastering to the driver.
fn enable_bus_master(device: &dyn VfioPci) {
    let mut command = [0u8; 2];
    device.read_region(CONFIG_REGION, PCI_COMMAND, &mut command);
    let on = u16::from_le_bytes(command) | COMMAND_MEMORY | COMMAND_MASTER;
    device.write_region(CONFIG_REGION, PCI_COMMAND, &on.to_le_bytes());
}

impl Device for VfioNode {
    fn rails(&self) -> usize {
        self.bars.len()
    }

    fn registers(&self, rail: usize) -> Result<&dyn RegisterIo, DeviceError> {
        crate::device::rail_of(&self.bars, rail).map(|b| b as &dyn RegisterIo)
    }

    fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaBuffer, DeviceError> {
        DeviceError::check_alignment(align)?;
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let total = self.pool.len();
        let start = next.checked_next_multiple_of(align).unwrap_or(usize::MAX);
        let out_of_memory = DeviceError::OutOfMemory {
            asked: len,
            free: total.saturating_sub(*next),
        };
        let end = start.checked_add(len).ok_or(out_of_memory.clone())?;
        if end > total {
            return Err(out_of_memory);
        }
        let mem = self.pool.slice(start, len).map_err(|_| out_of_memory)?;
        *next = end;
        Ok(DmaBuffer {
            // Inside the window open_with checked fits the address space.
            phys: self.iova.saturating_add(start as u64),
            mem,
        })
    }

    fn admin_lock(&self) -> Result<AdminGuard<'_>, DeviceError> {
        Ok(AdminGuard::new(
            self.admin.lock().unwrap_or_else(|p| p.into_inner()),
        ))
    }

    fn node_segment(&self, key: u64, len: usize) -> Result<DmaMemory, DeviceError> {
        let mut segments = self.segments.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = segments.get(&key) {
            if s.len() < len {
                return Err(DeviceError::OutOfMemory {
                    asked: len,
                    free: s.len(),
                });
            }
            return Ok(s.memory());
        }
        let mapping = SharedMapping::new(len.max(1))
            .map_err(|e| DeviceError::Backend(format!("a node segment: {e}")))?;
        let memory = mapping.memory();
        segments.insert(key, mapping);
        Ok(memory)
    }

    fn dma_view(&self, phys: u64, len: usize) -> Result<DmaMemory, DeviceError> {
        let outside = || {
            DeviceError::Backend(format!(
                "{len} bytes at {phys:#x} are not in the DMA pool at {:#x}",
                self.iova
            ))
        };
        let offset = phys
            .checked_sub(self.iova)
            .and_then(|o| usize::try_from(o).ok())
            .ok_or_else(outside)?;
        self.pool.slice(offset, len).map_err(|_| outside())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A board at the seam: BAR0 of `bar_size` bytes in memory (mappable
    /// or not), and switches for each step to fail.
    #[derive(Clone, Default)]
    struct Board {
        bar_size: u64,
        mappable: bool,
        readable_only: bool,
        vectors: u32,
        group_fails: bool,
        map_fails: bool,
        dma_fails: bool,
        msix_fails: bool,
    }

    struct FakeSys {
        boards: HashMap<String, Board>,
        bars: Mutex<HashMap<String, SharedMapping>>,
        mapped: Mutex<Vec<(u64, usize)>>,
        commands: Mutex<HashMap<String, Arc<Mutex<u16>>>>,
        board: Board,
    }

    impl FakeSys {
        fn with(names: &[&str], board: Board) -> Self {
            Self {
                boards: names
                    .iter()
                    .map(|n| (n.to_string(), board.clone()))
                    .collect(),
                bars: Mutex::new(HashMap::new()),
                mapped: Mutex::new(Vec::new()),
                commands: Mutex::new(HashMap::new()),
                board,
            }
        }

        fn bar(&self, name: &str) -> SharedMapping {
            let mut bars = self.bars.lock().expect("lock");
            bars.entry(name.to_string())
                .or_insert_with(|| SharedMapping::new(self.board.bar_size as usize).expect("bar"))
                .clone()
        }
    }

    struct FakeDevice {
        board: Board,
        bar: SharedMapping,
        command: Arc<Mutex<u16>>,
    }

    impl Vfio for Arc<FakeSys> {
        fn open_device(&self, sysfs: &Path) -> Result<Box<dyn VfioPci>, VfioProblem> {
            let name = sysfs
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            let Some(board) = self.boards.get(&name) else {
                return Err(VfioProblem::NoDevice {
                    device: name,
                    reason: "no such device in sysfs".into(),
                });
            };
            if board.group_fails {
                return Err(VfioProblem::NoIommuGroup {
                    device: name,
                    reason: "group is not viable".into(),
                });
            }
            let command = Arc::clone(
                self.commands
                    .lock()
                    .expect("lock")
                    .entry(name.clone())
                    .or_default(),
            );
            Ok(Box::new(FakeDevice {
                board: board.clone(),
                bar: self.bar(&name),
                command,
            }))
        }

        fn dma_pool(&self, len: usize) -> Result<SharedMapping, VfioProblem> {
            SharedMapping::new(len).map_err(|e| VfioProblem::Dma(e.to_string()))
        }

        fn map_dma(&self, iova: u64, pool: &SharedMapping) -> Result<(), VfioProblem> {
            if self.board.dma_fails {
                return Err(VfioProblem::Dma("the IOMMU refused".into()));
            }
            self.mapped.lock().expect("lock").push((iova, pool.len()));
            Ok(())
        }
    }

    impl VfioPci for FakeDevice {
        fn region(&self, index: u32) -> Option<RegionInfo> {
            (index == 0 && self.board.bar_size > 0).then_some(RegionInfo {
                size: self.board.bar_size,
                read: true,
                write: !self.board.readable_only,
                mmap: self.board.mappable,
            })
        }
        fn map_region(&self, index: u32) -> Result<DeviceRegion, VfioProblem> {
            if self.board.map_fails || index != 0 {
                return Err(VfioProblem::Bar0 {
                    device: String::new(),
                    what: "the MSI-X table is in the way".into(),
                });
            }
            Ok(DeviceRegion::stand_in(&self.bar))
        }
        fn read_region(&self, index: u32, offset: u64, buf: &mut [u8]) {
            match index {
                0 => {
                    let _ = self.bar.memory().read(offset as usize, buf);
                }
                CONFIG_REGION => {
                    let c = self.command.lock().expect("lock").to_le_bytes();
                    if offset == PCI_COMMAND && buf.len() == 2 {
                        buf.copy_from_slice(&c);
                    }
                }
                _ => buf.fill(0xff),
            }
        }
        fn write_region(&self, index: u32, offset: u64, data: &[u8]) {
            match index {
                0 => {
                    let _ = self.bar.memory().write(offset as usize, data);
                }
                CONFIG_REGION if offset == PCI_COMMAND && data.len() == 2 => {
                    *self.command.lock().expect("lock") = u16::from_le_bytes([data[0], data[1]]);
                }
                _ => panic!("a write to region {index} at {offset:#x}"),
            }
        }
        fn msix_vectors(&self) -> u32 {
            self.board.vectors
        }
        fn enable_msix(&self, fds: &[&EventFd]) -> Result<(), VfioProblem> {
            if self.board.msix_fails {
                return Err(VfioProblem::Interrupts {
                    device: String::new(),
                    what: "VFIO_DEVICE_SET_IRQS refused".into(),
                });
            }
            assert_eq!(fds.len(), (self.board.vectors as usize).min(MAX_CONTEXTS));
            Ok(())
        }
    }

    fn good() -> Board {
        Board {
            bar_size: 4096,
            mappable: true,
            vectors: 2,
            ..Board::default()
        }
    }

    fn open(sys: &Arc<FakeSys>, names: &[&str]) -> Result<VfioNode, DeviceError> {
        let options = VfioOptions::new(names.iter().map(|n| n.to_string()).collect(), 1 << 20);
        VfioNode::open_with(Box::new(Arc::clone(sys)), &options)
    }

    #[test]
    fn registers_reach_the_bar_mapped_or_trapped_and_nothing_beside_them() {
        // Mappable, not mappable, and mappable in name only (trapped).
        for (mappable, map_fails) in [(true, false), (false, false), (true, true)] {
            let sys = Arc::new(FakeSys::with(
                &["0000:03:00.0"],
                Board {
                    mappable,
                    map_fails,
                    ..good()
                },
            ));
            let node = open(&sys, &["0000:03:00.0"]).expect("opens");
            let bar = sys.bar("0000:03:00.0").memory();
            bar.write(0, &[0x5a; 4096]).expect("fill");
            let regs = node.registers(0).expect("rail 0");
            regs.write(0x108, 0x1122_3344_5566_7788);
            let mut around = [0u8; 24];
            bar.read(0x100, &mut around).expect("read");
            assert_eq!(
                &around[8..16],
                &0x1122_3344_5566_7788u64.to_le_bytes(),
                "{mappable}"
            );
            assert!(
                around[..8].iter().chain(&around[16..]).all(|&b| b == 0x5a),
                "{mappable}"
            );
            assert_eq!(regs.read(0x108), 0x1122_3344_5566_7788);
            assert!(matches!(
                node.registers(1),
                Err(DeviceError::NoSuchRail { rail: 1, rails: 1 })
            ));
            let command = *sys.commands.lock().expect("lock")["0000:03:00.0"]
                .lock()
                .expect("lock");
            assert_eq!(command & 0b110, 0b110, "memory space and bus master on");
        }
    }

    #[test]
    fn dma_memory_is_the_pool_at_its_iova() {
        let sys = Arc::new(FakeSys::with(&["a", "b"], good()));
        let node = open(&sys, &["a", "b"]).expect("opens");
        assert_eq!(node.rails(), 2);
        assert_eq!(
            *sys.mapped.lock().expect("lock"),
            vec![(1u64 << 32, 1 << 20)]
        );
        let one = node.alloc_dma(100, 64).expect("alloc");
        let two = node.alloc_dma(100, 4096).expect("alloc");
        assert_eq!(one.phys, (1 << 32) + 4096, "the first page is kept back");
        assert_eq!(two.phys, (1 << 32) + 8192);
        two.mem.write(0, b"board").expect("write");
        let mut seen = [0u8; 5];
        node.dma_view(two.phys, 5)
            .expect("view")
            .read(0, &mut seen)
            .expect("read");
        assert_eq!(&seen, b"board");
        assert!(node.dma_view(0, 5).is_err(), "below the window");
        assert!(
            node.dma_view((1 << 32) + (1 << 20) - 2, 5).is_err(),
            "past its end"
        );
        assert_eq!(
            node.alloc_dma(64, 3).unwrap_err(),
            DeviceError::BadAlignment(3)
        );
        assert!(matches!(
            node.alloc_dma(2 << 20, 8),
            Err(DeviceError::OutOfMemory { .. })
        ));
        assert!(node.wait_hook(0, Duration::from_secs(1)).is_some());
        assert!(
            node.wait_hook(MAX_CONTEXTS, Duration::from_secs(1))
                .is_none()
        );
    }

    #[test]
    fn each_failing_step_is_a_typed_problem_naming_the_device() {
        let cases: [(Board, &str); 6] = [
            (
                Board {
                    bar_size: 0,
                    ..good()
                },
                "BAR0: the device has none",
            ),
            (
                Board {
                    bar_size: 256,
                    ..good()
                },
                "BAR0: 256 bytes",
            ),
            (
                Board {
                    readable_only: true,
                    ..good()
                },
                "not both readable and writable",
            ),
            (
                Board {
                    group_fails: true,
                    ..good()
                },
                "IOMMU group: group is not viable",
            ),
            (
                Board {
                    dma_fails: true,
                    ..good()
                },
                "DMA memory: the IOMMU refused",
            ),
            (
                Board {
                    msix_fails: true,
                    ..good()
                },
                "dev0: interrupts: VFIO_DEVICE_SET_IRQS",
            ),
        ];
        for (board, want) in cases {
            let sys = Arc::new(FakeSys::with(&["dev0"], board));
            let e = open(&sys, &["dev0"]).expect_err(want);
            assert!(matches!(e, DeviceError::Vfio(_)), "{e:?}");
            assert!(e.to_string().contains(want), "{e}");
        }
        let sys = Arc::new(FakeSys::with(&["dev0"], good()));
        let e = open(&sys, &["dev0", "nope"]).expect_err("no such device");
        assert_eq!(
            e,
            DeviceError::Vfio(VfioProblem::NoDevice {
                device: "nope".into(),
                reason: "no such device in sysfs".into()
            })
        );
        assert!(open(&sys, &[]).is_err(), "no devices");
        let e = open(&sys, &["dev0", "dev0"]).expect_err("one device, two rails");
        assert!(e.to_string().contains("two rails"), "{e}");
        for iova in [4095, u64::MAX - 4095] {
            let options = VfioOptions {
                iova,
                ..VfioOptions::new(vec!["dev0".into()], 1 << 20)
            };
            let e = VfioNode::open_with(Box::new(Arc::clone(&sys)), &options).expect_err("iova");
            assert!(e.to_string().contains("not page-aligned"), "{e}");
        }
    }

    /// On a machine without VFIO (CI's), the kernel's backend says so.
    #[test]
    fn without_vfio_the_system_backend_is_a_typed_error() {
        match SystemVfio::open() {
            Err(VfioProblem::NoVfio(why)) => assert!(!why.is_empty()),
            Err(other) => panic!("not a container problem: {other}"),
            Ok(_) => assert!(Path::new("/dev/vfio/vfio").exists()),
        }
    }
}
