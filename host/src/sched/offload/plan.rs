//! Planning one chained put: the rail it is on, the room it has for feeds
//! and done sets, the trigger that collects what it waits for (a folded
//! wait, relays from other rails, feeds from earlier chained puts), and
//! the steps whose completions it may drop as implied.

use super::*;

/// Host put `op` of rank `me` as a chained put its own arming starts
/// (`trigger` takes no sets): how a host put reports its completion to a
/// later chained put. `None` unless it is a put on one rail.
pub(super) fn started_by_arming(p: &Params, me: usize, op: &Op, trigger: Counter) -> Option<Op> {
    let rail = single_rail(p, me, op)?;
    let Op::Put {
        to,
        src,
        dst,
        lane,
        signal,
    } = *op
    else {
        return None;
    };
    Some(Op::chained(trigger, rail, lane, to, src, dst, signal))
}

/// `steps` sorted, without those whose completion another one's implies.
pub(super) fn without_implied(
    mut steps: Vec<u32>,
    implies_done: &HashMap<u32, Vec<u32>>,
) -> Vec<u32> {
    steps.sort_unstable();
    steps.dedup();
    let implied: HashSet<u32> = steps
        .iter()
        .flat_map(|q| implies_done.get(q).into_iter().flatten().copied())
        .collect();
    steps.retain(|q| !implied.contains(q));
    steps
}

/// The one rail of a host put of rank `me` that goes out in one part,
/// `None` for any other step.
pub(super) fn single_rail(p: &Params, me: usize, op: &Op) -> Option<u8> {
    match (op, &super::budget::chain_parts(p, me, op)[..]) {
        (Op::Put { .. }, &[rail]) => Some(rail as u8),
        _ => None,
    }
}

/// Can a later chained put wait for the completion of step `op` through
/// a set its source event's COPY makes? A chained put on one rail with
/// room for one more such set, or a host put on one rail (chained, with
/// nothing to wait for, when it gets its first).
pub(super) fn done_room(p: &Params, me: usize, op: Option<&Op>, budget: &Budget) -> bool {
    match op {
        Some(op @ Op::ChainPut { done, .. }) => {
            super::budget::chain_parts(p, me, op).len() == 1 && (done.len() as u32) < budget.feeds
        }
        Some(op @ Op::Put { .. }) => single_rail(p, me, op).is_some() && budget.feeds > 0,
        _ => false,
    }
}

/// Can the chained put `op` (of rank `me`) feed one more trigger? Its
/// COPY holds the put, its feeds and one set per other part of a striped
/// put, within `budget.feeds` sets.
pub(super) fn feed_room(p: &Params, me: usize, op: &Op, budget: &Budget) -> bool {
    match op {
        Op::ChainPut { feeds, .. } => {
            let parts = super::budget::chain_parts(p, me, op).len().max(1);
            ((feeds.len() + parts - 1) as u32) < budget.feeds
        }
        _ => false,
    }
}

/// The rail of a chained copy: where what it waits for comes, so that no
/// set has to cross to another rail's NIC: the folded wait's rail with
/// the most sets, else its first landing's, else its first source's.
pub(super) fn copy_rail(
    wait: Option<(Counter, &[u32; MAX_RAILS])>,
    landings: &[Landing],
    sources: &[u32],
    new: &[Step],
) -> u8 {
    if let Some((_, arrivals)) = wait {
        let most = arrivals
            .iter()
            .enumerate()
            .max_by_key(|&(x, &n)| (n, std::cmp::Reverse(x)));
        return most.map_or(0, |(x, _)| x as u8);
    }
    if let Some(l) = landings.first() {
        return l.rail;
    }
    match sources.first().and_then(|&q| new.get(q as usize)) {
        Some(Step {
            op: Op::ChainPut { rail, .. },
            ..
        }) => *rail,
        _ => 0,
    }
}

/// How a chained put on `rail` is triggered.
pub(super) struct Plan {
    /// Its rail.
    pub(super) rail: u8,
    /// The counter it waits for: the folded wait's (a plain, cross-rail
    /// or combined trigger: relays and feeds add to its own sets), or a
    /// fresh join counter that only feeds set (no wait to fold).
    pub(super) trigger: Counter,
    /// Relays to arm before it: (counter, from rail), each setting
    /// `trigger` once on `rail`.
    pub(super) relays: Vec<(Counter, u8)>,
    /// Sibling sets it adds into each rail's FIFO.
    pub(super) sibling_sets: [u32; MAX_RAILS],
    /// Chain queue entries it adds: the put, two per relay, one per feed.
    pub(super) entries: u32,
}

/// The trigger of a chained put on `rail` that waits for the folded wait
/// `wait` (its counter's sets on every rail) and for the firings of the
/// chained puts `sources` (steps of `new`), within `budget`; a combined
/// one takes join counter `next_join`. `None` if it does not fit (too
/// many feeds on a source, the sibling FIFO, the counters).
#[allow(clippy::too_many_arguments)]
pub(super) fn plan_trigger(
    rail: u8,
    wait: Option<(Counter, &[u32; MAX_RAILS])>,
    landings: &[Landing],
    sources: &[u32],
    done_sources: &[u32],
    new: &[Step],
    params: &Params,
    me: usize,
    budget: &Budget,
    fifo_share: u32,
    relays_into: &[u32; MAX_RAILS],
    next_join: Counter,
) -> Option<Plan> {
    let mut sibling_sets = [0u32; MAX_RAILS];
    let mut relays = Vec::new();
    let mut entries = 1u32;
    let on = |x: usize| x != usize::from(rail);
    if let Some((c, arrivals)) = wait {
        // The wait's counter triggers on `rail` itself, the other rails'
        // sets relayed into it (and the sources' feeds set it too: it is
        // the join, so a combined trigger costs no extra event).
        for (x, _) in arrivals.iter().enumerate().filter(|&(_, &n)| n > 0) {
            if on(x) {
                relays.push((c, x as u8));
                entries += 2;
                sibling_sets[usize::from(rail)] += 1;
            }
        }
    }
    // Without a wait to fold, a landing on `rail` is the trigger itself;
    // every other landing is relayed into the trigger (two entries, and a
    // sibling set from another rail).
    let own_landing = match wait {
        None => landings.iter().find(|l| l.rail == rail).map(|l| l.counter),
        Some(_) => None,
    };
    for l in landings.iter().filter(|l| Some(l.counter) != own_landing) {
        relays.push((l.counter, l.rail));
        entries += 2;
        if l.rail != rail {
            sibling_sets[usize::from(rail)] += 1;
        }
    }
    for &q in sources {
        // (The caller chose sources with room for the feed.)
        let Some(Op::ChainPut { rail: q_rail, .. }) = new.get(q as usize).map(|s| &s.op) else {
            return None;
        };
        entries += 1;
        if *q_rail != rail {
            sibling_sets[usize::from(rail)] += 1;
        }
    }
    // Each completion it waits for: a set in that put's source event's
    // COPY (which also sets the put's completion event, one entry more
    // for its first), the put itself chained if the host posted it.
    for &q in done_sources {
        let op = new.get(q as usize).map(|s| &s.op)?;
        let (q_rail, first) = match op {
            Op::ChainPut {
                rail: q_rail, done, ..
            } => (*q_rail, done.is_empty()),
            Op::Put { .. } => {
                entries += 1;
                (single_rail(params, me, op)?, true)
            }
            _ => return None,
        };
        entries += if first { 2 } else { 1 };
        if q_rail != rail {
            sibling_sets[usize::from(rail)] += 1;
        }
    }
    if sibling_sets[usize::from(rail)] > 0
        && relays_into[usize::from(rail)] + sibling_sets[usize::from(rail)] > fifo_share
    {
        return None;
    }
    // A relay's COPY is two blocks, a feed's one more than the put's: NICs
    // whose COPY injects one block (`feeds` 0) run neither.
    if budget.feeds == 0 && (!relays.is_empty() || !sources.is_empty() || !done_sources.is_empty())
    {
        return None;
    }
    let trigger = match (wait, own_landing) {
        (Some((c, _)), _) | (None, Some(c)) => c,
        // A join counter: the next one free (the caller takes it).
        _ if next_join < budget.counters => next_join,
        _ => return None,
    };
    Some(Plan {
        rail,
        trigger,
        relays,
        sibling_sets,
        entries,
    })
}
