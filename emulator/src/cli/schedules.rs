//! `railcoll schedule`, `tuning` and `profile`: showing and verifying
//! schedules, the tuning table a user's runs pick algorithms by, the
//! model's profiles.

use super::*;

/// The tuning table the user chose (`RAILCOLL_TUNING`, else the table
/// `railcoll tune` wrote, else the built-in: [`TuningTable::locate`]),
/// read once per command: every cluster the command builds gets this one,
/// and a bad file fails the command before it runs anything.
pub(crate) fn users_tuning() -> Result<std::sync::Arc<TuningTable>, railcoll_host::Error> {
    static TABLE: std::sync::OnceLock<std::sync::Arc<TuningTable>> = std::sync::OnceLock::new();
    if let Some(table) = TABLE.get() {
        return Ok(std::sync::Arc::clone(table));
    }
    let table = std::sync::Arc::new(locate_tuning()?.0);
    Ok(std::sync::Arc::clone(TABLE.get_or_init(|| table)))
}

/// [`TuningTable::locate`] with the user's table where the XDG Base
/// Directory spec puts it ([`user_tuning_path`]).
pub(super) fn locate_tuning()
-> Result<(TuningTable, railcoll_host::sched::tuning::TuningSource), railcoll_host::Error> {
    TuningTable::locate_in(
        std::env::var_os(railcoll_host::sched::tuning::ENV),
        user_tuning_path(),
    )
}

/// The user's tuning table: `$XDG_CONFIG_HOME/railcoll/tuning.toml`, else
/// `$HOME/.config/railcoll/tuning.toml`. A relative `XDG_CONFIG_HOME` is
/// ignored, as the XDG Base Directory spec requires (it would name a
/// different file in every directory the command runs from).
pub(crate) fn user_tuning_path() -> Option<std::path::PathBuf> {
    user_tuning_path_in(
        std::env::var_os("XDG_CONFIG_HOME"),
        std::env::var_os("HOME"),
    )
}

pub(super) fn user_tuning_path_in(
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<std::path::PathBuf> {
    let base = xdg
        .map(std::path::PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            home.filter(|h| !h.is_empty())
                .map(|h| std::path::PathBuf::from(h).join(".config"))
        })?;
    Some(base.join("railcoll").join("tuning.toml"))
}

pub(super) fn run_catalogue(collective: Collective, args: &CollArgs) -> Result<(), CliError> {
    run_subject(
        collective,
        &args.algo,
        &args.cluster,
        &args.run,
        (&args.sizes.0, args.root),
        (args.iters, args.rounds, args.overlap),
    )
}

pub(super) fn run_schedule_show(args: &ScheduleArgs) -> Result<(), CliError> {
    let shape = shape_of(&args.cluster)?;
    let n = shape.size();
    for (what, v) in [("--rank", args.rank), ("--root", args.root)] {
        if v >= n {
            return Err(CliError::Usage(format!(
                "{what} {v} is not a rank: the cluster has ranks 0..={}",
                n - 1
            )));
        }
    }
    if !(args.t_s >= 0.0
        && args.bandwidth > 0.0
        && args.t_s.is_finite()
        && args.bandwidth.is_finite())
    {
        return Err(CliError::Usage(
            "--t-s must be >= 0 and --bandwidth > 0 (MB/s)".into(),
        ));
    }
    if args.algorithm == "all" || args.algorithm.contains(',') {
        return Err(CliError::Usage(
            "name one algorithm, not 'all' or a list".into(),
        ));
    }
    let algo = match crate::workbench::select(
        args.collective,
        &args.algorithm,
        shape,
        args.root,
        args.size,
    )?
    .algorithms[..]
    {
        [a] => a,
        _ => return Err(CliError::Usage("name one algorithm".into())),
    };
    let mut params =
        Params::new(args.collective, algo.algorithm, shape, args.root, args.size).with_choice(algo);
    params.guarded = args.persistent || args.contract == railcoll_host::BufferContract::Mpi;
    let set = generate(&params)?;
    let budget = Budget::default();
    // An `@nic` choice: what moved onto the NICs.
    let moved = algo.drive.offloaded().then(|| {
        let m = railcoll_host::sched::offload::moved(&set);
        let peak = set
            .ranks
            .iter()
            .map(|s| railcoll_host::sched::budget::chain_peak(s, &set.params).total)
            .max()
            .unwrap_or(0);
        format!(
            "# on the NICs: {} puts chained{}, {} still posted by the host; at most {peak} chain blocks per rank (budget {}, chain queue {} per NIC)",
            m.chained,
            if m.copies > 0 {
                format!(" and {} local copies by their DMA", m.copies)
            } else {
                String::new()
            },
            m.host_puts,
            budget.chain_blocks,
            budget.chain_queue
        )
    });
    let h = Hockney {
        t_s: args.t_s,
        tau: 1.0 / args.bandwidth,
    };
    let mut out = std::io::stdout().lock();
    let result = (|| -> std::io::Result<()> {
        writeln!(
            out,
            "# {} {} {}: {} nodes x {} ranks ({} placement, {} sockets), k = {} rails, {}{}",
            args.collective,
            algo,
            catalogue::entry(args.collective, algo.algorithm).map_or("", |e| e.reference),
            shape.topology.nodes(),
            shape.topology.ranks_per_node(),
            shape.topology.placement(),
            shape.sockets,
            shape.rails,
            if args.collective.sized() {
                format!("block {} B", args.size)
            } else {
                "no data".to_string()
            },
            if args.collective.rooted() {
                format!(", root {}", args.root)
            } else {
                String::new()
            }
        )?;
        if let Some(line) = &moved {
            writeln!(out, "{line}")?;
        }
        let readiness = set.ranks.iter().flat_map(|r| &r.steps);
        let readiness = readiness
            .filter(|s| matches!(s.op, railcoll_host::sched::Op::Ready { .. }))
            .count();
        if readiness > 0 {
            writeln!(
                out,
                "# guarded ({}): every rank first tells the ranks that touch its buffers it has entered the call ({readiness} readiness notices), and waits for theirs before touching anyone's",
                if args.persistent {
                    "persistent"
                } else {
                    "the MPI buffer contract"
                }
            )?;
        }
        match verify(&set, &budget) {
            Ok(r) => writeln!(
                out,
                "# verified: {} steps, {} puts, at most {} in flight per rail, {} scratch bytes per rank, {} counters, {} flags",
                r.steps, r.puts, r.max_in_flight, r.scratch_bytes, set.counters, set.flags
            )?,
            Err(v) => writeln!(out, "# VERIFIER REJECTS: {v}")?,
        }
        match cost::hockney(&set, &h) {
            Ok(t) => {
                write!(
                    out,
                    "# Hockney (t_s {} us, {} MB/s per rail): {t:.3} us",
                    h.t_s, args.bandwidth
                )?;
                match catalogue::formula(&params, &h) {
                    Some(f) if f.exact => writeln!(out, "; {}: {:.3} us", f.label, f.value)?,
                    Some(f) => writeln!(
                        out,
                        "; {}: {:.3} us (the formula is not meant for N = {n})",
                        f.label, f.value
                    )?,
                    None => writeln!(out, "; no closed form in the papers")?,
                }
            }
            Err(e) => writeln!(out, "# Hockney: {e}")?,
        }
        if let Some(s) = set.rank(args.rank) {
            write!(out, "{s}")?;
        }
        if args.offload
            && let Some(p) = railcoll_host::sched::offload::program(&set, args.rank)
        {
            write!(out, "{p}")?;
            writeln!(
                out,
                "chain budget: {} blocks per rank, {} chain queue entries per NIC",
                budget.chain_blocks, budget.chain_queue
            )?;
        }
        Ok(())
    })();
    output(result)
}

pub(super) fn run_tuning_show(file: Option<&std::path::Path>) -> Result<(), CliError> {
    let (table, source) = match file {
        Some(path) => {
            // The error names the file.
            let table = TuningTable::load(path).map_err(|e| CliError::Usage(e.to_string()))?;
            (table, path.display().to_string())
        }
        None => {
            let (t, source) = locate_tuning()?;
            (t, source.to_string())
        }
    };
    print_text(format!(
        "# tuning table in use: {source}\n{}",
        table.to_toml()
    ))
}

pub(super) fn run_profile(what: &ProfileCommand) -> Result<(), CliError> {
    match what {
        ProfileCommand::List => {
            let mut text = String::new();
            for (name, _) in crate::modeled::profile::BUILTIN {
                let p = Profile::builtin(name).map_err(CliError::BuiltinProfile)?;
                text.push_str(&format!("{name:14} {}\n", p.description));
            }
            print_text(text)
        }
        ProfileCommand::Show { name } => print_text(Profile::load(name)?.1),
    }
}
