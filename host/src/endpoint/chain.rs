//! Chained puts: a put the NIC starts by itself when its trigger fires
//! (striped parts, feeds, sets when done), and relays of a counter's sets
//! to another rail's NIC.

use super::*;

/// A put that a NIC runs by itself when a destination event fires.
#[derive(Clone, Copy, Debug)]
pub struct ChainedPut {
    /// The local event whose firing starts the put.
    pub trigger: DestEvent,
    /// Rail of the trigger event, and of the put.
    pub rail: usize,
    /// Sets of `trigger` (on `rail`) that start it.
    pub count: u32,
    /// Local source.
    pub src: SymBuffer,
    /// Target rank.
    pub dst_rank: usize,
    /// Target buffer (same length as `src`).
    pub dst: SymBuffer,
    /// Event to set at the target.
    pub dst_event: Option<DestEvent>,
    /// Events this rank's NICs set once each when the put is started, each
    /// on its rail (at most [`crate::driver::MAX_FEEDS`], less one per
    /// other rail of a striped put): how a later chained put's join learns
    /// that this one's trigger fired.
    pub feeds: Feeds,
    /// The put's rails: `RailPolicy::Rail(rail)`, or striped over every
    /// rail above a threshold (the part on `rail` leads: its COPY sets a
    /// trigger of each other part on its sibling NIC, ABI 1.2 §5.1).
    pub policy: RailPolicy,
    /// Events this rank's NICs set once each when the put has completed
    /// (delivered and acknowledged; at most [`crate::driver::MAX_FEEDS`]):
    /// how a later chained put ordered after this one's completion learns
    /// of it. Not for a striped put.
    pub done: Feeds,
}

impl Endpoint {
    /// Arrange a [`ChainedPut`]: when its trigger has been set `count` times
    /// on `rail`, this rank's NIC runs the put with no host involvement (the
    /// event's COPY action injects the RUN_DMA, [ELAN-SEM §5.4]). The
    /// handle completes once the NIC has run the put and it was delivered;
    /// the chain block holding the command is reused after that.
    pub fn chain_put(&self, chain: &ChainedPut) -> Result<PutHandle<'_>, Error> {
        let ChainedPut {
            trigger,
            rail,
            count,
            src,
            dst_rank,
            dst,
            dst_event,
            feeds,
            policy,
            done,
        } = *chain;
        self.check_rank(dst_rank)?;
        self.check_rail(rail)?;
        for &(_, to) in feeds.as_slice().iter().chain(done.as_slice()) {
            self.check_rail(usize::from(to))?;
        }
        Self::check_same_len("the remote buffer", &src, &dst)?;
        let len = dma_len(src.len())?;
        self.check_in_arena(&src)?;
        self.check_in_arena(&dst)?;
        let layout = stripe::plan(
            policy,
            self.cfg.shape.rails,
            self.rank(),
            dst_rank,
            len as usize,
            0,
        );
        let dma = |part: &Part| -> Result<Command, Error> {
            Ok(Command::Dma(DmaCommand {
                kind: DmaKind::Put,
                len: dma_len(part.len)?,
                vp: dst_rank as u32,
                src_addr: src.va(part.offset),
                dst_addr: dst.va(part.offset),
                src_event: None,
                dst_event: dst_event.map(|d| d.0),
                wake: false,
            }))
        };
        // The lead's COPY: the put, its feeds and one set per other part;
        // a done put's source COPY: its completion and the done sets.
        let limit = self.driver.borrow().nic_limits().feeds as usize;
        let sets = feeds.as_slice().len() + layout.len().saturating_sub(1);
        if sets > limit || done.as_slice().len() > limit {
            return Err(Error::Config(format!(
                "a chained put makes {} sets when it fires and {} when done; these NICs' COPY takes {limit}",
                sets,
                done.as_slice().len()
            )));
        }
        if layout.len() > 1 && !done.as_slice().is_empty() {
            return Err(Error::Config(
                "a striped chained put completes part by part: it cannot set events when done"
                    .into(),
            ));
        }
        let Some(lead) = layout.iter().position(|p| p.rail == rail) else {
            return Err(Error::Config(format!(
                "a chained put triggered on rail {rail} has no part there ({policy:?})"
            )));
        };
        // Every other part waits for a completion event of its rail lent as
        // its trigger, which the lead's COPY sets on that sibling NIC.
        let mut lent: Vec<(usize, EventId)> = Vec::new();
        let taken = (|| -> Result<Vec<Post>, Error> {
            let mut driver = self.driver.borrow_mut();
            for p in layout.iter().filter(|p| p.rail != rail) {
                lent.push((p.rail, driver.take_completion_event(p.rail)?));
            }
            let mut lead_feeds: Vec<(EventId, u8)> = feeds.as_slice().to_vec();
            lead_feeds.extend(lent.iter().map(|&(r, ev)| (ev, r as u8)));
            let mut lent_iter = lent.iter();
            layout
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let what = if i == lead {
                        Tracked::Chained {
                            trigger: trigger.0,
                            count,
                            command: dma(p)?,
                            feeds: Feeds::new(&lead_feeds)?,
                            done,
                        }
                    } else {
                        let &(_, ev) = lent_iter
                            .next()
                            .ok_or(Error::EventsExhausted("completion"))?;
                        Tracked::Chained {
                            trigger: ev,
                            count: 1,
                            command: dma(p)?,
                            feeds: Feeds::default(),
                            done: Feeds::default(),
                        }
                    };
                    Ok(Post { rail: p.rail, what })
                })
                .collect()
        })();
        let give_back = |lent: &[(usize, EventId)]| {
            let mut driver = self.driver.borrow_mut();
            for &(r, ev) in lent {
                driver.release_completion_event(r, ev);
            }
        };
        let posts = match taken {
            Ok(posts) => posts,
            Err(e) => {
                give_back(&lent);
                return Err(e);
            }
        };
        let mut handle = match self.post(&posts, layout) {
            Ok(h) => h,
            Err(e) => {
                give_back(&lent);
                return Err(e);
            }
        };
        let mut lent_iter = lent.iter();
        for (i, c) in handle.posted.parts.iter_mut().enumerate() {
            if i != lead
                && let Some(&(_, ev)) = lent_iter.next()
            {
                c.lend_trigger(ev);
            }
        }
        Ok(handle)
    }

    /// Arrange a relay: once `trigger` has been set `count` times on rail
    /// `from`, this rank's NIC there sets `into` once on rail `to`: on its
    /// sibling NIC of that rail (ABI 1.2 §5.1), or on itself for `to` =
    /// `from` (a join's feed), with no host involvement. The handle
    /// completes once the relay has run (its chain block is reused then).
    pub fn relay(
        &self,
        trigger: DestEvent,
        count: u32,
        from: usize,
        into: DestEvent,
        to: usize,
    ) -> Result<PutHandle<'_>, Error> {
        self.check_rail(from)?;
        self.check_rail(to)?;
        if from == to && trigger == into {
            return Err(Error::Config(format!(
                "a relay of event {} to itself on rail {from} would fire it again",
                trigger.0.0
            )));
        }
        self.post_one(
            from,
            Tracked::Relay {
                trigger: trigger.0,
                count,
                event: into.0,
                to: to as u8,
            },
            0,
        )
    }
}
