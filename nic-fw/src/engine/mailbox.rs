//! The admin mailbox: context attach/detach, region map/unmap, parameters,
//! flow reset. Only the privileged driver reaches it (see `docs/abi.md`).

use super::hw::Hardware;
use super::{Context, Engine, Region};
use crate::abi::error::ErrorCode;
use crate::abi::regs::{self, ContextConfig, MailboxOp, MailboxStatus, Param, RegionConfig};
use crate::abi::{MAX_PACKET_SIZE, MIN_PACKET_SIZE, NodeId};

impl<H: Hardware, const PEERS: usize, const EVENTS: usize> Engine<H, PEERS, EVENTS> {
    /// Execute the mailbox call in the registers and publish its status.
    pub(super) fn run_mailbox(&mut self) {
        let cmd = self.hw.load(regs::MBOX_CMD);
        let seq = (cmd >> 32) as u32;
        let args = regs::MBOX_ARGS.map(|reg| self.hw.load(reg));
        let result = if (cmd >> 8) & 0xff_ffff != 0 {
            Err(ErrorCode::ReservedNonZero)
        } else {
            match MailboxOp::from_raw(cmd as u8) {
                Some(op) => self.mailbox_call(op, args),
                None => Err(ErrorCode::BadConfig),
            }
        };
        let result = match result {
            Ok(value) => {
                self.hw.store(regs::MBOX_RESULT, value);
                Ok(())
            }
            Err(code) => Err(code),
        };
        self.hw.store(
            regs::MBOX_STATUS,
            MailboxStatus {
                result,
                done: true,
                seq,
            }
            .to_reg(),
        );
    }

    fn mailbox_call(&mut self, op: MailboxOp, args: [u64; 4]) -> Result<u64, ErrorCode> {
        match op {
            MailboxOp::AttachContext => {
                let cfg = ContextConfig::from_args(args)?;
                let last_node =
                    (cfg.cap.low_node as usize).saturating_add(cfg.cap.node_count as usize);
                if last_node > crate::abi::NODE_SPACE {
                    return Err(ErrorCode::BadConfig);
                }
                let slot = self
                    .contexts
                    .get_mut(cfg.ctx as usize)
                    .ok_or(ErrorCode::BadConfig)?;
                if slot.cfg.is_some() {
                    return Err(ErrorCode::Busy);
                }
                *slot = Context {
                    cfg: Some(cfg),
                    head: 0,
                    err_count: 0,
                };
                self.events.reset(cfg.ctx);
                if let Some(queues) = self.queues.get_mut(cfg.ctx as usize) {
                    *queues = [None; crate::abi::command::MAX_QUEUES as usize];
                }
                if let Some(reg) = regs::ctx_reg(cfg.ctx, regs::CQ_TAIL) {
                    self.hw.store(reg, 0);
                }
                for reg in [regs::CQ_HEAD, regs::ERR_COUNT] {
                    if let Some(reg) = regs::ctx_reg(cfg.ctx, reg) {
                        self.hw.store(reg, 0);
                    }
                }
                // Doorbells rung before the attach are stale.
                self.queues_pending &= !(1u32 << (cfg.ctx as u32 & 31));
                Ok(0)
            }
            MailboxOp::DetachContext => {
                let ctx = args[0];
                let ctx = u8::try_from(ctx).map_err(|_| ErrorCode::BadConfig)?;
                if self.context(ctx).is_none() {
                    return Err(ErrorCode::NoContext);
                }
                if self.dmas.slots.iter().any(|d| d.active && d.ctx == ctx) {
                    return Err(ErrorCode::Busy);
                }
                self.cancel_collectives(ctx);
                // Chained commands of the context not run yet: the next
                // owner of the index must not run them.
                self.chain.cancel(ctx);
                for r in self.regions.iter_mut() {
                    if r.is_some_and(|r| r.ctx == ctx) {
                        *r = None;
                    }
                }
                if let Some(c) = self.contexts.get_mut(ctx as usize) {
                    *c = Context::DETACHED;
                }
                Ok(0)
            }
            MailboxOp::MapRegion => {
                let cfg = RegionConfig::from_args(args)?;
                if self.context(cfg.ctx).is_none() {
                    return Err(ErrorCode::NoContext);
                }
                let end = cfg.va.saturating_add(cfg.len);
                let overlaps =
                    self.regions.iter().flatten().any(|r| {
                        r.ctx == cfg.ctx && cfg.va < r.va.saturating_add(r.len) && r.va < end
                    });
                if overlaps {
                    return Err(ErrorCode::BadConfig);
                }
                let slot = self
                    .regions
                    .get_mut(cfg.slot as usize)
                    .ok_or(ErrorCode::BadConfig)?;
                if slot.is_some() {
                    return Err(ErrorCode::Busy);
                }
                *slot = Some(Region {
                    ctx: cfg.ctx,
                    perms: cfg.perms,
                    va: cfg.va,
                    len: cfg.len,
                    phys: cfg.phys,
                });
                Ok(0)
            }
            MailboxOp::UnmapRegion => {
                let index = usize::try_from(args[0]).map_err(|_| ErrorCode::BadConfig)?;
                let region = self.regions.get(index).ok_or(ErrorCode::BadConfig)?;
                let Some(r) = *region else {
                    return Err(ErrorCode::BadConfig);
                };
                // A DMA or a broadcast in flight may hold a translation
                // into the region (a broadcast reads its source on every
                // send and resend).
                if self.dmas.slots.iter().any(|d| d.active && d.ctx == r.ctx)
                    || (self.bcasts.tx.active && self.bcasts.tx.ctx == r.ctx)
                {
                    return Err(ErrorCode::Busy);
                }
                if let Some(slot) = self.regions.get_mut(index) {
                    *slot = None;
                }
                Ok(0)
            }
            MailboxOp::SetParam => {
                let value = args[1];
                match Param::from_arg(args[0]).ok_or(ErrorCode::BadConfig)? {
                    Param::PacketSize => {
                        let size = u32::try_from(value).map_err(|_| ErrorCode::BadConfig)?;
                        if !size.is_power_of_two()
                            || !(MIN_PACKET_SIZE..=MAX_PACKET_SIZE).contains(&size)
                        {
                            return Err(ErrorCode::BadConfig);
                        }
                        if self.dmas.active() > 0 {
                            return Err(ErrorCode::Busy);
                        }
                        self.params.packet_size = size;
                        self.hw.store(regs::PACKET_SIZE, size as u64);
                    }
                    Param::RetryTimeoutNs => {
                        if value < 1000 {
                            return Err(ErrorCode::BadConfig);
                        }
                        self.params.retry_timeout_ns = value;
                    }
                    Param::RetryLimit => {
                        let limit = u32::try_from(value).map_err(|_| ErrorCode::BadConfig)?;
                        if limit == 0 {
                            return Err(ErrorCode::BadConfig);
                        }
                        self.params.retry_limit = limit;
                    }
                    Param::QueueWaitNs => {
                        if value < 1000 {
                            return Err(ErrorCode::BadConfig);
                        }
                        self.params.queue_wait_ns = value;
                    }
                    Param::FlowCloseIdleNs => {
                        // 1 ms at least: the walk for idle flows runs at
                        // most this often. (The rail's packet lifetime,
                        // which it must also cover twice, is not the
                        // NIC's to know.)
                        if value != 0 && value < 1_000_000 {
                            return Err(ErrorCode::BadConfig);
                        }
                        self.params.close_idle_ns = value;
                        if value == 0 {
                            self.flows.close_scan_ns = None;
                        } else if self.flows.tx.values().next().is_some() {
                            let at = self.hw.now_ns().saturating_add(value);
                            self.arm_close_scan(at);
                        }
                    }
                    Param::AlternateRail => {
                        // 0: no alternate; rail + 1: a sibling of this node
                        // (never this NIC's own rail, and only on a board
                        // with a NIC-to-NIC path).
                        self.params.alternate = match value {
                            0 => None,
                            v => {
                                let rail = u8::try_from(v.wrapping_sub(1))
                                    .map_err(|_| ErrorCode::BadConfig)?;
                                if rail == self.loc.rail || self.hw.peer_fifo_depth() == 0 {
                                    return Err(ErrorCode::BadConfig);
                                }
                                Some(rail)
                            }
                        };
                    }
                }
                Ok(0)
            }
            MailboxOp::ResetFlow => {
                let node = NodeId::try_from(args[0]).map_err(|_| ErrorCode::BadConfig)?;
                self.reset_flow(node).map(|()| 0)
            }
        }
    }
}
