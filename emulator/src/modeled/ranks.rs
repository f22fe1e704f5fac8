//! Ranks as the sequencer sees them: each rank's clock and state, what a
//! blocked rank waits for, and the tests that decide when it may resume.
//!
//! Contract:
//! - A rank is `Idle`, `Ready` (a resume is queued), `Running` (its fiber
//!   has the baton), `Blocked` on a [`Watch`], or `Done` for this run.
//! - A blocked rank states what it waits for: completion words the kernel
//!   tests itself when a NIC writes where they lie, or writes that node's
//!   memory after a rank of the node ran ([`Ranks::wakes_on_change`]),
//!   "anything on my node", its node's admin lock, or the end-of-run
//!   rendezvous.
//! - [`Ranks::resume`] only changes state (blocked to ready) and says
//!   whether the caller must queue the rank's resume: this module knows
//!   nothing of the queue, NICs or the watchdog.
//! - `node_ranks[node][local]` is the rank with that local index.

use railcoll_host::Topology;
use railcoll_host::env::WordWatch;

use super::board::Ps;

/// What a blocked rank waits for.
#[derive(Debug)]
pub(super) enum Watch {
    /// Every word passes, or the notice (if any) does.
    Words(Vec<WordWatch>, Option<WordWatch>),
    Any,
    Admin,
    Rendezvous,
}

/// For watchdog reports.
impl std::fmt::Display for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Watch::Words(w, None) => write!(f, "{} completion word(s) or flag(s)", w.len()),
            Watch::Words(w, Some(_)) => write!(
                f,
                "{} completion word(s) or flag(s), or a revoke notice",
                w.len()
            ),
            Watch::Any => f.write_str("a register or memory change on its node"),
            Watch::Admin => f.write_str("its node's admin mailbox lock"),
            Watch::Rendezvous => f.write_str("the other ranks (end-of-run rendezvous)"),
        }
    }
}

#[derive(Debug)]
pub(super) enum RankState {
    Idle,
    Ready,
    Running,
    Blocked(Watch),
    Done,
}

#[derive(Debug)]
pub(super) struct RankSlot {
    pub(super) node: usize,
    pub(super) socket: usize,
    pub(super) time: Ps,
    pub(super) state: RankState,
    pub(super) step: Option<(u32, &'static str)>,
    /// The watchdog released this rank from a wait: the wait fails.
    pub(super) stalled: bool,
}

/// Every rank's slot, the ranks of each node, and the run's bookkeeping.
#[derive(Debug)]
pub(super) struct Ranks {
    pub(super) slots: Vec<RankSlot>,
    /// `node_ranks[node][local]`: the rank with that local index.
    node_ranks: Vec<Vec<usize>>,
    /// Ranks of the current run not done yet.
    pub(super) active: usize,
    /// Ranks waiting at the rendezvous.
    pub(super) rendezvous: Vec<usize>,
}

impl Ranks {
    /// The ranks of `topology`, `sockets` sockets per node.
    pub(super) fn new(topology: &Topology, sockets: usize) -> Self {
        let nodes = topology.nodes();
        let rpn = topology.ranks_per_node();
        let mut node_ranks = vec![Vec::new(); nodes];
        let slots = (0..topology.size())
            .map(|r| {
                let (node, local) = topology.locate(r).unwrap_or((0, 0));
                if let Some(list) = node_ranks.get_mut(node) {
                    list.push(r);
                }
                RankSlot {
                    node,
                    socket: local * sockets / rpn,
                    time: 0,
                    state: RankState::Idle,
                    step: None,
                    stalled: false,
                }
            })
            .collect();
        // node_ranks[node][local] must be the rank with that local index.
        for list in &mut node_ranks {
            list.sort_by_key(|&r| topology.locate(r).map_or(0, |(_, l)| l));
        }
        Self {
            slots,
            node_ranks,
            active: 0,
            rendezvous: Vec::new(),
        }
    }

    /// How many ranks `node` has.
    pub(super) fn on_node(&self, node: usize) -> usize {
        self.node_ranks.get(node).map_or(0, Vec::len)
    }

    /// The `i`-th rank of `node` (`i < on_node(node)`).
    pub(super) fn of_node(&self, node: usize, i: usize) -> usize {
        self.node_ranks[node][i]
    }

    /// The rank with local index `local` on `node`, if any.
    pub(super) fn local(&self, node: usize, local: usize) -> Option<usize> {
        self.node_ranks
            .get(node)
            .and_then(|l| l.get(local))
            .copied()
    }

    /// Might a change of `rank`'s node's memory or registers end its wait?
    /// `written`, when known, is every memory range a NIC changed
    /// (addresses, lengths); a wait for words none of which lies in them
    /// cannot have ended, provided no rank of the node ran since the wait
    /// was last tested (the caller's guard: `Kernel::node_changed`).
    pub(super) fn wakes_on_change(&self, rank: usize, written: Option<&[(usize, usize)]>) -> bool {
        match &self.slots[rank].state {
            RankState::Blocked(Watch::Words(words, notice)) => {
                let hit = |word: &WordWatch| {
                    let at = word.mem.address_of(word.offset);
                    written
                        .is_none_or(|ranges| ranges.iter().any(|&(a, l)| a < at + 8 && at < a + l))
                };
                if !words.iter().chain(notice).any(hit) {
                    return false;
                }
                notice.as_ref().is_some_and(WordWatch::ready) || words.iter().all(WordWatch::ready)
            }
            RankState::Blocked(Watch::Any) => true,
            _ => false,
        }
    }

    /// Does `rank` wait for its node's admin lock?
    pub(super) fn waits_admin(&self, rank: usize) -> bool {
        matches!(self.slots[rank].state, RankState::Blocked(Watch::Admin))
    }

    /// Is `rank` blocked?
    pub(super) fn blocked(&self, rank: usize) -> bool {
        matches!(self.slots[rank].state, RankState::Blocked(_))
    }

    /// Blocked `rank` becomes ready; true if the caller must queue its
    /// resume (false: it was not blocked, or does not exist).
    pub(super) fn resume(&mut self, rank: usize) -> bool {
        let Some(slot) = self.slots.get_mut(rank) else {
            return false;
        };
        if !matches!(slot.state, RankState::Blocked(_)) {
            return false;
        }
        slot.state = RankState::Ready;
        true
    }

    /// Every blocked rank: (rank, schedule step, what it waits for).
    pub(super) fn blocked_ranks(
        &self,
    ) -> impl Iterator<Item = (usize, Option<(u32, &'static str)>, &Watch)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(r, slot)| match &slot.state {
                RankState::Blocked(watch) => Some((r, slot.step, watch)),
                _ => None,
            })
    }
}
