//! What the compiler reads off a set before it moves anything: which
//! counters brought each block a rank holds (provenance), who notifies whom
//! (notices), and what a set leaves to the NICs and to the host (`moved`).

use super::*;

/// Count what `set` leaves to the NICs and to the host.
pub fn moved(set: &ScheduleSet) -> Moved {
    let mut m = Moved::default();
    for (rank, step) in set
        .ranks
        .iter()
        .flat_map(|s| s.steps.iter().map(move |st| (s.rank, st)))
    {
        match step.op {
            Op::ChainPut { to, .. } if to == rank => m.copies += 1,
            // Started by its arming: a host put that reports its
            // completion to a later chained put.
            Op::ChainPut { count: 0, .. } => {
                m.host_puts += 1;
                m.host_posts += 1;
            }
            Op::ChainPut { .. } => m.chained += 1,
            Op::Put { .. } => {
                m.host_puts += 1;
                m.host_posts += 1;
            }
            Op::WordPut { .. } | Op::QueueSend { .. } | Op::HwBcast { .. } | Op::Ready { .. } => {
                m.host_posts += 1
            }
            _ => {}
        }
    }
    m
}

/// The counters that deliver each block of `rank`'s buffers (every put or
/// chained put of any rank addressed to it, by its signal). A put without
/// a signal is delivered by the signal of any later put to the same rank
/// that waits for its completion (a node push whose raise rides on the
/// sender's last push, `sched::counted`): once that counter is set, its
/// bytes are in place too.
pub(super) fn provenance(set: &ScheduleSet, rank: usize) -> HashMap<(Buf, u32), Vec<Counter>> {
    let mut by_block: HashMap<(Buf, u32), Vec<Counter>> = HashMap::new();
    let to_rank = |step: &Step| match step.op {
        Op::Put {
            to, dst, signal, ..
        }
        | Op::ChainPut {
            to, dst, signal, ..
        } if to as usize == rank => Some((dst, signal)),
        _ => None,
    };
    for s in &set.ranks {
        for step in &s.steps {
            let Some((dst, signal)) = to_rank(step) else {
                continue;
            };
            let mut delivered = vec![dst];
            if let Some(c) = signal {
                // The unsignalled puts to this rank it waits for, and the
                // ones those wait for.
                let mut todo = step.after.clone();
                let mut seen = HashSet::new();
                while let Some(a) = todo.pop() {
                    let Some(earlier) = s.steps.get(a as usize) else {
                        continue;
                    };
                    if seen.insert(a)
                        && let Some((d, None)) = to_rank(earlier)
                    {
                        delivered.push(d);
                        todo.extend_from_slice(&earlier.after);
                    }
                }
                for d in delivered {
                    for b in d.block..d.end() {
                        let list = by_block.entry((d.buf, b)).or_default();
                        if !list.contains(&c) {
                            list.push(c);
                        }
                    }
                }
            } else {
                for b in dst.block..dst.end() {
                    by_block.entry((dst.buf, b)).or_default();
                }
            }
        }
    }
    by_block
}

/// For every rank, which ranks set each of its counters with a notice (a
/// put without data, or a readiness flag become one: "I am ready", "I
/// have got this far"). One pass over the set.
pub(super) fn notices(set: &ScheduleSet) -> Vec<HashMap<Counter, Vec<Rank>>> {
    let mut by: Vec<HashMap<Counter, Vec<Rank>>> = vec![HashMap::new(); set.ranks.len()];
    for s in &set.ranks {
        for step in &s.steps {
            if let Op::Put {
                to,
                src,
                signal: Some(c),
                ..
            }
            | Op::ChainPut {
                to,
                src,
                signal: Some(c),
                ..
            } = step.op
                && src.count == 0
                && let Some(target) = by.get_mut(to as usize)
            {
                target.entry(c).or_default().push(s.rank);
            }
        }
    }
    by
}
