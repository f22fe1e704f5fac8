//! Fail together (issue 27): an error on one rank reaches every rank of
//! the communicator promptly, each returning a typed error that names the
//! failing rank and its cause, instead of waiting for a rank that will
//! not come (until the wait timeout, or for ever in a loop whose every
//! wait completes).

use railcoll_host::{Algorithm, CheckField, Choice, Collective, Comm, Error, RevokeCause};
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

/// How one rank departs from the others' program.
#[derive(Clone, Copy, Debug)]
enum Departure {
    /// 64-byte blocks where the others pass 128.
    BlockSize,
    /// A broadcast from root 1 where the others broadcast from 0.
    Root,
    /// `ring` where the others run `direct`.
    Algorithm,
    /// `ring@nic` where the others run `ring`.
    Drive,
    /// Skips the barrier the others run before an all-gather.
    SkippedCall,
}

/// Every rank runs a barrier, then an all-gather (or a broadcast) of
/// 128-byte blocks with `direct`; rank `odd` departs from it as `how`.
fn disagreeing(comm: &Comm, how: Departure, odd: usize) -> Result<(), Error> {
    let n = comm.size();
    let me_odd = comm.rank() == odd;
    let send = comm.alloc(128)?;
    let recv = comm.alloc(128 * n)?;
    let (block, root, algo) = match how {
        Departure::BlockSize if me_odd => (64, 0, Choice::host(Algorithm::Direct)),
        Departure::Root if me_odd => (128, 1, Choice::host(Algorithm::Binomial)),
        Departure::Root => (128, 0, Choice::host(Algorithm::Binomial)),
        Departure::Algorithm if me_odd => (128, 0, Choice::host(Algorithm::Ring)),
        Departure::Drive => (
            128,
            0,
            if me_odd {
                Choice::nic(Algorithm::Ring)
            } else {
                Choice::host(Algorithm::Ring)
            },
        ),
        _ => (128, 0, Choice::host(Algorithm::Direct)),
    };
    if !(me_odd && matches!(how, Departure::SkippedCall)) {
        comm.barrier()?;
    }
    let send = send.slice(0, block)?;
    let recv = recv.slice(0, block * n)?;
    match how {
        Departure::Root => comm.broadcast_with(algo, &send, root),
        _ => comm.allgather_with(algo, &send, &recv),
    }
}

/// Ranks that disagree get a typed error, never `Ok` with wrong data: a
/// rank whose neighbour disagrees returns the mismatch (both ranks, the
/// field, both values), every other rank the revoke carrying one; the
/// cluster's next closure runs clean.
#[test]
fn ranks_that_disagree_are_named() {
    let c = cluster(4, 2, 2, 1 << 20);
    let n = 8;
    let cases = [
        (Departure::BlockSize, CheckField::BlockBytes, ["128", "64"]),
        (Departure::Root, CheckField::Root, ["0", "1"]),
        (
            Departure::Algorithm,
            CheckField::Algorithm,
            ["direct", "ring"],
        ),
        (
            Departure::Drive,
            CheckField::Algorithm,
            ["ring", "ring@nic"],
        ),
        (
            Departure::SkippedCall,
            CheckField::Collective,
            ["barrier", "allgather"],
        ),
    ];
    for (i, (how, field, [usual, odd_value])) in cases.into_iter().enumerate() {
        let odd = (i * 5 + 2) % n;
        let results = c.run(|comm| disagreeing(comm, how, odd));
        let mut found = 0;
        for (rank, r) in results.into_iter().enumerate() {
            let m = match r.expect("rank ran") {
                Err(Error::Mismatch(m)) => {
                    found += 1;
                    assert_eq!(m.ranks.0, rank, "{how:?}: the finder names itself first");
                    m
                }
                Err(Error::Revoked {
                    cause: RevokeCause::Mismatch(m),
                    rank: finder,
                }) => {
                    assert_eq!(finder, m.ranks.0, "{how:?}");
                    m
                }
                other => panic!("{how:?}, rank {odd} odd: rank {rank} got {other:?}"),
            };
            // The mismatch is between the odd rank and a neighbour of it.
            let (a, b) = m.ranks;
            assert!(a == odd || b == odd, "{how:?}: {m}");
            assert!((a + n - b) % n == 1 || (b + n - a) % n == 1, "{how:?}: {m}");
            assert_eq!(m.field, field, "{how:?}: {m}");
            let value_of = |r: usize| if r == odd { odd_value } else { usual };
            assert_eq!(m.values.0.to_string(), value_of(a), "{how:?}: {m}");
            assert_eq!(m.values.1.to_string(), value_of(b), "{how:?}: {m}");
        }
        assert!(found > 0, "{how:?}: nobody found the mismatch");
        for r in c.run(|comm| disagreeing(comm, how, n)) {
            assert_eq!(r.expect("rank ran"), Ok(()), "after {how:?}");
        }
    }
}

/// A rank that polls with `test` learns of a revoke too. A poll never
/// waits, so no wait of it sees the notice; each poll now asks for it.
/// Before, ranks polling an all-gather whose last rank failed polled for
/// ever (modeled mode: until the watchdog gave the run up; found by the
/// differential fuzzer).
#[test]
fn a_rank_polling_with_test_learns_of_the_revoke() {
    let c = cluster(4, 1, 2, 1 << 20);
    let bad = 3;
    let threads = railcoll_tests::mode() == railcoll_emu::Mode::Threads;
    let results = c.run(|comm| {
        let n = comm.size();
        let first = (|| {
            let send = comm.alloc(256)?;
            let recv = comm.alloc(n * 256)?;
            if comm.rank() == bad {
                // The others are polling by then.
                comm.compute(std::time::Duration::from_micros(200));
                return comm.allgather(&send, &recv.slice(0, n * 256 - 1)?);
            }
            let mut r = comm.iallgather(&send, &recv)?;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !r.test()? {
                if std::time::Instant::now() > deadline {
                    return Err(Error::Config("still polling after 10 s".into()));
                }
                if threads {
                    std::thread::sleep(std::time::Duration::from_micros(20));
                }
            }
            Ok(())
        })();
        (first, comm.barrier())
    });
    check_failed_together(results, bad, true, "all-gather polled with test");
}

/// A modeled rank that polls, alone, for what no other rank will do is a
/// deadlock the watchdog reports, and the poll fails as a wait would
/// (`Timeout`), not a loop that never ends: polling never handed the
/// sequencer an action, so its watchdog never looked. Threads mode has no such watchdog for a
/// program's own poll loop (as in MPI, `test` in a loop is the
/// program's).
#[test]
fn a_modeled_rank_polling_alone_is_reported_as_a_deadlock() {
    if railcoll_tests::mode() != railcoll_emu::Mode::Modeled {
        return;
    }
    // Without the argument check, whose exchange would block in a wait.
    let c = railcoll_emu::Cluster::new(railcoll_emu::ClusterConfig {
        check: false,
        ..railcoll_tests::cluster_config(2, 1, 1, 1 << 20)
    })
    .expect("cluster");
    let results = c.run(|comm| -> Result<(), Error> {
        if comm.rank() == 0 {
            let mut r = comm.ibarrier()?;
            while !r.test()? {}
        }
        Ok(())
    });
    // Its poll fails as a wait would have.
    assert!(
        matches!(results[0], Ok(Err(Error::Timeout(_)))),
        "rank 0 returned {:?}",
        results[0]
    );
    let report = c.stall_report().expect("a stall report");
    assert!(
        report.contains("rank 0 polls while no event can make progress"),
        "{report}"
    );
    // The cluster is usable again.
    let again = c.run(|comm| comm.barrier());
    assert!(again.iter().all(Result::is_ok), "{again:?}");
}
