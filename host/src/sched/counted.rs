//! Barrier words and node phases as destination counters: the form of a set
//! in which the offload compiler can chain what follows them.
//!
//! A barrier word [GTNP02 §6.4] and a node flag are memory the host
//! polls, which no NIC event sees. [`count`] rewrites a set so that the
//! NICs carry them:
//!
//! - a word put becomes a zero-length put that sets a destination counter
//!   of the partner, and a wait for a word a wait for that counter (the
//!   exchange on events, as Quadrics ran its barrier, [ELAN-SEM §5]);
//! - with the node phases on the NICs too (`name@nic-dma`): a flag raise
//!   becomes a zero-length put that sets the peer's counter, and a wait
//!   for a flag a wait for it; a copy into a node peer's memory becomes
//!   a put to that peer (the NIC's DMA, out on the rail and back, ABI
//!   §4.2), which carries the raise that follows it when that raise goes
//!   to the same peer (the counter is set once its bytes are in place);
//!   and a copy out of a node peer's memory that waits for that peer's
//!   raise is done by the peer, whose raise becomes the put of those
//!   bytes; the node's flat-tree barrier and broadcast become puts and
//!   waits too (`node_ops`: arrivals and release; readiness, bytes and
//!   receipt).
//!
//! Every rank's i-th polled wait gets counter `set.counters + i`, so a
//! sender finds its partner's counter by the partner's wait for its word
//! or flag. Counters alternate between the executor's two pools on
//! consecutive calls, and a rank is at most one call ahead of another
//! wherever these waits order them, so neither barrier numbers nor flag
//! counts are needed any more.
//!
//! Contract: the counted set writes the same bytes to the same places
//! and keeps every order between ranks the original has (the verifier
//! proves both for every catalogue set on the shape space, and the tests
//! run them byte-exact). A put made from a raise or a word carries its
//! rank's program order (the raise said "I have got this far"): it is
//! listed in [`Counted::ordered`], and the offload compiler makes it wait
//! for everything its rank waited for before it. A copy into a peer that
//! no raise to that peer follows at once is a put whose completion the
//! rank's next step that speaks to anyone waits for, as the host's copy
//! was over before it. A set whose counters would not fit the budget, or
//! whose words or flags do not pair up, is returned as `None` (the host
//! keeps polling).

use std::collections::{HashMap, HashSet};

use super::budget::Budget;
use super::*;

/// A counted set, and the puts in it that carry program order.
#[derive(Clone, Debug)]
pub(crate) struct Counted {
    /// The set.
    pub set: ScheduleSet,
    /// Per rank, the steps (puts) made from a raise or a word: each needs
    /// everything its rank waited for before it.
    pub ordered: Vec<HashSet<u32>>,
}

/// What a host polls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Polled {
    Word(Words, u32),
    Flag(Flag),
    /// The node master's wait for its node's arrivals (the flat tree).
    Arrivals,
    /// A node rank's wait for its master's release.
    Release,
    /// A node rank's wait for its node broadcast's bytes.
    NodeBcast,
    /// The node broadcast root's wait for its node's ranks to be ready.
    BcastReady,
    /// The node broadcast root's wait for its node's ranks to have
    /// their bytes.
    BcastDone,
}

/// A copy out of a peer's memory that the peer does instead: the peer's
/// raise becomes a put of `from` (its memory) into `into` (the waiter's).
#[derive(Clone, Copy)]
struct Handed {
    from: Region,
    into: Region,
}

/// What a raise hands over: its waiter's copies out of the raiser's
/// memory, each by its step in the waiter's schedule.
struct HandOver {
    waiter: usize,
    copies: Vec<(usize, Handed)>,
}

/// `set` counted (see the module doc): its barrier words, and with
/// `node_phases` its node flags and copies too. `None` where there is
/// nothing to count or it would not fit.
pub(crate) fn count(
    set: &ScheduleSet,
    budget: &Budget,
    node_phases: bool,
) -> Result<Option<Counted>, Error> {
    let node = NodeOf::new(set)?;
    let bcasts = if node_phases {
        bcasts_to_puts(set, &node)
    } else {
        HashSet::new()
    };
    // A node broadcast root waits twice: for readiness, then for its
    // ranks to have taken the bytes.
    let polled_twice = |r: usize, op: &Op| match *op {
        Op::NodeBcast { root, .. }
            if bcasts.contains(&node.of[r]) && root as usize == r && node.peers(r).len() > 1 =>
        {
            Some(Polled::BcastDone)
        }
        _ => None,
    };
    let polled = |r: usize, op: &Op| match *op {
        Op::WordWait { words, slot } => Some(Polled::Word(words, slot)),
        Op::WaitFlag { flag, .. } if node_phases => Some(Polled::Flag(flag)),
        Op::NodeArrive if node_phases && node.is_master(r) && node.peers(r).len() > 1 => {
            Some(Polled::Arrivals)
        }
        Op::NodeRelease if node_phases && !node.is_master(r) => Some(Polled::Release),
        Op::NodeBcast { root, .. } if bcasts.contains(&node.of[r]) => {
            if root as usize != r {
                Some(Polled::NodeBcast)
            } else if node.peers(r).len() > 1 {
                Some(Polled::BcastReady)
            } else {
                None
            }
        }
        _ => None,
    };
    let mut counter_of: HashMap<(usize, Polled), Counter> = HashMap::new();
    let mut most = 0u16;
    for (r, s) in set.ranks.iter().enumerate() {
        let mut waits = 0u16;
        for step in &s.steps {
            for key in [polled(r, &step.op), polled_twice(r, &step.op)]
                .into_iter()
                .flatten()
            {
                if counter_of.insert((r, key), set.counters + waits).is_some() {
                    // A word waited for twice in one call: its number, not
                    // a count, is what the second wait means.
                    return Ok(None);
                }
                waits += 1;
            }
        }
        most = most.max(waits);
    }
    if most == 0 || u32::from(set.counters) + u32::from(most) > u32::from(budget.counters) {
        return Ok(None);
    }
    let handed = if node_phases {
        handed_copies(set)
    } else {
        HashMap::new()
    };
    let removed: HashSet<(usize, usize)> = handed
        .values()
        .flat_map(|h| h.copies.iter().map(move |&(k, _)| (h.waiter, k)))
        .collect();
    let nothing = Region::new(Buf::Recv, 0, 0);
    let mut out = set.clone();
    let mut ordered = vec![HashSet::new(); set.ranks.len()];
    for (r, s) in out.ranks.iter_mut().enumerate() {
        let old = &set.ranks[r].steps;
        let mut map: Vec<Option<u32>> = Vec::with_capacity(old.len());
        let mut steps: Vec<Step> = Vec::with_capacity(old.len());
        // Per new step: the landings (new indices) it waits for.
        let mut waits_for: Vec<Vec<u32>> = Vec::with_capacity(old.len());
        // Copies into peers made puts, whose completion the next step
        // that speaks to anyone waits for.
        let mut landing: Vec<u32> = Vec::new();
        let mut i = 0;
        while i < old.len() {
            let step = &old[i];
            let here = steps.len() as u32;
            let signal_of = |to: Rank, key: Polled| counter_of.get(&(to as usize, key)).copied();
            let (ops, carries_order, merged) = match step.op {
                Op::BarrierNumber(Numbers::Words(_)) => {
                    map.push(None);
                    i += 1;
                    continue;
                }
                Op::PeerCopy {
                    dir: PeerDir::Pull, ..
                } if removed.contains(&(r, i)) => {
                    map.push(None);
                    i += 1;
                    continue;
                }
                Op::WordPut { to, words, slot } => {
                    let Some(c) = signal_of(to, Polled::Word(words, slot)) else {
                        // A word nobody waits for: leave the set as it is.
                        return Ok(None);
                    };
                    (vec![node_put(to, nothing, nothing, Some(c))], true, false)
                }
                Op::Signal { to, flag } if node_phases => {
                    let Some(c) = signal_of(to, Polled::Flag(flag)) else {
                        return Ok(None);
                    };
                    // One put per region handed over, each setting the
                    // counter (no order between them, ABI §8.3): the
                    // waiter's counter counts them all.
                    let ops = match handed.get(&(r, i)) {
                        Some(h) => h
                            .copies
                            .iter()
                            .map(|(_, h)| node_put(to, h.from, h.into, Some(c)))
                            .collect(),
                        None => vec![node_put(to, nothing, nothing, Some(c))],
                    };
                    (ops, true, false)
                }
                Op::PeerCopy {
                    peer,
                    dir: PeerDir::Push,
                    local,
                    remote,
                } if node_phases => {
                    // The raise to the same peer just after it, unless that
                    // raise hands over other bytes, rides on it.
                    let raise = match old.get(i + 1).map(|s| &s.op) {
                        Some(&Op::Signal { to, flag })
                            if to == peer && !handed.contains_key(&(r, i + 1)) =>
                        {
                            signal_of(to, Polled::Flag(flag))
                        }
                        _ => None,
                    };
                    (
                        vec![node_put(peer, local, remote, raise)],
                        raise.is_some(),
                        raise.is_some(),
                    )
                }
                // The node's flat tree and broadcast: arrivals, releases,
                // readiness and bytes as puts to the node's ranks and their
                // counters.
                Op::NodeArrive | Op::NodeRelease | Op::NodeBcast { .. }
                    if node_phases
                        && (!matches!(step.op, Op::NodeBcast { .. })
                            || bcasts.contains(&node.of[r])) =>
                {
                    let Some(ops) = node_ops(&step.op, r, &node, &counter_of, set) else {
                        return Ok(None);
                    };
                    if ops.is_empty() {
                        // A node of one rank: nothing to tell.
                        map.push(None);
                        i += 1;
                        continue;
                    }
                    (ops, true, false)
                }
                Op::WordWait { words, slot } => (
                    vec![Op::Wait {
                        counter: counter_of[&(r, Polled::Word(words, slot))],
                        arrivals: [0; MAX_RAILS],
                    }],
                    false,
                    false,
                ),
                Op::WaitFlag { flag, .. } if node_phases => (
                    vec![Op::Wait {
                        counter: counter_of[&(r, Polled::Flag(flag))],
                        arrivals: [0; MAX_RAILS],
                    }],
                    false,
                    false,
                ),
                ref op => (vec![op.clone()], false, false),
            };
            let is_push = matches!(
                step.op,
                Op::PeerCopy {
                    dir: PeerDir::Push,
                    ..
                }
            ) && node_phases;
            map.push(Some(here));
            for op in ops {
                waits_for.push(if speaks(&op, &landing) {
                    std::mem::take(&mut landing)
                } else {
                    Vec::new()
                });
                if carries_order && matches!(op, Op::Put { .. }) {
                    ordered[r].insert(steps.len() as u32);
                }
                steps.push(Step {
                    op,
                    after: step.after.clone(),
                });
            }
            if is_push && !merged {
                landing.push(here);
            }
            if merged {
                // The raise is the put's signal now.
                map.push(Some(here));
                i += 1;
            }
            i += 1;
        }
        for (step, landings) in steps.iter_mut().zip(waits_for) {
            step.after = step
                .after
                .iter()
                .filter_map(|&a| map.get(a as usize).copied().flatten())
                .chain(landings)
                .collect();
        }
        s.steps = steps;
    }
    Ok(Some(Counted {
        set: out.seal()?,
        ordered,
    }))
}

/// A put on rail 0 (a node's copies and raises and a barrier's notices:
/// one rail keeps their counters' sets on one NIC).
fn node_put(to: Rank, src: Region, dst: Region, signal: Option<Counter>) -> Op {
    Op::Put {
        to,
        src,
        dst,
        lane: Lane::Rail(0),
        signal,
    }
}

/// Whether `op` may tell another rank something, or reads or writes a
/// peer's memory: it must wait for the landings still `pending`.
fn speaks(op: &Op, pending: &[u32]) -> bool {
    !pending.is_empty()
        && !matches!(
            op,
            Op::Wait { .. } | Op::WaitFlag { .. } | Op::Copy { .. } | Op::BarrierNumber(_)
        )
}

/// The copies out of a peer's memory that the peer can do instead, by
/// the raise (rank, step) that their waiter waits for just before them:
/// the waiter, and each copy's step and what it moves. Only the copies
/// that follow the wait at once, from the peer that made the flag's only
/// raise, into bytes nothing else touches before the copy (the peer's put
/// may land any time after its raise) or ever writes from another rank.
fn handed_copies(set: &ScheduleSet) -> HashMap<(usize, usize), HandOver> {
    let mut raises: HashMap<(usize, Flag), Vec<(usize, usize)>> = HashMap::new();
    for (b, s) in set.ranks.iter().enumerate() {
        for (i, step) in s.steps.iter().enumerate() {
            if let Op::Signal { to, flag } = step.op {
                raises.entry((to as usize, flag)).or_default().push((b, i));
            }
        }
    }
    let mut handed = HashMap::new();
    for (a, s) in set.ranks.iter().enumerate() {
        for (w, step) in s.steps.iter().enumerate() {
            let Op::WaitFlag { flag, .. } = step.op else {
                continue;
            };
            let Some(&[(b, at)]) = raises.get(&(a, flag)).map(Vec::as_slice) else {
                continue;
            };
            let mut copies = Vec::new();
            for (k, st) in s.steps.iter().enumerate().skip(w + 1) {
                let Op::PeerCopy {
                    peer,
                    dir: PeerDir::Pull,
                    local,
                    remote,
                } = st.op
                else {
                    break;
                };
                let untouched_before = s.steps[..k]
                    .iter()
                    .all(|x| touches(&x.op).iter().all(|(r, _)| !r.overlaps(&local)));
                if peer as usize != b || !untouched_before || written_by_others(set, a, &local) {
                    break;
                }
                copies.push((
                    k,
                    Handed {
                        from: remote,
                        into: local,
                    },
                ));
            }
            if !copies.is_empty() {
                handed.insert((b, at), HandOver { waiter: a, copies });
            }
        }
    }
    handed
}

/// Where every rank lives: its node, and each node's ranks by local
/// index (the first is the node's master).
struct NodeOf {
    of: Vec<usize>,
    members: Vec<Vec<usize>>,
}

impl NodeOf {
    fn new(set: &ScheduleSet) -> Result<Self, Error> {
        let topo = set.params.shape.topology;
        let mut members = vec![Vec::new(); topo.nodes()];
        let mut of = Vec::with_capacity(set.ranks.len());
        for r in 0..set.ranks.len() {
            let (n, _) = topo.locate(r)?;
            of.push(n);
        }
        for (n, list) in members.iter_mut().enumerate() {
            for l in 0..topo.ranks_per_node() {
                list.push(topo.rank_of(n, l)?);
            }
        }
        Ok(Self { of, members })
    }

    fn peers(&self, r: usize) -> &[usize] {
        &self.members[self.of[r]]
    }

    fn master(&self, r: usize) -> usize {
        self.peers(r)[0]
    }

    fn is_master(&self, r: usize) -> bool {
        self.master(r) == r
    }

    fn others(&self, r: usize) -> Vec<usize> {
        self.peers(r).iter().copied().filter(|&p| p != r).collect()
    }
}

/// The nodes whose broadcast (every rank of the node runs one
/// [`Op::NodeBcast`]) can be the root's puts: a rank other than the root
/// touches the bytes it receives nowhere before, and no rank off the
/// node writes them (the root's put may land any time after the root's
/// step).
fn bcasts_to_puts(set: &ScheduleSet, node: &NodeOf) -> HashSet<usize> {
    let mut ok: HashMap<usize, bool> = HashMap::new();
    for (r, s) in set.ranks.iter().enumerate() {
        let mut seen = 0;
        for (k, step) in s.steps.iter().enumerate() {
            let Op::NodeBcast { root, region } = step.op else {
                continue;
            };
            seen += 1;
            let fine = seen == 1
                && (root as usize == r
                    || (s.steps[..k]
                        .iter()
                        .all(|x| touches(&x.op).iter().all(|(g, _)| !g.overlaps(&region)))
                        && !written_by_others(set, r, &region)));
            *ok.entry(node.of[r]).or_insert(true) &= fine;
        }
    }
    ok.into_iter()
        .filter(|&(_, fine)| fine)
        .map(|(n, _)| n)
        .collect()
}

/// The node's flat tree and broadcast on rank `r` as puts and waits on
/// counters (`None`: a counter is missing, the set stays as it is):
/// - arrival: a rank puts to its master, which waits for them all;
/// - release: the master puts to every other rank, each waits for it;
/// - broadcast: every rank but the root tells the root it is ready (a
///   put, as the binomial broadcast's children do: the bytes must not
///   land in a buffer its owner may still be rewriting before it
///   entered), waits for the bytes and tells the root it has them; the
///   root waits for them all to be ready, puts its region into each
///   one's, and waits for them all to have it (as the shared-memory
///   broadcast's root waits for its readers: without it the root could
///   run two broadcasts ahead of a rank still to take its bytes, and
///   counters alternate between two pools only).
fn node_ops(
    op: &Op,
    r: usize,
    node: &NodeOf,
    counter_of: &HashMap<(usize, Polled), Counter>,
    set: &ScheduleSet,
) -> Option<Vec<Op>> {
    let nothing = Region::new(Buf::Recv, 0, 0);
    let wait = |key| {
        counter_of.get(&(r, key)).map(|&counter| Op::Wait {
            counter,
            arrivals: [0; MAX_RAILS],
        })
    };
    let tell = |to: usize, key, src, dst| {
        counter_of
            .get(&(to, key))
            .map(|&c| node_put(to as Rank, src, dst, Some(c)))
    };
    let alone = node.peers(r).len() == 1;
    match *op {
        Op::NodeArrive if alone => Some(Vec::new()),
        Op::NodeArrive if node.is_master(r) => Some(vec![wait(Polled::Arrivals)?]),
        Op::NodeArrive => Some(vec![tell(
            node.master(r),
            Polled::Arrivals,
            nothing,
            nothing,
        )?]),
        Op::NodeRelease if node.is_master(r) => node
            .others(r)
            .into_iter()
            .map(|o| tell(o, Polled::Release, nothing, nothing))
            .collect(),
        Op::NodeRelease => Some(vec![wait(Polled::Release)?]),
        Op::NodeBcast { .. } if alone => Some(Vec::new()),
        Op::NodeBcast { root, region } if root as usize == r => {
            let mut ops = vec![wait(Polled::BcastReady)?];
            for o in node.others(r) {
                let into = bcast_into(&set.ranks[o])?;
                ops.push(tell(o, Polled::NodeBcast, region, into)?);
            }
            ops.push(wait(Polled::BcastDone)?);
            Some(ops)
        }
        Op::NodeBcast { root, .. } => Some(vec![
            tell(root as usize, Polled::BcastReady, nothing, nothing)?,
            wait(Polled::NodeBcast)?,
            tell(root as usize, Polled::BcastDone, nothing, nothing)?,
        ]),
        _ => None,
    }
}

/// Where a rank's node broadcast puts the bytes it receives.
fn bcast_into(s: &Schedule) -> Option<Region> {
    s.steps.iter().find_map(|st| match st.op {
        Op::NodeBcast { region, .. } => Some(region),
        _ => None,
    })
}

/// Whether any rank other than `a` writes into `a`'s `region`.
fn written_by_others(set: &ScheduleSet, a: usize, region: &Region) -> bool {
    set.ranks.iter().enumerate().any(|(b, s)| {
        b != a
            && s.steps.iter().any(|st| match st.op {
                Op::Put { to, dst, .. } | Op::ChainPut { to, dst, .. } => {
                    to as usize == a && dst.overlaps(region)
                }
                Op::PeerCopy {
                    peer,
                    dir: PeerDir::Push,
                    remote,
                    ..
                } => peer as usize == a && remote.overlaps(region),
                // The switch's broadcast reaches the rank of the sender's
                // local index on every other node.
                Op::HwBcast { dst, .. } => {
                    let topo = set.params.shape.topology;
                    let (Ok((na, la)), Ok((nb, lb))) = (topo.locate(a), topo.locate(b)) else {
                        return true;
                    };
                    na != nb && la == lb && dst.overlaps(region)
                }
                _ => false,
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(op: Op) -> Step {
        Step {
            op,
            after: Vec::new(),
        }
    }

    /// One node of two ranks: rank 0 copies its block into rank 1's
    /// memory and raises rank 1's flag, then raises it again after
    /// copying its own block; rank 1 waits for each raise and copies rank
    /// 0's block out after the second. `touch_first`: rank 1 reads the
    /// bytes it will copy into before its wait.
    fn node_set(touch_first: bool) -> ScheduleSet {
        let shape = Shape::new(1, 2, 1, 1, crate::topology::Placement::Block).expect("shape");
        let params = Params::new(Collective::Allgather, Algorithm::SmpDirect, shape, 0, 8);
        let mut one = vec![step(Op::WaitFlag {
            flag: 0,
            count: 0,
            from: 0,
        })];
        if touch_first {
            one.push(step(Op::Copy {
                src: Region::one(Buf::Recv, 0),
                dst: Region::one(Buf::Scratch, 0),
            }));
        }
        one.push(step(Op::WaitFlag {
            flag: 1,
            count: 0,
            from: 0,
        }));
        one.push(step(Op::PeerCopy {
            peer: 0,
            dir: PeerDir::Pull,
            local: Region::one(Buf::Recv, 0),
            remote: Region::one(Buf::Recv, 0),
        }));
        ScheduleSet {
            params,
            scratch_blocks: 1,
            counters: 0,
            flags: 0,
            ranks: vec![
                Schedule {
                    rank: 0,
                    steps: vec![
                        step(Op::PeerCopy {
                            peer: 1,
                            dir: PeerDir::Push,
                            local: Region::one(Buf::Send, 0),
                            remote: Region::one(Buf::Recv, 1),
                        }),
                        step(Op::Signal { to: 1, flag: 0 }),
                        step(Op::Copy {
                            src: Region::one(Buf::Send, 0),
                            dst: Region::one(Buf::Recv, 0),
                        }),
                        step(Op::Signal { to: 1, flag: 1 }),
                    ],
                },
                Schedule {
                    rank: 1,
                    steps: one,
                },
            ],
        }
        .seal()
        .expect("seal")
    }

    fn ops(set: &ScheduleSet, rank: usize) -> Vec<Op> {
        set.ranks[rank].steps.iter().map(|s| s.op.clone()).collect()
    }

    #[test]
    fn a_copy_out_of_a_peer_is_handed_to_it_and_raises_become_counters() {
        let counted = count(&node_set(false), &Budget::default(), true)
            .expect("counts")
            .expect("something to count");
        let put = |src, dst, signal| Op::Put {
            to: 1,
            src,
            dst,
            lane: Lane::Rail(0),
            signal: Some(signal),
        };
        // The copy in carries the first raise; the second raise carries
        // rank 0's block, which rank 1 no longer copies out itself.
        assert_eq!(
            ops(&counted.set, 0),
            vec![
                put(Region::one(Buf::Send, 0), Region::one(Buf::Recv, 1), 0),
                Op::Copy {
                    src: Region::one(Buf::Send, 0),
                    dst: Region::one(Buf::Recv, 0),
                },
                put(Region::one(Buf::Recv, 0), Region::one(Buf::Recv, 0), 1),
            ]
        );
        assert_eq!(counted.ordered[0], HashSet::from([0, 2]));
        let waits: Vec<Counter> = ops(&counted.set, 1)
            .iter()
            .map(|op| match op {
                Op::Wait { counter, .. } => *counter,
                other => panic!("rank 1 keeps {other:?}"),
            })
            .collect();
        assert_eq!(waits, vec![0, 1]);
        // Without the node phases only words are counted: nothing here.
        assert!(
            count(&node_set(false), &Budget::default(), false)
                .expect("counts")
                .is_none()
        );
    }

    #[test]
    fn a_copy_into_bytes_touched_before_stays_with_the_host() {
        let counted = count(&node_set(true), &Budget::default(), true)
            .expect("counts")
            .expect("something to count");
        // The raise stays a notice without data, and rank 1 still copies.
        assert!(matches!(
            ops(&counted.set, 0)[2],
            Op::Put {
                src: Region { count: 0, .. },
                signal: Some(1),
                ..
            }
        ));
        assert!(matches!(
            ops(&counted.set, 1).last(),
            Some(Op::PeerCopy {
                dir: PeerDir::Pull,
                ..
            })
        ));
    }

    #[test]
    fn counters_beyond_the_budget_leave_the_set_as_it_is() {
        let budget = Budget {
            counters: 1,
            ..Budget::default()
        };
        assert!(
            count(&node_set(false), &budget, true)
                .expect("counts")
                .is_none()
        );
    }
}
