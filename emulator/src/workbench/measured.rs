//! Measurements a user brings from a real machine, as `calibrate` and
//! `validate` read them.
//!
//! Point-to-point (`calibrate`):
//! - OSU Micro-Benchmarks output ([OSU-MB], `docs/references.md`):
//!   `osu_latency` ("# Size  Latency (us)": one-way latency, half the
//!   ping-pong round trip) and `osu_bw` ("# Size  Bandwidth (MB/s)",
//!   a window of messages in flight); which one is read from the header.
//! - CSV with the header `kind,size,value`, `kind` one of `latency_us`
//!   and `bandwidth_mb_s`.
//!
//! Collectives (`validate`):
//! - CSV with at least the columns `collective`, `nodes`,
//!   `ranks_per_node`, `rails`, `algorithm`, `size`, `latency_us`
//!   (`sockets` and `placement` optional), in any order: the CSV that
//!   `railcoll sweep --csv` writes is one.
//! - An OSU collective benchmark's output (`osu_allgather` and the like:
//!   "# Size  Avg Latency(us)" and optional further columns); the
//!   collective, algorithm and shape are not in the file, so the caller
//!   supplies them.
//!
//! Contract: every line either parses or is refused with its file, line
//! number and what was expected; sizes are positive byte counts and
//! values positive finite numbers; an empty file is refused.

use std::path::{Path, PathBuf};

use railcoll_host::{Collective, Placement};

/// A measurement file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MeasuredError {
    /// The file could not be read.
    #[error("cannot read measurements '{}': {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not what the format expects.
    #[error("{}:{line}: {msg}", .path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was expected.
        msg: String,
    },
    /// The file holds no measurement (or not of the kind needed).
    #[error("'{}' holds no {what}", .path.display())]
    Empty {
        /// The file.
        path: PathBuf,
        /// What was looked for.
        what: &'static str,
    },
}

/// What a point-to-point measurement is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum P2pKind {
    /// One-way latency, us (half a ping-pong round trip).
    LatencyUs,
    /// Streaming bandwidth, MB/s (10^6 B/s), a window of messages in flight.
    BandwidthMbS,
}

impl P2pKind {
    /// The name used in CSV files and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::LatencyUs => "latency_us",
            Self::BandwidthMbS => "bandwidth_mb_s",
        }
    }
}

/// One point-to-point measurement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct P2pPoint {
    /// What it measures.
    pub kind: P2pKind,
    /// Message size, bytes.
    pub size: usize,
    /// Microseconds or MB/s, as `kind` says.
    pub value: f64,
}

/// One collective latency measured on some shape.
#[derive(Clone, Debug, PartialEq)]
pub struct CollPoint {
    /// The collective.
    pub collective: Collective,
    /// Nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub ranks_per_node: usize,
    /// Sockets per node (None: the caller's default).
    pub sockets: Option<usize>,
    /// Rails.
    pub rails: usize,
    /// Rank placement (None: block).
    pub placement: Option<Placement>,
    /// The algorithm, as railcoll names it.
    pub algorithm: String,
    /// Block size, bytes.
    pub size: usize,
    /// Root rank (gather, broadcast; 0 when the file has no `root`).
    pub root: usize,
    /// Measured latency, us.
    pub latency_us: f64,
}

/// Where a collective measured in an OSU file ran: what the file does
/// not say.
#[derive(Clone, Debug, PartialEq)]
pub struct OsuContext {
    /// The collective.
    pub collective: Collective,
    /// The algorithm, as railcoll names it.
    pub algorithm: String,
    /// Nodes.
    pub nodes: usize,
    /// Ranks per node.
    pub ranks_per_node: usize,
    /// Sockets per node.
    pub sockets: Option<usize>,
    /// Rails.
    pub rails: usize,
}

fn read(path: &Path) -> Result<String, MeasuredError> {
    let text = std::fs::read_to_string(path).map_err(|source| MeasuredError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    // A spreadsheet's UTF-8 byte-order mark is not part of the header.
    Ok(text
        .strip_prefix('\u{feff}')
        .map_or_else(|| text.clone(), str::to_string))
}

/// A number of the file at `line`: positive and finite.
fn positive(path: &Path, line: usize, what: &str, text: &str) -> Result<f64, MeasuredError> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(MeasuredError::Line {
            path: path.to_path_buf(),
            line,
            msg: format!("{what} must be a positive number, got '{}'", text.trim()),
        }),
    }
}

fn size(path: &Path, line: usize, text: &str) -> Result<usize, MeasuredError> {
    count(path, line, "size (bytes)", text)
}

fn count(path: &Path, line: usize, what: &str, text: &str) -> Result<usize, MeasuredError> {
    match text.trim().parse::<usize>() {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(MeasuredError::Line {
            path: path.to_path_buf(),
            line,
            msg: format!(
                "{what} must be a positive whole number, got '{}'",
                text.trim()
            ),
        }),
    }
}

/// `points`, or the error that `path` holds none of `what`.
fn non_empty<T>(path: &Path, points: Vec<T>, what: &'static str) -> Result<Vec<T>, MeasuredError> {
    if points.is_empty() {
        return Err(MeasuredError::Empty {
            path: path.to_path_buf(),
            what,
        });
    }
    Ok(points)
}

/// Is this an OSU output (its first non-empty line a `#` comment)?
fn is_osu(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .is_some_and(|l| l.starts_with('#'))
}

/// The `(size, first value)` rows of an OSU output, with the header line
/// that names its columns. OSU prints size 0 for latency tests: skipped,
/// as no model message has zero bytes.
fn osu_rows(path: &Path, text: &str) -> Result<(String, Vec<(usize, f64)>), MeasuredError> {
    let mut header = String::new();
    let mut rows = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            if comment.contains("Size") {
                header = comment.trim().to_string();
            }
            continue;
        }
        let mut cols = line.split_whitespace();
        let (Some(s), Some(v)) = (cols.next(), cols.next()) else {
            return Err(MeasuredError::Line {
                path: path.to_path_buf(),
                line: i + 1,
                msg: "expected 'SIZE VALUE' (an OSU benchmark's output)".into(),
            });
        };
        if s == "0" {
            continue;
        }
        rows.push((
            size(path, i + 1, s)?,
            positive(path, i + 1, "the value", v)?,
        ));
    }
    Ok((header, rows))
}

/// Point-to-point measurements from one file (OSU or CSV).
pub fn read_p2p(path: &Path) -> Result<Vec<P2pPoint>, MeasuredError> {
    let text = read(path)?;
    let points = if is_osu(&text) {
        let (header, rows) = osu_rows(path, &text)?;
        if text.contains("Bi-Directional") || text.contains("Bidirectional") {
            return Err(MeasuredError::Line {
                path: path.to_path_buf(),
                line: 1,
                msg: "a bidirectional bandwidth test (osu_bibw) counts both directions; \
                      calibrate takes osu_bw's one-way figures"
                    .into(),
            });
        }
        let kind = if header.contains("Bandwidth") {
            P2pKind::BandwidthMbS
        } else if header.contains("Latency") {
            P2pKind::LatencyUs
        } else {
            return Err(MeasuredError::Line {
                path: path.to_path_buf(),
                line: 1,
                msg: "an OSU output must have a '# Size ... Latency (us)' or \
                      '# Size ... Bandwidth (MB/s)' header (osu_latency, osu_bw)"
                    .into(),
            });
        };
        rows.into_iter()
            .map(|(size, value)| P2pPoint { kind, size, value })
            .collect()
    } else {
        let table = Csv::parse(path, &text, &["kind", "size", "value"])?;
        let mut points = Vec::new();
        for row in &table.rows {
            let kind = match table.get(row, "kind") {
                "latency_us" => P2pKind::LatencyUs,
                "bandwidth_mb_s" => P2pKind::BandwidthMbS,
                other => {
                    return Err(MeasuredError::Line {
                        path: path.to_path_buf(),
                        line: row.line,
                        msg: format!("kind must be latency_us or bandwidth_mb_s, got '{other}'"),
                    });
                }
            };
            points.push(P2pPoint {
                kind,
                size: size(path, row.line, table.get(row, "size"))?,
                value: positive(path, row.line, "value", table.get(row, "value"))?,
            });
        }
        points
    };
    non_empty(path, points, "point-to-point measurement")
}

/// Collective measurements from one file: a CSV (every column in the
/// file), or an OSU output with `context` saying what ran.
pub fn read_collective(
    path: &Path,
    context: Option<&OsuContext>,
) -> Result<Vec<CollPoint>, MeasuredError> {
    let text = read(path)?;
    let points = if is_osu(&text) {
        let Some(ctx) = context else {
            return Err(MeasuredError::Line {
                path: path.to_path_buf(),
                line: 1,
                msg: "an OSU output does not say what ran: give --collective, --algo and \
                      the shape (--nodes, --ranks-per-node, --rails)"
                    .into(),
            });
        };
        let (header, rows) = osu_rows(path, &text)?;
        if !header.contains("Latency") {
            return Err(MeasuredError::Line {
                path: path.to_path_buf(),
                line: 1,
                msg: "an OSU collective output must have a '# Size ... Latency(us)' header".into(),
            });
        }
        rows.into_iter()
            .map(|(size, latency_us)| CollPoint {
                collective: ctx.collective,
                nodes: ctx.nodes,
                ranks_per_node: ctx.ranks_per_node,
                sockets: ctx.sockets,
                rails: ctx.rails,
                placement: None,
                algorithm: ctx.algorithm.clone(),
                size,
                root: 0,
                latency_us,
            })
            .collect()
    } else {
        let need = [
            "collective",
            "nodes",
            "ranks_per_node",
            "rails",
            "algorithm",
            "size",
            "latency_us",
        ];
        let table = Csv::parse(path, &text, &need)?;
        let mut points = Vec::new();
        for row in &table.rows {
            let line = row.line;
            let bad = |msg: String| MeasuredError::Line {
                path: path.to_path_buf(),
                line,
                msg,
            };
            let collective: Collective = table.get(row, "collective").parse().map_err(bad)?;
            if !collective.sized() {
                return Err(bad(format!(
                    "{collective} has no message size; validate takes gather, allgather, \
                     alltoall and bcast"
                )));
            }
            points.push(CollPoint {
                collective,
                nodes: count(path, line, "nodes", table.get(row, "nodes"))?,
                ranks_per_node: count(
                    path,
                    line,
                    "ranks_per_node",
                    table.get(row, "ranks_per_node"),
                )?,
                sockets: table
                    .try_get(row, "sockets")
                    .map(|s| count(path, line, "sockets", s))
                    .transpose()?,
                rails: count(path, line, "rails", table.get(row, "rails"))?,
                placement: table
                    .try_get(row, "placement")
                    .map(str::parse::<Placement>)
                    .transpose()
                    .map_err(bad)?,
                algorithm: table.get(row, "algorithm").to_string(),
                size: size(path, line, table.get(row, "size"))?,
                root: match table.try_get(row, "root") {
                    None => 0,
                    Some(r) => r
                        .parse()
                        .map_err(|_| bad(format!("root must be a rank number, got '{r}'")))?,
                },
                latency_us: positive(path, line, "latency_us", table.get(row, "latency_us"))?,
            });
        }
        points
    };
    non_empty(path, points, "collective measurement")
}

/// A simple comma-separated table: a header line naming columns, then
/// rows of as many fields (no quoting: none of these fields needs it).
struct Csv {
    columns: Vec<String>,
    rows: Vec<Row>,
}

struct Row {
    line: usize,
    fields: Vec<String>,
}

impl Csv {
    fn parse(path: &Path, text: &str, need: &[&str]) -> Result<Self, MeasuredError> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let Some((_, header)) = lines.next() else {
            return Err(MeasuredError::Empty {
                path: path.to_path_buf(),
                what: "CSV header",
            });
        };
        let columns: Vec<String> = header.split(',').map(|c| c.trim().to_string()).collect();
        for n in need {
            if !columns.iter().any(|c| c == n) {
                return Err(MeasuredError::Line {
                    path: path.to_path_buf(),
                    line: 1,
                    msg: format!(
                        "the CSV header lacks column '{n}' (needed: {}; or give an OSU \
                         benchmark's output)",
                        need.join(",")
                    ),
                });
            }
        }
        let mut rows = Vec::new();
        for (i, l) in lines {
            let fields: Vec<String> = l.split(',').map(|f| f.trim().to_string()).collect();
            if fields.len() != columns.len() {
                return Err(MeasuredError::Line {
                    path: path.to_path_buf(),
                    line: i + 1,
                    msg: format!(
                        "{} fields where the header has {} columns",
                        fields.len(),
                        columns.len()
                    ),
                });
            }
            rows.push(Row {
                line: i + 1,
                fields,
            });
        }
        Ok(Self { columns, rows })
    }

    fn try_get<'r>(&self, row: &'r Row, column: &str) -> Option<&'r str> {
        let i = self.columns.iter().position(|c| c == column)?;
        row.fields
            .get(i)
            .map(String::as_str)
            .filter(|f| !f.is_empty())
    }

    /// A column `parse` checked is present (empty if the row leaves it so).
    fn get<'r>(&self, row: &'r Row, column: &str) -> &'r str {
        self.try_get(row, column).unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("railcoll-measured-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn osu_latency_and_bandwidth_outputs_are_read_by_their_headers() {
        let lat = file(
            "lat.txt",
            "# OSU MPI Latency Test v7.3\n# Size          Latency (us)\n0                       1.10\n1                       1.20\n1024                    2.50\n",
        );
        let got = read_p2p(&lat).expect("latency");
        assert_eq!(got.len(), 2, "size 0 is skipped");
        assert_eq!(
            got[1],
            P2pPoint {
                kind: P2pKind::LatencyUs,
                size: 1024,
                value: 2.5
            }
        );
        let bw = file(
            "bw.txt",
            "# OSU MPI Bandwidth Test v7.3\n# Size      Bandwidth (MB/s)\n1                       0.85\n4194304              912.00\n",
        );
        let got = read_p2p(&bw).expect("bandwidth");
        assert!(got.iter().all(|p| p.kind == P2pKind::BandwidthMbS));
        assert_eq!(got[1].value, 912.0);
    }

    #[test]
    fn bad_measurements_are_refused_with_file_and_line() {
        for (text, needle) in [
            (
                "kind,size,value\nlatency_us,8,-1\n",
                ":2: value must be a positive number",
            ),
            (
                "kind,size,value\nlatency,8,1\n",
                ":2: kind must be latency_us",
            ),
            (
                "kind,size,value\nlatency_us,0,1\n",
                ":2: size (bytes) must be a positive",
            ),
            ("kind,size\nlatency_us,8\n", "lacks column 'value'"),
            (
                "kind,size,value\nlatency_us,8\n",
                "2 fields where the header has 3",
            ),
            ("kind,size,value\n", "holds no point-to-point"),
            ("# OSU\n# Size Foo\n8 1.0\n", "must have a '# Size"),
            (
                "# OSU\n# Size Latency (us)\n8\n",
                ":3: expected 'SIZE VALUE'",
            ),
            (
                "# OSU\n# Size Latency (us)\n8 nan\n",
                ":3: the value must be a positive",
            ),
            (
                "# OSU MPI Bi-Directional Bandwidth Test\n# Size Bandwidth (MB/s)\n8 1\n",
                "osu_bibw",
            ),
        ] {
            let p = file("bad.csv", text);
            let err = read_p2p(&p).expect_err(needle).to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        let missing = std::env::temp_dir().join("railcoll-no-such-measurements.csv");
        assert!(read_p2p(&missing).is_err());
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_header() {
        let p = file("bom.csv", "\u{feff}kind,size,value\nlatency_us,8,2.5\n");
        let got = read_p2p(&p).expect("a BOM is skipped");
        assert_eq!(got[0].value, 2.5);
    }

    #[test]
    fn collective_csv_takes_the_sweeps_own_columns_and_osu_needs_a_context() {
        let csv = file(
            "coll.csv",
            "collective,mode,profile,procs,nodes,ranks_per_node,sockets,rails,placement,size,algorithm,latency_us,max_us\nallgather,modeled,qsnet2-dual,4,2,2,1,2,block,64,ring,3.1,3.2\n",
        );
        let got = read_collective(&csv, None).expect("csv");
        assert_eq!(got[0].collective, Collective::Allgather);
        assert_eq!(
            (got[0].nodes, got[0].ranks_per_node, got[0].rails),
            (2, 2, 2)
        );
        assert_eq!((got[0].size, got[0].latency_us), (64, 3.1));
        let bad = file(
            "coll-bad.csv",
            "collective,nodes,ranks_per_node,rails,algorithm,size,latency_us\nbarrier,2,1,1,rdma,8,3\n",
        );
        let err = read_collective(&bad, None)
            .expect_err("barrier")
            .to_string();
        assert!(
            err.contains(":2:") && err.contains("no message size"),
            "{err}"
        );
        let osu = file(
            "osu-ag.txt",
            "# OSU MPI Allgather Latency Test\n# Size       Avg Latency(us)\n4                       7.80\n",
        );
        let err = read_collective(&osu, None)
            .expect_err("context")
            .to_string();
        assert!(err.contains("--collective"), "{err}");
        let ctx = OsuContext {
            collective: Collective::Allgather,
            algorithm: "native".into(),
            nodes: 4,
            ranks_per_node: 4,
            sockets: None,
            rails: 2,
        };
        let got = read_collective(&osu, Some(&ctx)).expect("osu");
        assert_eq!((got[0].size, got[0].latency_us), (4, 7.8));
        assert_eq!(got[0].algorithm, "native");
    }
}
