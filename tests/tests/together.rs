//! Fail together (issue 27): an error on one rank reaches every rank of
//! the communicator promptly, each returning a typed error that names the
//! failing rank and its cause, instead of waiting for a rank that will
//! not come (until the wait timeout, or for ever in a loop whose every
//! wait completes).

use railcoll_host::{Algorithm, Choice, Collective, Comm, Error, RevokeCause};
use railcoll_tests::cluster;

/// Every rank runs `collective` with `algo` on correct buffers, except
/// rank `bad`, whose receive buffer is one byte short.
fn one_rank_short(
    comm: &Comm,
    collective: Collective,
    algo: Choice,
    bad: usize,
    nonblocking: bool,
) -> Result<(), Error> {
    let n = comm.size();
    let block = 256;
    let send_blocks = if collective == Collective::Alltoall {
        n
    } else {
        1
    };
    let send = comm.alloc(send_blocks * block)?;
    let recv = comm.alloc(n * block)?;
    let recv = if comm.rank() == bad {
        recv.slice(0, n * block - 1)?
    } else {
        recv
    };
    if nonblocking {
        comm.icollective_with(collective, algo, &send, &recv, 0)?
            .wait()
    } else {
        comm.collective_with(collective, algo, &send, &recv, 0)
    }
}

type Outcome = Result<(Result<(), Error>, Result<(), Error>), Error>;

/// Each rank's result: the failing rank its own error, every other the
/// revoke naming it (or, where its part did not need the failing rank,
/// as a gather's leaves, `Ok`, unless `all_need_all`); and every later
/// collective of every rank the revoke.
fn check_failed_together(results: Vec<Outcome>, bad: usize, all_need_all: bool, what: &str) {
    let revoked = Error::Revoked {
        rank: bad,
        cause: RevokeCause::Arguments,
    };
    for (rank, r) in results.into_iter().enumerate() {
        let (first, later) = r.expect("rank ran");
        if rank == bad {
            assert!(
                matches!(first, Err(Error::OutOfBounds { .. })),
                "{what}: rank {rank} (the short buffer) got {first:?}"
            );
        } else if all_need_all || first.is_err() {
            assert_eq!(first, Err(revoked.clone()), "{what}: rank {rank}");
        }
        assert_eq!(
            later,
            Err(revoked.clone()),
            "{what}: rank {rank}'s next call"
        );
    }
}

/// A receive buffer too small on one rank only, for every collective with
/// the algorithms that used to hang (the switch's barrier and its
/// switchless fallback among them) and the tuned one, blocking and
/// non-blocking, on a reused cluster: every rank returns, the failing
/// rank with its own error, every other with the revoke naming it; the
/// next collective of every rank is refused with the revoke; and the
/// cluster's next closure (a new communicator) runs clean.
#[test]
fn an_error_on_one_rank_reaches_every_rank() {
    let c = cluster(4, 2, 2, 1 << 20);
    // Every gather and all-gather, host-driven; two offloaded forms; the
    // all-to-alls that run on 8 ranks.
    let cases: Vec<(Collective, Choice)> = [Collective::Gather, Collective::Allgather]
        .into_iter()
        .flat_map(|c| {
            c.algorithms()
                .into_iter()
                .map(move |a| (c, Choice::host(a)))
        })
        .chain([
            (Collective::Allgather, Choice::nic(Algorithm::Ring)),
            (Collective::Allgather, Choice::nic_dma(Algorithm::SmpDirect)),
            (Collective::Alltoall, Choice::host(Algorithm::Direct)),
            (Collective::Alltoall, Choice::host(Algorithm::Pairwise)),
            (Collective::Alltoall, Choice::host(Algorithm::Native)),
        ])
        .collect();
    for (i, &(collective, algo)) in cases.iter().enumerate() {
        for nonblocking in [false, true] {
            let bad = (i * 3 + 1) % 8;
            let what =
                format!("{collective} {algo} (non-blocking: {nonblocking}), rank {bad} short");
            let results = c.run(|comm| {
                let first = one_rank_short(comm, collective, algo, bad, nonblocking);
                let later = comm.barrier();
                (first, later)
            });
            let all_need_all = collective != Collective::Gather;
            check_failed_together(results, bad, all_need_all, &what);
            // The next communicator is not revoked.
            for r in c.run(|comm| {
                let send = comm.alloc(64)?;
                let recv = comm.alloc(64 * comm.size())?;
                comm.allgather(&send, &recv)?;
                comm.barrier()
            }) {
                assert_eq!(r.expect("rank ran"), Ok(()), "after {what}");
            }
        }
    }
}
