//! The researcher's workbench as a user runs it: `railcoll sweep`,
//! `trace`, `tune` and study files.

use std::collections::HashMap;
use std::path::Path;
use std::process::Output;

use serde_json::Value;

mod support;
use support::*;

#[test]
fn csv_and_json_parse_and_agree() {
    let dir = scratch("csv");
    let csv_path = dir.join("ag.csv");
    let csv_arg = csv_path.display().to_string();
    let doc = sweep_json(&["--predict", "--csv", &csv_arg]);
    let sweep = &doc["sweeps"][0];
    let algos: Vec<&str> = sweep["algorithms"]
        .as_array()
        .expect("algorithms")
        .iter()
        .map(|a| a.as_str().expect("name"))
        .collect();
    assert!(
        algos.contains(&"native") && algos.contains(&"smp-bruck"),
        "{algos:?}"
    );
    let text = std::fs::read_to_string(&csv_path).expect("csv written");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let mut from_csv = HashMap::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), header.len(), "{line}");
        let size: usize = f[col("size")].parse().expect("size");
        let latency: f64 = f[col("latency_us")].parse().expect("latency");
        let predicted: f64 = f[col("predicted_us")].parse().expect("prediction");
        let best: bool = f[col("best")].parse().expect("best");
        assert_eq!(f[col("procs")], "4");
        from_csv.insert(
            (size, f[col("algorithm")].to_string()),
            (latency, predicted, best),
        );
    }
    let points = sweep["points"].as_array().expect("points");
    assert_eq!(points.len(), 3);
    assert_eq!(
        from_csv.len(),
        3 * algos.len(),
        "one row per size and algorithm"
    );
    for p in points {
        let size = p["size"].as_u64().expect("size") as usize;
        let best = p["best"].as_str().expect("best");
        let mut fastest = f64::INFINITY;
        for r in p["results"].as_array().expect("results") {
            let algo = r["algorithm"].as_str().expect("algorithm");
            let latency = r["latency_us"].as_f64().expect("latency");
            let predicted = r["predicted_us"].as_f64().expect("prediction");
            let row = from_csv[&(size, algo.to_string())];
            // Both print the shortest round-trip decimal; serde_json's
            // default reader may land one unit in the last place away.
            let same = |a: f64, b: f64| (a - b).abs() <= 1e-12 * a.abs().max(1.0);
            assert!(
                same(row.0, latency) && same(row.1, predicted) && row.2 == (algo == best),
                "{size} {algo}: csv {row:?}, json {latency} {predicted} {best}"
            );
            assert!(latency > 0.0 && predicted > 0.0);
            fastest = fastest.min(latency);
        }
        let best_latency = p["results"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["algorithm"] == best))
            .and_then(|r| r["latency_us"].as_f64())
            .expect("best is a result");
        assert_eq!(best_latency, fastest, "best is the fastest at {size}");
        let native = from_csv[&(size, "native".to_string())].0;
        let speedup = p["speedup"].as_f64().expect("speedup");
        assert!((speedup - native / fastest).abs() < 1e-9);
    }
}

#[test]
fn the_table_marks_the_best_per_size_and_its_speedup() {
    let doc = sweep_json(&[]);
    let mut args = vec!["sweep", "allgather", "--sizes", "4,1K,16K", "-q"];
    args.extend_from_slice(&SHAPE);
    let table = ok(&railcoll(&args));
    let header = table
        .lines()
        .find(|l| l.starts_with("# Size"))
        .expect("OSU-style header");
    let columns: Vec<&str> = header.split_whitespace().skip(2).collect();
    let rows: Vec<&str> = table.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(rows.len(), 3);
    for (row, point) in rows
        .iter()
        .zip(doc["sweeps"][0]["points"].as_array().expect("points"))
    {
        let cells: Vec<&str> = row.split_whitespace().collect();
        let starred: Vec<usize> = (1..cells.len())
            .filter(|&i| cells[i].ends_with('*'))
            .collect();
        assert_eq!(starred.len(), 1, "one best per row: {row}");
        let best = point["best"].as_str().expect("best");
        assert_eq!(columns[starred[0] - 1], best, "{row}");
        let speedup = format!("{:.2}x", point["speedup"].as_f64().expect("speedup"));
        assert!(cells.contains(&speedup.as_str()), "{row} lacks {speedup}");
    }
}

#[test]
fn svg_is_well_formed_with_one_series_per_algorithm_and_png_is_readable() {
    let dir = scratch("plot");
    let svg = dir.join("ag.svg");
    let png = dir.join("ag.png");
    let mut args = vec!["sweep", "allgather", "--sizes", "4,1K,16K", "-q", "--json"];
    args.extend_from_slice(&SHAPE);
    let svg_arg = svg.display().to_string();
    let mut svg_args = args.clone();
    svg_args.extend_from_slice(&["--plot", &svg_arg]);
    let doc: Value = serde_json::from_str(&ok(&railcoll(&svg_args))).expect("json");
    let algos: Vec<String> = doc["sweeps"][0]["algorithms"]
        .as_array()
        .expect("algorithms")
        .iter()
        .map(|a| a.as_str().expect("name").to_string())
        .collect();
    let text = std::fs::read_to_string(&svg).expect("svg written");
    let xml = roxmltree::Document::parse(&text).expect("well-formed XML");
    assert_eq!(xml.root_element().tag_name().name(), "svg");
    // Data lines have one vertex per size; legend swatches and dashes two.
    let series = xml
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter(|n| {
            n.attribute("points")
                .is_some_and(|p| p.split_whitespace().count() == 3)
        })
        .count();
    assert_eq!(
        series,
        2 * algos.len() - 1,
        "one latency line per algorithm and one speedup line per non-baseline algorithm"
    );
    let texts: Vec<&str> = xml
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for a in &algos {
        assert_eq!(
            texts.iter().filter(|t| *t == a).count(),
            1,
            "legend entry for {a}"
        );
    }
    let png_arg = png.display().to_string();
    let mut png_args = args.clone();
    png_args.extend_from_slice(&["--plot", &png_arg]);
    ok(&railcoll(&png_args));
    let bytes = std::fs::read(&png).expect("png written");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&bytes[12..16], b"IHDR");
    let width = u32::from_be_bytes(bytes[16..20].try_into().expect("width"));
    let height = u32::from_be_bytes(bytes[20..24].try_into().expect("height"));
    assert_eq!((width, height), (1440, 460));
    assert_eq!(&bytes[bytes.len() - 8..bytes.len() - 4], b"IEND");
    let left: Vec<_> = std::fs::read_dir(&dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left.len(), 2, "no temporary files left: {left:?}");
}

/// (algorithm, latency) of each point of the first sweep in `doc`.
fn latencies(doc: &Value) -> Vec<(u64, String, f64)> {
    let mut v = Vec::new();
    for p in doc["sweeps"][0]["points"].as_array().expect("points") {
        for r in p["results"].as_array().expect("results") {
            v.push((
                p["size"].as_u64().expect("size"),
                r["algorithm"].as_str().expect("algorithm").to_string(),
                r["latency_us"].as_f64().expect("latency"),
            ));
        }
    }
    v
}

#[test]
fn a_point_does_not_depend_on_the_other_algorithms_in_the_sweep() {
    let all = latencies(&sweep_json(&[]));
    let some = latencies(&sweep_json(&["--algo", "native,bruck", "--workers", "1"]));
    assert_eq!(some.len(), 6);
    for point in &some {
        assert!(all.contains(point), "{point:?} differs from the full sweep");
    }
}

#[test]
fn threads_mode_sweeps_report_wall_time_against_a_pingpong_of_the_same_run() {
    let out = ok(&railcoll(&[
        "sweep",
        "allgather",
        "--mode",
        "threads",
        "--nodes",
        "2",
        "--ranks-per-node",
        "1",
        "--sizes",
        "64",
        "--iters",
        "2",
        "--rounds",
        "1",
        "--algo",
        "direct,native",
        "--json",
        "-q",
    ]));
    let doc: Value = serde_json::from_str(&out).expect("json");
    let sweep = &doc["sweeps"][0];
    assert_eq!(sweep["mode"], "threads");
    assert!(sweep["pingpong_rtt_ns"].as_f64().is_some_and(|v| v > 0.0));
    for r in sweep["points"][0]["results"].as_array().expect("results") {
        assert!(r["pingpong_ratio"].as_f64().is_some_and(|v| v > 0.0), "{r}");
        assert!(r["trace_hash"].is_null());
    }
}

#[test]
fn scaling_sweeps_four_eight_and_sixteen_processes() {
    let out = ok(&railcoll(&[
        "sweep",
        "allgather",
        "--scaling",
        "--sizes",
        "4,64",
        "--algo",
        "direct,native",
        "--json",
        "-q",
    ]));
    let doc: Value = serde_json::from_str(&out).expect("json");
    let procs: Vec<u64> = doc["sweeps"]
        .as_array()
        .expect("sweeps")
        .iter()
        .map(|s| s["procs"].as_u64().expect("procs"))
        .collect();
    assert_eq!(procs, vec![4, 8, 16]);
}

/// A span: start, end, name.
type Interval = (f64, f64, String);

/// Spans on one track must nest or follow each other.
fn assert_nested(events: &[Value]) {
    let mut tracks: HashMap<(u64, u64), Vec<Interval>> = HashMap::new();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let ts = e["ts"].as_f64().expect("ts");
        let dur = e["dur"].as_f64().expect("dur");
        assert!(dur >= 0.0, "{e}");
        let key = (
            e["pid"].as_u64().expect("pid"),
            e["tid"].as_u64().expect("tid"),
        );
        let name = e["name"].as_str().expect("name").to_string();
        tracks.entry(key).or_default().push((ts, ts + dur, name));
    }
    const EPS: f64 = 1e-6;
    for (track, mut spans) in tracks {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut stack: Vec<Interval> = Vec::new();
        for s in spans {
            while stack.last().is_some_and(|top| s.0 >= top.1 - EPS) {
                stack.pop();
            }
            if let Some(top) = stack.last() {
                assert!(
                    s.1 <= top.1 + EPS,
                    "track {track:?}: '{}' [{}, {}] overlaps '{}' [{}, {}]",
                    s.2,
                    s.0,
                    s.1,
                    top.2,
                    top.0,
                    top.1
                );
            }
            stack.push(s);
        }
    }
}

/// Does the trace name a thread `name` in process `pid`?
fn has_thread(events: &[Value], pid: u64, name: &str) -> bool {
    events
        .iter()
        .any(|e| e["ph"] == "M" && e["pid"] == pid && e["args"]["name"] == name)
}

fn trace(args: &[&str], dir: &Path) -> Value {
    let file = dir.join("run.json");
    let file_arg = file.display().to_string();
    let mut all = vec!["trace"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", &file_arg]);
    ok(&railcoll(&all));
    serde_json::from_str(&std::fs::read_to_string(&file).expect("trace written"))
        .expect("valid JSON")
}

#[test]
fn traces_are_chrome_json_with_tracks_per_rank_nic_and_rail_and_nested_spans() {
    let dir = scratch("trace");
    let call = [
        "allgather",
        "--algo",
        "smp-bruck",
        "--size",
        "1K",
        "--nodes",
        "2",
        "--ranks-per-node",
        "2",
    ];
    let doc = trace(&call, &dir);
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    for e in events {
        assert!(
            e["ph"].is_string() && e["name"].is_string() && e["pid"].is_u64(),
            "{e}"
        );
    }
    assert_nested(events);
    let thread = |pid: u64, name: &str| has_thread(events, pid, name);
    for r in 0..4 {
        assert!(thread(1, &format!("rank {r}")), "rank {r} track");
    }
    // One message per node: smp-bruck at 1 KiB uses rail 0 only.
    for node in 0..2 {
        assert!(thread(2, &format!("node {node} rail 0")), "NIC track");
        assert!(thread(10, &format!("node {node} port")), "rail track");
    }
    let cats: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| e["ph"] == "X")
        .filter_map(|e| e["cat"].as_str())
        .collect();
    for c in ["op", "step", "put", "wait", "shm", "nic", "packet"] {
        assert!(cats.contains(c), "no '{c}' spans: {cats:?}");
    }
    // Every rank's operation span holds its steps.
    let ops = events.iter().filter(|e| e["cat"] == "op").count();
    assert_eq!(ops, 4);
    assert_eq!(doc["otherData"]["clock"], "virtual");
    // The traced call is the sweep's point, to the picosecond.
    let swept = sweep_json(&["--algo", "smp-bruck", "--sizes", "1K"]);
    assert_eq!(
        doc["otherData"]["latency_us"],
        swept["sweeps"][0]["points"][0]["results"][0]["latency_us"]
    );
    assert_eq!(doc["otherData"]["data"], "full");
    assert!(doc["otherData"]["proof"].is_null(), "nothing to prove");
    // Without the data: the same call, to the picosecond, and its proof.
    let none = trace(&[&call[..], &["--data", "none"]].concat(), &dir);
    assert_eq!(
        none["otherData"]["latency_us"],
        doc["otherData"]["latency_us"]
    );
    assert_eq!(none["otherData"]["data"], "none");
    assert_eq!(none["otherData"]["proof"], "complete");

    // Direct all-to-all spreads its puts over both rails.
    let doc = trace(
        &[
            "alltoall",
            "--algo",
            "direct",
            "--size",
            "4K",
            "--nodes",
            "2",
            "--ranks-per-node",
            "2",
        ],
        &dir,
    );
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    assert_nested(events);
    let thread = |pid: u64, name: &str| has_thread(events, pid, name);
    for (node, rail) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        assert!(thread(2, &format!("node {node} rail {rail}")), "NIC track");
        assert!(
            thread(10 + rail, &format!("node {node} port")),
            "rail {rail} track"
        );
    }

    let doc = trace(
        &[
            "bcast",
            "--algo",
            "binomial",
            "--size",
            "256",
            "--nodes",
            "3",
            "--ranks-per-node",
            "1",
            "--mode",
            "threads",
        ],
        &dir,
    );
    let events = doc["traceEvents"].as_array().expect("traceEvents");
    assert_nested(events);
    assert_eq!(events.iter().filter(|e| e["cat"] == "op").count(), 3);
    assert_eq!(doc["otherData"]["clock"], "wall");
}

#[test]
fn a_study_file_reproduces_the_command_line() {
    let dir = scratch("study");
    let study = dir.join("study.toml");
    std::fs::write(
        &study,
        "command = \"sweep allgather\"\nnodes = 2\nranks_per_node = 2\nsizes = [4, \"1K\"]\nalgo = \"direct,native\"\njson = true\nquiet = true\n",
    )
    .expect("write");
    let from_file = ok(&railcoll(&["--config", &study.display().to_string()]));
    let from_flags = ok(&railcoll(&[
        "sweep",
        "allgather",
        "--nodes",
        "2",
        "--ranks-per-node",
        "2",
        "--sizes",
        "4,1K",
        "--algo",
        "direct,native",
        "--json",
        "-q",
    ]));
    assert_eq!(from_file, from_flags);
    // The command line overrides the file.
    let overridden = ok(&railcoll(&[
        "sweep",
        "allgather",
        "--config",
        &study.display().to_string(),
        "--nodes",
        "3",
    ]));
    let doc: Value = serde_json::from_str(&overridden).expect("json");
    assert_eq!(doc["sweeps"][0]["nodes"], 3);
}

#[test]
fn bad_input_is_one_line_exit_2_and_nothing_is_written() {
    let dir = scratch("bad");
    let bad_toml = dir.join("bad.toml");
    std::fs::write(&bad_toml, "nodes = [4\n").expect("write");
    let unknown_key = dir.join("unknown.toml");
    std::fs::write(&unknown_key, "nodez = 4\n").expect("write");
    let out = |name: &str| dir.join(name).display().to_string();
    let bad = dir.join("bad.toml").display().to_string();
    let unknown = dir.join("unknown.toml").display().to_string();
    let cases: Vec<(String, &str)> = vec![
        (
            "sweep allgather --algo nope".into(),
            "unknown allgather algorithm 'nope'",
        ),
        (
            "sweep alltoall --algo exchange --nodes 3 --ranks-per-node 1 --rails 1".into(),
            "cannot run on this shape",
        ),
        ("sweep bcast --algo shm".into(), "one node"),
        ("sweep allgather --sizes 0".into(), "size 0"),
        ("sweep allgather --nodes 0".into(), "--nodes"),
        ("sweep scan".into(), "accepted: all, gather"),
        (
            "sweep allgather --preset nowhere".into(),
            "accepted: qsnet2-4x4",
        ),
        (
            "sweep allgather --profile /no/such.toml".into(),
            "unknown profile",
        ),
        ("sweep allgather --root 99".into(), "--root 99"),
        (format!("sweep allgather --config {bad}"), "malformed TOML"),
        (
            format!("sweep allgather --config {unknown}"),
            "unknown key 'nodez'",
        ),
        (
            "sweep allgather --csv /nonexistent/dir/x.csv".into(),
            "cannot write output",
        ),
        (
            format!("sweep allgather --plot {}", out("fig.pdf")),
            ".svg or .png",
        ),
        (
            "sweep allgather --plot /nonexistent/fig.svg".into(),
            "cannot write output",
        ),
        (
            format!("trace allgather --algo all -o {}", out("t.json")),
            "one algorithm",
        ),
        (
            format!("trace allgather --algo bruck --size 0 -o {}", out("t.json")),
            "size 0",
        ),
        (
            format!("tune allgather --shapes 4by4 -o {}", out("t.toml")),
            "NODESxRANKS_PER_NODE",
        ),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.split_whitespace().collect();
        let o = railcoll(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        vec!["bad.toml", "unknown.toml"],
        "nothing half-written"
    );
}

/// A sweep whose plot could not be drawn (one size) is refused before it
/// runs, and leaves neither its CSV nor any hidden file behind; a sweep
/// that succeeds leaves exactly its two outputs.
#[test]
fn a_sweep_writes_all_its_outputs_or_none() {
    let dir = scratch("all-or-none");
    let csv = dir.join("a.csv");
    let svg = dir.join("a.svg");
    let (csv_s, svg_s) = (csv.display().to_string(), svg.display().to_string());
    let mut args = vec![
        "sweep",
        "allgather",
        "--sizes",
        "4K",
        "--algo",
        "direct",
        "-q",
        "--csv",
        &csv_s,
        "--plot",
        &svg_s,
    ];
    args.extend_from_slice(&SHAPE);
    let out = railcoll(&args);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = || -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(listing(), Vec::<String>::new(), "nothing written");
    args[2 + 1] = "4,4K";
    ok(&railcoll(&args));
    assert_eq!(
        listing(),
        ["a.csv", "a.svg"],
        "both outputs, no hidden file"
    );
}

/// The soak reports the process's use at every sample; a short one on
/// the default cluster grows neither threads nor file descriptors, and
/// its resident memory stays within what a leak of even 100 bytes per
/// operation would exceed.
#[test]
fn a_short_soak_grows_no_threads_descriptors_or_memory() {
    let out = ok(&railcoll(&[
        "soak",
        "--barriers",
        "20000",
        "--allgathers",
        "5000",
        "--samples",
        "4",
        "--json",
    ]));
    let samples: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(
        samples.len(),
        5,
        "a sample before the rounds and after each: {out}"
    );
    let field = |s: &Value, k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
    let (first, last) = (&samples[0], &samples[4]);
    assert_eq!(field(last, "barriers"), 20000);
    assert_eq!(field(last, "allgathers"), 5000);
    for s in &samples {
        assert_eq!(field(s, "threads"), field(first, "threads"), "{out}");
        assert_eq!(field(s, "fds"), field(first, "fds"), "{out}");
    }
    let growth_kib = field(last, "rss_kib").saturating_sub(field(first, "rss_kib"));
    assert!(
        growth_kib * 1024 < 25_000 * 100,
        "resident memory grew by {growth_kib} KiB over 25,000 operations: {out}"
    );
}

/// `railcoll` with one byte of one rank's checked buffer flipped as the
/// verifier reads it back (the verifier's test hook).
fn railcoll_planted(args: &[&str], rank_offset: &str) -> Output {
    let empty = scratch("no-user-config");
    railcoll_env(
        args,
        &[
            ("XDG_CONFIG_HOME", &empty),
            ("RAILCOLL_PLANT_WRONG_BYTE", Path::new(rank_offset)),
        ],
    )
}

#[test]
fn a_wrong_result_fails_sweep_tune_and_validate_with_nothing_written() {
    let dir = scratch("wrong");
    let (csv, svg, table) = (dir.join("a.csv"), dir.join("a.svg"), dir.join("t.toml"));
    let shape = ["--nodes", "2", "--ranks-per-node", "1", "--rails", "1"];
    let mut sweep = vec![
        "sweep", "alltoall", "--algo", "direct", "--sizes", "4,8", "-q",
    ];
    sweep.extend_from_slice(&shape);
    let files = [
        "--csv",
        csv.to_str().expect("path"),
        "--plot",
        svg.to_str().expect("path"),
    ];
    // Rank 1's receive buffer at 8 B blocks: byte 13 is block 1, byte 5.
    let out = railcoll_planted(&[&sweep[..], &files[..]].concat(), "1:13");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    for needle in [
        "wrong result: alltoall 'direct' at 8 B",
        "rank 1's receive buffer block 1 (from rank 1), byte 5",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
    assert!(out.stdout.is_empty(), "no table for a wrong result");
    assert_eq!(
        std::fs::read_dir(&dir).expect("ls").count(),
        0,
        "no CSV, no plot, no partial file"
    );
    // Unplanted, the same sweep verifies and writes both.
    let mut verified = sweep.clone();
    verified.extend_from_slice(&files);
    ok(&railcoll(&verified));
    let rows = std::fs::read_to_string(&csv).expect("csv");
    assert_eq!(rows.lines().count(), 3, "{rows}");
    // --no-verify skips the check: the planted byte goes unseen.
    let mut unchecked = sweep.clone();
    unchecked.extend_from_slice(&["--no-verify", "--json"]);
    let v: Value = serde_json::from_str(&ok(&railcoll_planted(&unchecked, "1:13"))).expect("json");
    assert_eq!(v["sweeps"][0]["points"].as_array().map(Vec::len), Some(2));
    // tune writes no table for a wrong result.
    let mut tune = vec!["tune", "alltoall", "--sizes", "4", "-q", "-o"];
    tune.push(table.to_str().expect("path"));
    tune.extend_from_slice(&shape);
    let out = railcoll_planted(&tune, "0:0");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("rank 0's receive buffer block 0"));
    assert!(!table.exists());
    // validate against the sweep's own CSV: refused with a wrong result.
    let out = railcoll_planted(
        &[
            "validate",
            "qsnet2-dual",
            "--measured",
            csv.to_str().expect("path"),
            "-q",
        ],
        "0:0",
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("wrong result: alltoall"));
    assert!(out.stdout.is_empty());
}

#[test]
fn sweep_records_carry_every_flag_that_changes_a_figure() {
    let dir = scratch("conditions");
    let csv = dir.join("f.csv");
    let flags = [
        "--faults",
        "drop=0.01,corrupt=0.001",
        "--seed",
        "7",
        "--retransmit-timeout",
        "1ms",
        "--retry-limit",
        "3",
        "--check",
    ];
    let mut args = vec![
        "sweep",
        "allgather",
        "--algo",
        "direct",
        "--sizes",
        "4,64",
        "-q",
    ];
    args.extend_from_slice(&["--nodes", "2", "--ranks-per-node", "1", "--json", "--csv"]);
    args.push(csv.to_str().expect("path"));
    for (extra, verified) in [(&flags[..], true), (&["--no-verify"][..], false)] {
        let args = [&args[..], extra].concat();
        let v: Value = serde_json::from_str(&ok(&railcoll(&args))).expect("json");
        let s = &v["sweeps"][0];
        let text = std::fs::read_to_string(&csv).expect("csv");
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().expect("header").split(',').collect();
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert_eq!(rows.len(), 2);
        let col = |name: &str| -> Vec<&str> {
            let i = header.iter().position(|h| *h == name).expect(name);
            rows.iter().map(|r| r[i]).collect()
        };
        let faulty = verified;
        let (faults, seed, timeout, limit) = if faulty {
            ("drop=0.01;corrupt=0.001", "7", "1000", "3")
        } else {
            ("none", "0", "", "")
        };
        assert_eq!(col("faults"), [faults; 2]);
        assert_eq!(col("seed"), [seed; 2]);
        assert_eq!(col("retransmit_timeout_us"), [timeout; 2]);
        assert_eq!(col("retry_limit"), [limit; 2]);
        assert_eq!(col("verified"), [verified.to_string().as_str(); 2]);
        // `--check` went with the faulty flags: the exchange is in the figure.
        assert_eq!(col("checked"), [faulty.to_string().as_str(); 2]);
        assert_eq!(s["checked"], faulty);
        assert_eq!(s["faults"], faults.replace(';', ","));
        assert_eq!(s["seed"], seed.parse::<u64>().expect("seed"));
        assert_eq!(s["verified"], verified);
        if faulty {
            assert_eq!(s["retransmit_timeout_us"], 1000.0);
            assert_eq!(s["retry_limit"], 3);
        } else {
            assert!(s["retransmit_timeout_us"].is_null() && s["retry_limit"].is_null());
        }
    }
}
