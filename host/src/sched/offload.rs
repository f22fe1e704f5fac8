//! The offload compiler, first form: from a schedule set, a set in which
//! the NIC starts by itself every put on one rail that only waits for one
//! counter. "Wait for `c`, then put" becomes "chain when `c`:
//! the NIC puts" (the event's COPY action injects the put,
//! [ELAN-SEM §5.4]), armed by the host ahead of the data, so the put
//! leaves when its data lands instead of when the host next looks.
//!
//! Contract: the compiled set writes the same bytes to the same places as
//! the set it comes from (the verifier proves both, and the tests run both
//! byte-exact); it never needs more chain blocks than the budget offers.
//! A put is chained only if
//! - the step before it is a wait on one counter `c`, and the put goes out
//!   on one rail `r`: the chained put waits for `c`'s sets on `r`, and
//!   each other rail's NIC that receives sets of `c` *relays* them
//!   ([`Op::Relay`]: once its share has come, it sets `c` once on `r`'s
//!   NIC, a `SET_EVENT` to a sibling, ABI 1.2 §5.1), so the count on `r`
//!   is its own sets plus one per relaying rail (a cross-rail trigger);
//!   relays need NICs with the sibling path (`Budget::peer_fifo` > 0);
//! - every block it reads arrives with `c`, is already local, or arrives
//!   with a counter the host still waits for before this point (so it is
//!   there when the host arms the chain);
//! - a chain block is left in the rank's share of the budget (its chain
//!   blocks, and an equal part of each NIC's chain queue: the node's ranks
//!   share it). The puts after that stay with the host.
//!
//! Host steps that touch a block arriving with a chained counter, or that
//! overwrite what a chained put reads, wait for that chained put's
//! completion first (`after`), which implies its trigger fired; a step
//! that speaks to node peers or the network (a flag, a shm copy, a
//! barrier) waits for every chained put before it. What stays
//! with the host: shared-memory phases and copies, striped puts, puts
//! whose data comes with several counters (combined triggers: the
//! firmware has them, the compiler not yet), and the final waits.

use std::collections::{HashMap, HashSet};

use super::budget::{Budget, chain_peak};
use super::*;

/// A compiled set and what was moved to the NICs.
#[derive(Clone, Debug)]
pub struct Offloaded {
    /// The set: the same collective, chained puts where they could be.
    pub set: ScheduleSet,
    /// What the NICs start by themselves and what the host still posts.
    pub moved: Moved,
}

/// What a set leaves to the NICs and to the host, over all ranks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Puts the NICs start by themselves (chained).
    pub chained: usize,
    /// Puts the host still posts.
    pub host_puts: usize,
    /// Everything the host still posts to another rank: its puts, barrier
    /// words, queued messages and hardware broadcasts.
    pub host_posts: usize,
}

/// Count what `set` leaves to the NICs and to the host.
pub fn moved(set: &ScheduleSet) -> Moved {
    let mut m = Moved::default();
    for step in set.ranks.iter().flat_map(|s| &s.steps) {
        match step.op {
            Op::ChainPut { .. } => m.chained += 1,
            Op::Put { .. } => {
                m.host_puts += 1;
                m.host_posts += 1;
            }
            Op::WordPut { .. } | Op::QueueSend { .. } | Op::HwBcast { .. } => m.host_posts += 1,
            _ => {}
        }
    }
    m
}

/// The counters that deliver each block of `rank`'s buffers (every put or
/// chained put of any rank addressed to it, by its signal).
fn provenance(set: &ScheduleSet, rank: usize) -> HashMap<(Buf, u32), Vec<Counter>> {
    let mut by_block: HashMap<(Buf, u32), Vec<Counter>> = HashMap::new();
    for s in &set.ranks {
        for step in &s.steps {
            let (to, dst, signal) = match step.op {
                Op::Put {
                    to, dst, signal, ..
                }
                | Op::ChainPut {
                    to, dst, signal, ..
                } => (to, dst, signal),
                _ => continue,
            };
            if to as usize != rank {
                continue;
            }
            for b in dst.block..dst.end() {
                let list = by_block.entry((dst.buf, b)).or_default();
                if let Some(c) = signal {
                    list.push(c);
                }
            }
        }
    }
    by_block
}

/// The regions a step reads and writes on this rank.
fn touches(op: &Op) -> Vec<(Region, bool)> {
    match op {
        Op::Put { src, .. } | Op::ChainPut { src, .. } | Op::HwBcast { src, .. } => {
            vec![(*src, false)]
        }
        Op::Copy { src, dst } => vec![(*src, false), (*dst, true)],
        Op::PeerCopy { dir, local, .. } => vec![(*local, *dir == PeerDir::Pull)],
        Op::NodeBcast { region, .. } => vec![(*region, true)],
        _ => Vec::new(),
    }
}

/// Compile `set` (see the module's contract), within `budget`'s chain
/// blocks per rank.
pub fn compile(set: &ScheduleSet, budget: &Budget) -> Result<Offloaded, Error> {
    let p = &set.params;
    // Each rank's share: its chain blocks, and an equal part of each NIC's
    // chain queue, which the node's ranks share.
    let per_rank = budget
        .chain_blocks
        .min(budget.chain_queue / p.shape.ranks_per_node().max(1) as u32);
    let mut out = set.clone();
    for (me, sched) in set.ranks.iter().enumerate() {
        let from = provenance(set, me);
        let steps = &sched.steps;
        let mut new: Vec<Step> = Vec::with_capacity(steps.len());
        // Old step index -> new step index.
        let mut map: Vec<u32> = Vec::with_capacity(steps.len());
        // Counters the host still waits for, so far.
        let mut waited: HashSet<Counter> = HashSet::new();
        // Counter consumed by a chained put -> that chained put's step.
        let mut by_chain: HashMap<Counter, u32> = HashMap::new();
        // Blocks a chained put reads -> that chained put's step.
        let mut read_by_chain: Vec<(Region, u32)> = Vec::new();
        let mut chains = 0u32;
        // Relays into each rail's NIC, against this rank's share of its
        // sibling FIFO (the node's ranks share it; every relay is held to
        // the end of the run).
        let mut relays_into = [0u32; MAX_RAILS];
        let fifo_share = budget.peer_fifo / p.shape.ranks_per_node().max(1) as u32;
        let remap = |after: &[u32], map: &[u32]| -> Vec<u32> {
            after
                .iter()
                .filter_map(|&a| map.get(a as usize).copied())
                .collect()
        };
        let mut i = 0;
        while i < steps.len() {
            let step = &steps[i];
            if let (Op::Wait { counter, arrivals }, Some(next)) = (&step.op, steps.get(i + 1))
                && let Op::Put {
                    to,
                    src,
                    dst,
                    lane,
                    signal,
                } = next.op
                && arrivals.iter().any(|&n| n > 0)
            {
                let bytes = src.count as usize * p.block_bytes;
                let parts = put_parts(
                    lane,
                    p.shape.rails,
                    p.stripe_threshold,
                    me,
                    to as usize,
                    bytes,
                );
                // The put's one rail; sets arriving on the others are
                // relayed to it by their NICs (cross-rail triggers).
                let rail = match parts[..] {
                    [one] => Some(one.rail as u8),
                    _ => None,
                };
                let relayed: Vec<u8> = arrivals
                    .iter()
                    .enumerate()
                    .filter(|&(x, &n)| n > 0 && Some(x as u8) != rail)
                    .map(|(x, _)| x as u8)
                    .collect();
                let cost = 1 + 2 * relayed.len() as u32;
                let relays_allowed = relayed.is_empty()
                    || rail.is_some_and(|r| {
                        relays_into[usize::from(r)] + relayed.len() as u32 <= fifo_share
                    });
                let data_ready = (src.block..src.end()).all(|b| {
                    from.get(&(src.buf, b))
                        .is_none_or(|cs| cs.iter().all(|c| c == counter || waited.contains(c)))
                });
                if let Some(rail) = rail
                    && data_ready
                    && relays_allowed
                    && chains + cost <= per_rank
                {
                    let mut after = remap(&step.after, &map);
                    after.extend(remap(&next.after, &map));
                    relays_into[usize::from(rail)] += relayed.len() as u32;
                    for &x in &relayed {
                        new.push(Step {
                            op: Op::Relay {
                                counter: *counter,
                                count: 0,
                                from: x,
                                to: rail,
                            },
                            after: Vec::new(),
                        });
                    }
                    let at = new.len() as u32;
                    new.push(Step {
                        op: Op::ChainPut {
                            trigger: *counter,
                            count: 0,
                            rail,
                            to,
                            src,
                            dst,
                            signal,
                        },
                        after,
                    });
                    map.push(at);
                    map.push(at);
                    by_chain.insert(*counter, at);
                    read_by_chain.push((src, at));
                    chains += cost;
                    i += 2;
                    continue;
                }
            }
            // A host step: it first waits for every chained put whose
            // trigger delivers a block it touches, or that reads a block
            // it overwrites.
            let mut after = remap(&step.after, &map);
            for (region, write) in touches(&step.op) {
                for b in region.block..region.end() {
                    for c in from.get(&(region.buf, b)).into_iter().flatten() {
                        if let Some(&chain) = by_chain.get(c) {
                            after.push(chain);
                        }
                    }
                    if write {
                        for (read, chain) in &read_by_chain {
                            if read.buf == region.buf && (read.block..read.end()).contains(&b) {
                                after.push(*chain);
                            }
                        }
                    }
                }
            }
            // A step that tells node peers or the network something (a
            // flag, a shm copy, a barrier) may say "my data is here":
            // every chained put so far must have fired.
            let speaks = !matches!(
                step.op,
                Op::Put { .. } | Op::Wait { .. } | Op::Copy { .. } | Op::ChainPut { .. }
            );
            if speaks {
                after.extend(read_by_chain.iter().map(|&(_, chain)| chain));
            }
            after.sort_unstable();
            after.dedup();
            if let Op::Wait { counter, .. } = step.op {
                waited.insert(counter);
            }
            map.push(new.len() as u32);
            new.push(Step {
                op: step.op.clone(),
                after,
            });
            i += 1;
        }
        out.ranks[me].steps = new;
    }
    let set = out.seal()?;
    // The conversion counted every chained put against the rank's share,
    // so the executor's peak is within it.
    debug_assert!(set.ranks.iter().all(|s| chain_peak(s).total <= per_rank));
    Ok(Offloaded {
        moved: moved(&set),
        set,
    })
}

/// What one NIC of a rank holds of the rank's program: the command blocks
/// the host writes ahead for it (each chained put's `RUN_DMA`), the events
/// it arms on it and what each does when it fires, and the puts the host
/// still posts to it. Read off a (compiled) schedule for
/// `railcoll schedule show ... --offload`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RailProgram {
    /// The rail (the NIC).
    pub rail: u8,
    /// Blocks written ahead: (arming step, the chained put).
    pub blocks: Vec<(u32, Op)>,
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
    /// COPY of a `SET_EVENT` of the same counter on the sibling of this
    /// rail (a relay).
    Relay(u8),
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
                if let Some(r) = rails.get_mut(usize::from(*rail)) {
                    r.blocks.push((i, op.clone()));
                    let block = r.blocks.len() - 1;
                    r.events.push((i, *trigger, *count, Fires::Put(block)));
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
            } => {
                if let Some(r) = rails.get_mut(usize::from(*from)) {
                    r.events.push((i, *counter, *count, Fires::Relay(*to)));
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
        peak: super::budget::chain_peak(schedule),
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
            for (b, (step, op)) in r.blocks.iter().enumerate() {
                if let Op::ChainPut {
                    to,
                    src,
                    dst,
                    signal,
                    ..
                } = op
                {
                    let signal = signal.map_or(String::new(), |c| format!(", signal c{c}"));
                    writeln!(
                        f,
                        "  block {b} (written at step {step}): RUN_DMA put {src} -> rank {to} {dst}{signal}"
                    )?;
                }
            }
            for (step, counter, sets, then) in &r.events {
                match then {
                    Fires::Relay(to) => writeln!(
                        f,
                        "  event c{counter}: after {sets} set(s) -> COPY SET_EVENT c{counter} on rail {to} (armed at step {step}: a relay)"
                    )?,
                    Fires::Put(b) => writeln!(
                        f,
                        "  event c{counter}: after {sets} set(s) -> COPY block {b} (armed at step {step}: the NIC starts the put)"
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
