//! A railcoll program as a user writes one: each rank is a process,
//! started by `railcoll launch`, `mpirun` or `srun`; it joins its job
//! through the `nicd` serving the directory in `RAILCOLL_NICD`, runs the
//! catalogue's collectives (the tuned algorithm of each plain call, and
//! every algorithm by name, host-driven and on the NICs) on data it can
//! check, checks every byte it received, and leaves the job.
//!
//! ```sh
//! railcoll launch --nodes 2 --ranks-per-node 2 -- ./target/release/railcoll-example-collectives
//! # or, with a nicd already serving /tmp/nics for 1 node x 4 ranks:
//! mpirun -np 4 -x RAILCOLL_NICD=/tmp/nics ./target/release/railcoll-example-collectives
//! ```
//!
//! Exit status 0 only if every rank saw every byte right.

use railcoll_host::process::{Job, JoinOptions};
use railcoll_host::sched::{Choice, Collective};
use railcoll_host::{Comm, Error};

/// What a receive block holds before the collective.
const SENTINEL: u8 = 0xA5;

/// The byte rank `origin` sends at `i` of its block `index`.
fn byte(origin: usize, index: usize, i: usize) -> u8 {
    (origin * 131 + index * 17 + i * 7 % 251) as u8
}

fn block(origin: usize, index: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte(origin, index, i)).collect()
}

/// Run `collective` with `choice` (`None`: the tuned one) on blocks of
/// `len` bytes and check what this rank received.
fn check(
    comm: &Comm,
    collective: Collective,
    choice: Option<Choice>,
    len: usize,
) -> Result<(), String> {
    let (n, me) = (comm.size(), comm.rank());
    let root = if collective.rooted() { n - 1 } else { 0 };
    let sends = if collective == Collective::Alltoall {
        n
    } else {
        1
    };
    let fail = |e: Error| format!("{collective} {choice:?} {len} B: {e}");
    let send = comm.alloc(sends * len.max(1)).map_err(fail)?;
    let recv = comm.alloc(n * len.max(1)).map_err(fail)?;
    for j in 0..sends {
        comm.write_local(&send, j * len, &block(me, j, len))
            .map_err(fail)?;
    }
    // A sentinel in every receive block: one the collective should have
    // written and did not keeps it (the arena's memory is reused from
    // one check to the next, and would hold the last right answer).
    comm.write_local(&recv, 0, &vec![SENTINEL; n * len])
        .map_err(fail)?;
    let buffer = if collective == Collective::Bcast {
        &recv
    } else {
        &send
    };
    if collective == Collective::Bcast && me == root {
        comm.write_local(&recv, 0, &block(root, 0, len))
            .map_err(fail)?;
    }
    let outcome = match (collective, choice) {
        (Collective::Barrier, None) => comm.barrier(),
        (Collective::Bcast, None) => comm.broadcast(buffer, root),
        (Collective::Gather, None) => comm.gather(&send, &recv, root),
        (Collective::Allgather, None) => comm.allgather(&send, &recv),
        (Collective::Alltoall, None) => comm.alltoall(&send, &recv),
        (Collective::Bcast, Some(c)) => comm.broadcast_with(c, buffer, root),
        (c, Some(choice)) => comm.collective_with(c, choice, &send, &recv, root),
    };
    outcome.map_err(fail)?;
    let mut got = vec![0u8; n * len];
    comm.read_local(&recv, 0, &mut got).map_err(fail)?;
    let expected: Vec<Option<Vec<u8>>> = (0..n)
        .map(|i| match collective {
            Collective::Allgather => Some(block(i, 0, len)),
            Collective::Gather if me == root => Some(block(i, 0, len)),
            Collective::Alltoall => Some(block(i, me, len)),
            Collective::Bcast if i == 0 => Some(block(root, 0, len)),
            _ => None,
        })
        .collect();
    for (i, want) in expected.iter().enumerate() {
        if let Some(want) = want
            && got[i * len..(i + 1) * len] != want[..]
        {
            return Err(format!(
                "{collective} {choice:?} {len} B: rank {me} received a wrong block from rank {i}"
            ));
        }
    }
    comm.reset_arena().map_err(fail)
}

fn run() -> Result<usize, String> {
    let dir = std::env::var("RAILCOLL_NICD").map_err(
        |_| "RAILCOLL_NICD is not set: run under railcoll launch, or point it at a nicd",
    )?;
    let job = Job::join(dir.as_ref(), &JoinOptions::default()).map_err(|e| e.to_string())?;
    let comm = job.comm();
    let mut checked = 0;
    for collective in Collective::ALL {
        for len in [8, 1000, 4096] {
            check(comm, collective, None, len)?;
            checked += 1;
        }
        for algorithm in collective.algorithms() {
            for choice in [Choice::host(algorithm), Choice::nic(algorithm)] {
                // What this job's shape does not take is refused alike on
                // every rank; skip it rather than revoke the communicator.
                let root = if collective.rooted() {
                    comm.size() - 1
                } else {
                    0
                };
                if comm.schedule(collective, choice, 256, root).is_err() {
                    continue;
                }
                check(comm, collective, Some(choice), 256)?;
                checked += 1;
            }
        }
    }
    job.finish().map_err(|e| e.to_string())?;
    Ok(checked)
}

fn main() {
    let rank = std::env::var("RAILCOLL_RANK")
        .or_else(|_| std::env::var("OMPI_COMM_WORLD_RANK"))
        .unwrap_or_else(|_| "?".into());
    match run() {
        Ok(checked) => println!("rank {rank}: {checked} collectives, every byte right"),
        Err(e) => {
            eprintln!("rank {rank}: {e}");
            std::process::exit(1);
        }
    }
}
