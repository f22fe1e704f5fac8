//! Non-blocking and persistent collectives [MPI4 §6.12, §6.13] on the
//! emulator, in the suite's mode (threads, or modeled with
//! `RAILCOLL_TEST_MODE=modeled`):
//!
//! - persistent collectives started a thousand times back to back, no
//!   barrier between starts, the data rewritten before every start and
//!   every start's output checked byte for byte;
//! - an offloaded collective completes while every rank's host is away
//!   (blocked on something unrelated in threads mode, computing in
//!   modeled mode); the host-driven form of the same algorithm does not
//!   (modeled mode, where that is deterministic). Under the SHMEM buffer
//!   contract: under MPI's, the readiness waits before the chained puts
//!   are the host's, and a host away leaves them unarmed (the NICs
//!   cannot yet wait for readiness themselves);
//! - eight collectives of mixed kinds in flight at once, completed in an
//!   order of each rank's own (`wait`, `wait_any`, `test_all`); a request
//!   leaked with `mem::forget` locks nothing; freeing the arena under a
//!   collective in flight, or starting a persistent collective that is
//!   still active, is a typed error, and nothing is lost by it.
//!
//! Polling with `test` and completing with `wait` on every algorithm and
//! shape is in `collectives.rs` (the call form rotates over its cases).

use std::sync::mpsc;
use std::time::{Duration, Instant};

use railcoll_emu::Mode;
use railcoll_host::dma_mem::DmaMemory;
use railcoll_host::sched::{Algorithm, Choice, Collective};
use railcoll_host::{Comm, Error, Placement};
use railcoll_tests::pattern;

/// Rank `rank`'s block `block` of start `start`.
fn data(rank: usize, start: usize, block: usize, bytes: usize) -> Vec<u8> {
    pattern(bytes, ((start * 1_000_003 + rank) * 131 + block) as u64 + 1)
}

/// Write this start's input, and check the output of the start before.
fn check_output(
    comm: &Comm,
    c: Collective,
    recv: &railcoll_host::arena::SymBuffer,
    bytes: usize,
    root: usize,
    start: usize,
) -> Result<(), String> {
    let (n, me) = (comm.size(), comm.rank());
    let mut got = vec![0u8; recv.len()];
    comm.read_local(recv, 0, &mut got)
        .map_err(|e| e.to_string())?;
    for i in 0..n {
        let want = match c {
            Collective::Gather if me != root => return Ok(()),
            Collective::Gather | Collective::Allgather => data(i, start, 0, bytes),
            Collective::Alltoall => data(i, start, me, bytes),
            Collective::Bcast if i == 0 => data(root, start, 0, bytes),
            Collective::Bcast | Collective::Barrier => return Ok(()),
        };
        if got[i * bytes..(i + 1) * bytes] != want[..] {
            return Err(format!(
                "{c}: start {start}: rank {me} block {i} is not rank {i}'s data of that start"
            ));
        }
    }
    Ok(())
}

#[test]
fn persistent_collectives_restart_a_thousand_times_on_changing_data() {
    const STARTS: usize = 1000;
    let bytes = 48;
    let cases = [
        (Collective::Allgather, Choice::nic(Algorithm::Ring), 0),
        (Collective::Allgather, Choice::host(Algorithm::SmpDirect), 0),
        (Collective::Alltoall, Choice::host(Algorithm::Pairwise), 0),
        (Collective::Alltoall, Choice::nic_dma(Algorithm::Bruck), 0),
        (Collective::Gather, Choice::nic(Algorithm::Binomial), 3),
        (Collective::Bcast, Choice::nic(Algorithm::Binomial), 2),
        (Collective::Barrier, Choice::host(Algorithm::Rdma), 0),
        (Collective::Barrier, Choice::nic(Algorithm::Rdma), 0),
        (
            Collective::Allgather,
            Choice::nic_dma(Algorithm::SmpDirect),
            0,
        ),
        (Collective::Gather, Choice::nic_dma(Algorithm::SmpTree), 3),
    ];
    let cluster = railcoll_emu::Cluster::new(railcoll_emu::ClusterConfig {
        shape: railcoll_tests::shape(3, 2, 1, 2, Placement::Cyclic),
        mode: railcoll_tests::mode(),
        arena_size: 4 << 20,
        packet_size: 2048,
        wait_timeout: Duration::from_secs(30),
        ..railcoll_emu::ClusterConfig::default()
    })
    .expect("cluster");
    let results = cluster.run(|comm| -> Result<u64, String> {
        let (n, me) = (comm.size(), comm.rank());
        let mut started = 0;
        for (c, choice, root) in cases {
            let send_blocks = if c == Collective::Alltoall { n } else { 1 };
            let send = comm.alloc(send_blocks * bytes).map_err(|e| e.to_string())?;
            let recv = if c == Collective::Bcast {
                send
            } else {
                comm.alloc(n * bytes).map_err(|e| e.to_string())?
            };
            let mut p = comm
                .collective_init_with(c, choice, &send, &recv, root)
                .map_err(|e| format!("{c} {choice}: {e}"))?;
            for start in 0..STARTS {
                // New data, written while other ranks may already be in
                // this start (the guard keeps them off our buffers).
                if c != Collective::Bcast || me == root {
                    for j in 0..send_blocks {
                        comm.write_local(&send, j * bytes, &data(me, start, j, bytes))
                            .map_err(|e| e.to_string())?;
                    }
                }
                p.start()
                    .map_err(|e| format!("{c} {choice} start {start}: {e}"))?;
                p.wait()
                    .map_err(|e| format!("{c} {choice} start {start}: {e}"))?;
                check_output(comm, c, &recv, bytes, root, start)
                    .map_err(|e| format!("{choice} {e}"))?;
            }
            started += p.starts();
            drop(p);
            comm.barrier().map_err(|e| e.to_string())?;
            comm.reset_arena().map_err(|e| e.to_string())?;
        }
        Ok(started)
    });
    for (rank, r) in results.into_iter().enumerate() {
        let started = r
            .expect("started")
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(started, (STARTS * cases.len()) as u64);
    }
}

/// The all-gathers that, compiled onto the NICs, forward every block by
/// themselves once started, on one rail: the ring on six single-rank
/// nodes, and the SMP-aware Direct on three nodes of two ranks with its
/// node phases on the NICs too (`@nic-dma`), with their host-driven forms
/// beside them.
const ON_THE_NICS: [(usize, usize, Algorithm, Choice); 2] = [
    (6, 1, Algorithm::Ring, Choice::nic(Algorithm::Ring)),
    (
        3,
        2,
        Algorithm::SmpDirect,
        Choice::nic_dma(Algorithm::SmpDirect),
    ),
];

fn one_rail_cluster(nodes: usize, ranks_per_node: usize) -> railcoll_emu::Cluster {
    railcoll_emu::Cluster::new(railcoll_emu::ClusterConfig {
        contract: railcoll_host::BufferContract::Shmem,
        shape: railcoll_tests::shape(nodes, ranks_per_node, 1, 1, Placement::Block),
        mode: railcoll_tests::mode(),
        arena_size: 1 << 20,
        packet_size: 2048,
        wait_timeout: Duration::from_secs(30),
        ..railcoll_emu::ClusterConfig::default()
    })
    .expect("cluster")
}

const RING_BYTES: usize = 256;

/// Has every block of an all-gather landed in `mem`?
fn all_landed(mem: &DmaMemory, n: usize) -> bool {
    let mut got = vec![0u8; RING_BYTES];
    (0..n).all(|i| mem.read(i * RING_BYTES, &mut got).is_ok() && got == data(i, 0, 0, RING_BYTES))
}

/// Threads mode: every rank, once it has started an offloaded all-gather,
/// blocks on a channel; a watcher outside the ranks reads every rank's
/// receive buffer and lets them go only once every block has landed
/// everywhere. The NICs must have moved every block by themselves.
#[test]
fn an_offloaded_collective_completes_while_every_host_is_blocked() {
    if railcoll_tests::mode() != Mode::Threads {
        // Modeled mode: `offloaded_collective_overlaps_host_compute` below
        // (a rank blocked outside the model would stop virtual time).
        return;
    }
    for (nodes, rpn, _, offloaded) in ON_THE_NICS {
        blocked_hosts(nodes, rpn, offloaded);
    }
}

fn blocked_hosts(nodes: usize, rpn: usize, offloaded: Choice) {
    let cluster = one_rail_cluster(nodes, rpn);
    let n = nodes * rpn;
    let (to_watcher, from_ranks) = mpsc::channel::<(DmaMemory, mpsc::Sender<bool>)>();
    let watcher = std::thread::spawn(move || {
        let mut ranks = Vec::new();
        while ranks.len() < n {
            ranks.push(from_ranks.recv().expect("every rank reports"));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut done = false;
        while !done && Instant::now() < deadline {
            done = ranks.iter().all(|(mem, _)| all_landed(mem, n));
            std::thread::sleep(Duration::from_micros(200));
        }
        for (_, release) in &ranks {
            let _ = release.send(done);
        }
        done
    });
    let to_watcher = std::sync::Mutex::new(to_watcher);
    let results = cluster.run(|comm| -> Result<(), String> {
        let me = comm.rank();
        let send = comm.alloc(RING_BYTES).map_err(|e| e.to_string())?;
        let recv = comm.alloc(n * RING_BYTES).map_err(|e| e.to_string())?;
        comm.write_local(&send, 0, &data(me, 0, 0, RING_BYTES))
            .map_err(|e| e.to_string())?;
        comm.barrier().map_err(|e| e.to_string())?;
        let req = comm
            .icollective_with(Collective::Allgather, offloaded, &send, &recv, 0)
            .map_err(|e| e.to_string())?;
        let (release_tx, release_rx) = mpsc::channel();
        let mem = comm
            .endpoint()
            .local_memory(&recv)
            .map_err(|e| e.to_string())?;
        to_watcher
            .lock()
            .map_err(|_| "watcher channel poisoned".to_string())?
            .send((mem, release_tx))
            .map_err(|e| e.to_string())?;
        // Blocked on something unrelated to the collective.
        let landed = release_rx.recv().map_err(|e| e.to_string())?;
        if !landed {
            return Err(format!(
                "{offloaded}: rank {me}: the blocks never all landed while the hosts were blocked"
            ));
        }
        req.wait().map_err(|e| e.to_string())?;
        check_output(comm, Collective::Allgather, &recv, RING_BYTES, 0, 0)
    });
    for (rank, r) in results.into_iter().enumerate() {
        r.expect("started")
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
    assert!(
        watcher.join().expect("watcher"),
        "{offloaded}: every block landed"
    );
}

/// Modeled mode: every rank starts an all-gather and computes for far
/// longer than the collective takes, then looks at its receive buffer
/// without a library call. Offloaded, every block is there; host-driven
/// (progress only inside `test`/`wait`), the host has forwarded nothing,
/// so some block is missing.
#[test]
fn offloaded_collective_overlaps_host_compute() {
    if railcoll_tests::mode() != Mode::Modeled {
        return; // threads mode: the test above
    }
    for (nodes, rpn, algorithm, offloaded) in ON_THE_NICS {
        computing_hosts(nodes, rpn, [offloaded, Choice::host(algorithm)]);
    }
}

fn computing_hosts(nodes: usize, rpn: usize, drives: [Choice; 2]) {
    let cluster = one_rail_cluster(nodes, rpn);
    let n = nodes * rpn;
    for drive in drives {
        let results = cluster.run(|comm| -> Result<bool, String> {
            let me = comm.rank();
            let send = comm.alloc(RING_BYTES).map_err(|e| e.to_string())?;
            let recv = comm.alloc(n * RING_BYTES).map_err(|e| e.to_string())?;
            comm.write_local(&send, 0, &data(me, 0, 0, RING_BYTES))
                .map_err(|e| e.to_string())?;
            comm.barrier().map_err(|e| e.to_string())?;
            let req = comm
                .icollective_with(Collective::Allgather, drive, &send, &recv, 0)
                .map_err(|e| e.to_string())?;
            comm.compute(Duration::from_millis(5));
            let mem = comm
                .endpoint()
                .local_memory(&recv)
                .map_err(|e| e.to_string())?;
            let landed = all_landed(&mem, n);
            req.wait().map_err(|e| e.to_string())?;
            check_output(comm, Collective::Allgather, &recv, RING_BYTES, 0, 0)?;
            comm.barrier().map_err(|e| e.to_string())?;
            comm.reset_arena().map_err(|e| e.to_string())?;
            Ok(landed)
        });
        for (rank, r) in results.into_iter().enumerate() {
            let landed = r
                .expect("started")
                .unwrap_or_else(|e| panic!("{drive}: rank {rank}: {e}"));
            assert_eq!(
                landed,
                drive.drive.offloaded(),
                "{drive}: rank {rank}: every block landed during the compute?"
            );
        }
    }
}

/// The inputs of request `k` of the eight-request test, written before
/// it starts: its collective, root and buffers.
struct Started<'c> {
    c: Collective,
    root: usize,
    recv: railcoll_host::arena::SymBuffer,
    request: Option<railcoll_host::Request<'c>>,
}

/// Start eight non-blocking collectives of mixed kinds on their own
/// buffers (two all-gathers, two all-to-alls, a gather, a broadcast, two
/// barriers), with roots rotating.
fn start_eight(comm: &Comm, bytes: usize, start: usize) -> Result<Vec<Started<'_>>, Error> {
    let (n, me) = (comm.size(), comm.rank());
    let kinds = [
        Collective::Allgather,
        Collective::Alltoall,
        Collective::Gather,
        Collective::Barrier,
        Collective::Bcast,
        Collective::Allgather,
        Collective::Alltoall,
        Collective::Barrier,
    ];
    let mut out = Vec::new();
    for (k, &c) in kinds.iter().enumerate() {
        let root = (k * 3 + start) % n;
        let tag = start * 8 + k;
        let recv = comm.alloc(n * bytes)?;
        let request = match c {
            Collective::Allgather | Collective::Gather => {
                let send = comm.alloc(bytes)?;
                comm.write_local(&send, 0, &data(me, tag, 0, bytes))?;
                if c == Collective::Gather {
                    comm.igather(&send, &recv, root)?
                } else {
                    comm.iallgather(&send, &recv)?
                }
            }
            Collective::Alltoall => {
                let send = comm.alloc(n * bytes)?;
                for j in 0..n {
                    comm.write_local(&send, j * bytes, &data(me, tag, j, bytes))?;
                }
                comm.ialltoall(&send, &recv)?
            }
            Collective::Bcast => {
                if me == root {
                    comm.write_local(&recv, 0, &data(root, tag, 0, bytes))?;
                }
                comm.ibcast(&recv.slice(0, bytes)?, root)?
            }
            Collective::Barrier => comm.ibarrier()?,
        };
        out.push(Started {
            c,
            root,
            recv,
            request: Some(request),
        });
    }
    Ok(out)
}

/// Eight collectives of mixed kinds in flight at once on every rank,
/// completed in an order of each rank's own (seeded, different on every
/// rank): by `wait` one at a time, by `wait_any`, or by polling
/// `test_all`; every output byte for byte.
#[test]
fn eight_collectives_in_flight_complete_in_any_order() {
    let cluster = railcoll_tests::cluster(2, 2, 2, 4 << 20);
    let bytes = 96;
    let results = cluster.run(|comm| -> Result<(), String> {
        let me = comm.rank();
        for (round, how) in ["wait", "wait_any", "test_all"].iter().enumerate() {
            let mut started = start_eight(comm, bytes, round).map_err(|e| e.to_string())?;
            match *how {
                "wait" => {
                    // A permutation of this rank's own.
                    let mut order: Vec<usize> = (0..started.len()).collect();
                    let mut x = (me as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) + round as u64;
                    for i in (1..order.len()).rev() {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        order.swap(i, (x % (i as u64 + 1)) as usize);
                    }
                    for k in order {
                        let r = started[k].request.take().ok_or("waited twice")?;
                        r.wait().map_err(|e| format!("request {k}: {e}"))?;
                    }
                }
                "wait_any" => {
                    let mut requests: Vec<_> = started
                        .iter_mut()
                        .filter_map(|s| s.request.take())
                        .collect();
                    let mut seen = 0;
                    while railcoll_host::wait_any(&mut requests)
                        .map_err(|e| e.to_string())?
                        .is_some()
                    {
                        seen += 1;
                    }
                    if seen != 8 {
                        return Err(format!("wait_any completed {seen} of 8"));
                    }
                }
                _ => {
                    let mut requests: Vec<_> = started
                        .iter_mut()
                        .filter_map(|s| s.request.take())
                        .collect();
                    while !railcoll_host::test_all(&mut requests).map_err(|e| e.to_string())? {
                        if railcoll_tests::mode() == Mode::Threads {
                            std::thread::sleep(Duration::from_micros(20));
                        } else {
                            comm.compute(Duration::from_micros(1));
                        }
                    }
                    railcoll_host::wait_all(requests).map_err(|e| e.to_string())?;
                }
            }
            for (k, s) in started.iter().enumerate() {
                check_output(comm, s.c, &s.recv, bytes, s.root, round * 8 + k)
                    .map_err(|e| format!("{how}: request {k}: {e}"))?;
            }
        }
        Ok(())
    });
    for (rank, r) in results.into_iter().enumerate() {
        r.expect("started")
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}

/// A request leaked with `mem::forget` locks nothing: later collectives
/// run, complete it on the way, and its output is right; the arena can be
/// freed once it is over.
#[test]
fn a_leaked_request_locks_nothing() {
    let cluster = railcoll_tests::cluster(2, 2, 2, 1 << 20);
    let results = cluster.run(|comm| -> Result<(), String> {
        let (n, me) = (comm.size(), comm.rank());
        let send = comm.alloc(64).map_err(|e| e.to_string())?;
        let recv = comm.alloc(n * 64).map_err(|e| e.to_string())?;
        comm.write_local(&send, 0, &data(me, 0, 0, 64))
            .map_err(|e| e.to_string())?;
        let leaked = comm.iallgather(&send, &recv).map_err(|e| e.to_string())?;
        std::mem::forget(leaked);
        let send2 = comm.alloc(64).map_err(|e| e.to_string())?;
        let recv2 = comm.alloc(n * 64).map_err(|e| e.to_string())?;
        comm.write_local(&send2, 0, &data(me, 1, 0, 64))
            .map_err(|e| e.to_string())?;
        comm.allgather(&send2, &recv2).map_err(|e| e.to_string())?;
        check_output(comm, Collective::Allgather, &recv2, 64, 0, 1)?;
        // A barrier's steps run in start order: the leaked all-gather is
        // over on this rank once it returns.
        comm.barrier().map_err(|e| e.to_string())?;
        check_output(comm, Collective::Allgather, &recv, 64, 0, 0)?;
        comm.ibarrier()
            .and_then(|r| r.wait())
            .map_err(|e| e.to_string())?;
        comm.reset_arena().map_err(|e| e.to_string())
    });
    for (rank, r) in results.into_iter().enumerate() {
        r.expect("started")
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}

/// Freeing the arena under a collective in flight is refused and frees
/// nothing; a persistent collective started while its last start is
/// active is refused; nothing is lost by either.
#[test]
fn what_would_lose_data_in_flight_is_refused() {
    let cluster = railcoll_tests::cluster(2, 2, 2, 1 << 20);
    let results = cluster.run(|comm| -> Result<(), String> {
        let (n, me) = (comm.size(), comm.rank());
        let send = comm.alloc(64).map_err(|e| e.to_string())?;
        let recv = comm.alloc(n * 64).map_err(|e| e.to_string())?;
        comm.write_local(&send, 0, &data(me, 0, 0, 64))
            .map_err(|e| e.to_string())?;
        // Rank 0 starts first and tries at once: the all-gather cannot be
        // over before the others have entered it.
        if me != 0 {
            comm.compute(Duration::from_millis(50));
        }
        let req = comm.iallgather(&send, &recv).map_err(|e| e.to_string())?;
        if me == 0 {
            match comm.reset_arena() {
                Err(Error::CollectiveInFlight(_)) => {}
                other => return Err(format!("an arena reset during an all-gather: {other:?}")),
            }
            let after = comm.alloc(64).map_err(|e| e.to_string())?;
            if after.offset() < recv.offset() + recv.len() {
                return Err(format!(
                    "a refused reset freed the all-gather's buffers: {after:?} overlaps {recv:?}"
                ));
            }
        } else {
            comm.alloc(64).map_err(|e| e.to_string())?; // symmetric
        }
        req.wait().map_err(|e| e.to_string())?;
        check_output(comm, Collective::Allgather, &recv, 64, 0, 0)?;
        let mut b = comm.barrier_init().map_err(|e| e.to_string())?;
        b.start().map_err(|e| e.to_string())?;
        match b.start() {
            Err(Error::CollectiveInFlight(_)) => {}
            other => return Err(format!("a second start while active: {other:?}")),
        }
        b.wait().map_err(|e| e.to_string())?;
        b.start().map_err(|e| e.to_string())?;
        b.wait().map_err(|e| e.to_string())?;
        if b.starts() != 2 {
            return Err(format!("{} starts counted", b.starts()));
        }
        drop(b);
        comm.reset_arena().map_err(|e| e.to_string())
    });
    for (rank, r) in results.into_iter().enumerate() {
        r.expect("started")
            .unwrap_or_else(|e| panic!("rank {rank}: {e}"));
    }
}

/// A node flag counts each peer's raises apart. A gather to rank 8 whose
/// node peers push their blocks and raise the root's flag, then a second
/// collective whose node phases raise the same flag, both in flight: a
/// peer already in the second call raised the flag again before a slower
/// peer's raise for the gather, and the root, counting raises of any
/// peer, copied the slow peer's block of the round before (threads mode:
/// wrong blocks in most runs of 200 rounds; found by the differential
/// fuzzer; modeled mode, with one peer slowed: every round). Every
/// round's gather output is checked on the root.
#[test]
fn a_later_collective_raising_the_same_node_flag_does_not_complete_an_earlier_one() {
    let cluster = railcoll_tests::cluster(4, 4, 2, 16 << 20);
    let root = 8;
    let out = cluster.run(|comm| -> Result<Vec<u64>, Error> {
        let (n, me) = (comm.size(), comm.rank());
        let (send, recv) = (comm.alloc(64)?, comm.alloc(64 * n)?);
        let (small, all) = (comm.alloc(8)?, comm.alloc(8 * n)?);
        let data = |rank: usize, round: u64| pattern(64, round * 1000 + rank as u64 + 1);
        let mut wrong = Vec::new();
        for round in 0..200u64 {
            comm.write_local(&send, 0, &data(me, round))?;
            comm.write_local(&recv, 0, &vec![0xA5; 64 * n])?;
            if me == root + 1 {
                // The slow peer (modeled mode needs one to show it).
                comm.compute(Duration::from_micros(20));
            }
            let gather = comm.icollective_with(
                Collective::Gather,
                Choice::host(Algorithm::SmpDirect),
                &send,
                &recv,
                root,
            )?;
            let second = comm.icollective_with(
                Collective::Allgather,
                Choice::nic(Algorithm::SmpGatherTree),
                &small,
                &all,
                0,
            )?;
            gather.wait()?;
            if me == root {
                let mut got = vec![0u8; 64 * n];
                comm.read_local(&recv, 0, &mut got)?;
                if (0..n).any(|i| got[i * 64..(i + 1) * 64] != data(i, round)[..]) {
                    wrong.push(round);
                }
            }
            second.wait()?;
        }
        Ok(wrong)
    });
    for (rank, r) in out.into_iter().enumerate() {
        let wrong = r.expect("ran").expect("no error");
        assert!(
            wrong.is_empty(),
            "rank {rank}: rounds {wrong:?} gathered a stale block"
        );
    }
}

/// A blocking call's argument check progresses the collectives in flight.
/// Rank 1 starts a gather to rank 0 (its copy waits for rank 0 to enter)
/// and calls a barrier; rank 0, later, starts the gather and waits for
/// it before its barrier, as MPI allows. Rank 1's check waited for rank
/// 0's signature without progressing the gather, whose copy rank 0 waited
/// for: a deadlock (found by the differential fuzzer on 4x4x2).
#[test]
fn a_blocking_call_progresses_the_collectives_in_flight_while_its_arguments_are_checked() {
    let cluster = railcoll_tests::cluster(1, 2, 1, 1 << 20);
    let out = cluster.run(|comm| -> Result<bool, Error> {
        let (n, me) = (comm.size(), comm.rank());
        let (send, recv) = (comm.alloc(64)?, comm.alloc(64 * n)?);
        comm.write_local(&send, 0, &pattern(64, me as u64 + 1))?;
        if me == 0 {
            comm.compute(Duration::from_micros(100));
        }
        let gather = comm.icollective_with(
            Collective::Gather,
            Choice::host(Algorithm::SmpDirect),
            &send,
            &recv,
            0,
        )?;
        if me == 1 {
            comm.barrier()?;
            gather.wait()?;
            return Ok(true);
        }
        gather.wait()?;
        comm.barrier()?;
        let mut got = vec![0u8; 64 * n];
        comm.read_local(&recv, 0, &mut got)?;
        Ok((0..n).all(|i| got[i * 64..(i + 1) * 64] == pattern(64, i as u64 + 1)[..]))
    });
    for (rank, r) in out.into_iter().enumerate() {
        assert!(
            r.expect("ran").expect("no error"),
            "rank {rank}: the gather's data"
        );
    }
}
