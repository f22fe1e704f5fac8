//! What a compiled set asks of each NIC: per rank and rail, the chained
//! puts armed, what fires them and what they set (`railcoll schedule show
//! --nic`).

use super::*;

/// What one NIC of a rank holds of the rank's program: the command blocks
/// the host writes ahead for it (each chained put's `RUN_DMA`), the events
/// it arms on it and what each does when it fires, and the puts the host
/// still posts to it. Read off a (compiled) schedule for
/// `railcoll schedule show ... --offload`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RailProgram {
    /// The rail (the NIC).
    pub rail: u8,
    /// Blocks written ahead: (arming step, the chained put as this NIC
    /// holds it: a striped one's part here carries none of its feeds, its
    /// lead carries them all, and the rails of the other parts whose lent
    /// trigger the lead's COPY sets).
    pub blocks: Vec<(u32, Op, Vec<u8>)>,
    /// Events armed: (arming step, counter, sets it waits for, what it
    /// does when it fires).
    pub events: Vec<(u32, Counter, u32, Fires)>,
    /// Puts the host posts on this rail (each with a completion event of
    /// the driver's), striped ones counted on every rail they may use.
    pub host_puts: usize,
}

/// What an armed event does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fires {
    /// COPY of block `i` of its NIC: the NIC starts a put.
    Put(usize),
    /// COPY of block `i` of its NIC, a part of a striped chained put: the
    /// event is a completion event the driver lends, set once by the
    /// leading part's COPY on rail `lead` (a sibling set).
    Part {
        /// The block.
        block: usize,
        /// The leading part's rail.
        lead: u8,
    },
    /// COPY of a `SET_EVENT` of `into` on rail `to` (a relay: to a
    /// sibling, or to this NIC's join).
    Relay {
        /// The counter set.
        into: Counter,
        /// On this rail's NIC.
        to: u8,
    },
    /// WRITE of the completion word the host waits on.
    Host,
}

/// A rank's program, NIC by NIC, and the chain blocks it holds at once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicProgram {
    /// The rank.
    pub rank: Rank,
    /// One entry per rail of the shape.
    pub rails: Vec<RailProgram>,
    /// Chain blocks held at once (the executor's bookkeeping).
    pub peak: super::budget::ChainPeak,
}

/// `rank`'s program in `set`, NIC by NIC (`None` for a rank not in the set).
pub fn program(set: &ScheduleSet, rank: usize) -> Option<NicProgram> {
    let schedule = set.rank(rank)?;
    let mut rails: Vec<RailProgram> = (0..set.params.shape.rails)
        .map(|r| RailProgram {
            rail: r as u8,
            blocks: Vec::new(),
            events: Vec::new(),
            host_puts: 0,
        })
        .collect();
    for (i, step) in schedule.steps.iter().enumerate() {
        let i = i as u32;
        match &step.op {
            op @ Op::ChainPut {
                trigger,
                count,
                rail,
                ..
            } => {
                let parts = super::budget::chain_parts(&set.params, rank, op);
                let lent: Vec<u8> = parts
                    .iter()
                    .filter(|&&x| x != usize::from(*rail))
                    .map(|&x| x as u8)
                    .collect();
                for &part in &parts {
                    let Some(r) = rails.get_mut(part) else {
                        continue;
                    };
                    let lead = part == usize::from(*rail);
                    let mut held = op.clone();
                    if let (false, Op::ChainPut { feeds, .. }) = (lead, &mut held) {
                        feeds.clear();
                    }
                    r.blocks
                        .push((i, held, if lead { lent.clone() } else { Vec::new() }));
                    let block = r.blocks.len() - 1;
                    let fires = if lead {
                        Fires::Put(block)
                    } else {
                        Fires::Part { block, lead: *rail }
                    };
                    r.events.push((i, *trigger, *count, fires));
                }
            }
            Op::Wait { counter, arrivals } => {
                for (r, &n) in rails.iter_mut().zip(arrivals.iter()) {
                    if n > 0 {
                        r.events.push((i, *counter, n, Fires::Host));
                    }
                }
            }
            Op::Relay {
                counter,
                count,
                from,
                to,
                into,
            } => {
                if let Some(r) = rails.get_mut(usize::from(*from)) {
                    let fires = Fires::Relay {
                        into: *into,
                        to: *to,
                    };
                    r.events.push((i, *counter, *count, fires));
                }
            }
            Op::Put { lane, .. } => match lane {
                Lane::Rail(x) => {
                    if let Some(r) = rails.get_mut(usize::from(*x)) {
                        r.host_puts += 1;
                    }
                }
                Lane::Stripe => rails.iter_mut().for_each(|r| r.host_puts += 1),
            },
            _ => {}
        }
    }
    Some(NicProgram {
        rank: rank as Rank,
        rails,
        peak: super::budget::chain_peak(schedule, &set.params),
    })
}

impl fmt::Display for NicProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "NIC program of rank {} (written ahead and armed by the host; the NICs run the rest):",
            self.rank
        )?;
        for r in &self.rails {
            writeln!(f, "rail {}:", r.rail)?;
            for (b, (step, op, lent)) in r.blocks.iter().enumerate() {
                if let Op::ChainPut {
                    to,
                    src,
                    dst,
                    signal,
                    feeds,
                    done,
                    ..
                } = op
                {
                    let signal = super::fmt_signal(*signal);
                    // "c3 sibling rail 1": a set's event and the NIC it is on.
                    let set = |feed: &Feed| {
                        let whose = if feed.rail == r.rail { "" } else { " sibling" };
                        format!("c{}{whose} rail {}", feed.into, feed.rail)
                    };
                    write!(
                        f,
                        "  block {b} (written at step {step}): RUN_DMA put {src} -> rank {to} {dst}{signal}"
                    )?;
                    for feed in feeds {
                        write!(f, "; SET_EVENT {}", set(feed))?;
                    }
                    for x in lent {
                        write!(f, "; SET_EVENT lent event, sibling rail {x} (its part)")?;
                    }
                    if !done.is_empty() {
                        write!(
                            f,
                            "; completes through a lent event whose COPY sets the completion word's event"
                        )?;
                        for feed in done {
                            write!(f, " and {}", set(feed))?;
                        }
                    }
                    writeln!(f)?;
                }
            }
            for (step, counter, sets, then) in &r.events {
                match then {
                    Fires::Relay { into, to } if *to == r.rail => writeln!(
                        f,
                        "  event c{counter}: after {sets} set(s) -> COPY SET_EVENT c{into} (armed at step {step}: feeds a join)"
                    )?,
                    Fires::Relay { into, to } => writeln!(
                        f,
                        "  event c{counter}: after {sets} set(s) -> COPY SET_EVENT c{into} on rail {to} (armed at step {step}: a relay)"
                    )?,
                    Fires::Put(b) => writeln!(
                        f,
                        "  event c{counter}: after {sets} set(s) -> COPY block {b} (armed at step {step}: the NIC starts the put)"
                    )?,
                    Fires::Part { block, lead } => writeln!(
                        f,
                        "  lent event: after 1 set (rail {lead}'s c{counter} firing) -> COPY block {block} (armed at step {step}: this rail's part of a striped put)"
                    )?,
                    Fires::Host => writeln!(
                        f,
                        "  event c{counter}: after {sets} set(s) -> WRITE the completion word (armed at step {step}: the host waits)"
                    )?,
                }
            }
            writeln!(f, "  host posts {} put(s) on this rail", r.host_puts)?;
        }
        writeln!(
            f,
            "chain blocks: at most {} held at once (from step {}); per rail {:?}",
            self.peak.total,
            self.peak.step,
            &self.peak.per_rail[..self.rails.len().min(MAX_RAILS)]
        )
    }
}
