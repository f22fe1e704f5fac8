//! Reception: in-order acceptance per flow, receiver-side protection, data
//! delivery, destination events, get requests, and owed acknowledgements.

use super::hw::{Hardware, Path};
use super::{Dma, DmaRole, Engine, HeldQueue, RX_BUDGET};
use crate::abi::NodeId;
use crate::abi::error::{ErrorCode, ErrorInfo, ErrorKind};
use crate::abi::event::EventId;
use crate::abi::packet::{
    AckKind, AckPacket, DataPacket, GetRequestPacket, Packet, PacketHeader, PacketType, Route,
};
use crate::abi::queue::{QueueHeader, QueueItemHeader, queue_bytes, slot_offset};
use crate::abi::regs::RegionPerms;
use zerocopy::IntoBytes;
use zerocopy::little_endian::U64;

/// An inbound write to check and apply (data and broadcast packets).
pub(super) struct InboundWrite {
    pub(super) route: Route,
    pub(super) addr: u64,
    pub(super) len: u32,
    pub(super) dma_addr: u64,
    pub(super) dma_len: u32,
    pub(super) perm: RegionPerms,
    pub(super) event: Result<Option<EventId>, ErrorCode>,
}

/// What the receiver did with an in-order packet.
enum Verdict {
    /// Applied; consumes the sequence number.
    Accepted,
    /// Rejected, nothing written; consumes the sequence number and is
    /// reported to the sender through the ack's error bitmap.
    Rejected(ErrorCode),
    /// Refused for now (a queued item whose queue is full or not yet
    /// initialised, a get request that finds no free DMA slot): consumes
    /// the sequence number, nothing written; the ack's refusal bitmap tells
    /// the sender to send it again after a back-off, so the flow goes on
    /// for every other packet and context (no head-of-line blocking), and
    /// its retry count is left alone (a nack would reset it and send the
    /// whole window back).
    Refused,
}

/// Does `h` hold back the sender and queue of `d`?
fn is_held_for(h: &HeldQueue, d: &DataPacket) -> bool {
    h.src_ctx == d.route.src_ctx && h.dst_ctx == d.route.dst_ctx && h.queue == d.event
}

impl<H: Hardware, const PEERS: usize, const EVENTS: usize> Engine<H, PEERS, EVENTS> {
    /// Take up to a budget of packets from the link.
    pub(super) fn receive(&mut self) -> bool {
        let mut progressed = false;
        for _ in 0..RX_BUDGET {
            let Some((header, payload, path)) = self.hw.recv() else {
                break;
            };
            progressed = true;
            self.on_packet(&header, &payload, path);
        }
        progressed
    }

    fn on_packet(&mut self, header: &PacketHeader, payload: &H::Payload, path: Path) {
        let me = self.loc.node;
        let packet = match Packet::parse(header) {
            // A broadcast is addressed to its whole range but the sender.
            Ok(Packet::Bcast(b))
                if b.route.dst_node <= me && me <= b.high_node && b.route.src_node != me =>
            {
                Packet::Bcast(b)
            }
            Ok(p)
                if !matches!(
                    p,
                    Packet::Bcast(_) | Packet::BarrierArrive(_) | Packet::BarrierLeave(_)
                ) && p.dst_node() == me =>
            {
                p
            }
            _ => {
                // Corrupt or misrouted: drop without effect; the sender's
                // timer retransmits.
                self.stats.bad_packets = self.stats.bad_packets.wrapping_add(1);
                return;
            }
        };
        match packet {
            Packet::Ack(ack) => self.on_ack(&ack, path),
            Packet::Data(DataPacket {
                route, seq, flow, ..
            })
            | Packet::GetRequest(GetRequestPacket {
                route, seq, flow, ..
            }) => {
                self.on_sequenced(route.src_node, (flow, seq), &packet, payload, path);
            }
            Packet::Bcast(b) => self.on_bcast(&b, payload, path),
            Packet::BcastAck {
                src_node,
                id,
                received,
                err_code,
                ..
            } => {
                self.on_bcast_ack(src_node, id, received, err_code, path);
            }
            Packet::FlowClose(c) => self.on_flow_close(&c, path),
            Packet::FlowCloseAck(c) => self.on_flow_close_ack(&c),
            Packet::BarrierRelease(b) => self.on_barrier_release(&b),
            Packet::BarrierHeld(b) => self.on_barrier_held(&b),
            // Arrivals are the switch's business; the guard above dropped
            // them already.
            Packet::BarrierArrive(_) | Packet::BarrierLeave(_) => {}
        }
    }

    /// A data packet or get request, number `seq` of flow instance
    /// `instance` from `src`.
    fn on_sequenced(
        &mut self,
        src: NodeId,
        (instance, seq): (u32, u32),
        packet: &Packet,
        payload: &H::Payload,
        path: Path,
    ) {
        let Some(flow) = Self::rx_slot_for(&mut self.flows, &self.hw, src) else {
            self.refuse_unknown_peer(src, instance, seq, path);
            return;
        };
        let bound = flow.instance;
        if bound != instance {
            if bound != 0 && (instance.wrapping_sub(bound) as i32) <= 0 {
                // An earlier instance than the one this slot follows: a
                // packet that outlived its flow, never applied.
                self.stats.stale_packets = self.stats.stale_packets.wrapping_add(1);
                return;
            }
            // The slot's first flow, or a later one than it follows: the
            // sender opened a new flow (after a close this NIC did not
            // see, or a reset of its own), which starts from 0 here too.
            // (A slot on the list of acks owed stays on it: its next ack
            // is the new flow's.)
            *flow = super::RxFlow {
                bcast: flow.bcast,
                gets: flow.gets,
                listed: flow.listed,
                instance,
                ..super::RxFlow::NEW
            };
        }
        // Acks go back the way the sender's latest packet came.
        flow.reply = path;
        if path == Path::Direct {
            flow.direct_ns = self.hw.now_ns();
        }
        let flow = *flow;
        if path == Path::Direct {
            // The peer reaches us directly: our flow to it goes direct too.
            self.restore_path(src);
        }
        let distance = seq.wrapping_sub(flow.expected) as i32;
        if distance < 0 {
            // Already applied (its ack was lost or is in flight): ack again.
            self.stats.duplicates = self.stats.duplicates.wrapping_add(1);
            self.owe_ack(src, false);
            return;
        }
        if distance > 0 {
            // A gap: an earlier packet was lost. Go-back-N: ask for it,
            // once per loss.
            if let Some(flow) = self.flows.rx.get_mut(src)
                && !flow.gap_nacked
            {
                flow.gap_nacked = true;
                self.owe_ack(src, true);
            }
            return;
        }
        let verdict = match packet {
            Packet::Data(data) if data.queue => self.on_queue_data(data, payload),
            Packet::Data(data) => self.on_data(data, payload),
            Packet::GetRequest(request) => self.on_get_request(request),
            _ => Verdict::Accepted,
        };
        let Some(flow) = self.flows.rx.get_mut(src) else {
            return;
        };
        match verdict {
            Verdict::Accepted => {
                flow.err_bits <<= 1;
                flow.refused_bits <<= 1;
                self.stats.packets_accepted = self.stats.packets_accepted.wrapping_add(1);
            }
            Verdict::Rejected(code) => {
                flow.err_bits = (flow.err_bits << 1) | 1;
                flow.refused_bits <<= 1;
                flow.last_err = Some(code);
                self.stats.packets_rejected = self.stats.packets_rejected.wrapping_add(1);
            }
            Verdict::Refused => {
                flow.err_bits <<= 1;
                flow.refused_bits = (flow.refused_bits << 1) | 1;
                self.stats.packets_refused = self.stats.packets_refused.wrapping_add(1);
            }
        }
        flow.expected = flow.expected.wrapping_add(1);
        flow.gap_nacked = false;
        if let Packet::Data(d) = packet
            && d.get_response
            && d.last
        {
            // The response one of this NIC's gets was owed.
            flow.gets = flow.gets.saturating_sub(1);
        }
        self.owe_ack(src, false);
        if let Path::Sibling(via) = path {
            self.learn_path(src, via);
        }
    }

    /// Check and apply a data packet. Nothing is written unless every check
    /// passes, and the checks cover the packet's whole DMA, so a DMA is
    /// either written entirely or not at all.
    fn on_data(&mut self, d: &DataPacket, payload: &H::Payload) -> Verdict {
        let DataPacket {
            route,
            addr,
            len,
            event: raw_event,
            cookie,
            last,
            get_response,
            dma_addr,
            dma_len,
            wake,
            ..
        } = *d;
        let ctx = route.dst_ctx;
        let event = EventId::decode(raw_event, EVENTS as u32);
        // A receiver cannot tell a get response from a packet forged to
        // look like one, so a response needs REMOTE_WRITE like any data
        // from the wire, and LOCAL_WRITE as the requester's own memory
        // (ABI 1.5; LOCAL_WRITE alone let a forged response write a
        // context's completion words).
        let perm = if get_response {
            RegionPerms::LOCAL_WRITE | RegionPerms::REMOTE_WRITE
        } else {
            RegionPerms::REMOTE_WRITE
        };
        let target = InboundWrite {
            route,
            addr,
            len,
            dma_addr,
            dma_len,
            perm,
            event,
        };
        let outcome = self.write_inbound(&target, payload);
        if let Ok(Some(ev)) = event
            && self.context(ctx).is_some()
        {
            if last {
                let _ = self.set_event(ctx, ev, 1, outcome.err());
            } else if let Err(code) = outcome {
                self.taint_event(ctx, ev, code);
            }
        }
        match outcome {
            Ok(()) => {
                if wake {
                    self.hw.wake(ctx);
                }
                Verdict::Accepted
            }
            Err(code) => {
                self.report_inbound(route, code, cookie, addr, len, PacketType::Data);
                Verdict::Rejected(code)
            }
        }
    }

    /// Check an inbound write (context, job key, payload length, the whole
    /// DMA range with `perm`, the event index) and, only if every check
    /// passes, deliver the payload. Returns the outcome; nothing is written
    /// on failure. Shared by data and broadcast packets.
    pub(super) fn write_inbound(
        &mut self,
        t: &InboundWrite,
        payload: &H::Payload,
    ) -> Result<(), ErrorCode> {
        let ctx = t.route.dst_ctx;
        let checked = self.check_inbound(ctx, t.route.job_key).and_then(|()| {
            if self.hw.payload_len(payload) != t.len as usize {
                return Err(ErrorCode::BadPacket);
            }
            let dma_phys = self.translate(ctx, t.dma_addr, t.dma_len as u64, t.perm)?;
            // Parse guaranteed the packet lies inside its DMA, and one region
            // holds the whole DMA, so the packet's bytes are covered too.
            let phys = dma_phys
                .checked_add(t.addr.wrapping_sub(t.dma_addr))
                .ok_or(ErrorCode::AddressOverflow)?;
            // An event index the table cannot hold is refused before any
            // byte is written.
            t.event?;
            Ok(phys)
        });
        let phys = checked?;
        self.hw
            .deliver(payload, phys)
            .map_err(|_| ErrorCode::HostBus)
    }

    /// A queued DMA: claim the next slot of the target queue (in flow
    /// order, so the claim is atomic), write the item header and payload,
    /// publish the producer count (release), set the queue's event and wake
    /// the host. A queue that is full, or not initialised yet, refuses the
    /// item for now: nothing is written, the flow goes on, and the sender
    /// sends it again (RETRY). Until that retry gets in, the sender's later
    /// items to the same queue are refused too, so the queue stays FIFO per
    /// sender. An item refused for longer than the queue wait fails with
    /// `QueueFull` or `NoQueue`.
    fn on_queue_data(&mut self, d: &DataPacket, payload: &H::Payload) -> Verdict {
        let held = self.held_queue(d);
        if held.is_some() && !d.retry {
            return Verdict::Refused;
        }
        let outcome = match self.write_queue_item(d, payload) {
            Ok(true) => Ok(()),
            Ok(false) => Err(ErrorCode::QueueFull),
            Err(code) => Err(code),
        };
        match outcome {
            Ok(()) => {
                self.release_held(d);
                Verdict::Accepted
            }
            Err(code @ (ErrorCode::QueueFull | ErrorCode::NoQueue)) => {
                let now = self.hw.now_ns();
                let since = held.map_or(now, |h| h.since_ns);
                if now.saturating_sub(since) < self.params.queue_wait_ns {
                    self.hold_queue(d, since);
                    return Verdict::Refused;
                }
                self.release_held(d);
                self.report_inbound(d.route, code, d.cookie, 0, d.len, PacketType::Data);
                Verdict::Rejected(code)
            }
            Err(code) => {
                self.release_held(d);
                self.report_inbound(d.route, code, d.cookie, 0, d.len, PacketType::Data);
                Verdict::Rejected(code)
            }
        }
    }

    /// The entry of the queue `d` targets, if it holds back `d`'s sender.
    fn held_queue(&self, d: &DataPacket) -> Option<HeldQueue> {
        let flow = self.flows.rx.get(d.route.src_node)?;
        flow.held
            .iter()
            .flatten()
            .find(|h| is_held_for(h, d))
            .copied()
    }

    /// Hold back `d`'s sender's items to its queue, refused since `since`.
    /// With every entry in use, the oldest gives way (its sender's later
    /// items may then overtake its refused one: order is kept for
    /// [`super::HELD_QUEUES`] queues per sender at once).
    fn hold_queue(&mut self, d: &DataPacket, since_ns: u64) {
        let Some(flow) = self.flows.rx.get_mut(d.route.src_node) else {
            return;
        };
        let entry = HeldQueue {
            src_ctx: d.route.src_ctx,
            dst_ctx: d.route.dst_ctx,
            queue: d.event,
            since_ns,
        };
        let slot = match flow
            .held
            .iter()
            .position(|h| h.is_some_and(|h| is_held_for(&h, d)))
        {
            Some(i) => i,
            None => match flow.held.iter().position(Option::is_none) {
                Some(i) => i,
                None => flow
                    .held
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, h)| h.map_or(0, |h| h.since_ns))
                    .map_or(0, |(i, _)| i),
            },
        };
        if let Some(h) = flow.held.get_mut(slot) {
            *h = Some(entry);
        }
    }

    /// `d`'s queue no longer holds back its sender.
    fn release_held(&mut self, d: &DataPacket) {
        if let Some(flow) = self.flows.rx.get_mut(d.route.src_node) {
            for h in &mut flow.held {
                if h.is_some_and(|h| is_held_for(&h, d)) {
                    *h = None;
                }
            }
        }
    }

    /// The queued-DMA steps; `Ok(false)` if the queue is full.
    fn write_queue_item(
        &mut self,
        d: &DataPacket,
        payload: &H::Payload,
    ) -> Result<bool, ErrorCode> {
        let ctx = d.route.dst_ctx;
        self.check_inbound(ctx, d.route.job_key)?;
        if self.hw.payload_len(payload) != d.len as usize {
            return Err(ErrorCode::BadPacket);
        }
        // An index past the table is a bad address; a queue of the table
        // not initialised (yet) may be soon.
        let q = self
            .queues
            .get(ctx as usize)
            .and_then(|t| t.get(d.event as usize))
            .copied()
            .ok_or(ErrorCode::BadEvent)?
            .ok_or(ErrorCode::NoQueue)?;
        if d.len > q.slot_size.saturating_sub(QueueItemHeader::SIZE as u32) {
            return Err(ErrorCode::BadLength);
        }
        let phys = self.translate(
            ctx,
            q.base,
            queue_bytes(q.ring, q.slot_size),
            RegionPerms::LOCAL_READ | RegionPerms::LOCAL_WRITE,
        )?;
        let mut consumed = U64::ZERO;
        self.hw
            .read(
                phys.wrapping_add(QueueHeader::CONSUMED as u64),
                consumed.as_mut_bytes(),
            )
            .map_err(|_| ErrorCode::HostBus)?;
        // Full (or a consumer count ahead of the producer, or the item would
        // wrap past 2^64 onto a slot still in use): refuse for now.
        if q.ring.producer_slot(consumed.get(), q.produced).is_none() {
            return Ok(false);
        }
        let slot = phys.wrapping_add(slot_offset(q.ring, q.produced, q.slot_size));
        let header = QueueItemHeader {
            len: d.len.into(),
            src_node: d.route.src_node.into(),
            src_ctx: d.route.src_ctx,
            zero: 0,
        };
        let produced = q.produced.wrapping_add(1);
        self.hw
            .deliver(payload, slot.wrapping_add(QueueItemHeader::SIZE as u64))
            .and_then(|()| self.hw.write(slot, header.as_bytes()))
            .and_then(|()| {
                self.hw
                    .write_word_release(phys.wrapping_add(QueueHeader::PRODUCED as u64), produced)
            })
            .map_err(|_| ErrorCode::HostBus)?;
        if let Some(Some(entry)) = self
            .queues
            .get_mut(ctx as usize)
            .and_then(|t| t.get_mut(d.event as usize))
        {
            entry.produced = produced;
        }
        if let Some(ev) = q.event {
            let _ = self.set_event(ctx, ev, 1, None);
        }
        self.hw.wake(ctx);
        Ok(true)
    }

    /// A get request: validate the owner's side and queue the put back.
    fn on_get_request(&mut self, request: &GetRequestPacket) -> Verdict {
        let GetRequestPacket {
            route,
            src_addr,
            dst_addr,
            len,
            src_event: raw_src_event,
            dst_event: raw_dst_event,
            cookie,
            ..
        } = *request;
        let ctx = route.dst_ctx;
        let checked = self.check_inbound(ctx, route.job_key).and_then(|()| {
            let phys = self.translate(ctx, src_addr, len as u64, RegionPerms::REMOTE_READ)?;
            let src_event = EventId::decode(raw_src_event, EVENTS as u32)?;
            dst_addr
                .checked_add(len as u64)
                .ok_or(ErrorCode::AddressOverflow)?;
            Ok((phys, src_event))
        });
        match checked {
            Ok((src_phys, src_event)) => {
                if self.dmas.full() {
                    return Verdict::Refused;
                }
                let job_key = self.context(ctx).map_or(0, |c| c.job_key);
                let dma = Dma {
                    active: true,
                    role: DmaRole::GetResponse,
                    ctx,
                    peer_node: route.src_node,
                    peer_ctx: route.src_ctx,
                    job_key,
                    src_phys,
                    dst_addr,
                    len,
                    packets_total: self.packets_for(len),
                    local_event: src_event,
                    peer_event: raw_dst_event,
                    cookie,
                    ..Dma::IDLE
                };
                match self.install_dma(dma) {
                    Ok(()) => Verdict::Accepted,
                    // No DMA channel free for the response: refused for
                    // now; the requester sends it again (§4.3).
                    Err(ErrorCode::Busy) => Verdict::Refused,
                    // No flow slot for the requester: rejected, not
                    // refused for a later try, which could wait as long
                    // as the idle flows' close time (abi.md §8.1).
                    Err(code) => {
                        self.report_inbound(
                            route,
                            code,
                            cookie,
                            src_addr,
                            len,
                            PacketType::GetRequest,
                        );
                        Verdict::Rejected(code)
                    }
                }
            }
            Err(code) => {
                self.report_inbound(route, code, cookie, src_addr, len, PacketType::GetRequest);
                Verdict::Rejected(code)
            }
        }
    }

    /// Context attached and job key matching.
    pub(super) fn check_inbound(&self, ctx: u8, job_key: u32) -> Result<(), ErrorCode> {
        let cfg = self.context(ctx).ok_or(ErrorCode::NoContext)?;
        if cfg.job_key != job_key {
            return Err(ErrorCode::JobKeyMismatch);
        }
        Ok(())
    }

    fn report_inbound(
        &mut self,
        route: Route,
        code: ErrorCode,
        cookie: u32,
        addr: u64,
        len: u32,
        ptype: PacketType,
    ) {
        // Report to the target context only if the packet legitimately
        // belongs to it; otherwise count it (there is nobody to tell).
        if code == ErrorCode::NoContext || code == ErrorCode::JobKeyMismatch {
            self.stats.unreported_errors = self.stats.unreported_errors.wrapping_add(1);
            self.hw
                .store(crate::abi::regs::STATS_ERRORS, self.stats.unreported_errors);
            return;
        }
        self.report(
            route.dst_ctx,
            ErrorInfo {
                code,
                kind: ErrorKind::Inbound,
                cookie,
                addr,
                len,
                peer_node: route.src_node,
                peer_ctx: route.src_ctx,
                op: ptype.as_raw(),
                seq: 0,
            },
        );
    }

    /// A sequenced packet from `src`, which has no receive flow here, and
    /// the table has no room for one: acknowledge it and everything before
    /// it as rejected with `NoPeerSlot`, so the sender's DMAs to this NIC
    /// complete with that error instead of retrying until the flow breaks.
    /// Nothing is written; no state is kept. The ack is marked as the
    /// refusal of a receiver without a slot (every bit of both bitmaps
    /// set, which no flow's ack can be: a packet is rejected or refused,
    /// not both), so that the sender tells it from a flow's own rejection.
    fn refuse_unknown_peer(&mut self, src: NodeId, instance: u32, seq: u32, path: Path) {
        self.note_refusal(src);
        self.stats.packets_rejected = self.stats.packets_rejected.wrapping_add(1);
        let packet = Packet::Ack(AckPacket {
            kind: AckKind::Ack,
            src_node: self.loc.node,
            dst_node: src,
            cum_seq: seq,
            err_bits: u64::MAX,
            err_code: Some(ErrorCode::NoPeerSlot),
            refused: u32::MAX,
            flow: instance,
        });
        let _ = self.hw.send(&packet.emit(), None, path);
    }

    fn owe_ack(&mut self, src: NodeId, nack: bool) {
        let Some(flow) = self.flows.rx.get_mut(src) else {
            return;
        };
        if nack {
            flow.nack_owed = true;
        } else {
            flow.ack_owed = true;
        }
        if !flow.listed {
            flow.listed = true;
            if let Some(slot) = self.flows.acks.get_mut(self.flows.acks_len) {
                *slot = src;
                self.flows.acks_len = self.flows.acks_len.wrapping_add(1);
            }
        }
    }

    /// Send one ack (or nack) per flow that is owed one.
    pub(super) fn send_acks(&mut self) -> bool {
        let n = self.flows.acks_len;
        self.flows.acks_len = 0;
        for i in 0..n {
            let Some(src) = self.flows.acks.get(i).copied() else {
                break;
            };
            let Some(flow) = self.flows.rx.get_mut(src) else {
                continue;
            };
            let cum_seq = flow.expected.wrapping_sub(1);
            let packet = Packet::Ack(AckPacket {
                kind: if flow.nack_owed {
                    AckKind::Nack
                } else {
                    AckKind::Ack
                },
                src_node: self.loc.node,
                dst_node: src,
                cum_seq,
                err_bits: flow.err_bits,
                err_code: flow.last_err,
                refused: flow.refused_bits,
                flow: flow.instance,
            });
            flow.ack_owed = false;
            flow.nack_owed = false;
            flow.listed = false;
            let path = flow.reply;
            let _ = self.hw.send(&packet.emit(), None, path);
        }
        n > 0
    }
}
