//! Command execution: the queues, the chain queue, and starting DMAs.

use super::hw::{Activity, Hardware};
use super::{CMD_BUDGET, Dma, DmaRole, Engine};
use crate::abi::ContextIndex;
use crate::abi::command::{
    COMMAND_BLOCK_SIZE, Command, CommandBlock, DmaCommand, DmaDescriptor, DmaFlags, DmaKind, Opcode,
};
use crate::abi::error::{ErrorCode, ErrorInfo, ErrorKind};
use crate::abi::event::EventId;
use crate::abi::queue::{QueueHeader, queue_bytes};
use crate::abi::regs::{self, ReadOnly, Reg, RegionPerms};
use crate::abi::ring::Ring;
use crate::engine::hw::PeerSet;
use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, IntoBytes};

/// Result of executing one command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Exec {
    /// Consumed (successfully or with an error already reported).
    Done,
    /// Needs a DMA slot, or room in a sibling's `PEER_SET` FIFO; retry
    /// later without consuming.
    Stall,
}

impl<H: Hardware, const PEERS: usize, const EVENTS: usize> Engine<H, PEERS, EVENTS> {
    /// Drain the chain queue in order; stop at a command that stalls.
    pub(super) fn run_chain(&mut self) -> bool {
        let mut progressed = false;
        while let Some(front) = self.chain.front() {
            // `None`: cancelled, its context was detached.
            if let Some(entry) = front
                && self.execute(entry.ctx, &entry.block, ErrorKind::Chained) == Exec::Stall
            {
                break;
            }
            self.chain.pop_front();
            progressed |= front.is_some();
        }
        progressed
    }

    /// Serve every queue with pending doorbells, up to a budget each.
    pub(super) fn run_queues(&mut self) -> bool {
        let mut progressed = false;
        let mut pending = self.queues_pending;
        while pending != 0 {
            let ctx = pending.trailing_zeros() as ContextIndex;
            pending &= pending.wrapping_sub(1);
            let (did, drained) = self.run_queue(ctx);
            progressed |= did;
            if drained {
                self.queues_pending &= !(1u32 << (ctx as u32 & 31));
            }
        }
        progressed
    }

    /// Returns (progressed, queue drained).
    fn run_queue(&mut self, ctx: ContextIndex) -> (bool, bool) {
        let (Some(cfg), Some(tail_reg), Some(head_reg)) = (
            self.context(ctx).copied(),
            regs::ctx_reg(ctx, regs::CQ_TAIL),
            regs::ctx_reg(ctx, regs::CQ_HEAD),
        ) else {
            return (false, true);
        };
        let ring = cfg.cq_ring();
        let tail = self.hw.load(tail_reg);
        let Some(c) = self.contexts.get(ctx as usize) else {
            return (false, true);
        };
        let mut head = c.head;
        if ring.len(head, tail).is_err() {
            // The host wrote more blocks than the ring holds (or a tail
            // behind the head): the overwritten ones are lost to it; say so
            // and resynchronise.
            self.report_command(ctx, ErrorKind::Command, ErrorCode::QueueOverrun, 0, 0);
            head = tail;
            self.set_head(ctx, head, head_reg);
            return (true, true);
        }
        let mut progressed = false;
        let mut budget = CMD_BUDGET;
        while !ring.is_empty(head, tail) && budget > 0 {
            let phys = cfg
                .cq_base
                .wrapping_add(ring.byte_offset(head, COMMAND_BLOCK_SIZE as u32));
            let mut raw = [0u8; 64];
            if self.hw.read(phys, &mut raw).is_err() {
                self.report_command(ctx, ErrorKind::Command, ErrorCode::HostBus, 0, 0);
            } else if self.execute(ctx, &CommandBlock::from_bytes(&raw), ErrorKind::Command)
                == Exec::Stall
            {
                break;
            }
            head = head.wrapping_add(1);
            budget = budget.saturating_sub(1);
            progressed = true;
        }
        if progressed {
            self.set_head(ctx, head, head_reg);
        }
        (progressed, ring.is_empty(head, tail))
    }

    fn set_head(&mut self, ctx: ContextIndex, head: u64, head_reg: Reg<u64, ReadOnly>) {
        if let Some(c) = self.contexts.get_mut(ctx as usize) {
            c.head = head;
        }
        self.hw.store(head_reg, head);
    }

    fn report_command(
        &mut self,
        ctx: ContextIndex,
        kind: ErrorKind,
        code: ErrorCode,
        cookie: u32,
        op: u8,
    ) {
        self.stats.command_errors = self.stats.command_errors.wrapping_add(1);
        self.report(
            ctx,
            ErrorInfo {
                code,
                kind,
                cookie,
                addr: 0,
                len: 0,
                peer_node: self.loc.node,
                peer_ctx: ctx,
                op,
                seq: 0,
            },
        );
    }

    /// Execute one command block on behalf of `ctx`.
    pub(super) fn execute(
        &mut self,
        ctx: ContextIndex,
        block: &CommandBlock,
        origin: ErrorKind,
    ) -> Exec {
        let cookie = block.cookie.get();
        let Some(cfg) = self.context(ctx).copied() else {
            self.stats.unreported_errors = self.stats.unreported_errors.wrapping_add(1);
            return Exec::Done;
        };
        let cmd = match Command::parse(block, EVENTS as u32) {
            Ok(cmd) => cmd,
            Err(code) => {
                self.count_command();
                self.report_command(ctx, origin, code, cookie, block.opcode);
                // A malformed DMA still completes: if its local completion
                // event (source event of a put, destination event of a get)
                // is a valid index, it fires with the error, so a host
                // waiting on it is not left hanging.
                if let Some(ev) = Self::malformed_dma_event(block) {
                    let _ = self.set_event(ctx, ev, 1, Some(code));
                }
                return Exec::Done;
            }
        };
        let op = cmd.opcode().as_raw();
        if !cfg.perms.contains(cmd.permission()) {
            self.count_command();
            self.report_command(ctx, origin, ErrorCode::QueuePermission, cookie, op);
            return Exec::Done;
        }
        // One dispatch: each command runs (or stalls, its queue with it, for
        // a condition that passes by itself) and is counted; a failure is
        // reported below and fires the command's completion event, if any,
        // with the error, so a host waiting on it is not left hanging.
        let (result, completion) = match cmd {
            Command::Nop => {
                self.count_command();
                (Ok(()), None)
            }
            Command::Dma(d) => {
                if self.dmas.full() {
                    return Exec::Stall;
                }
                self.count_command();
                (self.start_dma(ctx, &d, cookie), d.local_event())
            }
            Command::Bcast {
                len,
                low_node,
                high_node,
                src_addr,
                dst_addr,
                src_event,
                dst_event,
            } => {
                let started = self.start_bcast(
                    ctx, len, low_node, high_node, src_addr, dst_addr, src_event, dst_event, cookie,
                );
                if started == Ok(false) {
                    return Exec::Stall;
                }
                self.count_command();
                (started.map(drop), src_event)
            }
            Command::HwBarrier {
                low_node,
                high_node,
                seq,
                tag,
                event,
            } => {
                let started = self.start_barrier(ctx, low_node, high_node, (seq, tag), event);
                if started == Ok(false) {
                    return Exec::Stall;
                }
                self.count_command();
                (started.map(drop), event)
            }
            // A set for a sibling whose FIFO is full waits until the
            // sibling has taken a word.
            Command::SetEvent {
                event,
                count,
                rail: Some(rail),
            } if rail != self.loc.rail => {
                let sent = self.hw.peer_set(rail, PeerSet { ctx, event, count });
                if sent == Err(ErrorCode::Busy) {
                    return Exec::Stall;
                }
                self.count_command();
                (sent, None)
            }
            Command::SetEvent { event, count, .. } => {
                self.count_command();
                (self.set_event(ctx, event, count, None), None)
            }
            Command::ArmEvent {
                event,
                count,
                action,
            } => {
                self.count_command();
                (self.arm_event(ctx, event, count, action), None)
            }
            Command::QueueInit {
                queue,
                slots,
                slot_size,
                event,
                base,
            } => {
                self.count_command();
                (
                    self.init_queue(ctx, queue, slots, slot_size, event, base),
                    None,
                )
            }
            Command::WriteWord { addr, value } => {
                self.count_command();
                let written = self
                    .translate(ctx, addr, 8, RegionPerms::LOCAL_WRITE)
                    .and_then(|phys| {
                        self.hw
                            .write(phys, &value.to_le_bytes())
                            .map_err(|_| ErrorCode::HostBus)
                    });
                (written, None)
            }
        };
        if let Err(code) = result {
            self.report_command(ctx, origin, code, cookie, op);
            if let Some(ev) = completion {
                let _ = self.set_event(ctx, ev, 1, Some(code));
            }
        }
        Exec::Done
    }

    /// The local completion event named by a RUN_DMA block that failed to
    /// parse, if it is a valid index.
    fn malformed_dma_event(block: &CommandBlock) -> Option<EventId> {
        if block.opcode != Opcode::RunDma.as_raw() {
            return None;
        }
        let d = DmaDescriptor::read_from_bytes(&block.body).ok()?;
        let raw = if DmaFlags::from_bits_retain(block.flags).contains(DmaFlags::GET) {
            d.dst_event.get()
        } else {
            d.src_event.get()
        };
        EventId::decode(raw, EVENTS as u32).ok().flatten()
    }

    /// Validate a DMA command and take a slot for it. The caller checked a
    /// slot is free.
    fn start_dma(
        &mut self,
        ctx: ContextIndex,
        d: &DmaCommand,
        cookie: u32,
    ) -> Result<(), ErrorCode> {
        let cfg = *self.context(ctx).ok_or(ErrorCode::NoContext)?;
        let (peer_node, peer_ctx) = cfg.cap.locate(d.vp).ok_or(ErrorCode::BadVp)?;
        let mut dma = Dma {
            active: true,
            ctx,
            peer_node,
            peer_ctx,
            job_key: cfg.job_key,
            dst_addr: d.dst_addr,
            len: d.len,
            cookie,
            ..Dma::IDLE
        };
        match d.kind {
            DmaKind::Put => {
                dma.role = DmaRole::Put;
                dma.src_phys =
                    self.translate(ctx, d.src_addr, d.len as u64, RegionPerms::LOCAL_READ)?;
                // The target range must not wrap; the target checks the rest.
                d.dst_addr
                    .checked_add(d.len as u64)
                    .ok_or(ErrorCode::AddressOverflow)?;
                dma.local_event = d.src_event;
                dma.peer_event = EventId::encode(d.dst_event);
                dma.packets_total = self.packets_for(d.len);
                dma.wake = d.wake;
            }
            DmaKind::Queued(queue) => {
                // One packet into one slot: the length must fit a packet.
                if d.len > self.params.packet_size {
                    return Err(ErrorCode::BadLength);
                }
                dma.role = DmaRole::Put;
                dma.src_phys =
                    self.translate(ctx, d.src_addr, d.len as u64, RegionPerms::LOCAL_READ)?;
                dma.local_event = d.src_event;
                dma.peer_event = u32::from(queue);
                dma.packets_total = 1;
                dma.queue = Some(queue);
                dma.wake = d.wake;
            }
            DmaKind::Get => {
                dma.role = DmaRole::GetRequest;
                // Fail early if the data could not land here (the
                // response's checks, docs/abi.md §8.2).
                self.translate(
                    ctx,
                    d.dst_addr,
                    d.len as u64,
                    RegionPerms::LOCAL_WRITE | RegionPerms::REMOTE_WRITE,
                )?;
                d.src_addr
                    .checked_add(d.len as u64)
                    .ok_or(ErrorCode::AddressOverflow)?;
                dma.remote_src = d.src_addr;
                dma.local_event = d.dst_event;
                dma.peer_event = EventId::encode(d.src_event);
                dma.request_dst_event = EventId::encode(d.dst_event);
                dma.packets_total = 1;
            }
        }
        self.install_dma(dma)
    }

    /// QUEUE_INIT: check the queue's memory and (re)set its state. The
    /// producer count restarts at the header's current consumer count, so a
    /// re-initialised queue starts empty.
    fn init_queue(
        &mut self,
        ctx: ContextIndex,
        queue: u8,
        slots: u32,
        slot_size: u32,
        event: Option<EventId>,
        base: u64,
    ) -> Result<(), ErrorCode> {
        let ring = Ring::new(u64::from(slots)).map_err(|_| ErrorCode::BadLength)?;
        let phys = self.translate(
            ctx,
            base,
            queue_bytes(ring, slot_size),
            RegionPerms::LOCAL_READ | RegionPerms::LOCAL_WRITE,
        )?;
        // Producing starts at the host's consumer count.
        let mut consumed = U64::ZERO;
        self.hw
            .read(
                phys.wrapping_add(QueueHeader::CONSUMED as u64),
                consumed.as_mut_bytes(),
            )
            .map_err(|_| ErrorCode::HostBus)?;
        let produced = consumed.get();
        self.hw
            .write_word_release(phys.wrapping_add(QueueHeader::PRODUCED as u64), produced)
            .map_err(|_| ErrorCode::HostBus)?;
        let slot = self
            .queues
            .get_mut(ctx as usize)
            .and_then(|q| q.get_mut(queue as usize))
            .ok_or(ErrorCode::BadEvent)?;
        *slot = Some(super::InputQueue {
            base,
            ring,
            slot_size,
            event,
            produced,
        });
        Ok(())
    }

    /// Packets a DMA of `len` bytes is split into (a zero-length DMA still
    /// sends one packet, which carries its destination event).
    pub(super) fn packets_for(&self, len: u32) -> u32 {
        let size = self.params.packet_size.max(1);
        len.div_ceil(size).max(1)
    }

    fn count_command(&mut self) {
        self.stats.commands = self.stats.commands.wrapping_add(1);
        self.hw.note(Activity::Command);
    }

    /// Put `dma` on a channel, its peer's transmit flow opened if it had
    /// none (and, for a get, the receive flow its response comes back
    /// on): `Busy` if every channel is taken, `NoPeerSlot` if a flow is
    /// missing and its table has no room.
    pub(super) fn install_dma(&mut self, dma: Dma) -> Result<(), ErrorCode> {
        if self.dmas.full() {
            return Err(ErrorCode::Busy);
        }
        let get = dma.role == super::DmaRole::GetRequest;
        // Both slots or neither: a receive slot taken for a get that then
        // finds no transmit slot would be held for nothing.
        // A get's receive slot, if it must take one, waits out the owner's
        // quiet time like a slot the wire opens (abi.md §8.1).
        let rx_missing = self.flows.rx.get(dma.peer_node).is_none();
        if !self.flows.tx.has_room_for(dma.peer_node)
            || (get && rx_missing && !self.may_open_rx(dma.peer_node))
        {
            return Err(ErrorCode::NoPeerSlot);
        }
        if get {
            self.flows
                .rx
                .open(dma.peer_node, super::RxFlow::NEW)
                .ok_or(ErrorCode::NoPeerSlot)?;
        }
        self.open_tx_flow(dma.peer_node)?;
        let channel = self.dmas.install(dma).ok_or(ErrorCode::Busy)?;
        if get && let Some(rx) = self.flows.rx.get_mut(dma.peer_node) {
            // Its response is owed on this slot: a close must keep it.
            rx.gets = rx.gets.saturating_add(1);
        }
        self.hw.note(Activity::DmaStart {
            channel: channel as u8,
        });
        Ok(())
    }
}
