//! The rail switch's broadcast and barrier, over the job's nodes or a
//! communicator's span of them (docs/abi.md §4.4-4.5).

use super::*;

impl Endpoint {
    /// Post a hardware broadcast (BCAST_DMA on rail 0) of `src` into `dst`
    /// at the rank with this rank's local index on every other node; each
    /// target's `dst_event` is set once. No readiness handshake: the caller
    /// knows the targets are ready.
    pub fn hw_bcast_post(
        &self,
        src: &SymBuffer,
        dst: &SymBuffer,
        dst_event: Option<DestEvent>,
    ) -> Result<PutHandle<'_>, Error> {
        self.hw_bcast_span_post(self.job_span(), src, dst, dst_event)
    }

    /// [`Endpoint::hw_bcast_post`] to the nodes `span` (lowest, highest)
    /// only: a communicator's.
    pub(crate) fn hw_bcast_span_post(
        &self,
        span: (usize, usize),
        src: &SymBuffer,
        dst: &SymBuffer,
        dst_event: Option<DestEvent>,
    ) -> Result<PutHandle<'_>, Error> {
        Self::check_same_len("the broadcast target", src, dst)?;
        let len = dma_len(src.len())?;
        self.check_in_arena(src)?;
        self.check_in_arena(dst)?;
        let (low_node, high_node) = self.switch_span(span)?;
        let (src_addr, dst_addr) = (src.va(0), dst.va(0));
        let command = Command::Bcast {
            len,
            low_node,
            high_node,
            src_addr,
            dst_addr,
            src_event: None,
            dst_event: dst_event.map(|d| d.0),
        };
        self.post_one(0, Tracked::Now(command), src.len())
    }

    /// The rail switch's combined barrier (HW_BARRIER on rail 0) among the
    /// ranks with this rank's local index on every node, number `seq`
    /// (wrapping, the same on every participant; numbers only move
    /// forward within one `tag`, see [`CommConfig::instance`]): returns
    /// when all have arrived ([ELAN-SEM §13 rule 17]).
    ///
    /// [`CommConfig::instance`]: crate::CommConfig::instance
    pub fn hw_barrier(&self, seq: u32, tag: u32) -> Result<(), Error> {
        self.hw_barrier_post(seq, tag)?.wait()
    }

    /// Post [`Endpoint::hw_barrier`]'s arrival; its handle completes when
    /// every participant has arrived.
    pub fn hw_barrier_post(&self, seq: u32, tag: u32) -> Result<PutHandle<'_>, Error> {
        self.hw_barrier_span_post(self.job_span(), seq, tag)
    }

    /// [`Endpoint::hw_barrier_post`] among the nodes `span` (lowest,
    /// highest) only: a communicator's.
    pub(crate) fn hw_barrier_span_post(
        &self,
        span: (usize, usize),
        seq: u32,
        tag: u32,
    ) -> Result<PutHandle<'_>, Error> {
        let (low_node, high_node) = self.switch_span(span)?;
        let command = Command::HwBarrier {
            low_node,
            high_node,
            seq,
            tag,
            event: None,
        };
        self.post(
            &[Post {
                rail: 0,
                what: Tracked::Now(command),
            }],
            Vec::new(),
        )
    }

    /// The job's nodes, lowest and highest.
    pub(super) fn job_span(&self) -> (usize, usize) {
        (0, self.topology().nodes().saturating_sub(1))
    }

    /// Nodes `span` as the switch's span operations take them.
    pub(super) fn switch_span(&self, (low, high): (usize, usize)) -> Result<(u16, u16), Error> {
        let id = |n: usize| {
            u16::try_from(n)
                .map_err(|_| Error::BadShape(format!("node {n} exceeds the switch's node ids")))
        };
        Ok((id(low)?, id(high)?))
    }
}
