//! Entry points shared by the fuzz targets (`nic-fw/fuzz`) and the tests
//! that run the same code on random bytes. They must never panic.

use crate::abi::command::{ArmEventBody, COMMAND_BLOCK_SIZE, Command, CommandBlock};
use crate::abi::error::{ErrorInfo, ErrorRecord};
use crate::abi::event::{ActionKind, CompletionWord, EventAction};
use crate::abi::packet::{HEADER_LEN, Packet, PacketHeader};
use crate::abi::regs::{Capability, ContextConfig, RegionConfig};
use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, IntoBytes};

/// Feed `data` to every decoder of untrusted input: command blocks, packet
/// headers, error records, mailbox argument sets, event actions. Accepted
/// inputs must re-encode to themselves. Returns how many decoders accepted
/// their input (so callers can check coverage).
pub fn decode_all(data: &[u8]) -> usize {
    let mut accepted = 0usize;
    let mut cmd = [0u8; COMMAND_BLOCK_SIZE];
    let mut hdr = [0u8; HEADER_LEN];
    for (dst, src) in cmd.iter_mut().zip(data) {
        *dst = *src;
    }
    for (dst, src) in hdr.iter_mut().zip(data) {
        *dst = *src;
    }
    let block = CommandBlock::from_bytes(&cmd);
    let events = data.first().map_or(16, |b| u32::from(*b).wrapping_add(1));
    if let Ok(c) = Command::parse(&block, events) {
        accepted = accepted.wrapping_add(1);
        if c.emit(block.cookie.get()) != canonical(block, &c) {
            // Not reachable if parse/emit agree; a fuzzer reports a panic.
            round_trip_failed();
        }
    }
    let header = PacketHeader::from_bytes(&hdr);
    if let Ok(p) = Packet::parse(&header) {
        accepted = accepted.wrapping_add(1);
        if p.emit() != header {
            round_trip_failed();
        }
    }
    if let Ok(rec) = ErrorRecord::read_from_bytes(cmd.get(..32).unwrap_or(&[])) {
        accepted = accepted.wrapping_add(usize::from(ErrorInfo::parse(&rec).is_some()));
    }
    let mut args = [0u64; 4];
    for (arg, chunk) in args.iter_mut().zip(cmd.chunks_exact(8)) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        *arg = u64::from_le_bytes(w);
    }
    accepted = accepted.wrapping_add(usize::from(ContextConfig::from_args(args).is_ok()));
    accepted = accepted.wrapping_add(usize::from(RegionConfig::from_args(args).is_ok()));
    accepted = accepted.wrapping_add(usize::from(Capability::from_reg(args[0]).is_ok()));
    if let Ok(cap) = Capability::from_reg(args[1]) {
        let _ = cap.locate(args[2] as u32);
    }
    accepted = accepted.wrapping_add(usize::from(
        EventAction::decode(args[0] as u32, args[1], args[2]).is_ok(),
    ));
    let _ = CompletionWord::unpack(args[3]);
    accepted
}

/// `block` with the ABI's one documented alias written as `emit` writes
/// it: an ARM_EVENT COPY of one block may give its count as 1 or as 0 (the
/// 1.0 encoding, which `emit` keeps; docs/abi.md §5). Every other field
/// has one encoding, so any other difference is a decoder that ignores
/// bits it should check.
fn canonical(block: CommandBlock, c: &Command) -> CommandBlock {
    let mut b = block;
    if let Command::ArmEvent {
        action:
            EventAction {
                kind: ActionKind::Copy { blocks: 1, .. },
                ..
            },
        ..
    } = c
        && let Ok(mut body) = ArmEventBody::read_from_bytes(&b.body)
    {
        body.param1 = U64::new(0);
        b.body.copy_from_slice(body.as_bytes());
    }
    b
}

#[cold]
fn round_trip_failed() {
    // Deliberately not a panic in release firmware builds: this module is
    // only called by fuzzers and tests, which observe the flag below.
    ROUND_TRIP_FAILURES.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
}

/// Count of decode/encode disagreements seen (must stay 0).
pub static ROUND_TRIP_FAILURES: core::sync::atomic::AtomicUsize =
    core::sync::atomic::AtomicUsize::new(0);

use crate::abi::error::ErrorCode;
use crate::abi::regs::{self, MailboxOp, Placement, QueuePerms, RegionPerms};
use crate::engine::hw::{
    BusError, Clock, DOORBELL_MAILBOX, HostMemory, HostWake, Link, Meter, Path, PayloadSource,
    PeerSet, RegisterFile, Siblings,
};
use crate::engine::{Engine, Location};

const SIM_MEM: usize = 1 << 14;
const SIM_INBOX: usize = 8;
const SIM_REGS: usize = regs::BAR0_SIZE as usize / 8;

/// A fixed-size software board (no allocator) for fuzzing the engine.
#[derive(Debug)]
pub struct SimBoard {
    mem: [u8; SIM_MEM],
    regs: [u64; SIM_REGS],
    doorbells: u64,
    inbox: [Option<(PacketHeader, u32, Path)>; SIM_INBOX],
    now: u64,
    sent: u64,
    /// Sibling sets posted, taken back by the same NIC: a loopback sibling
    /// of rail 1, so the fuzzer drives both the sending and the receiving
    /// side of the NIC-to-NIC path (full: `Busy`).
    peer: [Option<PeerSet>; SIM_PEER],
}

/// Entries of the fuzz board's loopback sibling FIFO.
const SIM_PEER: usize = 4;

impl SimBoard {
    fn new() -> Self {
        Self {
            mem: [0; SIM_MEM],
            regs: [0; SIM_REGS],
            doorbells: 0,
            inbox: [None; SIM_INBOX],
            now: 0,
            sent: 0,
            peer: [None; SIM_PEER],
        }
    }

    fn span(&mut self, phys: u64, len: usize) -> Result<&mut [u8], BusError> {
        let start = usize::try_from(phys).map_err(|_| BusError)?;
        let end = start.checked_add(len).ok_or(BusError)?;
        self.mem.get_mut(start..end).ok_or(BusError)
    }
}

impl HostMemory for SimBoard {
    fn read(&mut self, phys: u64, buf: &mut [u8]) -> Result<(), BusError> {
        buf.copy_from_slice(self.span(phys, buf.len())?);
        Ok(())
    }
    fn write(&mut self, phys: u64, data: &[u8]) -> Result<(), BusError> {
        self.span(phys, data.len())?.copy_from_slice(data);
        Ok(())
    }
    fn write_word_release(&mut self, phys: u64, value: u64) -> Result<(), BusError> {
        self.write(phys, &value.to_le_bytes())
    }
}

impl Link for SimBoard {
    /// A payload is only its length: the bytes are zeros.
    type Payload = u32;
    fn send(&mut self, _: &PacketHeader, _: Option<PayloadSource>, _: Path) -> bool {
        self.sent = self.sent.wrapping_add(1);
        true
    }
    fn recv(&mut self) -> Option<(PacketHeader, u32, Path)> {
        self.inbox.iter_mut().find_map(Option::take)
    }
    fn payload_len(&self, p: &u32) -> usize {
        *p as usize
    }
    fn deliver(&mut self, p: &u32, phys: u64) -> Result<(), BusError> {
        self.span(phys, *p as usize)?.fill(0);
        Ok(())
    }
}

impl RegisterFile for SimBoard {
    fn reg_read(&self, offset: u32) -> u64 {
        self.regs
            .get(offset as usize / 8)
            .copied()
            .unwrap_or(u64::MAX)
    }
    fn reg_write(&mut self, offset: u32, value: u64) {
        if let Some(r) = self.regs.get_mut(offset as usize / 8) {
            *r = value;
        }
    }
    fn take_doorbells(&mut self) -> u64 {
        core::mem::take(&mut self.doorbells)
    }
}

impl Clock for SimBoard {
    fn now_ns(&self) -> u64 {
        self.now
    }
}

impl HostWake for SimBoard {
    fn wake(&mut self, _: u8) {}
}

fn mailbox(e: &mut Engine<SimBoard, 4, 16>, op: MailboxOp, args: [u64; 4]) {
    let hw = e.hardware_mut();
    for (reg, a) in regs::MBOX_ARGS.into_iter().zip(args) {
        hw.store(reg, a);
    }
    hw.store(regs::MBOX_CMD, regs::mailbox_cmd(op, 1));
    hw.doorbells |= DOORBELL_MAILBOX;
    e.poll();
}

/// Drive one engine with a byte stream of operations: post a command block,
/// inject a packet (valid checksum or not), ring the mailbox with arbitrary
/// arguments, advance the clock, poll. Must never panic. Returns the number
/// of commands the engine executed.
pub fn run_engine(data: &[u8]) -> u64 {
    let mut e: Engine<SimBoard, 4, 16> =
        Engine::new(SimBoard::new(), Location { node: 1, rail: 0 });
    let cap = Capability {
        low_node: 0,
        node_count: 4,
        ranks_per_node: 2,
        ctx_base: 0,
        placement: Placement::Block,
    };
    let ctx = ContextConfig {
        ctx: 0,
        cq_log2: 4,
        err_log2: 2,
        perms: QueuePerms::all(),
        job_key: 7,
        cq_base: 0x1000,
        err_base: 0x1400,
        cap,
    };
    mailbox(&mut e, MailboxOp::AttachContext, ctx.to_args());
    let region = RegionConfig {
        ctx: 0,
        slot: 0,
        perms: RegionPerms::all(),
        va: 0x10_0000,
        len: 0x2000,
        phys: 0x2000,
    };
    mailbox(&mut e, MailboxOp::MapRegion, region.to_args());
    // An alternate rail, so that flows migrate and learn paths.
    mailbox(&mut e, MailboxOp::SetParam, [5, 2, 0, 0]);
    let mut tail: u64 = 0;
    let mut rest = data;
    while let Some((&op, tail_bytes)) = rest.split_first() {
        rest = tail_bytes;
        let mut chunk = [0u8; 64];
        let take = rest.len().min(64);
        if let (Some(dst), Some(src)) = (chunk.get_mut(..take), rest.get(..take)) {
            dst.copy_from_slice(src);
        }
        rest = rest.get(take..).unwrap_or(&[]);
        match op % 6 {
            0 => {
                let slot = 0x1000u64.wrapping_add((tail % 16).wrapping_mul(64));
                let _ = e.hardware_mut().write(slot, &chunk);
                tail = tail.wrapping_add(1);
                let hw = e.hardware_mut();
                if let Some(reg) = regs::ctx_reg(0, regs::CQ_TAIL) {
                    hw.store(reg, tail);
                }
                hw.doorbells |= 1;
            }
            1 | 2 => {
                let mut h = PacketHeader::from_bytes(&chunk);
                if op % 6 == 1 {
                    // Make the checksum right so the later checks run.
                    h.version = crate::abi::packet::WIRE_VERSION;
                    let bytes = h.to_bytes();
                    h.checksum =
                        zerocopy::little_endian::U32::new(crate::abi::packet::checksum(&bytes));
                }
                let len = u32::from(op >> 3).wrapping_mul(64);
                // Some packets come through a sibling (of any rail, this
                // NIC's own included: a board must not, the engine copes).
                let path = match op >> 6 {
                    0 | 1 => Path::Sibling(op & 3),
                    _ => Path::Direct,
                };
                if let Some(slot) = e.hardware_mut().inbox.iter_mut().find(|s| s.is_none()) {
                    *slot = Some((h, len, path));
                }
            }
            3 => {
                let mut args = [0u64; 4];
                for (a, c) in args.iter_mut().zip(chunk.chunks_exact(8)) {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(c);
                    *a = u64::from_le_bytes(w);
                }
                let mop = MailboxOp::from_raw(chunk.get(63).copied().unwrap_or(0) % 7)
                    .unwrap_or(MailboxOp::SetParam);
                mailbox(&mut e, mop, args);
            }
            4 => {
                let hw = e.hardware_mut();
                hw.now = hw.now.wrapping_add(u64::from(op).wrapping_mul(1_000_000));
            }
            _ => {}
        }
        e.poll();
    }
    for _ in 0..64 {
        e.hardware_mut().now = e.hardware_mut().now.wrapping_add(100_000_000);
        e.poll();
    }
    e.stats().commands
}

impl Meter for SimBoard {}

/// A loopback sibling on rail 1 (any other rail is unreachable): what the
/// engine posts there it takes back in order, so arbitrary sets (bad
/// contexts, events out of range, huge counts) reach its receiving side.
impl Siblings for SimBoard {
    fn peer_set(&mut self, rail: u8, set: PeerSet) -> Result<(), ErrorCode> {
        if rail != 1 {
            return Err(ErrorCode::PeerUnreachable);
        }
        let slot = self
            .peer
            .iter_mut()
            .find(|s| s.is_none())
            .ok_or(ErrorCode::Busy)?;
        *slot = Some(set);
        Ok(())
    }

    fn peer_fifo_depth(&self) -> u8 {
        SIM_PEER as u8
    }

    fn take_peer_set(&mut self) -> Option<PeerSet> {
        let first = self.peer.first_mut()?.take();
        self.peer.rotate_left(1);
        first
    }
}
