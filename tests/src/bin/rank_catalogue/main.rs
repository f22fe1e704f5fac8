//! A rank program for `railcoll launch` (and `mpirun`): joins the job
//! through the `nicd` named by `RAILCOLL_NICD`, runs every collective of
//! the catalogue with every algorithm, host-driven and on the NICs (each
//! at the next of a few block sizes, in turn), checks every rank's output byte for byte against the
//! MPI definition ([`railcoll_tests::coll::run_case`]), and exits 0 only
//! if every case was right.
//!
//! Options (environment): `RANK_CATALOGUE_SIZES` (comma-separated block
//! sizes, default `0,1,1000,4096`); `RANK_CATALOGUE_DIE=r` makes rank `r`
//! kill itself with SIGKILL while the others are in an all-gather, for
//! the tests of a job that loses a rank;
//! `RANK_CATALOGUE_TIMEOUT` (seconds, default 60) bounds every wait and
//! every `test()` loop;
//! `RANK_CATALOGUE_ROUNDS` (default 1) runs the catalogue that many times.
//!
//! `rank_catalogue conformance` runs the NIC conformance suite
//! (`railcoll_conformance`) as a rank of the job instead, every rank
//! printing every outcome and `conformance: N checks, F failed`, and
//! exits 1 if a check failed.
//!
//! `rank_catalogue nicd DIR NODES RANKS_PER_NODE RAILS [FABRIC HOST]`
//! serves a job's NICs in `DIR` instead (`railcoll nicd` for the tests,
//! which cannot run the emulator crate's binary), until killed: all of
//! them, or host `HOST`'s of the fabric file `FABRIC`; `rank_catalogue bench ...`
//! measures ranks as processes beside ranks as threads (`bench.rs`).

use std::time::Duration;

use railcoll_host::process::{Job, JoinOptions};
use railcoll_host::sched::{Algorithm, Choice, Collective};
use railcoll_tests::coll::{Case, Form, run_case};

mod bench;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("bench") {
        if let Err(e) = bench::main(&args[1..]) {
            eprintln!("rank_catalogue bench: {e}");
            std::process::exit(1);
        }
        return;
    }
    if args.first().map(String::as_str) == Some("conformance") {
        std::process::exit(match conformance() {
            Ok(0) => 0,
            Ok(_) => 1,
            Err(e) => {
                eprintln!("conformance: {e}");
                2
            }
        });
    }
    if args.first().map(String::as_str) == Some("nicd") {
        std::process::exit(match serve(&args[1..]) {
            Ok(never) => match never {},
            Err(e) => {
                eprintln!("nicd: {e}");
                2
            }
        });
    }
    std::process::exit(match run() {
        Ok(cases) => {
            println!("ok: {cases} cases");
            0
        }
        Err(e) => {
            eprintln!(
                "rank {}: {e}",
                std::env::var("RAILCOLL_RANK").unwrap_or_default()
            );
            1
        }
    })
}

/// Serve `DIR NODES RANKS_PER_NODE RAILS [FABRIC HOST]` until killed.
fn serve(args: &[String]) -> Result<std::convert::Infallible, String> {
    let (dir, nodes, rpn, rails, fabric) = match args {
        [dir, nodes, rpn, rails] => (dir, nodes, rpn, rails, None),
        [dir, nodes, rpn, rails, fabric, host] => (dir, nodes, rpn, rails, Some((fabric, host))),
        _ => {
            return Err(
                "usage: rank_catalogue nicd DIR NODES RANKS_PER_NODE RAILS [FABRIC HOST]".into(),
            );
        }
    };
    let number = |s: &String| {
        s.parse::<usize>()
            .map_err(|_| format!("{s:?} is not a number"))
    };
    let shape = railcoll_host::topology::Shape::new(
        number(nodes)?,
        number(rpn)?,
        1,
        number(rails)?,
        railcoll_host::Placement::Block,
    )
    .map_err(|e| e.to_string())?;
    let cfg = railcoll_emu::ClusterConfig {
        shape,
        arena_size: 16 << 20,
        ..railcoll_emu::ClusterConfig::default()
    };
    let here = match fabric {
        None => None,
        Some((file, host)) => {
            let f = railcoll_emu::fabric::Fabric::read(file.as_ref()).map_err(|e| e.to_string())?;
            let here = railcoll_emu::fabric::Here::new(
                f,
                number(host)?,
                cfg.shape.nodes(),
                cfg.shape.rails,
            )
            .map_err(|e| e.to_string())?;
            Some(here)
        }
    };
    let _nicd =
        railcoll_emu::nicd::Nicd::start_on(&cfg, dir.as_ref(), here).map_err(|e| e.to_string())?;
    loop {
        std::thread::park();
    }
}

/// The conformance suite against this job's nicd; every rank prints each
/// outcome, then a count. The checks that failed.
fn conformance() -> Result<usize, String> {
    let dir = std::env::var("RAILCOLL_NICD").map_err(|_| "RAILCOLL_NICD is not set".to_string())?;
    let job = Job::join(dir.as_ref(), &JoinOptions::default()).map_err(|e| format!("join: {e}"))?;
    let report = railcoll_conformance::run(job.comm(), &|_| true).map_err(|e| e.to_string())?;
    for outcome in &report {
        println!("{outcome}");
    }
    let failed = report.iter().filter(|o| !o.verdict.passed()).count();
    println!("conformance: {} checks, {failed} failed", report.len());
    job.finish().map_err(|e| format!("finish: {e}"))?;
    Ok(failed)
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn run() -> Result<usize, String> {
    let dir = std::env::var("RAILCOLL_NICD").map_err(|_| "RAILCOLL_NICD is not set".to_string())?;
    let timeout: u64 = env_or("RANK_CATALOGUE_TIMEOUT", "60")
        .parse()
        .map_err(|_| "RANK_CATALOGUE_TIMEOUT is not a number of seconds")?;
    let options = JoinOptions {
        wait_timeout: Duration::from_secs(timeout),
        ..JoinOptions::default()
    };
    // A `test()` loop polls no longer than a wait waits: a rank whose NICs
    // wait on a dead host's triggers ends as soon through either form.
    railcoll_tests::coll::set_poll_deadline(options.wait_timeout);
    let job = Job::join(dir.as_ref(), &options).map_err(|e| format!("join: {e}"))?;
    let comm = job.comm();
    if let Ok(victim) = env_or("RANK_CATALOGUE_DIE", "").parse::<usize>() {
        return die_mid_collective(comm, victim);
    }
    let sizes: Vec<usize> = env_or("RANK_CATALOGUE_SIZES", "0,1,1000,4096")
        .split(',')
        .map(|s| s.trim().parse().map_err(|_| format!("bad size {s:?}")))
        .collect::<Result<_, _>>()?;
    let rounds: usize = env_or("RANK_CATALOGUE_ROUNDS", "1")
        .parse()
        .map_err(|_| "RANK_CATALOGUE_ROUNDS is not a number")?;
    let mut cases = 0;
    for _ in 0..rounds {
        cases += catalogue(comm, &sizes)?;
    }
    job.finish().map_err(|e| format!("finish: {e}"))?;
    Ok(cases)
}

/// Every collective and algorithm the shape takes, at `sizes`; the cases
/// run.
fn catalogue(comm: &railcoll_host::Comm, sizes: &[usize]) -> Result<usize, String> {
    let (n, nodes) = (comm.size(), comm.topology().nodes());
    let mut cases = 0;
    let mut salt = 0usize;
    for c in Collective::ALL {
        for a in c.algorithms() {
            if a == Algorithm::Shm && nodes > 1 {
                continue;
            }
            // Host-driven and on the NICs, each at the next size.
            for choice in [Choice::host(a), Choice::nic(a)] {
                salt += 1;
                let bytes = sizes[salt % sizes.len()];
                let case = Case {
                    c,
                    a: choice,
                    root: if c.rooted() { salt % n } else { 0 },
                    bytes,
                    form: [Form::Blocking, Form::Wait, Form::Test][salt % 3],
                };
                // An algorithm this shape does not take (refused alike on
                // every rank, from the shape alone) is left out: calling it
                // would revoke the communicator.
                if comm.schedule(c, choice, bytes, case.root).is_err() {
                    continue;
                }
                run_case(comm, case)?;
                cases += 1;
            }
        }
    }
    Ok(cases)
}

/// Every rank but `victim` starts a non-blocking all-gather and waits for
/// it; `victim` kills itself (SIGKILL) once the others are on their way.
/// The others must return a typed error, not hang and not succeed.
fn die_mid_collective(comm: &railcoll_host::Comm, victim: usize) -> Result<usize, String> {
    let n = comm.size();
    let send = comm.alloc(4096).map_err(|e| e.to_string())?;
    let recv = comm.alloc(4096 * n).map_err(|e| e.to_string())?;
    comm.barrier().map_err(|e| e.to_string())?;
    if comm.rank() == victim {
        std::thread::sleep(Duration::from_millis(200));
        let _ = std::process::Command::new("kill")
            .args(["-9", &std::process::id().to_string()])
            .status();
        std::thread::sleep(Duration::from_secs(60));
        return Err("still alive after kill -9".into());
    }
    let outcome = comm
        .icollective_with(Collective::Allgather, Algorithm::Ring, &send, &recv, 0)
        .and_then(|request| request.wait());
    match outcome {
        Ok(()) => Err("the all-gather completed without a rank".into()),
        Err(e) => {
            println!("typed error: {e}");
            Ok(0)
        }
    }
}
