//! One rank's compilation, as a value: [`RankCompiler`] walks the rank's
//! steps in order and, for each put (or, with [`Copies::Nic`], local copy)
//! that may be chained, analyses what it waits for ([`RankCompiler::analyse`]:
//! the counters its data came with, the chained puts whose firings bring
//! them, the completions it is ordered after, its rails), plans its trigger
//! within the rank's share of the budget ([`plan_trigger`]), and emits the
//! chained put with its relays and feeds ([`RankCompiler::emit`]); every
//! other step stays with the host, ordered after the chained puts it
//! depends on ([`RankCompiler::host_step`]). What it learns as it goes
//! (counters waited for, which chained put implies which counter, what each
//! block last got from a chained copy, the completions later steps still
//! owe) is the struct's state.

use std::collections::{HashMap, HashSet};

use super::*;

/// What every rank's compilation shares: the (counted) set, who notifies
/// whom, the budget and each rank's share of it.
pub(super) struct Shared<'s> {
    pub(super) set: &'s ScheduleSet,
    /// Per rank, the steps the counting made from a raise or a word.
    pub(super) ordered: Option<&'s [HashSet<u32>]>,
    pub(super) notices: Vec<HashMap<Counter, Vec<Rank>>>,
    pub(super) budget: &'s Budget,
    pub(super) copies: Copies,
    /// A rank's chain blocks and chain queue entries.
    pub(super) per_rank: u32,
    /// A rank's entries of every NIC's sibling FIFO.
    pub(super) fifo_share: u32,
}

impl Shared<'_> {
    /// Does step `step` of `rank`, a put of `src`, carry its rank's program
    /// order: one without data, or one the counting made from a raise or a
    /// word?
    fn carries_order(&self, rank: usize, step: usize, src: &Region) -> bool {
        src.count == 0
            || self
                .ordered
                .is_some_and(|o| o.get(rank).is_some_and(|s| s.contains(&(step as u32))))
    }
}

/// A chainable step's operands: target, source, destination, lane (`None`
/// for a copy: a put to this rank on a rail of the compiler's choosing,
/// whose landing counter it allocates) and signal.
type Operands = (Rank, Region, Region, Option<Lane>, Option<Counter>);

/// What [`RankCompiler::analyse`] found a candidate needs, when it can be
/// chained within the budget.
struct Chaining {
    plan: Plan,
    /// Chained puts whose firings feed its trigger.
    sources: Vec<u32>,
    /// Chained copies' landings it waits for.
    landings: Vec<Landing>,
    /// Puts whose completion sets its trigger (done sets).
    done_sources: Vec<u32>,
    /// Everything it is ordered after; `rest_after`: the part the host
    /// waits for before arming it.
    after_all: Vec<u32>,
    rest_after: Vec<u32>,
    /// A striped put's other part rails.
    others: Vec<u8>,
    /// Chain queue entries it injects: the plan's and two per other part.
    entries: u32,
}

/// One rank's compilation (see the module documentation).
pub(super) struct RankCompiler<'s> {
    sh: &'s Shared<'s>,
    me: usize,
    steps: &'s [Step],
    /// The counters each block of the rank came with.
    from: HashMap<(Buf, u32), Vec<Counter>>,
    /// The compiled steps, and old step index -> new step index.
    new: Vec<Step>,
    map: Vec<u32>,
    /// Counters the host still waits for, so far.
    waited: HashSet<Counter>,
    /// Counter -> the chained put whose firing implies it has all come.
    fired_by: HashMap<Counter, u32>,
    /// Chained puts in order, each with every counter its firing implies
    /// (its closure).
    closures: Vec<(u32, Vec<Counter>)>,
    /// Blocks a chained put reads -> that chained put's step.
    read_by_chain: Vec<(Region, u32)>,
    /// Chain queue entries this rank's programs inject, sibling sets into
    /// each rail, and the next join counter (local to the rank).
    chains: u32,
    relays_into: [u32; MAX_RAILS],
    next_join: Counter,
    /// Chained copies: what each block of this rank last got from one (the
    /// landing counters), and the landings no chained put has consumed yet.
    landed: HashMap<(Buf, u32), Vec<Landing>>,
    pending: Vec<Landing>,
    /// Completions program order still owes every later step: a host
    /// step's `after` blocked the host, ordering everything after it; one
    /// the NICs report to a chained put's trigger (a set on completion)
    /// does not, so later steps inherit it until the host waits for it.
    inherited: Vec<u32>,
    /// What each chained put's completion implies (the completions its
    /// trigger waited for, transitively).
    implies_done: HashMap<u32, Vec<u32>>,
}

impl<'s> RankCompiler<'s> {
    pub(super) fn new(sh: &'s Shared<'s>, me: usize) -> Self {
        let steps = sh.set.ranks.get(me).map_or(&[][..], |r| &r.steps[..]);
        Self {
            sh,
            me,
            steps,
            from: provenance(sh.set, me),
            new: Vec::with_capacity(steps.len()),
            map: Vec::with_capacity(steps.len()),
            waited: HashSet::new(),
            fired_by: HashMap::new(),
            closures: Vec::new(),
            read_by_chain: Vec::new(),
            chains: 0,
            relays_into: [0; MAX_RAILS],
            next_join: sh.set.counters,
            landed: HashMap::new(),
            pending: Vec::new(),
            inherited: Vec::new(),
            implies_done: HashMap::new(),
        }
    }

    /// Compile the rank's steps.
    pub(super) fn run(mut self) -> Vec<Step> {
        let mut i = 0;
        while i < self.steps.len() {
            i += match self.chain_at(i) {
                Some(consumed) => consumed,
                None => {
                    self.host_step(i);
                    1
                }
            };
        }
        // A landing no chained put waited for sets nothing: its copy's
        // completion is what the host waits for (an unconsumed set would
        // stay in the event for the next collective).
        for l in std::mem::take(&mut self.pending) {
            if let Some(Op::ChainPut { signal, .. }) =
                self.new.get_mut(l.copy as usize).map(|s| &mut s.op)
            {
                *signal = None;
            }
        }
        self.new
    }

    fn params(&self) -> &'s Params {
        &self.sh.set.params
    }

    /// Old step indices -> new ones.
    fn remap(&self, after: &[u32]) -> Vec<u32> {
        after
            .iter()
            .filter_map(|&a| self.map.get(a as usize).copied())
            .collect()
    }

    /// The folded counters a put to `to` must still wait for: the notices
    /// `to` sets ("I am ready" may be what makes the put safe to land
    /// there, as in the binomial broadcast).
    fn notices_of(&self, to: Rank) -> Vec<Counter> {
        let told = self.sh.notices.get(self.me);
        self.fired_by
            .keys()
            .copied()
            .filter(|c| told.and_then(|t| t.get(c)).is_some_and(|t| t.contains(&to)))
            .collect()
    }

    /// The step at `i` as a candidate (with the wait before it folded in,
    /// if any) and its operands.
    fn candidate(&self, i: usize) -> Option<(Candidate<'s>, Operands)> {
        let steps = self.steps;
        let step = steps.get(i)?;
        let copies = self.sh.copies;
        let movable = |op: &Op| match op {
            Op::Put { .. } => true,
            Op::Copy { .. } => copies == Copies::Nic,
            _ => false,
        };
        let cand = match (&step.op, steps.get(i + 1)) {
            (Op::Wait { counter, arrivals }, Some(next))
                if movable(&next.op) && arrivals.iter().any(|&n| n > 0) =>
            {
                Candidate {
                    steps: 2,
                    wait: Some((*counter, arrivals)),
                    put: next,
                }
            }
            (op, _) if movable(op) => Candidate {
                steps: 1,
                wait: None,
                put: step,
            },
            _ => return None,
        };
        let operands = match cand.put.op {
            Op::Put {
                to,
                src,
                dst,
                lane,
                signal,
            } => (to, src, dst, Some(lane), signal),
            Op::Copy { src, dst } => (self.me as Rank, src, dst, None, None),
            _ => return None,
        };
        Some((cand, operands))
    }

    /// Chain the step at `i` if it can be: the steps it consumed (the put,
    /// or a wait and the put), or `None` for a host step.
    fn chain_at(&mut self, i: usize) -> Option<usize> {
        let (cand, operands) = self.candidate(i)?;
        let chaining = self.analyse(i, &cand, operands)?;
        self.emit(&cand, operands, chaining);
        Some(cand.steps)
    }

    /// What the candidate at `i` waits for and the trigger that collects
    /// it; `None` if something it needs is not known to the NICs, it
    /// would wait for nothing, or it does not fit the rank's share.
    fn analyse(&self, i: usize, cand: &Candidate<'s>, operands: Operands) -> Option<Chaining> {
        let (to, src, dst, lane, _) = operands;
        let (p, me, budget) = (self.params(), self.me, self.sh.budget);
        let step = self.steps.get(i)?;
        let folded = cand.wait.map(|(c, _)| c);
        // The chained puts whose firing brings the data the host has not
        // waited for (each bringing nothing the put does not wait for
        // anyway: waiting longer could wait for the put's own answer). A
        // copy also needs everything that is ever put into what it writes
        // to have come (a remote write after it would race it), and
        // nothing an earlier chained put still reads or an earlier chained
        // copy still writes there.
        let is_copy = lane.is_none();
        let mut regions = vec![src];
        if is_copy {
            regions.push(dst);
        }
        let mut needs: Vec<Counter> = Vec::new();
        let mut landings: Vec<Landing> = Vec::new();
        let mut covered = true;
        for r in &regions {
            for b in r.block..r.end() {
                for &c in self.from.get(&(r.buf, b)).into_iter().flatten() {
                    if Some(c) == folded || self.waited.contains(&c) {
                        continue;
                    }
                    if self.fired_by.contains_key(&c) {
                        needs.push(c);
                    } else {
                        covered = false;
                    }
                }
            }
        }
        // A put without data carries only program order (a barrier's
        // notice: "I have got this far"), so it needs everything this rank
        // has waited for before it, the counters earlier chained puts
        // folded included.
        if !is_copy && self.sh.carries_order(me, i + cand.steps - 1, &src) {
            needs.extend(self.fired_by.keys().filter(|&&c| Some(c) != folded));
        }
        if !is_copy {
            needs.extend(
                self.notices_of(to)
                    .into_iter()
                    .filter(|&c| Some(c) != folded),
            );
        }
        for b in src.block..src.end() {
            for l in self.landed.get(&(src.buf, b)).into_iter().flatten() {
                if self.fired_by.contains_key(&l.counter) {
                    needs.push(l.counter);
                } else if !landings.iter().any(|x| x.counter == l.counter) {
                    landings.push(*l);
                }
            }
        }
        needs.sort_unstable();
        needs.dedup();
        let mut hazards: Vec<u32> = Vec::new();
        if is_copy {
            for b in dst.block..dst.end() {
                for (read, chain) in &self.read_by_chain {
                    if read.buf == dst.buf && (read.block..read.end()).contains(&b) {
                        hazards.push(*chain);
                    }
                }
                for l in self.landed.get(&(dst.buf, b)).into_iter().flatten() {
                    hazards.push(l.copy);
                }
            }
        }
        let allowed = |c: &Counter| {
            Some(*c) == folded
                || self.waited.contains(c)
                || needs.contains(c)
                || landings.iter().any(|l| l.counter == *c)
        };
        // The chained puts that cover what is needed, have room for one
        // more feed and imply nothing else: the earliest one that covers it
        // all (a source fires once its closure has come, which the put
        // waits for anyway, so one costs no time and the fewest feeds),
        // else the earliest ones (they fire first) that cover it together.
        let usable = |q: u32, cl: &[Counter]| {
            cl.iter().all(allowed)
                && self
                    .new
                    .get(q as usize)
                    .is_some_and(|s| feed_room(p, me, &s.op, budget))
        };
        let mut sources: Vec<u32> = Vec::new();
        let mut uncovered = needs.clone();
        if let Some((q, _)) = self.closures.iter().find(|(q, cl)| {
            uncovered.len() > 1 && uncovered.iter().all(|c| cl.contains(c)) && usable(*q, cl)
        }) {
            sources.push(*q);
            uncovered.clear();
        }
        for (q, cl) in &self.closures {
            if uncovered.is_empty() {
                break;
            }
            if uncovered.iter().any(|c| cl.contains(c)) && usable(*q, cl) {
                sources.push(*q);
                uncovered.retain(|c| !cl.contains(c));
            }
        }
        covered &= uncovered.is_empty();
        // The put's rails; the trigger's is the part rail where most of the
        // folded wait's sets come (fewest relays). A copy goes on the rail
        // its trigger comes on.
        let bytes = src.count as usize * p.block_bytes;
        let part_rails: Vec<u8> = match lane {
            Some(lane) => put_parts(
                lane,
                p.shape.rails,
                p.stripe_threshold,
                me,
                to as usize,
                bytes,
            )
            .into_iter()
            .map(|x| x.rail as u8)
            .collect(),
            None => vec![copy_rail(cand.wait, &landings, &sources, &self.new)],
        };
        let rail = part_rails.iter().copied().max_by_key(|&x| {
            let sets = cand.wait.map_or(0, |(_, a)| a[usize::from(x)]);
            (sets, std::cmp::Reverse(x))
        });
        // A striped put's other parts each take a feed of the lead's COPY
        // and a sibling FIFO entry on their rail.
        let others: Vec<u8> = part_rails
            .iter()
            .copied()
            .filter(|&x| Some(x) != rail)
            .collect();
        let striping_fits = others.len() as u32 <= budget.feeds
            && others
                .iter()
                .all(|&x| self.relays_into[usize::from(x)] < self.sh.fifo_share);
        // The completions it is ordered after: the puts among them the NICs
        // can report (a set on completion) go into its trigger; the host
        // waits for the rest before arming it.
        let mut after_all = Vec::new();
        if cand.steps == 2 {
            after_all.extend(self.remap(&step.after));
        }
        after_all.extend(self.remap(&cand.put.after));
        after_all.extend(hazards.iter().copied());
        after_all.extend(self.inherited.iter().copied());
        let after_all = without_implied(after_all, &self.implies_done);
        let (done_sources, rest_after): (Vec<u32>, Vec<u32>) = after_all
            .iter()
            .partition(|&&q| done_room(p, me, self.new.get(q as usize).map(|s| &s.op), budget));
        let waits_for_something = folded.is_some()
            || !sources.is_empty()
            || !landings.is_empty()
            || !done_sources.is_empty();
        let plan = match rail {
            Some(rail) if covered && waits_for_something && striping_fits => plan_trigger(
                rail,
                cand.wait,
                &landings,
                &sources,
                &done_sources,
                &self.new,
                p,
                me,
                budget,
                self.sh.fifo_share,
                &self.relays_into,
                self.next_join,
            ),
            _ => None,
        }?;
        // Counters it takes: a join, a copy's landing, and one (never set:
        // it fires when armed) per host put it chains to hear of its
        // completion.
        let conversions = done_sources
            .iter()
            .filter(|&&q| {
                matches!(
                    self.new.get(q as usize).map(|s| &s.op),
                    Some(Op::Put { .. })
                )
            })
            .count() as u16;
        let takes = u16::from(plan.trigger == self.next_join) + u16::from(is_copy) + conversions;
        let entries = plan.entries + 2 * others.len() as u32;
        let fits = self.chains + entries <= self.sh.per_rank
            && u32::from(self.next_join) + u32::from(takes) <= u32::from(budget.counters);
        fits.then_some(Chaining {
            plan,
            sources,
            landings,
            done_sources,
            after_all,
            rest_after,
            others,
            entries,
        })
    }

    /// Emit the chained put planned for `cand`: the done sets
    /// and feeds it takes from earlier steps, its relays, the chained put,
    /// and what its firing and completion imply from now on.
    fn emit(&mut self, cand: &Candidate<'s>, operands: Operands, c: Chaining) {
        let (to, src, dst, lane, signal) = operands;
        let (p, me) = (self.params(), self.me);
        let is_copy = lane.is_none();
        let folded = cand.wait.map(|(c, _)| c);
        let Chaining {
            plan,
            sources,
            landings,
            done_sources,
            after_all,
            rest_after,
            others,
            entries,
        } = c;
        let rail = plan.rail;
        if plan.trigger == self.next_join {
            self.next_join += 1;
        }
        let landing = is_copy.then(|| {
            self.next_join += 1;
            self.next_join - 1
        });
        let signal = landing.or(signal);
        for &q in &done_sources {
            let Some(step) = self.new.get_mut(q as usize) else {
                continue;
            };
            if let Some(chained) = started_by_arming(p, me, &step.op, self.next_join) {
                step.op = chained;
                self.next_join += 1;
            }
            if let Op::ChainPut { done, .. } = &mut step.op {
                done.push(Feed {
                    into: plan.trigger,
                    rail,
                });
            }
        }
        // What the host does not wait for before arming it, later steps
        // still owe; its completion implies what its trigger waited for.
        self.inherited = after_all
            .iter()
            .copied()
            .filter(|q| !rest_after.contains(q))
            .collect();
        let mut implied = done_sources.clone();
        for q in &done_sources {
            implied.extend(self.implies_done.get(q).into_iter().flatten());
        }
        let at = (self.new.len() + plan.relays.len()) as u32;
        for &q in &sources {
            if let Some(Op::ChainPut { feeds, .. }) =
                self.new.get_mut(q as usize).map(|s| &mut s.op)
            {
                feeds.push(Feed {
                    into: plan.trigger,
                    rail,
                });
            }
        }
        for &(counter, x) in &plan.relays {
            self.new.push(Step {
                op: Op::Relay {
                    counter,
                    count: 0,
                    from: x,
                    to: rail,
                    into: plan.trigger,
                },
                after: Vec::new(),
            });
        }
        for (x, n) in plan.sibling_sets.iter().enumerate() {
            self.relays_into[x] += n;
        }
        for &x in &others {
            self.relays_into[usize::from(x)] += 1;
        }
        self.new.push(Step {
            op: Op::chained(
                plan.trigger,
                rail,
                lane.unwrap_or(Lane::Rail(rail)),
                to,
                src,
                dst,
                signal,
            ),
            after: rest_after,
        });
        // Its firing implies its wait's counter, the landings it waited for
        // and everything its sources' firings (and the completions it
        // waited for) imply.
        let mut cl: Vec<Counter> = folded.into_iter().collect();
        for (q, qc) in &self.closures {
            if done_sources.contains(q) {
                cl.extend(qc);
            }
        }
        for l in &landings {
            cl.push(l.counter);
            self.fired_by.insert(l.counter, at);
            self.pending.retain(|x| x.counter != l.counter);
        }
        if let Some(c) = landing {
            let l = Landing {
                counter: c,
                rail,
                copy: at,
            };
            self.pending.push(l);
            for b in dst.block..dst.end() {
                self.landed.insert((dst.buf, b), vec![l]);
            }
        }
        for (q, qc) in &self.closures {
            if sources.contains(q) {
                cl.extend(qc);
            }
        }
        cl.sort_unstable();
        cl.dedup();
        if let Some(c) = folded {
            self.fired_by.insert(c, at);
        }
        self.closures.push((at, cl));
        implied.sort_unstable();
        implied.dedup();
        self.implies_done.insert(at, implied);
        self.map.extend(std::iter::repeat_n(at, cand.steps));
        self.read_by_chain.push((src, at));
        self.chains += entries;
    }

    /// The step at `i` stays with the host: it first waits for every
    /// chained put whose firing delivers a block it touches, or that reads
    /// a block it overwrites (and for every inherited completion).
    fn host_step(&mut self, i: usize) {
        let Some(step) = self.steps.get(i) else {
            return;
        };
        let mut after = self.remap(&step.after);
        after.append(&mut self.inherited);
        for (region, write) in touches(&step.op) {
            for b in region.block..region.end() {
                for c in self.from.get(&(region.buf, b)).into_iter().flatten() {
                    if let Some(&chain) = self.fired_by.get(c) {
                        after.push(chain);
                    }
                }
                // What a chained copy put there has landed.
                for l in self.landed.get(&(region.buf, b)).into_iter().flatten() {
                    after.push(l.copy);
                }
                if write {
                    for (read, chain) in &self.read_by_chain {
                        if read.buf == region.buf && (read.block..read.end()).contains(&b) {
                            after.push(*chain);
                        }
                    }
                    // Overwritten by the host, after the copy landed.
                    self.landed.remove(&(region.buf, b));
                }
            }
        }
        // A step that tells node peers or the network something (a flag,
        // a shm copy, a barrier, a put that carries program order) may say
        // "my data is here": every chained put so far must have fired.
        let carries = match step.op {
            Op::Put { src, .. } => self.sh.carries_order(self.me, i, &src),
            _ => false,
        };
        let speaks = carries
            || !matches!(
                step.op,
                Op::Put { .. } | Op::Wait { .. } | Op::Copy { .. } | Op::ChainPut { .. }
            );
        if speaks {
            after.extend(self.read_by_chain.iter().map(|&(_, chain)| chain));
        }
        // A put waits for what its target told this rank before it.
        if let Op::Put { to, .. } = step.op {
            after.extend(
                self.notices_of(to)
                    .iter()
                    .filter_map(|c| self.fired_by.get(c).copied()),
            );
        }
        after.sort_unstable();
        after.dedup();
        // What the host has waited for reads nothing any more.
        self.read_by_chain
            .retain(|(_, chain)| after.binary_search(chain).is_err());
        if let Op::Wait { counter, .. } = step.op {
            self.waited.insert(counter);
        }
        self.map.push(self.new.len() as u32);
        self.new.push(Step {
            op: step.op.clone(),
            after,
        });
    }
}
