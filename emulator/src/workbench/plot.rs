//! The papers' figure, drawn with `plotters`.
//!
//! One row per sweep (several with `--scaling`, one per process count):
//! on the left latency against message size on log-log axes, one line per
//! algorithm; on the right each algorithm's speedup over the baseline
//! (baseline / latency) against size, with the baseline's line at 1.
//! Sweeps of one size (barriers) have no curve and are left out.
//!
//! Text is set in an embedded subset of DejaVu Sans (`assets/`, with its
//! licence) so that figures look the same on every machine and need no
//! system fonts. SVG is written as a string and PNG through the image
//! encoder, each into a [`PendingFile`] renamed into place when complete.

use plotters::coord::Shift;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use super::sweep::{Measured, Sweep, size_label};
use super::validate::{Compared, Summary, Validation};
use super::{OutputError, PendingFile};

/// The embedded font (ASCII subset of DejaVu Sans; see
/// `emulator/assets/DEJAVU-LICENSE`).
const FONT: &[u8] = include_bytes!("../../assets/dejavu-sans-ascii.ttf");
const FAMILY: &str = "railcoll-sans";

/// Width and height of one panel, pixels.
const PANEL: (u32, u32) = (720, 460);

/// Distinguishable line colours (Tableau 20, dark shades first).
const COLOURS: [RGBColor; 16] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(174, 199, 232),
    RGBColor(255, 187, 120),
    RGBColor(152, 223, 138),
    RGBColor(255, 152, 150),
    RGBColor(197, 176, 213),
    RGBColor(196, 156, 148),
];

/// Output formats, by file extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `.svg`.
    Svg,
    /// `.png`.
    Png,
}

/// The format `path` asks for.
pub fn format_of(path: &std::path::Path) -> Result<Format, OutputError> {
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("svg") => Ok(Format::Svg),
        Some("png") => Ok(Format::Png),
        _ => Err(OutputError::PlotFormat(path.to_path_buf())),
    }
}

fn register_font() -> Result<(), OutputError> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *DONE
        .get_or_init(|| plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    ok.then_some(()).ok_or(OutputError::Font)
}

/// Draw `sweeps` into `file` (SVG or PNG by its extension).
pub fn render(sweeps: &[Sweep], file: &PendingFile) -> Result<(), OutputError> {
    let plotted: Vec<&Sweep> = sweeps.iter().filter(|s| s.points.len() >= 2).collect();
    if plotted.is_empty() {
        return Err(OutputError::NothingToPlot);
    }
    render_figure(&Figure::Sweeps(&plotted), plotted.len(), file)
}

/// `railcoll validate`'s figure: one row per algorithm and shape, the
/// measured and modeled latency against size on the left (measured
/// dashed with squares, modeled solid with circles), the model's error
/// in percent on the right.
pub fn render_validation(v: &Validation, file: &PendingFile) -> Result<(), OutputError> {
    let rows: Vec<&Summary> = v
        .summaries
        .iter()
        .filter(|s| {
            let sizes = v.points.iter().filter(|c| label_of(c) == s.what).count();
            sizes >= 2
        })
        .collect();
    if rows.is_empty() {
        return Err(OutputError::NothingToPlot);
    }
    render_figure(&Figure::Validation(v, &rows), rows.len(), file)
}

/// What a figure shows.
enum Figure<'a> {
    Sweeps(&'a [&'a Sweep]),
    Validation(&'a Validation, &'a [&'a Summary]),
}

impl Figure<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        match self {
            Figure::Sweeps(sweeps) => {
                let rows = root.split_evenly((sweeps.len(), 2));
                for (i, sweep) in sweeps.iter().enumerate() {
                    latency_panel(&rows[2 * i], sweep).map_err(|e| e.to_string())?;
                    speedup_panel(&rows[2 * i + 1], sweep).map_err(|e| e.to_string())?;
                }
            }
            Figure::Validation(v, summaries) => {
                let rows = root.split_evenly((summaries.len(), 2));
                for (i, s) in summaries.iter().enumerate() {
                    let pts: Vec<&Compared> =
                        v.points.iter().filter(|c| label_of(c) == s.what).collect();
                    comparison_panel(&rows[2 * i], &v.profile, &s.what, &pts)
                        .map_err(|e| e.to_string())?;
                    error_panel(&rows[2 * i + 1], &pts).map_err(|e| e.to_string())?;
                }
            }
        }
        Ok(())
    }
}

/// Draw `figure` (`rows` rows of two panels) and stage it in `file`, SVG
/// or PNG by its extension (the caller commits it).
fn render_figure(figure: &Figure<'_>, rows: usize, file: &PendingFile) -> Result<(), OutputError> {
    let format = format_of(file.target())?;
    register_font()?;
    let size = (PANEL.0 * 2, PANEL.1 * rows as u32);
    let fail = |reason: String| OutputError::Draw {
        path: file.target().to_path_buf(),
        reason,
    };
    match format {
        Format::Svg => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
                figure.draw(&root).map_err(fail)?;
                root.present().map_err(|e| fail(e.to_string()))?;
            }
            file.stage(svg.as_bytes())
        }
        Format::Png => {
            {
                let root = BitMapBackend::new(file.temp(), size).into_drawing_area();
                figure.draw(&root).map_err(fail)?;
                root.present().map_err(|e| fail(e.to_string()))?;
            }
            Ok(())
        }
    }
}

/// A chart against message size (log x).
type SizeChart<'a, DB, Y> = ChartContext<'a, DB, Cartesian2d<LogCoord<f64>, Y>>;

/// A panel against message size (log x) with a log or linear y axis,
/// captioned and with its grid drawn.
fn size_chart<'a, DB: DrawingBackend, Y: Ranged<ValueType = f64> + ValueFormatter<f64>>(
    area: &'a DrawingArea<DB, Shift>,
    caption: String,
    x: std::ops::Range<f64>,
    y: Y,
    y_desc: String,
) -> Result<SizeChart<'a, DB, Y>, DrawingAreaErrorKind<DB::ErrorType>> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FAMILY, 18))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(LogCoord::from(x.log_scale()), y)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(y_desc)
        .x_label_formatter(&|x| size_label(x.round() as usize))
        .y_label_formatter(&|y| tidy(*y))
        .label_style((FAMILY, 13))
        .axis_desc_style((FAMILY, 14))
        .draw()?;
    Ok(chart)
}

/// An axis label: up to three decimals, trailing zeros dropped.
fn tidy(y: f64) -> String {
    let s = format!("{y:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// The legend box every latency panel carries.
fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FAMILY, 12))
        .draw()
}

/// The summary label a compared point belongs to (as `validate` makes it).
fn label_of(c: &Compared) -> String {
    super::validate::label(c)
}

fn comparison_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    profile: &str,
    what: &str,
    pts: &[&Compared],
) -> PanelResult<DB> {
    let sizes = pts.iter().map(|c| c.size as f64);
    let (xlo, xhi) = sizes.fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    let lat = pts.iter().flat_map(|c| [c.measured_us, c.modeled_us]);
    let (lo, hi) = lat.fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    let (lo, hi) = (lo.max(1e-3) / 1.5, hi.max(1e-3) * 1.5);
    let mut chart = size_chart(
        area,
        format!("{what}: measured vs {profile}"),
        xlo.max(1.0)..xhi.max(xlo * 2.0),
        LogCoord::from((lo..hi).log_scale()),
        "latency (us)".into(),
    )?;
    let measured: Vec<(f64, f64)> = pts.iter().map(|c| (c.size as f64, c.measured_us)).collect();
    let modeled: Vec<(f64, f64)> = pts.iter().map(|c| (c.size as f64, c.modeled_us)).collect();
    let (m, o) = (COLOURS[3], COLOURS[0]);
    chart
        .draw_series(DashedLineSeries::new(
            measured.clone(),
            6,
            4,
            m.stroke_width(2),
        ))?
        .label("measured")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], m.stroke_width(2)));
    chart.draw_series(measured.iter().map(|&p| {
        Rectangle::new(
            [(p.0 / 1.06, p.1 / 1.06), (p.0 * 1.06, p.1 * 1.06)],
            m.filled(),
        )
    }))?;
    chart
        .draw_series(LineSeries::new(modeled.clone(), o.stroke_width(2)))?
        .label("modeled")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], o.stroke_width(2)));
    chart.draw_series(modeled.iter().map(|&p| Circle::new(p, 3, o.filled())))?;
    legend(&mut chart)?;
    Ok(())
}

fn error_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    pts: &[&Compared],
) -> PanelResult<DB> {
    let sizes = pts.iter().map(|c| c.size as f64);
    let (xlo, xhi) = sizes.fold((f64::INFINITY, 0.0f64), |(a, b), v| (a.min(v), b.max(v)));
    let top = pts
        .iter()
        .map(|c| (c.error * 100.0).abs())
        .fold(5.0f64, f64::max)
        * 1.15;
    let mut chart = size_chart(
        area,
        "model error (modeled / measured - 1)".into(),
        xlo.max(1.0)..xhi.max(xlo * 2.0),
        RangedCoordf64::from(-top..top),
        "error (%)".into(),
    )?;
    chart.draw_series(DashedLineSeries::new(
        vec![(xlo.max(1.0), 0.0), (xhi.max(xlo * 2.0), 0.0)],
        6,
        4,
        BLACK.mix(0.6).stroke_width(1),
    ))?;
    let errs: Vec<(f64, f64)> = pts
        .iter()
        .map(|c| (c.size as f64, c.error * 100.0))
        .collect();
    let o = COLOURS[0];
    chart.draw_series(LineSeries::new(errs.clone(), o.stroke_width(2)))?;
    chart.draw_series(errs.iter().map(|&p| Circle::new(p, 3, o.filled())))?;
    Ok(())
}

fn title(sweep: &Sweep) -> String {
    format!(
        "{}, {} procs ({} x {}, {} rails), {}{}",
        sweep.collective,
        sweep.procs,
        sweep.nodes,
        sweep.ranks_per_node,
        sweep.rails,
        sweep.mode,
        sweep
            .profile
            .as_ref()
            .map_or_else(String::new, |p| format!(" {p}"))
    )
}

/// (size, value) of `algo` at every size where `value` has one.
fn series(sweep: &Sweep, algo: &str, value: impl Fn(&Measured) -> Option<f64>) -> Vec<(f64, f64)> {
    sweep
        .points
        .iter()
        .filter_map(|p| {
            p.results
                .iter()
                .find(|m| m.algorithm == algo)
                .and_then(&value)
                .map(|v| (p.size as f64, v))
        })
        .collect()
}

fn x_range(sweep: &Sweep) -> std::ops::Range<f64> {
    let lo = sweep
        .points
        .iter()
        .map(|p| p.size)
        .min()
        .unwrap_or(1)
        .max(1) as f64;
    let hi = sweep.points.iter().map(|p| p.size).max().unwrap_or(2) as f64;
    lo..hi.max(lo * 2.0)
}

type PanelResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn latency_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    sweep: &Sweep,
) -> PanelResult<DB> {
    let lat = sweep
        .points
        .iter()
        .flat_map(|p| p.results.iter().map(|m| m.latency_us));
    let (lo, hi) = lat.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let (lo, hi) = (lo.max(1e-3) / 1.5, hi.max(1e-3) * 1.5);
    let mut chart = size_chart(
        area,
        title(sweep),
        x_range(sweep),
        LogCoord::from((lo..hi).log_scale()),
        "latency (us)".into(),
    )?;
    for (i, algo) in sweep.algorithms.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points = series(sweep, algo, |m| Some(m.latency_us));
        chart
            .draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))?
            .label(algo.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2))
            });
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
    }
    legend(&mut chart)?;
    Ok(())
}

fn speedup_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    sweep: &Sweep,
) -> PanelResult<DB> {
    let top = sweep
        .points
        .iter()
        .flat_map(|p| p.results.iter().filter_map(|m| m.speedup_over_baseline))
        .fold(1.0f64, f64::max);
    let mut chart = size_chart(
        area,
        format!("speedup over {}", sweep.baseline),
        x_range(sweep),
        RangedCoordf64::from(0.0..top * 1.1),
        format!("{} latency / latency", sweep.baseline),
    )?;
    let x = x_range(sweep);
    chart.draw_series(DashedLineSeries::new(
        vec![(x.start, 1.0), (x.end, 1.0)],
        6,
        4,
        BLACK.mix(0.6).stroke_width(1),
    ))?;
    for (i, algo) in sweep.algorithms.iter().enumerate() {
        if *algo == sweep.baseline {
            continue;
        }
        let colour = COLOURS[i % COLOURS.len()];
        let points = series(sweep, algo, |m| m.speedup_over_baseline);
        if points.is_empty() {
            continue;
        }
        chart.draw_series(LineSeries::new(points.clone(), colour.stroke_width(2)))?;
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, colour.filled())))?;
    }
    Ok(())
}
