//! `railcoll conformance`: the NIC conformance suite
//! ([`railcoll_conformance`]) on an in-process emulator, or as a rank of a
//! launched job against its `nicd`'s devices (`--join`). Rank 0 prints
//! one line per check; the exit status is 1 if any check failed.

use super::*;
use railcoll_conformance::{CHECKS, Outcome, Verdict};

pub(super) fn run(args: &ConformanceArgs) -> Result<(), CliError> {
    if args.list {
        let mut text = String::new();
        for c in CHECKS {
            text += &format!("{:<20} {} ({})\n", c.name, c.what, c.spec);
        }
        return print_text(text);
    }
    if let Some(bad) = args
        .only
        .iter()
        .find(|name| !CHECKS.iter().any(|c| c.name == name.as_str()))
    {
        let names: Vec<&str> = CHECKS.iter().map(|c| c.name).collect();
        return Err(CliError::Usage(format!(
            "conformance: no check named {bad:?}; the checks are {}",
            names.join(", ")
        )));
    }
    let select = |name: &str| args.only.is_empty() || args.only.iter().any(|o| o == name);
    let (report, device) = if args.join {
        joined(&select)?
    } else if !args.vfio.is_empty() {
        on_boards(args, &select)?
    } else {
        in_process(args, &select)?
    };
    let Some(report) = report else {
        // Not rank 0: rank 0 speaks for the job.
        return Ok(());
    };
    let mut text = format!("conformance of {device}\n");
    for outcome in &report {
        text += &format!("{outcome}\n");
    }
    let failed = report.iter().filter(|o| !o.verdict.passed()).count();
    let skipped = report
        .iter()
        .filter(|o| matches!(o.verdict, Verdict::NotApplicable(_)))
        .count();
    text += &format!(
        "{} passed, {skipped} not applicable, {failed} failed\n",
        report.len() - failed - skipped
    );
    print_text(text)?;
    if failed > 0 {
        return Err(CliError::Nonconformant {
            failed,
            checks: report.len(),
        });
    }
    Ok(())
}

type Report = Option<Vec<Outcome>>;

fn in_process(
    args: &ConformanceArgs,
    select: &(dyn Fn(&str) -> bool + Sync),
) -> Result<(Report, String), CliError> {
    let cfg = ClusterConfig {
        seed: args.seed,
        ..args.faults.apply(args.cluster.config()?)
    };
    let device = format!(
        "the in-process emulator ({} mode, {} nodes x {} ranks x {} rails{})",
        cfg.mode.name(),
        cfg.shape.nodes(),
        cfg.shape.ranks_per_node(),
        cfg.shape.rails,
        if cfg.faults.is_none() {
            String::new()
        } else {
            format!(", faults {}", args.faults.faults)
        }
    );
    let faulty = !cfg.faults.is_none();
    let cluster = crate::Cluster::new(cfg)?;
    let report = rank0_report(cluster.run(|comm| railcoll_conformance::run(comm, select)))?;
    let device = if faulty {
        // What go-back-N had to recover, so a pass under faults is seen
        // to have met some.
        let c = cluster.fault_counts();
        format!(
            "{device}: of {} packets, {} dropped, {} damaged, {} duplicated, {} delayed",
            c.judged,
            c.dropped + c.rail_down,
            c.corrupt_header + c.corrupt_payload,
            c.duplicated,
            c.delayed
        )
    } else {
        device
    };
    Ok((Some(report), device))
}

fn joined(select: &dyn Fn(&str) -> bool) -> Result<(Report, String), CliError> {
    use railcoll_host::process::{Job, JoinOptions};
    let dir = std::env::var(crate::launcher::NICD_VAR).map_err(|_| {
        CliError::Usage(format!(
            "conformance --join: {} is not set (run it under railcoll launch, or set it)",
            crate::launcher::NICD_VAR
        ))
    })?;
    let job = Job::join(dir.as_ref(), &JoinOptions::default())?;
    let comm = job.comm();
    let report = railcoll_conformance::run(comm, select).map_err(|s| stopped(comm.rank(), s))?;
    let t = comm.topology();
    let device = format!(
        "the nicd serving {dir} over vfio-user ({} nodes x {} ranks x {} rails)",
        t.nodes(),
        t.ranks_per_node(),
        comm.rails()
    );
    let failed = report.iter().filter(|o| !o.verdict.passed()).count();
    let checks = report.len();
    let speaks = comm.rank() == 0;
    job.finish()?;
    if !speaks && failed > 0 {
        // Rank 0 prints the report; every rank's status says it failed.
        return Err(CliError::Nonconformant { failed, checks });
    }
    Ok((speaks.then_some(report), device))
}

/// The suite stopped on `rank`: what it had agreed, and where it stopped
/// (exit 1: the device failed, as a failed check does).
fn stopped(rank: usize, s: Box<railcoll_conformance::Stopped>) -> CliError {
    for outcome in &s.report {
        eprintln!("{outcome}");
    }
    CliError::Job {
        status: 1,
        what: format!("conformance: rank {rank}: {s}"),
    }
}

/// One node's boards behind VFIO, its ranks threads of this process.
fn on_boards(
    args: &ConformanceArgs,
    select: &(dyn Fn(&str) -> bool + Sync),
) -> Result<(Report, String), CliError> {
    use railcoll_host::vfio::{VfioNode, VfioOptions};
    let cfg = ClusterConfig {
        shape: railcoll_host::Shape::new(
            1,
            usize::from(args.cluster.ranks_per_node),
            1,
            args.vfio.len(),
            Placement::Block,
        )?,
        ..args.faults.apply(args.cluster.config()?)
    };
    let options = VfioOptions::new(args.vfio.clone(), crate::cluster::node_memory_len(&cfg));
    let node = std::sync::Arc::new(VfioNode::open(&options).map_err(railcoll_host::Error::from)?);
    // The NICs' parameters, as a cluster's are brought up (packet size,
    // alternate rails, --retransmit-timeout, --retry-limit).
    let wait = railcoll_host::env::ParkingWait::new(
        64,
        std::time::Duration::from_micros(50),
        cfg.wait_timeout,
    );
    for rail in 0..cfg.shape.rails {
        let io = railcoll_host::device::Device::registers(&*node, rail)
            .map_err(railcoll_host::Error::from)?;
        crate::cluster::set_params(io, &wait, &cfg, rail)?;
    }
    let device = format!(
        "the boards {} behind VFIO (1 node x {} ranks x {} rails)",
        args.vfio.join(", "),
        cfg.shape.ranks_per_node(),
        cfg.shape.rails
    );
    let results = crate::fake_vfio::run_ranks(
        &[node],
        cfg.shape,
        cfg.arena_size,
        cfg.wait_timeout,
        &|comm| railcoll_conformance::run(comm, select),
    );
    Ok((Some(rank0_report(results)?), device))
}

/// One rank's run of the suite: its report, or where it stopped, or the
/// error that kept it from running.
type RankRun =
    Result<Result<Vec<Outcome>, Box<railcoll_conformance::Stopped>>, railcoll_host::Error>;

/// Rank 0's report (every rank's agrees), once every rank has run the
/// suite to its end; else the first rank's error or stop.
fn rank0_report(results: Vec<RankRun>) -> Result<Vec<Outcome>, CliError> {
    let mut reports = Vec::with_capacity(results.len());
    for (rank, r) in results.into_iter().enumerate() {
        reports.push(r?.map_err(|s| stopped(rank, s))?);
    }
    reports
        .into_iter()
        .next()
        .ok_or_else(|| CliError::Usage("conformance: a job of no ranks".into()))
}
