//! The NIC side of threads mode: every NIC of a cluster running the
//! unmodified firmware on the worker pool, its rails' switches, its
//! register files and the host wakers its interrupts reach. Shared by an
//! in-process [`crate::Cluster`] (whose ranks are threads) and
//! `railcoll nicd` (whose ranks are processes, reaching the register
//! files and node memories as mapped files): the two differ only in
//! where node memory and register files live.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use railcoll_fw::abi::MAX_CONTEXTS;
use railcoll_fw::engine::{Engine, Location};
use railcoll_host::env::Waker;
use railcoll_mem::dma_mem::DmaMemory;

use crate::fabric::Here;
use crate::hw::faults::{FaultSpec, RailFaults};
use crate::hw::notify::Notifier;
use crate::hw::registers::SharedRegisters;
use crate::threads::board::EmuBoard;
use crate::threads::rail::Rail;
use crate::threads::udp::{RailNet, Receivers};
use crate::threads::worker::{EngineFactory, WorkerPool};
use crate::timeline::Timeline;

/// What the NICs are: how many, and what goes wrong on their rails.
#[derive(Clone, Debug)]
pub struct NicPlan {
    /// Nodes.
    pub nodes: usize,
    /// Rails (NICs per node).
    pub rails: usize,
    /// Faults on the rails.
    pub faults: Arc<FaultSpec>,
    /// The seed the faults draw from.
    pub seed: u64,
    /// The host these NICs are on, when the job's nodes are on several
    /// ([`crate::fabric`]): only its nodes' NICs run here, and the rails
    /// reach the others by datagram.
    pub fabric: Option<Here>,
}

impl NicPlan {
    /// Do this process's NICs include node `node`'s?
    pub fn runs(&self, node: usize) -> bool {
        self.fabric.as_ref().is_none_or(|h| h.serves(node))
    }
}

/// A cluster's running NICs.
#[derive(Debug)]
pub struct Nics {
    /// Host wakers, `node * MAX_CONTEXTS + context`: what a NIC's
    /// interrupt for a context reaches.
    pub wakers: Arc<[Waker]>,
    /// Where boards report once the cluster is traced.
    pub timeline: Arc<OnceLock<Arc<Timeline>>>,
    /// The rails, by index.
    pub rails: Vec<Arc<Rail>>,
    /// Register files, `[node][rail]`.
    pub registers: Vec<Vec<Arc<SharedRegisters>>>,
    /// The worker threads (dropping it stops the NICs).
    pub pool: WorkerPool,
    /// The rails' receive threads, for rails across hosts.
    pub receivers: Option<Receivers>,
}

impl Nics {
    /// Start every NIC of `plan` on `workers` worker threads, node `n`'s
    /// memory being `views[n]`, each register file made by
    /// `new_registers` from the notifier its doorbells must ring. With a
    /// fabric, only this host's nodes' NICs (and register files; the
    /// others' `registers` are empty), and the rails' sockets bound.
    pub fn start(
        plan: &NicPlan,
        workers: usize,
        views: Arc<[DmaMemory]>,
        epoch: Instant,
        new_registers: &mut dyn FnMut(Notifier) -> std::io::Result<Arc<SharedRegisters>>,
    ) -> std::io::Result<Self> {
        let wakers: Arc<[Waker]> = (0..plan.nodes * MAX_CONTEXTS)
            .map(|_| Waker::new())
            .collect();
        let timeline: Arc<OnceLock<Arc<Timeline>>> = Arc::new(OnceLock::new());
        let signals = WorkerPool::signals(workers);
        // NICs are dealt to the workers node-major, so that a node's rails
        // are on different workers whenever there are at least as many
        // workers as rails (a striped transfer's rails run in parallel),
        // and with exactly that many, each rail's NICs share one worker (a
        // put on one rail needs no hand-off between workers).
        // Dealt by the NIC's place among this process's NICs: a host of a
        // fabric may serve any set of nodes.
        let local: Vec<usize> = (0..plan.nodes)
            .scan(0, |next, node| {
                let at = *next;
                *next += usize::from(plan.runs(node));
                Some(at)
            })
            .collect();
        let worker_of = |node: usize, rail: usize| (local[node] * plan.rails + rail) % workers;
        let mut factories: Vec<Vec<EngineFactory>> = (0..workers).map(|_| Vec::new()).collect();
        let mut registers: Vec<Vec<Arc<SharedRegisters>>> = vec![Vec::new(); plan.nodes];
        // Every NIC's notifier and register file first: a board reaches
        // its node's other NICs' files (the NIC-to-NIC path).
        let notifiers: Vec<Vec<Notifier>> = (0..plan.rails)
            .map(|rail| {
                (0..plan.nodes)
                    .map(|node| Notifier::new(Arc::clone(&signals[worker_of(node, rail)])))
                    .collect()
            })
            .collect();
        let node_regs: Vec<Arc<[Arc<SharedRegisters>]>> = (0..plan.nodes)
            .map(|node| {
                if !plan.runs(node) {
                    return Ok(Arc::from([]));
                }
                notifiers
                    .iter()
                    .map(|by_node| new_registers(by_node[node].clone()))
                    .collect::<std::io::Result<Vec<_>>>()
                    .map(Arc::from)
            })
            .collect::<std::io::Result<_>>()?;
        // Every rail before any board: a board reaches the other rails
        // (the sibling paths).
        let mut rails = Vec::new();
        let mut rail_inboxes = Vec::new();
        for (rail_index, rail_notifiers) in notifiers.iter().enumerate() {
            let faults = (!plan.faults.is_none())
                .then(|| RailFaults::new(Arc::clone(&plan.faults), rail_index as u8, plan.seed));
            let net = match &plan.fabric {
                Some(here) => Some(RailNet::bind(here, rail_index, Arc::clone(&views))?),
                None => None,
            };
            let (rail, inboxes) = Rail::new(rail_notifiers.clone(), faults, epoch, net);
            rails.push(Arc::new(rail));
            rail_inboxes.push(inboxes);
        }
        let all_rails: Arc<[Arc<Rail>]> = rails.iter().cloned().collect();
        for (rail_index, (rail_notifiers, inboxes)) in
            notifiers.iter().zip(rail_inboxes).enumerate()
        {
            let rail = Arc::clone(&rails[rail_index]);
            for (node, (inbox, notifier)) in
                inboxes.into_iter().zip(rail_notifiers.clone()).enumerate()
            {
                if !plan.runs(node) {
                    continue;
                }
                let siblings = Arc::clone(&node_regs[node]);
                let regs = Arc::clone(&siblings[rail_index]);
                registers[node].push(Arc::clone(&regs));
                let (views, rail, wakers, timeline, all_rails) = (
                    Arc::clone(&views),
                    Arc::clone(&rail),
                    Arc::clone(&wakers),
                    Arc::clone(&timeline),
                    Arc::clone(&all_rails),
                );
                factories[worker_of(node, rail_index)].push(Box::new(move || {
                    let board = EmuBoard::new(node as u16, views, regs, rail, inbox, wakers, epoch)
                        .expect("node memory exists for every node")
                        .with_siblings(rail_index as u8, siblings)
                        .with_rails(all_rails)
                        .traced(rail_index, timeline);
                    let loc = Location {
                        node: node as u16,
                        rail: rail_index as u8,
                    };
                    (Box::new(Engine::new(board, loc)), notifier)
                }));
            }
        }
        let pool = WorkerPool::start(signals, factories, epoch, Arc::clone(&plan.faults))?;
        let receivers = match plan.fabric {
            Some(_) => Some(Receivers::start(&rails)?),
            None => None,
        };
        Ok(Self {
            wakers,
            timeline,
            rails,
            registers,
            pool,
            receivers,
        })
    }
}
