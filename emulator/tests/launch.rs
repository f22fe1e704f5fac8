//! `railcoll launch` and `railcoll nicd` as a user runs them: each rank's
//! variables, the job's exit status, the ranks' output files, and typed
//! refusals of bad arguments. The collectives across processes are
//! tested in tests/tests/processes.rs.

mod support;

use std::process::Output;

use support::{railcoll, temp_dir};

/// `railcoll launch FLAGS -- sh -c SCRIPT`.
fn launch(flags: &str, script: &str) -> Output {
    let mut args: Vec<&str> = vec!["launch"];
    args.extend(flags.split_whitespace());
    args.extend(["--", "sh", "-c", script]);
    railcoll(&args)
}

/// Every rank gets its identity and the nicd's directory, whose job file
/// is there while the ranks run; the launcher exits 0 when all did.
#[test]
fn every_rank_gets_its_variables_and_a_served_directory() {
    let out = temp_dir("launch-vars");
    let flags = format!(
        "--nodes 2 --ranks-per-node 2 --rails 2 --placement cyclic --output {}",
        out.display()
    );
    let script = "echo $RAILCOLL_RANK $RAILCOLL_SIZE $RAILCOLL_LOCAL_RANK $RAILCOLL_LOCAL_SIZE \
                  $RAILCOLL_NODE; test -S $RAILCOLL_NICD/n0-r1.sock && test -e $RAILCOLL_NICD/job.toml";
    let done = launch(&flags, script);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    // Cyclic: rank r on node r % 2, local rank r / 2.
    for (rank, want) in ["0 4 0 2 0", "1 4 0 2 1", "2 4 1 2 0", "3 4 1 2 1"]
        .iter()
        .enumerate()
    {
        let said = std::fs::read_to_string(out.join(format!("rank-{rank}.out"))).expect("output");
        assert_eq!(said.trim(), *want, "rank {rank}");
    }
}

/// The first failing rank's status is the launcher's: an exit status as
/// it is, a signal as 128 + its number; the failure is named on stderr.
#[test]
fn the_first_failure_is_the_jobs_status() {
    let failed = launch(
        "--nodes 1 --ranks-per-node 3 --rails 1 --grace 0",
        "if [ $RAILCOLL_RANK = 2 ]; then exit 7; fi",
    );
    assert_eq!(failed.status.code(), Some(7));
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(err.contains("rank 2 exited with status 7"), "{err}");
    let killed = launch(
        "--nodes 2 --ranks-per-node 1 --rails 1 --grace 0",
        "if [ $RAILCOLL_RANK = 1 ]; then kill -9 $$; fi",
    );
    assert_eq!(killed.status.code(), Some(128 + 9));
    let err = String::from_utf8_lossy(&killed.stderr);
    assert!(err.contains("rank 1 was killed by signal 9"), "{err}");
}

/// Once a rank failed, the others get the grace period, then are killed.
#[test]
fn ranks_that_outlive_the_grace_are_killed() {
    let start = std::time::Instant::now();
    let out = launch(
        "--nodes 1 --ranks-per-node 2 --rails 1 --grace 1",
        "if [ $RAILCOLL_RANK = 0 ]; then exit 3; else exec sleep 60; fi",
    );
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 1 was killed by the launcher"), "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
}

/// Bad arguments: one line naming the problem, exit status 2; nothing runs.
#[test]
fn bad_arguments_are_refused_with_a_typed_error() {
    for (args, says) in [
        (vec!["launch", "--nodes", "2"], "required"),
        (vec!["launch", "--nodes", "0", "--", "true"], "--nodes"),
        (vec!["launch", "--arena", "lots", "--", "true"], "--arena"),
        (
            vec!["launch", "--", "/nonexistent/program"],
            "cannot start /nonexistent/program",
        ),
        (
            vec!["nicd", "--dir", "/nonexistent/dir"],
            "is not a directory",
        ),
    ] {
        let out = railcoll(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `railcoll conformance` as an FPGA team runs it: against the in-process
/// emulator, and as every rank of a launched job against its nicd over
/// vfio-user; exit 1 when a check fails (a switch that drops broadcasts),
/// 2 for a check that does not exist.
#[test]
fn conformance_runs_in_process_and_across_processes_and_fails_loudly() {
    let text = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let clean = railcoll(&["conformance", "--nodes", "2", "--rails", "2"]);
    assert!(clean.status.success(), "{}", text(&clean));
    assert!(
        text(&clean).ends_with("13 passed, 0 not applicable, 0 failed\n"),
        "{}",
        text(&clean)
    );
    let joined = railcoll(&[
        "launch",
        "--nodes",
        "2",
        "--ranks-per-node",
        "2",
        "--rails",
        "2",
        "--",
        env!("CARGO_BIN_EXE_railcoll"),
        "conformance",
        "--join",
    ]);
    assert!(
        joined.status.success(),
        "{}",
        String::from_utf8_lossy(&joined.stderr)
    );
    let said = text(&joined);
    assert!(
        said.starts_with("conformance of the nicd serving"),
        "{said}"
    );
    assert!(
        said.ends_with("13 passed, 0 not applicable, 0 failed\n"),
        "{said}"
    );
    let broken = railcoll(&[
        "conformance",
        "--faults",
        "drop-collective=1",
        "--retransmit-timeout",
        "1ms",
        "--retry-limit",
        "2",
        "--only",
        "puts,switch-broadcast",
    ]);
    assert_eq!(broken.status.code(), Some(1), "{}", text(&broken));
    assert!(
        text(&broken).contains("FAIL  switch-broadcast"),
        "{}",
        text(&broken)
    );
    assert!(text(&broken).contains("pass  puts"), "{}", text(&broken));
    // A board behind VFIO that this machine does not have: a typed
    // refusal naming what is missing (no /dev/vfio here; elsewhere, no
    // such device), never a panic.
    let board = railcoll(&["conformance", "--vfio", "0000:7f:1f.7"]);
    assert_eq!(board.status.code(), Some(2), "{}", text(&board));
    let said = String::from_utf8_lossy(&board.stderr);
    assert!(
        said.contains("VFIO") || said.contains("0000:7f:1f.7"),
        "{said}"
    );
    let unknown = railcoll(&["conformance", "--only", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no check named \"nope\""));
}
