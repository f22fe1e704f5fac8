//! What the tests of the `railcoll` binary share: running it hermetically
//! (no tuning table of the machine's user leaks in) and reading what it
//! prints. Each test file uses some of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

pub fn railcoll_env(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_railcoll"));
    cmd.args(args).env_remove("RAILCOLL_TUNING");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run railcoll")
}

pub fn railcoll(args: &[&str]) -> Output {
    // No user tuning table leaks in from the machine running the tests.
    let empty = scratch("no-user-config");
    railcoll_env(args, &[("XDG_CONFIG_HOME", &empty)])
}

/// stdout as one JSON value per line (each line must parse).
pub fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("railcoll-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Run railcoll; it must succeed. stdout as one JSON document when it is.
pub fn ok_json(args: &[&str]) -> serde_json::Value {
    let out = railcoll(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

/// stderr of a run that must fail with `code`, on one line.
pub fn one_line_error(args: &[&str], code: i32) -> String {
    let out = railcoll(args);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    err
}

pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A fresh directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("railcoll-wb-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The shape most workbench runs use.
pub const SHAPE: [&str; 4] = ["--nodes", "2", "--ranks-per-node", "2"];

/// `railcoll sweep allgather` at three sizes on [`SHAPE`], as JSON.
pub fn sweep_json(extra: &[&str]) -> Value {
    let mut args = vec!["sweep", "allgather", "--sizes", "4,1K,16K", "--json", "-q"];
    args.extend_from_slice(&SHAPE);
    args.extend_from_slice(extra);
    serde_json::from_str(&ok(&railcoll(&args))).expect("one JSON document")
}
