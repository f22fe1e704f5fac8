//! Puts and gets: rail plans, the arrivals a destination event counts,
//! waiting for and arming them, and `notify`.

use super::*;

/// How many parts will set a destination event on each rail.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrivals {
    per_rail: [u32; MAX_RAILS],
}

impl Arrivals {
    /// No arrivals.
    pub fn new() -> Self {
        Self::default()
    }

    /// Count the parts of one transfer.
    pub fn add_parts(&mut self, parts: &[Part]) {
        for p in parts {
            if let Some(c) = self.per_rail.get_mut(p.rail) {
                *c += 1;
            }
        }
    }

    /// Add `n` arrivals on `rail`.
    pub fn add(&mut self, rail: usize, n: u32) {
        if let Some(c) = self.per_rail.get_mut(rail) {
            *c += n;
        }
    }

    /// Add another set of arrivals.
    pub fn merge(&mut self, other: &Arrivals) {
        for (mine, theirs) in self.per_rail.iter_mut().zip(other.per_rail) {
            *mine += theirs;
        }
    }

    /// Per-rail counts.
    pub fn per_rail(&self) -> &[u32; MAX_RAILS] {
        &self.per_rail
    }
}

/// A destination event armed for its arrivals and not yet waited on
/// ([`Endpoint::arm_arrivals`]).
#[derive(Debug)]
#[must_use = "an armed wait is only over once waited or tested complete"]
pub struct ArmedWait {
    waits: Vec<Completion>,
}

/// Options of one put or get.
#[derive(Clone, Copy, Debug, Default)]
pub struct TransferOptions {
    /// Rail policy (default: the communicator's).
    pub policy: Option<RailPolicy>,
    /// Event to set at the destination, once per rail part.
    pub dest_event: Option<DestEvent>,
    /// Wake the destination's host once the data has landed (for targets
    /// that poll the written memory itself).
    pub wake: bool,
}

/// `len` as a command's length field: a typed error above the NIC's
/// largest single transfer, never a silent truncation.
pub fn dma_len(len: usize) -> Result<u32, Error> {
    u32::try_from(len)
        .ok()
        .filter(|&l| l <= MAX_DMA_LEN)
        .ok_or(Error::TooLarge {
            len,
            max: MAX_DMA_LEN as usize,
        })
}

/// Which side of the transfer is remote.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Put,
    Get,
}

impl Endpoint {
    /// Put `src` (local) into `dst` on `dst_rank`, with the default policy.
    pub fn put(
        &self,
        src: &SymBuffer,
        dst_rank: usize,
        dst: &SymBuffer,
    ) -> Result<PutHandle<'_>, Error> {
        self.put_with(src, dst_rank, dst, TransferOptions::default())
    }

    /// Put with options (rail policy, destination event).
    pub fn put_with(
        &self,
        src: &SymBuffer,
        dst_rank: usize,
        dst: &SymBuffer,
        opts: TransferOptions,
    ) -> Result<PutHandle<'_>, Error> {
        self.transfer(Direction::Put, src, dst_rank, dst, opts)
    }

    /// Get `src` on `src_rank` into local `dst`, with the default policy.
    pub fn get(
        &self,
        src_rank: usize,
        src: &SymBuffer,
        dst: &SymBuffer,
    ) -> Result<PutHandle<'_>, Error> {
        self.get_with(src_rank, src, dst, TransferOptions::default())
    }

    /// Get with options. A destination event, if given, is set locally.
    pub fn get_with(
        &self,
        src_rank: usize,
        src: &SymBuffer,
        dst: &SymBuffer,
        opts: TransferOptions,
    ) -> Result<PutHandle<'_>, Error> {
        self.transfer(Direction::Get, dst, src_rank, src, opts)
    }

    /// The rail plan of a transfer from `src` to `dst` of `len` bytes under
    /// `policy` (what a target needs to build its [`Arrivals`]).
    pub fn plan(&self, policy: RailPolicy, src: usize, dst: usize, len: usize) -> Vec<Part> {
        stripe::plan(
            policy,
            self.cfg.shape.rails,
            src,
            dst,
            len,
            self.round_robin.get(),
        )
    }

    /// Arrivals at `dst` of `count` puts of `len` bytes each from `src`
    /// under `policy` (not meaningful for round-robin, whose rails depend on
    /// the sender's history: use [`PutHandle::parts`] there).
    pub fn expected_arrivals(
        &self,
        policy: RailPolicy,
        src: usize,
        dst: usize,
        len: usize,
        count: u32,
    ) -> Arrivals {
        let mut a = Arrivals::new();
        for p in stripe::plan(policy, self.cfg.shape.rails, src, dst, len, 0) {
            a.add(p.rail, count);
        }
        a
    }

    /// `local` is this rank's buffer; `remote` is `peer`'s. For a put data
    /// flows local -> remote, for a get remote -> local. Every part is
    /// posted, or none.
    fn transfer(
        &self,
        dir: Direction,
        local: &SymBuffer,
        peer: usize,
        remote: &SymBuffer,
        opts: TransferOptions,
    ) -> Result<PutHandle<'_>, Error> {
        self.check_rank(peer)?;
        Self::check_same_len("the remote buffer", local, remote)?;
        dma_len(local.len())?;
        self.check_in_arena(local)?;
        self.check_in_arena(remote)?;
        let policy = opts.policy.unwrap_or(self.cfg.policy);
        if let RailPolicy::Rail(r) = policy {
            self.check_rail(r)?;
        }
        let (src_rank, dst_rank) = match dir {
            Direction::Put => (self.rank(), peer),
            Direction::Get => (peer, self.rank()),
        };
        let rr = self.round_robin.get();
        let layout = stripe::plan(
            policy,
            self.cfg.shape.rails,
            src_rank,
            dst_rank,
            local.len(),
            rr,
        );
        let dest = opts.dest_event.map(|d| d.0);
        // Each part completes through an event the driver takes for it
        // (`with_completion`): the source event of a put, the destination
        // event of a get (a user destination event cannot also be set by
        // the same DMA, so gets complete through the handle only).
        let posts: Vec<Post> = layout
            .iter()
            .map(|p| -> Result<Post, Error> {
                let len = dma_len(p.len)?;
                let local_va = local.va(p.offset);
                let remote_va = remote.va(p.offset);
                let (kind, src_addr, dst_addr, dst_event, wake) = match dir {
                    Direction::Put => (DmaKind::Put, local_va, remote_va, dest, opts.wake),
                    Direction::Get => (DmaKind::Get, remote_va, local_va, None, false),
                };
                Ok(Post {
                    rail: p.rail,
                    what: Tracked::Now(Command::Dma(DmaCommand {
                        kind,
                        len,
                        vp: peer as u32,
                        src_addr,
                        dst_addr,
                        src_event: None,
                        dst_event,
                        wake,
                    })),
                })
            })
            .collect::<Result<_, _>>()?;
        let handle = self.post(&posts, layout)?;
        if policy == RailPolicy::RoundRobin {
            self.round_robin.set(rr.wrapping_add(1));
        }
        Ok(handle)
    }

    /// Block until `arrivals` parts have set `event` on each rail, then
    /// re-arm it for the next use. Early arrivals are never lost: the NIC
    /// keeps them in the event's count ([ELAN-SEM §13 rule 2]).
    pub fn wait_arrivals(&self, event: &DestEvent, arrivals: &Arrivals) -> Result<(), Error> {
        let armed = self.arm_arrivals(event, arrivals)?;
        self.wait_armed(&armed)
    }

    /// The first half of [`Endpoint::wait_arrivals`]: arm `event` for
    /// `arrivals` on each rail. Complete it with [`Endpoint::wait_armed`]
    /// or [`Endpoint::test_armed`], exactly once.
    pub fn arm_arrivals(&self, event: &DestEvent, arrivals: &Arrivals) -> Result<ArmedWait, Error> {
        let mut waits = Vec::new();
        let mut driver = self.driver.borrow_mut();
        for (rail, &n) in arrivals.per_rail().iter().enumerate() {
            if n == 0 {
                continue;
            }
            self.check_rail(rail)?;
            let generation = driver.push_arm_write(rail, event.0, n)?;
            driver.ring(rail)?;
            waits.push(Completion::of_dest_event(rail, event.0, generation));
        }
        Ok(ArmedWait { waits })
    }

    /// Block until an armed wait's arrivals are all in.
    pub fn wait_armed(&self, armed: &ArmedWait) -> Result<(), Error> {
        self.driver.borrow().wait_completions(&armed.waits)
    }

    /// Are an armed wait's arrivals all in? `None` while some are missing
    /// (a modeled environment lets a poll's worth of time pass).
    pub fn test_armed(&self, armed: &ArmedWait) -> Option<Result<(), Error>> {
        self.driver.borrow().test_completions(&armed.waits)
    }

    /// Tell `dst_rank` something happened: a zero-length put on rail 0 that
    /// sets `event` there once (a flag write, in RDMA terms).
    pub fn notify(
        &self,
        dst_rank: usize,
        event: &DestEvent,
        scratch: &SymBuffer,
    ) -> Result<(), Error> {
        let empty = scratch.slice(0, 0)?;
        self.put_with(
            &empty,
            dst_rank,
            &empty,
            TransferOptions {
                policy: Some(RailPolicy::Rail(0)),
                dest_event: Some(*event),
                wake: false,
            },
        )?
        .wait()
    }

    /// A put to a raw virtual address in `dst_rank`'s context, on one rail,
    /// with no host-side bounds check of the target: the NIC's
    /// receiver-side protection is the only check. For testing that
    /// protection (and for FPGA bring-up); use [`Endpoint::put`] otherwise.
    pub fn put_unchecked(
        &self,
        src: &SymBuffer,
        dst_rank: usize,
        dst_va: u64,
        rail: usize,
    ) -> Result<PutHandle<'_>, Error> {
        self.check_rank(dst_rank)?;
        self.check_rail(rail)?;
        let len = dma_len(src.len())?;
        self.check_in_arena(src)?;
        let src_addr = src.va(0);
        let command = Command::Dma(DmaCommand {
            kind: DmaKind::Put,
            len,
            vp: dst_rank as u32,
            src_addr,
            dst_addr: dst_va,
            src_event: None,
            dst_event: None,
            wake: false,
        });
        self.post_one(rail, Tracked::Now(command), src.len())
    }
}
