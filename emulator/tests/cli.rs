//! The `railcoll` binary as a user runs it.

use std::process::Command;

mod support;
use support::*;

#[test]
fn bench_put_json_lines_parse_and_carry_the_required_keys() {
    let out = railcoll(&[
        "bench", "put", "--json", "--sizes", "8,64K", "--rounds", "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    // Two sizes x (one rail, striped over two).
    assert_eq!(lines.len(), 4);
    for v in &lines {
        for key in [
            "size",
            "rails",
            "latency_us",
            "bandwidth_gbps",
            "memcpy_ratio",
            "pingpong_ratio",
            "mode",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {v}");
        }
        assert!(v["latency_us"].as_f64().is_some_and(|x| x > 0.0));
        assert!(v["bandwidth_gbps"].as_f64().is_some_and(|x| x > 0.0));
    }
    let sizes: Vec<u64> = lines
        .iter()
        .map(|v| v["size"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(sizes, vec![8, 8, 65_536, 65_536]);
    let rails: Vec<u64> = lines
        .iter()
        .map(|v| v["rails"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(rails, vec![1, 2, 1, 2]);
}

#[test]
fn bad_arguments_exit_2_with_one_line_naming_the_problem() {
    for (args, needle) in [
        (vec!["bench", "put", "--nodes", "0"], "--nodes"),
        (vec!["bench", "put", "--rails", "9"], "--rails"),
        (vec!["bench", "put", "--sizes", "1..x"], "size"),
        (vec!["bench", "put", "--placement", "spiral"], "block"),
        (
            vec!["bench", "put", "--packet-size", "1000"],
            "power of two",
        ),
        (vec!["bench", "put", "--nodes", "1"], "at least 2 ranks"),
        (
            vec!["sweep", "allgather", "--contract", "mpl"],
            "mpi or shmem",
        ),
        (
            vec!["schedule", "show", "allgather", "ring", "--contract", "x"],
            "mpi or shmem",
        ),
    ] {
        let out = railcoll(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.trim().lines().count(),
            1,
            "one line for {args:?}: {err}"
        );
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(
            out.stdout.is_empty(),
            "nothing half-written on stdout for {args:?}"
        );
    }
}

#[test]
fn bench_barrier_and_bcast_json_lines() {
    let out = railcoll(&[
        "bench",
        "barrier",
        "--nodes",
        "2",
        "--ranks-per-node",
        "2",
        "--iters",
        "20",
        "--rounds",
        "1",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = json_lines(&out);
    let algos: Vec<&str> = lines
        .iter()
        .map(|v| v["algorithm"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        algos,
        vec!["rdma", "smp", "sendrecv", "hardware"],
        "shm is skipped on two nodes"
    );
    for v in &lines {
        assert_eq!(v["collective"], "barrier");
        assert!(v["latency_us"].as_f64().is_some_and(|x| x > 0.0));
        assert_eq!(v["ranks_per_node"], 2);
    }
    let out = railcoll(&[
        "bench",
        "bcast",
        "--nodes",
        "1",
        "--ranks-per-node",
        "3",
        "--sizes",
        "8,4K",
        "--algo",
        "shm",
        "--iters",
        "5",
        "--rounds",
        "1",
        "--root",
        "2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = json_lines(&out);
    assert_eq!(lines.len(), 2);
    assert!(
        lines
            .iter()
            .all(|v| v["algorithm"] == "shm" && v["collective"] == "bcast")
    );
}

#[test]
fn bad_collective_arguments_exit_2() {
    for (args, needle) in [
        (
            vec!["bench", "barrier", "--algo", "tree"],
            "accepted: all, all@nic, all@nic-dma, rdma, shm, smp",
        ),
        (
            vec!["bench", "barrier", "--algo", "shm", "--nodes", "2"],
            "one node",
        ),
        (
            vec!["bench", "bcast", "--algo", "ring"],
            "accepted: all, all@nic, all@nic-dma, binomial, shm, smp",
        ),
        (vec!["bench", "bcast", "--root", "9"], "--root 9"),
        (vec!["bench", "bcast", "--sizes", "0..8"], "LO..HI"),
        (
            vec![
                "bench",
                "allgather",
                "--overlap",
                "--mode",
                "modeled",
                "--check-determinism",
            ],
            "does not apply to --overlap",
        ),
        (
            vec!["bench", "allgather", "--overlap", "--algo", "brook@nic"],
            "accepted: all, all@nic, all@nic-dma",
        ),
    ] {
        let out = railcoll(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn bench_allgather_json_has_every_applicable_algorithm() {
    let out = railcoll(&[
        "bench",
        "allgather",
        "--json",
        "--nodes",
        "2",
        "--ranks-per-node",
        "2",
        "--sizes",
        "64",
        "--iters",
        "2",
        "--rounds",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    let algos: Vec<&str> = lines
        .iter()
        .filter_map(|v| v["algorithm"].as_str())
        .collect();
    for a in ["direct", "bruck", "smp-bruck", "ml-shm-rd", "native"] {
        assert!(algos.contains(&a), "{a} missing from {algos:?}");
    }
    assert!(lines.iter().all(
        |v| v["collective"] == "allgather" && v["latency_us"].as_f64().is_some_and(|x| x > 0.0)
    ));
}

#[test]
fn schedule_show_prints_a_verified_schedule_and_the_papers_formula() {
    let out = railcoll(&[
        "schedule", "show", "gather", "binomial", "--nodes", "9", "--rails", "2", "--rank", "3",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("# verified:"), "{text}");
    assert!(text.contains("[QA08 eq. 1]"), "{text}");
    assert!(text.contains("rank 3:") && text.contains("put"), "{text}");
}

/// `--persistent` prints the guarded set: readiness notices first, and it
/// verifies (rule 10 included); `bench --overlap` reports an overlap per
/// algorithm in 0..=100 and `all,all@nic` runs both forms.
#[test]
fn schedule_show_persistent_and_bench_overlap() {
    let out = railcoll(&[
        "schedule",
        "show",
        "allgather",
        "ring",
        "--nodes",
        "4",
        "--rails",
        "1",
        "--persistent",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("# guarded (persistent): every rank") && text.contains("# verified:"),
        "{text}"
    );
    // Rank 0's first step is its readiness notice to the rank that writes it.
    assert!(
        text.contains("0  ready    tell rank 3 this rank entered the call"),
        "{text}"
    );
    let out = railcoll(&[
        "bench",
        "allgather",
        "--overlap",
        "--json",
        "--mode",
        "modeled",
        "--nodes",
        "4",
        "--rails",
        "1",
        "--sizes",
        "8",
        "--iters",
        "1",
        "--algo",
        "ring,ring@nic",
        // Under the MPI contract the readiness waits before ring@nic's
        // chained puts are the host's (docs/offload.md).
        "--contract",
        "shmem",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&out);
    let pct = |a: &str| {
        lines
            .iter()
            .find(|v| v["algorithm"] == a)
            .and_then(|v| v["overlap_pct"].as_f64())
            .unwrap_or(f64::NAN)
    };
    assert!((0.0..=100.0).contains(&pct("ring")), "{lines:?}");
    assert!(pct("ring@nic") > pct("ring") + 50.0, "{lines:?}");
    // The NIC program of a ring@nic rank: forwards written ahead as
    // blocks, each started by its arrival's event.
    let out = railcoll(&[
        "schedule",
        "show",
        "allgather",
        "ring@nic",
        "--nodes",
        "4",
        "--rails",
        "1",
        "--rank",
        "1",
        "--offload",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("NIC program of rank 1"), "{text}");
    assert!(text.contains("block 1 (written at step"), "{text}");
    assert!(text.contains("-> COPY block 1"), "{text}");
    assert!(text.contains("-> WRITE the completion word"), "{text}");
}

#[test]
fn catalogue_commands_refuse_bad_input_in_one_line() {
    for (args, needle) in [
        (
            &["bench", "alltoall", "--algo", "ring"][..],
            "accepted: all, all@nic, all@nic-dma, direct",
        ),
        (
            &[
                "bench", "alltoall", "--algo", "exchange", "--nodes", "3", "--rails", "1",
            ][..],
            "power of k + 1",
        ),
        (&["bench", "gather", "--root", "9"][..], "--root 9"),
        (
            &["schedule", "show", "scan", "direct"][..],
            "unknown collective",
        ),
        (
            &["schedule", "show", "allgather", "direct", "--rank", "2"][..],
            "--rank 2",
        ),
        (
            &["tuning", "show", "--file", "/nonexistent/tuning.toml"][..],
            "nonexistent",
        ),
    ] {
        let out = railcoll(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing half-written");
    }
}

#[test]
fn tuning_show_prints_a_table_that_parses_back() {
    let out = railcoll(&["tuning", "show"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let table = railcoll_host::sched::tuning::TuningTable::parse(&text).expect("round trip");
    assert_eq!(table, railcoll_host::sched::tuning::TuningTable::builtin());
}

#[test]
fn profiles_are_listed_shown_with_sources_and_bad_names_refused() {
    let list = railcoll(&["profile", "list"]);
    assert!(list.status.success());
    let names = String::from_utf8_lossy(&list.stdout);
    for p in ["qsnet2-dual", "clan-via", "ib-multicore", "hockney"] {
        assert!(names.contains(p), "{names}");
    }
    let show = railcoll(&["profile", "show", "qsnet2-dual"]);
    assert!(show.status.success());
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        text.contains("bandwidth_mb_s = 800") && text.contains("[QA08 §6]"),
        "{text}"
    );
    let bad = railcoll(&["profile", "show", "no-such"]);
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("qsnet2-dual"), "{err}");
    assert!(bad.stdout.is_empty());
}

#[test]
fn modeled_bench_reports_virtual_latency_and_checks_determinism() {
    let out = railcoll(&[
        "bench",
        "allgather",
        "--nodes",
        "3",
        "--ranks-per-node",
        "2",
        "--mode",
        "modeled",
        "--profile",
        "hockney",
        "--sizes",
        "4,4K",
        "--iters",
        "1",
        "--algo",
        "bruck",
        "--check-determinism",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("identical trace hashes"), "{err}");
    let lines = json_lines(&out);
    assert_eq!(lines.len(), 2);
    for v in &lines {
        assert_eq!(v["mode"], "modeled");
        assert_eq!(v["profile"], "hockney");
        assert!(v["latency_us"].as_f64().is_some_and(|x| x > 1.6));
        assert!(v["trace_hash"].as_str().is_some_and(|h| h.len() == 16));
    }
    for (args, needle) in [
        (
            vec!["bench", "barrier", "--mode", "fast"],
            "threads, modeled",
        ),
        (
            vec!["bench", "barrier", "--check-determinism"],
            "--mode modeled",
        ),
        (
            vec![
                "bench",
                "barrier",
                "--mode",
                "modeled",
                "--profile",
                "/no/such.toml",
            ],
            "unknown profile",
        ),
    ] {
        let bad = railcoll(&args);
        assert_eq!(bad.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&bad.stderr);
        assert_eq!(e.lines().count(), 1, "{e}");
        assert!(e.contains(needle), "{args:?}: {e}");
        assert!(bad.stdout.is_empty());
    }
}

#[test]
fn a_run_whose_results_cannot_be_written_exits_1_in_one_line() {
    // /dev/full accepts the open and fails every write (ENOSPC): the
    // request was fine, writing its results failed.
    // (Linux provides it; the project's CI runs on Linux.)
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full (Linux)");
    let out = Command::new(env!("CARGO_BIN_EXE_railcoll"))
        .args(["schedule", "show", "allgather", "direct"])
        .stdout(full)
        .output()
        .expect("run railcoll");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.starts_with("error: writing output:"), "{err}");
}

#[test]
fn bench_checks_every_receive_buffer_and_refuses_a_wrong_result() {
    let run = |args: &[&str], plant: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_railcoll"));
        cmd.args(args).env_remove("RAILCOLL_PLANT_WRONG_BYTE");
        if let Some(p) = plant {
            cmd.env("RAILCOLL_PLANT_WRONG_BYTE", p);
        }
        cmd.output().expect("run railcoll")
    };
    let base = [
        "--mode",
        "modeled",
        "--nodes",
        "2",
        "--ranks-per-node",
        "2",
        "--rails",
        "1",
        "--sizes",
        "16",
        "--iters",
        "2",
        "--json",
    ];
    for (what, planted, needle) in [
        // All-gather, rank 3's block 2 (rank 2's data), byte 4.
        (
            "allgather",
            "3:36",
            "rank 3's receive buffer block 2 (from rank 2), byte 4",
        ),
        // Gather: the root's receive buffer is the one checked.
        (
            "gather",
            "0:17",
            "rank 0's receive buffer block 1 (from rank 1), byte 1",
        ),
        // Broadcast: every rank's buffer is the root's.
        (
            "bcast",
            "2:15",
            "rank 2's buffer block 0 (from rank 0), byte 15",
        ),
    ] {
        for extra in [&[][..], &["--overlap"][..]] {
            let args = [&["bench", what, "--algo", "all"][..], &base[..], extra].concat();
            let out = run(&args, Some(planted));
            assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains(&format!("wrong result: {what} '")) && err.contains(needle),
                "{args:?}: {err}"
            );
            assert!(out.stdout.is_empty(), "no figure for a wrong result");
            // Not planted: every algorithm verified; --no-verify: not.
            for (flag, verified) in [(None, true), (Some("--no-verify"), false)] {
                let args = [&args[..], flag.as_slice()].concat();
                let out = run(&args, flag.map(|_| planted));
                assert!(out.status.success(), "{args:?}: {out:?}");
                let lines = json_lines(&out);
                assert!(!lines.is_empty());
                for v in lines {
                    assert_eq!(v["verified"], verified, "{v}");
                }
            }
        }
    }
}

#[test]
fn bench_records_carry_every_flag_that_changes_a_figure() {
    let flags = [
        "--mode",
        "modeled",
        "--nodes",
        "2",
        "--sizes",
        "8",
        "--iters",
        "1",
        "--json",
        "--faults",
        "dup=0.1,rail-down=1@1s",
        "--seed",
        "9",
        "--retransmit-timeout",
        "2ms",
        "--retry-limit",
        "4",
        "--check",
    ];
    for extra in [&[][..], &["--overlap"][..]] {
        let args = [
            &["bench", "alltoall", "--algo", "direct"][..],
            &flags[..],
            extra,
        ]
        .concat();
        let lines = json_lines(&railcoll(&args));
        assert_eq!(lines.len(), 1, "{args:?}");
        let v = &lines[0];
        assert_eq!(v["faults"], "dup=0.1,rail-down=1@1s", "{v}");
        assert_eq!(v["seed"], 9, "{v}");
        assert_eq!(v["retransmit_timeout_us"], 2000.0, "{v}");
        assert_eq!(v["retry_limit"], 4, "{v}");
        assert_eq!(v["verified"], true, "{v}");
        assert_eq!(v["checked"], true, "{v}");
    }
}

#[test]
fn two_outputs_naming_one_file_are_refused_before_the_run() {
    let dir = temp_dir("same-output");
    let (a, b) = (dir.join("out.svg"), dir.join(".").join("out.svg"));
    let err = one_line_error(
        &[
            "sweep",
            "allgather",
            "--sizes",
            "4,8",
            "--nodes",
            "2",
            "--ranks-per-node",
            "1",
            "-q",
            "--csv",
            a.to_str().expect("path"),
            "--plot",
            b.to_str().expect("path"),
        ],
        2,
    );
    assert!(err.contains("--csv and --plot name the same file"), "{err}");
    assert_eq!(
        std::fs::read_dir(&dir).expect("ls").count(),
        0,
        "nothing written"
    );
}

#[test]
fn a_closed_stdout_ends_the_listing_commands_quietly() {
    for args in [
        &["tuning", "show"][..],
        &["schedule", "list"][..],
        &["profile", "list"][..],
        &["profile", "show", "qsnet2-dual"][..],
    ] {
        // The reader is gone before the command writes: every write
        // fails with EPIPE.
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_railcoll"))
            .args(args)
            .env_remove("RAILCOLL_TUNING")
            .stdout(writer)
            .output()
            .expect("run railcoll");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert!(
            out.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn a_zero_watchdog_is_a_bad_argument() {
    let err = one_line_error(&["bench", "barrier", "--watchdog", "0s"], 2);
    assert!(
        err.contains("--watchdog") && err.contains("above zero"),
        "{err}"
    );
}

#[test]
fn a_profile_type_error_is_one_line_naming_the_file_and_key() {
    let dir = temp_dir("profile-type");
    let text =
        String::from_utf8(railcoll(&["profile", "show", "qsnet2-dual"]).stdout).expect("utf-8");
    let line = text
        .lines()
        .find(|l| l.starts_with("latency_ns ="))
        .expect("latency_ns");
    let file = dir.join("bad.toml");
    std::fs::write(&file, text.replacen(line, "latency_ns = \"fast\"", 1)).expect("write");
    let err = one_line_error(&["profile", "show", file.to_str().expect("path")], 2);
    for needle in [
        file.to_str().expect("path"),
        "`link.latency_ns`",
        "expected f64",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

#[test]
fn study_values_are_blamed_on_their_file_and_sizes_are_merged() {
    let dir = temp_dir("study");
    let file = dir.join("study.toml");
    let path = file.to_str().expect("path");
    std::fs::write(&file, "command = \"sweep allgather\"\nnodes = 0\n").expect("write");
    let err = one_line_error(&["--config", path], 2);
    assert!(
        err.contains(&format!("config '{path}': key 'nodes'")),
        "{err}"
    );
    // The same value on the command line is the flag's.
    let err = one_line_error(&["sweep", "allgather", "--nodes", "0"], 2);
    assert!(
        err.contains("'--nodes <NODES>'") && !err.contains("config"),
        "{err}"
    );
    // A size given many times is one point.
    let sizes = vec!["4"; 500].join(", ");
    std::fs::write(
        &file,
        format!(
            "command = \"sweep allgather\"\nnodes = 2\nranks_per_node = 1\nsizes = [{sizes}, 8]\n"
        ),
    )
    .expect("write");
    let one = ok_json(&["--config", path, "--algo", "direct", "--json", "-q"]);
    let two = ok_json(&[
        "sweep",
        "allgather",
        "--nodes",
        "2",
        "--algo",
        "direct",
        "--sizes",
        "4,4,8,4",
        "--json",
        "-q",
    ]);
    for doc in [one, two] {
        let sizes: Vec<u64> = doc["sweeps"][0]["points"]
            .as_array()
            .expect("points")
            .iter()
            .map(|p| p["size"].as_u64().expect("size"))
            .collect();
        assert_eq!(sizes, [4, 8]);
    }
}

#[test]
fn watchdog_reports_name_the_failed_nics_and_the_faults_once() {
    // One rail, down from the start: every flow passes its retry limit.
    let base = [
        "bench",
        "allgather",
        "--nodes",
        "2",
        "--rails",
        "1",
        "--faults",
        "rail-down=0@0us",
        "--retransmit-timeout",
        "1ms",
        "--retry-limit",
        "1",
        "--algo",
        "direct",
        "--sizes",
        "8",
        "--iters",
        "1",
        "--rounds",
        "1",
        "--json",
    ];
    for (mode, what) in [
        ("modeled", "modeled run stalled"),
        ("threads", "threads-mode watchdog"),
    ] {
        let args = [&base[..], &["--mode", mode, "--watchdog", "300ms"][..]].concat();
        let err = one_line_error(&args, 1);
        assert_eq!(err.matches(what).count(), 1, "{err}");
        for needle in [
            "NICs (node.rail) with a flow past its retry limit (peer unreachable): 0.0, 1.0",
            "faults injected (rail-down=0@0ns)",
            "rail_down: 4",
        ] {
            assert!(err.contains(needle), "{mode}: {needle}: {err}");
        }
    }
}

/// A termination signal at any moment of a run that writes a CSV and a
/// plot leaves both old files or both new ones, and no hidden `.partial`
/// file: the outputs are staged and renamed with SIGINT, SIGTERM and
/// SIGHUP held off (a signal's default action ends the process without
/// unwinding, so nothing else could remove a staged file). The kills land
/// at spread moments of the run, the last ones in or after its writing.
#[test]
fn a_signal_while_outputs_are_written_leaves_old_or_new_never_a_mix() {
    let dir = temp_dir("signal");
    let (csv, svg) = (dir.join("out.csv"), dir.join("out.svg"));
    let run = |sizes: &str| {
        Command::new(env!("CARGO_BIN_EXE_railcoll"))
            .args([
                "sweep",
                "allgather",
                "--nodes",
                "2",
                "--ranks-per-node",
                "1",
            ])
            .args(["--algo", "direct,ring", "--sizes", sizes, "-q"])
            .arg("--csv")
            .arg(&csv)
            .arg("--plot")
            .arg(&svg)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn railcoll")
    };
    let write_old = || {
        let status = run("8,64").wait().expect("wait");
        assert!(status.success());
        (
            std::fs::read(&csv).expect("old csv"),
            std::fs::read(&svg).expect("old svg"),
        )
    };
    let started = std::time::Instant::now();
    let (old_csv, old_svg) = write_old();
    let whole = started.elapsed();
    let mut news = 0;
    for k in 0..16u32 {
        let mut child = run("8,128");
        std::thread::sleep(whole * k / 12);
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let _ = child.wait().expect("wait");
        let left: Vec<String> = std::fs::read_dir(&dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("partial"))
            .collect();
        assert!(left.is_empty(), "kill {k}: left behind {left:?}");
        let csv_new = std::fs::read(&csv).expect("csv") != old_csv;
        let svg_new = std::fs::read(&svg).expect("svg") != old_svg;
        assert_eq!(
            csv_new, svg_new,
            "kill {k}: a new CSV beside an old plot, or the reverse"
        );
        if csv_new {
            news += 1;
            let _ = write_old();
        }
    }
    // The last kills come after the run had time to finish.
    assert!(
        news > 0,
        "no run got as far as writing: the kills came too early"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
