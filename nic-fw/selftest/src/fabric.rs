//! Two NICs, their rail's switch, and the host side that drives them.
//!
//! [`Fabric`] owns two unmodified engines (nodes 0 and 1 of one rail) on
//! [`LoopbackBoard`]s, the switch logic of `railcoll_fw::switch` between
//! them, and a virtual clock. [`Fabric::run`] polls both engines and
//! carries each sent frame through the switch to its receivers, until
//! nothing is left to do; when both engines are idle but wait for a timer
//! (a retransmission), the clock jumps to it, as a discrete-event clock
//! would. Runs are deterministic: the only choice, which packets the
//! optional loss pattern drops, is a fixed count.
//!
//! The host side does what railcoll's driver does through BAR0: admin
//! mailbox calls, commands written into a context's ring and its
//! `CQ_TAIL` doorbell, completion words and error records read from host
//! memory. Node memory layout: [`RING`], [`ERRS`], [`WORDS`] (completion
//! words, mapped local read/write at [`VA_WORDS`]) and [`DATA`] (mapped
//! for remote access at [`VA_DATA`]); [`MEM_LEN`] bytes in all.

use core::cell::Cell;

use zerocopy::FromBytes;

use railcoll_fw::abi::command::Command;
use railcoll_fw::abi::error::{ErrorCode, ErrorInfo, ErrorRecord};
use railcoll_fw::abi::event::CompletionWord;
use railcoll_fw::abi::regs::{
    self, Capability, ContextConfig, MailboxOp, MailboxStatus, Placement, QueuePerms, RegionConfig,
    RegionPerms,
};
use railcoll_fw::engine::hw::HostMemory;
use railcoll_fw::engine::{Engine, Location, Stats};
use railcoll_fw::switch::{self, Forward, Switch};

use crate::board::{Frame, LoopbackBoard};

/// Nodes of the self-test's fabric.
pub const NODES: usize = 2;
/// Flow slots per direction: one per node of the fabric.
pub const PEERS: usize = NODES;
/// Events per context.
pub const EVENTS: usize = 16;

/// The engine as the self-test instantiates it.
pub type SelfTestEngine<'m> = Engine<LoopbackBoard<'m>, PEERS, EVENTS>;

/// Command ring: 64 blocks of 64 bytes.
pub const RING: u64 = 0x1000;
const RING_LOG2: u8 = 6;
/// Error ring: 16 records of 32 bytes.
pub const ERRS: u64 = 0x2000;
const ERRS_LOG2: u8 = 4;
/// Completion words (and chained command blocks), 4 KiB.
pub const WORDS: u64 = 0x3000;
/// Data region.
pub const DATA: u64 = 0x8000;
/// Data region length.
pub const DATA_LEN: u64 = 0x1_0000;
/// Bytes of host memory each node needs.
pub const MEM_LEN: usize = (DATA + DATA_LEN) as usize;
/// Virtual address of the data region.
pub const VA_DATA: u64 = 0x7000_0000;
/// Virtual address of the completion words.
pub const VA_WORDS: u64 = 0x6000_0000;
/// The job's key.
const JOB_KEY: u32 = 0x5e1f;

/// One of the fabric's two nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    /// Node 0.
    A,
    /// Node 1.
    B,
}

impl Node {
    /// Its node number (and virtual process number: one rank per node).
    pub fn index(self) -> u16 {
        match self {
            Node::A => 0,
            Node::B => 1,
        }
    }

    /// The other node.
    pub fn peer(self) -> Node {
        match self {
            Node::A => Node::B,
            Node::B => Node::A,
        }
    }

    fn from_index(node: u16) -> Option<Node> {
        match node {
            0 => Some(Node::A),
            1 => Some(Node::B),
            _ => None,
        }
    }
}

/// Why the host side could not do what it was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostError {
    /// A host memory access outside the node's memory.
    Memory,
    /// A mailbox call did not complete, or completed out of sequence.
    MailboxSilent,
    /// A mailbox call failed with this code.
    Mailbox(ErrorCode),
    /// The network did not go quiet within the round limit.
    NotQuiet,
}

/// Two nodes, one rail.
#[derive(Debug)]
pub struct Fabric<'m> {
    a: SelfTestEngine<'m>,
    b: SelfTestEngine<'m>,
    switch: Switch,
    clock: &'m Cell<u64>,
    tails: [u64; 2],
    mbox_seq: u32,
    /// Drop every n-th frame carried (`None`: a lossless link).
    pub loss: Option<u32>,
    carried: u32,
    /// Frames the loss pattern dropped.
    pub dropped: u32,
}

/// Rounds of polling [`Fabric::run`] allows before it calls the network
/// stuck (far above what any step needs: a 12 KB put under loss takes a
/// few hundred).
pub const MAX_ROUNDS: u32 = 20_000;

impl<'m> Fabric<'m> {
    /// Two fresh NICs over `mem_a` and `mem_b` (each at least [`MEM_LEN`]
    /// bytes), reading `clock`.
    pub fn new(mem_a: &'m mut [u8], mem_b: &'m mut [u8], clock: &'m Cell<u64>) -> Self {
        let nic =
            |mem, node| Engine::new(LoopbackBoard::new(mem, clock), Location { node, rail: 0 });
        Self {
            a: nic(mem_a, 0),
            b: nic(mem_b, 1),
            switch: Switch::new(),
            clock,
            tails: [0; 2],
            mbox_seq: 0,
            loss: None,
            carried: 0,
            dropped: 0,
        }
    }

    /// Node `node`'s engine.
    pub fn nic(&self, node: Node) -> &SelfTestEngine<'m> {
        match node {
            Node::A => &self.a,
            Node::B => &self.b,
        }
    }

    fn nic_mut(&mut self, node: Node) -> &mut SelfTestEngine<'m> {
        match node {
            Node::A => &mut self.a,
            Node::B => &mut self.b,
        }
    }

    /// Node `node`'s board.
    pub fn board(&self, node: Node) -> &LoopbackBoard<'m> {
        self.nic(node).hardware()
    }

    fn board_mut(&mut self, node: Node) -> &mut LoopbackBoard<'m> {
        self.nic_mut(node).hardware_mut()
    }

    /// The engine's counters.
    pub fn stats(&self, node: Node) -> Stats {
        self.nic(node).stats()
    }

    /// Read host memory of `node`.
    pub fn read(&mut self, node: Node, phys: u64, buf: &mut [u8]) -> Result<(), HostError> {
        self.board_mut(node)
            .read(phys, buf)
            .map_err(|_| HostError::Memory)
    }

    /// Write host memory of `node`.
    pub fn write(&mut self, node: Node, phys: u64, data: &[u8]) -> Result<(), HostError> {
        self.board_mut(node)
            .write(phys, data)
            .map_err(|_| HostError::Memory)
    }

    /// One admin mailbox call on `node`'s NIC, run to completion.
    pub fn mailbox(&mut self, node: Node, op: MailboxOp, args: [u64; 4]) -> Result<(), HostError> {
        self.mbox_seq = self.mbox_seq.wrapping_add(1);
        let seq = self.mbox_seq;
        let board = self.board_mut(node);
        for (reg, arg) in regs::MBOX_ARGS.into_iter().zip(args) {
            board.host_write(reg.offset(), arg);
        }
        board.host_write(regs::MBOX_CMD.offset(), regs::mailbox_cmd(op, seq));
        self.nic_mut(node).poll();
        let status =
            MailboxStatus::from_reg(self.board(node).host_read(regs::MBOX_STATUS.offset()));
        if !status.done || status.seq != seq {
            return Err(HostError::MailboxSilent);
        }
        status.result.map_err(HostError::Mailbox)
    }

    /// Attach context 0 on `node` for the two-node job (one rank per
    /// node) and map its data and completion-word regions.
    pub fn attach(&mut self, node: Node) -> Result<(), HostError> {
        let context = ContextConfig {
            ctx: 0,
            cq_log2: RING_LOG2,
            err_log2: ERRS_LOG2,
            perms: QueuePerms::all(),
            job_key: JOB_KEY,
            cq_base: RING,
            err_base: ERRS,
            cap: Capability {
                low_node: 0,
                node_count: NODES as u16,
                ranks_per_node: 1,
                ctx_base: 0,
                placement: Placement::Block,
            },
        };
        let data = RegionConfig {
            ctx: 0,
            slot: 0,
            perms: RegionPerms::all(),
            va: VA_DATA,
            len: DATA_LEN,
            phys: DATA,
        };
        let words = RegionConfig {
            ctx: 0,
            slot: 1,
            perms: RegionPerms::LOCAL_READ | RegionPerms::LOCAL_WRITE,
            va: VA_WORDS,
            len: DATA.wrapping_sub(WORDS),
            phys: WORDS,
        };
        self.mailbox(node, MailboxOp::AttachContext, context.to_args())?;
        self.mailbox(node, MailboxOp::MapRegion, data.to_args())?;
        self.mailbox(node, MailboxOp::MapRegion, words.to_args())
    }

    /// Write a raw 64-byte command block into context 0's ring of `node`
    /// and ring its doorbell.
    pub fn post_raw(&mut self, node: Node, block: &[u8; 64]) -> Result<(), HostError> {
        let index = usize::from(node.index());
        let tail = self.tails.get(index).copied().unwrap_or(0);
        let slot = RING.wrapping_add((tail % (1 << RING_LOG2)).wrapping_mul(64));
        self.write(node, slot, block)?;
        let tail = tail.wrapping_add(1);
        if let Some(t) = self.tails.get_mut(index) {
            *t = tail;
        }
        let doorbell = regs::ctx_reg(0, regs::CQ_TAIL).map_or(0, |r| r.offset());
        self.board_mut(node).host_write(doorbell, tail);
        Ok(())
    }

    /// Post `command` on context 0 of `node`.
    pub fn post(&mut self, node: Node, command: Command) -> Result<(), HostError> {
        self.post_raw(node, &command.emit(0x5e1f).to_bytes())
    }

    /// Completion word `index` of `node` (0 if unreadable).
    pub fn word(&mut self, node: Node, index: u64) -> CompletionWord {
        CompletionWord::unpack(self.raw_word(node, index))
    }

    /// Completion word `index` of `node`, raw.
    pub fn raw_word(&mut self, node: Node, index: u64) -> u64 {
        let mut bytes = [0u8; 8];
        let at = WORDS.wrapping_add(index.wrapping_mul(8));
        match self.read(node, at, &mut bytes) {
            Ok(()) => u64::from_le_bytes(bytes),
            Err(_) => 0,
        }
    }

    /// Clear completion word `index` of `node` (the host re-arms it).
    pub fn clear_word(&mut self, node: Node, index: u64) -> Result<(), HostError> {
        self.write(node, WORDS.wrapping_add(index.wrapping_mul(8)), &[0; 8])
    }

    /// Error records context 0 of `node` has reported.
    pub fn error_count(&self, node: Node) -> u64 {
        regs::ctx_reg(0, regs::ERR_COUNT).map_or(0, |r| self.board(node).host_read(r.offset()))
    }

    /// The error record with free-running number `seq` on `node`.
    pub fn error(&mut self, node: Node, seq: u64) -> Option<ErrorInfo> {
        let mut raw = [0u8; 32];
        let at = ERRS.wrapping_add((seq % (1 << ERRS_LOG2)).wrapping_mul(32));
        self.read(node, at, &mut raw).ok()?;
        let record = ErrorRecord::read_from_bytes(&raw).ok()?;
        ErrorInfo::parse(&record)
    }

    /// Poll both NICs and carry their frames until the network is quiet,
    /// moving the clock on to every timer they wait for.
    pub fn run(&mut self) -> Result<(), HostError> {
        self.poll_until_quiet(true)
    }

    /// As [`Fabric::run`], but without moving the clock: what the NICs do
    /// before any timer expires (a barrier waiting for a member that has
    /// not entered stays waiting instead of timing out).
    pub fn settle(&mut self) -> Result<(), HostError> {
        self.poll_until_quiet(false)
    }

    fn poll_until_quiet(&mut self, timers: bool) -> Result<(), HostError> {
        for _ in 0..MAX_ROUNDS {
            let outcomes = [self.a.poll(), self.b.poll()];
            let mut busy = outcomes.iter().any(|o| o.progressed || o.pending);
            for from in [Node::A, Node::B] {
                busy |= self.carry(from);
            }
            if !busy {
                let timer = outcomes.iter().filter_map(|o| o.timer_ns).min();
                let Some(timer) = timer.filter(|_| timers) else {
                    return Ok(());
                };
                self.clock.set(self.clock.get().max(timer));
            }
        }
        Err(HostError::NotQuiet)
    }

    /// Carry every frame `from` sent through the switch; true if any.
    fn carry(&mut self, from: Node) -> bool {
        let mut frame = Frame::EMPTY;
        let mut any = false;
        while self.board_mut(from).outbox.pop_into(&mut frame) {
            any = true;
            self.carried = self.carried.wrapping_add(1);
            if let Some(n) = self.loss
                && self.carried.checked_rem(n) == Some(0)
            {
                self.dropped = self.dropped.wrapping_add(1);
                continue;
            }
            self.switch_frame(&frame);
        }
        any
    }

    /// What the rail's switch does with one frame: forward, replicate, or
    /// combine a barrier and release it.
    fn switch_frame(&mut self, frame: &Frame) {
        let header = frame.header();
        match self.switch.forward(&header) {
            Forward::Drop => {}
            Forward::Unicast(node) => self.arrive(node, frame),
            Forward::Replicate { low, high, except } => {
                for node in low..=high {
                    if node != except {
                        self.arrive(node, frame);
                    }
                }
            }
            Forward::ReleaseAll(barrier) => {
                for node in barrier.low_node..=barrier.high_node {
                    let release = switch::release(&barrier, node);
                    self.arrive(node, &frame.with_header(&release));
                }
            }
            Forward::ReleaseOne(barrier, node) => {
                let release = switch::release(&barrier, node);
                self.arrive(node, &frame.with_header(&release));
            }
            Forward::HeldOne(barrier, node) => {
                let held = switch::held(&barrier, node);
                self.arrive(node, &frame.with_header(&held));
            }
        }
    }

    /// `frame` reaches node `node`'s receive queue (lost if there is no
    /// such node or its queue is full).
    fn arrive(&mut self, node: u16, frame: &Frame) {
        if let Some(node) = Node::from_index(node) {
            let _ = self.board_mut(node).inbox.push(frame);
        }
    }
}
