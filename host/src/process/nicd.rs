//! A node's NICs served by `railcoll nicd` over vfio-user: the client
//! backend of a rank that is a process of its own.
//!
//! `railcoll nicd` runs the NICs of a job's nodes and serves each NIC as a
//! vfio-user PCI device on the Unix socket [`socket_path`]`(dir, node,
//! rail)`, and describes the job in [`JOB_FILE`]. Each rank process
//! connects to every rail of its node ([`connect`]); the device it gets is
//! the same [`Device`] the emulator's ranks use, so the host library above
//! it does not know it is in another process.
//!
//! The device, as a vfio-user client sees it (docs/abi.md §9.2):
//!
//! - region [`BAR0_REGION`]: BAR0 exactly as docs/abi.md §2 specifies it,
//!   mappable (its memory file comes with the region's sparse-mmap
//!   capability). Reads and ordinary writes go to the mapping; writes to
//!   a doorbell ([`regs::is_doorbell`]) go as `REGION_WRITE` messages,
//!   because a write into a mapping rings nothing;
//! - region [`MEMORY_REGION`]: the node's host memory, mappable, shared by
//!   the node's ranks and its NICs: the DMA pool, addressed by offset (the
//!   "physical" address the NICs use). Its first page is the node page
//!   ([`NodePage`]): the pool's allocation pointer and the node segments'
//!   table, which the node's processes share;
//! - interrupt index [`IRQ_INDEX`] (MSI-X), one vector per NIC context:
//!   each rank hands over one eventfd for its context (its local rank) with
//!   `SET_IRQS`, and the NICs signal it when they wake the context.
//!
//! The node's admin mailbox is serialised across its processes by a POSIX
//! record lock on the node memory file ([`railcoll_mem::record_lock`]),
//! which the kernel releases if a rank dies holding it.

use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use railcoll_fw::abi::regs;
use railcoll_mem::dma_mem::DmaMemory;
use railcoll_mem::event_fd::EventFd;
use railcoll_mem::mmap::SharedMapping;
use railcoll_mem::record_lock::RecordLock;
use railcoll_mem::regio::RegisterIo;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_BAR0_REGION_INDEX,
    VFIO_PCI_BAR1_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
};

use crate::device::{AdminGuard, Device, DeviceError, DmaBuffer};
use crate::launch::Launched;
use crate::process::wait::{InterruptWait, Liveness};
use crate::topology::{Placement, Shape};

/// The BAR0 region.
pub const BAR0_REGION: u32 = VFIO_PCI_BAR0_REGION_INDEX;
/// The node-memory region.
pub const MEMORY_REGION: u32 = VFIO_PCI_BAR1_REGION_INDEX;
/// The interrupt index whose vector `c` wakes NIC context `c`.
pub const IRQ_INDEX: u32 = VFIO_PCI_MSIX_IRQ_INDEX;
/// The job description `nicd` writes into its directory.
pub const JOB_FILE: &str = "job.toml";
/// The socket of `nicd`'s bootstrap rendezvous ([`rendezvous`]).
pub const BOOTSTRAP_SOCKET: &str = "bootstrap.sock";
/// The socket whose connections `nicd` holds open for as long as it runs:
/// a rank's [`Liveness`] reads one to learn that its NICs are gone.
pub const ALIVE_SOCKET: &str = "alive.sock";

/// The job's bootstrap rendezvous, what `PMI_Barrier` is to `MPI_Init`:
/// returns once every rank of the job has called it with the same
/// `epoch`, with the number of times that epoch was met before on this
/// `nicd` (the same on every rank). [`Job::join`](crate::process::Job::join)
/// meets at epoch 0 (its count numbers the job's communicator, so that a
/// `nicd` serving one job after another never sees a communicator
/// instance twice: docs/abi.md §4.5) and at epoch 1 after attaching (no
/// rank addresses a peer before the peer's context is attached on every
/// rail); [`finish`](crate::process::Job::finish) meets at epoch 2
/// before detaching.
///
/// The protocol, on [`BOOTSTRAP_SOCKET`]: the rank connects, sends its
/// epoch and rank (two little-endian `u64`), and reads one little-endian
/// `u64`, the count, which `nicd` sends to every rank of the epoch once
/// the last one arrived. A rank that dies before arriving leaves the
/// others waiting: they give up after `timeout` with
/// [`DeviceError::Backend`].
pub fn rendezvous(
    dir: &Path,
    epoch: u64,
    rank: usize,
    timeout: Duration,
) -> Result<u64, DeviceError> {
    use std::io::{Read, Write};
    let path = dir.join(BOOTSTRAP_SOCKET);
    let fail = |what: &str, e: std::io::Error| {
        DeviceError::Backend(format!("bootstrap rendezvous {epoch} ({what}): {e}"))
    };
    let mut stream =
        std::os::unix::net::UnixStream::connect(&path).map_err(|e| DeviceError::Connect {
            what: path.display().to_string(),
            reason: e.to_string(),
        })?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| fail("timeout", e))?;
    let mut message = [0u8; 16];
    message[..8].copy_from_slice(&epoch.to_le_bytes());
    message[8..].copy_from_slice(&(rank as u64).to_le_bytes());
    stream.write_all(&message).map_err(|e| fail("arrive", e))?;
    let mut count = [0u8; 8];
    stream.read_exact(&mut count).map_err(|e| match e.kind() {
        // nicd ended the meeting unanswered: on a fabric, another host's
        // ranks did not all come (or its nicd is gone).
        std::io::ErrorKind::UnexpectedEof => DeviceError::Backend(format!(
            "bootstrap rendezvous {epoch}: the nicd ended it unanswered \
             (ranks of another host never came)"
        )),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            DeviceError::Backend(format!(
                "bootstrap rendezvous {epoch}: no answer within {timeout:?} \
                 (ranks of the job never came)"
            ))
        }
        _ => fail("waiting for the other ranks", e),
    })?;
    Ok(u64::from_le_bytes(count))
}

/// The socket of node `node`'s NIC on rail `rail`.
pub fn socket_path(dir: &Path, node: usize, rail: usize) -> PathBuf {
    dir.join(format!("n{node}-r{rail}.sock"))
}

/// The job a `nicd` serves, as it writes it into [`JOB_FILE`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NicdJob {
    /// Nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub ranks_per_node: usize,
    /// `block` or `cyclic`.
    pub placement: String,
    /// Sockets per node.
    pub sockets: usize,
    /// Rails (NICs per node).
    pub rails: usize,
    /// Each rank's symmetric arena, bytes.
    pub arena_size: usize,
    /// Bytes of each node's memory region.
    pub node_memory: usize,
}

impl NicdJob {
    /// The job's shape.
    pub fn shape(&self) -> Result<Shape, DeviceError> {
        let bad = |e: String| DeviceError::Backend(format!("{JOB_FILE}: {e}"));
        let placement: Placement = self.placement.parse().map_err(bad)?;
        Shape::new(
            self.nodes,
            self.ranks_per_node,
            self.sockets,
            self.rails,
            placement,
        )
        .map_err(|e| bad(e.to_string()))
    }

    /// Read `dir`'s job file.
    pub fn read(dir: &Path) -> Result<Self, DeviceError> {
        let path = dir.join(JOB_FILE);
        let text = std::fs::read_to_string(&path).map_err(|e| DeviceError::Connect {
            what: path.display().to_string(),
            reason: format!("{e} (is `railcoll nicd` serving this directory?)"),
        })?;
        toml::from_str(&text).map_err(|e| {
            DeviceError::Backend(format!("{}: not a nicd job file: {e}", path.display()))
        })
    }
}

/// The node page: the first page of a node's memory, which no allocation
/// uses (physical address 0 is never valid).
///
/// | offset | word |
/// |---|---|
/// | `0x00` | [`NodePage::MAGIC`], written by `nicd` |
/// | `0x08` | the next free byte of the pool (bump pointer) |
/// | `0x40 + 32 i` | segment `i`: used (1), key, physical address, length |
#[derive(Clone, Debug)]
pub struct NodePage {
    memory: DmaMemory,
}

impl NodePage {
    /// Marks a node memory `nicd` prepared.
    pub const MAGIC: u64 = u64::from_le_bytes(*b"RCNODE01");
    /// Bytes of the page.
    pub const LEN: usize = 4096;
    /// Node segments a node can hold.
    pub const SEGMENTS: usize = 64;
    const NEXT: usize = 0x08;
    const TABLE: usize = 0x40;

    /// The page of `memory` (a whole node memory).
    pub fn new(memory: DmaMemory) -> Self {
        Self { memory }
    }

    /// Prepare a fresh node memory: the magic word and an empty pool.
    pub fn format(&self) -> Result<(), DeviceError> {
        let fail = |_| DeviceError::Backend("node memory shorter than its page".into());
        self.memory
            .store_u64(Self::NEXT, Self::LEN as u64, Ordering::Relaxed)
            .map_err(fail)?;
        self.memory
            .store_u64(0, Self::MAGIC, Ordering::Release)
            .map_err(fail)
    }

    /// Bytes of the memory the pool has handed out (the page included):
    /// what must be zeroed before the pool starts over.
    pub fn used(&self) -> usize {
        self.memory
            .load_u64(Self::NEXT, Ordering::Acquire)
            .map_or(self.memory.len(), |n| n as usize)
            .min(self.memory.len())
    }

    /// Was it prepared by `nicd`?
    pub fn formatted(&self) -> bool {
        self.memory.load_u64(0, Ordering::Acquire) == Ok(Self::MAGIC)
    }

    /// Allocate `len` zeroed bytes aligned to `align` from the pool, for
    /// any process of the node (lock-free; the pool never shrinks, and its
    /// memory starts zeroed, so nothing handed out was used before).
    pub fn alloc(&self, len: usize, align: usize) -> Result<DmaBuffer, DeviceError> {
        DeviceError::check_alignment(align)?;
        let size = self.memory.len();
        let reserve = len.checked_add(align - 1).ok_or(DeviceError::OutOfMemory {
            asked: len,
            free: 0,
        })?;
        let start = self
            .memory
            .fetch_add_u64(Self::NEXT, reserve as u64, Ordering::AcqRel)
            .map_err(|_| DeviceError::Backend("node page unreadable".into()))?
            as usize;
        let free = size.saturating_sub(start);
        let phys = start.next_multiple_of(align);
        let mem = phys
            .checked_add(len)
            .filter(|&end| end <= size)
            .and_then(|_| self.memory.slice(phys, len).ok())
            .ok_or(DeviceError::OutOfMemory { asked: len, free })?;
        Ok(DmaBuffer {
            phys: phys as u64,
            mem,
        })
    }

    /// The segment `key`, made of `len` zeroed bytes by the first caller
    /// of the node. The caller holds the node's admin lock.
    pub fn segment(&self, key: u64, len: usize) -> Result<DmaMemory, DeviceError> {
        let word = |i: usize, w: usize| Self::TABLE + 32 * i + 8 * w;
        let load = |at| self.memory.load_u64(at, Ordering::Acquire).unwrap_or(0);
        for i in 0..Self::SEGMENTS {
            if load(word(i, 0)) == 0 {
                let buffer = self.alloc(len, 4096)?;
                let store = |w, v| self.memory.store_u64(word(i, w), v, Ordering::Relaxed);
                let stored = [store(1, key), store(2, buffer.phys), store(3, len as u64)];
                if stored.iter().any(Result::is_err) {
                    return Err(DeviceError::Backend("node page unwritable".into()));
                }
                let _ = self.memory.store_u64(word(i, 0), 1, Ordering::Release);
                return Ok(buffer.mem);
            }
            if load(word(i, 1)) == key {
                let (phys, have) = (load(word(i, 2)) as usize, load(word(i, 3)) as usize);
                if have < len {
                    return Err(DeviceError::OutOfMemory {
                        asked: len,
                        free: have,
                    });
                }
                return self.memory.slice(phys, have).map_err(|_| {
                    DeviceError::Backend(format!("segment {key:#x} outside node memory"))
                });
            }
        }
        Err(DeviceError::Backend(format!(
            "the node page holds {} segments: no room for {key:#x}",
            Self::SEGMENTS
        )))
    }
}

/// One rail's NIC: the vfio-user connection and the mapped BAR0.
struct RailPort {
    client: Mutex<vfio_user::Client>,
    bar: DmaMemory,
    _mapping: SharedMapping,
    liveness: Arc<Liveness>,
}

impl RegisterIo for RailPort {
    /// All ones once the device is gone, as a PCI read of a removed
    /// device returns (what a driver checks for surprise removal).
    fn read(&self, offset: u32) -> u64 {
        if self.liveness.seen_lost() {
            return u64::MAX;
        }
        self.bar
            .load_u64(offset as usize, Ordering::Acquire)
            .unwrap_or(u64::MAX)
    }

    fn write(&self, offset: u32, value: u64) {
        if self.liveness.seen_lost() {
            return;
        }
        if !regs::is_doorbell(offset) {
            let _ = self
                .bar
                .store_u64(offset as usize, value, Ordering::Release);
            return;
        }
        // A doorbell the server cannot take (nicd gone) rings nothing: the
        // caller's wait for its effect ends in a timeout, as it would with
        // a NIC that fell off the bus.
        let mut client = self.client.lock().unwrap_or_else(|p| p.into_inner());
        if client
            .region_write(BAR0_REGION, u64::from(offset), &value.to_le_bytes())
            .is_err()
        {
            self.liveness.mark_lost();
        }
    }
}

/// A node's NICs behind `nicd`, as one rank process sees them.
pub struct VfioUserDevice {
    ports: Vec<RailPort>,
    page: NodePage,
    memory: DmaMemory,
    _memory_mapping: SharedMapping,
    lock: RecordLock,
}

impl std::fmt::Debug for VfioUserDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioUserDevice")
            .field("rails", &self.ports.len())
            .field("memory", &self.memory.len())
            .finish_non_exhaustive()
    }
}

impl Device for VfioUserDevice {
    fn rails(&self) -> usize {
        self.ports.len()
    }

    fn registers(&self, rail: usize) -> Result<&dyn RegisterIo, DeviceError> {
        crate::device::rail_of(&self.ports, rail).map(|p| p as &dyn RegisterIo)
    }

    fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaBuffer, DeviceError> {
        self.page.alloc(len, align)
    }

    fn admin_lock(&self) -> Result<AdminGuard<'_>, DeviceError> {
        let guard = self
            .lock
            .lock()
            .map_err(|e| DeviceError::Backend(format!("the node's admin lock: {e}")))?;
        Ok(AdminGuard::new(guard))
    }

    fn node_segment(&self, key: u64, len: usize) -> Result<DmaMemory, DeviceError> {
        let _admin = self.admin_lock()?;
        self.page.segment(key, len)
    }

    fn dma_view(&self, phys: u64, len: usize) -> Result<DmaMemory, DeviceError> {
        usize::try_from(phys)
            .ok()
            .filter(|&p| p >= NodePage::LEN)
            .and_then(|p| self.memory.slice(p, len).ok())
            .ok_or_else(|| {
                DeviceError::Backend(format!("no DMA memory at {phys:#x} + {len} on this node"))
            })
    }
}

/// What [`connect`] gives a rank process: its node's device, its wait
/// hook (on the interrupt eventfd every rail's NIC signals), and the
/// job's shape.
#[derive(Debug)]
pub struct Connection {
    /// The node's NICs.
    pub device: Arc<VfioUserDevice>,
    /// The rank's wait hook.
    pub wait: Arc<InterruptWait>,
    /// The job's shape, as `nicd` serves it.
    pub shape: Shape,
    /// The job description.
    pub job: NicdJob,
    /// This process's rank.
    pub rank: usize,
}

fn region_file(
    client: &vfio_user::Client,
    index: u32,
    what: &str,
) -> Result<(std::fs::File, usize), DeviceError> {
    let bad = |why: &str| DeviceError::Backend(format!("nicd's {what} region: {why}"));
    let region = client.region(index).ok_or_else(|| bad("absent"))?;
    let file = region
        .file_offset
        .as_ref()
        .ok_or_else(|| bad("not mappable"))?;
    if file.start() != 0 {
        return Err(bad("not at offset 0 of its file"));
    }
    let len = usize::try_from(region.size).map_err(|_| bad("too large"))?;
    let file = file
        .file()
        .try_clone()
        .map_err(|e| bad(&format!("dup: {e}")))?;
    Ok((file, len))
}

/// Connect this process (`launched`) to its node's NICs under the `nicd`
/// serving `dir`, and hand each rail's NIC this rank's interrupt eventfd.
///
/// Contract: the launcher's job must be the one `nicd` serves (same
/// nodes, ranks per node and placement), else a typed
/// [`DeviceError::Backend`] says how they differ; a `nicd` that is not
/// there is [`DeviceError::Connect`]. Waits give up after `wait_timeout`.
pub fn connect(
    dir: &Path,
    launched: &Launched,
    wait_timeout: Duration,
) -> Result<Connection, DeviceError> {
    let job = NicdJob::read(dir)?;
    let shape = job.shape()?;
    let topology = shape.topology;
    let (rank, local) = (launched.rank, launched.local_rank);
    // The launcher's numbers must place this process where nicd's job
    // does (its node index, where the launcher gives one): one process's
    // variables cannot tell block from cyclic placement, the job can.
    let placed = topology.locate(rank).ok();
    let node = match placed {
        Some((node, l))
            if launched.size == topology.size()
                && launched.local_size == topology.ranks_per_node()
                && l == local
                && launched.node.is_none_or(|n| n == node) =>
        {
            node
        }
        _ => {
            return Err(DeviceError::Backend(format!(
                "the launcher's process (rank {rank} of {}, local rank {local} of {}, node {:?}) \
                 is not one of the job nicd serves ({} nodes x {} ranks, {:?} placement)",
                launched.size,
                launched.local_size,
                launched.node,
                topology.nodes(),
                topology.ranks_per_node(),
                topology.placement()
            )));
        }
    };
    let interrupt = Arc::new(EventFd::new().map_err(|e| DeviceError::Backend(e.to_string()))?);
    let alive = dir.join(ALIVE_SOCKET);
    let liveness = std::os::unix::net::UnixStream::connect(&alive)
        .and_then(Liveness::new)
        .map(Arc::new)
        .map_err(|e| DeviceError::Connect {
            what: alive.display().to_string(),
            reason: e.to_string(),
        })?;
    let mut ports = Vec::with_capacity(shape.rails);
    let mut memory = None;
    for rail in 0..shape.rails {
        let path = socket_path(dir, node, rail);
        let mut client = vfio_user::Client::new(&path).map_err(|e| DeviceError::Connect {
            what: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let (bar_file, bar_len) = region_file(&client, BAR0_REGION, "BAR0")?;
        let mapping = SharedMapping::from_fd(bar_file.as_fd(), bar_len)
            .map_err(|e| DeviceError::Backend(format!("mapping BAR0: {e}")))?;
        if memory.is_none() {
            memory = Some(region_file(&client, MEMORY_REGION, "node memory")?);
        }
        let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        client
            .set_irqs(
                IRQ_INDEX,
                flags,
                local as u32,
                1,
                &[interrupt.as_fd().as_raw_fd()],
            )
            .map_err(|e| DeviceError::Backend(format!("SET_IRQS on rail {rail}: {e}")))?;
        ports.push(RailPort {
            client: Mutex::new(client),
            bar: mapping.memory(),
            _mapping: mapping,
            liveness: Arc::clone(&liveness),
        });
    }
    let (memory_file, memory_len) =
        memory.ok_or_else(|| DeviceError::Backend("a job of no rails".into()))?;
    let memory_mapping = SharedMapping::from_fd(memory_file.as_fd(), memory_len)
        .map_err(|e| DeviceError::Backend(format!("mapping node memory: {e}")))?;
    let page = NodePage::new(memory_mapping.memory());
    if !page.formatted() {
        return Err(DeviceError::Backend(
            "node memory was not prepared by nicd".into(),
        ));
    }
    let device = VfioUserDevice {
        ports,
        page,
        memory: memory_mapping.memory(),
        _memory_mapping: memory_mapping,
        lock: RecordLock::new(memory_file.into()),
    };
    Ok(Connection {
        device: Arc::new(device),
        wait: Arc::new(InterruptWait::new(interrupt, wait_timeout).watching(liveness)),
        shape,
        job,
        rank,
    })
}
