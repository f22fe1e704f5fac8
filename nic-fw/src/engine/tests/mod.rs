//! Engine tests on a software board: several engines, byte-vector host
//! memories, and a network that can drop, duplicate and corrupt packets
//! from a seeded generator.
#![allow(
    clippy::indexing_slicing,
    clippy::arithmetic_side_effects,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

extern crate std;
use std::collections::VecDeque;
use std::vec;
use std::vec::Vec;

use super::hw::{
    BusError, Clock, DOORBELL_MAILBOX, HostMemory, HostWake, Link, Meter, Path, PayloadSource,
    PeerSet, RegisterFile, Siblings,
};
use super::{Engine, Location};
use crate::abi::command::{Command, DmaCommand, DmaKind};
use crate::abi::error::{ErrorCode, ErrorInfo, ErrorKind, ErrorRecord};
use crate::abi::event::{ActionKind, CompletionWord, EventAction, EventId};
use crate::abi::packet::{PacketHeader, PacketType};
use crate::abi::regs::{
    self, Capability, ContextConfig, MailboxOp, MailboxStatus, Param, Placement, QueuePerms,
    RegionConfig, RegionPerms, Status,
};
use zerocopy::FromBytes;

mod close;
mod collectives;
mod events;
mod inputs;
mod peers;
mod puts;
mod queues;
mod reliability;

const MEM: usize = 1 << 20;
const RING: u64 = 0x1000; // 64 entries
const ERRS: u64 = 0x2000; // 16 records
const WORDS: u64 = 0x3000; // completion words, LOCAL_WRITE
const DATA: u64 = 0x10000; // arena, remote read/write
const DATA_LEN: u64 = 0x40000;
const VA_DATA: u64 = 0x7000_0000;
const VA_WORDS: u64 = 0x6000_0000;

/// A packet as the test network carries it.
type WirePacket = (PacketHeader, Vec<u8>, Path);

struct Board {
    mem: Vec<u8>,
    regs: Vec<u64>,
    doorbells: u64,
    outbox: Vec<(PacketHeader, Vec<u8>, Path)>,
    inbox: VecDeque<(PacketHeader, Vec<u8>, Path)>,
    now: u64,
    wakes: u32,
    /// Sets posted to siblings: (rail, set); `Net` takes NIC `rail` for
    /// the sibling on that rail.
    peer_out: Vec<(u8, PeerSet)>,
    peer_in: VecDeque<PeerSet>,
    /// The siblings' FIFOs are full: sibling sets are refused with `Busy`.
    peer_full: bool,
}

impl Siblings for Board {
    fn peer_set(&mut self, rail: u8, set: PeerSet) -> Result<(), ErrorCode> {
        if self.peer_full {
            return Err(ErrorCode::Busy);
        }
        self.peer_out.push((rail, set));
        Ok(())
    }

    fn peer_fifo_depth(&self) -> u8 {
        64
    }

    fn take_peer_set(&mut self) -> Option<PeerSet> {
        self.peer_in.pop_front()
    }
}

impl HostMemory for Board {
    fn read(&mut self, phys: u64, buf: &mut [u8]) -> Result<(), BusError> {
        let s = phys as usize;
        let src = self
            .mem
            .get(s..s.checked_add(buf.len()).ok_or(BusError)?)
            .ok_or(BusError)?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write(&mut self, phys: u64, data: &[u8]) -> Result<(), BusError> {
        let s = phys as usize;
        let dst = self
            .mem
            .get_mut(s..s.checked_add(data.len()).ok_or(BusError)?)
            .ok_or(BusError)?;
        dst.copy_from_slice(data);
        Ok(())
    }
    fn write_word_release(&mut self, phys: u64, value: u64) -> Result<(), BusError> {
        self.write(phys, &value.to_le_bytes())
    }
}

impl Link for Board {
    type Payload = Vec<u8>;
    fn send(&mut self, header: &PacketHeader, payload: Option<PayloadSource>, path: Path) -> bool {
        let mut bytes = vec![0; payload.map_or(0, |p| p.len as usize)];
        if let Some(p) = payload {
            self.read(p.phys, &mut bytes).unwrap();
        }
        self.outbox.push((*header, bytes, path));
        true
    }
    fn recv(&mut self) -> Option<(PacketHeader, Vec<u8>, Path)> {
        self.inbox.pop_front()
    }
    fn payload_len(&self, p: &Vec<u8>) -> usize {
        p.len()
    }
    fn deliver(&mut self, p: &Vec<u8>, phys: u64) -> Result<(), BusError> {
        self.write(phys, p)
    }
}

impl RegisterFile for Board {
    fn reg_read(&self, off: u32) -> u64 {
        self.regs.get(off as usize / 8).copied().unwrap_or(0)
    }
    fn reg_write(&mut self, off: u32, v: u64) {
        if let Some(r) = self.regs.get_mut(off as usize / 8) {
            *r = v;
        }
    }
    fn take_doorbells(&mut self) -> u64 {
        core::mem::take(&mut self.doorbells)
    }
}

impl Clock for Board {
    fn now_ns(&self) -> u64 {
        self.now
    }
}

impl HostWake for Board {
    fn wake(&mut self, _ctx: u8) {
        self.wakes += 1;
    }
}

type TestEngine = Engine<Board, 8, 32>;

/// Faults applied by the network, per mille.
#[derive(Clone, Copy, Default)]
struct Faults {
    drop: u32,
    duplicate: u32,
    corrupt: u32,
    /// Held back on the clock for up to `delay_ns` (20 us if 0),
    /// overtaken by later packets: a delay shorter than the test's packet
    /// lifetime, which a rail guarantees (abi.md §4.6).
    delay: u32,
    delay_ns: u64,
}

struct Net {
    switch: crate::switch::Switch,
    nics: Vec<TestEngine>,
    tails: Vec<u64>,
    rng: u64,
    faults: Faults,
    mbox_seq: u32,
    /// The rail's own links are down: only packets through a sibling get
    /// through (the sibling hops are not modeled further).
    direct_down: bool,
    /// Delayed packets: when each arrives, its destination node, itself.
    held: Vec<(u64, usize, WirePacket)>,
    /// The clock jumps to a timer no further than this (`run_for_ns`).
    jump_cap: Option<u64>,
}

impl Net {
    /// `nodes` nodes, one context (ctx 0) each, one rank per node.
    fn new(nodes: usize, seed: u64) -> Net {
        let mut net = Net {
            switch: crate::switch::Switch::new(),
            nics: Vec::new(),
            tails: vec![0; nodes],
            rng: seed | 1,
            faults: Faults::default(),
            mbox_seq: 0,
            direct_down: false,
            held: Vec::new(),
            jump_cap: None,
        };
        for node in 0..nodes {
            let board = Board {
                mem: vec![0; MEM],
                regs: vec![0; regs::BAR0_SIZE as usize / 8],
                doorbells: 0,
                outbox: Vec::new(),
                inbox: VecDeque::new(),
                now: 0,
                wakes: 0,
                peer_out: Vec::new(),
                peer_in: VecDeque::new(),
                peer_full: false,
            };
            net.nics.push(Engine::new(
                board,
                Location {
                    node: node as u16,
                    rail: 0,
                },
            ));
        }
        for node in 0..nodes {
            net.attach(node);
        }
        net
    }

    /// Attach context 0 on `node` (its ring restarting at 0) and map its
    /// data and completion-word regions.
    fn attach(&mut self, node: usize) {
        let nodes = self.nics.len();
        self.tails[node] = 0;
        let cfg = ContextConfig {
            ctx: 0,
            cq_log2: 6,
            err_log2: 4,
            perms: QueuePerms::all(),
            job_key: 0x1234,
            cq_base: RING,
            err_base: ERRS,
            cap: Capability {
                low_node: 0,
                node_count: nodes as u16,
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
            len: 0x1000,
            phys: WORDS,
        };
        self.attach_context(node, &cfg, &[data, words]);
    }

    /// Attach `cfg` on `node` and map `regions`, each call succeeding.
    fn attach_context(&mut self, node: usize, cfg: &ContextConfig, regions: &[RegionConfig]) {
        assert_eq!(
            self.mailbox(node, MailboxOp::AttachContext, cfg.to_args()),
            Ok(())
        );
        for region in regions {
            assert_eq!(
                self.mailbox(node, MailboxOp::MapRegion, region.to_args()),
                Ok(())
            );
        }
    }

    fn mailbox(&mut self, node: usize, op: MailboxOp, args: [u64; 4]) -> Result<(), ErrorCode> {
        self.mbox_seq += 1;
        let seq = self.mbox_seq;
        let nic = &mut self.nics[node];
        let hw = nic.hardware_mut();
        for (reg, a) in regs::MBOX_ARGS.into_iter().zip(args) {
            hw.store(reg, a);
        }
        hw.store(regs::MBOX_CMD, regs::mailbox_cmd(op, seq));
        hw.doorbells |= DOORBELL_MAILBOX;
        nic.poll();
        let st = MailboxStatus::from_reg(nic.hardware().load(regs::MBOX_STATUS));
        assert!(st.done && st.seq == seq);
        st.result
    }

    fn next_rand(&mut self) -> u32 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 32) as u32
    }

    fn post_raw(&mut self, node: usize, raw: [u8; 64]) {
        let tail = self.tails[node];
        let hw = self.nics[node].hardware_mut();
        let slot = RING + (tail % 64) * 64;
        hw.write(slot, &raw).unwrap();
        self.tails[node] = tail + 1;
        hw.store(regs::ctx_reg(0, regs::CQ_TAIL).unwrap(), tail + 1);
        hw.doorbells |= 1;
    }

    fn post(&mut self, node: usize, cmd: Command) {
        self.post_raw(node, cmd.emit(0xc0de).to_bytes());
    }

    /// Arm completion word `event` to be written with `value`, then enter
    /// hardware barrier `seq` of `low..=high` with it, on `node`.
    fn enter_barrier(
        &mut self,
        node: usize,
        (low, high): (u16, u16),
        seq: u32,
        event: u32,
        value: u64,
    ) {
        self.post(
            node,
            Command::ArmEvent {
                event: EventId(event),
                count: 1,
                action: write_action(event as u64, value),
            },
        );
        self.post(
            node,
            Command::HwBarrier {
                low_node: low,
                high_node: high,
                seq,
                tag: 0,
                event: Some(EventId(event)),
            },
        );
    }

    /// Move packets and poll until quiet (or time advances retransmissions).
    fn run(&mut self, max_rounds: usize) {
        if !self.run_for(max_rounds) {
            panic!("network did not quiesce");
        }
    }

    /// Run until the clock has moved on by `ns` (or nothing is left to
    /// do): a wait bounded in time, not in rounds.
    fn run_for_ns(&mut self, ns: u64) {
        let end = self.nics[0].hardware().now.saturating_add(ns);
        self.jump_cap = Some(end);
        while self.nics[0].hardware().now < end {
            if self.run_for(1) {
                break;
            }
        }
        self.jump_cap = None;
    }

    /// As `run`, but give up quietly after `max_rounds`; true if quiet.
    fn run_for(&mut self, max_rounds: usize) -> bool {
        for _ in 0..max_rounds {
            let mut busy = false;
            for i in 0..self.nics.len() {
                let out = self.nics[i].poll();
                busy |= out.progressed || out.pending;
            }
            for i in 0..self.nics.len() {
                let sets = core::mem::take(&mut self.nics[i].hardware_mut().peer_out);
                for (rail, set) in sets {
                    busy = true;
                    if let Some(n) = self.nics.get_mut(rail as usize) {
                        n.hardware_mut().peer_in.push_back(set);
                    }
                }
                let packets = core::mem::take(&mut self.nics[i].hardware_mut().outbox);
                for (h, p, path) in packets {
                    busy = true;
                    let r = self.next_rand() % 1000;
                    if r < self.faults.drop || (self.direct_down && path == Path::Direct) {
                        continue;
                    }
                    let dst = h.dst_node.get() as usize;
                    let mut h2 = h;
                    if r < self.faults.drop + self.faults.corrupt {
                        let mut b = h2.to_bytes();
                        let bit = self.next_rand() as usize % 512;
                        b[bit / 8] ^= 1 << (bit % 8);
                        h2 = PacketHeader::from_bytes(&b);
                    }
                    let dup = self.next_rand() % 1000 < self.faults.duplicate;
                    // The rail switch: replication and barrier combining.
                    let targets: Vec<(usize, PacketHeader)> = match self.switch.forward(&h2) {
                        crate::switch::Forward::Drop => Vec::new(),
                        crate::switch::Forward::Unicast(n) => vec![(n as usize, h2)],
                        crate::switch::Forward::Replicate { low, high, except } => (low..=high)
                            .filter(|n| *n != except)
                            .map(|n| (n as usize, h2))
                            .collect(),
                        crate::switch::Forward::ReleaseAll(b) => (b.low_node..=b.high_node)
                            .map(|n| (n as usize, crate::switch::release(&b, n)))
                            .collect(),
                        crate::switch::Forward::ReleaseOne(b, n) => {
                            vec![(n as usize, crate::switch::release(&b, n))]
                        }
                        crate::switch::Forward::HeldOne(b, n) => {
                            vec![(n as usize, crate::switch::held(&b, n))]
                        }
                    };
                    let _ = dst;
                    for (node, header) in targets {
                        if self.next_rand() % 1000 < self.faults.delay {
                            let most = match self.faults.delay_ns {
                                0 => 20_000,
                                ns => ns,
                            };
                            let hold = 1 + u64::from(self.next_rand()) % most;
                            let at = self.nics[0].hardware().now + hold;
                            self.held.push((at, node, (header, p.clone(), path)));
                            continue;
                        }
                        if let Some(n) = self.nics.get_mut(node) {
                            n.hardware_mut().inbox.push_back((header, p.clone(), path));
                            if dup {
                                n.hardware_mut().inbox.push_back((header, p.clone(), path));
                            }
                        }
                    }
                }
            }
            // Held packets that are due arrive, behind those sent after
            // them.
            let now = self.nics[0].hardware().now;
            self.held.sort_by_key(|h| h.0);
            while self.held.first().is_some_and(|h| h.0 <= now) {
                let (_, node, packet) = self.held.remove(0);
                busy = true;
                if let Some(n) = self.nics.get_mut(node) {
                    n.hardware_mut().inbox.push_back(packet);
                }
            }
            if !busy {
                // Jump to the earliest timer or held packet, as a
                // discrete-event clock would.
                let timers = self.nics.iter().filter_map(|n| n.next_timer());
                let Some(t) = timers.chain(self.held.iter().map(|h| h.0)).min() else {
                    return true;
                };
                let t = self.jump_cap.map_or(t, |cap| t.min(cap));
                for n in &mut self.nics {
                    let hw = n.hardware_mut();
                    hw.now = hw.now.max(t);
                }
            }
        }
        false
    }

    fn mem(&self, node: usize, phys: u64, len: usize) -> Vec<u8> {
        self.nics[node].hardware().mem[phys as usize..phys as usize + len].to_vec()
    }

    fn fill(&mut self, node: usize, phys: u64, data: &[u8]) {
        self.nics[node].hardware_mut().write(phys, data).unwrap();
    }

    fn word(&self, node: usize, index: u64) -> CompletionWord {
        let b = self.mem(node, WORDS + 8 * index, 8);
        CompletionWord::unpack(u64::from_le_bytes(b.try_into().unwrap()))
    }

    fn errors(&self, node: usize) -> Vec<ErrorInfo> {
        let n = self.nics[node]
            .hardware()
            .load(regs::ctx_reg(0, regs::ERR_COUNT).unwrap());
        (0..n.min(16))
            .map(|i| {
                let raw = self.mem(node, ERRS + 32 * i, 32);
                ErrorInfo::parse(&ErrorRecord::read_from_bytes(&raw).unwrap()).unwrap()
            })
            .collect()
    }
}

fn write_action(index: u64, value: u64) -> EventAction {
    EventAction {
        kind: ActionKind::Write {
            addr: VA_WORDS + 8 * index,
            value,
        },
        wake: true,
    }
}

fn put(vp: u32, src: u64, dst: u64, len: u32, src_ev: Option<u32>, dst_ev: Option<u32>) -> Command {
    Command::Dma(DmaCommand {
        kind: DmaKind::Put,
        len,
        vp,
        src_addr: VA_DATA + src,
        dst_addr: VA_DATA + dst,
        src_event: src_ev.map(EventId),
        dst_event: dst_ev.map(EventId),
        wake: false,
    })
}

/// Clear completion word `word` of node `node` and arm event `word` to
/// write it with `value`.
fn arm(net: &mut Net, node: usize, word: u32, value: u64) {
    net.fill(node, WORDS + 8 * u64::from(word), &[0; 8]);
    net.post(
        node,
        Command::ArmEvent {
            event: EventId(word),
            count: 1,
            action: write_action(u64::from(word), value),
        },
    );
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn put_and_check(net: &mut Net, len: u32) {
    let data = pattern(len as usize, 7);
    net.fill(0, DATA, &data);
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(1),
            count: 1,
            action: write_action(1, 42),
        },
    );
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(2),
            count: 1,
            action: write_action(2, 43),
        },
    );
    net.post(0, put(1, 0, 0x100, len, Some(1), Some(2)));
    net.run(100_000);
    assert_eq!(net.mem(1, DATA + 0x100, len as usize), data);
    assert_eq!(
        net.word(0, 1),
        CompletionWord {
            value: 42,
            status: Some(Ok(()))
        }
    );
    assert_eq!(
        net.word(1, 2),
        CompletionWord {
            value: 43,
            status: Some(Ok(()))
        }
    );
}

/// Context 1 on `node` (a second job's): its ring, error ring and
/// completion words in memory of their own, its words at the same
/// virtual address as context 0's.
const RING_1: u64 = 0x4000;
const ERRS_1: u64 = 0x5000;
const WORDS_1: u64 = 0x6000;

impl Net {
    fn attach_second(&mut self, node: usize) {
        let nodes = self.nics.len() as u16;
        let cfg = ContextConfig {
            ctx: 1,
            cq_log2: 6,
            err_log2: 4,
            perms: QueuePerms::all(),
            job_key: 0x5678,
            cq_base: RING_1,
            err_base: ERRS_1,
            cap: Capability {
                low_node: 0,
                node_count: nodes,
                ranks_per_node: 1,
                ctx_base: 1,
                placement: Placement::Block,
            },
        };
        let words = RegionConfig {
            ctx: 1,
            slot: 2,
            perms: RegionPerms::LOCAL_READ | RegionPerms::LOCAL_WRITE,
            va: VA_WORDS,
            len: 0x1000,
            phys: WORDS_1,
        };
        self.attach_context(node, &cfg, &[words]);
    }

    /// Post `cmds` on context 1's ring of `node`, from its start.
    fn post_second(&mut self, node: usize, cmds: &[Command]) {
        let hw = self.nics[node].hardware_mut();
        for (i, cmd) in cmds.iter().enumerate() {
            hw.write(RING_1 + 64 * i as u64, &cmd.emit(0xc1).to_bytes())
                .unwrap();
        }
        hw.store(regs::ctx_reg(1, regs::CQ_TAIL).unwrap(), cmds.len() as u64);
        hw.doorbells |= 1 << 1;
    }
}

impl Meter for Board {}

/// Node 0's packets to node 1 as they leave it, parsed.
fn sent_data(net: &mut Net, node: usize) -> Vec<(PacketHeader, Vec<u8>, Path)> {
    core::mem::take(&mut net.nics[node].hardware_mut().outbox)
}

fn set_param(net: &mut Net, node: usize, param: Param, value: u64) {
    assert_eq!(
        net.mailbox(node, MailboxOp::SetParam, [param as u64, value, 0, 0]),
        Ok(())
    );
}

/// Node 0 puts `len` bytes to node 1 over a rail that loses everything:
/// the put completes once, with `PeerUnreachable`.
fn put_to_a_silent_peer(net: &mut Net, len: u32) {
    net.faults = Faults {
        drop: 1000,
        ..Faults::default()
    };
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(1),
            count: 1,
            action: write_action(1, 3),
        },
    );
    net.post(0, put(1, 0, 0, len, Some(1), None));
    net.run(1_000_000);
    assert_eq!(
        net.word(0, 1),
        CompletionWord {
            value: 3,
            status: Some(Err(ErrorCode::PeerUnreachable))
        }
    );
    assert_eq!(net.nics[0].stats().dmas_completed, 1);
}
