//! `railcoll bench` and `soak`: puts, collectives, barriers, broadcasts,
//! revokes and overlap measured on an emulated cluster, and their tables.

use super::*;

pub(super) fn run_soak(args: &SoakArgs) -> Result<(), CliError> {
    let cfg = args.cluster.config()?;
    let cluster = crate::Cluster::new(cfg)?;
    let spec = crate::soak::SoakSpec {
        barriers: args.barriers,
        allgathers: args.allgathers,
        block: args.size,
        samples: args.samples,
    };
    let quiet = args.cluster.json;
    let samples = crate::soak::soak(&cluster, &spec, &|done| {
        if !quiet {
            eprint!("\r# {done} operations          ");
        }
    });
    if !quiet {
        eprintln!();
    }
    let samples = samples?;
    let mut out = std::io::stdout().lock();
    let mut write = || -> std::io::Result<()> {
        if quiet {
            for s in &samples {
                writeln!(
                    out,
                    "{{\"barriers\":{},\"allgathers\":{},\"seconds\":{:.3},\"rss_kib\":{},\"threads\":{},\"fds\":{}}}",
                    s.barriers,
                    s.allgathers,
                    s.seconds,
                    s.usage.rss_kib,
                    s.usage.threads,
                    s.usage.fds
                )?;
            }
            return Ok(());
        }
        writeln!(
            out,
            "# railcoll soak, threads mode: {} nodes x {} ranks, {} rails; all-gather blocks of {} B",
            cluster.topology().nodes(),
            cluster.topology().ranks_per_node(),
            cluster.config().shape.rails,
            args.size
        )?;
        writeln!(
            out,
            "{:>10} {:>10} {:>9} {:>10} {:>8} {:>5}",
            "barriers", "allgathers", "seconds", "rss_kib", "threads", "fds"
        )?;
        for s in &samples {
            writeln!(
                out,
                "{:>10} {:>10} {:>9.3} {:>10} {:>8} {:>5}",
                s.barriers, s.allgathers, s.seconds, s.usage.rss_kib, s.usage.threads, s.usage.fds
            )?;
        }
        Ok(())
    };
    write().map_err(CliError::Stdout)
}

/// The shape of `cluster` for the schedule generators.
pub(super) fn shape_of(cluster: &ClusterArgs) -> Result<Shape, crate::workbench::SpecError> {
    Ok(cluster
        .config()
        .map_err(crate::workbench::SpecError::Shape)?
        .shape)
}

/// Time the algorithms `algo` names of `collective` on the bench's cluster.
pub(super) fn run_subject(
    collective: Collective,
    algo: &str,
    cluster: &ClusterArgs,
    run: &ModeArgs,
    (sizes, root): (&[usize], usize),
    (iters, rounds, overlap): (u32, u16, bool),
) -> Result<(), CliError> {
    let shape = shape_of(cluster)?;
    crate::workbench::check_root(root, &shape)?;
    let first = sizes.first().copied().unwrap_or(0);
    let set: AlgoSet = crate::workbench::select(collective, algo, shape, root, first)?;
    let verify = !run.no_verify;
    set.with_bench(
        sizes,
        iters as usize,
        rounds as usize,
        root,
        verify,
        |bench| {
            if overlap {
                run_overlap(cluster, run, bench)
            } else {
                run_coll(cluster, run, bench)
            }
        },
    )
}

pub(super) fn run_put(args: &PutArgs) -> Result<(), CliError> {
    let cfg = args.cluster.config()?;
    let quiet = args.cluster.json;
    let progress = progress_line(quiet);
    let records = bench::put_bench(cfg.clone(), &args.sizes.0, args.rounds as usize, &progress);
    // End the progress line, before the results or the error.
    if !quiet {
        eprintln!();
    }
    let records = records?;
    write_output(args.cluster.json, &records, |out| {
        print_put_table(out, &cfg, &records)
    })
}

pub(super) fn run_revoke(args: &RevokeArgs) -> Result<(), CliError> {
    let cfg = run_config(&args.cluster, &args.run)?;
    let profile = match args.run.mode {
        Mode::Threads => None,
        Mode::Modeled => Some(Profile::load(&args.run.profile)?.0),
    };
    let record = bench::revoke_bench(cfg, profile.as_ref(), usize::from(args.rounds))?;
    write_output(args.cluster.json, std::slice::from_ref(&record), |out| {
        writeln!(
            out,
            "# revoke: one rank's all-gather fails, the others wait in it ({} ranks, {} mode)",
            record.procs, record.mode
        )?;
        writeln!(
            out,
            "# revoke_us  revoke_max_us  barrier_us  revoke/barrier"
        )?;
        writeln!(
            out,
            "{:10.2}  {:13.2}  {:10.2}  {:14.2}",
            record.revoke_us, record.revoke_max_us, record.barrier_us, record.barrier_ratio
        )
    })
}

pub(super) fn run_barrier(args: &BarrierArgs) -> Result<(), CliError> {
    run_subject(
        Collective::Barrier,
        &args.algo,
        &args.cluster,
        &args.run,
        (&[0], 0),
        (args.iters, args.rounds, args.overlap),
    )
}

pub(super) fn run_bcast(args: &BcastArgs) -> Result<(), CliError> {
    run_subject(
        Collective::Bcast,
        &args.algo,
        &args.cluster,
        &args.run,
        (&args.sizes.0, args.root),
        (args.iters, args.rounds, args.overlap),
    )
}

/// The "measured N B" line a run keeps rewriting on stderr (none with
/// `--json`).
pub(super) fn progress_line(quiet: bool) -> impl Fn(usize) + Sync {
    move |size: usize| {
        if !quiet {
            eprint!("\r# measured {size} B          ");
        }
    }
}

/// The cluster a bench runs on: its shape, and the mode and seed asked.
pub(super) fn run_config(cluster: &ClusterArgs, run: &ModeArgs) -> Result<ClusterConfig, CliError> {
    let cfg = run.faults.apply(ClusterConfig {
        mode: run.mode,
        seed: run.seed,
        data: run.data,
        progress: run.progress,
        ..cluster.config()?
    });
    // Refused before any point runs (a data mode threads mode has not,
    // a sample larger than the job).
    cfg.validate()?;
    Ok(cfg)
}

pub(super) fn run_coll(
    cluster: &ClusterArgs,
    run: &ModeArgs,
    bench: &CollBench<'_>,
) -> Result<(), CliError> {
    let cfg = run_config(cluster, run)?;
    let quiet = cluster.json;
    let progress = progress_line(quiet);
    let records = match run.mode {
        Mode::Threads => {
            if run.check_determinism {
                return Err(CliError::Usage(
                    "--check-determinism needs --mode modeled (threads mode is not deterministic)"
                        .into(),
                ));
            }
            bench::coll_bench(cfg.clone(), bench, &progress)
        }
        Mode::Modeled => {
            let (profile, _) = Profile::load(&run.profile)?;
            let workers = cluster.workers.map_or(1, usize::from);
            let first = bench::coll_model(cfg.clone(), &profile, bench, workers, &progress);
            match (run.check_determinism, first) {
                (true, Ok(a)) => {
                    let other = if workers == 1 { 2 } else { 1 };
                    match bench::coll_model(cfg.clone(), &profile, bench, other, &progress) {
                        Ok(b) => {
                            let same = a.len() == b.len()
                                && a.iter().zip(&b).all(|(x, y)| {
                                    x.trace_hash == y.trace_hash && x.latency_us == y.latency_us
                                });
                            if !same {
                                // End the progress line before the error.
                                eprintln!();
                                return Err(CliError::Nondeterministic { workers, other });
                            }
                            eprintln!(
                                "\n# determinism: {} runs repeated with {workers} and {other} workers, identical trace hashes",
                                a.len()
                            );
                            Ok(a)
                        }
                        Err(e) => Err(e),
                    }
                }
                (_, r) => r,
            }
        }
    };
    let records = records?;
    if !quiet {
        eprintln!();
    }
    write_output(cluster.json, &records, |out| {
        print_coll_table(out, &cfg, &records)
    })
}

/// `bench ... --overlap`: overlap % per algorithm and size.
pub(super) fn run_overlap(
    cluster: &ClusterArgs,
    run: &ModeArgs,
    bench: &CollBench<'_>,
) -> Result<(), CliError> {
    let cfg = run_config(cluster, run)?;
    if run.check_determinism {
        return Err(CliError::Usage(
            "--check-determinism does not apply to --overlap".into(),
        ));
    }
    let quiet = cluster.json;
    let progress = progress_line(quiet);
    let records = match run.mode {
        Mode::Threads => crate::overlap::overlap_threads(cfg.clone(), bench, &progress),
        Mode::Modeled => {
            let (profile, _) = Profile::load(&run.profile)?;
            crate::overlap::overlap_modeled(cfg.clone(), &profile, bench, &progress)
        }
    };
    if !quiet {
        eprintln!();
    }
    let records = records?;
    write_output(cluster.json, &records, |out| {
        let Some(first) = records.first() else {
            return Ok(());
        };
        writeln!(
            out,
            "# railcoll {} overlap, {} mode{}: {} nodes x {} ranks, {} rails (the slowest rank, us; overlap % as OSU: 100 x (1 - (total - compute) / pure))",
            first.collective,
            first.mode,
            first
                .profile
                .as_deref()
                .map(|p| format!(", profile {p}"))
                .unwrap_or_default(),
            cfg.shape.nodes(),
            cfg.shape.ranks_per_node(),
            cfg.shape.rails
        )?;
        writeln!(
            out,
            "{:>10} {:>22} {:>10} {:>10} {:>10} {:>9} {:>9}",
            "# size", "algorithm", "pure_us", "compute_us", "total_us", "overlap%", "pure/pp"
        )?;
        for r in &records {
            writeln!(
                out,
                "{:>10} {:>22} {:>10.3} {:>10.3} {:>10.3} {:>9.1} {:>9}",
                r.size,
                r.algorithm,
                r.pure_us,
                r.compute_us,
                r.total_us,
                r.overlap_pct,
                r.pingpong_ratio
                    .map(|x| format!("{x:.1}"))
                    .unwrap_or_else(|| "-".into())
            )?;
        }
        Ok(())
    })
}

pub(super) fn print_coll_table(
    out: &mut impl Write,
    cfg: &ClusterConfig,
    records: &[CollRecord],
) -> std::io::Result<()> {
    let Some(first) = records.first() else {
        return Ok(());
    };
    if first.mode == "modeled" {
        writeln!(
            out,
            "# railcoll {}, modeled mode, profile {}: {} nodes x {} ranks, {} rails (virtual latency: mean over ranks, us)",
            first.collective,
            first.profile.as_deref().unwrap_or("?"),
            cfg.shape.nodes(),
            cfg.shape.ranks_per_node(),
            cfg.shape.rails
        )?;
        writeln!(
            out,
            "{:>10} {:>18} {:>12} {:>12} {:>18}",
            "# size", "algorithm", "latency_us", "max_us", "trace_hash"
        )?;
        for r in records {
            writeln!(
                out,
                "{:>10} {:>18} {:>12.3} {:>12.3} {:>18}",
                r.size,
                r.algorithm,
                r.latency_us,
                r.latency_max_us,
                r.trace_hash.as_deref().unwrap_or("-")
            )?;
        }
        return Ok(());
    }
    writeln!(
        out,
        "# railcoll {}, threads mode: {} nodes x {} ranks, {} rails (latency: mean over ranks, us)",
        first.collective,
        cfg.shape.nodes(),
        cfg.shape.ranks_per_node(),
        cfg.shape.rails
    )?;
    writeln!(
        out,
        "# ratio: latency / cache-line ping-pong round trip measured in the same run"
    )?;
    writeln!(
        out,
        "{:>10} {:>18} {:>12} {:>12} {:>12} {:>10}",
        "# size", "algorithm", "latency_us", "max_us", "pingpong_ns", "lat/ping"
    )?;
    for r in records {
        writeln!(
            out,
            "{:>10} {:>18} {:>12.2} {:>12.2} {:>12.0} {:>10.1}",
            r.size,
            r.algorithm,
            r.latency_us,
            r.latency_max_us,
            r.pingpong_rtt_ns.unwrap_or(f64::NAN),
            r.pingpong_ratio.unwrap_or(f64::NAN)
        )?;
    }
    Ok(())
}

/// Print `records` as JSON lines or with `table` (a closed pipe is not an
/// error).
pub(super) fn write_output<T: serde::Serialize>(
    json: bool,
    records: &[T],
    table: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>,
) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let result = if json {
        print_json(&mut out, records)
    } else {
        table(&mut out)
    };
    output(result)
}

pub(super) fn print_json<T: serde::Serialize>(
    out: &mut impl Write,
    records: &[T],
) -> std::io::Result<()> {
    for r in records {
        writeln!(
            out,
            "{}",
            serde_json::to_string(r).map_err(std::io::Error::other)?
        )?;
    }
    Ok(())
}

pub(super) fn print_put_table(
    out: &mut impl Write,
    cfg: &ClusterConfig,
    records: &[PutRecord],
) -> std::io::Result<()> {
    writeln!(
        out,
        "# railcoll put, threads mode: {} nodes x {} ranks, {} rails, {} B packets",
        cfg.shape.nodes(),
        cfg.shape.ranks_per_node(),
        cfg.shape.rails,
        cfg.packet_size
    )?;
    writeln!(
        out,
        "# latency = post to completion (data delivered and acknowledged)"
    )?;
    writeln!(
        out,
        "# ratios: bandwidth / memcpy bandwidth, latency / cache-line ping-pong round trip (same run)"
    )?;
    writeln!(
        out,
        "{:>10} {:>6} {:>12} {:>10} {:>11} {:>8} {:>12} {:>9}",
        "# size",
        "rails",
        "latency_us",
        "bw_GB/s",
        "memcpy_GB/s",
        "bw/mcpy",
        "pingpong_ns",
        "lat/ping"
    )?;
    for r in records {
        writeln!(
            out,
            "{:>10} {:>6} {:>12.2} {:>10.3} {:>11.3} {:>8.3} {:>12.0} {:>9.1}",
            r.size,
            r.rails,
            r.latency_us,
            r.bandwidth_gbps,
            r.memcpy_gbps,
            r.memcpy_ratio,
            r.pingpong_rtt_ns,
            r.pingpong_ratio
        )?;
    }
    Ok(())
}
