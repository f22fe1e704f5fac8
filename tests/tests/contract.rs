//! The buffer contracts (`railcoll_host::BufferContract`), in the suite's
//! mode (threads, or modeled with `RAILCOLL_TEST_MODE=modeled`):
//!
//! - under MPI's, the default, collectives follow each other on the same
//!   buffers with no barrier between them and every result is byte-exact:
//!   a thousand all-gathers over every all-gather algorithm, host-driven
//!   and on the NICs, and a mix of every collective with roots rotating;
//!   some ranks are slow readers (they compute before reading each
//!   result), so the ranks that are done first are well into the next call
//!   while those read;
//! - under SHMEM's, the same program loses data (modeled mode, where the
//!   interleaving is the same on every run, so the loss is certain): the
//!   guard is what the MPI test above depends on, not an accident of
//!   timing; and with a barrier between the calls, as that contract asks,
//!   every result is right again.

use std::time::Duration;

use railcoll_emu::{Cluster, ClusterConfig, Mode};
use railcoll_host::sched::{Choice, Collective, Drive};
use railcoll_host::{BufferContract, Comm, Error};
use railcoll_tests::pattern;

/// Rank `rank`'s block of round `round`.
fn block(rank: usize, round: usize, bytes: usize) -> Vec<u8> {
    pattern(bytes, (round * 65_537 + rank) as u64 * 7 + 3)
}

/// A 4 x 4 x 2 cluster (the shape on which back-to-back all-gathers lost
/// up to 299 of 300 rounds before the MPI contract) with `contract`.
fn cluster(contract: BufferContract) -> Cluster {
    Cluster::new(ClusterConfig {
        contract,
        // Every rank makes the same calls by construction; the check's
        // exchange would also order the ranks a little, hiding races.
        check: false,
        ..railcoll_tests::cluster_config(4, 4, 2, 4 << 20)
    })
    .expect("cluster")
}

/// Slow readers: a third of the ranks compute for a while between a call's
/// return and reading its result.
fn slow_reader(comm: &Comm) {
    if comm.rank() % 3 == 1 {
        comm.compute(Duration::from_micros(40));
    }
}

/// `rounds` all-gathers of `bytes`-byte blocks on one pair of buffers, the
/// algorithm rotating over `choices`, with a barrier before each if
/// `barriers`; each rank's rounds whose result was wrong.
fn allgathers(
    comm: &Comm,
    rounds: usize,
    bytes: usize,
    choices: &[Choice],
    barriers: bool,
) -> Result<Vec<usize>, Error> {
    let n = comm.size();
    let me = comm.rank();
    let send = comm.alloc(bytes)?;
    let recv = comm.alloc(n * bytes)?;
    let mut wrong = Vec::new();
    let mut got = vec![0u8; n * bytes];
    for round in 0..rounds {
        comm.write_local(&send, 0, &block(me, round, bytes))?;
        if barriers {
            comm.barrier()?;
        }
        let choice = choices[round % choices.len()];
        comm.allgather_with(choice, &send, &recv)?;
        slow_reader(comm);
        comm.read_local(&recv, 0, &mut got)?;
        let right = (0..n).all(|r| got[r * bytes..(r + 1) * bytes] == block(r, round, bytes)[..]);
        if !right {
            wrong.push(round);
        }
    }
    Ok(wrong)
}

/// Every all-gather algorithm, host-driven and compiled onto the NICs.
fn allgather_choices() -> Vec<Choice> {
    Collective::Allgather
        .algorithms()
        .into_iter()
        .filter(|a| *a != railcoll_host::Algorithm::Shm)
        .flat_map(|a| [Choice::host(a), Choice::nic(a)])
        .collect()
}

#[test]
fn a_thousand_back_to_back_allgathers_on_the_same_buffers_are_exact() {
    let c = cluster(BufferContract::Mpi);
    let choices = allgather_choices();
    let out = c.run(|comm| allgathers(comm, 1000, 64, &choices, false));
    for (rank, r) in out.into_iter().enumerate() {
        let wrong = r.expect("ran").expect("no error");
        assert!(wrong.is_empty(), "rank {rank}: rounds {wrong:?} wrong");
    }
}

/// One round of the mixed program: the collective `round` names, on the
/// same two buffers every time; whether this rank's result was right.
fn mixed_round(
    comm: &Comm,
    round: usize,
    bytes: usize,
    bufs: (
        &railcoll_host::arena::SymBuffer,
        &railcoll_host::arena::SymBuffer,
    ),
) -> Result<bool, Error> {
    let (send, recv) = bufs;
    let n = comm.size();
    let me = comm.rank();
    let root = (round * 5) % n;
    let mut got = vec![0u8; n * bytes];
    match round % 4 {
        0 => {
            // Broadcast from `root` in the receive buffer's first block.
            let buf = recv.slice(0, bytes)?;
            if me == root {
                comm.write_local(&buf, 0, &block(root, round, bytes))?;
            }
            comm.broadcast(&buf, root)?;
            slow_reader(comm);
            comm.read_local(&buf, 0, &mut got[..bytes])?;
            Ok(got[..bytes] == block(root, round, bytes)[..])
        }
        1 => {
            comm.write_local(send, 0, &block(me, round, bytes))?;
            comm.gather(&send.slice(0, bytes)?, recv, root)?;
            slow_reader(comm);
            if me != root {
                return Ok(true);
            }
            comm.read_local(recv, 0, &mut got)?;
            Ok((0..n).all(|r| got[r * bytes..(r + 1) * bytes] == block(r, round, bytes)[..]))
        }
        2 => {
            // All-to-all: block j of rank i's send is (i, j)'s pattern.
            let each = bytes / n;
            let mine: Vec<u8> = (0..n)
                .flat_map(|j| block(me * n + j, round, each))
                .collect();
            comm.write_local(send, 0, &mine)?;
            comm.alltoall(&send.slice(0, n * each)?, &recv.slice(0, n * each)?)?;
            slow_reader(comm);
            comm.read_local(recv, 0, &mut got[..n * each])?;
            Ok((0..n).all(|i| got[i * each..(i + 1) * each] == block(i * n + me, round, each)[..]))
        }
        _ => {
            comm.write_local(send, 0, &block(me, round, bytes))?;
            comm.allgather(&send.slice(0, bytes)?, recv)?;
            slow_reader(comm);
            comm.read_local(recv, 0, &mut got)?;
            Ok((0..n).all(|r| got[r * bytes..(r + 1) * bytes] == block(r, round, bytes)[..]))
        }
    }
}

#[test]
fn every_collective_mixed_back_to_back_on_the_same_buffers_is_exact() {
    let c = cluster(BufferContract::Mpi);
    // 16 ranks: all-to-all blocks of 4 bytes out of the 64.
    let bytes = 64;
    let out = c.run(|comm| -> Result<Vec<usize>, Error> {
        let n = comm.size();
        let send = comm.alloc(n * bytes)?;
        let recv = comm.alloc(n * bytes)?;
        let mut wrong = Vec::new();
        for round in 0..400 {
            if !mixed_round(comm, round, bytes, (&send, &recv))? {
                wrong.push(round);
            }
        }
        Ok(wrong)
    });
    for (rank, r) in out.into_iter().enumerate() {
        let wrong = r.expect("ran").expect("no error");
        assert!(wrong.is_empty(), "rank {rank}: rounds {wrong:?} wrong");
    }
}

#[test]
fn the_shmem_contract_loses_data_without_its_barriers() {
    if railcoll_tests::mode() != Mode::Modeled {
        return; // a race in threads mode: certain only in modeled mode
    }
    let c = cluster(BufferContract::Shmem);
    let ring = [Choice::host(railcoll_host::Algorithm::Ring)];
    let out = c.run(|comm| allgathers(comm, 50, 64, &ring, false));
    let lost: usize = out
        .into_iter()
        .map(|r| r.expect("ran").expect("no error").len())
        .sum();
    assert!(
        lost > 0,
        "no round lost: the slow readers were not overtaken"
    );
}

#[test]
fn the_shmem_contract_with_its_barriers_is_exact() {
    let c = cluster(BufferContract::Shmem);
    let choices: Vec<Choice> = allgather_choices()
        .into_iter()
        .filter(|c| c.drive == Drive::Host)
        .collect();
    let out = c.run(|comm| allgathers(comm, 100, 64, &choices, true));
    for (rank, r) in out.into_iter().enumerate() {
        let wrong = r.expect("ran").expect("no error");
        assert!(wrong.is_empty(), "rank {rank}: rounds {wrong:?} wrong");
    }
}
