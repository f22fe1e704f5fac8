//! `railcoll nicd`: the NICs of a job's nodes in this process, each served
//! as a vfio-user PCI device to rank processes.
//!
//! A [`Nicd`] runs every NIC of its cluster shape as threads mode does
//! (the unmodified firmware on the worker pool, the rails' switches), with
//! two differences: each node's memory and each NIC's register file are
//! memory files, so rank processes can map them; and a NIC's wake-up for a
//! context signals the eventfd the rank of that context handed over
//! (`SET_IRQS`) instead of unparking a thread. The device each socket
//! serves is described in [`railcoll_host::process::nicd`] and
//! docs/abi.md §9.2; the job in the directory's
//! [`railcoll_host::process::nicd::JOB_FILE`].
//!
//! Each NIC's socket takes up to `ranks_per_node` connections at a time,
//! one thread each. A connection that closes (its rank finished, or died)
//! unbinds the interrupts it set and detaches its context, as a kernel
//! driver does when a process that opened the device goes away; a new
//! rank binding the same context waits for that. When the next job's
//! ranks meet at the bootstrap rendezvous, before any allocates, each
//! node's memory goes back to the pool, zeroed. So one `nicd` serves job
//! after job, also after a job that failed.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use railcoll_fw::abi::MAX_CONTEXTS;
use railcoll_fw::abi::error::ErrorCode;
use railcoll_fw::abi::regs::MailboxOp;
use railcoll_host::env::{ParkingWait, Waker};
use railcoll_host::process::nicd::{
    ALIVE_SOCKET, BAR0_REGION, BOOTSTRAP_SOCKET, IRQ_INDEX, JOB_FILE, MEMORY_REGION, NicdJob,
    NodePage, socket_path,
};
use railcoll_host::process::wait::peer_closed;
use railcoll_mem::dma_mem::DmaMemory;
use railcoll_mem::event_fd::EventFd;
use railcoll_mem::mmap::SharedMapping;
use railcoll_mem::record_lock::RecordLock;
use railcoll_mem::regio::RegisterIo;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_MMAP,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE, vfio_region_info,
    vfio_region_sparse_mmap_area,
};
use vfio_user::{
    DmaMapFlags, DmaUnmapFlags, IrqInfo, Server, ServerBackend, ServerRegion, SparseArea,
};

use crate::cluster::{ClusterConfig, EmuError, bring_up, node_memory_len};
use crate::fabric::Here;
use crate::fabric::bootstrap::Bootstrap;
use crate::hw::registers::SharedRegisters;
use crate::threads::nics::{NicPlan, Nics};
use crate::threads::udp::DatagramCounts;

/// A running `nicd`.
#[derive(Debug)]
pub struct Nicd {
    dir: PathBuf,
    stopping: Arc<AtomicBool>,
    /// Each socket.
    listeners: Vec<UnixListener>,
    threads: Vec<JoinHandle<()>>,
    // Dropped after the servers: the NICs, then the files they use.
    nics: Nics,
    _files: Vec<OwnedFd>,
    _memories: Vec<SharedMapping>,
}

fn io(e: std::io::Error) -> EmuError {
    EmuError::Io(e)
}

fn config_error(what: String) -> EmuError {
    EmuError::Config(what)
}

impl Nicd {
    /// Start the NICs of `cfg` (threads mode's NICs; `cfg.mode` only sets
    /// [`ClusterConfig::validate`]'s node limit) and
    /// serve them in `dir`, which must exist and hold no sockets of an
    /// earlier `nicd`. Returns once every socket accepts connections.
    pub fn start(cfg: &ClusterConfig, dir: &Path) -> Result<Self, EmuError> {
        Self::start_on(cfg, dir, None)
    }

    /// [`Nicd::start`] on one host of a fabric (`here`; `None`: every node
    /// here): only that host's nodes' NICs and sockets, the rails' packets
    /// to the other hosts' as datagrams, the bootstrap rendezvous across
    /// hosts ([`crate::fabric`]), and the fabric's packet size.
    pub fn start_on(cfg: &ClusterConfig, dir: &Path, here: Option<Here>) -> Result<Self, EmuError> {
        let shape = cfg.validate()?;
        let (nodes, rails) = (shape.nodes(), cfg.shape.rails);
        let cfg = &ClusterConfig {
            packet_size: here
                .as_ref()
                .map_or(cfg.packet_size, |h| h.fabric().packet_size()),
            ..cfg.clone()
        };
        if let Some(h) = &here {
            h.fabric().check(nodes, rails)?;
        }
        // First, before any NIC work or thread: host 0's bootstrap port
        // is the likeliest thing to be taken already.
        let across = match &here {
            Some(h) => Some(Bootstrap::start(h, job_digest(cfg, h)).map_err(|e| {
                config_error(format!(
                    "cannot serve the bootstrap across hosts at {:?}: {e}",
                    h.fabric().bootstrap_addr()
                ))
            })?),
            None => None,
        };
        let runs = |node: usize| here.as_ref().is_none_or(|h| h.serves(node));
        let memory_len = node_memory_len(cfg) + NodePage::LEN;
        let mut memories = Vec::with_capacity(nodes);
        let mut files = Vec::new();
        let mut memory_fds = Vec::with_capacity(nodes);
        let mut node_states = Vec::with_capacity(nodes);
        for node in 0..nodes {
            // Another host's node has no memory here: a page stands in.
            let len = if runs(node) { memory_len } else { 4096 };
            let (map, fd) =
                SharedMapping::memfd(&format!("railcoll-node{node}"), len).map_err(io)?;
            NodePage::new(map.memory())
                .format()
                .map_err(railcoll_host::Error::from)?;
            memory_fds.push(fd.as_raw_fd());
            node_states.push(Arc::new(NodeState {
                bound: Mutex::new([0; MAX_CONTEXTS]),
                mapping: map.clone(),
                admin: RecordLock::new(fd.try_clone().map_err(io)?),
                tainted: AtomicBool::new(false),
                released: std::sync::Condvar::new(),
            }));
            memories.push(map);
            files.push(fd);
        }
        let views: Arc<[DmaMemory]> = memories.iter().map(SharedMapping::memory).collect();
        // Register files in the order Nics::start makes them: node-major.
        let mut register_fds = Vec::with_capacity(nodes * rails);
        let local_nodes: Vec<usize> = (0..nodes).filter(|&n| runs(n)).collect();
        // The ranks of this host's nodes are processes on its cores.
        let workers = cfg.worker_count(
            local_nodes.len() * cfg.shape.ranks_per_node(),
            local_nodes.len() * rails,
        );
        let plan = NicPlan {
            fabric: here.clone(),
            ..cfg.nic_plan()
        };
        let nics = Nics::start(
            &plan,
            workers,
            views.clone(),
            Instant::now(),
            &mut |notifier| {
                let (regs, fd) = SharedRegisters::in_file(Some(notifier))?;
                register_fds.push(fd);
                Ok(regs)
            },
        )?;
        let wait = ParkingWait::new(64, std::time::Duration::from_micros(50), cfg.wait_timeout);
        for node_regs in &nics.registers {
            // Another host's nodes have none here.
            for (rail, regs) in node_regs.iter().enumerate() {
                bring_up(&**regs, regs, &wait, cfg, rail)?;
            }
        }
        let job = NicdJob {
            nodes,
            ranks_per_node: shape.ranks_per_node(),
            placement: placement_name(shape.topology.placement()).into(),
            sockets: cfg.shape.sockets,
            rails,
            arena_size: cfg.arena_size,
            node_memory: memory_len,
        };
        let text = toml::to_string(&job).map_err(|e| config_error(e.to_string()))?;
        let stopping = Arc::new(AtomicBool::new(false));
        let mut listeners = Vec::new();
        let mut threads = Vec::new();
        for (index, &node) in local_nodes.iter().enumerate() {
            for rail in 0..rails {
                let path = socket_path(dir, node, rail);
                let listener = bind(&path)?;
                let regs_fd = register_fds
                    .get(index * rails + rail)
                    .map(|f| f.as_raw_fd())
                    .ok_or_else(|| config_error("a NIC without a register file".into()))?;
                let regions = regions(regs_fd, memory_fds[node], memory_len);
                let slots = Arc::new(NicSlots::new());
                for _ in 0..shape.ranks_per_node() {
                    let accept = listener.try_clone().map_err(io)?;
                    let backend = NicBackend {
                        registers: Arc::clone(&nics.registers[node][rail]),
                        slots: Arc::clone(&slots),
                        node: Arc::clone(&node_states[node]),
                        memory: views[node].clone(),
                        wakers: nics.wakers[node * MAX_CONTEXTS..(node + 1) * MAX_CONTEXTS]
                            .to_vec(),
                        bound: Vec::new(),
                    };
                    let server = Server::from_owned_fd(
                        OwnedFd::from(accept),
                        false,
                        irqs(),
                        regions.clone(),
                    );
                    let stopping = Arc::clone(&stopping);
                    threads.push(
                        std::thread::Builder::new()
                            .name(format!("nicd-n{node}r{rail}"))
                            .spawn(move || serve(server, backend, &stopping))
                            .map_err(io)?,
                    );
                }
                listeners.push(listener);
            }
        }
        let size = shape.size();
        // Each rank binds its context once on every rail.
        let job = JobNodes {
            nodes: local_nodes
                .iter()
                .map(|&n| Arc::clone(&node_states[n]))
                .collect(),
            connections: shape.ranks_per_node() * rails,
            ranks: (0..size)
                .filter(|&r| shape.topology.locate(r).is_ok_and(|(n, _)| runs(n)))
                .map(|r| r as u64)
                .collect(),
            across,
            timeout: cfg.wait_timeout,
        };
        type Service = Box<dyn Fn(&UnixListener, &AtomicBool) + Send>;
        let services: [(&str, Service); 2] = [
            (
                BOOTSTRAP_SOCKET,
                Box::new(move |l, stop| rendezvous_service(l, size, &job, stop)),
            ),
            (ALIVE_SOCKET, Box::new(hold_connections)),
        ];
        for (name, service) in services {
            let listener = bind(&dir.join(name))?;
            let accept = listener.try_clone().map_err(io)?;
            let stop = Arc::clone(&stopping);
            threads.push(
                std::thread::Builder::new()
                    .name(format!("nicd-{name}"))
                    .spawn(move || service(&accept, &stop))
                    .map_err(io)?,
            );
            listeners.push(listener);
        }
        files.extend(register_fds);
        // Last: the job file says the sockets are there.
        std::fs::write(dir.join(JOB_FILE), text).map_err(io)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            stopping,
            listeners,
            threads,
            nics,
            _files: files,
            _memories: memories,
        })
    }

    /// Each rail's datagrams so far (rails between machines); empty
    /// without a fabric.
    pub fn datagrams(&self) -> Vec<DatagramCounts> {
        self.nics
            .rails
            .iter()
            .filter_map(|r| r.net().map(|n| n.counts.snapshot()))
            .collect()
    }

    /// The directory it serves.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stop serving: no new connections; returns when every connection
    /// has closed (its rank exited).
    pub fn stop(mut self) {
        self.stopping.store(true, Ordering::Release);
        // Every thread blocked in accept returns; a thread still serving
        // a rank returns when that rank closes its connection.
        for listener in &self.listeners {
            let _ = railcoll_mem::event_fd::shutdown_listener(listener);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for listener in &self.listeners {
            if let Ok(addr) = listener.local_addr()
                && let Some(path) = addr.as_pathname()
            {
                let _ = std::fs::remove_file(path);
            }
        }
        let _ = std::fs::remove_file(self.dir.join(JOB_FILE));
        let _ = std::fs::remove_file(self.dir.join(BOOTSTRAP_SOCKET));
        let _ = std::fs::remove_file(self.dir.join(ALIVE_SOCKET));
    }
}

/// A socket at `path` (refused if something is there already).
fn bind(path: &Path) -> Result<UnixListener, EmuError> {
    UnixListener::bind(path)
        .map_err(|e| config_error(format!("cannot serve {}: {e}", path.display())))
}

/// The placement's name, as the job file and `--placement` spell it.
pub fn placement_name(p: railcoll_host::Placement) -> &'static str {
    match p {
        railcoll_host::Placement::Block => "block",
        railcoll_host::Placement::Cyclic => "cyclic",
    }
}

/// Serve connections one after another until the listener is shut.
fn serve(server: Server, mut backend: NicBackend, stopping: &AtomicBool) {
    loop {
        // A connection's end, clean or not (its rank died mid-message, or
        // sent what made the protocol code panic), unbinds its
        // interrupts; the thread then takes the next one.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.run(&mut backend)));
        backend.unbind();
        if stopping.load(Ordering::Acquire) {
            return;
        }
    }
}

/// A job's nodes, as the rendezvous sees them: each node's state, and the
/// connections a whole job holds on one node.
struct JobNodes {
    nodes: Vec<Arc<NodeState>>,
    connections: usize,
    /// The job's ranks on this host (all of them, without a fabric).
    ranks: std::collections::HashSet<u64>,
    /// The rendezvous with the other hosts, once this host's ranks have
    /// met, and how long it may take.
    across: Option<Bootstrap>,
    timeout: std::time::Duration,
}

/// The next connection; `None` once stopping. A failed accept (no
/// descriptors left, a signal) is retried after a pause, not in a spin.
fn next_connection(listener: &UnixListener, stopping: &AtomicBool) -> Option<UnixStream> {
    loop {
        let accepted = listener.accept();
        if stopping.load(Ordering::Acquire) {
            return None;
        }
        match accepted {
            Ok((stream, _)) => return Some(stream),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

/// Hold every connection to the liveness socket open until the stop: a
/// rank reading one finds its end only when this process is gone. Those
/// whose rank has gone are let go at each new connection.
fn hold_connections(listener: &UnixListener, stopping: &AtomicBool) {
    let mut held: Vec<UnixStream> = Vec::new();
    while let Some(stream) = next_connection(listener, stopping) {
        held.retain(|s| !peer_closed(s));
        if stream.set_nonblocking(true).is_ok() {
            held.push(stream);
        }
    }
}

/// The bootstrap rendezvous ([`railcoll_host::process::nicd::rendezvous`]):
/// each epoch's ranks are released together once all `size` arrived, told
/// how many times the epoch was met before; a job's meeting at epoch 0
/// first recycles its nodes' memory ([`NodeState::recycle`]). An arrival
/// whose rank has
/// gone (a job that failed between two epochs) is dropped when the next
/// rank of that epoch arrives, so it never counts for a later job.
fn rendezvous_service(listener: &UnixListener, size: usize, job: &JobNodes, stopping: &AtomicBool) {
    use std::collections::HashMap;
    use std::io::{Read, Write};
    let mut waiting: HashMap<u64, HashMap<u64, UnixStream>> = HashMap::new();
    // How many times each epoch was met: a job's number, for epoch 0.
    let mut met: HashMap<u64, u64> = HashMap::new();
    while let Some(mut stream) = next_connection(listener, stopping) {
        // A client that connects and says nothing must not stall the rest.
        let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(10)));
        let mut message = [0u8; 16];
        if stream.read_exact(&mut message).is_err() {
            continue;
        }
        let word = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&message[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let (epoch, rank) = (word(0), word(8));
        // A rank of another host's, or of no job, is not counted here.
        if rank >= size as u64 || !job.ranks.contains(&rank) {
            continue;
        }
        // Held from now on without blocking reads (the count it gets is 8
        // bytes, which a socket's buffer always takes).
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        let arrived = waiting.entry(epoch).or_default();
        arrived.retain(|_, s| !peer_closed(s));
        arrived.insert(rank, stream);
        if arrived.len() == job.ranks.len()
            && let Some(all) = waiting.remove(&epoch)
        {
            if epoch == 0 {
                // Before any rank of the new job allocates: its nodes'
                // memory starts over.
                for node in &job.nodes {
                    node.recycle(job.connections);
                }
            }
            let count = met.entry(epoch).or_default();
            let answer = match &job.across {
                None => Some(*count),
                // Every host's count is host 0's.
                Some(b) => b.meet(epoch, job.timeout, stopping),
            };
            // A meeting across hosts that failed closes this host's
            // ranks' connections unanswered: their rendezvous fails.
            if let Some(answer) = answer {
                for (_, mut s) in all {
                    let _ = s.write_all(&answer.to_le_bytes());
                }
            }
            *count += 1;
        }
    }
}

/// What every host of a job must agree on: the fabric file, the shape,
/// the arena (a digest, FNV-1a over a line of them, mixed with the
/// fabric's).
fn job_digest(cfg: &ClusterConfig, here: &Here) -> u64 {
    let shape = &cfg.shape;
    let line = format!(
        "{} {} {} {} {:?} {}",
        shape.nodes(),
        shape.ranks_per_node(),
        shape.rails,
        shape.sockets,
        shape.topology.placement(),
        cfg.arena_size
    );
    line.bytes().fold(here.fabric().digest(), |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The device's regions: BAR0 and node memory mappable, the rest absent.
fn regions(registers: i32, memory: i32, memory_len: usize) -> Vec<ServerRegion> {
    let mappable = |index: u32, size: u64, fd: i32| ServerRegion {
        region_info: vfio_region_info {
            argsz: std::mem::size_of::<vfio_region_info>() as u32,
            flags: VFIO_REGION_INFO_FLAG_READ
                | VFIO_REGION_INFO_FLAG_WRITE
                | VFIO_REGION_INFO_FLAG_MMAP,
            index,
            cap_offset: 0,
            size,
            offset: 0,
        },
        // The whole region: the server hands the file over only with a
        // sparse-mmap capability.
        sparse_areas: vec![SparseArea {
            area: vfio_region_sparse_mmap_area { offset: 0, size },
        }],
        mmap_fd: Some(fd),
    };
    (0..VFIO_PCI_NUM_REGIONS)
        .map(|index| match index {
            BAR0_REGION => mappable(index, 4096, registers),
            MEMORY_REGION => mappable(index, memory_len as u64, memory),
            _ => ServerRegion {
                region_info: vfio_region_info {
                    argsz: std::mem::size_of::<vfio_region_info>() as u32,
                    index,
                    ..Default::default()
                },
                sparse_areas: Vec::new(),
                mmap_fd: None,
            },
        })
        .collect()
}

/// The device's interrupts: one MSI-X vector per NIC context.
fn irqs() -> Vec<IrqInfo> {
    (0..VFIO_PCI_NUM_IRQS)
        .map(|index| IrqInfo {
            index,
            flags: if index == IRQ_INDEX {
                VFIO_IRQ_INFO_EVENTFD
            } else {
                0
            },
            count: if index == IRQ_INDEX {
                MAX_CONTEXTS as u32
            } else {
                0
            },
        })
        .collect()
}

/// What the serving threads of one node share: how many connections hold
/// each of its contexts (over all rails), and its memory, handed back to
/// the pool when the next job joins ([`NodeState::recycle`]).
struct NodeState {
    /// Connections that bound an interrupt, by context, over all rails.
    bound: Mutex<[usize; MAX_CONTEXTS]>,
    mapping: SharedMapping,
    /// Serialises `nicd`'s own mailbox calls with the ranks' (the lock
    /// they take: a record lock on the node memory file).
    admin: RecordLock,
    /// A departed rank's context could not be detached: its NIC may
    /// still write into the node's memory, which is then never handed to
    /// another job (the ranks of later jobs see an exhausted pool).
    tainted: AtomicBool,
    /// Signalled when a connection's cleanup is done.
    released: std::sync::Condvar,
}

impl NodeState {
    /// A connection bound `ctx`.
    fn bind(&self, ctx: usize) {
        if let Some(n) = self.lock().get_mut(ctx) {
            *n += 1;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, [usize; MAX_CONTEXTS]> {
        self.bound.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection that bound `ctx` closed, and its context was detached
    /// (`detached`) or not.
    fn release(&self, ctx: usize, detached: bool) {
        if !detached {
            self.tainted.store(true, Ordering::Release);
        }
        if let Some(n) = self.lock().get_mut(ctx) {
            *n = n.saturating_sub(1);
        }
        self.released.notify_all();
    }

    /// A new job has joined (its every rank met at rendezvous 0, before
    /// any of them allocates): once the node's only connections are the
    /// new job's `connections` (every earlier rank's cleaned up, its
    /// context detached), the pool starts over, zeroed. A node where a
    /// departed context could not be detached keeps its memory (the new
    /// job then finds the pool exhausted: a typed error); one whose old
    /// connections are not cleaned up within [`SLOT_WAIT`] is left too.
    fn recycle(&self, connections: usize) {
        let bound = self.lock();
        let (bound, _) = self
            .released
            .wait_timeout_while(bound, SLOT_WAIT, |b| b.iter().sum::<usize>() > connections)
            .unwrap_or_else(|p| p.into_inner());
        if bound.iter().sum::<usize>() > connections || self.tainted.load(Ordering::Acquire) {
            return;
        }
        let page = NodePage::new(self.mapping.memory());
        let used = page.used();
        // Pages go back to the kernel (read as zeros); the node page is
        // written afresh.
        self.mapping.zero(0, used.min(self.mapping.len()));
        let _ = page.format();
    }
}

/// Which of one NIC's contexts a connection holds: a context is bound by
/// one connection at a time, and a new rank's binding waits until the
/// last holder's connection is cleaned up (its context detached), so a
/// job that follows a failed one never finds its context still attached.
struct NicSlots {
    held: Mutex<[bool; MAX_CONTEXTS]>,
    freed: std::sync::Condvar,
}

/// How long a binding waits for a departed rank's cleanup.
const SLOT_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

impl NicSlots {
    fn new() -> Self {
        Self {
            held: Mutex::new([false; MAX_CONTEXTS]),
            freed: std::sync::Condvar::new(),
        }
    }

    /// Take `ctx`, waiting up to [`SLOT_WAIT`] for its last holder's
    /// cleanup; false if it did not end in time.
    fn take(&self, ctx: usize) -> bool {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let (mut held, _) = self
            .freed
            .wait_timeout_while(held, SLOT_WAIT, |h| h.get(ctx).copied().unwrap_or(true))
            .unwrap_or_else(|p| p.into_inner());
        match held.get_mut(ctx) {
            Some(slot) if !*slot => {
                *slot = true;
                true
            }
            _ => false,
        }
    }

    fn free(&self, ctx: usize) {
        if let Some(slot) = self
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(ctx)
        {
            *slot = false;
        }
        self.freed.notify_all();
    }
}

/// How long `nicd` waits for one detach call of a departed rank.
const DETACH_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Detach tries of a context whose DMAs are still draining (as the
/// driver's own detach).
const DETACH_TRIES: u32 = 1 << 16;

/// One connection's view of one NIC.
struct NicBackend {
    registers: Arc<SharedRegisters>,
    slots: Arc<NicSlots>,
    node: Arc<NodeState>,
    memory: DmaMemory,
    /// The node's wakers, by context.
    wakers: Vec<Waker>,
    /// Contexts this connection bound an interrupt to, with it.
    bound: Vec<(usize, Arc<EventFd>)>,
}

fn invalid(what: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, what.into())
}

impl NicBackend {
    /// The connection closed (its rank exited, or died): forget its
    /// interrupts (unless another connection has bound the vector since),
    /// detach its context as the rank's driver would have (unless another
    /// connection holds it now: a rank that exited cleanly detached it
    /// already, and the NIC answers `NoContext`), and give the node's
    /// memory back when it was the node's last connection.
    fn unbind(&mut self) {
        for (ctx, interrupt) in std::mem::take(&mut self.bound) {
            if let Some(w) = self.wakers.get(ctx) {
                w.clear_if(&interrupt);
            }
            // The context is still this connection's (a new rank's
            // binding waits for `free`): detach it under the node's admin
            // lock, as the rank's driver would.
            let detached = match self.node.admin.lock() {
                Ok(_admin) => self.detach(ctx),
                Err(_) => false,
            };
            self.slots.free(ctx);
            self.node.release(ctx, detached);
        }
    }

    /// Detach `ctx` (the caller holds the admin lock): true once the NIC
    /// no longer has it.
    fn detach(&self, ctx: usize) -> bool {
        let wait = ParkingWait::new(64, std::time::Duration::from_micros(50), DETACH_WAIT);
        for _ in 0..DETACH_TRIES {
            let detached = railcoll_host::driver::mailbox_call(
                &*self.registers,
                &wait,
                MailboxOp::DetachContext,
                [ctx as u64, 0, 0, 0],
            );
            match detached {
                Ok(_)
                | Err(railcoll_host::Error::Nic {
                    code: ErrorCode::NoContext,
                    ..
                }) => return true,
                Err(railcoll_host::Error::Nic {
                    code: ErrorCode::Busy,
                    ..
                }) => continue,
                Err(_) => return false,
            }
        }
        false
    }

    /// The one 64-bit register a BAR0 access of `len` bytes at `offset`
    /// names (BAR0 takes aligned 64-bit accesses only).
    fn register(offset: u64, len: usize) -> std::io::Result<u32> {
        u32::try_from(offset)
            .ok()
            .filter(|o| len == 8 && o.is_multiple_of(8))
            .ok_or_else(|| invalid(format!("BAR0 access of {len} bytes at {offset:#x}")))
    }
}

impl ServerBackend for NicBackend {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> std::io::Result<()> {
        match region {
            BAR0_REGION => {
                let value = self.registers.nic_read(Self::register(offset, data.len())?);
                data.copy_from_slice(&value.to_le_bytes());
                Ok(())
            }
            MEMORY_REGION => usize::try_from(offset)
                .ok()
                .and_then(|at| self.memory.read(at, data).ok())
                .ok_or_else(|| invalid("read outside node memory")),
            _ => Err(invalid(format!("region {region} is absent"))),
        }
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> std::io::Result<()> {
        match region {
            BAR0_REGION => {
                let reg = Self::register(offset, data.len())?;
                let mut word = [0u8; 8];
                word.copy_from_slice(data);
                // A host write: stores the register and rings its doorbell.
                RegisterIo::write(&*self.registers, reg, u64::from_le_bytes(word));
                Ok(())
            }
            MEMORY_REGION => usize::try_from(offset)
                .ok()
                .and_then(|at| self.memory.write(at, data).ok())
                .ok_or_else(|| invalid("write outside node memory")),
            _ => Err(invalid(format!("region {region} is absent"))),
        }
    }

    fn dma_map(
        &mut self,
        _flags: DmaMapFlags,
        _offset: u64,
        _address: u64,
        _size: u64,
        _fd: Option<std::fs::File>,
    ) -> std::io::Result<()> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "DMA memory is the node-memory region; DMA_MAP is not taken",
        ))
    }

    fn dma_unmap(
        &mut self,
        _flags: DmaUnmapFlags,
        _address: u64,
        _size: u64,
    ) -> std::io::Result<()> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "no DMA mappings to remove",
        ))
    }

    fn reset(&mut self) -> std::io::Result<()> {
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "the NIC is not resettable by one rank",
        ))
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<std::fs::File>,
    ) -> std::io::Result<()> {
        if index != IRQ_INDEX {
            return Err(invalid(format!("interrupt index {index} has no vectors")));
        }
        let first = start as usize;
        let end = first
            .checked_add(count as usize)
            .filter(|&e| e <= MAX_CONTEXTS)
            .ok_or_else(|| invalid(format!("vectors {start}+{count} of {MAX_CONTEXTS}")))?;
        if flags == VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER {
            if fds.len() != count as usize {
                return Err(invalid(format!("{count} vectors, {} eventfds", fds.len())));
            }
            for (ctx, fd) in (first..end).zip(fds) {
                let interrupt = Arc::new(EventFd::from_owned(OwnedFd::from(fd))?);
                // This connection's own vector again: a new eventfd, the
                // same hold on the context.
                if let Some(held) = self.bound.iter_mut().find(|(c, _)| *c == ctx) {
                    self.wakers[ctx].register_interrupt(Arc::clone(&interrupt));
                    held.1 = interrupt;
                    continue;
                }
                if !self.slots.take(ctx) {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::ResourceBusy,
                        format!("context {ctx} is still held by a departing rank"),
                    ));
                }
                self.wakers[ctx].register_interrupt(Arc::clone(&interrupt));
                self.bound.push((ctx, interrupt));
                self.node.bind(ctx);
            }
            Ok(())
        } else if flags == VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER && count == 0 {
            for (ctx, interrupt) in &self.bound {
                if let Some(w) = self.wakers.get(*ctx) {
                    w.clear_if(interrupt);
                }
            }
            Ok(())
        } else {
            Err(invalid(format!("SET_IRQS flags {flags:#x}")))
        }
    }
}
