//! Sealing a set: every wait's arrival counts and every flag wait's count
//! from the signals addressed to it, the IR's rules checked
//! ([`Error::BadSchedule`]), and the set's budgets; the rail parts of a put.

use super::*;

/// One rail part of a put, as the target counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartShape {
    /// Rail.
    pub rail: usize,
    /// Byte offset within the put.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// How a put from `from` to `to` of `bytes` is split over rails: the same
/// computation the executor's put makes.
pub fn put_parts(
    lane: Lane,
    rails: usize,
    threshold: usize,
    from: usize,
    to: usize,
    bytes: usize,
) -> Vec<PartShape> {
    stripe::plan(lane.policy(threshold), rails, from, to, bytes, 0)
        .into_iter()
        .map(|p| PartShape {
            rail: p.rail,
            offset: p.offset,
            len: p.len,
        })
        .collect()
}

impl ScheduleSet {
    /// Fill every wait's arrival counts and every flag wait's count from the
    /// signals addressed to it, and compute the budgets. A rank may wait on
    /// each counter and each flag at most once per schedule (what makes the
    /// counts unambiguous); a generator that breaks this gets an error.
    pub fn seal(mut self) -> Result<Self, Error> {
        let n = self.ranks.len();
        let rails = self.params.shape.rails;
        let b = self.params.block_bytes;
        let threshold = self.params.stripe_threshold;
        let mut incoming: std::collections::HashMap<(usize, Counter), [u32; MAX_RAILS]> =
            std::collections::HashMap::new();
        let mut raises: std::collections::HashMap<(usize, Flag), (u32, u16)> =
            std::collections::HashMap::new();
        let mut counters: u16 = 0;
        let mut flags: u8 = 0;
        let mut add = |to: usize, c: Counter, rail: usize, counters: &mut u16| {
            *counters = (*counters).max(c + 1);
            if let Some(slot) = incoming.entry((to, c)).or_default().get_mut(rail) {
                *slot += 1;
            }
        };
        for s in &self.ranks {
            let me = s.rank as usize;
            for step in &s.steps {
                match step.op {
                    Op::Put {
                        to,
                        src,
                        lane,
                        signal: Some(c),
                        ..
                    } => {
                        let bytes = src.count as usize * b;
                        for p in put_parts(lane, rails, threshold, me, to as usize, bytes) {
                            add(to as usize, c, p.rail, &mut counters);
                        }
                    }
                    Op::ChainPut {
                        to,
                        src,
                        lane,
                        signal,
                        trigger,
                        ref feeds,
                        ref done,
                        ..
                    } => {
                        counters = counters.max(trigger + 1);
                        for f in done {
                            add(me, f.into, usize::from(f.rail), &mut counters);
                        }
                        if let Some(c) = signal {
                            let bytes = src.count as usize * b;
                            for p in put_parts(lane, rails, threshold, me, to as usize, bytes) {
                                add(to as usize, c, p.rail, &mut counters);
                            }
                        }
                        for f in feeds {
                            add(me, f.into, usize::from(f.rail), &mut counters);
                        }
                    }
                    Op::HwBcast {
                        signal: Some(c), ..
                    } => {
                        let topo = self.params.shape.topology;
                        let (my_node, local) = topo.locate(me)?;
                        for node in (0..topo.nodes()).filter(|&x| x != my_node) {
                            add(topo.rank_of(node, local)?, c, 0, &mut counters);
                        }
                    }
                    Op::Signal { to, flag } => {
                        flags = flags.max(flag + 1);
                        let (_, local) = self.params.shape.topology.locate(me)?;
                        let bit = 1u16 << local;
                        let (count, from) = raises.entry((to as usize, flag)).or_default();
                        if *from & bit != 0 {
                            return Err(Error::BadSchedule(format!(
                                "rank {me} raises flag {flag} of rank {to} twice in one call"
                            )));
                        }
                        *count += 1;
                        *from |= bit;
                    }
                    Op::Wait { counter, .. } => counters = counters.max(counter + 1),
                    Op::Relay {
                        counter, to, into, ..
                    } => {
                        counters = counters.max(counter + 1);
                        add(me, into, usize::from(to), &mut counters);
                    }
                    Op::WaitFlag { flag, .. } => flags = flags.max(flag + 1),
                    _ => {}
                }
            }
        }
        let mut waited = std::collections::HashSet::new();
        for s in &mut self.ranks {
            let me = s.rank as usize;
            // A counter is consumed once: by one wait (every rail), or by
            // chained puts and relays on distinct rails.
            let mut seen_counters: std::collections::HashSet<(Counter, Option<u8>)> =
                std::collections::HashSet::new();
            let mut consume = |counter: Counter, rail: Option<u8>| -> Result<(), Error> {
                let clash = match rail {
                    None => seen_counters.iter().any(|&(c, _)| c == counter),
                    Some(_) => {
                        seen_counters.contains(&(counter, None))
                            || seen_counters.contains(&(counter, rail))
                    }
                };
                if clash || !seen_counters.insert((counter, rail)) {
                    return Err(Error::BadSchedule(format!(
                        "rank {me} consumes counter {counter} twice"
                    )));
                }
                Ok(())
            };
            let mut seen_flags = std::collections::HashSet::new();
            for step in &mut s.steps {
                match &mut step.op {
                    Op::Wait { counter, arrivals } => {
                        consume(*counter, None).map_err(|_| {
                            Error::BadSchedule(format!(
                                "rank {me} waits on counter {counter} twice"
                            ))
                        })?;
                        *arrivals = incoming.get(&(me, *counter)).copied().unwrap_or_default();
                    }
                    // A chained put's trigger and a relay's counter: the
                    // sets on one rail.
                    Op::ChainPut {
                        trigger: counter,
                        count,
                        rail,
                        ..
                    }
                    | Op::Relay {
                        counter,
                        count,
                        from: rail,
                        ..
                    } => {
                        consume(*counter, Some(*rail))?;
                        let per_rail = incoming.get(&(me, *counter)).copied().unwrap_or_default();
                        *count = per_rail.get(usize::from(*rail)).copied().unwrap_or(0);
                    }
                    Op::WaitFlag { flag, count, from } => {
                        if !seen_flags.insert(*flag) {
                            return Err(Error::BadSchedule(format!(
                                "rank {me} waits on flag {flag} twice"
                            )));
                        }
                        (*count, *from) = raises.get(&(me, *flag)).copied().unwrap_or((0, 0));
                        waited.insert((me, *flag));
                    }
                    _ => {}
                }
            }
        }
        // A raise nobody waits for would leave that raiser's count one
        // ahead for the rest of the communicator's life.
        if let Some((to, flag)) = raises.keys().find(|k| !waited.contains(k)) {
            return Err(Error::BadSchedule(format!(
                "rank {to}'s flag {flag} is raised but never waited for"
            )));
        }
        debug_assert_eq!(self.ranks.len(), n);
        self.counters = counters;
        self.flags = flags;
        Ok(self)
    }

    /// The schedule of `rank`.
    pub fn rank(&self, rank: usize) -> Option<&Schedule> {
        self.ranks.get(rank)
    }
}
