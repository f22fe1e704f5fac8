//! The offload compiler: from a schedule set, a set in which the NIC
//! starts by itself every put on one rail whose data and preceding wait
//! it can learn about without the host. "Wait, then put" becomes "chain
//! on the trigger: the NIC puts" (the event's COPY action injects the put,
//! [ELAN-SEM §5.4]), armed by the host ahead of the data, so the put
//! leaves when its data lands instead of when the host next looks.
//!
//! Contract: the compiled set writes the same bytes to the same places as
//! the set it comes from (the verifier proves both, and the tests run both
//! byte-exact); it never needs more chain blocks, chain queue entries,
//! sibling FIFO entries, feeds or counters than the budget offers.
//!
//! A put P on one rail `r` is chained when what it waits for is known to
//! the NICs:
//! - the wait just before it (on counter `c`), folded in: with nothing
//!   else to wait for, P triggers on `c` on `r` and every other rail's
//!   NIC that receives sets of `c` *relays* them ([`Op::Relay`]: once its
//!   share has come, it sets `c` once on `r`'s NIC, a `SET_EVENT` to a
//!   sibling, ABI 1.2 §5.1): a cross-rail trigger;
//! - data that came with counters the host never waited for because
//!   earlier chained puts consumed them: P then waits for those chained
//!   puts' firings (each one's firing implies its own trigger's counters,
//!   its *closure*): each of them sets P's trigger on `r` when it fires
//!   (a [`Feed`]: one more block in its COPY), so the trigger counts the
//!   folded wait's sets, its relays and the feeds together (a combined
//!   trigger, ABI §5.1; with no wait to fold, the trigger is a fresh
//!   *join* counter that only feeds set). A source is used only if its closure
//!   holds nothing P would not wait for anyway (waiting longer could wait
//!   for P's own answer);
//! - everything else P reads is local or was waited for by the host.
//!
//! A step ordered after the completion of a put on one rail (its `after`)
//! waits for a set that put's completion makes (its source event's COPY,
//! a *done* set; a host put that gets its first is chained, started by
//! its own arming) instead of the host waiting before arming it. The
//! host's wait also ordered every later step, so a completion reported
//! this way is inherited by every later step until a host step waits for
//! it (later chained puts wait for it too, minus what their other done
//! sets' completions already imply).
//!
//! A put striped over several rails is chained as one op whose trigger is
//! on the part rail most of the folded wait's sets come to: there its part
//! leads, and its COPY sets, on each other part's NIC, a completion event
//! the driver lends that part as its trigger (a sibling set, one of the
//! lead's feeds).
//!
//! The set is first counted (`sched::counted`): barrier words,
//! and with [`Copies::Nic`] node flags and copies to and from node peers,
//! become puts and waits on destination counters, so that what follows
//! them chains like any other step. A put made from a raise or a word,
//! and any put without data, carries its rank's program order (a
//! barrier round's "I have got this far"): it needs everything its rank
//! waited for before it.
//!
//! A put stays with the host when its data comes with a counter no chained
//! put implies, or when the budget is used up: the rank's share of chain
//! blocks and of each NIC's chain queue (the node's ranks share it), of
//! each NIC's sibling FIFO (relays, feeds and striped parts into another
//! rail), [`Budget::feeds`] per chained put (its feeds and its other
//! parts; NICs whose COPY injects one block get neither relays, joins nor
//! striped chains), and the destination counters the joins take.
//!
//! With [`Copies::Nic`] (`name@nic-dma`) a local copy is a candidate too:
//! a chained put to the rank itself (the NIC's DMA), on the rail its
//! trigger comes on, whose landing sets a counter of its own; a chained
//! put that reads what it wrote waits for that landing (its trigger, or
//! relayed into it), host steps that touch its blocks wait for its
//! completion, and a landing nothing waits for sets nothing. A copy moves
//! only if every counter that ever delivers into what it reads or writes
//! is already covered (no remote write can race it), and waits for the
//! completion of the chained puts still reading, and the chained copies
//! still writing, its destination (done sets, below; the host waits for
//! the ones whose puts have no room for one more).
//!
//! Host steps that touch a block arriving with a counter a chained put
//! implies, or that overwrite what a chained put reads, wait for that
//! chained put's completion first (`after`), which implies its trigger
//! fired; a step that speaks to node peers or the network (a flag, a shm
//! copy, a barrier) waits for every chained put before it. What stays
//! with the host: shared-memory phases and local copies (with
//! [`Copies::Host`]), the node's flat-tree barrier and broadcast, puts
//! that wait for nothing at all, and the final waits.

use std::collections::{HashMap, HashSet};

use super::budget::{Budget, chain_peak};
use super::counted;
use super::*;

mod analysis;
mod compile;
mod plan;
mod program;

pub use analysis::moved;
use analysis::{notices, provenance};
use compile::{RankCompiler, Shared};
use plan::*;
pub use program::{Fires, NicProgram, RailProgram, program};

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
    /// Puts to other ranks the NICs start by themselves (chained).
    pub chained: usize,
    /// Local copies the NICs' DMA does (chained puts to the rank itself).
    pub copies: usize,
    /// Puts the host still posts.
    pub host_puts: usize,
    /// Everything the host still posts to another rank: its puts, barrier
    /// words, queued messages and hardware broadcasts.
    pub host_posts: usize,
}

/// A put (or a local copy) the compiler may chain: the step (or the wait
/// and the step) it replaces, and what its trigger must collect.
struct Candidate<'s> {
    /// Steps it replaces: 1 (the put) or 2 (a wait, then the put).
    steps: usize,
    /// The wait it folds in, if any: its counter and sets per rail.
    wait: Option<(Counter, &'s [u32; MAX_RAILS])>,
    /// The put or the copy.
    put: &'s Step,
}

/// A chained copy's landing: the counter its loopback put sets, on which
/// rail, and the copy's step (its completion implies the landing).
#[derive(Clone, Copy)]
struct Landing {
    counter: Counter,
    rail: u8,
    copy: u32,
}

/// Who does the local copies of a compiled set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Copies {
    /// The host, as in the set compiled from (`name@nic`).
    #[default]
    Host,
    /// The NICs' DMA where the copy waits for data the NICs bring or for
    /// a completion they report: a chained put to the rank itself, whose
    /// landing sets a counter of its own that the puts reading its output
    /// wait for; and the node phases' copies and flags as puts to node
    /// peers and their counters (`name@nic-dma`, see
    /// `sched::counted`).
    Nic,
}

/// Compile `set` (see the module's contract), within `budget`, copies on
/// the host.
pub fn compile(set: &ScheduleSet, budget: &Budget) -> Result<Offloaded, Error> {
    compile_with(set, budget, Copies::Host)
}

/// Compile `set` (see the module's contract), within `budget`, with the
/// local copies done as `copies` says.
pub fn compile_with(
    set: &ScheduleSet,
    budget: &Budget,
    copies: Copies,
) -> Result<Offloaded, Error> {
    let counted = counted::count(set, budget, copies == Copies::Nic)?;
    let set = counted.as_ref().map_or(set, |c| &c.set);
    let p = &set.params;
    let rpn = p.shape.ranks_per_node().max(1) as u32;
    let shared = Shared {
        set,
        ordered: counted.as_ref().map(|c| c.ordered.as_slice()),
        notices: notices(set),
        budget,
        copies,
        // Each rank's share: its chain blocks, and an equal part of each
        // NIC's chain queue, which the node's ranks share.
        per_rank: budget.chain_blocks.min(budget.chain_queue / rpn),
        // Each rank's share of every NIC's sibling FIFO (every sibling set
        // is held to the end of the run).
        fifo_share: budget.peer_fifo / rpn,
    };
    let per_rank = shared.per_rank;
    let mut out = set.clone();
    for me in 0..set.ranks.len() {
        out.ranks[me].steps = RankCompiler::new(&shared, me).run();
    }
    let set = out.seal()?;
    // The conversion counts the chain queue entries it makes against the
    // rank's share, so the executor's peak should be within it; where the
    // count falls short (the native all-gather with the NICs' copies on 4
    // nodes x 7 ranks, found by fuzzing), the set is refused, never run
    // over the queue.
    if let Some((rank, peak)) = set
        .ranks
        .iter()
        .enumerate()
        .map(|(r, s)| (r, chain_peak(s, &set.params).total))
        .find(|&(_, peak)| peak > per_rank)
    {
        return Err(Error::OverBudget {
            algorithm: set.params.choice().name(),
            resource: "chain queue entries (a rank's share)",
            needed: u64::from(peak),
            available: u64::from(per_rank),
            where_: format!(" at rank {rank}"),
        });
    }
    Ok(Offloaded {
        moved: moved(&set),
        set,
    })
}
