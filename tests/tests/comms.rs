//! Communicators split off the job's (`Comm::split`, `split_type`, `dup`):
//! every collective and algorithm on communicators split by node, by
//! socket and by colour (even/odd, a seeded random colour per rank, a
//! singleton, an irregular set), byte-exact wherever the algorithm accepts
//! the shape and a worded refusal where it does not; collectives on
//! disjoint communicators and on nested ones at once; the hardware barrier
//! on sub-communicators; 1000 split/free cycles leaving the NIC resources
//! where they were; the multi-leader all-gathers' groups being the public
//! socket split's. Threads mode by default, modeled mode under
//! `RAILCOLL_TEST_MODE=modeled` (CI runs both).

use railcoll_host::arena::SymBuffer;
use railcoll_host::sched::{Algorithm, Choice, Collective, Drive};
use railcoll_host::topology::Grouping;
use railcoll_host::{Comm, Error, Placement, SplitType};
use railcoll_tests::coll::{Case, Form, run_case_on};
use railcoll_tests::{Draw, cluster_config, shape};

/// What one split gives the calling rank: its colour (`None`: none).
type Colour = fn(&Comm) -> Option<u32>;

/// The splits every test shape runs.
fn splits() -> Vec<(&'static str, Colour)> {
    vec![
        ("even/odd", |c| Some(c.rank() as u32 % 2)),
        ("random", |c| {
            let mut d = Draw(0x5eed ^ ((c.rank() as u64 + 1) * 0x9e37_79b9));
            Some(d.below(3) as u32)
        }),
        ("singleton", |c| Some(c.rank() as u32)),
        // Ranks 0, 5, 6 and 11 of 4x4: one, two and one per node.
        ("irregular", |c| {
            [0, 5, 6, 11].contains(&c.rank()).then_some(7)
        }),
    ]
}

/// Every collective and algorithm (host-driven and compiled onto the
/// NICs) on `sub`: byte-exact where the schedule is accepted, and where it
/// is not, a refusal in words, which a node-aware algorithm on a scattered
/// communicator must get. Returns (ran, refused).
fn every_algorithm(
    sub: &Comm,
    send: &railcoll_host::arena::SymBuffer,
    recv: &railcoll_host::arena::SymBuffer,
    bytes: usize,
) -> Result<(usize, usize), String> {
    let grouping = sub.shape().grouping;
    let (mut ran, mut refused) = (0, 0);
    for (i, c) in Collective::ALL.into_iter().enumerate() {
        for (j, a) in c.algorithms().into_iter().enumerate() {
            for drive in [Drive::Host, Drive::Nic] {
                let choice = Choice {
                    algorithm: a,
                    drive,
                };
                let root = (i + j) % sub.size();
                match sub.schedule(c, choice, bytes, root) {
                    Ok(_) => {
                        let form = [Form::Blocking, Form::Wait, Form::Test][(i + j) % 3];
                        let case = Case {
                            c,
                            a: choice,
                            root,
                            bytes,
                            form,
                        };
                        run_case_on(sub, case, send, recv)?;
                        ran += 1;
                    }
                    Err(Error::Unsupported { reason, .. }) => {
                        assert!(!reason.is_empty());
                        refused += 1;
                    }
                    // A split communicator's share of the NIC: its slot's
                    // counters, its part of the chain queue.
                    Err(Error::OverBudget { .. }) => refused += 1,
                    Err(e) => return Err(format!("{c} {choice}: {e}")),
                }
                let node_aware =
                    railcoll_host::sched::catalogue::entry(c, a).is_some_and(|e| e.node_aware);
                if node_aware && grouping == Grouping::Scattered {
                    assert!(
                        matches!(
                            sub.schedule(c, choice, bytes, root),
                            Err(Error::Unsupported { .. })
                        ),
                        "{c} {choice} was not refused in words on a scattered communicator"
                    );
                }
            }
        }
    }
    Ok((ran, refused))
}

/// One split of 4 nodes x 4 ranks (two sockets, two rails) per cluster
/// run: every collective and algorithm on it, byte-exact or refused in
/// words, then the tuned calls; returns what ran and was refused.
fn on_split(split: &'static str) -> (usize, usize) {
    let mut cfg = cluster_config(4, 4, 2, 16 << 20);
    cfg.shape = shape(4, 4, 2, 2, Placement::Block);
    let cluster = railcoll_emu::Cluster::new(cfg).expect("cluster");
    let bytes = 100;
    let results = cluster.run(|comm| -> Result<Option<(usize, usize)>, String> {
        let n = comm.size();
        let err = |e: Error| e.to_string();
        // The job's buffers, big enough for any sub-communicator.
        let send = comm.alloc(n * bytes).map_err(err)?;
        let recv = comm.alloc(n * bytes).map_err(err)?;
        let sub = match split {
            "node" => Some(comm.split_type(SplitType::Node).map_err(err)?),
            "socket" => Some(comm.split_type(SplitType::Socket).map_err(err)?),
            _ => {
                let colour = splits()
                    .into_iter()
                    .find(|s| s.0 == split)
                    .expect("split")
                    .1;
                comm.split(colour(comm), -(comm.rank() as i64))
                    .map_err(err)?
            }
        };
        let counts = match sub {
            Some(sub) => Some(exercise(split, comm, sub, &send, &recv, bytes)?),
            None => {
                assert_eq!(
                    split, "irregular",
                    "only the irregular split leaves ranks out"
                );
                None
            }
        };
        // Every rank, in the split or not: the job's communicator still
        // works, and says so byte by byte.
        let case = Case {
            c: Collective::Allgather,
            a: Algorithm::Ring.into(),
            root: 0,
            bytes,
            form: Form::Blocking,
        };
        run_case_on(comm, case, &send, &recv)?;
        Ok(counts)
    });
    let results: Vec<_> = results.into_iter().map(|r| r.expect("rank ran")).collect();
    let errors: Vec<_> = results
        .iter()
        .enumerate()
        .filter(|(_, r)| r.is_err())
        .collect();
    assert!(errors.is_empty(), "{split}: {errors:?}");
    let counts: Vec<_> = results
        .into_iter()
        .filter_map(|r| r.ok().flatten())
        .collect();
    assert!(
        counts.iter().all(|c| c.0 > 0),
        "{split}: nothing ran on some rank"
    );
    counts[0]
}

/// A member's part of [`on_split`]: the catalogue, then the tuned calls,
/// then freeing the communicator.
fn exercise(
    split: &str,
    comm: &Comm,
    sub: Comm,
    send: &SymBuffer,
    recv: &SymBuffer,
    bytes: usize,
) -> Result<(usize, usize), String> {
    let err = |e: Error| e.to_string();
    if !["node", "socket"].contains(&split) {
        // Numbered by key: here the reverse of the job's order (nodes
        // come in descending order).
        let members = sub.group().members();
        assert!(
            members.windows(2).all(|w| w[0] > w[1]),
            "{split}: {members:?}"
        );
    }
    assert_eq!(sub.job_rank(sub.rank()).map_err(err)?, comm.rank());
    let counts = every_algorithm(&sub, send, recv, bytes)?;
    // The tuned calls choose among the algorithms that fit.
    let m = sub.size();
    let (s8, r8) = (
        send.slice(0, 8 * m).map_err(err)?,
        recv.slice(0, 8 * m).map_err(err)?,
    );
    let me = sub.rank() as u64;
    let mut got = vec![0u8; 8 * m];
    sub.barrier().map_err(err)?;
    comm.write_local(&s8, 0, &(1000 + me).to_le_bytes())
        .map_err(err)?;
    sub.allgather(&s8.slice(0, 8).map_err(err)?, &r8)
        .map_err(err)?;
    comm.read_local(&r8, 0, &mut got).map_err(err)?;
    for (r, b) in got.chunks(8).enumerate() {
        assert_eq!(
            b,
            (1000 + r as u64).to_le_bytes(),
            "{split}: tuned all-gather block {r}"
        );
    }
    for j in 0..m as u64 {
        comm.write_local(&s8, 8 * j as usize, &(100 * me + j).to_le_bytes())
            .map_err(err)?;
    }
    sub.alltoall(&s8, &r8).map_err(err)?;
    comm.read_local(&r8, 0, &mut got).map_err(err)?;
    for (r, b) in got.chunks(8).enumerate() {
        assert_eq!(
            b,
            (100 * r as u64 + me).to_le_bytes(),
            "{split}: tuned all-to-all block {r}"
        );
    }
    sub.barrier().map_err(err)?;
    comm.write_local(&s8, 0, &(7000 + me).to_le_bytes())
        .map_err(err)?;
    sub.broadcast(&s8, m - 1).map_err(err)?;
    comm.read_local(&s8, 0, &mut got[..8]).map_err(err)?;
    assert_eq!(
        got[..8],
        (7000 + m as u64 - 1).to_le_bytes(),
        "{split}: tuned broadcast"
    );
    sub.free().map_err(err)?;
    Ok(counts)
}

#[test]
fn every_collective_on_node_and_socket_communicators() {
    let node = on_split("node");
    let socket = on_split("socket");
    assert!(node.0 > 0 && socket.0 > 0);
}

#[test]
fn every_collective_on_colour_communicators() {
    for (split, _) in splits() {
        let (ran, refused) = on_split(split);
        assert!(ran > 0, "{split}");
        if split == "irregular" {
            // Only the flat algorithms run there.
            assert!(refused > 0, "{split}: nothing refused");
        }
    }
}

#[test]
fn collectives_at_once_on_disjoint_and_nested_communicators() {
    let cluster = railcoll_emu::Cluster::new(cluster_config(2, 2, 2, 8 << 20)).expect("cluster");
    let results = cluster.run(|comm| -> Result<(), Error> {
        let me = comm.rank();
        let half = comm.split(Some(me as u32 % 2), 0)?.expect("colour");
        let block = 256;
        let send = comm.alloc(block)?;
        let job_recv = comm.alloc(block * comm.size())?;
        let half_recv = comm.alloc(block * half.size())?;
        for round in 0..20u8 {
            let mine = vec![me as u8 ^ round; block];
            comm.write_local(&send, 0, &mine)?;
            // One rank in two communicators, a collective in flight on
            // each; the two halves run theirs at the same time.
            let on_job = comm.iallgather(&send, &job_recv)?;
            let on_half = half.iallgather(&send, &half_recv)?;
            on_half.wait()?;
            on_job.wait()?;
            let mut got = vec![0u8; block * comm.size()];
            comm.read_local(&job_recv, 0, &mut got)?;
            for (r, b) in got.chunks(block).enumerate() {
                assert!(b.iter().all(|&x| x == r as u8 ^ round), "job block {r}");
            }
            let mut got = vec![0u8; block * half.size()];
            comm.read_local(&half_recv, 0, &mut got)?;
            for (r, b) in got.chunks(block).enumerate() {
                let job = half.job_rank(r)?;
                assert!(b.iter().all(|&x| x == job as u8 ^ round), "half block {r}");
            }
        }
        half.free()
    });
    for r in results {
        r.expect("rank ran").expect("rank's collectives");
    }
}

/// The hardware barrier on sub-communicators the switch serves, checked:
/// every member's entry word has its round number once the barrier
/// returns (members come in late, by rank); refused in words on one it
/// cannot serve.
#[test]
fn hardware_barrier_on_sub_communicators() {
    let mut cfg = cluster_config(4, 2, 1, 4 << 20);
    cfg.shape = shape(4, 2, 2, 1, Placement::Block);
    let cluster = railcoll_emu::Cluster::new(cfg).expect("cluster");
    let results = cluster.run(|comm| -> Result<(), Error> {
        let word = comm.alloc(8)?;
        let seen = comm.alloc(8)?;
        // Local 0s and local 1s: each over all four nodes, one context.
        let by_socket = comm.split_type(SplitType::Socket)?;
        assert_eq!(by_socket.shape().grouping, Grouping::Nodes);
        for round in 1..=6u64 {
            comm.compute(std::time::Duration::from_micros(
                30 * by_socket.rank() as u64,
            ));
            comm.write_local(&word, 0, &round.to_le_bytes())?;
            by_socket.barrier_with(Algorithm::Hardware)?;
            for r in 0..by_socket.size() {
                comm.endpoint()
                    .get(by_socket.job_rank(r)?, &word, &seen)?
                    .wait()?;
                let mut got = [0u8; 8];
                comm.read_local(&seen, 0, &mut got)?;
                assert!(
                    u64::from_le_bytes(got) >= round,
                    "member {r} had not entered {round}"
                );
            }
            by_socket.barrier_with(Algorithm::Hardware)?;
        }
        // Ranks 0 and 3: locals 0 and 1, contexts differ: no switch.
        let skew = comm.split([0, 3].contains(&comm.rank()).then_some(1), 0)?;
        if let Some(skew) = &skew {
            assert_eq!(skew.shape().grouping, Grouping::NodesWithoutSwitch);
            match skew.schedule(Collective::Barrier, Algorithm::Hardware, 0, 0) {
                Err(Error::Unsupported { reason, .. }) => assert!(reason.contains("switch")),
                other => panic!("hardware barrier on {:?}: {other:?}", skew.group()),
            }
            skew.barrier()?;
        }
        drop(skew);
        by_socket.free()
    });
    for r in results {
        r.expect("rank ran").expect("rank's barriers");
    }
}

#[test]
fn a_thousand_split_free_cycles_leave_the_nics_as_they_were() {
    let cluster = railcoll_emu::Cluster::new(cluster_config(2, 2, 2, 8 << 20)).expect("cluster");
    let segments = std::sync::atomic::AtomicUsize::new(usize::MAX);
    let results = cluster.run(|comm| -> Result<(), Error> {
        let send = comm.alloc(64)?;
        let recv = comm.alloc(64 * comm.size())?;
        let ep = comm.endpoint();
        let before = (
            ep.free_chain_blocks(),
            (0..ep.rails())
                .map(|r| ep.free_completion_events(r))
                .sum::<usize>(),
        );
        // As many communicators at once as the slots allow, before the
        // cycles and after them: none leaked.
        let at_once = || -> Result<usize, Error> {
            let mut held = Vec::new();
            loop {
                match comm.dup() {
                    Ok(c) => held.push(c),
                    Err(Error::Split(_)) => break,
                    Err(e) => return Err(e),
                }
            }
            let n = held.len();
            while let Some(c) = held.pop() {
                c.free()?;
            }
            Ok(n)
        };
        let first = at_once()?;
        assert!(first >= 4, "only {first} communicators at once");
        for cycle in 0..1000u32 {
            let sub = if cycle % 3 == 0 {
                comm.dup()?
            } else {
                comm.split(Some(comm.rank() as u32 % 2), cycle as i64)?
                    .expect("colour")
            };
            if cycle % 50 == 0 {
                comm.write_local(&send, 0, &[comm.rank() as u8 + cycle as u8; 64])?;
                sub.allgather(&send, &recv.slice(0, 64 * sub.size())?)?;
                let mut got = vec![0u8; 64 * sub.size()];
                comm.read_local(&recv, 0, &mut got)?;
                for (r, b) in got.chunks(64).enumerate() {
                    let job = sub.job_rank(r)?;
                    assert!(b.iter().all(|&x| x == job as u8 + cycle as u8));
                }
            }
            sub.free()?;
            if cycle == 999 {
                // Every split communicator's node segment is gone (the
                // job's two remain); read once every rank freed.
                comm.barrier()?;
                if comm.rank() == 0 {
                    let live = cluster.live_node_segments();
                    segments.store(live, std::sync::atomic::Ordering::Relaxed);
                }
                comm.barrier()?;
            }
        }
        let after = (
            ep.free_chain_blocks(),
            (0..ep.rails())
                .map(|r| ep.free_completion_events(r))
                .sum::<usize>(),
        );
        assert_eq!(before, after, "NIC resources leaked over 1000 cycles");
        assert_eq!(at_once()?, first, "communicator slots leaked");
        Ok(())
    });
    let results: Vec<_> = results.into_iter().map(|r| r.expect("rank ran")).collect();
    for (rank, r) in results.iter().enumerate() {
        assert!(r.is_ok(), "rank {rank}: {r:?} (all: {results:?})");
    }
    assert_eq!(
        segments.into_inner(),
        2,
        "node segments left after 1000 cycles"
    );
}

/// More communicators with a hardware barrier collecting at once than the
/// switch has group entries (40 pairs of nodes x contexts against 32): the
/// switch holds the arrivals of the groups it has no entry for (a held
/// answer, docs/abi.md §4.5) and counts them once an entry frees, so every
/// barrier completes, and completes right: each member's entry word is
/// read after it.
#[test]
fn more_hardware_barriers_at_once_than_the_switch_has_entries() {
    let mut cfg = cluster_config(10, 8, 1, 1 << 20);
    cfg.shape = shape(10, 8, 1, 1, Placement::Block);
    // The argument check would hold each first member until its partner
    // came, and the groups would never collect at once.
    cfg.check = false;
    let cluster = railcoll_emu::Cluster::new(cfg).expect("cluster");
    let before = cluster.switch_entries_exhausted();
    let results = cluster.run(|comm| -> Result<(), Error> {
        let (node, local) = comm.topology().locate(comm.rank())?;
        let word = comm.alloc(8)?;
        let seen = comm.alloc(8)?;
        // Context `local` on nodes 2p and 2p + 1.
        let pair = comm
            .split(Some((local * 5 + node / 2) as u32), 0)?
            .expect("colour");
        assert_eq!((pair.size(), pair.shape().grouping), (2, Grouping::Nodes));
        for round in 1..=3u64 {
            comm.write_local(&word, 0, &round.to_le_bytes())?;
            // Every group's first member arrives well before its second:
            // all 40 groups collect at once.
            if node % 2 == 1 {
                comm.compute(std::time::Duration::from_millis(20));
            }
            pair.barrier_with(Algorithm::Hardware)?;
            let other = pair.job_rank(1 - pair.rank())?;
            comm.endpoint().get(other, &word, &seen)?.wait()?;
            let mut got = [0u8; 8];
            comm.read_local(&seen, 0, &mut got)?;
            assert!(
                u64::from_le_bytes(got) >= round,
                "partner had not entered {round}"
            );
            pair.barrier_with(Algorithm::Hardware)?;
        }
        pair.free()
    });
    for r in results {
        r.expect("rank ran").expect("rank's barriers");
    }
    assert!(
        cluster.switch_entries_exhausted() > before,
        "the switch's group table was never full"
    );
}

/// The multi-leader all-gathers' leader groups are the public socket
/// split's: on the job's communicator and on communicators whose sockets
/// carry over, each rank's group in `Shape::socket_groups` is, as job
/// ranks, the communicator `split_type(Socket)` gives it (leader first).
/// And the algorithm composed by hand from those public communicators
/// (gather to each socket's leader, all-gather among the leaders,
/// broadcast back over the socket) gives the bytes the single verified
/// schedule gives.
#[test]
fn multi_leader_groups_are_the_socket_split_and_compose_from_it() {
    use railcoll_host::sched::algo::{Aggregation, LeaderExchange};
    let mut cfg = cluster_config(4, 4, 2, 16 << 20);
    cfg.shape = shape(4, 4, 2, 2, Placement::Block);
    let cluster = railcoll_emu::Cluster::new(cfg).expect("cluster");
    let b = 48;
    let results = cluster.run(|comm| -> Result<usize, String> {
        let err = |e: Error| e.to_string();
        let n = comm.size();
        // Memory is the job's: every buffer first, on every rank.
        let send = comm.alloc(b).map_err(err)?;
        let socket_recv = comm.alloc(n * b).map_err(err)?;
        let composed = comm.alloc(n * b).map_err(err)?;
        let direct = comm.alloc(n * b).map_err(err)?;
        let halves = comm
            .split(Some(comm.node() as u32 / 2), 0)
            .map_err(err)?
            .ok_or("a colour")?;
        let evens = comm
            .split(Some(comm.rank() as u32 % 2), 0)
            .map_err(err)?
            .ok_or("a colour")?;
        let mut checked = 0;
        for (name, c) in [("job", comm), ("halves", &halves), ("even/odd", &evens)] {
            let sh = c.shape();
            assert_eq!(sh.sockets, 2, "{name}: the sockets carry over");
            let socket = c.split_type(SplitType::Socket).map_err(err)?;
            let mine = sh
                .socket_groups()
                .into_iter()
                .find(|g| g.contains(&c.rank()))
                .ok_or("a socket group")?;
            let as_job: Vec<usize> = mine
                .iter()
                .map(|&r| c.job_rank(r))
                .collect::<Result<_, _>>()
                .map_err(err)?;
            assert_eq!(
                as_job,
                socket.group().members(),
                "{name}: rank {}",
                c.rank()
            );
            // Composed: gather to the leader, all-gather among leaders,
            // broadcast back. Block numbering keeps each socket's ranks
            // contiguous, so the leaders' all-gather lands in rank order.
            let pattern = |r: usize| ((r * 37 + name.len()) % 251) as u8;
            comm.write_local(&send, 0, &vec![pattern(c.rank()); b])
                .map_err(err)?;
            socket.gather(&send, &socket_recv, 0).map_err(err)?;
            let leaders = c
                .split((socket.rank() == 0).then_some(0), c.rank() as i64)
                .map_err(err)?;
            if let Some(leaders) = &leaders {
                let gathered = socket_recv.slice(0, socket.size() * b).map_err(err)?;
                let all = composed.slice(0, c.size() * b).map_err(err)?;
                leaders.allgather(&gathered, &all).map_err(err)?;
            }
            let all = composed.slice(0, c.size() * b).map_err(err)?;
            socket.broadcast(&all, 0).map_err(err)?;
            for ex in [LeaderExchange::RecursiveDoubling, LeaderExchange::Ring] {
                for agg in [Aggregation::Shm, Aggregation::P2p] {
                    let ml = Algorithm::MultiLeader(agg, ex);
                    c.allgather_with(ml, &send, &direct.slice(0, c.size() * b).map_err(err)?)
                        .map_err(err)?;
                    let (mut want, mut got) = (vec![0u8; c.size() * b], vec![0u8; c.size() * b]);
                    comm.read_local(&composed, 0, &mut want).map_err(err)?;
                    comm.read_local(&direct, 0, &mut got).map_err(err)?;
                    for (r, block) in want.chunks(b).enumerate() {
                        assert!(block.iter().all(|&x| x == pattern(r)), "{name}: block {r}");
                    }
                    assert_eq!(got, want, "{name}: {} against the composition", ml.name());
                    checked += 1;
                }
            }
            if let Some(l) = leaders {
                l.free().map_err(err)?;
            }
            socket.free().map_err(err)?;
        }
        evens.free().map_err(err)?;
        halves.free().map_err(err)?;
        Ok(checked)
    });
    for r in results {
        assert_eq!(r.expect("rank ran").expect("rank's checks"), 12);
    }
}

/// The arena is the job's: `reset_arena` on the job's communicator is
/// refused while a collective on a communicator split off it is in flight
/// (its NICs may still write the buffers), and that collective then ends
/// byte-exact: nothing was freed under it. Ranks 0 and 1 start their
/// half's all-gather and try the reset before the job's barrier; their
/// partners start only after it, so the all-gathers cannot be over yet.
/// The argument check is off: with it, a start waits for its neighbours to
/// start too, and the early ranks would never reach the barrier.
#[test]
fn reset_arena_is_refused_while_a_split_communicator_has_a_collective_in_flight() {
    let mut cfg = cluster_config(2, 2, 2, 8 << 20);
    cfg.check = false;
    let cluster = railcoll_emu::Cluster::new(cfg).expect("cluster");
    let results = cluster.run(|comm| -> Result<(), Error> {
        let me = comm.rank();
        let half = comm.split(Some(me as u32 % 2), 0)?.expect("colour");
        let block = 64;
        let send = comm.alloc(block)?;
        let recv = comm.alloc(block * half.size())?;
        comm.write_local(&send, 0, &[me as u8 ^ 0x5a; 64])?;
        let early = me < 2;
        let request = if early {
            let request = half.iallgather(&send, &recv)?;
            assert!(
                matches!(comm.reset_arena(), Err(Error::CollectiveInFlight(_))),
                "rank {me}: the reset went ahead under the half's all-gather"
            );
            comm.barrier()?;
            request
        } else {
            comm.barrier()?;
            half.iallgather(&send, &recv)?
        };
        request.wait()?;
        let mut got = vec![0u8; block * half.size()];
        comm.read_local(&recv, 0, &mut got)?;
        for (r, b) in got.chunks(block).enumerate() {
            let job = half.job_rank(r)?;
            assert!(
                b.iter().all(|&x| x == job as u8 ^ 0x5a),
                "rank {me}: block {r}"
            );
        }
        // Every collective is over: the reset goes ahead on every rank.
        comm.reset_arena()?;
        half.free()
    });
    for r in results {
        r.expect("rank ran").expect("rank's calls");
    }
}

/// A split communicator whose close fails (it was revoked: one member
/// passed a short buffer) keeps its slot, and the job's arena is never
/// reset again: its NICs may still hold chained puts into it. The job's
/// communicator still works, byte-exact, on the buffers it had.
#[test]
fn after_a_failed_close_the_arena_is_not_reset() {
    let cluster = railcoll_emu::Cluster::new(cluster_config(2, 2, 2, 8 << 20)).expect("cluster");
    let results = cluster.run(|comm| -> Result<(), Error> {
        let me = comm.rank();
        let twin = comm.dup()?;
        let send = comm.alloc(64)?;
        let recv = comm.alloc(64 * comm.size())?;
        comm.write_local(&send, 0, &[me as u8 + 1; 64])?;
        let short = if me == 1 { recv.slice(0, 127)? } else { recv };
        assert!(twin.allgather(&send, &short).is_err(), "rank {me}");
        assert!(twin.free().is_err(), "rank {me}: a revoked close");
        match comm.reset_arena() {
            Err(Error::CollectiveInFlight(why)) => assert!(why.contains("close failed"), "{why}"),
            other => panic!("rank {me}: {other:?}"),
        }
        comm.allgather(&send, &recv)?;
        let mut got = vec![0u8; 64 * comm.size()];
        comm.read_local(&recv, 0, &mut got)?;
        for (r, b) in got.chunks(64).enumerate() {
            assert!(b.iter().all(|&x| x == r as u8 + 1), "rank {me}: block {r}");
        }
        Ok(())
    });
    for r in results {
        r.expect("rank ran").expect("rank's calls");
    }
}
