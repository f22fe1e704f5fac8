//! Closing idle flows (docs/abi.md §8.1 "Flow instances and closing idle
//! flows", ABI 1.9), so that a NIC can talk to more nodes over time than
//! it has flow slots.
//!
//! Contract:
//! - a transmit flow opens with a new *instance* number from a per-NIC
//!   counter, which every packet of the flow and every ack of it carries;
//!   a receive slot follows the instance of the first sequenced packet it
//!   takes, and a later instance's packet makes it follow that one from
//!   sequence number 0; an earlier instance's packet is dropped (counted
//!   as stale); a sender ignores acks of any instance but its flow's;
//! - a transmit flow idle for `close_idle` (everything acknowledged, no
//!   DMA to the node, not broken, not migrated) is closed: the sender sends
//!   `FlowClose` with its instance and sends nothing else on the flow until
//!   the answer. A flow with nothing ever sent is just forgotten;
//! - the receiver forgets the flow if its slot follows that instance (the
//!   slot itself too, unless it also follows the sender's broadcasts or
//!   owes this NIC's gets their responses), and answers in every case: a
//!   close is idempotent, and a slot that follows another instance, or
//!   none, holds nothing of the one closed;
//! - on the answer the sender frees the slot or, if DMAs to the node were
//!   posted meanwhile, opens the flow again as a new instance. With no
//!   answer past the retry limit it does the same: the receiver, whether
//!   or not it saw the close, takes the new instance's first packet as a
//!   fresh start.
//!
//! Why this is safe: `close_idle` is at least twice the rail's packet
//! lifetime (abi.md §4.6), and the sender's last transmission on the flow
//! precedes its last ack, from which idleness is counted; so when the close
//! goes out no packet of the instance, nor an ack of one, is left in the
//! fabric. A copy of the close (a duplicate, a retransmission) arriving
//! later finds a slot that follows no instance or a later one, and only
//! makes the receiver answer again; a copy of the answer finds the sender
//! past that instance, and is ignored.

use super::hw::{Hardware, Path};
use super::{Engine, TxFlow, backed_off};
use crate::abi::NodeId;
use crate::abi::error::ErrorCode;
use crate::abi::packet::{ClosePacket, Packet};

impl<H: Hardware, const PEERS: usize, const EVENTS: usize> Engine<H, PEERS, EVENTS> {
    /// `node`'s transmit flow, opened if it had none (a new instance, and
    /// the walk for idle flows armed): `NoPeerSlot` if the table is full.
    pub(super) fn open_tx_flow(&mut self, node: NodeId) -> Result<(), ErrorCode> {
        if self.flows.tx.get(node).is_some() {
            return Ok(());
        }
        let instance = self.flows.draw_instance();
        let now = self.hw.now_ns();
        let flow = TxFlow {
            instance,
            progress_ns: now,
            ..TxFlow::NEW
        };
        self.flows
            .tx
            .open(node, flow)
            .ok_or(ErrorCode::NoPeerSlot)?;
        self.arm_close_scan(now.saturating_add(self.params.close_idle_ns));
        Ok(())
    }

    /// Run the walk for idle flows by `at`, at the latest.
    pub(super) fn arm_close_scan(&mut self, at: u64) {
        if self.params.close_idle_ns == 0 {
            return;
        }
        self.flows.close_scan_ns = Some(self.flows.close_scan_ns.map_or(at, |t| t.min(at)));
    }

    /// When the close work next needs a poll: the walk for idle flows, or
    /// a close's retransmission.
    pub(super) fn close_timer(&self) -> Option<u64> {
        let resend = if self.flows.closing > 0 {
            let timeout = self.params.retry_timeout_ns;
            self.flows
                .tx
                .values()
                .filter(|f| f.closing)
                .map(|f| f.progress_ns.saturating_add(backed_off(timeout, f.retries)))
                .min()
        } else {
            None
        };
        [resend, self.flows.close_scan_ns]
            .into_iter()
            .flatten()
            .min()
    }

    /// Closes due: retransmissions of unanswered closes, and the walk for
    /// idle flows when it is due.
    pub(super) fn close_timers(&mut self, now: u64) -> bool {
        let mut progressed = false;
        if self.flows.closing > 0 {
            progressed |= self.resend_closes(now);
        }
        if self.flows.close_scan_ns.is_some_and(|t| now >= t) {
            progressed |= self.close_idle_flows(now);
        }
        progressed
    }

    /// Walk the transmit slots: close each flow idle for `close_idle`, and
    /// note when the next one could be.
    fn close_idle_flows(&mut self, now: u64) -> bool {
        self.flows.close_scan_ns = None;
        let idle = self.params.close_idle_ns;
        if idle == 0 {
            return false;
        }
        let mut next: Option<u64> = None;
        let mut progressed = false;
        let mut forget = None;
        for i in 0..PEERS {
            let Some((node, flow)) = self.flows.tx.slot_mut(i) else {
                continue;
            };
            if flow.closing || flow.broken || flow.via.is_some() {
                // A close's answer, `RESET_FLOW`, or the direct path's
                // return (`restore_path`) decides.
                continue;
            }
            let due = flow.progress_ns.saturating_add(idle);
            let dma_to_node = self
                .dmas
                .slots
                .iter()
                .any(|d| d.active && d.peer_node == node);
            let at = if flow.in_flight > 0 || flow.resend.is_some() || dma_to_node {
                // In use: idle at the earliest `idle` from now.
                Some(now.saturating_add(idle))
            } else if now < due {
                Some(due)
            } else {
                None
            };
            if let Some(at) = at {
                next = Some(next.map_or(at, |t| t.min(at)));
                continue;
            }
            if !flow.sent {
                // Nothing was ever sent: the receiver knows nothing of it.
                // (Removal moves entries: the walk starts again.)
                forget = Some(node);
                break;
            }
            flow.closing = true;
            flow.retries = 0;
            flow.progress_ns = now;
            let close = ClosePacket {
                src_node: self.loc.node,
                dst_node: node,
                flow: flow.instance,
            };
            self.flows.closing = self.flows.closing.saturating_add(1);
            let _ = self
                .hw
                .send(&Packet::FlowClose(close).emit(), None, Path::Direct);
            progressed = true;
        }
        if let Some(node) = forget {
            self.flows.tx.remove(node);
            next = Some(now);
            progressed = true;
        }
        if let Some(at) = next {
            self.arm_close_scan(at);
        }
        progressed
    }

    /// Send again each close whose answer is overdue (along the flow's
    /// path: a close waits through a migration too); past the retry limit,
    /// end the instance as if it were answered.
    fn resend_closes(&mut self, now: u64) -> bool {
        let timeout = self.params.retry_timeout_ns;
        let limit = self.params.retry_limit;
        let me = self.loc.node;
        let mut progressed = false;
        let mut given_up = None;
        for i in 0..PEERS {
            let Some((node, flow)) = self.flows.tx.slot_mut(i) else {
                continue;
            };
            let due = flow
                .progress_ns
                .saturating_add(backed_off(timeout, flow.retries));
            if !flow.closing || now < due {
                continue;
            }
            progressed = true;
            flow.retries = flow.retries.saturating_add(1);
            flow.progress_ns = now;
            if flow.retries > limit {
                // (Ending it moves entries: one per walk, the next at the
                // next poll.)
                given_up = Some(node);
                break;
            }
            let close = ClosePacket {
                src_node: me,
                dst_node: node,
                flow: flow.instance,
            };
            let path = flow.path();
            let _ = self.hw.send(&Packet::FlowClose(close).emit(), None, path);
        }
        if let Some(node) = given_up {
            self.end_instance(node);
        }
        progressed
    }

    /// `node`'s closing flow is over (answered, or past the retry limit):
    /// free its slot, or open it again as a new instance for the DMAs
    /// posted meanwhile.
    fn end_instance(&mut self, node: NodeId) {
        self.flows.closing = self.flows.closing.saturating_sub(1);
        let migrated = self.flows.tx.get(node).is_some_and(|f| f.via.is_some());
        self.flows.tx.remove(node);
        let waiting = self
            .dmas
            .slots
            .iter()
            .any(|d| d.active && d.peer_node == node);
        if waiting {
            // Cannot fail: the slot just freed is there to take.
            let _ = self.open_tx_flow(node);
        }
        if migrated {
            self.update_migrated_status();
        }
    }

    /// `src`'s receive slot, for a packet that came from it: taken if it had
    /// none, unless the table is full or `src` is in its quiet time
    /// (`None`: the caller refuses it, [`Engine::note_refusal`]). It
    /// borrows the flows alone, so the caller keeps the rest of the engine.
    pub(super) fn rx_slot_for<'f>(
        flows: &'f mut super::tables::Flows<PEERS>,
        hw: &H,
        src: NodeId,
    ) -> Option<&'f mut super::RxFlow> {
        let until = flows.refused_until(src);
        flows
            .rx
            .open_if(src, || hw.now_ns() >= until, super::RxFlow::NEW)
    }

    /// `src` was refused for want of a slot: its quiet time starts again.
    pub(super) fn note_refusal(&mut self, src: NodeId) {
        let quiet = match self.params.close_idle_ns {
            0 => super::DEFAULT_CLOSE_IDLE_NS,
            t => t,
        };
        let until = self.hw.now_ns().saturating_add(quiet);
        self.flows.refuse_until(src, until);
    }

    /// Whether a receive slot may be opened for `src`, which has none: the
    /// table has room, and `src` was not refused one (nor a node sharing
    /// its quiet bucket) less than the close idle time ago. A copy of a
    /// refused packet, or of a refused broadcast, can arrive up to a
    /// packet lifetime after the refusal reached its sender; were it to
    /// find a slot, whether freed meanwhile or taken for this NIC's own
    /// get, it would be applied although its sender was told it failed.
    pub(super) fn may_open_rx(&self, src: NodeId) -> bool {
        self.flows.rx.has_room_for(src) && self.hw.now_ns() >= self.flows.refused_until(src)
    }

    /// A peer closes its flow to this NIC: forget it if this NIC's slot
    /// follows that instance, and answer in every case.
    pub(super) fn on_flow_close(&mut self, close: &ClosePacket, path: Path) {
        let src = close.src_node;
        if let Some(f) = self.flows.rx.get_mut(src)
            && f.instance == close.flow
        {
            match f.without_flow() {
                Some(kept) => *f = kept,
                None => {
                    self.flows.rx.remove(src);
                }
            }
            self.flows.forget_ack(src);
        }
        let answer = ClosePacket {
            src_node: self.loc.node,
            dst_node: src,
            flow: close.flow,
        };
        let _ = self
            .hw
            .send(&Packet::FlowCloseAck(answer).emit(), None, path);
    }

    /// The answer to this NIC's close: that instance is over.
    pub(super) fn on_flow_close_ack(&mut self, answer: &ClosePacket) {
        let node = answer.src_node;
        let ours = self
            .flows
            .tx
            .get(node)
            .is_some_and(|f| f.closing && f.instance == answer.flow);
        if !ours {
            return; // a copy, or for an earlier instance
        }
        self.stats.flows_closed = self.stats.flows_closed.wrapping_add(1);
        self.end_instance(node);
    }
}
