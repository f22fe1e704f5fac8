//! Posting tracked commands: what a post is (`Tracked`, `Post`, a chained
//! put's `Feeds`), the completion event each carries, and the chain slots
//! chained puts are read from.

use super::*;

/// What a tracked post runs (see [`Driver::post_tracked`]).
#[derive(Clone, Copy, Debug)]
pub enum Tracked {
    /// A command from the ring. Its completion field (see
    /// [`with_completion`]) is set to the post's completion event.
    Now(Command),
    /// A command the NIC injects by itself once `trigger` has collected
    /// `count` sets on the post's rail (the event's COPY action); its
    /// completion field is set as for `Now`. The same COPY then sets each
    /// of `feeds` once. With `done` sets, the command completes through a
    /// lent event instead, whose COPY sets the post's completion event and
    /// then each of `done` once: sets made when the put has completed.
    Chained {
        /// The local event that starts it.
        trigger: EventId,
        /// Sets needed.
        count: u32,
        /// The command.
        command: Command,
        /// Events set once after the command is injected, each on its
        /// rail (this NIC's or a sibling's, ABI 1.2 §5.1).
        feeds: Feeds,
        /// Events set once after the command has completed.
        done: Feeds,
    },
    /// Once `trigger` has collected `count` sets on the post's rail, the
    /// NIC sets `event` once on its sibling of rail `to` (ABI 1.2 §5.1),
    /// then the completion event: the event's COPY injects both blocks.
    Relay {
        /// The local event whose sets are relayed.
        trigger: EventId,
        /// Sets needed.
        count: u32,
        /// The event set on the sibling.
        event: EventId,
        /// The sibling's rail.
        to: u8,
    },
    /// Nothing: the completion fires when the NIC reaches it in the ring.
    Marker,
}

/// Up to [`MAX_FEEDS`] (event, rail) pairs a [`Tracked::Chained`] sets
/// when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Feeds {
    list: [(EventId, u8); MAX_FEEDS],
    len: u8,
}

impl Default for Feeds {
    fn default() -> Self {
        Self {
            list: [(EventId(0), 0); MAX_FEEDS],
            len: 0,
        }
    }
}

impl Feeds {
    /// `pairs`, or an error if there are more than [`MAX_FEEDS`].
    pub fn new(pairs: &[(EventId, u8)]) -> Result<Self, Error> {
        let mut f = Self::default();
        for &p in pairs {
            let slot = f.list.get_mut(usize::from(f.len)).ok_or_else(|| {
                Error::Config(format!(
                    "a chained put feeds {} events, a chain slot holds {MAX_FEEDS}",
                    pairs.len()
                ))
            })?;
            *slot = p;
            f.len += 1;
        }
        Ok(f)
    }

    /// The pairs.
    pub fn as_slice(&self) -> &[(EventId, u8)] {
        &self.list[..usize::from(self.len)]
    }
}

impl Tracked {
    /// Sets that fire the completion event.
    pub(super) fn count(&self) -> u32 {
        match self {
            Tracked::Now(_) | Tracked::Chained { .. } | Tracked::Relay { .. } => 1,
            Tracked::Marker => 0,
        }
    }
}

/// `cmd` completing through local event `ev`: the source event of a put or
/// queued DMA and of a switch broadcast (fired once delivered and
/// acknowledged), the destination event of a get (fired once the data has
/// landed here), the event of a switch barrier (fired on release). Any
/// other command has no completion the NIC reports: a typed error.
pub fn with_completion(cmd: Command, ev: EventId) -> Result<Command, Error> {
    Ok(match cmd {
        Command::Dma(mut d) => {
            match d.kind {
                DmaKind::Get => d.dst_event = Some(ev),
                DmaKind::Put | DmaKind::Queued(_) => d.src_event = Some(ev),
            }
            Command::Dma(d)
        }
        Command::Bcast {
            len,
            low_node,
            high_node,
            src_addr,
            dst_addr,
            dst_event,
            ..
        } => Command::Bcast {
            len,
            low_node,
            high_node,
            src_addr,
            dst_addr,
            src_event: Some(ev),
            dst_event,
        },
        Command::HwBarrier {
            low_node,
            high_node,
            seq,
            tag,
            ..
        } => Command::HwBarrier {
            low_node,
            high_node,
            seq,
            tag,
            event: Some(ev),
        },
        other => {
            return Err(Error::Config(format!(
                "{other:?} has no completion event to track"
            )));
        }
    })
}

/// One post of [`Driver::post_tracked`].
#[derive(Clone, Copy, Debug)]
pub struct Post {
    /// Rail.
    pub rail: usize,
    /// What runs.
    pub what: Tracked,
}

impl Driver {
    /// Post commands that each complete through a completion event of
    /// their own: the one way the host starts an operation it will wait
    /// for. All or nothing: either every post is in its ring and rung, or
    /// none is and every event and chain block taken is released (and the
    /// first error is returned).
    ///
    /// Per post, the ring gets `ARM_EVENT(ev, 1, WRITE(word, generation))`
    /// followed by the post's command ([`Tracked::Now`]: completing through
    /// `ev`, [`with_completion`]) or by the `ARM_EVENT` of its trigger whose COPY
    /// action injects the command stored in a chain block
    /// ([`Tracked::Chained`]); a [`Tracked::Marker`] arms `ev` with a
    /// count of 0, so it fires when the NIC reaches it (a fence). Rings
    /// are rung in the order of the posts.
    pub fn post_tracked(&mut self, posts: &[Post], cookie: u32) -> Result<Vec<Completion>, Error> {
        let mut taken: Vec<Completion> = Vec::with_capacity(posts.len());
        let result = self.post_tracked_inner(posts, cookie, &mut taken);
        if result.is_err() {
            for c in &taken {
                self.release(c);
            }
            taken.clear();
        }
        result.map(|()| taken)
    }

    pub(super) fn post_tracked_inner(
        &mut self,
        posts: &[Post],
        cookie: u32,
        taken: &mut Vec<Completion>,
    ) -> Result<(), Error> {
        // 1. Resources: an event per post, a chain block per chained post.
        for post in posts {
            let event = self.take_completion_event(post.rail)?;
            let mut c = Completion {
                rail: post.rail,
                event,
                generation: 0,
                chain_block: None,
                trigger: None,
                done_block: None,
            };
            if let Tracked::Chained { .. } | Tracked::Relay { .. } = post.what {
                match self.take_chain_block() {
                    Ok(b) => c.chain_block = Some(b),
                    Err(e) => {
                        self.release(&c);
                        return Err(e);
                    }
                }
            }
            // Sets made on completion: a lent source event and the chain
            // block its COPY reads.
            if let Tracked::Chained { done, .. } = &post.what
                && !done.as_slice().is_empty()
            {
                let lent = self.take_completion_event(post.rail).and_then(|ev| {
                    c.trigger = Some(ev);
                    self.take_chain_block()
                });
                match lent {
                    Ok(b) => c.done_block = Some(b),
                    Err(e) => {
                        self.release(&c);
                        return Err(e);
                    }
                }
            }
            taken.push(c);
        }
        // 2. Room in every ring touched (two blocks per post) and its
        // doorbell, before anything is written.
        let mut per_rail = [0u64; MAX_RAILS];
        for post in posts {
            let rails = self.ports.len();
            let slot = per_rail.get_mut(post.rail).ok_or(Error::NoSuchRail {
                rail: post.rail,
                rails,
            })?;
            *slot += match &post.what {
                Tracked::Chained { done, .. } if !done.as_slice().is_empty() => 3,
                _ => 2,
            };
        }
        for (rail, &n) in per_rail.iter().enumerate() {
            if n > 0 {
                self.wait_space(rail, n)?;
                self.device.registers(rail)?;
            }
        }
        // 3. Write; a failure rolls the tails back, so the NIC never sees a
        // partial post.
        let mut tails = [0u64; MAX_RAILS];
        for (saved, port) in tails.iter_mut().zip(&self.ports) {
            *saved = port.tail;
        }
        if let Err(e) = self.write_posts(posts, cookie, taken) {
            for (port, tail) in self.ports.iter_mut().zip(tails) {
                port.tail = tail;
            }
            return Err(e);
        }
        // 4. Publish (every doorbell was checked above).
        for post in posts {
            self.ring(post.rail)?;
        }
        Ok(())
    }

    pub(super) fn write_posts(
        &mut self,
        posts: &[Post],
        cookie: u32,
        taken: &mut [Completion],
    ) -> Result<(), Error> {
        for (post, c) in posts.iter().zip(taken.iter_mut()) {
            let rail = post.rail;
            let (arm, generation) = self.arm_write_command(rail, c.event, post.what.count())?;
            c.generation = generation;
            // A block to write between the arm and the post's own (the
            // ARM_EVENT of a lent source event).
            let mut before: Option<CommandBlock> = None;
            // One set of `event` on the NIC of rail `to`: this one, or a
            // sibling (ABI 1.2 §5.1).
            let set = |event, to: u8| {
                Command::SetEvent {
                    event,
                    count: 1,
                    rail: (usize::from(to) != rail).then_some(to),
                }
                .emit(cookie)
            };
            let second = match (&post.what, c.chain_block) {
                (Tracked::Now(cmd), _) => Some(with_completion(*cmd, c.event)?.emit(cookie)),
                (
                    Tracked::Chained {
                        trigger,
                        count,
                        command,
                        feeds,
                        done,
                    },
                    Some(block),
                ) => {
                    // With `done` sets the command completes through the
                    // lent event, whose COPY (armed first) sets the
                    // completion event, then `done`.
                    let source = match (c.trigger, c.done_block) {
                        (Some(lent), Some(done_block)) if !done.as_slice().is_empty() => {
                            let mut on_done = vec![set(c.event, rail as u8)];
                            on_done.extend(done.as_slice().iter().map(|&(ev, to)| set(ev, to)));
                            before = Some(self.fill_chain_slot(done_block, &on_done, lent, 1)?);
                            lent
                        }
                        _ => c.event,
                    };
                    let mut blocks = vec![with_completion(*command, source)?.emit(cookie)];
                    blocks.extend(feeds.as_slice().iter().map(|&(ev, to)| set(ev, to)));
                    Some(self.fill_chain_slot(block, &blocks, *trigger, *count)?)
                }
                (
                    Tracked::Relay {
                        trigger,
                        count,
                        event,
                        to,
                    },
                    Some(block),
                ) => {
                    let blocks = [set(*event, *to), set(c.event, rail as u8)];
                    Some(self.fill_chain_slot(block, &blocks, *trigger, *count)?)
                }
                (Tracked::Chained { .. } | Tracked::Relay { .. }, None) => {
                    return Err(Error::EventsExhausted("chain block"));
                }
                (Tracked::Marker, _) => None,
            };
            let tail = self.port(rail)?.tail;
            self.write_block(rail, tail, &arm.emit(0))?;
            let mut next = tail.wrapping_add(1);
            if let Some(block) = before {
                self.write_block(rail, next, &block)?;
                next = next.wrapping_add(1);
            }
            if let Some(block) = second {
                self.write_block(rail, next, &block)?;
                next = next.wrapping_add(1);
            }
            self.port(rail)?.tail = next;
        }
        Ok(())
    }

    /// The ARM_EVENT that writes a fresh generation into the event's
    /// completion word after `count` sets, and that generation.
    pub(super) fn arm_write_command(
        &mut self,
        rail: usize,
        ev: EventId,
        count: u32,
    ) -> Result<(Command, u64), Error> {
        let index = rail * self.events_per_ctx as usize + ev.0 as usize;
        let gen_slot = self
            .generations
            .get_mut(index)
            .ok_or(Error::EventsExhausted("any"))?;
        *gen_slot = (*gen_slot % MAX_WRITE_VALUE) + 1;
        let generation = *gen_slot;
        let addr = CONTROL_VA + self.word_offset(rail, ev) as u64;
        let action = EventAction {
            kind: ActionKind::Write {
                addr,
                value: generation,
            },
            wake: true,
        };
        Ok((
            Command::ArmEvent {
                event: ev,
                count,
                action,
            },
            generation,
        ))
    }

    /// Queue an ARM_EVENT that writes a fresh generation into the event's
    /// completion word after `count` sets; returns the generation to wait
    /// for. For destination events, which the driver does not hand out
    /// per operation; completion events go through
    /// [`Driver::post_tracked`].
    pub fn push_arm_write(&mut self, rail: usize, ev: EventId, count: u32) -> Result<u64, Error> {
        let (cmd, generation) = self.arm_write_command(rail, ev, count)?;
        self.push(rail, &cmd, 0)?;
        Ok(generation)
    }

    /// Take a chain block (a command block in the control region that an
    /// event's COPY action injects).
    pub(super) fn take_chain_block(&mut self) -> Result<usize, Error> {
        match self.free_chain_blocks.pop() {
            Some(i) => Ok(i),
            None if self.next_chain_block < CHAIN_BLOCKS => {
                self.next_chain_block += 1;
                Ok(self.next_chain_block - 1)
            }
            None => Err(Error::EventsExhausted("chain block")),
        }
    }

    /// Write `blocks` into chain slot `index` and return the `ARM_EVENT` of
    /// `trigger` (`count` sets) whose COPY injects them all.
    pub(super) fn fill_chain_slot(
        &mut self,
        index: usize,
        blocks: &[CommandBlock],
        trigger: EventId,
        count: u32,
    ) -> Result<CommandBlock, Error> {
        if blocks.len() * COMMAND_BLOCK_SIZE > CHAIN_SLOT {
            return Err(Error::Config(format!(
                "{} command blocks do not fit a chain slot",
                blocks.len()
            )));
        }
        let first = self.chain_block_offset(index);
        for (i, block) in blocks.iter().enumerate() {
            self.control
                .mem
                .write(first + i * COMMAND_BLOCK_SIZE, &block.to_bytes())
                .map_err(|e| out_of_range("the control region", e))?;
        }
        let copy = Command::ArmEvent {
            event: trigger,
            count,
            action: EventAction {
                kind: ActionKind::Copy {
                    src: CONTROL_VA + first as u64,
                    blocks: blocks.len() as u8,
                },
                wake: false,
            },
        };
        Ok(copy.emit(0))
    }

    pub(super) fn chain_block_offset(&self, index: usize) -> usize {
        self.ports.len() * self.events_per_ctx as usize * 8 + index * CHAIN_SLOT
    }
}
