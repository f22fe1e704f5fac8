//! What a run that does not move all its data stands on
//! ([`crate::cluster::DataMode`]): rank 0 names the schedule set it
//! executed ([`Proving::note`], after the timed calls: a cache hit, no
//! virtual time passes), and the schedule verifier proves that set before
//! any figure of the run is reported ([`Proving::prove`],
//! [`prove_executed`]). With full data there is nothing to prove.

use std::sync::{Arc, Mutex};

use railcoll_host::Comm;
use railcoll_host::sched::ScheduleSet;

use super::CollBench;
use crate::cluster::{Cluster, EmuError};

/// The set rank 0 executed, once it has named it.
#[derive(Debug, Default)]
pub(crate) struct Proving {
    executed: Mutex<Option<Arc<ScheduleSet>>>,
}

impl Proving {
    /// On `comm` after its calls of algorithm `a` at `size`: rank 0 of a
    /// cluster that does not move all its data names the set it ran.
    pub(crate) fn note(
        &self,
        comm: &Comm,
        cluster: &Cluster,
        bench: &CollBench<'_>,
        (a, size): (usize, usize),
    ) -> Result<(), railcoll_host::Error> {
        if comm.rank() == 0 && cluster.data().mode().elides() {
            let set = (bench.schedule)(comm, a, size)?;
            *self.executed.lock().unwrap_or_else(|p| p.into_inner()) = Some(set);
        }
        Ok(())
    }

    /// After the run whose ranks returned `per_rank`: the proof of the set
    /// noted, for a cluster that does not move all its data; nothing to
    /// prove with full data, or when a rank failed (its own error says
    /// why: no figure is reported either way).
    pub(crate) fn prove<T, E>(
        self,
        cluster: &Cluster,
        bench: &CollBench<'_>,
        (a, size): (usize, usize),
        per_rank: &[Result<Result<T, E>, railcoll_host::Error>],
    ) -> Result<Option<Proof>, EmuError> {
        let ran = per_rank.iter().all(|r| matches!(r, Ok(Ok(_))));
        if !cluster.data().mode().elides() || !ran {
            return Ok(None);
        }
        let set = self
            .executed
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
        let what = format!("{} '{}' at {size} B", bench.collective, bench.algorithms[a]);
        prove_executed(set.as_deref(), cluster.data().mode(), what).map(Some)
    }
}

/// What stands behind the figures of a run that did not move all its
/// data: the schedule verifier's proof of the set it executed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proof {
    /// Every rule of the verifier ([`railcoll_host::sched::verify`]).
    Complete,
    /// Every rule but those that order accesses by happens-before (races,
    /// an ambiguous counter signal, a barrier's synchronisation, buffers
    /// given back): the set's closure is beyond the verifier's limit
    /// ([`railcoll_host::sched::verify::HB_LIMIT_BYTES`]). Every output
    /// block receives the right block exactly once in the replay's own
    /// order of events; a race could still make another timing wrong.
    WithoutOrdering,
}

impl Proof {
    /// As records carry it.
    pub fn name(self) -> &'static str {
        match self {
            Proof::Complete => "complete",
            Proof::WithoutOrdering => "without ordering rules",
        }
    }
}

/// The schedule verifier's proof of `set`, the set a run that did not
/// move all its data executed (`None`: the run did not get as far as
/// naming it, so nothing is proved), replayed symbolically with the
/// budget it was generated for ([`railcoll_host::sched::verify`]); the
/// ordering rules are left out only where the set is too large for them.
pub fn prove_executed(
    set: Option<&ScheduleSet>,
    data: crate::cluster::DataMode,
    what: String,
) -> Result<Proof, EmuError> {
    let unproven = |why: String| EmuError::Unproven {
        data,
        what: what.clone(),
        why,
    };
    let set =
        set.ok_or_else(|| unproven("the run ended before rank 0 named its schedule".into()))?;
    use railcoll_host::sched::verify::{HB_LIMIT_BYTES, Ordering, verify_with};
    let report = verify_with(set, &set.params.budget, Ordering::IfWithin(HB_LIMIT_BYTES))
        .map_err(|v| unproven(v.to_string()))?;
    Ok(if report.ordering_checked {
        Proof::Complete
    } else {
        Proof::WithoutOrdering
    })
}
