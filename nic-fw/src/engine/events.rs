//! Event counting and firing ([ELAN-SEM §13 rules 1-4]; see
//! [`crate::abi::event`] for the contract).

use super::hw::{Activity, Hardware};
use super::{ChainEntry, Engine};
use crate::abi::ContextIndex;
use crate::abi::command::CommandBlock;
use crate::abi::error::{ErrorCode, ErrorInfo, ErrorKind};
use crate::abi::event::{ActionKind, CompletionWord, EventAction, EventId, MAX_COPY_BLOCKS};
use crate::abi::regs::RegionPerms;

impl<H: Hardware, const PEERS: usize, const EVENTS: usize> Engine<H, PEERS, EVENTS> {
    /// Add `n` sets to an event, carrying `error`, if any (the first error
    /// is sticky until the next firing). Returns `BadEvent` for an index
    /// outside the table.
    pub(super) fn set_event(
        &mut self,
        ctx: ContextIndex,
        ev: EventId,
        n: u32,
        error: Option<ErrorCode>,
    ) -> Result<(), ErrorCode> {
        let e = self.events.get_mut(ctx, ev).ok_or(ErrorCode::BadEvent)?;
        e.count = e.count.saturating_add(n as i64);
        e.status = e.status.or(error);
        if e.armed && e.count >= 0 {
            self.fire(ctx, ev);
        }
        Ok(())
    }

    /// Record an error on an event without counting a set (a rejected
    /// non-final packet of a DMA the event will complete).
    pub(super) fn taint_event(&mut self, ctx: ContextIndex, ev: EventId, error: ErrorCode) {
        if let Some(e) = self.events.get_mut(ctx, ev)
            && e.status.is_none()
        {
            e.status = Some(error);
        }
    }

    /// Arm: add `-n` to the count, install the action, fire if already due.
    pub(super) fn arm_event(
        &mut self,
        ctx: ContextIndex,
        ev: EventId,
        n: u32,
        action: EventAction,
    ) -> Result<(), ErrorCode> {
        let e = self.events.get_mut(ctx, ev).ok_or(ErrorCode::BadEvent)?;
        e.count = e.count.saturating_sub(n as i64);
        e.action = action;
        e.armed = true;
        if e.count >= 0 {
            self.fire(ctx, ev);
        }
        Ok(())
    }

    /// Disarm and run the action. A COPY runs only when the event fires
    /// without error: forwarding data that did not arrive would spread the
    /// failure; the error is reported instead.
    fn fire(&mut self, ctx: ContextIndex, ev: EventId) {
        let Some(e) = self.events.get_mut(ctx, ev) else {
            return;
        };
        e.armed = false;
        let error = e.status.take();
        let action = e.action;
        self.stats.events_fired = self.stats.events_fired.wrapping_add(1);
        self.hw.note(Activity::EventFired);
        let failure = match action.kind {
            ActionKind::None => None,
            ActionKind::Write { addr, value } => {
                match self.translate(ctx, addr, 8, RegionPerms::LOCAL_WRITE) {
                    Ok(phys) => {
                        let outcome = match error {
                            Some(code) => Err(code),
                            None => Ok(()),
                        };
                        let word = CompletionWord::pack(value, outcome);
                        self.hw
                            .write_word_release(phys, word)
                            .err()
                            .map(|_| (ErrorCode::HostBus, addr))
                    }
                    Err(code) => Some((code, addr)),
                }
            }
            ActionKind::Copy { src, blocks } => match error {
                None => self.inject_chain(ctx, src, blocks).err().map(|c| (c, src)),
                Some(code) => Some((code, src)),
            },
        };
        if let Some((code, addr)) = failure {
            self.report(
                ctx,
                ErrorInfo {
                    code,
                    kind: ErrorKind::EventAction,
                    cookie: ev.0,
                    addr,
                    len: 0,
                    peer_node: self.loc.node,
                    peer_ctx: ctx,
                    op: 0,
                    seq: 0,
                },
            );
        }
        if action.wake {
            self.hw.wake(ctx);
        }
    }

    /// Append the `blocks` consecutive command blocks at `src` to the chain
    /// queue, all or none: if the queue lacks room for all of them, or one
    /// cannot be read, nothing is injected.
    pub(super) fn inject_chain(
        &mut self,
        ctx: ContextIndex,
        src: u64,
        blocks: u8,
    ) -> Result<(), ErrorCode> {
        let n = u64::from(blocks.max(1));
        if !self.chain.has_room(n) {
            return Err(ErrorCode::ChainOverflow);
        }
        let phys = self.translate(ctx, src, n.wrapping_mul(64), RegionPerms::LOCAL_READ)?;
        let mut read = [[0u8; 64]; MAX_COPY_BLOCKS as usize];
        for (i, raw) in read.iter_mut().take(n as usize).enumerate() {
            self.hw
                .read(phys.wrapping_add((i as u64).wrapping_mul(64)), raw)
                .map_err(|_| ErrorCode::HostBus)?;
        }
        for raw in read.iter().take(n as usize) {
            self.chain.push(ChainEntry {
                ctx,
                block: CommandBlock::from_bytes(raw),
            });
            self.stats.chained = self.stats.chained.wrapping_add(1);
        }
        Ok(())
    }

    /// Take the sets the node's other NICs posted to this one
    /// ([`super::hw::Siblings`]) and count them like local `SET_EVENT`s; a
    /// set naming a context that is not attached, or an event outside its
    /// table, is reported to that context if it exists (else counted in
    /// `STATS_ERRORS`).
    pub(super) fn receive_peer_sets(&mut self) -> bool {
        let mut progressed = false;
        while let Some(set) = self.hw.take_peer_set() {
            progressed = true;
            let outcome = if self.context(set.ctx).is_none() {
                Err(ErrorCode::NoContext)
            } else if set.count == 0 {
                Err(ErrorCode::BadLength)
            } else {
                self.set_event(set.ctx, set.event, set.count, None)
            };
            if let Err(code) = outcome {
                self.report(
                    set.ctx,
                    ErrorInfo {
                        code,
                        kind: ErrorKind::EventAction,
                        cookie: set.event.0,
                        addr: 0,
                        len: set.count,
                        peer_node: self.loc.node,
                        peer_ctx: set.ctx,
                        op: crate::abi::command::Opcode::SetEvent.as_raw(),
                        seq: 0,
                    },
                );
            }
        }
        progressed
    }
}
