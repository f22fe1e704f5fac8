//! Transmission: packetising DMAs, the go-back-N window, acknowledgements,
//! retransmission and DMA completion.

use super::hw::{Activity, Hardware, Path, PayloadSource};
use super::{DmaRole, Engine, TX_BUDGET, TxEntry};
use crate::abi::error::{ErrorCode, ErrorInfo, ErrorKind};
use crate::abi::packet::{
    AckKind, AckPacket, DataPacket, GetRequestPacket, Packet, PacketType, Route,
};
use crate::abi::regs::{self, Status};
use crate::abi::{NodeId, TX_WINDOW};

impl<H: Hardware, const PEERS: usize, const EVENTS: usize> Engine<H, PEERS, EVENTS> {
    /// Send retransmissions, then new packets round-robin over active DMAs.
    pub(super) fn transmit(&mut self) -> bool {
        let mut budget = TX_BUDGET;
        let mut progressed = self.bcast_transmit();
        if self.flows.any_busy() {
            let now = self.hw.now_ns();
            let mut from = 0;
            while let Some(node) = self.flows.next_busy(from) {
                if budget == 0 {
                    break;
                }
                from = u32::from(node).saturating_add(1);
                while budget > 0 && self.resend_one(node, now) {
                    budget = budget.saturating_sub(1);
                    progressed = true;
                }
            }
        }
        if self.dmas.active() == 0 {
            return progressed;
        }
        let slots = crate::abi::MAX_DMAS;
        let mut idle_rounds = 0;
        // Round-robin: one packet per DMA per turn, until nothing can move.
        while budget > 0 && idle_rounds < slots {
            let i = self.dmas.next_turn();
            if self.send_next_packet(i) {
                budget = budget.saturating_sub(1);
                progressed = true;
                idle_rounds = 0;
            } else {
                idle_rounds = idle_rounds.wrapping_add(1);
            }
        }
        progressed
    }

    /// True if some packet could be handed to the link right now (timers
    /// not yet due are reported through [`Engine::next_timer`] instead).
    pub(super) fn has_unsent(&self) -> bool {
        let now = self.hw.now_ns();
        let unsent = self.dmas.active() > 0
            && self.dmas.slots.iter().any(|d| {
                d.active
                    && d.packets_sent < d.packets_total
                    && self.queue_ready(d, now)
                    && self.flows.tx.get(d.peer_node).is_some_and(|f| {
                        !f.closing && ((f.in_flight as usize) < TX_WINDOW || f.broken)
                    })
            });
        if unsent {
            return unsent;
        }
        self.flows.busy().iter().any(|&n| {
            self.flows
                .tx
                .get(n)
                .is_some_and(|f| f.resend.is_some() && now >= f.resend_not_before)
        })
    }

    fn send_next_packet(&mut self, slot: usize) -> bool {
        let Some(dma) = self.dmas.slots.get(slot).copied() else {
            return false;
        };
        if !dma.active
            || dma.packets_sent >= dma.packets_total
            || (dma.queue.is_some() && !self.queue_ready(&dma, self.hw.now_ns()))
        {
            return false;
        }
        let Some(flow) = self.flows.tx.get(dma.peer_node) else {
            return false;
        };
        if flow.broken {
            // Every unsent packet fails now; the DMA completes with the error.
            let unsent = dma.packets_total.saturating_sub(dma.packets_sent);
            if let Some(d) = self.dmas.slots.get_mut(slot) {
                d.packets_sent = d.packets_total;
            }
            for _ in 0..unsent {
                self.credit(slot, Some(ErrorCode::PeerUnreachable));
            }
            return true;
        }
        if flow.in_flight as usize >= TX_WINDOW || flow.closing {
            // A closing flow sends nothing until the close's answer.
            return false;
        }
        let size = self.params.packet_size.max(1);
        let len = dma.len.saturating_sub(dma.next_offset).min(size);
        let last = dma.packets_sent.wrapping_add(1) == dma.packets_total;
        let entry = TxEntry {
            dma: slot as u8,
            offset: dma.next_offset,
            len,
            last,
        };
        if let Some(d) = self.dmas.slots.get_mut(slot) {
            d.next_offset = d.next_offset.saturating_add(len);
            d.packets_sent = d.packets_sent.wrapping_add(1);
        }
        let now = self.hw.now_ns();
        let Some(flow) = self.flows.tx.get_mut(dma.peer_node) else {
            return false;
        };
        let seq = flow.next_seq;
        if let Some(w) = flow.window.get_mut(seq as usize % TX_WINDOW) {
            *w = entry;
        }
        flow.next_seq = seq.wrapping_add(1);
        flow.sent = true;
        let was_idle = flow.in_flight == 0;
        if was_idle {
            flow.progress_ns = now;
        }
        flow.in_flight = flow.in_flight.wrapping_add(1);
        let (path, instance) = (flow.path(), flow.instance);
        if was_idle {
            self.flows.set_busy(dma.peer_node);
        }
        self.emit_packet((dma.peer_node, instance), seq, entry, path);
        true
    }

    /// Retransmit the next packet of a go-back in progress, if due.
    fn resend_one(&mut self, node: NodeId, now: u64) -> bool {
        let Some(flow) = self.flows.tx.get_mut(node) else {
            return false;
        };
        let Some(seq) = flow.resend else {
            return false;
        };
        if now < flow.resend_not_before {
            return false;
        }
        if seq == flow.resend_end || seq == flow.next_seq || flow.in_flight == 0 {
            flow.resend = None;
            return false;
        }
        let Some(entry) = flow.window.get(seq as usize % TX_WINDOW).copied() else {
            return false;
        };
        flow.resend = Some(seq.wrapping_add(1));
        let (path, instance) = (flow.path(), flow.instance);
        self.stats.retransmits = self.stats.retransmits.wrapping_add(1);
        self.emit_packet((node, instance), seq, entry, path);
        true
    }

    /// Build and send the packet for a window entry along `path`.
    /// (`flow`: the instance of `node`'s flow, which the packet carries.)
    fn emit_packet(&mut self, (node, flow): (NodeId, u32), seq: u32, e: TxEntry, path: Path) {
        let Some(dma) = self.dmas.slots.get(e.dma as usize).copied() else {
            return;
        };
        let route = Route {
            src_node: self.loc.node,
            src_ctx: dma.ctx,
            dst_node: node,
            dst_ctx: dma.peer_ctx,
            job_key: dma.job_key,
        };
        let (packet, payload) = match dma.role {
            DmaRole::Put | DmaRole::GetResponse => (
                Packet::Data(DataPacket {
                    route,
                    seq,
                    addr: dma.dst_addr.wrapping_add(e.offset as u64),
                    len: e.len,
                    event: if e.last { dma.peer_event } else { u32::MAX },
                    cookie: dma.cookie,
                    last: e.last,
                    get_response: dma.role == DmaRole::GetResponse,
                    dma_addr: dma.dst_addr,
                    dma_len: dma.len,
                    wake: e.last && dma.wake,
                    queue: dma.queue.is_some(),
                    retry: dma.queue.is_some() && dma.refused,
                    flow,
                }),
                Some(PayloadSource {
                    phys: dma.src_phys.wrapping_add(e.offset as u64),
                    len: e.len,
                }),
            ),
            DmaRole::GetRequest => (
                Packet::GetRequest(GetRequestPacket {
                    route,
                    seq,
                    src_addr: dma.remote_src,
                    dst_addr: dma.dst_addr,
                    len: dma.len,
                    src_event: dma.peer_event,
                    dst_event: dma.request_dst_event,
                    cookie: dma.cookie,
                    flow,
                }),
                None,
            ),
        };
        self.stats.packets_sent = self.stats.packets_sent.wrapping_add(1);
        self.hw.note(Activity::DmaPacket { channel: e.dma });
        // A packet the link refuses is treated as lost: the timer resends it.
        let _ = self.hw.send(&packet.emit(), payload, path);
    }

    /// Process an ack or nack that came by `path`.
    pub(super) fn on_ack(&mut self, ack: &AckPacket, path: Path) {
        let AckPacket {
            kind,
            src_node: peer,
            cum_seq: cum,
            err_bits: bits,
            err_code: code,
            refused,
            ..
        } = *ack;
        let now = self.hw.now_ns();
        if path == Path::Direct {
            self.restore_path(peer);
        }
        let Some(flow) = self.flows.tx.get(peer).copied() else {
            return;
        };
        if flow.instance != ack.flow {
            return; // an ack of an earlier instance of the flow
        }
        // The receiver has no slot for this NIC (`refuse_unknown_peer`):
        // every packet it covers failed, none is to be sent again.
        let no_slot = bits == u64::MAX && refused == u32::MAX;
        // Packets newly covered by this cumulative ack.
        let newly = cum.wrapping_sub(flow.base_seq).wrapping_add(1);
        let newly = if newly <= flow.in_flight { newly } else { 0 };
        for i in 0..newly {
            let seq = flow.base_seq.wrapping_add(i);
            let Some(entry) = flow.window.get(seq as usize % TX_WINDOW).copied() else {
                continue;
            };
            let distance = cum.wrapping_sub(seq);
            if !no_slot && distance < 32 && (refused >> distance) & 1 == 1 {
                self.requeue(entry.dma as usize, now);
                continue;
            }
            let failed = distance < 64 && (bits >> distance) & 1 == 1;
            self.credit(entry.dma as usize, if failed { code } else { None });
        }
        let Some(flow) = self.flows.tx.get_mut(peer) else {
            return;
        };
        let mut went_idle = false;
        if newly > 0 {
            flow.base_seq = flow.base_seq.wrapping_add(newly);
            flow.in_flight = flow.in_flight.wrapping_sub(newly);
            flow.progress_ns = now;
            flow.retries = 0;
            if flow.in_flight == 0 {
                flow.resend = None;
                flow.probing = false;
                went_idle = true;
            } else if flow.probing {
                // The probe got through: go back for the rest (the
                // receiver dropped whatever followed a loss).
                flow.go_back(now);
            } else if let Some(r) = flow.resend
                && r.wrapping_sub(flow.base_seq) as i32 <= 0
            {
                flow.resend = Some(flow.base_seq);
            }
        }
        if kind == AckKind::Nack && flow.in_flight > 0 {
            // The receiver is alive but lacked a resource (a full input
            // queue, a DMA slot) or saw a gap: that is progress, not a
            // silence that should count towards the retry limit.
            flow.progress_ns = now;
            flow.retries = 0;
            // Go back, after a short pause so that a busy receiver is not
            // hammered.
            flow.go_back(now.saturating_add(self.params.retry_timeout_ns / 64));
        }
        if went_idle {
            self.flows.set_idle(peer);
            // The peer has no receive slot for this NIC: forget the flow
            // too, unless a DMA to it still has packets to send (they meet
            // the same refusal: the peer opens no slot for a sender it
            // refused until its quiet time passes, abi.md §8.1), so that a
            // later one starts again at sequence number 0 as a new
            // instance.
            if no_slot
                && !self
                    .dmas
                    .slots
                    .iter()
                    .any(|d| d.active && d.peer_node == peer)
            {
                self.flows.tx.remove(peer);
            }
        }
    }

    /// The target refused DMA `slot`'s packet for now (a queued item, a get
    /// request that found no DMA slot): send it again (a queued item
    /// flagged RETRY) after a back-off that doubles with each refusal, from
    /// timeout/64 up to timeout/8 (short enough that a sender refused many
    /// times is not starved by others still retrying fast). The target
    /// bounds the wait (its queue wait; its DMAs end, freeing slots), so
    /// this needs no limit of its own.
    fn requeue(&mut self, slot: usize, now: u64) {
        let timeout = self.params.retry_timeout_ns;
        let Some(d) = self.dmas.slots.get_mut(slot) else {
            return;
        };
        if !d.active {
            return;
        }
        let backoff = (timeout / 64)
            .max(1)
            .saturating_mul(1 << d.refusals.min(3))
            .min(timeout / 8);
        d.refusals = d.refusals.saturating_add(1);
        d.refused = true;
        d.retry_at = now.saturating_add(backoff);
        d.packets_sent = 0;
        d.next_offset = 0;
    }

    /// May DMA `d`'s next packet go now? A refused packet (a queued item,
    /// a get request that found no DMA slot) waits for its back-off, and a
    /// queued item waits behind an older refused item of its context to
    /// the same queue (per-queue FIFO).
    pub(super) fn queue_ready(&self, d: &super::Dma, now: u64) -> bool {
        if d.refused && now < d.retry_at {
            return false;
        }
        let Some(queue) = d.queue else {
            return true;
        };
        !self.dmas.slots.iter().any(|o| {
            o.active
                && o.refused
                && o.queue == Some(queue)
                && o.ctx == d.ctx
                && o.peer_node == d.peer_node
                && o.peer_ctx == d.peer_ctx
                && (o.order.wrapping_sub(d.order) as i32) < 0
        })
    }

    /// One packet of DMA `slot` is accounted for (acked, or failed with
    /// `error`, or abandoned). Completes the DMA after its last packet.
    pub(super) fn credit(&mut self, slot: usize, error: Option<ErrorCode>) {
        let Some(d) = self.dmas.slots.get_mut(slot) else {
            return;
        };
        if !d.active {
            return;
        }
        d.packets_acked = d.packets_acked.wrapping_add(1);
        d.status = d.status.or(error);
        if d.packets_acked < d.packets_total {
            return;
        }
        let dma = *d;
        self.dmas.retire(slot);
        self.stats.dmas_completed = self.stats.dmas_completed.wrapping_add(1);
        if dma.role == DmaRole::GetRequest
            && dma.status.is_some()
            && let Some(rx) = self.flows.rx.get_mut(dma.peer_node)
        {
            // A failed request: no response will come. A slot it took that
            // follows nothing else goes (no close would ever free it).
            rx.gets = rx.gets.saturating_sub(1);
            if rx.instance == 0 && rx.without_flow().is_none() {
                self.flows.rx.remove(dma.peer_node);
                self.flows.forget_ack(dma.peer_node);
            }
        }
        let fire = match dma.role {
            DmaRole::Put | DmaRole::GetResponse => true,
            // A successful request completes at the requester when the data
            // lands (destination event); only a failure is signalled here.
            DmaRole::GetRequest => dma.status.is_some(),
        };
        if let Some(code) = dma.status {
            self.report(
                dma.ctx,
                ErrorInfo {
                    code,
                    kind: ErrorKind::Remote,
                    cookie: dma.cookie,
                    addr: dma.dst_addr,
                    len: dma.len,
                    peer_node: dma.peer_node,
                    peer_ctx: dma.peer_ctx,
                    op: match dma.role {
                        DmaRole::GetRequest => PacketType::GetRequest.as_raw(),
                        _ => PacketType::Data.as_raw(),
                    },
                    seq: 0,
                },
            );
        }
        if fire && let Some(ev) = dma.local_event {
            let _ = self.set_event(dma.ctx, ev, 1, dma.status);
        }
    }

    /// Retransmission timers: go back on a silent flow; give up after the
    /// retry limit.
    pub(super) fn check_timers(&mut self) -> bool {
        let collective_due = self.collective_timer().is_some();
        let close_armed = self.flows.closing > 0 || self.flows.close_scan_ns.is_some();
        if !self.flows.any_busy() && !collective_due && !close_armed {
            return false;
        }
        let now = self.hw.now_ns();
        let mut progressed = if collective_due {
            self.collective_timers(now)
        } else {
            false
        };
        if close_armed {
            progressed |= self.close_timers(now);
        }
        let mut from = 0;
        while let Some(node) = self.flows.next_busy(from) {
            from = u32::from(node).saturating_add(1);
            let Some(flow) = self.flows.tx.get_mut(node) else {
                break;
            };
            if flow.in_flight == 0 || flow.broken {
                continue;
            }
            if flow.via.is_some() && now >= flow.path_probe_ns {
                progressed = true;
                self.probe_direct_path(node, now);
            }
            let Some(flow) = self.flows.tx.get_mut(node) else {
                break;
            };
            let timeout = super::backed_off(self.params.retry_timeout_ns, flow.retries);
            if now < flow.progress_ns.saturating_add(timeout) {
                continue;
            }
            progressed = true;
            flow.retries = flow.retries.wrapping_add(1);
            flow.progress_ns = now;
            if flow.retries > self.params.retry_limit {
                match (flow.via, self.params.alternate) {
                    (None, Some(via)) => self.migrate(node, via, now),
                    _ => self.break_flow(node),
                }
            } else {
                // A probe: only the oldest packet goes again. The receiver
                // may just be congested, and a whole window from every
                // sender would bury it; once the probe is acknowledged,
                // the rest of the window follows (`on_ack`).
                flow.resend = Some(flow.base_seq);
                flow.resend_end = flow.base_seq.wrapping_add(1);
                flow.resend_not_before = now;
                flow.probing = true;
            }
        }
        progressed
    }

    /// The direct path to `node` stopped answering: go on through the
    /// sibling on rail `via`, from the oldest unacknowledged packet. The
    /// flow keeps its sequence numbers, so the receiver still applies each
    /// packet exactly once, whichever path brought it (a packet that had
    /// arrived but whose ack was lost is only acknowledged again).
    fn migrate(&mut self, node: NodeId, via: u8, now: u64) {
        let probe_every = self.path_probe_interval();
        let Some(flow) = self.flows.tx.get_mut(node) else {
            return;
        };
        flow.via = Some(via);
        flow.path_probe_ns = now.saturating_add(probe_every);
        if flow.in_flight > 0 {
            // What was sent on the old path is presumed lost: again, now.
            flow.retries = 0;
            flow.go_back(now);
        }
        self.note_path_change(true);
    }

    /// How often a migrated flow tries its direct path: every 8 timeouts
    /// (the longest backed-off timeout).
    pub(super) fn path_probe_interval(&self) -> u64 {
        super::backed_off(self.params.retry_timeout_ns, u32::MAX)
    }

    /// A flow or the broadcasts left their direct path (`migrated`) or
    /// came back to it: count it, and keep `STATUS.MIGRATED` true.
    pub(super) fn note_path_change(&mut self, migrated: bool) {
        if migrated {
            self.stats.migrations = self.stats.migrations.wrapping_add(1);
        } else {
            self.stats.path_restores = self.stats.path_restores.wrapping_add(1);
        }
        self.update_migrated_status();
    }

    /// Try a migrated flow's direct path: send a copy of its oldest
    /// unacknowledged packet directly (a duplicate the receiver only
    /// acknowledges, on the path it came by). An ack on the direct path
    /// takes the flow back ([`Engine::restore_path`]).
    fn probe_direct_path(&mut self, node: NodeId, now: u64) {
        let probe_every = self.path_probe_interval();
        let Some(flow) = self.flows.tx.get_mut(node) else {
            return;
        };
        flow.path_probe_ns = now.saturating_add(probe_every);
        let Some(entry) = flow.window.get(flow.base_seq as usize % TX_WINDOW).copied() else {
            return;
        };
        let (seq, instance) = (flow.base_seq, flow.instance);
        self.stats.retransmits = self.stats.retransmits.wrapping_add(1);
        self.emit_packet((node, instance), seq, entry, Path::Direct);
    }

    /// The direct path to `node` answered: its flow leaves the sibling path.
    pub(super) fn restore_path(&mut self, node: NodeId) {
        let Some(flow) = self.flows.tx.get_mut(node) else {
            return;
        };
        if flow.via.take().is_some() {
            self.note_path_change(false);
            // A migrated flow is not closed (abi.md §8.1); now it may be.
            let at = self.hw.now_ns().saturating_add(self.params.close_idle_ns);
            self.arm_close_scan(at);
        }
    }

    /// An in-order packet from `node` came through the sibling on rail
    /// `via`: its sender's direct path is dead, so this NIC's flow to it
    /// goes the same way at once instead of finding out through its own
    /// retry limit. Only through this NIC's own alternate, and not within
    /// 8 timeouts of a packet from `node` on the direct path (packets of a
    /// flow that has just come back, still in flight, would otherwise send
    /// the reverse flow round again).
    pub(super) fn learn_path(&mut self, node: NodeId, via: u8) {
        if self.params.alternate != Some(via) {
            return;
        }
        let now = self.hw.now_ns();
        let probe_every = self.path_probe_interval();
        if self
            .flows
            .rx
            .get(node)
            .is_some_and(|r| r.direct_ns != 0 && now < r.direct_ns.saturating_add(probe_every))
        {
            return;
        }
        if self
            .flows
            .tx
            .get(node)
            .is_some_and(|f| f.via.is_none() && !f.broken)
        {
            self.migrate(node, via, now);
        }
    }

    /// `STATUS.MIGRATED`: set while any flow, or the broadcasts, run
    /// through a sibling.
    pub(super) fn update_migrated_status(&mut self) {
        let migrated = self.flows.tx.values().any(|f| f.via.is_some()) || self.bcasts.via.is_some();
        let mut status = Status::from_bits_retain(self.hw.load(regs::STATUS));
        status.set(Status::MIGRATED, migrated);
        self.hw.store(regs::STATUS, status.bits());
    }

    /// The peer is unreachable: fail everything in the window; unsent
    /// packets fail when the transmitter reaches them.
    fn break_flow(&mut self, node: NodeId) {
        let Some(flow) = self.flows.tx.get_mut(node) else {
            return;
        };
        let old = *flow;
        flow.broken = true;
        flow.in_flight = 0;
        flow.resend = None;
        flow.via = None;
        flow.base_seq = flow.next_seq;
        if old.in_flight > 0 {
            self.flows.set_idle(node);
        }
        for i in 0..old.in_flight {
            let seq = old.base_seq.wrapping_add(i);
            if let Some(e) = old.window.get(seq as usize % TX_WINDOW) {
                self.credit(e.dma as usize, Some(ErrorCode::PeerUnreachable));
            }
        }
        let status = self.hw.load(regs::STATUS) | Status::FLOW_BROKEN.bits();
        self.hw.store(regs::STATUS, status);
        self.update_migrated_status();
    }

    /// Forget both directions of the flow with `node` and free their
    /// slots (mailbox ResetFlow): `Busy` while a DMA to it is active.
    pub(super) fn reset_flow(&mut self, node: NodeId) -> Result<(), ErrorCode> {
        let busy = self
            .dmas
            .slots
            .iter()
            .any(|d| d.active && d.peer_node == node);
        if busy || self.flows.tx.get(node).is_some_and(|f| f.in_flight > 0) {
            return Err(ErrorCode::Busy);
        }
        if self.flows.tx.get(node).is_some_and(|f| f.closing) {
            self.flows.closing = self.flows.closing.saturating_sub(1);
        }
        self.flows.tx.remove(node);
        self.flows.rx.remove(node);
        self.flows.forget_ack(node);
        self.update_migrated_status();
        if !self.flows.tx.values().any(|f| f.broken) {
            let status = self.hw.load(regs::STATUS) & !Status::FLOW_BROKEN.bits();
            self.hw.store(regs::STATUS, status);
        }
        Ok(())
    }
}
