//! `railcoll sweep`, `trace` and `tune`: the workbench's command line.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use railcoll_host::sched::Shape;
use railcoll_host::sched::tuning::TuningTable;

use super::error::{CliError, output};
use super::{Sizes, parse_size, parse_sizes};
use crate::cluster::{ClusterConfig, DataMode, Mode};
use crate::modeled::{Profile, ProfileError};
use crate::workbench::sweep::{self, Sweep, SweepSpec};
use crate::workbench::{PendingFile, Preset, SpecError, parse_collectives, plot, trace, tune};
use railcoll_host::Collective;

/// The cluster, mode and profile of a study (sweep, trace, tune).
#[derive(Debug, Args, Clone)]
pub struct StudyArgs {
    /// Named cluster: qsnet2-4x4 (\[QA08\]'s platform), clan-8x1, ib-4x16,
    /// hockney-4x1. The shape flags below override its fields.
    #[arg(long, default_value = "qsnet2-4x4", value_parser = |s: &str| s.parse::<Preset>())]
    pub preset: Preset,
    /// The shape flags (each overrides the preset's).
    #[command(flatten)]
    pub shape: ShapeFlags,
    /// Rank placement.
    #[arg(long, value_parser = ["block", "cyclic"])]
    pub placement: Option<String>,
    /// modeled: deterministic virtual time under --profile (the default);
    /// threads: free-running threads, wall time.
    #[arg(long, default_value = "modeled", value_parser = |s: &str| s.parse::<Mode>())]
    pub mode: Mode,
    /// Calibration profile (built-in name or TOML file; default: the
    /// preset's). Also gives the Hockney parameters of --predict.
    #[arg(long)]
    pub profile: Option<String>,
    /// Seed of modeled runs (it also drives --faults).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Modeled mode's payload: full (every byte moved and checked), none
    /// (no payload moved; the schedule verifier proves each schedule
    /// first), or sample=N (the data of rank 0 and N - 1 seeded others
    /// moved, and checked wherever it must land).
    #[arg(long, default_value = "full", value_parser = |s: &str| s.parse::<DataMode>())]
    pub data: DataMode,
    /// Modeled mode: report the sequencer's events per second on stderr
    /// about once a second (long runs).
    #[arg(long)]
    pub progress: bool,
    /// Injected faults.
    #[command(flatten)]
    pub faults: super::FaultArgs,
    /// Threads running sizes side by side (modeled; default 2).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=64))]
    pub workers: Option<u8>,
    /// Skip the check of the results: by default, after the timed calls
    /// (outside the timed region), every rank's receive buffer is compared
    /// with the collective's definition, and a wrong result fails the run
    /// (exit 1) with no figure printed or written.
    #[arg(long)]
    pub no_verify: bool,
}

use crate::workbench::gcd;

impl StudyArgs {
    /// The cluster these flags describe (the shape checked).
    pub fn config(&self) -> Result<ClusterConfig, railcoll_host::Error> {
        let p = self.preset;
        let f = &self.shape;
        let rpn = f.ranks_per_node.map_or(p.ranks_per_node, usize::from);
        let shape = Shape::new(
            f.nodes.map_or(p.nodes, |n| n as usize),
            rpn,
            f.sockets.map_or(gcd(p.sockets, rpn), usize::from),
            f.rails.map_or(p.rails, usize::from),
            self.placement
                .as_deref()
                .and_then(|s| s.parse().ok())
                .unwrap_or(railcoll_host::Placement::Block),
        )?;
        Ok(self.faults.apply(ClusterConfig {
            shape,
            mode: self.mode,
            seed: self.seed,
            data: self.data,
            progress: self.progress,
            tuning: super::users_tuning()?,
            ..ClusterConfig::default()
        }))
    }

    /// The calibration profile.
    pub fn profile(&self) -> Result<Profile, ProfileError> {
        let name = self.profile.as_deref().unwrap_or(self.preset.profile);
        Profile::load(name).map(|(p, _)| p)
    }

    fn workers(&self) -> usize {
        self.workers.map_or(2, usize::from)
    }
}

/// The shapes of `--scaling`: 4, 8 and 16 processes, keeping the node
/// count (the papers scale processes per node) where it divides them.
pub fn scaling_configs(base: ClusterConfig) -> Result<Vec<ClusterConfig>, CliError> {
    [4usize, 8, 16]
        .iter()
        .map(|&procs| {
            let (nodes, rpn) = if procs % base.shape.nodes() == 0 && procs / base.shape.nodes() <= 16 {
                (base.shape.nodes(), procs / base.shape.nodes())
            } else if procs % base.shape.ranks_per_node() == 0 {
                (procs / base.shape.ranks_per_node(), base.shape.ranks_per_node())
            } else {
                return Err(CliError::Usage(format!(
                    "--scaling runs 4, 8 and 16 processes: --nodes {} or --ranks-per-node {} must divide 4",
                    base.shape.nodes(), base.shape.ranks_per_node()
                )));
            };
            Ok(ClusterConfig {
                shape: base.shape.resized(nodes, rpn, gcd(base.shape.sockets, rpn))?,
                ..base.clone()
            })
        })
        .collect()
}

/// `all` or one collective.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects(pub Vec<Collective>);

/// Parse `all` or one collective.
fn parse_subjects(s: &str) -> Result<Subjects, String> {
    parse_collectives(s).map(Subjects)
}

/// `railcoll sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// gather, allgather, alltoall, bcast, barrier, or all.
    #[arg(value_parser = parse_subjects)]
    pub collective: Subjects,
    /// Cluster, mode and profile.
    #[command(flatten)]
    pub study: StudyArgs,
    /// Algorithms: all (every one that runs on the shape), all@nic (every
    /// one compiled onto the NICs), all@nic-dma (the NICs' DMA doing the
    /// local copies too) or a list (direct,bruck,bruck@nic).
    #[arg(long, default_value = "all")]
    pub algo: String,
    /// Message (block) sizes: a list (8,64,1K) or a power-of-two range.
    #[arg(long, default_value = "4..1M", value_parser = parse_sizes)]
    pub sizes: Sizes,
    /// Root rank (gather, bcast).
    #[arg(long, default_value_t = 0)]
    pub root: usize,
    /// Operations per sample (default: modeled 1, or 10 for bcast and
    /// barrier; threads 20).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub iters: Option<u32>,
    /// Interleaved rounds, medians reported (default: 1 modeled, 3 threads).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub rounds: Option<u16>,
    /// Add each algorithm's Hockney prediction (parameters from the profile).
    #[arg(long)]
    pub predict: bool,
    /// Also write the results as CSV (one row per size and algorithm).
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Print the results as one JSON document instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Draw the figure: FILE.svg or FILE.png.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Sweep 4, 8 and 16 processes (the papers' scalability runs).
    #[arg(long)]
    pub scaling: bool,
    /// Tuning table whose choice the `tuned` column shows (default: the
    /// one the library uses).
    #[arg(long)]
    pub tuning: Option<PathBuf>,
    /// No progress bar or notes on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// `railcoll trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// gather, allgather, alltoall, bcast or barrier.
    #[arg(value_parser = |s: &str| s.parse::<Collective>())]
    pub collective: Collective,
    /// Cluster, mode and profile.
    #[command(flatten)]
    pub study: StudyArgs,
    /// The algorithm (NAME, or NAME@nic compiled onto the NICs).
    #[arg(long)]
    pub algo: String,
    /// Message (block) size.
    #[arg(long, default_value = "4K", value_parser = parse_size)]
    pub size: usize,
    /// Root rank (gather, bcast).
    #[arg(long, default_value_t = 0)]
    pub root: usize,
    /// The Chrome trace file to write (open it in ui.perfetto.dev).
    #[arg(long, short)]
    pub output: PathBuf,
    /// No notes on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Cluster shape flags, each optional (a default fills what is not given).
#[derive(Clone, Debug, Args)]
pub struct ShapeFlags {
    /// Nodes (1..=32768; 1..=256 in threads mode).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=32768))]
    pub nodes: Option<u32>,
    /// Ranks per node (1..=16).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=16))]
    pub ranks_per_node: Option<u8>,
    /// Sockets per node (default: the preset's or profile's, reduced to
    /// divide the ranks per node).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=64))]
    pub sockets: Option<u8>,
    /// Rails (1..=4).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=4))]
    pub rails: Option<u8>,
}

/// `railcoll tune`.
#[derive(Debug, Args)]
pub struct TuneArgs {
    /// gather, allgather, alltoall, bcast, barrier, or all.
    #[arg(default_value = "all", value_parser = parse_subjects)]
    pub collective: Subjects,
    /// Cluster, mode and profile.
    #[command(flatten)]
    pub study: StudyArgs,
    /// Shapes to tune, NODESxRANKS_PER_NODE (e.g. 4x1,4x2,4x4; default:
    /// the cluster's shape).
    #[arg(long)]
    pub shapes: Option<String>,
    /// Tune for 4, 8 and 16 processes.
    #[arg(long)]
    pub scaling: bool,
    /// Algorithms ranked, as `sweep --algo`: all (every one, host-driven),
    /// or a list such as all,all@nic,all@nic-dma, which lets a form
    /// compiled onto the NICs win wherever it is measured faster.
    #[arg(long, default_value = "all")]
    pub algo: String,
    /// Message (block) sizes.
    #[arg(long, default_value = "4..1M", value_parser = parse_sizes)]
    pub sizes: Sizes,
    /// Operations per sample (default: 1 modeled, 20 threads).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    pub iters: Option<u32>,
    /// Interleaved rounds (default: 1 modeled, 3 threads).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub rounds: Option<u16>,
    /// Where to write the table (default: the user's table, which the
    /// library then uses: $XDG_CONFIG_HOME/railcoll/tuning.toml or
    /// ~/.config/railcoll/tuning.toml).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Make the library's built-in table: the rules measured here followed
    /// by the fallback rules (host/tuning/fallback.toml) instead of the
    /// built-in table (docs/gen/tuning.py regenerates
    /// host/tuning/default.toml with it).
    #[arg(long)]
    pub builtin: bool,
    /// No progress bar or notes on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Run `specs` one after another under one progress bar.
fn run_specs(specs: &[SweepSpec], quiet: bool) -> Result<Vec<Sweep>, CliError> {
    let total: usize = specs.iter().map(|s| s.run_sizes().len()).sum();
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} points, {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut sweeps = Vec::new();
    for spec in specs {
        bar.set_prefix(format!(
            "{} {}x{}",
            spec.subject,
            spec.cluster.shape.nodes(),
            spec.cluster.shape.ranks_per_node()
        ));
        let tick = |_size: usize| bar.inc(1);
        match sweep::run(spec, &tick) {
            Ok(s) => sweeps.push(s),
            Err(e) => {
                bar.abandon();
                return Err(e.into());
            }
        }
    }
    bar.finish_and_clear();
    Ok(sweeps)
}

/// The specs of a sweep or tune: every subject on every shape, all
/// validated before anything runs.
#[allow(clippy::too_many_arguments)]
fn specs_for(
    subjects: &[Collective],
    configs: &[ClusterConfig],
    study: &StudyArgs,
    algo: &str,
    sizes: &[usize],
    root: usize,
    iters: Option<u32>,
    rounds: Option<u16>,
    predict: bool,
    tuning: Option<&TuningTable>,
) -> Result<Vec<SweepSpec>, CliError> {
    let profile = study.profile()?;
    let modeled = study.mode == Mode::Modeled;
    let mut specs = Vec::new();
    for cluster in configs {
        for &subject in subjects {
            let spec = SweepSpec {
                subject,
                algo: algo.to_string(),
                sizes: sizes.to_vec(),
                root,
                cluster: cluster.clone(),
                profile: profile.clone(),
                iters: iters.map_or(sweep::default_iters(subject, study.mode), |v| v as usize),
                rounds: rounds.map_or(if modeled { 1 } else { 3 }, usize::from),
                workers: study.workers(),
                predict,
                tuning: tuning.cloned(),
                verify: !study.no_verify,
            };
            spec.validate().map_err(|e| SpecError::In {
                source: Box::new(e),
                subject,
                nodes: cluster.shape.nodes(),
                ranks_per_node: cluster.shape.ranks_per_node(),
            })?;
            specs.push(spec);
        }
    }
    Ok(specs)
}

pub(super) fn run_sweep(args: &SweepArgs) -> Result<(), CliError> {
    let base = args.study.config()?;
    let tuning = match &args.tuning {
        Some(path) => TuningTable::load(path)?,
        None => TuningTable::clone(&base.tuning),
    };
    let configs = if args.scaling {
        scaling_configs(base)?
    } else {
        vec![base]
    };
    // Outputs are reserved before any work: an unwritable path fails now.
    let outputs: Vec<(&'static str, &std::path::Path)> = [("csv", &args.csv), ("plot", &args.plot)]
        .into_iter()
        .filter_map(|(flag, p)| p.as_deref().map(|p| (flag, p)))
        .collect();
    crate::workbench::distinct_outputs(&outputs)?;
    let plot_file = args
        .plot
        .as_deref()
        .map(|p| plot::format_of(p).and_then(|_| PendingFile::create(p)))
        .transpose()?;
    let csv_file = args.csv.as_deref().map(PendingFile::create).transpose()?;
    if plot_file.is_some() && args.sizes.0.len() < 2 {
        return Err(CliError::Usage(
            "--plot draws latency against size: give --sizes at least two sizes".into(),
        ));
    }
    let specs = specs_for(
        &args.collective.0,
        &configs,
        &args.study,
        &args.algo,
        &args.sizes.0,
        args.root,
        args.iters,
        args.rounds,
        args.predict,
        Some(&tuning),
    )?;
    let sweeps = run_specs(&specs, args.quiet)?;
    // Every output staged before any is committed: a plot that cannot be
    // drawn leaves no CSV either; a signal meanwhile waits for the end.
    crate::workbench::write_outputs(|| -> Result<(), CliError> {
        if let Some(f) = &csv_file {
            f.stage(sweep::csv(&sweeps).as_bytes())?;
        }
        if let Some(f) = &plot_file {
            plot::render(&sweeps, f)?;
        }
        for f in [csv_file, plot_file].into_iter().flatten() {
            let target = f.target().display().to_string();
            f.commit()?;
            if !args.quiet {
                eprintln!("# wrote {target}");
            }
        }
        Ok(())
    })?;
    let mut out = std::io::stdout().lock();
    let result = if args.json {
        out.write_all(sweep::json(&sweeps).as_bytes())
    } else {
        sweeps.iter().enumerate().try_for_each(|(i, s)| {
            if i > 0 {
                writeln!(out)?;
            }
            sweep::write_table(&mut out, s)
        })
    };
    output(result)
}

pub(super) fn run_trace(args: &TraceArgs) -> Result<(), CliError> {
    let profile = args.study.profile()?;
    let spec = trace::TraceSpec {
        subject: args.collective,
        algo: args.algo.clone(),
        size: args.size,
        root: args.root,
        cluster: args.study.config()?,
        profile,
    };
    spec.validate()?;
    let file = PendingFile::create(&args.output)?;
    let traced = trace::run(&spec)?;
    let text = serde_json::to_string(&traced.json).unwrap_or_default();
    file.write(text.as_bytes())?;
    if !args.quiet {
        eprintln!(
            "# wrote {}: {} spans and instants; {} {} at {} B: {:.3} us ({} mode); open it in ui.perfetto.dev",
            args.output.display(),
            traced.spans,
            args.collective,
            args.algo,
            spec.size,
            traced.latency_us,
            spec.cluster.mode.name()
        );
    }
    Ok(())
}

/// Parse `4x1,4x2` into (nodes, ranks per node) pairs.
fn parse_shapes(s: &str) -> Result<Vec<(usize, usize)>, String> {
    s.split(',')
        .map(|part| {
            let bad = || {
                format!("shape '{part}' is not NODESxRANKS_PER_NODE (accepted: e.g. 4x1,4x2,4x4; nodes 1..=32768, ranks 1..=16)")
            };
            let (n, r) = part.trim().split_once('x').ok_or_else(bad)?;
            let (n, r): (usize, usize) = (n.parse().map_err(|_| bad())?, r.parse().map_err(|_| bad())?);
            if !(1..=32768).contains(&n) || !(1..=16).contains(&r) {
                return Err(bad());
            }
            Ok((n, r))
        })
        .collect()
}

pub(super) fn run_tune(args: &TuneArgs) -> Result<(), CliError> {
    let subjects: Vec<Collective> = args.collective.0.clone();
    let base = args.study.config()?;
    let configs = match (&args.shapes, args.scaling) {
        (Some(_), true) => {
            return Err(CliError::Usage(
                "give --shapes or --scaling, not both".into(),
            ));
        }
        (Some(s), false) => parse_shapes(s)
            .map_err(CliError::Usage)?
            .into_iter()
            .map(|(nodes, rpn)| {
                let sockets = args
                    .study
                    .shape
                    .sockets
                    .map_or(gcd(base.shape.sockets, rpn), usize::from);
                Ok(ClusterConfig {
                    shape: base.shape.resized(nodes, rpn, sockets)?,
                    ..base.clone()
                })
            })
            .collect::<Result<_, CliError>>()?,
        (None, true) => scaling_configs(base.clone())?,
        (None, false) => vec![base.clone()],
    };
    let target = args
        .output
        .clone()
        .or_else(super::user_tuning_path)
        .ok_or_else(|| {
            CliError::Usage(
                "no --output and no user tuning path (set HOME or XDG_CONFIG_HOME)".into(),
            )
        })?;
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty())
        && args.output.is_none()
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        return Err(CliError::Usage(format!(
            "cannot create '{}': {e}",
            dir.display()
        )));
    }
    let file = PendingFile::create(&target)?;
    let specs = specs_for(
        &subjects,
        &configs,
        &args.study,
        &args.algo,
        &args.sizes.0,
        0,
        args.iters,
        args.rounds,
        false,
        None,
    )?;
    let sweeps = run_specs(&specs, args.quiet)?;
    let shapes: Vec<String> = configs
        .iter()
        .map(|c| format!("{}x{}", c.shape.nodes(), c.shape.ranks_per_node()))
        .collect();
    let names: Vec<&str> = subjects.iter().map(|s| s.name()).collect();
    let origin = format!(
        "railcoll tune {}{} --shapes {} --rails {} --sizes {}..{} --mode {}{} (best measured per size; {} rules follow as the fallback)",
        names.join(","),
        if args.algo == "all" {
            String::new()
        } else {
            format!(" --algo {}", args.algo)
        },
        shapes.join(","),
        base.shape.rails,
        args.sizes.0.iter().min().copied().unwrap_or(0),
        args.sizes.0.iter().max().copied().unwrap_or(0),
        base.mode.name(),
        if base.mode == Mode::Modeled {
            format!(
                " --profile {}",
                specs.first().map_or("", |s| s.profile.name.as_str())
            )
        } else {
            String::new()
        },
        if args.builtin {
            "[QA08]'s cut-off"
        } else {
            "built-in"
        }
    );
    let tail = if args.builtin {
        TuningTable::fallback()
    } else {
        TuningTable::builtin()
    };
    let table = tune::table_from(&sweeps, origin, tail);
    let text = format!(
        "# railcoll tuning table, written by `railcoll tune`; rules are tried in order.\n{}",
        table.to_toml()
    );
    file.write(text.as_bytes())?;
    if !args.quiet {
        eprintln!("# wrote {} ({} rules)", target.display(), table.rule.len());
    }
    let mut out = std::io::stdout().lock();
    let result = (|| -> std::io::Result<()> {
        for s in &sweeps {
            write!(out, "{} {}x{}:", s.collective, s.nodes, s.ranks_per_node)?;
            for p in &s.points {
                write!(out, " {}={}", sweep::size_label(p.size), p.best)?;
            }
            writeln!(out)?;
        }
        Ok(())
    })();
    output(result)
}
