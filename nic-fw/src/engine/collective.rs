//! Hardware-style collectives: broadcast DMA and the hardware barrier.
//!
//! Broadcast: one broadcast in flight per NIC. Its packets carry the
//! broadcast id and their index; the rail's switch replicates each to every
//! node of the range but the sender's. A destination accepts packets in
//! order per source (a newer id at index 0 opens the next broadcast),
//! checks the broadcast's whole target range once per packet like a data
//! packet, writes, sets its event after the last one, and answers with a
//! cumulative [`Packet::BcastAck`] carrying its first rejection. The sender
//! combines the acknowledgements (the worst answer wins,
//! [ELAN-SEM §13 rule 16]), keeps a window of packets ahead of the slowest destination,
//! retransmits from it on silence, and fires its source event when every
//! destination holds everything.
//!
//! Barrier: a member NIC sends its arrival (barrier number, group) to the
//! switch and keeps it pending; the switch releases the group once every
//! member arrived. A member re-sends its arrival every retransmission
//! timeout until released; the switch answers an arrival for a number it
//! already released with the release, and one it holds already with a
//! held packet (ABI 1.5). Waiting for a slow member is not a failure (each
//! held answer starts the retry count again), up to a bound of
//! [`super::HELD_BOUND`] x retry limit re-announcements (the members the
//! switch waits for may have gone on without it); re-sent arrivals that go
//! unanswered past the retry limit mean the switch or the link to it is
//! dead. Either way the barrier completes with `PeerUnreachable` and the
//! host finishes it without the switch.
//!
//! A broadcast whose destinations stay silent past the retry limit, on a
//! NIC with an alternate rail (ABI 1.5), goes on through the sibling on
//! that rail and its rail's switch (docs/abi.md §8.4): every destination
//! keeps its place in the broadcast, so nothing is applied twice.

use super::hw::{Activity, BCAST_CHANNEL, Hardware, Path, PayloadSource};
use super::rx::InboundWrite;
use super::{BcastTx, Engine, PendingBarrier, TX_BUDGET};
use crate::abi::error::ErrorCode;
use crate::abi::event::EventId;
use crate::abi::packet::{BarrierPacket, BcastPacket, Packet, Route};
use crate::abi::regs::RegionPerms;
use crate::abi::{ContextIndex, NodeId, TX_WINDOW};

/// `a` is after `b` in wrapping sequence arithmetic.
fn newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl<H: Hardware, const PEERS: usize, const EVENTS: usize> Engine<H, PEERS, EVENTS> {
    /// Check a collective's node range against the context's capability.
    fn check_range(&self, ctx: ContextIndex, low: NodeId, high: NodeId) -> Result<(), ErrorCode> {
        let cfg = self.context(ctx).ok_or(ErrorCode::NoContext)?;
        let cap_end = (cfg.cap.low_node as u32).saturating_add(cfg.cap.node_count as u32);
        if low < cfg.cap.low_node || high as u32 >= cap_end {
            return Err(ErrorCode::BadVp);
        }
        Ok(())
    }

    /// BCAST_DMA: `Ok(false)` if the broadcast channel is busy (stall).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_bcast(
        &mut self,
        ctx: ContextIndex,
        len: u32,
        low: NodeId,
        high: NodeId,
        src_addr: u64,
        dst_addr: u64,
        src_event: Option<EventId>,
        dst_event: Option<EventId>,
        cookie: u32,
    ) -> Result<bool, ErrorCode> {
        if self.bcasts.tx.active {
            return Ok(false);
        }
        self.check_range(ctx, low, high)?;
        // `bcasts.dest` has PEERS entries, one per node of the range
        // (`node - low`).
        if usize::from(high.saturating_sub(low)) >= PEERS {
            return Err(ErrorCode::NoPeerSlot);
        }
        let src_phys = self.translate(ctx, src_addr, len as u64, RegionPerms::LOCAL_READ)?;
        dst_addr
            .checked_add(len as u64)
            .ok_or(ErrorCode::AddressOverflow)?;
        let total = self.packets_for(len);
        if total > u16::MAX as u32 {
            return Err(ErrorCode::BadLength);
        }
        let job_key = self.context(ctx).map_or(0, |c| c.job_key);
        self.bcasts.next_id = self.bcasts.next_id.wrapping_add(1);
        for node in low..=high {
            if let Some(d) = self.bcasts.dest_mut(low, node) {
                *d = super::BcastDest {
                    received: 0,
                    status: None,
                    direct: false,
                };
            }
        }
        self.hw.note(Activity::DmaStart {
            channel: BCAST_CHANNEL,
        });
        self.bcasts.tx = BcastTx {
            active: true,
            ctx,
            id: self.bcasts.next_id,
            low,
            high,
            src_phys,
            dst_addr,
            len,
            total,
            sent: 0,
            job_key,
            src_event,
            dst_event: EventId::encode(dst_event),
            cookie,
            status: None,
            progress_ns: self.hw.now_ns(),
            retries: 0,
        };
        self.finish_bcast_if_done();
        Ok(true)
    }

    /// Fewest packets any destination (other than this node) has.
    fn bcast_min_received(&self) -> u32 {
        let b = &self.bcasts.tx;
        (b.low..=b.high)
            .filter(|n| *n != self.loc.node)
            .filter_map(|n| self.bcasts.dest(b.low, n))
            .map(|d| d.received)
            .min()
            .unwrap_or(b.total)
    }

    /// Can a broadcast packet go out now?
    pub(super) fn bcast_sendable(&self) -> bool {
        self.bcasts.tx.active
            && self.bcasts.tx.sent < self.bcasts.tx.total
            && self
                .bcasts
                .tx
                .sent
                .saturating_sub(self.bcast_min_received())
                < TX_WINDOW as u32
    }

    /// Send broadcast packets within the window.
    pub(super) fn bcast_transmit(&mut self) -> bool {
        let mut progressed = false;
        for _ in 0..TX_BUDGET {
            if !self.bcast_sendable() {
                break;
            }
            let b = self.bcasts.tx;
            let size = self.params.packet_size.max(1);
            let offset = b.sent.saturating_mul(size);
            let len = b.len.saturating_sub(offset).min(size);
            let last = b.sent.wrapping_add(1) == b.total;
            let packet = Packet::Bcast(BcastPacket {
                route: Route {
                    src_node: self.loc.node,
                    src_ctx: b.ctx,
                    dst_node: b.low,
                    dst_ctx: b.ctx,
                    job_key: b.job_key,
                },
                high_node: b.high,
                id: b.id,
                index: b.sent as u16,
                addr: b.dst_addr.wrapping_add(offset as u64),
                len,
                event: if last { b.dst_event } else { u32::MAX },
                cookie: b.cookie,
                last,
                dma_addr: b.dst_addr,
                dma_len: b.len,
            });
            let payload = PayloadSource {
                phys: b.src_phys.wrapping_add(offset as u64),
                len,
            };
            self.stats.packets_sent = self.stats.packets_sent.wrapping_add(1);
            self.hw.note(Activity::DmaPacket {
                channel: BCAST_CHANNEL,
            });
            let header = packet.emit();
            if let Some(via) = self.bcasts.via {
                // A broadcast's first packet also tries the direct path:
                // a destination that gets it acknowledges it directly,
                // and broadcasts come back to this rail's switch.
                if b.sent == 0 {
                    let _ = self.hw.send(&header, Some(payload), Path::Direct);
                }
                let _ = self.hw.send(&header, Some(payload), Path::Sibling(via));
            } else {
                let _ = self.hw.send(&header, Some(payload), Path::Direct);
            }
            self.bcasts.tx.sent = self.bcasts.tx.sent.wrapping_add(1);
            progressed = true;
        }
        progressed
    }

    /// A destination's acknowledgement, which came by `path`.
    pub(super) fn on_bcast_ack(
        &mut self,
        from: NodeId,
        id: u32,
        received: u32,
        error: Option<ErrorCode>,
        path: Path,
    ) {
        let b = self.bcasts.tx;
        if !b.active || id != b.id || from < b.low || from > b.high || from == self.loc.node {
            return;
        }
        let now = self.hw.now_ns();
        if let Some(d) = self.bcasts.dest_mut(b.low, from) {
            d.direct |= path == Path::Direct;
            let progressed = received > d.received;
            if progressed {
                d.received = received.min(b.total);
            }
            let first_error = error.filter(|_| d.status.is_none());
            if first_error.is_some() {
                d.status = first_error;
            }
            if progressed {
                self.bcasts.tx.progress_ns = now;
                self.bcasts.tx.retries = 0;
            }
            self.bcasts.tx.status = self.bcasts.tx.status.or(first_error);
        }
        // Broadcasts come back to this rail's switch once every destination
        // has answered on it (one that answers directly proves little for
        // the others: its own link may be the one alive).
        if self.bcasts.via.is_some()
            && (b.low..=b.high)
                .filter(|n| *n != self.loc.node)
                .all(|n| self.bcasts.dest(b.low, n).is_some_and(|d| d.direct))
        {
            self.bcasts.via = None;
            self.note_path_change(false);
        }
        self.finish_bcast_if_done();
    }

    fn finish_bcast_if_done(&mut self) {
        if !self.bcasts.tx.active || self.bcast_min_received() < self.bcasts.tx.total {
            return;
        }
        let b = self.bcasts.tx;
        self.bcasts.tx.active = false;
        self.stats.dmas_completed = self.stats.dmas_completed.wrapping_add(1);
        if let Some(ev) = b.src_event {
            let _ = self.set_event(b.ctx, ev, 1, b.status);
        }
    }

    /// A broadcast packet for this node, which came by `path` (the way its
    /// acknowledgements go back).
    pub(super) fn on_bcast(&mut self, p: &BcastPacket, payload: &H::Payload, path: Path) {
        let src = p.route.src_node;
        let Some(rx) = Self::rx_slot_for(&mut self.flows, &self.hw, src).map(|f| f.bcast) else {
            // No slot to follow this sender's broadcasts in: the sender
            // counts this NIC as done, with the error.
            self.note_refusal(src);
            self.stats.packets_rejected = self.stats.packets_rejected.wrapping_add(1);
            let refused = super::BcastRx {
                id: p.id,
                next: u32::MAX,
                started: true,
                status: Some(ErrorCode::NoPeerSlot),
            };
            self.send_bcast_ack(src, refused, path);
            return;
        };
        let index = p.index as u32;
        let mut state = rx;
        if rx.started && p.id == rx.id {
            if index < rx.next {
                self.stats.duplicates = self.stats.duplicates.wrapping_add(1);
                self.send_bcast_ack(src, rx, path);
                return;
            }
            if index > rx.next {
                return; // a gap: wait for the sender to go back
            }
        } else if !rx.started || newer(p.id, rx.id) {
            if index != 0 {
                return; // the start of this broadcast was lost
            }
            state = super::BcastRx {
                id: p.id,
                next: 0,
                started: true,
                status: None,
            };
        } else {
            return; // an older broadcast: already complete everywhere
        }
        // In order: check like a data packet (the whole broadcast range),
        // write, set the event after the last packet.
        let ctx = p.route.dst_ctx;
        let event = EventId::decode(p.event, EVENTS as u32);
        let target = InboundWrite {
            route: p.route,
            addr: p.addr,
            len: p.len,
            dma_addr: p.dma_addr,
            dma_len: p.dma_len,
            perm: RegionPerms::REMOTE_WRITE,
            event,
        };
        let outcome = self.write_inbound(&target, payload);
        match outcome {
            Err(code) => {
                state.status = state.status.or(Some(code));
                self.stats.packets_rejected = self.stats.packets_rejected.wrapping_add(1);
            }
            Ok(()) => {
                self.stats.packets_accepted = self.stats.packets_accepted.wrapping_add(1);
            }
        }
        if let Ok(Some(ev)) = event
            && self.context(ctx).is_some()
        {
            if p.last {
                let _ = self.set_event(ctx, ev, 1, state.status);
                self.hw.wake(ctx);
            } else if let Err(code) = outcome {
                self.taint_event(ctx, ev, code);
            }
        }
        state.next = state.next.wrapping_add(1);
        if let Some(r) = self.flows.rx.get_mut(src) {
            r.bcast = state;
        }
        self.send_bcast_ack(src, state, path);
    }

    fn send_bcast_ack(&mut self, to: NodeId, state: super::BcastRx, path: Path) {
        let ack = Packet::BcastAck {
            src_node: self.loc.node,
            dst_node: to,
            id: state.id,
            received: state.next,
            err_code: state.status,
        };
        let _ = self.hw.send(&ack.emit(), None, path);
    }

    /// HW_BARRIER: `Ok(false)` if this context already waits on a barrier.
    pub(super) fn start_barrier(
        &mut self,
        ctx: ContextIndex,
        low: NodeId,
        high: NodeId,
        (seq, tag): (u32, u32),
        event: Option<EventId>,
    ) -> Result<bool, ErrorCode> {
        self.check_range(ctx, low, high)?;
        if self.loc.node < low || self.loc.node > high {
            return Err(ErrorCode::BadVp);
        }
        // The switch combines groups of at most this many nodes and drops
        // a larger group's arrivals: refused here, not after the retries.
        if usize::from(high.saturating_sub(low)) >= crate::switch::MAX_GROUP_NODES {
            return Err(ErrorCode::BadVp);
        }
        let job_key = self.context(ctx).map_or(0, |c| c.job_key);
        let now = self.hw.now_ns();
        let Some(slot) = self.barriers.get_mut(ctx as usize) else {
            return Err(ErrorCode::NoContext);
        };
        if slot.is_some() {
            return Ok(false);
        }
        let pending = PendingBarrier {
            seq,
            tag,
            event,
            low,
            high,
            job_key,
            sent_ns: now,
            retries: 0,
            announces: 0,
        };
        *slot = Some(pending);
        self.send_barrier(ctx, pending, Packet::BarrierArrive);
        Ok(true)
    }

    /// Cancel everything context `ctx` has in flight on the collective
    /// engines, as it is detached: its pending barrier is left (the switch
    /// is told, and nothing re-announces it), and a broadcast it is
    /// sending stops reading its memory. Nothing is reported: the context
    /// is gone.
    pub(super) fn cancel_collectives(&mut self, ctx: ContextIndex) {
        if let Some(b) = self.barriers.get_mut(ctx as usize).and_then(Option::take) {
            self.send_barrier(ctx, b, Packet::BarrierLeave);
        }
        if self.bcasts.tx.active && self.bcasts.tx.ctx == ctx {
            self.bcasts.tx.active = false;
            self.stats.dmas_completed = self.stats.dmas_completed.wrapping_add(1);
        }
    }

    /// Send the switch `kind` (an arrival or a leave) of barrier `b`.
    fn send_barrier(
        &mut self,
        ctx: ContextIndex,
        b: PendingBarrier,
        kind: fn(BarrierPacket) -> Packet,
    ) {
        let packet = kind(BarrierPacket {
            route: Route {
                src_node: self.loc.node,
                src_ctx: ctx,
                dst_node: b.low,
                dst_ctx: ctx,
                job_key: b.job_key,
            },
            low_node: b.low,
            high_node: b.high,
            seq: b.seq,
            tag: b.tag,
        });
        let _ = self.hw.send(&packet.emit(), None, Path::Direct);
    }

    /// The switch released a barrier.
    pub(super) fn on_barrier_release(&mut self, p: &BarrierPacket) {
        let ctx = p.route.dst_ctx;
        let Some(slot) = self.barriers.get_mut(ctx as usize) else {
            return;
        };
        let Some(b) = *slot else {
            return; // a duplicate release of a barrier already completed
        };
        if !b.is_answered_by(p) {
            return;
        }
        *slot = None;
        if let Some(ev) = b.event {
            let _ = self.set_event(ctx, ev, 1, None);
        }
        self.hw.wake(ctx);
    }

    /// The switch holds this NIC's re-sent arrival: it is alive, the
    /// barrier waits for others, the retry count starts again.
    pub(super) fn on_barrier_held(&mut self, p: &BarrierPacket) {
        let ctx = p.route.dst_ctx;
        if let Some(Some(b)) = self.barriers.get_mut(ctx as usize)
            && b.is_answered_by(p)
        {
            b.retries = 0;
        }
    }

    /// Broadcast and barrier timers; true if something was resent.
    pub(super) fn collective_timers(&mut self, now: u64) -> bool {
        let timeout = self.params.retry_timeout_ns;
        let mut progressed = false;
        if self.bcasts.tx.active && now >= self.bcasts.tx.progress_ns.saturating_add(timeout) {
            progressed = true;
            self.bcasts.tx.retries = self.bcasts.tx.retries.wrapping_add(1);
            self.bcasts.tx.progress_ns = now;
            if self.bcasts.tx.retries > self.params.retry_limit
                && self.bcasts.via.is_none()
                && let Some(via) = self.params.alternate
            {
                // The switch or its link is dead: go on through the
                // sibling, from the slowest destination.
                self.bcasts.via = Some(via);
                self.bcasts.tx.retries = 0;
                self.bcasts.tx.sent = self.bcast_min_received();
                self.note_path_change(true);
            } else if self.bcasts.tx.retries > self.params.retry_limit {
                // Destinations that never answered are unreachable.
                self.bcasts.tx.status = Some(ErrorCode::PeerUnreachable);
                let total = self.bcasts.tx.total;
                let low = self.bcasts.tx.low;
                for node in low..=self.bcasts.tx.high {
                    if let Some(d) = self.bcasts.dest_mut(low, node) {
                        d.received = total;
                    }
                }
                self.finish_bcast_if_done();
            } else {
                self.stats.retransmits = self.stats.retransmits.wrapping_add(1);
                self.bcasts.tx.sent = self.bcast_min_received();
            }
        }
        for ctx in 0..self.barriers.len() {
            let Some(Some(b)) = self.barriers.get(ctx).copied() else {
                continue;
            };
            if now < b.sent_ns.saturating_add(timeout) {
                continue;
            }
            progressed = true;
            let ctx = ctx as ContextIndex;
            // The arrival is re-announced every timeout; the switch answers
            // a released one with the release and a held one with a held
            // packet, which starts the count again: a barrier waits for a
            // slow member, not for a dead switch. Not for ever, though: the
            // members it waits for may have gone on without the switch
            // (its host's fallback finishes the barrier either way).
            let retries = b.retries.wrapping_add(1);
            let announces = b.announces.saturating_add(1);
            if retries > self.params.retry_limit
                || announces > self.params.retry_limit.saturating_mul(super::HELD_BOUND)
            {
                if let Some(slot) = self.barriers.get_mut(ctx as usize) {
                    *slot = None;
                }
                // Should the switch come back, it must not count this
                // arrival for a barrier the host finishes without it.
                self.send_barrier(ctx, b, Packet::BarrierLeave);
                if let Some(ev) = b.event {
                    let _ = self.set_event(ctx, ev, 1, Some(ErrorCode::PeerUnreachable));
                }
                self.hw.wake(ctx);
                continue;
            }
            let again = PendingBarrier {
                sent_ns: now,
                retries,
                announces,
                ..b
            };
            if let Some(slot) = self.barriers.get_mut(ctx as usize) {
                *slot = Some(again);
            }
            self.send_barrier(ctx, again, Packet::BarrierArrive);
        }
        progressed
    }

    /// Earliest broadcast or barrier deadline.
    pub(super) fn collective_timer(&self) -> Option<u64> {
        let timeout = self.params.retry_timeout_ns;
        let bcast = self
            .bcasts
            .tx
            .active
            .then(|| self.bcasts.tx.progress_ns.saturating_add(timeout));
        let barrier = self
            .barriers
            .iter()
            .flatten()
            .map(|b| b.sent_ns.saturating_add(timeout))
            .min();
        match (bcast, barrier) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
