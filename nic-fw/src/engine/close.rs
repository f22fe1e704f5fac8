//! Closing idle flows (docs/abi.md §8.1 "Closing idle flows", ABI 1.9),
//! so that a NIC can talk to more nodes over time than it has flow slots.
//!
//! Contract:
//! - a transmit flow opens with a new *instance* number, which every
//!   packet of the flow and every ack of it carries; a receive slot binds
//!   to the instance of the first sequenced packet it takes, drops packets
//!   of any other instance (counted as stale), and a sender ignores acks of
//!   any other;
//! - a transmit flow that has been idle for `close_idle` (everything
//!   acknowledged, no DMA to the node, not broken, not migrated) is
//!   closed: the sender sends `FlowClose` with its next sequence number and
//!   sends nothing else to that node until the answer. A flow with nothing
//!   ever sent is just forgotten;
//! - the receiver forgets the flow if its slot follows that instance,
//!   expects that sequence number and no get of its own awaits a response
//!   on it (or if it has no slot: closes are idempotent) and answers
//!   `closed`; otherwise it keeps its slot and answers `kept`;
//! - on `closed` the sender frees the slot, or, if DMAs to the node were
//!   posted meanwhile, opens the flow again as a new instance from
//!   sequence number 0; on `kept`, or no answer within the retry limit, the
//!   flow stays open as it was and is tried again after another idle time.
//!
//! Why this is safe: `close_idle` is at least twice the rail's packet
//! lifetime (abi.md §4.6), and the sender's last transmission on the flow
//! precedes its last ack, from which idleness is counted; so when the close
//! goes out no packet of the instance, nor an ack of one, is left in the
//! fabric to reopen the receiver's slot. Stale closes and answers (a
//! duplicate, a retransmission) name an instance no slot follows any more,
//! and do nothing.

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
            if flow.in_flight > 0 || flow.resend.is_some() || dma_to_node {
                // In use: idle at the earliest `idle` from now.
                next = Some(next.map_or(now.saturating_add(idle), |t| {
                    t.min(now.saturating_add(idle))
                }));
                continue;
            }
            if now < due {
                next = Some(next.map_or(due, |t| t.min(due)));
                continue;
            }
            if flow.next_seq == 0 {
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
                next_seq: flow.next_seq,
                flow: flow.instance,
                closed: false,
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

    /// Send again each close whose answer is overdue; give up on one past
    /// the retry limit (the flow stays open, tried again later).
    fn resend_closes(&mut self, now: u64) -> bool {
        let timeout = self.params.retry_timeout_ns;
        let limit = self.params.retry_limit;
        let me = self.loc.node;
        let mut progressed = false;
        let mut abandoned = false;
        for i in 0..PEERS {
            let Some((node, flow)) = self.flows.tx.slot_mut(i) else {
                continue;
            };
            if !flow.closing
                || now
                    < flow
                        .progress_ns
                        .saturating_add(backed_off(timeout, flow.retries))
            {
                continue;
            }
            progressed = true;
            flow.retries = flow.retries.saturating_add(1);
            flow.progress_ns = now;
            if flow.retries > limit {
                flow.closing = false;
                flow.retries = 0;
                self.flows.closing = self.flows.closing.saturating_sub(1);
                abandoned = true;
                continue;
            }
            let close = ClosePacket {
                src_node: me,
                dst_node: node,
                next_seq: flow.next_seq,
                flow: flow.instance,
                closed: false,
            };
            let _ = self
                .hw
                .send(&Packet::FlowClose(close).emit(), None, Path::Direct);
        }
        if abandoned {
            self.arm_close_scan(now.saturating_add(self.params.close_idle_ns));
        }
        progressed
    }

    /// A peer closes its flow to this NIC: forget the receive slot if it
    /// follows that instance and expects that sequence number, and answer.
    pub(super) fn on_flow_close(&mut self, close: &ClosePacket, path: Path) {
        let src = close.src_node;
        // A get to the sender waits for its response on this slot (it was
        // taken with the get, abi.md §8.1): keep it.
        let awaiting_response = self
            .dmas
            .slots
            .iter()
            .any(|d| d.active && d.peer_node == src && d.role == super::DmaRole::GetRequest);
        let closed = match self.flows.rx.get_mut(src) {
            None => true,
            Some(f)
                if f.instance == close.flow
                    && f.expected == close.next_seq
                    && !awaiting_response =>
            {
                if f.bcast == super::BcastRx::NEW {
                    self.flows.rx.remove(src);
                } else {
                    // The source's broadcasts are followed in the same
                    // slot: keep those, forget the flow.
                    *f = super::RxFlow {
                        bcast: f.bcast,
                        ..super::RxFlow::NEW
                    };
                }
                self.flows.forget_ack(src);
                true
            }
            Some(_) => false,
        };
        let answer = ClosePacket {
            src_node: self.loc.node,
            dst_node: src,
            next_seq: close.next_seq,
            flow: close.flow,
            closed,
        };
        let _ = self
            .hw
            .send(&Packet::FlowCloseAck(answer).emit(), None, path);
    }

    /// The answer to this NIC's close: free the slot (or open the flow
    /// again as a new instance, for DMAs posted meanwhile), or keep it.
    pub(super) fn on_flow_close_ack(&mut self, answer: &ClosePacket) {
        let node = answer.src_node;
        let now = self.hw.now_ns();
        let Some(flow) = self.flows.tx.get_mut(node) else {
            return;
        };
        if !flow.closing || flow.instance != answer.flow || flow.next_seq != answer.next_seq {
            return; // stale: a duplicate, or for an earlier instance
        }
        self.flows.closing = self.flows.closing.saturating_sub(1);
        if !answer.closed {
            flow.closing = false;
            flow.retries = 0;
            flow.progress_ns = now;
            self.arm_close_scan(now.saturating_add(self.params.close_idle_ns));
            return;
        }
        self.stats.flows_closed = self.stats.flows_closed.wrapping_add(1);
        let waiting = self
            .dmas
            .slots
            .iter()
            .any(|d| d.active && d.peer_node == node);
        self.flows.tx.remove(node);
        if waiting {
            // Cannot fail: the slot just freed is there to take.
            let _ = self.open_tx_flow(node);
        }
    }
}
