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

const MEM: usize = 1 << 20;
const RING: u64 = 0x1000; // 64 entries
const ERRS: u64 = 0x2000; // 16 records
const WORDS: u64 = 0x3000; // completion words, LOCAL_WRITE
const DATA: u64 = 0x10000; // arena, remote read/write
const DATA_LEN: u64 = 0x40000;
const VA_DATA: u64 = 0x7000_0000;
const VA_WORDS: u64 = 0x6000_0000;

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
        while self.nics[0].hardware().now < end {
            if self.run_for(1) {
                break;
            }
        }
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
                        if let Some(n) = self.nics.get_mut(node) {
                            n.hardware_mut().inbox.push_back((header, p.clone(), path));
                            if dup {
                                n.hardware_mut().inbox.push_back((header, p.clone(), path));
                            }
                        }
                    }
                }
            }
            if !busy {
                // Jump to the earliest timer, as a discrete-event clock would.
                let Some(t) = self.nics.iter().filter_map(|n| n.next_timer()).min() else {
                    return true;
                };
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

/// A NIC publishes its identity, version, geometry and resources from
/// reset (what a driver probes before it opens anything).
#[test]
fn a_nic_publishes_what_a_driver_probes() {
    let net = Net::new(2, 1);
    for nic in &net.nics {
        let hw = nic.hardware();
        assert_eq!(hw.load(regs::ID), regs::ID_VALUE);
        assert_eq!(hw.load(regs::VERSION), u64::from(crate::abi::ABI_VERSION));
        assert_eq!(hw.load(regs::GEOMETRY), TestEngine::GEOMETRY.to_reg());
        let raw = hw.load(regs::RESOURCES);
        assert_ne!(raw, 0, "a 1.1 NIC reports its resources");
        assert_eq!(
            regs::Resources::from_reg(raw),
            regs::Resources::this_firmware(64)
        );
    }
}

#[test]
fn put_of_every_shape_lands_and_completes_both_events() {
    for len in [0u32, 1, 7, 2047, 2048, 2049, 65_536 + 3] {
        let mut net = Net::new(2, 1);
        put_and_check(&mut net, len);
    }
}

#[test]
fn put_survives_loss_duplication_and_corruption() {
    for seed in 1..6 {
        let mut net = Net::new(2, seed);
        net.faults = Faults {
            drop: 100,
            duplicate: 50,
            corrupt: 50,
        };
        put_and_check(&mut net, 100_000);
        assert!(net.nics[0].stats().retransmits > 0);
        // Exactly once: each side's event fired once, one DMA completed.
        assert_eq!(net.nics[0].stats().events_fired, 1);
        assert_eq!(net.nics[1].stats().events_fired, 1);
        assert_eq!(net.nics[0].stats().dmas_completed, 1);
        assert!(net.nics[1].stats().duplicates > 0 || net.nics[1].stats().bad_packets > 0);
    }
}

/// Node 0 gets `len` bytes from offset 0x800 of node `vp`'s data into its
/// own offset 0, completion word 4 written with 9.
fn get_into_word_4(net: &mut Net, vp: u32, len: u32) {
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(4),
            count: 1,
            action: write_action(4, 9),
        },
    );
    net.post(
        0,
        Command::Dma(DmaCommand {
            kind: DmaKind::Get,
            len,
            vp,
            src_addr: VA_DATA + 0x800,
            dst_addr: VA_DATA,
            src_event: None,
            dst_event: Some(EventId(4)),
            wake: false,
        }),
    );
}

#[test]
fn get_is_a_put_run_by_the_owner() {
    let mut net = Net::new(3, 3);
    let data = pattern(5000, 3);
    net.fill(2, DATA + 0x800, &data);
    get_into_word_4(&mut net, 2, 5000);
    net.run(100_000);
    assert_eq!(net.mem(0, DATA, 5000), data);
    assert_eq!(
        net.word(0, 4),
        CompletionWord {
            value: 9,
            status: Some(Ok(()))
        }
    );
}

/// A get request that finds every DMA slot of its target busy is refused
/// for now (ABI 1.7), not nacked: a put sent after it on the same flow
/// lands while the get waits (a nack would have held the put back as a
/// gap and sent the whole window again), and the get is sent again after
/// its back-off and completes once a slot is free.
#[test]
fn a_get_that_finds_no_dma_slot_is_refused_and_the_flow_goes_on() {
    let mut net = Net::new(2, 5);
    let data = pattern(256, 7);
    net.fill(1, DATA + 0x800, &data);
    let later = pattern(64, 9);
    net.fill(0, DATA + 0x2000, &later);
    // Every DMA slot of node 1 taken (as by 64 transfers in flight).
    net.nics[1].dmas.set_active_for_test(crate::abi::MAX_DMAS);
    get_into_word_4(&mut net, 1, 256);
    net.post(0, put(1, 0x2000, 0x3000, 64, None, None));
    net.run_for(200);
    assert_eq!(
        net.mem(1, DATA + 0x3000, 64),
        later,
        "the later put waited for the get"
    );
    assert!(
        net.nics[1].stats().packets_refused >= 1,
        "refused, not nacked"
    );
    assert_ne!(
        net.mem(0, DATA, 256),
        data,
        "no slot yet: the get is not served"
    );
    assert_ne!(net.word(0, 4).value, 9, "nor completed");
    assert_eq!(net.nics[0].stats().retransmits, 0, "nothing went back");
    net.nics[1].dmas.set_active_for_test(0);
    net.run(100_000);
    assert_eq!(net.mem(0, DATA, 256), data);
    assert_eq!(
        net.word(0, 4),
        CompletionWord {
            value: 9,
            status: Some(Ok(()))
        }
    );
}

#[test]
fn put_outside_target_region_writes_nothing_and_both_sides_see_it() {
    let mut net = Net::new(2, 4);
    net.fill(0, DATA, &pattern(4096, 1));
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(1),
            count: 1,
            action: write_action(1, 5),
        },
    );
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(2),
            count: 1,
            action: write_action(2, 6),
        },
    );
    // Straddles the end of the target region: the first packet's own range
    // is inside, the second's is not. Nothing at all may be written.
    net.post(0, put(1, 0, DATA_LEN - 2048, 4096, Some(1), Some(2)));
    net.run(10_000);
    assert_eq!(
        net.mem(1, DATA + DATA_LEN - 2048, 2048),
        vec![0; 2048],
        "no partial write"
    );
    assert_eq!(net.word(0, 1).status, Some(Err(ErrorCode::Protection)));
    assert_eq!(net.word(1, 2).status, Some(Err(ErrorCode::Protection)));
    let target_errors = net.errors(1);
    assert_eq!(target_errors.len(), 2, "one record per rejected packet");
    assert_eq!(target_errors[0].kind, ErrorKind::Inbound);
    assert_eq!(target_errors[0].code, ErrorCode::Protection);
    let initiator = net.errors(0);
    assert_eq!(initiator.len(), 1);
    assert_eq!(initiator[0].kind, ErrorKind::Remote);
    // Completely outside: nothing written at all.
    let mut net = Net::new(2, 5);
    net.fill(0, DATA, &pattern(64, 1));
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(1),
            count: 1,
            action: write_action(1, 5),
        },
    );
    net.post(
        0,
        Command::Dma(DmaCommand {
            kind: DmaKind::Put,
            len: 64,
            vp: 1,
            src_addr: VA_DATA,
            dst_addr: VA_WORDS,
            src_event: Some(EventId(1)),
            dst_event: None,
            wake: false,
        }),
    );
    net.run(10_000);
    assert_eq!(net.mem(1, WORDS, 64), vec![0; 64]);
    assert_eq!(net.word(0, 1).status, Some(Err(ErrorCode::Protection)));
}

#[test]
fn rearm_after_early_sets_fires_immediately_and_only_once() {
    let mut net = Net::new(1, 6);
    net.post(
        0,
        Command::SetEvent {
            event: EventId(3),
            count: 2,
            rail: None,
        },
    );
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(3),
            count: 3,
            action: write_action(3, 1),
        },
    );
    net.run(100);
    assert_eq!(net.word(0, 3).value, 0, "only 2 of 3 sets arrived");
    net.post(
        0,
        Command::SetEvent {
            event: EventId(3),
            count: 1,
            rail: None,
        },
    );
    net.run(100);
    assert_eq!(net.word(0, 3).value, 1);
    // Sets before the next arm are kept; the arm fires at once.
    net.post(
        0,
        Command::SetEvent {
            event: EventId(3),
            count: 1,
            rail: None,
        },
    );
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(3),
            count: 1,
            action: write_action(3, 2),
        },
    );
    net.run(100);
    assert_eq!(net.word(0, 3).value, 2);
    assert_eq!(net.nics[0].stats().events_fired, 2);
}

#[test]
fn chained_put_runs_without_the_host() {
    let mut net = Net::new(3, 7);
    let data = pattern(3000, 9);
    net.fill(0, DATA, &data);
    // Node 1 prepares "when event 5 fires, put the bytes on to node 2".
    let forward = put(2, 0x1000, 0x2000, 3000, None, Some(6));
    net.fill(1, WORDS + 0x100, &forward.emit(1).to_bytes());
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(5),
            count: 1,
            action: EventAction {
                kind: ActionKind::Copy {
                    src: VA_WORDS + 0x100,
                    blocks: 1,
                },
                wake: false,
            },
        },
    );
    net.post(
        2,
        Command::ArmEvent {
            event: EventId(6),
            count: 1,
            action: write_action(6, 77),
        },
    );
    net.post(0, put(1, 0, 0x1000, 3000, None, Some(5)));
    net.run(100_000);
    assert_eq!(net.mem(2, DATA + 0x2000, 3000), data);
    assert_eq!(net.word(2, 6).value, 77);
    assert_eq!(net.nics[1].stats().chained, 1);
}

/// A combined trigger: the put leaves only once *both* events 5 and 6
/// have fired. Each one's COPY injects a `SET_EVENT` of join event 7; 7,
/// armed for two sets, injects the put and a second block (a local
/// completion word write) with one COPY.
#[test]
fn a_combined_trigger_starts_a_put_after_both_arrivals() {
    let mut net = Net::new(3, 11);
    let data = pattern(512, 3);
    net.fill(1, DATA + 0x1000, &data);
    let set_join = Command::SetEvent {
        event: EventId(7),
        count: 1,
        rail: None,
    };
    net.fill(1, WORDS + 0x100, &set_join.emit(0).to_bytes());
    let forward = put(2, 0x1000, 0x2000, 512, None, Some(6));
    let mark = Command::WriteWord {
        addr: VA_WORDS + 8 * 12,
        value: 0x5eed,
    };
    net.fill(1, WORDS + 0x140, &forward.emit(1).to_bytes());
    net.fill(1, WORDS + 0x180, &mark.emit(2).to_bytes());
    let copy = |src: u64, blocks: u8| EventAction {
        kind: ActionKind::Copy {
            src: VA_WORDS + src,
            blocks,
        },
        wake: false,
    };
    for ev in [5, 6] {
        net.post(
            1,
            Command::ArmEvent {
                event: EventId(ev),
                count: 1,
                action: copy(0x100, 1),
            },
        );
    }
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(7),
            count: 2,
            action: copy(0x140, 2),
        },
    );
    net.post(
        2,
        Command::ArmEvent {
            event: EventId(6),
            count: 1,
            action: write_action(6, 99),
        },
    );
    // The first arrival alone starts nothing.
    net.post(0, put(1, 0, 0x3000, 8, None, Some(5)));
    net.run(100_000);
    assert_eq!(net.mem(2, DATA + 0x2000, 512), vec![0; 512]);
    assert_eq!(net.mem(1, WORDS + 8 * 12, 8), vec![0; 8]);
    // The second does: the put and the word, from one COPY.
    net.post(0, put(1, 0, 0x3008, 8, None, Some(6)));
    net.run(100_000);
    assert_eq!(net.mem(2, DATA + 0x2000, 512), data);
    assert_eq!(net.word(2, 6).value, 99);
    assert_eq!(net.mem(1, WORDS + 8 * 12, 8), 0x5eedu64.to_le_bytes());
    assert_eq!(
        net.nics[1].stats().chained,
        4,
        "two sets, then put and word"
    );
}

/// A COPY of more blocks than the chain queue has room for injects none
/// of them (`ChainOverflow`); one that fits injects them all.
#[test]
fn a_copy_that_does_not_fit_injects_nothing() {
    let mut net = Net::new(1, 12);
    let nop = Command::Nop.emit(0).to_bytes();
    for i in 0..4u64 {
        net.fill(0, WORDS + 0x100 + 64 * i, &nop);
    }
    let e = &mut net.nics[0];
    // Three entries left (the queued ones stand for commands not run yet).
    e.chain.tail = e.chain.head + crate::abi::CHAIN_DEPTH as u64 - 3;
    let (tail, chained) = (e.chain.tail, e.stats().chained);
    assert_eq!(
        e.inject_chain(0, VA_WORDS + 0x100, 4),
        Err(ErrorCode::ChainOverflow)
    );
    assert_eq!(
        (e.chain.tail, e.stats().chained),
        (tail, chained),
        "nothing injected"
    );
    assert_eq!(e.inject_chain(0, VA_WORDS + 0x100, 3), Ok(()));
    assert_eq!((e.chain.tail, e.stats().chained), (tail + 3, chained + 3));
    // A range that is not readable in full injects nothing either.
    e.chain.head = e.chain.tail;
    let tail = e.chain.tail;
    assert_eq!(
        e.inject_chain(0, VA_DATA + DATA_LEN - 64, 2),
        Err(ErrorCode::Protection)
    );
    assert_eq!(e.chain.tail, tail);
}

/// `SET_EVENT` naming a sibling rail goes out on the node's NIC-to-NIC
/// path and counts at the sibling; one naming this NIC's own rail is
/// local; a sibling set of an event outside the table is reported there.
#[test]
fn a_sibling_set_event_counts_on_the_other_nic() {
    let mut net = Net::new(2, 13);
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(4),
            count: 2,
            action: write_action(4, 44),
        },
    );
    net.post(
        0,
        Command::SetEvent {
            event: EventId(4),
            count: 2,
            rail: Some(1),
        },
    );
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(3),
            count: 1,
            action: write_action(3, 33),
        },
    );
    net.post(
        0,
        Command::SetEvent {
            event: EventId(3),
            count: 1,
            rail: Some(0),
        },
    );
    net.run(100_000);
    assert_eq!(net.word(1, 4).value, 44, "counted on the sibling");
    // A full sibling FIFO holds the set (and the ring behind it) until
    // there is room: nothing is lost, no error is reported.
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(5),
            count: 1,
            action: write_action(5, 55),
        },
    );
    net.nics[0].hardware_mut().peer_full = true;
    net.post(
        0,
        Command::SetEvent {
            event: EventId(5),
            count: 1,
            rail: Some(1),
        },
    );
    net.run_for(1000);
    assert_eq!(net.word(1, 5).value, 0, "held while the FIFO is full");
    net.nics[0].hardware_mut().peer_full = false;
    net.run(100_000);
    assert_eq!(net.word(1, 5).value, 55, "sent once there is room");
    assert!(net.errors(0).is_empty(), "{:?}", net.errors(0));
    assert_eq!(net.word(0, 3).value, 33, "own rail: a local set");
    assert_eq!(net.word(0, 4).value, 0, "not counted here");
    // A set the sibling cannot count: an event beyond its table.
    net.nics[1].hardware_mut().peer_in.push_back(PeerSet {
        ctx: 0,
        event: EventId(10_000),
        count: 1,
    });
    net.run(100_000);
    let errors = net.errors(1);
    assert_eq!(
        errors.last().map(|e| (e.code, e.cookie)),
        Some((ErrorCode::BadEvent, 10_000))
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

/// Chained commands a context left behind do not run for the next owner
/// of its index. Context 1's chained sibling set stalls at the head of
/// the node's chain queue on a full sibling FIFO. Behind it, a COPY of
/// context 0 injects a put to node 1 and a word write. Context 0 is
/// detached and attached again by a new owner with the same regions; once
/// the FIFO drains, context 1's set goes on and neither of context 0's old
/// commands runs (without the clearing at detach, the put lands in node
/// 1's arena and the word in the new owner's words), while the new
/// owner's own command does.
#[test]
fn chained_commands_of_a_detached_context_do_not_run_for_the_next_owner() {
    let mut net = Net::new(2, 14);
    net.attach_second(0);
    // The sibling set counts here (the harness's NIC `rail` stands for
    // the sibling on that rail; context 1 exists there too).
    net.attach_second(1);
    net.post_second(
        1,
        &[Command::ArmEvent {
            event: EventId(5),
            count: 1,
            action: write_action(5, 55),
        }],
    );
    let sibling_set = Command::SetEvent {
        event: EventId(5),
        count: 1,
        rail: Some(1),
    };
    net.fill(0, WORDS_1 + 0x100, &sibling_set.emit(1).to_bytes());
    let data = pattern(64, 5);
    net.fill(0, DATA, &data);
    let old = [
        put(1, 0, 0x2000, 64, None, None),
        Command::WriteWord {
            addr: VA_WORDS + 8 * 12,
            value: 0xdead,
        },
    ];
    for (i, b) in old.iter().enumerate() {
        net.fill(0, WORDS + 0x100 + 64 * i as u64, &b.emit(2).to_bytes());
    }
    let copy = |blocks: u8| EventAction {
        kind: ActionKind::Copy {
            src: VA_WORDS + 0x100,
            blocks,
        },
        wake: false,
    };
    net.nics[0].hardware_mut().peer_full = true;
    net.post_second(
        0,
        &[
            Command::ArmEvent {
                event: EventId(9),
                count: 1,
                action: copy(1),
            },
            Command::SetEvent {
                event: EventId(9),
                count: 1,
                rail: None,
            },
        ],
    );
    net.run_for(1000);
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(9),
            count: 1,
            action: copy(2),
        },
    );
    net.post(
        0,
        Command::SetEvent {
            event: EventId(9),
            count: 1,
            rail: None,
        },
    );
    net.run_for(1000);
    let e = &net.nics[0];
    assert_eq!(
        (e.stats().chained, e.chain.tail - e.chain.head),
        (3, 3),
        "all three injected, none run"
    );
    assert_eq!(
        net.mailbox(0, MailboxOp::DetachContext, [0, 0, 0, 0]),
        Ok(())
    );
    net.attach(0);
    net.post(
        0,
        Command::WriteWord {
            addr: VA_WORDS + 8 * 13,
            value: 0x600d,
        },
    );
    net.nics[0].hardware_mut().peer_full = false;
    net.run(100_000);
    assert_eq!(
        net.mem(1, WORDS_1 + 8 * 5, 8),
        55u64.to_le_bytes(),
        "context 1's set went on"
    );
    assert_eq!(
        net.mem(1, DATA + 0x1f00, 0x300),
        vec![0; 0x300],
        "node 1's arena around the old put's target"
    );
    assert_eq!(net.word(0, 12).value, 0, "the old word write");
    assert_eq!(net.word(0, 13).value, 0x600d, "the new owner's command ran");
    assert_eq!(
        net.nics[0].chain.head, net.nics[0].chain.tail,
        "chain drained"
    );
}

#[test]
fn malformed_commands_fail_alone_and_the_queue_keeps_going() {
    let mut net = Net::new(2, 8);
    let mut bad = Command::Nop.emit(99).to_bytes();
    bad[0] = 0xee;
    net.post_raw(0, bad);
    net.post(
        0,
        Command::WriteWord {
            addr: 0xdead_0000,
            value: 1,
        },
    );
    net.post(0, put(7, 0, 0, 8, Some(1), None));
    net.post(
        0,
        Command::SetEvent {
            event: EventId(1000),
            count: 1,
            rail: None,
        },
    );
    net.post(
        0,
        Command::WriteWord {
            addr: VA_WORDS + 8 * 9,
            value: 0xabc,
        },
    );
    net.run(1000);
    let errs: Vec<ErrorCode> = net.errors(0).iter().map(|e| e.code).collect();
    assert_eq!(
        errs,
        vec![
            ErrorCode::UnknownOpcode,
            ErrorCode::Protection,
            ErrorCode::BadVp,
            ErrorCode::BadEvent
        ]
    );
    assert_eq!(net.errors(0)[0].cookie, 99);
    assert_eq!(net.word(0, 9).value, 0xabc);
}

#[test]
fn a_malformed_dma_still_fires_its_completion_event_with_the_error() {
    let mut net = Net::new(2, 13);
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(7),
            count: 1,
            action: write_action(7, 70),
        },
    );
    let mut block = put(1, 0, 0, 64, Some(7), None).emit(3);
    block.flags = 0x80; // undefined flag bit
    net.post_raw(0, block.to_bytes());
    net.run(1000);
    assert_eq!(
        net.word(0, 7),
        CompletionWord {
            value: 70,
            status: Some(Err(ErrorCode::ReservedNonZero))
        }
    );
}

#[test]
fn many_outstanding_puts_in_both_directions() {
    let mut net = Net::new(2, 9);
    net.fill(0, DATA, &pattern(0x8000, 1));
    net.fill(1, DATA, &pattern(0x8000, 2));
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(0),
            count: 100,
            action: write_action(0, 1),
        },
    );
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(0),
            count: 100,
            action: write_action(0, 1),
        },
    );
    for i in 0..50u64 {
        net.post(0, put(1, i * 256, 0x10000 + i * 256, 256, Some(0), Some(0)));
        net.post(1, put(0, i * 256, 0x10000 + i * 256, 256, Some(0), Some(0)));
    }
    net.run(100_000);
    assert_eq!(
        net.mem(1, DATA + 0x10000, 50 * 256),
        pattern(0x8000, 1)[..50 * 256].to_vec()
    );
    assert_eq!(
        net.mem(0, DATA + 0x10000, 50 * 256),
        pattern(0x8000, 2)[..50 * 256].to_vec()
    );
    assert_eq!(net.word(0, 0).value, 1);
    assert_eq!(net.word(1, 0).value, 1);
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

#[test]
fn unreachable_peer_fails_the_dma_once() {
    let mut net = Net::new(2, 10);
    put_to_a_silent_peer(&mut net, 10_000);
}

#[test]
fn mailbox_rejects_bad_configuration() {
    let mut net = Net::new(1, 11);
    let overlap = RegionConfig {
        ctx: 0,
        slot: 5,
        perms: RegionPerms::all(),
        va: VA_DATA + 8,
        len: 8,
        phys: 0,
    };
    assert_eq!(
        net.mailbox(0, MailboxOp::MapRegion, overlap.to_args()),
        Err(ErrorCode::BadConfig)
    );
    let no_ctx = RegionConfig { ctx: 3, ..overlap };
    assert_eq!(
        net.mailbox(0, MailboxOp::MapRegion, no_ctx.to_args()),
        Err(ErrorCode::NoContext)
    );
    assert_eq!(
        net.mailbox(0, MailboxOp::SetParam, [1, 1000, 0, 0]),
        Err(ErrorCode::BadConfig)
    );
    assert_eq!(net.mailbox(0, MailboxOp::SetParam, [1, 1024, 0, 0]), Ok(()));
    assert_eq!(
        net.mailbox(0, MailboxOp::SetParam, [9, 1, 0, 0]),
        Err(ErrorCode::BadConfig)
    );
    assert_eq!(
        net.mailbox(0, MailboxOp::UnmapRegion, [200, 0, 0, 0]),
        Err(ErrorCode::BadConfig)
    );
    assert_eq!(
        net.mailbox(0, MailboxOp::DetachContext, [0, 0, 0, 0]),
        Ok(())
    );
    assert_eq!(
        net.mailbox(0, MailboxOp::DetachContext, [0, 0, 0, 0]),
        Err(ErrorCode::NoContext)
    );
}

mod random_inputs {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Any command bytes and any packet bytes: the engine neither panics
        /// nor stops serving; a valid put afterwards still works.
        #[test]
        fn engine_survives_arbitrary_commands_and_packets(
            cmds in proptest::collection::vec((0u8..10, proptest::collection::vec(any::<u8>(), 63)), 0..40),
            packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 64), 0..40),
        ) {
            let mut net = Net::new(2, 12);
            for (op, body) in &cmds {
                let mut raw = [0u8; 64];
                raw[0] = *op;
                raw[1..].copy_from_slice(body);
                // Keep some blocks mostly valid so deeper paths are reached.
                if body[0] & 1 == 0 { raw[1..4].fill(0); raw[40..].fill(0); }
                net.post_raw(0, raw);
            }
            for p in &packets {
                let mut raw = [0u8; 64];
                raw.copy_from_slice(p);
                let mut h = PacketHeader::from_bytes(&raw);
                if p[0] & 1 == 0 {
                    // Valid checksum and version, so the parser's later checks run.
                    h.version = crate::abi::packet::WIRE_VERSION;
                    h.dst_node = zerocopy::little_endian::U16::new(1);
                    let b = h.to_bytes();
                    h.checksum = zerocopy::little_endian::U32::new(crate::abi::packet::checksum(&b));
                }
                net.nics[1]
                    .hardware_mut()
                    .inbox
                    .push_back((h, vec![0; (p[1] as usize) * 8], Path::Direct));
            }
            net.run(100_000);
            put_and_check(&mut net, 3000);
        }
    }
}

/// Forged packets: what an attacker on the wire can make a NIC write.
mod forged_packets {
    use super::*;
    use crate::abi::packet::{BcastPacket, DataPacket, GetRequestPacket, Packet, Route};
    use proptest::prelude::*;

    /// A read-only region of node 1 (no REMOTE_WRITE).
    const RO: u64 = 0x80000;
    const VA_RO: u64 = 0x5000_0000;
    const RO_LEN: u64 = 0x1000;
    /// The error ring: the NIC reports rejected packets there.
    const ERRS_LEN: u64 = 16 * 32;
    const KEY: u32 = 0x1234;

    /// Addresses at and across the edges of every region, and anywhere.
    fn address() -> impl Strategy<Value = u64> {
        prop_oneof![
            (0u64..0x200).prop_map(|o| VA_DATA + o),
            (0u64..0x200).prop_map(|o| VA_DATA + DATA_LEN - 0x100 + o),
            (0u64..0x200).prop_map(|o| VA_DATA - 0x100 + o),
            (0u64..0x1100).prop_map(|o| VA_RO + o),
            (0u64..0x1100).prop_map(|o| VA_WORDS + o),
            (0u64..0x100).prop_map(|o| u64::MAX - o),
            any::<u64>(),
        ]
    }

    #[derive(Clone, Debug)]
    struct Forged {
        /// 0: data, 1: broadcast, 2: get request.
        kind: u8,
        ctx: u8,
        key: u32,
        addr: u64,
        /// How far before `addr` the forged DMA starts.
        dma_back: u64,
        len: u32,
        /// How far the forged DMA runs past `addr + len` (wrapping).
        dma_past: u32,
        /// Flag bits of a data packet: last, get response, wake, queue.
        flags: u8,
        event: u32,
        /// The payload is not `len` bytes.
        short: bool,
    }

    fn forged() -> impl Strategy<Value = Forged> {
        (
            (
                0u8..3,
                prop_oneof![Just(0u8), 0u8..4],
                prop_oneof![Just(KEY), any::<u32>()],
            ),
            (address(), prop_oneof![0u64..0x100, any::<u64>()]),
            (0u32..300, prop_oneof![0u32..0x300, any::<u32>()]),
            (
                any::<u8>(),
                prop_oneof![Just(u32::MAX), 0u32..70],
                any::<u8>(),
            ),
        )
            .prop_map(
                |((kind, ctx, key), (addr, dma_back), (len, dma_past), (flags, event, short))| {
                    Forged {
                        kind,
                        ctx,
                        key,
                        addr,
                        dma_back,
                        len,
                        dma_past,
                        flags,
                        event,
                        short: short % 8 == 0,
                    }
                },
            )
    }

    impl Forged {
        fn dma_addr(&self) -> u64 {
            self.addr.wrapping_sub(self.dma_back)
        }

        fn dma_len(&self) -> u32 {
            (self.dma_back as u32)
                .wrapping_add(self.len)
                .wrapping_add(self.dma_past)
        }

        /// The packet, from node 0 to node 1, as flow packet `seq` or
        /// broadcast `id`.
        fn packet(&self, seq: u32, id: u32) -> Packet {
            let route = Route {
                src_node: 0,
                src_ctx: 0,
                dst_node: 1,
                dst_ctx: self.ctx,
                job_key: self.key,
            };
            match self.kind {
                0 => {
                    let queue = self.flags & 8 != 0;
                    Packet::Data(DataPacket {
                        route,
                        seq,
                        addr: if queue { 0 } else { self.addr },
                        len: self.len,
                        event: self.event,
                        cookie: 0,
                        last: self.flags & 1 != 0 || queue,
                        get_response: self.flags & 2 != 0 && !queue,
                        dma_addr: if queue { 0 } else { self.dma_addr() },
                        dma_len: self.dma_len(),
                        wake: self.flags & 4 != 0,
                        queue,
                        retry: false,
                    })
                }
                1 => Packet::Bcast(BcastPacket {
                    route: Route {
                        dst_node: 0,
                        ..route
                    },
                    high_node: 1,
                    id,
                    index: 0,
                    addr: self.addr,
                    len: self.len,
                    event: self.event,
                    cookie: 0,
                    last: self.flags & 1 != 0,
                    dma_addr: self.dma_addr(),
                    dma_len: self.dma_len(),
                }),
                _ => Packet::GetRequest(GetRequestPacket {
                    route,
                    seq,
                    src_addr: self.addr,
                    dst_addr: self.dma_addr(),
                    len: self.len,
                    src_event: self.event,
                    dst_event: u32::MAX,
                    cookie: 0,
                }),
            }
        }

        /// The bytes of node 1's memory this packet may write: its own
        /// target range, if it names context 0 with the job's key and its
        /// whole DMA lies in the remotely writable data region.
        fn may_write(&self) -> Option<core::ops::Range<u64>> {
            let writes = self.kind == 1 || (self.kind == 0 && self.flags & 8 == 0);
            let dma_end = self.dma_addr().checked_add(u64::from(self.dma_len()))?;
            let end = self.addr.checked_add(u64::from(self.len))?;
            (writes
                && self.ctx == 0
                && self.key == KEY
                && self.dma_addr() >= VA_DATA
                && dma_end <= VA_DATA + DATA_LEN
                && self.addr >= self.dma_addr()
                && end <= dma_end)
                .then(|| self.addr - VA_DATA + DATA..end - VA_DATA + DATA)
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Packets forged with valid headers and checksums, in sequence
        /// (the attacker knows the flow), naming any context, key, address,
        /// DMA range, length and flags: node 1 writes nothing outside the
        /// target ranges of packets that name its context with the job's
        /// key and a DMA wholly inside its remotely writable region. Every
        /// byte of its memory is checked, the read-only region and the
        /// completion words included (only its error ring, where it
        /// reports the rejections, may change).
        #[test]
        fn forged_packets_write_nothing_outside_a_permitted_target(
            packets in proptest::collection::vec(forged(), 1..24),
        ) {
            let mut net = Net::new(2, 40);
            let ro = RegionConfig {
                ctx: 0,
                slot: 2,
                perms: RegionPerms::LOCAL_READ | RegionPerms::REMOTE_READ,
                va: VA_RO,
                len: RO_LEN,
                phys: RO,
            };
            prop_assert_eq!(net.mailbox(1, MailboxOp::MapRegion, ro.to_args()), Ok(()));
            let before = net.mem(1, 0, MEM);
            let mut seq = 0;
            for (i, f) in packets.iter().enumerate() {
                let packet = f.packet(seq, i as u32 + 1);
                if f.kind != 1 {
                    seq += 1;
                }
                let len = if f.short { f.len / 2 + 1 } else { f.len } as usize;
                net.nics[1]
                    .hardware_mut()
                    .inbox
                    .push_back((packet.emit(), vec![0xa5; len], Path::Direct));
                // What node 1 sends (acks, get responses) goes nowhere.
                for _ in 0..4 {
                    net.nics[1].poll();
                    net.nics[1].hardware_mut().outbox.clear();
                }
            }
            let after = net.mem(1, 0, MEM);
            let allowed: Vec<_> = packets.iter().filter_map(Forged::may_write).collect();
            for (at, (b, a)) in before.iter().zip(&after).enumerate() {
                let at = at as u64;
                if b == a || (ERRS..ERRS + ERRS_LEN).contains(&at) {
                    continue;
                }
                prop_assert!(
                    allowed.iter().any(|r| r.contains(&at)),
                    "byte {at:#x} written ({b:#04x} -> {a:#04x}); permitted: {allowed:x?}"
                );
            }
            // The region that forbids remote writes is as it was.
            let ro_bytes = (RO as usize)..(RO + RO_LEN) as usize;
            prop_assert_eq!(&before[ro_bytes.clone()], &after[ro_bytes]);
        }
    }
}

/// The engine's tables must fit a soft core's RAM: the reference image
/// (64 nodes, 64 events per context) has 512 KiB of RAM for everything.
#[test]
fn engine_tables_fit_the_reference_soft_core() {
    use crate::fuzzing::SimBoard;
    let image = core::mem::size_of::<Engine<SimBoard, 64, 64>>() - core::mem::size_of::<SimBoard>();
    std::println!("engine state, 64 nodes x 64 events: {image} bytes");
    std::println!(
        "engine state, 256 nodes x 512 events: {} bytes",
        core::mem::size_of::<Engine<SimBoard, 256, 512>>() - core::mem::size_of::<SimBoard>()
    );
    assert!(
        image < 128 * 1024,
        "{image} bytes leaves too little of 512 KiB for stack and code"
    );
}

/// Queued DMAs from 3 senders into a 2-slot queue on node 0: the queue is
/// full most of the time, senders are nacked and retry; every item arrives
/// exactly once, each sender's items in order.
#[test]
fn queued_dmas_fill_a_small_queue_without_loss_or_reordering() {
    let mut net = Net::new(4, 14);
    // The consumer drains between rounds in which time may jump far ahead:
    // refusals may last as long as they like here.
    set_param(&mut net, 0, Param::QueueWaitNs, 3_600_000_000_000);
    let base = VA_DATA + 0x20000;
    let slot = 64u32;
    net.post(
        0,
        Command::QueueInit {
            queue: 2,
            slots: 2,
            slot_size: slot,
            event: None,
            base,
        },
    );
    net.run(100);
    let per_sender = 6u32;
    for sender in 1..4usize {
        for i in 0..per_sender {
            let payload = [sender as u8, i as u8, 0xab, 0xcd];
            net.fill(sender, DATA + 64 * i as u64, &payload);
            net.post(
                sender,
                Command::Dma(DmaCommand {
                    kind: DmaKind::Queued(2),
                    len: 4,
                    vp: 0,
                    src_addr: VA_DATA + 64 * i as u64,
                    dst_addr: 0,
                    src_event: None,
                    dst_event: None,
                    wake: false,
                }),
            );
        }
    }
    let header = DATA + 0x20000;
    let mut got: Vec<(usize, u8)> = Vec::new();
    let mut consumed = 0u64;
    for _ in 0..200 {
        // Senders of a full queue retry until it drains: no quiescence.
        net.run_for(2_000);
        let produced = u64::from_le_bytes(net.mem(0, header, 8).try_into().unwrap());
        assert!(produced - consumed <= 2, "never more items than slots");
        while consumed < produced {
            let at = header + 64 + (consumed % 2) * slot as u64;
            let item = net.mem(0, at, 12);
            assert_eq!(
                u32::from_le_bytes(item[0..4].try_into().unwrap()),
                4,
                "item length"
            );
            let src_node = u16::from_le_bytes(item[4..6].try_into().unwrap()) as usize;
            assert_eq!(item[8] as usize, src_node, "payload names its sender");
            got.push((src_node, item[9]));
            consumed += 1;
        }
        net.fill(0, header + 8, &consumed.to_le_bytes());
        if got.len() == 3 * per_sender as usize {
            break;
        }
    }
    assert_eq!(got.len(), 18, "no loss");
    for sender in 1..4 {
        let seq: Vec<u8> = got
            .iter()
            .filter(|(s, _)| *s == sender)
            .map(|(_, i)| *i)
            .collect();
        assert_eq!(
            seq,
            (0..per_sender as u8).collect::<Vec<_>>(),
            "sender {sender} in order"
        );
    }
}

/// A broadcast from node 1 to nodes 0..=4 under loss, duplication and
/// corruption: every other node gets every byte and its event, the sender's
/// event fires once, and a hardware barrier of the 5 nodes releases all of
/// them only after the last arrival.
#[test]
fn broadcast_and_hardware_barrier_survive_a_lossy_rail() {
    for seed in 1..4 {
        let mut net = Net::new(5, 20 + seed);
        net.faults = Faults {
            drop: 80,
            duplicate: 40,
            corrupt: 40,
        };
        let data = pattern(20_000, 5);
        net.fill(1, DATA, &data);
        for node in 0..5 {
            if node != 1 {
                net.post(
                    node,
                    Command::ArmEvent {
                        event: EventId(2),
                        count: 1,
                        action: write_action(2, 20),
                    },
                );
            }
        }
        net.post(
            1,
            Command::ArmEvent {
                event: EventId(1),
                count: 1,
                action: write_action(1, 10),
            },
        );
        net.post(
            1,
            Command::Bcast {
                len: 20_000,
                low_node: 0,
                high_node: 4,
                src_addr: VA_DATA,
                dst_addr: VA_DATA + 0x8000,
                src_event: Some(EventId(1)),
                dst_event: Some(EventId(2)),
            },
        );
        net.run(200_000);
        assert_eq!(
            net.word(1, 1),
            CompletionWord {
                value: 10,
                status: Some(Ok(()))
            }
        );
        for node in [0, 2, 3, 4] {
            assert_eq!(net.mem(node, DATA + 0x8000, 20_000), data, "node {node}");
            assert_eq!(net.word(node, 2).value, 20);
        }
        assert_eq!(
            net.mem(1, DATA + 0x8000, 16),
            vec![0; 16],
            "the sender is not its own target"
        );
        // Barrier 1: four nodes arrive; nobody is released until the fifth
        // (which comes within the held wait's bound: 20 timeouts).
        for node in 0..4 {
            net.enter_barrier(node, (0, 4), 1, 3, 30);
        }
        net.run_for_ns(20 * 50_000_000);
        let early: Vec<_> = (0..5).map(|n| (net.word(n, 3), net.errors(n))).collect();
        assert!(
            (0..4).all(|n| net.word(n, 3).value == 0),
            "released before the last arrival: {early:?}"
        );
        net.enter_barrier(4, (0, 4), 1, 3, 30);
        net.run(200_000);
        assert!((0..5).all(|n| net.word(n, 3)
            == CompletionWord {
                value: 30,
                status: Some(Ok(()))
            }));
    }
}

#[test]
fn collective_commands_refuse_bad_ranges() {
    let mut net = Net::new(3, 30);
    net.post(
        0,
        Command::Bcast {
            len: 8,
            low_node: 0,
            high_node: 7,
            src_addr: VA_DATA,
            dst_addr: VA_DATA,
            src_event: None,
            dst_event: None,
        },
    );
    net.post(
        0,
        Command::HwBarrier {
            low_node: 1,
            high_node: 2,
            seq: 1,
            tag: 0,
            event: None,
        },
    );
    let mut inverted = Command::HwBarrier {
        low_node: 0,
        high_node: 2,
        seq: 1,
        tag: 0,
        event: None,
    }
    .emit(0)
    .to_bytes();
    inverted[8..10].copy_from_slice(&2u16.to_le_bytes());
    inverted[10..12].copy_from_slice(&0u16.to_le_bytes());
    net.post_raw(0, inverted);
    net.run(1000);
    let codes: Vec<ErrorCode> = net.errors(0).iter().map(|e| e.code).collect();
    assert_eq!(
        codes,
        vec![ErrorCode::BadVp, ErrorCode::BadVp, ErrorCode::NotContiguous]
    );
}

impl Meter for Board {}

/// A QDMA input queue whose slot count is not a power of two, initialised
/// over a header whose consumer count is all ones (e.g. memory filled with
/// 0xff): the producer count starts at `u64::MAX` and wraps to 0 after one
/// item. `index % slots` is not continuous across that wrap (`u64::MAX % 3`
/// and `0 % 3` are both slot 0), so the NIC must not write item 1 before
/// item 0 is consumed; every item arrives, in order, none overwritten.
#[test]
fn queued_dmas_across_the_counter_wrap_do_not_overwrite_unread_items() {
    let mut net = Net::new(2, 15);
    // A patient queue: the consumer drains between long runs.
    set_param(&mut net, 0, Param::QueueWaitNs, 3_600_000_000_000);
    let base = VA_DATA + 0x20000;
    let header = DATA + 0x20000;
    let slot = 64u32;
    let slots = 3u64;
    net.fill(0, header + 8, &u64::MAX.to_le_bytes());
    net.post(
        0,
        Command::QueueInit {
            queue: 1,
            slots: slots as u32,
            slot_size: slot,
            event: None,
            base,
        },
    );
    net.run(100);
    assert_eq!(
        u64::from_le_bytes(net.mem(0, header, 8).try_into().unwrap()),
        u64::MAX,
        "the producer count starts at the consumer count"
    );
    let items = 4u8;
    for i in 0..items {
        net.fill(1, DATA + 64 * u64::from(i), &[0x5a, i]);
        net.post(
            1,
            Command::Dma(DmaCommand {
                kind: DmaKind::Queued(1),
                len: 2,
                vp: 0,
                src_addr: VA_DATA + 64 * u64::from(i),
                dst_addr: 0,
                src_event: None,
                dst_event: None,
                wake: false,
            }),
        );
    }
    // Nothing is consumed yet: the first item must still be intact however
    // long the sender retries.
    net.run_for(2_000);
    let first = net.mem(0, header + 64 + (u64::MAX % slots) * u64::from(slot), 10);
    assert_eq!(&first[8..10], &[0x5a, 0], "item 0 not overwritten");
    let mut consumed = u64::MAX;
    let mut got = Vec::new();
    for _ in 0..100 {
        net.run_for(2_000);
        let produced = u64::from_le_bytes(net.mem(0, header, 8).try_into().unwrap());
        assert!(produced.wrapping_sub(consumed) <= slots);
        while consumed != produced {
            let at = header + 64 + (consumed % slots) * u64::from(slot);
            let item = net.mem(0, at, 10);
            assert_eq!(&item[0..4], &2u32.to_le_bytes(), "item length");
            assert_eq!(item[8], 0x5a);
            got.push(item[9]);
            consumed = consumed.wrapping_add(1);
        }
        net.fill(0, header + 8, &consumed.to_le_bytes());
        if got.len() == usize::from(items) {
            break;
        }
    }
    assert_eq!(got, (0..items).collect::<Vec<_>>(), "every item, in order");
    assert!(net.errors(0).is_empty() && net.errors(1).is_empty());
}

/// Write `block` at command-ring index `tail` and publish `tail + 1`
/// (wrapping: `Net::post_raw` cannot cross 2^64).
fn post_at(net: &mut Net, node: usize, tail: u64, block: [u8; 64]) {
    let ring = crate::abi::Ring::from_log2(6).unwrap();
    let hw = net.nics[node].hardware_mut();
    hw.write(RING + ring.byte_offset(tail, 64), &block).unwrap();
    hw.store(
        regs::ctx_reg(0, regs::CQ_TAIL).unwrap(),
        tail.wrapping_add(1),
    );
    hw.doorbells |= 1;
}

/// A `CQ_TAIL` more than the ring ahead of `CQ_HEAD`, or behind it, is an
/// overrun: one `QueueOverrun` record, `CQ_HEAD := CQ_TAIL`, no block read.
/// After a resynchronisation just below 2^64 the queue runs on across the
/// wrap of the free-running counters.
#[test]
fn a_malformed_cq_tail_is_an_overrun_and_the_queue_runs_on_across_the_wrap() {
    let mut net = Net::new(2, 16);
    let tail_reg = regs::ctx_reg(0, regs::CQ_TAIL).unwrap();
    let head_reg = regs::ctx_reg(0, regs::CQ_HEAD).unwrap();
    let ring_tail = |net: &mut Net, tail: u64| {
        let hw = net.nics[0].hardware_mut();
        hw.store(tail_reg, tail);
        hw.doorbells |= 1;
        net.run(100);
        net.nics[0].hardware().load(head_reg)
    };
    // 65 blocks into a 64-block ring; then a tail behind the head; then
    // a tail 2^63 ahead; then two below the wrap.
    let tails = [65, 3, 3 + (1 << 63), u64::MAX - 1];
    for (i, tail) in tails.into_iter().enumerate() {
        assert_eq!(ring_tail(&mut net, tail), tail, "resynchronised");
        let errors = net.errors(0);
        assert_eq!(errors.len(), i + 1);
        assert_eq!(errors[i].code, ErrorCode::QueueOverrun);
    }
    // Four writes at indices 2^64 - 2 .. 2^64 + 2, across the wrap.
    for (i, tail) in (0..4u64).map(|i| (i, (u64::MAX - 1).wrapping_add(i))) {
        let cmd = Command::WriteWord {
            addr: VA_WORDS + 8 * (20 + i),
            value: 0x100 + i,
        };
        post_at(&mut net, 0, tail, cmd.emit(0).to_bytes());
        net.run(100);
    }
    assert_eq!(net.nics[0].hardware().load(head_reg), 2);
    for i in 0..4 {
        assert_eq!(net.word(0, 20 + i).value, 0x100 + i);
    }
    assert_eq!(net.errors(0).len(), tails.len(), "no further errors");
}

/// More errors than the error ring holds: each record sits at slot
/// `n mod entries` and carries its number `n`; the oldest are overwritten,
/// which a reader tells from `ERR_COUNT` (`Ring::unread`).
#[test]
fn the_error_ring_wraps_and_every_record_carries_its_number() {
    let mut net = Net::new(2, 17);
    let total = 21u64;
    for cookie in 0..total {
        let mut bad = Command::Nop.emit(cookie as u32).to_bytes();
        bad[0] = 0xee;
        net.post_raw(0, bad);
    }
    net.run(1000);
    let count = net.nics[0]
        .hardware()
        .load(regs::ctx_reg(0, regs::ERR_COUNT).unwrap());
    assert_eq!(count, total);
    let ring = crate::abi::Ring::from_log2(4).unwrap();
    let unread = ring.unread(0, count);
    assert_eq!((unread.start, unread.lost), (total - 16, total - 16));
    for n in unread.indices() {
        let raw = net.mem(0, ERRS + ring.byte_offset(n, 32), 32);
        let info = ErrorInfo::parse(&ErrorRecord::read_from_bytes(&raw).unwrap()).unwrap();
        assert_eq!((info.seq, u64::from(info.cookie)), (n, n));
        assert_eq!(info.code, ErrorCode::UnknownOpcode);
    }
}

/// A context detached with a hardware barrier pending leaves it: its NIC
/// stops re-announcing it, the switch no longer counts its arrival (the
/// others are not released by the last remaining member), and the
/// context's next owner runs its own barrier instead of stalling behind
/// the stale one.
#[test]
fn detach_leaves_a_pending_barrier_and_the_next_owner_runs() {
    let mut net = Net::new(3, 31);
    for node in 0..2 {
        net.enter_barrier(node, (0, 2), 1, 3, 30);
    }
    net.run_for_ns(20 * 50_000_000);
    assert_eq!(
        net.mailbox(1, MailboxOp::DetachContext, [0, 0, 0, 0]),
        Ok(())
    );
    // The last member arrives: node 1 left, so nobody is released.
    net.post(
        2,
        Command::HwBarrier {
            low_node: 0,
            high_node: 2,
            seq: 1,
            tag: 0,
            event: None,
        },
    );
    net.run_for_ns(20 * 50_000_000);
    assert_eq!(net.word(0, 3).value, 0, "released without node 1");
    // The context's next owner: a barrier of its own node alone.
    net.attach(1);
    net.enter_barrier(1, (1, 1), 1, 4, 40);
    net.run_for(20_000);
    assert_eq!(
        net.word(1, 4),
        CompletionWord {
            value: 40,
            status: Some(Ok(()))
        },
        "the new owner's barrier ran"
    );
}

/// A region may not be unmapped while a broadcast of its context is in
/// flight (the broadcast reads its source on every send and resend): the
/// unmap is refused with `Busy`, as for a DMA, and succeeds once the
/// broadcast has completed.
#[test]
fn unmap_waits_for_a_broadcast_in_flight() {
    let mut net = Net::new(3, 32);
    net.faults = Faults {
        drop: 1000,
        duplicate: 0,
        corrupt: 0,
    };
    net.fill(1, DATA, &pattern(20_000, 6));
    net.post(
        1,
        Command::Bcast {
            len: 20_000,
            low_node: 0,
            high_node: 2,
            src_addr: VA_DATA,
            dst_addr: VA_DATA + 0x8000,
            src_event: None,
            dst_event: None,
        },
    );
    net.run_for(5);
    assert_eq!(
        net.mailbox(1, MailboxOp::UnmapRegion, [0, 0, 0, 0]),
        Err(ErrorCode::Busy),
        "the broadcast still reads slot 0"
    );
    net.faults = Faults::default();
    net.run(200_000);
    assert_eq!(net.mem(0, DATA + 0x8000, 20_000), pattern(20_000, 6));
    assert_eq!(net.mailbox(1, MailboxOp::UnmapRegion, [0, 0, 0, 0]), Ok(()));
}

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

/// A four-packet put from node 0 to node 1 whose first transmission is
/// lost entirely; the packets are returned as they left.
fn lost_four_packet_put(net: &mut Net) -> Vec<(PacketHeader, Vec<u8>, Path)> {
    set_param(net, 0, Param::PacketSize, 64);
    set_param(net, 0, Param::RetryTimeoutNs, 10_000);
    net.fill(0, DATA, &pattern(256, 3));
    net.post(0, put(1, 0, 0x200, 256, None, None));
    net.nics[0].poll();
    let first = sent_data(net, 0);
    assert_eq!(first.len(), 4, "four 64-byte packets");
    first
}

/// After a timeout the sender probes with the oldest packet alone (a
/// congested receiver is not buried under a window from every sender);
/// once the probe is acknowledged the rest follows, and the data lands.
#[test]
fn a_timeout_probes_with_the_oldest_packet_then_resends_the_rest() {
    let mut net = Net::new(2, 21);
    let first = lost_four_packet_put(&mut net);
    let timer = net.nics[0].next_timer().expect("a retransmission timer");
    net.nics[0].hardware_mut().now = timer;
    // The timer starts the go-back; the next round transmits.
    net.nics[0].poll();
    net.nics[0].poll();
    let probe = sent_data(&mut net, 0);
    assert_eq!(probe.len(), 1, "only the oldest packet goes again");
    assert_eq!(probe[0].0.seq, first[0].0.seq);
    // The probe gets through; its ack sends the other three.
    net.nics[1].hardware_mut().inbox.push_back(probe[0].clone());
    net.nics[1].poll();
    let ack = sent_data(&mut net, 1);
    assert_eq!(ack.len(), 1);
    net.nics[0].hardware_mut().inbox.push_back(ack[0].clone());
    net.nics[0].poll();
    let rest = sent_data(&mut net, 0);
    let seqs: Vec<u32> = rest.iter().map(|(h, _, _)| h.seq.get()).collect();
    let want: Vec<u32> = first[1..].iter().map(|(h, _, _)| h.seq.get()).collect();
    assert_eq!(seqs, want);
    for p in rest {
        net.nics[1].hardware_mut().inbox.push_back(p);
    }
    net.run(10_000);
    assert_eq!(net.mem(1, DATA + 0x200, 256), pattern(256, 3));
    assert_eq!(net.nics[0].stats().retransmits, 4);
}

/// A silent peer's flow waits twice as long after each fruitless
/// timeout, up to eight times the configured one.
#[test]
fn the_retransmission_timeout_backs_off_while_the_peer_is_silent() {
    let mut net = Net::new(2, 22);
    lost_four_packet_put(&mut net);
    let mut gaps = Vec::new();
    let mut last = net.nics[0].hardware().now;
    for _ in 0..6 {
        let t = net.nics[0].next_timer().expect("a retransmission timer");
        gaps.push(t - last);
        last = t;
        net.nics[0].hardware_mut().now = t;
        net.nics[0].poll();
        net.nics[0].poll();
        assert_eq!(sent_data(&mut net, 0).len(), 1, "a probe, lost again");
    }
    assert_eq!(gaps, [10_000, 20_000, 40_000, 80_000, 80_000, 80_000]);
}

/// Packets behind a lost one each reach the receiver out of order; it asks
/// for the lost one once, not once per packet (each nack sends the whole
/// window back).
#[test]
fn a_gap_is_nacked_once_per_loss() {
    let mut net = Net::new(2, 23);
    let first = lost_four_packet_put(&mut net);
    // Node 1 takes `p` and answers: the types of what it sends.
    let answer = |net: &mut Net, p: &(PacketHeader, Vec<u8>, Path)| -> Vec<u8> {
        net.nics[1].hardware_mut().inbox.push_back(p.clone());
        net.nics[1].poll();
        sent_data(net, 1).iter().map(|(h, _, _)| h.ptype).collect()
    };
    let answers: Vec<u8> = first[1..]
        .iter()
        .flat_map(|p| answer(&mut net, p))
        .collect();
    assert_eq!(answers, [PacketType::Nack.as_raw()]);
    // The lost packet arrives (and is acked); a new gap behind it is
    // nacked again.
    assert_eq!(answer(&mut net, &first[0]), [PacketType::Ack.as_raw()]);
    assert_eq!(answer(&mut net, &first[2]), [PacketType::Nack.as_raw()]);
}

/// A queued DMA of `len` bytes from `src` (offset in the data region) to
/// input queue `queue`, with completion event `src_event`.
fn qdma(queue: u8, src: u64, len: u32, src_event: Option<u32>) -> Command {
    Command::Dma(DmaCommand {
        kind: DmaKind::Queued(queue),
        len,
        vp: 1,
        src_addr: VA_DATA + src,
        dst_addr: 0,
        src_event: src_event.map(EventId),
        dst_event: None,
        wake: false,
    })
}

/// Node 0 sends one queued item (its data offset 0, 2 bytes) to node 1's
/// queue 2, its completion word 1 written with 5.
fn send_one_item(net: &mut Net) {
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(1),
            count: 1,
            action: write_action(1, 5),
        },
    );
    net.post(0, qdma(2, 0, 2, Some(1)));
}

/// Input queue 2 of `slots` 64-byte slots on `node`, at data offset
/// 0x20000; returns the physical address of its header.
fn small_queue(net: &mut Net, node: usize, slots: u32) -> u64 {
    net.post(
        node,
        Command::QueueInit {
            queue: 2,
            slots,
            slot_size: 64,
            event: None,
            base: VA_DATA + 0x20000,
        },
    );
    net.run(100);
    DATA + 0x20000
}

/// The items in queue 2 of `node` (its header at `header`), in slot order:
/// each item's first payload byte.
fn queue_items(net: &Net, node: usize, header: u64, slots: u64) -> Vec<u8> {
    let produced = u64::from_le_bytes(net.mem(node, header, 8).try_into().unwrap());
    (0..produced)
        .map(|i| net.mem(node, header + 64 + (i % slots) * 64 + 8, 1)[0])
        .collect()
}

/// Three items for a two-slot queue nobody drains, then a plain put in the
/// same flow: the third item is refused for now, and the put behind it
/// lands and completes anyway (no head-of-line blocking). Once the queue
/// drains, the refused item goes again and lands, in order.
#[test]
fn a_refused_item_does_not_block_the_flow_and_goes_again() {
    let mut net = Net::new(2, 31);
    let header = small_queue(&mut net, 1, 2);
    for i in 0..3u8 {
        net.fill(0, DATA + 64 * u64::from(i), &[i, 0xa5]);
        net.post(0, qdma(2, 64 * u64::from(i), 2, None));
    }
    net.post(
        0,
        Command::ArmEvent {
            event: EventId(1),
            count: 1,
            action: write_action(1, 7),
        },
    );
    net.fill(0, DATA + 0x1000, &pattern(300, 9));
    net.post(0, put(1, 0x1000, 0x3000, 300, Some(1), None));
    // Rounds without time passing: the put is through, the item waits.
    for _ in 0..50 {
        for i in 0..2 {
            net.nics[i].poll();
            let out = sent_data(&mut net, i);
            let to = 1 - i;
            for p in out {
                net.nics[to].hardware_mut().inbox.push_back(p);
            }
        }
    }
    assert_eq!(net.mem(1, DATA + 0x3000, 300), pattern(300, 9));
    assert_eq!(
        net.word(0, 1),
        CompletionWord {
            value: 7,
            status: Some(Ok(()))
        }
    );
    assert_eq!(queue_items(&net, 1, header, 2), [0, 1]);
    assert!(net.nics[1].stats().packets_refused >= 1);
    // The consumer takes both; the refused item lands after them, in the
    // slot the first one left.
    net.fill(1, header + 8, &2u64.to_le_bytes());
    net.run(100_000);
    assert_eq!(
        u64::from_le_bytes(net.mem(1, header, 8).try_into().unwrap()),
        3
    );
    assert_eq!(net.mem(1, header + 64 + 8, 2), [2, 0xa5]);
    assert!(net.errors(0).is_empty() && net.errors(1).is_empty());
}

/// An item refused for longer than the queue wait fails with `QueueFull`,
/// exactly once, and nothing of it is written; the flow stays whole.
#[test]
fn an_item_refused_past_the_queue_wait_fails_with_queue_full() {
    let mut net = Net::new(2, 32);
    set_param(&mut net, 1, Param::QueueWaitNs, 1_000_000);
    let header = small_queue(&mut net, 1, 2);
    for i in 0..3u8 {
        net.fill(0, DATA + 64 * u64::from(i), &[i, 0x5a]);
        net.post(
            0,
            Command::ArmEvent {
                event: EventId(u32::from(i) + 1),
                count: 1,
                action: write_action(u64::from(i) + 1, 40 + u64::from(i)),
            },
        );
        net.post(0, qdma(2, 64 * u64::from(i), 2, Some(u32::from(i) + 1)));
    }
    let slots_before = net.mem(1, header, 64 + 3 * 64);
    net.run(100_000);
    assert_eq!(net.word(0, 1).value, 40);
    assert_eq!(net.word(0, 2).value, 41);
    assert_eq!(net.word(0, 1).status, Some(Ok(())));
    assert_eq!(net.word(0, 2).status, Some(Ok(())));
    assert_eq!(
        net.word(0, 3),
        CompletionWord {
            value: 42,
            status: Some(Err(ErrorCode::QueueFull))
        }
    );
    // Two items, and not a byte of the third anywhere in the queue.
    assert_eq!(queue_items(&net, 1, header, 2), [0, 1]);
    let after = net.mem(1, header, 64 + 3 * 64);
    assert_eq!(
        after[64 + 2 * 64..],
        slots_before[64 + 2 * 64..],
        "past the slots"
    );
    assert_eq!(net.nics[0].stats().dmas_completed, 3);
    // The flow is whole: a put still goes through.
    put_and_check(&mut net, 100);
}

/// An item sent before its queue is initialised waits for it (the two are
/// unordered: the sender cannot know), and lands once it exists.
#[test]
fn an_item_sent_before_its_queue_exists_lands_once_it_does() {
    let mut net = Net::new(2, 33);
    set_param(&mut net, 1, Param::QueueWaitNs, 10_000_000_000);
    net.fill(0, DATA, &[77, 1]);
    send_one_item(&mut net);
    net.run_for(50);
    assert_eq!(net.word(0, 1).value, 0, "refused for now, not failed");
    assert!(net.nics[1].stats().packets_refused >= 1);
    let header = small_queue(&mut net, 1, 2);
    net.run(100_000);
    assert_eq!(
        net.word(0, 1),
        CompletionWord {
            value: 5,
            status: Some(Ok(()))
        }
    );
    assert_eq!(queue_items(&net, 1, header, 2), [77]);
}

/// ... and fails with `NoQueue` if the queue never comes.
#[test]
fn an_item_whose_queue_never_comes_fails_with_no_queue() {
    let mut net = Net::new(2, 34);
    set_param(&mut net, 1, Param::QueueWaitNs, 1_000_000);
    send_one_item(&mut net);
    net.run(100_000);
    assert_eq!(
        net.word(0, 1),
        CompletionWord {
            value: 5,
            status: Some(Err(ErrorCode::NoQueue))
        }
    );
    assert_eq!(net.nics[0].stats().dmas_completed, 1);
}

fn status(net: &Net, node: usize) -> Status {
    Status::from_bits_retain(net.nics[node].hardware().reg_read(regs::STATUS.offset()))
}

/// Every node: small timeout, short retry limit, 64-byte packets, and the
/// sibling on rail 1 as the alternate path.
fn failover_ready(net: &mut Net) {
    for node in 0..net.nics.len() {
        set_param(net, node, Param::PacketSize, 64);
        set_param(net, node, Param::RetryTimeoutNs, 10_000);
        set_param(net, node, Param::RetryLimit, 2);
        set_param(net, node, Param::AlternateRail, 2);
    }
}

/// The rail dies after node 1 took a whole put but before its acks got
/// back. Past the retry limit node 0's flow goes on through the sibling
/// with the same sequence numbers: node 1 only acknowledges the packets
/// again (on the path they came by), so the data and the destination
/// event are applied exactly once, and the put completes without error.
#[test]
fn a_flow_past_its_retry_limit_goes_on_through_the_sibling_exactly_once() {
    let mut net = Net::new(2, 31);
    failover_ready(&mut net);
    let data = pattern(256, 5);
    net.fill(0, DATA, &data);
    for (node, event, value) in [(0, 1, 11), (1, 2, 12)] {
        net.post(
            node,
            Command::ArmEvent {
                event: EventId(event),
                count: 1,
                action: write_action(event.into(), value),
            },
        );
    }
    net.run(1000);
    net.post(0, put(1, 0, 0x400, 256, Some(1), Some(2)));
    net.nics[0].poll();
    for p in sent_data(&mut net, 0) {
        net.nics[1].hardware_mut().inbox.push_back(p);
    }
    net.nics[1].poll();
    assert_eq!(net.word(1, 2).value, 12, "the put landed");
    // Its acks are lost with the rail.
    let acks = sent_data(&mut net, 1);
    assert!(!acks.is_empty() && acks.iter().all(|p| p.2 == Path::Direct));
    net.direct_down = true;
    net.run(100_000);
    assert_eq!(
        net.word(0, 1),
        CompletionWord {
            value: 11,
            status: Some(Ok(()))
        }
    );
    assert_eq!(net.mem(1, DATA + 0x400, 256), data);
    assert_eq!(net.nics[0].stats().migrations, 1);
    assert!(net.nics[1].stats().duplicates >= 1);
    assert!(status(&net, 0).contains(Status::MIGRATED));
    // Exactly once: one more arm of the destination event does not fire
    // on a stray second set; a real set fires it.
    net.post(
        1,
        Command::ArmEvent {
            event: EventId(2),
            count: 1,
            action: write_action(2, 13),
        },
    );
    net.run(1000);
    assert_eq!(
        net.word(1, 2).value,
        12,
        "the destination event was set twice"
    );
    net.post(
        1,
        Command::SetEvent {
            event: EventId(2),
            count: 1,
            rail: None,
        },
    );
    net.run(1000);
    assert_eq!(net.word(1, 2).value, 13);

    // The rail comes back. Once the probe interval has passed, the next
    // put's flow tries its direct path, hears back on it, and leaves the
    // sibling; neither NIC is left MIGRATED (node 1 went round too if it
    // learned the path from node 0's packets, and came back with them).
    net.direct_down = false;
    for n in &mut net.nics {
        n.hardware_mut().now += 1_000_000;
    }
    let again = pattern(256, 6);
    net.fill(0, DATA, &again);
    net.post(0, put(1, 0, 0x800, 256, None, None));
    net.post(1, put(0, 0x400, 0x800, 256, None, None));
    net.run(100_000);
    assert_eq!(net.mem(1, DATA + 0x800, 256), again);
    assert_eq!(net.mem(0, DATA + 0x800, 256), data);
    assert_eq!(net.nics[0].stats().path_restores, 1);
    // Back for good: traffic both ways does not send either flow round
    // again (packets of the migrated days still in flight teach nothing
    // within 8 timeouts of a direct one).
    let migrations = [0, 1].map(|n| net.nics[n].stats().migrations);
    for round in 0..10 {
        net.post(0, put(1, 0, 0x800, 256, None, None));
        net.post(1, put(0, 0x400, 0x800, 256, None, None));
        net.run(100_000);
        for n in &mut net.nics {
            n.hardware_mut().now += 5_000 * round;
        }
    }
    assert_eq!([0, 1].map(|n| net.nics[n].stats().migrations), migrations);
    for node in 0..2 {
        assert!(
            !status(&net, node).contains(Status::MIGRATED),
            "node {node}"
        );
    }
}

/// Without an alternate, or with a dead alternate too, a flow breaks as
/// before (`PeerUnreachable`), after migrating once at most; an alternate
/// naming the NIC's own rail is refused.
#[test]
fn a_migrated_flow_that_goes_silent_again_breaks() {
    let mut net = Net::new(2, 32);
    failover_ready(&mut net);
    assert_eq!(
        net.mailbox(
            0,
            MailboxOp::SetParam,
            [Param::AlternateRail as u64, 1, 0, 0]
        ),
        Err(ErrorCode::BadConfig),
        "rail 0 is this NIC's own"
    );
    put_to_a_silent_peer(&mut net, 1000);
    assert_eq!(net.nics[0].stats().migrations, 1);
    assert!(status(&net, 0).contains(Status::FLOW_BROKEN));
}

/// A broadcast whose rail's switch is dead goes on through the sibling's
/// switch past the retry limit: every destination gets every byte and
/// its event once. Once the rail is back, the next broadcast's first
/// packet, also sent directly, is acknowledged directly and broadcasts
/// come back to the rail.
#[test]
fn a_broadcast_on_a_dead_switch_goes_on_through_the_sibling() {
    let mut net = Net::new(4, 33);
    failover_ready(&mut net);
    net.direct_down = true;
    let arm = |net: &mut Net, value: u64| {
        for node in [0, 2, 3] {
            net.post(
                node,
                Command::ArmEvent {
                    event: EventId(2),
                    count: 1,
                    action: write_action(2, value),
                },
            );
        }
        net.post(
            1,
            Command::ArmEvent {
                event: EventId(1),
                count: 1,
                action: write_action(1, value),
            },
        );
    };
    let bcast = Command::Bcast {
        len: 2000,
        low_node: 0,
        high_node: 3,
        src_addr: VA_DATA,
        dst_addr: VA_DATA + 0x8000,
        src_event: Some(EventId(1)),
        dst_event: Some(EventId(2)),
    };
    for (round, down) in [(1u64, true), (2, false)] {
        net.direct_down = down;
        if !down {
            // Leaving the sibling takes a direct answer: time for it.
            for n in &mut net.nics {
                n.hardware_mut().now += 1_000_000;
            }
        }
        let data = pattern(2000, round as u8);
        net.fill(1, DATA, &data);
        arm(&mut net, 10 + round);
        net.post(1, bcast);
        net.run(200_000);
        assert_eq!(
            net.word(1, 1),
            CompletionWord {
                value: 10 + round,
                status: Some(Ok(()))
            },
            "round {round}"
        );
        for node in [0, 2, 3] {
            assert_eq!(net.mem(node, DATA + 0x8000, 2000), data, "node {node}");
            assert_eq!(net.word(node, 2).value, 10 + round, "node {node}");
        }
    }
    assert_eq!(net.nics[1].stats().migrations, 1);
    assert_eq!(net.nics[1].stats().path_restores, 1);
    assert!(!status(&net, 1).contains(Status::MIGRATED));
    // Each destination's event was set once per broadcast: one more arm
    // does not fire.
    arm(&mut net, 99);
    net.run(1000);
    for node in [0, 2, 3] {
        assert_eq!(net.word(node, 2).value, 12, "node {node}: a second set");
    }
}

/// A hardware barrier waits for a slow member (the switch answers each
/// re-sent arrival with a held packet), but not past 8 retry limits of
/// re-announcements (the members it waits for may have gone on without
/// the switch), and gives up at once, with `PeerUnreachable`, when the
/// switch stops answering.
#[test]
fn a_barrier_waits_for_a_slow_member_but_not_for_a_dead_switch() {
    const TIMEOUT: u64 = 10_000;
    let mut net = Net::new(3, 34);
    failover_ready(&mut net);
    let now = |net: &Net| net.nics[0].hardware().now;
    let done = |net: &Net, event: u64, value: u64, status| {
        (0..2).all(|n| {
            net.word(n, event)
                == CompletionWord {
                    value,
                    status: Some(status),
                }
        })
    };
    // A slow member: twelve timeouts (six retry limits) later the others
    // still wait, then it comes and everyone is released.
    for node in 0..2 {
        net.enter_barrier(node, (0, 2), 1, 3, 30);
    }
    net.run_for_ns(12 * TIMEOUT);
    assert!((0..2).all(|n| net.word(n, 3).value == 0), "released early");
    net.enter_barrier(2, (0, 2), 1, 3, 30);
    net.run(100_000);
    assert!(done(&net, 3, 30, Ok(())), "released");
    // A member that never comes: past the bound the others give up.
    for node in 0..2 {
        net.enter_barrier(node, (0, 2), 2, 4, 40);
    }
    let start = now(&net);
    net.run(100_000);
    assert!(done(&net, 4, 40, Err(ErrorCode::PeerUnreachable)));
    assert!(
        now(&net) >= start + 16 * TIMEOUT,
        "gave up before the bound"
    );
    // A dead switch: they give up past the retry limit, well before it.
    net.direct_down = true;
    for node in 0..2 {
        net.enter_barrier(node, (0, 2), 3, 5, 50);
    }
    let start = now(&net);
    net.run(100_000);
    assert!(done(&net, 5, 50, Err(ErrorCode::PeerUnreachable)));
    assert!(now(&net) < start + 8 * TIMEOUT, "a dead switch held them");
}
