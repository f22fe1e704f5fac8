//! The emulator's NICs as boards behind the host's VFIO seam
//! ([`railcoll_host::vfio::Vfio`]): how the VFIO backend
//! ([`railcoll_host::vfio::VfioNode`]) is tested end to end on a machine
//! without an IOMMU or a board.
//!
//! [`EmulatedBoards`] runs a cluster's NICs as threads mode does, and
//! [`EmulatedBoards::vfio`] gives one node's view of them as VFIO would:
//! - each rail's NIC is a PCI device named `emu:n<node>r<rail>`; its
//!   BAR0 is a region the backend cannot map, so every register access
//!   goes through the region's read and write calls, which reach the
//!   NIC's register file (a doorbell written there rings, as on a BAR
//!   that traps);
//! - the DMA pool is the node's memory, which the NICs read and write by
//!   DMA, and it must be mapped at IOVA 0 (the emulated NICs do not
//!   translate addresses);
//! - MSI-X vector `c` of each NIC signals the eventfd given for it when
//!   the NIC wakes context `c`.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use railcoll_fw::abi::MAX_CONTEXTS;
use railcoll_fw::abi::regs::BAR0_SIZE;
use railcoll_host::env::{ParkingWait, Waker};
use railcoll_host::vfio::{RegionInfo, Vfio, VfioOptions, VfioPci, VfioProblem};
use railcoll_mem::dma_mem::DmaMemory;
use railcoll_mem::event_fd::EventFd;
use railcoll_mem::mmap::SharedMapping;
use railcoll_mem::regio::RegisterIo;

use crate::cluster::{ClusterConfig, EmuError, bring_up, node_memory_len};
use crate::hw::registers::SharedRegisters;
use crate::threads::nics::Nics;

/// A cluster's NICs, each node's seen as boards behind VFIO.
#[derive(Debug)]
pub struct EmulatedBoards {
    memories: Vec<SharedMapping>,
    registers: Vec<Vec<Arc<SharedRegisters>>>,
    wakers: Arc<[Waker]>,
    rails: usize,
    // Last: the NICs stop before their memory goes.
    _nics: Nics,
}

impl EmulatedBoards {
    /// Start the NICs of `cfg`'s nodes and rails (threads mode), brought
    /// up as a cluster's are.
    pub fn start(cfg: &ClusterConfig) -> Result<Arc<Self>, EmuError> {
        let shape = cfg.validate()?;
        let (nodes, rails) = (shape.nodes(), cfg.shape.rails);
        let memories: Vec<SharedMapping> = (0..nodes)
            .map(|_| SharedMapping::new(node_memory_len(cfg)))
            .collect::<Result<_, _>>()?;
        let views: Arc<[DmaMemory]> = memories.iter().map(SharedMapping::memory).collect();
        // The device's users: one thread or process per rank.
        let workers = cfg.worker_count(shape.size(), nodes * rails);
        let nics = Nics::start(
            &cfg.nic_plan(),
            workers,
            views,
            Instant::now(),
            &mut |notifier| SharedRegisters::new(Some(notifier)),
        )?;
        let wait = ParkingWait::new(64, std::time::Duration::from_micros(50), cfg.wait_timeout);
        for node_regs in &nics.registers {
            for (rail, regs) in node_regs.iter().enumerate() {
                bring_up(&**regs, regs, &wait, cfg, rail)?;
            }
        }
        Ok(Arc::new(Self {
            memories,
            registers: nics.registers.clone(),
            wakers: Arc::clone(&nics.wakers),
            rails,
            _nics: nics,
        }))
    }

    /// Node `node`'s NICs as VFIO shows them.
    pub fn vfio(self: &Arc<Self>, node: usize) -> FakeVfio {
        FakeVfio {
            boards: Arc::clone(self),
            node,
        }
    }

    /// What opens node `node`'s NICs: its devices, its whole memory as
    /// the pool, at IOVA 0.
    pub fn options(&self, node: usize) -> VfioOptions {
        VfioOptions {
            devices: (0..self.rails)
                .map(|rail| format!("emu:n{node}r{rail}"))
                .collect(),
            dma_bytes: self.memories.get(node).map_or(0, SharedMapping::len),
            iova: 0,
        }
    }
}

/// One node's NICs behind the VFIO seam.
#[derive(Debug)]
pub struct FakeVfio {
    boards: Arc<EmulatedBoards>,
    node: usize,
}

impl Vfio for FakeVfio {
    fn open_device(&self, sysfs: &Path) -> Result<Box<dyn VfioPci>, VfioProblem> {
        let name = sysfs
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let rail = name
            .strip_prefix(&format!("emu:n{}r", self.node))
            .and_then(|r| r.parse::<usize>().ok());
        let regs = rail.and_then(|r| self.boards.registers.get(self.node)?.get(r));
        let Some(regs) = regs else {
            return Err(VfioProblem::NoDevice {
                device: sysfs.display().to_string(),
                reason: format!("node {} has no such NIC", self.node),
            });
        };
        Ok(Box::new(FakePci {
            regs: Arc::clone(regs),
            wakers: (0..MAX_CONTEXTS)
                .filter_map(|c| {
                    self.boards
                        .wakers
                        .get(self.node * MAX_CONTEXTS + c)
                        .cloned()
                })
                .collect(),
            bound: Mutex::new(Vec::new()),
        }))
    }

    fn dma_pool(&self, len: usize) -> Result<SharedMapping, VfioProblem> {
        match self.boards.memories.get(self.node) {
            Some(m) if len <= m.len() => Ok(m.clone()),
            _ => Err(VfioProblem::Dma(format!(
                "node {} has no {len}-byte memory",
                self.node
            ))),
        }
    }

    fn map_dma(&self, iova: u64, pool: &SharedMapping) -> Result<(), VfioProblem> {
        let own = self.boards.memories.get(self.node);
        if iova != 0 || own.is_none_or(|m| m.raw_base() != pool.raw_base()) {
            return Err(VfioProblem::Dma(
                "the emulated NICs reach their node's memory at IOVA 0 only".into(),
            ));
        }
        Ok(())
    }
}

/// One emulated NIC as a PCI device.
struct FakePci {
    regs: Arc<SharedRegisters>,
    wakers: Vec<Waker>,
    bound: Mutex<Vec<Arc<EventFd>>>,
}

impl VfioPci for FakePci {
    fn region(&self, index: u32) -> Option<RegionInfo> {
        (index == 0).then_some(RegionInfo {
            size: u64::from(BAR0_SIZE).next_multiple_of(4096),
            read: true,
            write: true,
            mmap: false,
        })
    }

    fn map_region(&self, _: u32) -> Result<railcoll_mem::regio::DeviceRegion, VfioProblem> {
        Err(VfioProblem::Bar0 {
            device: String::new(),
            what: "not mappable".into(),
        })
    }

    fn read_region(&self, index: u32, offset: u64, buf: &mut [u8]) {
        if index == 0
            && let (Ok(offset), Ok(word)) = (u32::try_from(offset), <&mut [u8; 8]>::try_from(buf))
        {
            *word = self.regs.read(offset).to_le_bytes();
        }
    }

    fn write_region(&self, index: u32, offset: u64, data: &[u8]) {
        // Configuration space (the command register's bus-master bit, for
        // one) has nothing behind it in the emulator.
        if index == 0
            && let (Ok(offset), Ok(word)) = (u32::try_from(offset), <[u8; 8]>::try_from(data))
        {
            self.regs.write(offset, u64::from_le_bytes(word));
        }
    }

    fn msix_vectors(&self) -> u32 {
        self.wakers.len() as u32
    }

    fn enable_msix(&self, fds: &[&EventFd]) -> Result<(), VfioProblem> {
        let mut bound = self.bound.lock().unwrap_or_else(|p| p.into_inner());
        for (waker, fd) in self.wakers.iter().zip(fds) {
            let own = fd
                .as_fd()
                .try_clone_to_owned()
                .and_then(EventFd::from_owned)
                .map_err(|e| VfioProblem::Interrupts {
                    device: String::new(),
                    what: e.to_string(),
                })?;
            let own = Arc::new(own);
            waker.register_interrupt(Arc::clone(&own));
            bound.push(own);
        }
        Ok(())
    }
}

/// Run `f` as every rank of `shape`, each a thread of this process with
/// its communicator (`arena_size` bytes of arena) over its node's
/// [`VfioNode`](railcoll_host::vfio::VfioNode), `nodes[n]` for node `n`
/// (boards behind the kernel's VFIO, or [`EmulatedBoards`] behind the
/// fake): how a board's ranks run, a VFIO group having one owner.
/// Results in rank order.
pub fn run_ranks<R: Send>(
    nodes: &[Arc<railcoll_host::vfio::VfioNode>],
    shape: railcoll_host::Shape,
    arena_size: usize,
    wait_timeout: std::time::Duration,
    f: &(dyn Fn(&railcoll_host::Comm) -> R + Sync),
) -> Vec<Result<R, railcoll_host::Error>> {
    use railcoll_host::device::{Device, DeviceError};
    let tuning = Arc::new(railcoll_host::sched::tuning::TuningTable::builtin());
    // Every rank attaches before any sends (a put to a context not yet
    // attached fails with NoContext): they meet once all have tried.
    let attached = std::sync::Barrier::new(shape.size());
    let failed = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let joins: Vec<_> = (0..shape.size())
            .map(|rank| {
                let tuning = Arc::clone(&tuning);
                let (attached, failed) = (&attached, &failed);
                s.spawn(move || {
                    let comm = (|| {
                        let (node, local) = shape.topology.locate(rank)?;
                        let board = nodes.get(node).ok_or_else(|| {
                            DeviceError::Backend(format!("no board for node {node}"))
                        })?;
                        let wait = board.wait_hook(local, wait_timeout).ok_or_else(|| {
                            DeviceError::Backend(format!("no context {local} on the board"))
                        })?;
                        let device: Arc<dyn Device> = board.clone();
                        let cfg = railcoll_host::CommConfig {
                            arena_size,
                            ..railcoll_host::CommConfig::new(shape, rank)
                        };
                        railcoll_host::Comm::new(cfg, tuning, device, wait)
                    })();
                    if comm.is_err() {
                        failed.store(true, std::sync::atomic::Ordering::Release);
                    }
                    attached.wait();
                    let comm = comm?;
                    if failed.load(std::sync::atomic::Ordering::Acquire) {
                        return Err(railcoll_host::Error::Config(
                            "another rank could not attach".into(),
                        ));
                    }
                    Ok(f(&comm))
                })
            })
            .collect();
        joins
            .into_iter()
            .map(|j| {
                j.join()
                    .unwrap_or_else(|_| Err(railcoll_host::Error::Config("a rank panicked".into())))
            })
            .collect()
    })
}
