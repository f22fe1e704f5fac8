//! `railcoll tune` and the tuning table as a user meets them: a table
//! written by a tune that library calls then follow, the forms compiled
//! onto the NICs ranked, bad tables refused, no table read from the
//! environment by the library.

use std::process::Command;
use std::sync::Arc;

use railcoll_emu::modeled::Profile;
use railcoll_emu::{Cluster, ClusterConfig, Mode};
use railcoll_host::sched::Collective;
use railcoll_host::sched::tuning::TuningTable;
use serde_json::Value;

mod support;
use support::*;

/// The best algorithm per size from `tune`'s summary line for `shape`.
fn tuned_bests(summary: &str, shape: &str) -> Vec<(usize, String)> {
    tuned_bests_of(summary, "allgather", shape)
}

fn tuned_bests_of(summary: &str, collective: &str, shape: &str) -> Vec<(usize, String)> {
    let line = summary
        .lines()
        .find(|l| l.starts_with(&format!("{collective} {shape}:")))
        .expect("summary line");
    line.split_whitespace()
        .skip(2)
        .map(|kv| {
            let (size, algo) = kv.split_once('=').expect("size=algo");
            let size = match size.strip_suffix('K') {
                Some(k) => k.parse::<usize>().expect("size") << 10,
                None => size.parse().expect("size"),
            };
            (size, algo.to_string())
        })
        .collect()
}

#[test]
fn tune_writes_a_table_that_library_calls_then_follow() {
    let dir = scratch("tune");
    let table = dir.join("tuned.toml");
    let table_arg = table.display().to_string();
    let sizes = "4,256,4K,64K";
    let summary = ok(&railcoll(&[
        "tune",
        "allgather",
        "--shapes",
        "2x2",
        "--sizes",
        sizes,
        "-o",
        &table_arg,
        "-q",
    ]));
    let bests = tuned_bests(&summary, "2x2");
    assert_eq!(bests.len(), 4);
    // The sweep agrees on the best algorithms.
    let doc = sweep_json(&["--sizes", sizes]);
    for (p, (size, best)) in doc["sweeps"][0]["points"]
        .as_array()
        .expect("points")
        .iter()
        .zip(&bests)
    {
        assert_eq!(
            (p["size"].as_u64(), p["best"].as_str()),
            (Some(*size as u64), Some(best.as_str()))
        );
    }
    // A library call on that shape picks the tuned algorithm.
    let tuned = Arc::new(TuningTable::load(&table).expect("valid table"));
    let preset_sockets = 2; // gcd(qsnet2-4x4's 4 sockets, 2 ranks per node)
    library_follows(
        &tuned,
        (2, 2, preset_sockets),
        Collective::Allgather,
        &bests,
    );
    // Without --output, tune writes the user's table, which is then the
    // one in use (what `Comm::tuning` loads), unless RAILCOLL_TUNING says
    // otherwise.
    let home = scratch("tune-home");
    let env = [("XDG_CONFIG_HOME", home.as_path())];
    ok(&railcoll_env(
        &[
            "tune",
            "allgather",
            "--shapes",
            "2x2",
            "--sizes",
            sizes,
            "-q",
        ],
        &env,
    ));
    let user = home.join("railcoll/tuning.toml");
    assert_eq!(TuningTable::load(&user).expect("user table"), *tuned);
    let shown = ok(&railcoll_env(&["tuning", "show"], &env));
    assert!(
        shown.contains("written by railcoll tune") && shown.contains("tuning.toml"),
        "{shown}"
    );
    let mut args = vec!["sweep", "allgather", "--sizes", sizes, "--json", "-q"];
    args.extend_from_slice(&SHAPE);
    let doc: Value = serde_json::from_str(&ok(&railcoll_env(&args, &env))).expect("json");
    for (p, (_, best)) in doc["sweeps"][0]["points"]
        .as_array()
        .expect("points")
        .iter()
        .zip(&bests)
    {
        assert_eq!(
            p["tuned"].as_str(),
            Some(best.as_str()),
            "tuned column follows the user table"
        );
    }
    let builtin = dir.join("builtin.toml");
    std::fs::write(&builtin, TuningTable::builtin().to_toml()).expect("write");
    let shown = ok(&railcoll_env(
        &["tuning", "show"],
        &[
            ("XDG_CONFIG_HOME", home.as_path()),
            ("RAILCOLL_TUNING", builtin.as_path()),
        ],
    ));
    assert!(shown.contains("from RAILCOLL_TUNING"), "{shown}");
}

/// `tune --algo all,all@nic` ranks the forms compiled onto the NICs beside
/// the host-driven ones: its table names the winner of each size as the
/// sweep of the same list finds it, `@nic` forms included, and the
/// library follows it.
#[test]
fn tune_ranks_the_forms_compiled_onto_the_nics() {
    let dir = scratch("tune-nic");
    let table = dir.join("tuned.toml");
    let table_arg = table.display().to_string();
    let (sizes, algos) = ("4,64K", "all,all@nic");
    let summary = ok(&railcoll(&[
        "tune", "gather", "--algo", algos, "--shapes", "4x1", "--sizes", sizes, "-o", &table_arg,
        "-q",
    ]));
    let bests = tuned_bests_of(&summary, "gather", "4x1");
    assert_eq!(bests.len(), 2, "{summary}");
    let doc: Value = serde_json::from_str(&ok(&railcoll(&[
        "sweep",
        "gather",
        "--algo",
        algos,
        "--nodes",
        "4",
        "--ranks-per-node",
        "1",
        "--sizes",
        sizes,
        "--json",
        "-q",
    ])))
    .expect("json");
    let points = doc["sweeps"][0]["points"].as_array().expect("points");
    for (p, (size, best)) in points.iter().zip(&bests) {
        assert_eq!(
            (p["size"].as_u64(), p["best"].as_str()),
            (Some(*size as u64), Some(best.as_str()))
        );
    }
    // qsnet2-dual's model has the native gather's NIC-chained tree on the
    // NICs fastest at 64 KiB on 4 x 1 (docs/offload.md): an offloaded form
    // wins a size, and the table says so.
    assert!(
        bests.iter().any(|(_, a)| a.ends_with("@nic")),
        "no offloaded form won: {bests:?}"
    );
    let tuned = Arc::new(TuningTable::load(&table).expect("valid table"));
    assert!(
        tuned
            .origin
            .as_deref()
            .is_some_and(|o| o.contains("--algo all,all@nic")),
        "{:?}",
        tuned.origin
    );
    library_follows(&tuned, (4, 1, 1), Collective::Gather, &bests);
    // An algorithm the collective does not have is refused in words, and
    // nothing is written.
    let bad = dir.join("bad.toml");
    let out = railcoll(&[
        "tune",
        "gather",
        "--algo",
        "all,bogus@nic",
        "--shapes",
        "4x1",
        "--sizes",
        "4",
        "-o",
        &bad.display().to_string(),
        "-q",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("unknown gather algorithm 'bogus'"), "{err}");
    assert!(!bad.exists(), "nothing written for a refused tune");
}

/// Every rank of a modeled (nodes, ranks per node, sockets) cluster on
/// two rails, given `tuned`, picks `bests`' algorithm at each size.
fn library_follows(
    tuned: &Arc<TuningTable>,
    (nodes, rpn, sockets): (usize, usize, usize),
    collective: Collective,
    bests: &[(usize, String)],
) {
    let cfg = ClusterConfig {
        shape: railcoll_host::sched::Shape::new(
            nodes,
            rpn,
            sockets,
            2,
            railcoll_host::Placement::Block,
        )
        .expect("shape"),
        mode: Mode::Modeled,
        tuning: Arc::clone(tuned),
        ..ClusterConfig::default()
    };
    let cluster =
        Cluster::modeled(cfg, Profile::builtin("qsnet2-dual").expect("profile")).expect("cluster");
    let picks = cluster.run(|comm| {
        assert!(
            Arc::ptr_eq(&comm.tuning(), tuned),
            "the configuration's table, shared"
        );
        bests
            .iter()
            .map(|(size, _)| {
                comm.tuned_algorithm(collective, *size)
                    .map(|a| a.name().to_string())
            })
            .collect::<Result<Vec<_>, _>>()
    });
    let expected: Vec<String> = bests.iter().map(|(_, a)| a.clone()).collect();
    for p in picks {
        assert_eq!(p.expect("ran").expect("picked"), expected);
    }
}

/// A tuning table the user broke is refused by the command, once, before
/// it runs anything: exit 2, one line naming the file and the rule, and
/// the same for `tuning show`.
#[test]
fn a_bad_tuning_file_fails_the_command_before_it_runs() {
    let dir = scratch("bad-tuning");
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "[[rule]]\ncollective = \"allgather\"\nalgorithm = \"bogus\"\n",
    )
    .expect("write");
    let mut args = vec!["bench", "allgather", "--sizes", "64", "--mode", "modeled"];
    args.extend_from_slice(&SHAPE);
    for args in [&args[..], &["tuning", "show"][..]] {
        let out = railcoll_env(args, &[("RAILCOLL_TUNING", bad.as_path())]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("tuning table {}: rule 1:", bad.display()))
                && err.contains("bogus"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: nothing measured");
    }
}

/// The library reads no tuning file by itself: with `RAILCOLL_TUNING` and
/// the user's configuration directory both naming broken tables, a cluster
/// built from the default configuration runs its plain calls on the
/// built-in table. (The test runs itself again in a child process with
/// that environment: a test must not change its own process's.)
#[test]
fn the_library_reads_no_tuning_file_from_the_environment() {
    const INNER: &str = "RAILCOLL_TEST_INNER_TUNING";
    if std::env::var_os(INNER).is_some() {
        let cluster = Cluster::new(ClusterConfig {
            shape: railcoll_host::sched::Shape::new(2, 2, 1, 2, railcoll_host::Placement::Block)
                .expect("shape"),
            ..ClusterConfig::default()
        })
        .expect("cluster");
        for r in cluster.run(|comm| -> Result<(), railcoll_host::Error> {
            assert!(Arc::ptr_eq(&comm.tuning(), &TuningTable::shared_builtin()));
            let send = comm.alloc(64)?;
            let recv = comm.alloc(64 * comm.size())?;
            comm.allgather(&send, &recv)?;
            comm.barrier()
        }) {
            r.expect("ran").expect("plain calls on the built-in table");
        }
        return;
    }
    let dir = scratch("library-env");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "not = [a table").expect("write");
    std::fs::create_dir_all(dir.join("railcoll")).expect("dir");
    std::fs::write(dir.join("railcoll/tuning.toml"), "not = [a table").expect("write");
    let out = Command::new(std::env::current_exe().expect("this test"))
        .args([
            "--exact",
            "the_library_reads_no_tuning_file_from_the_environment",
            "--nocapture",
        ])
        .env(INNER, "1")
        .env("RAILCOLL_TUNING", &bad)
        .env("XDG_CONFIG_HOME", &dir)
        .output()
        .expect("run the test again");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
}

#[test]
fn a_relative_xdg_config_home_is_ignored() {
    let dir = scratch("xdg-relative");
    let home = dir.join("home");
    let out = Command::new(env!("CARGO_BIN_EXE_railcoll"))
        .args([
            "tune",
            "barrier",
            "--nodes",
            "2",
            "--ranks-per-node",
            "1",
            "-q",
        ])
        .current_dir(&dir)
        .env_remove("RAILCOLL_TUNING")
        .env("XDG_CONFIG_HOME", "rel")
        .env("HOME", &home)
        .output()
        .expect("run railcoll");
    ok(&out);
    assert!(home.join(".config/railcoll/tuning.toml").is_file());
    assert!(!dir.join("rel").exists(), "nothing under the relative path");
}
