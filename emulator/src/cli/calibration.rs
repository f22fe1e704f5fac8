//! `railcoll calibrate` and `railcoll validate`: the model against a
//! user's own measurements ([`crate::workbench::calibrate`],
//! [`crate::workbench::validate`]).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use railcoll_host::Collective;

use super::CliError;
use super::error::output;
use super::workbench::ShapeFlags;
use crate::modeled::{DEFAULT_PROFILE, Profile};
use crate::workbench::calibrate::{self, CalibrateError, Fit};
use crate::workbench::measured::{self, MeasuredError, OsuContext, P2pPoint};
use crate::workbench::sweep::size_label;
use crate::workbench::validate::{self, Validation};
use crate::workbench::{PendingFile, plot};

/// `railcoll calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Point-to-point measurements: osu_latency or osu_bw output, or CSV
    /// with the header kind,size,value (kind latency_us or
    /// bandwidth_mb_s). Several files are pooled.
    #[arg(required = true)]
    pub measurements: Vec<PathBuf>,
    /// The profile to start from (built-in name or TOML file).
    #[arg(long, default_value = DEFAULT_PROFILE)]
    pub profile: String,
    /// Profile keys to fit, comma-separated (default: link.latency_ns, the
    /// narrower of link.bandwidth_mb_s and pci.bandwidth_mb_s, and
    /// nic.dma_gap_ns when there are bandwidth measurements).
    #[arg(long)]
    pub fit: Option<String>,
    /// Write the fitted profile here (TOML; the base profile's text with
    /// the fitted values in place and every comment kept).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// The fitted profile's name (default: the output file's stem).
    #[arg(long)]
    pub name: Option<String>,
    /// Print the fit as one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// `railcoll validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The profile to validate (built-in name or TOML file).
    pub profile: String,
    /// Measured collective latencies: CSV (collective, nodes,
    /// ranks_per_node, rails, algorithm, size, latency_us; `railcoll sweep
    /// --csv` writes one) or an OSU collective benchmark's output (then
    /// give --collective, --algo and the shape).
    #[arg(long, required = true)]
    pub measured: Vec<PathBuf>,
    /// For OSU files: the collective measured.
    #[arg(long, value_parser = |s: &str| s.parse::<Collective>())]
    pub collective: Option<Collective>,
    /// For OSU files: the algorithm measured, as railcoll names it.
    #[arg(long)]
    pub algo: Option<String>,
    /// For OSU files: the shape measured (--nodes and --ranks-per-node
    /// needed; --rails defaults to the profile's).
    #[command(flatten)]
    pub shape: ShapeFlags,
    /// Draw measured against modeled and the error: FILE.svg or FILE.png.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print the comparison as one JSON document.
    #[arg(long)]
    pub json: bool,
    /// Skip the check of the results: by default, after the timed calls
    /// (outside the timed region), every rank's receive buffer is compared
    /// with the collective's definition, and a wrong result fails the run
    /// (exit 1) with no figure printed or written.
    #[arg(long)]
    pub no_verify: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    pub quiet: bool,
}

impl From<MeasuredError> for CliError {
    fn from(e: MeasuredError) -> Self {
        CliError::Usage(e.to_string())
    }
}

impl From<CalibrateError> for CliError {
    fn from(e: CalibrateError) -> Self {
        match e {
            CalibrateError::Run(e) => CliError::Run(e),
            CalibrateError::Host(e) => CliError::Run(crate::cluster::EmuError::Host(e)),
            other => CliError::Usage(other.to_string()),
        }
    }
}

pub(super) fn run_calibrate(args: &CalibrateArgs) -> Result<(), CliError> {
    let (base, text) = Profile::load(&args.profile)?;
    let mut points: Vec<P2pPoint> = Vec::new();
    for f in &args.measurements {
        points.extend(measured::read_p2p(f)?);
    }
    let keys = match &args.fit {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_string)
            .collect(),
        None => calibrate::default_keys(&base, &points),
    };
    if keys.is_empty() {
        return Err(CliError::Usage(format!(
            "--fit names no key (accepted: {})",
            Profile::KEYS.join(", ")
        )));
    }
    let out_file = args
        .output
        .as_deref()
        .map(PendingFile::create)
        .transpose()?;
    let fit = calibrate::fit(&base, &points, &keys)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::to_string_pretty(&fit).unwrap_or_default();
        output(writeln!(out, "{doc}"))?;
    } else {
        output(write_fit(&mut out, &args.profile, &fit))?;
    }
    if let Some(f) = out_file {
        let name = args.name.clone().unwrap_or_else(|| {
            f.target()
                .file_stem()
                .map_or_else(|| "calibrated".into(), |s| s.to_string_lossy().into_owned())
        });
        let values: Vec<(&str, f64)> = fit.keys.iter().map(|(k, _, v)| (k.as_str(), *v)).collect();
        let edited = Profile::edit_text(&name, &text, &values)?;
        let sources: Vec<String> = args
            .measurements
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let header = format!(
            "# Calibrated by `railcoll calibrate` from {} against `{}`:\n# {} fitted by least \
             squares (RMS relative error {:.2} % -> {:.2} %).\n# Every other number, and every \
             comment below, is the base profile's.\n",
            sources.join(", "),
            args.profile,
            keys.join(", "),
            fit.rms_before * 100.0,
            fit.rms_after * 100.0
        );
        let renamed = rename(&edited, &name, &base.name);
        Profile::parse(&name, &renamed)?;
        let target = f.target().display().to_string();
        f.write((header + &renamed).as_bytes())?;
        eprintln!("# wrote {target} (use it with --profile {target})");
    }
    Ok(())
}

/// `text` with its `name = "..."` line set to `name`.
fn rename(text: &str, name: &str, old: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with("name") && l.contains(&format!("\"{old}\"")) {
                format!("name = \"{name}\"")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

fn write_fit(out: &mut dyn Write, profile: &str, fit: &Fit) -> std::io::Result<()> {
    writeln!(
        out,
        "# railcoll calibrate: profile {profile} fitted to {} measurements ({} model runs)",
        fit.residuals.len(),
        fit.evaluations
    )?;
    writeln!(out, "# {:<26} {:>12} {:>12}", "key", "base", "fitted")?;
    for (k, a, b) in &fit.keys {
        let note = if fit.unmoved.contains(k) {
            "  (the measurements do not move it)"
        } else if fit.at_bound.contains(k) {
            "  (at its lower bound: the other costs on this path are too high; fit them too)"
        } else {
            ""
        };
        writeln!(out, "{k:<28} {a:>12.3} {b:>12.3}{note}")?;
    }
    writeln!(
        out,
        "# {:<14} {:>8} {:>12} {:>12} {:>12} {:>9} {:>9}",
        "kind", "size", "measured", "base", "fitted", "err base", "err fit"
    )?;
    for r in &fit.residuals {
        writeln!(
            out,
            "{:<16} {:>8} {:>12.3} {:>12.3} {:>12.3} {:>8.2}% {:>8.2}%",
            r.kind,
            size_label(r.size),
            r.measured,
            r.before,
            r.after,
            (r.before / r.measured - 1.0) * 100.0,
            (r.after / r.measured - 1.0) * 100.0
        )?;
    }
    writeln!(
        out,
        "# RMS relative error: {:.2} % -> {:.2} %",
        fit.rms_before * 100.0,
        fit.rms_after * 100.0
    )
}

pub(super) fn run_validate(args: &ValidateArgs) -> Result<(), CliError> {
    let (profile, _) = Profile::load(&args.profile)?;
    let f = &args.shape;
    let context = match (&args.collective, &args.algo, f.nodes, f.ranks_per_node) {
        (Some(c), _, _, _) if !c.sized() => {
            return Err(CliError::Usage(format!(
                "{c} has no message size; validate takes gather, allgather, alltoall and bcast"
            )));
        }
        (Some(c), Some(a), Some(n), Some(r)) => Some(OsuContext {
            collective: *c,
            algorithm: a.clone(),
            nodes: n as usize,
            ranks_per_node: usize::from(r),
            sockets: f.sockets.map(usize::from),
            rails: f.rails.map_or(profile.platform.rails, usize::from),
        }),
        (None, None, None, None) => {
            if f.rails.is_some() || f.sockets.is_some() {
                return Err(CliError::Usage(
                    "--rails and --sockets describe an OSU file's shape: give them with \
                     --collective, --algo, --nodes and --ranks-per-node (a CSV names its own)"
                        .into(),
                ));
            }
            None
        }
        _ => {
            return Err(CliError::Usage(
                "an OSU file needs all of --collective, --algo, --nodes and --ranks-per-node"
                    .into(),
            ));
        }
    };
    let mut points = Vec::new();
    for f in &args.measured {
        points.extend(measured::read_collective(f, context.as_ref())?);
    }
    let plot_file = args
        .plot
        .as_deref()
        .map(|p| plot::format_of(p).and_then(|_| PendingFile::create(p)))
        .transpose()?;
    let quiet = args.quiet;
    let v = validate::validate(&profile, &points, !args.no_verify, &|size| {
        if !quiet {
            eprintln!("# modeled {}", size_label(size));
        }
    })?;
    // The figure is drawn and committed before the report is printed: a
    // figure that cannot be drawn fails the command with nothing written.
    if let Some(f) = plot_file {
        crate::workbench::write_outputs(|| -> Result<(), CliError> {
            let target = f.target().display().to_string();
            plot::render_validation(&v, &f)?;
            f.commit()?;
            if !quiet {
                eprintln!("# wrote {target}");
            }
            Ok(())
        })?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::to_string_pretty(&v).unwrap_or_default();
        output(writeln!(out, "{doc}"))?;
    } else {
        output(write_validation(&mut out, &v))?;
    }
    Ok(())
}

fn write_validation(out: &mut dyn Write, v: &Validation) -> std::io::Result<()> {
    writeln!(
        out,
        "# railcoll validate: profile {} against {} measurements (error = modeled / measured - 1)",
        v.profile,
        v.points.len()
    )?;
    writeln!(
        out,
        "# {:<10} {:>7} {:<22} {:>8} {:>12} {:>12} {:>9}",
        "collective", "shape", "algorithm", "size", "measured_us", "modeled_us", "error"
    )?;
    for c in &v.points {
        writeln!(
            out,
            "{:<12} {:>7} {:<22} {:>8} {:>12.3} {:>12.3} {:>8.2}%",
            c.collective,
            format!("{}x{}x{}", c.nodes, c.ranks_per_node, c.rails),
            c.algorithm,
            size_label(c.size),
            c.measured_us,
            c.modeled_us,
            c.error * 100.0
        )?;
    }
    writeln!(out, "# per algorithm and shape: mean |error|, max |error|")?;
    for s in v.summaries.iter().chain(std::iter::once(&v.overall)) {
        writeln!(
            out,
            "{}: {:.2} % mean, {:.2} % max ({} points)",
            s.what,
            s.mean_abs_error * 100.0,
            s.max_abs_error * 100.0,
            s.points
        )?;
    }
    Ok(())
}
