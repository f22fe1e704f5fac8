//! Ranks as processes: jobs launched by `railcoll_emu::launcher` (what
//! `railcoll launch` runs), each rank a process of the test-support
//! program `rank_catalogue`, its NICs served over vfio-user by a `nicd`.
//!
//! - Every collective and algorithm of the catalogue, host-driven and on
//!   the NICs, checked byte for byte by every rank, on every shape of
//!   nodes 1..=4 x ranks per node 1..=4 x rails 1..=2, and on a cyclic
//!   one.
//! - A rank killed (SIGKILL) while the others are in a collective: the
//!   others return a typed error within their wait's bound, not a hang
//!   and not a success.
//! - A `nicd` killed while its ranks run collectives: every rank returns
//!   a typed error and exits; none hangs.
//! - One `nicd` serves job after job, also after a job that lost a rank.
//! - A process started by no launcher, or against a `nicd` serving
//!   another job, is refused with a typed error.
//! - A plain vfio-user client (rust-vmm's, not railcoll's) sees the
//!   device docs/abi.md §9.2 specifies.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use railcoll_emu::ClusterConfig;
use railcoll_emu::launcher::{JobOutcome, LaunchSpec, Nics, RankEnd, launch};
use railcoll_host::Placement;
use railcoll_tests::jobs::{self, output};

const RANK: &str = env!("CARGO_BIN_EXE_rank_catalogue");

fn scratch(name: &str) -> PathBuf {
    jobs::scratch("processes", name)
}

fn config(nodes: usize, rpn: usize, rails: usize, placement: Placement) -> ClusterConfig {
    ClusterConfig {
        shape: railcoll_host::topology::Shape::new(nodes, rpn, 1, rails, placement).expect("shape"),
        arena_size: 16 << 20,
        wait_timeout: Duration::from_secs(60),
        ..ClusterConfig::default()
    }
}

/// Run `rank_catalogue` on every rank with `env`, its output in `out`.
fn run_job(cfg: &ClusterConfig, env: &[(&str, &str)], out: &Path, nics: Nics) -> JobOutcome {
    // The launcher passes its environment on: the case options reach the
    // ranks through a wrapper that sets them.
    let mut args = vec!["-c".to_string(), String::new()];
    let assignments: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    args[1] = format!("exec env {} {RANK}", assignments.join(" "));
    let spec = LaunchSpec {
        program: "sh".into(),
        args,
        grace: Duration::from_secs(30),
        nics,
        output: Some(out.to_path_buf()),
        fabric: None,
    };
    launch(cfg, &spec).expect("the job starts")
}

fn expect_all_ok(outcome: &JobOutcome, out: &Path, what: &str) {
    jobs::expect_all_ok(std::slice::from_ref(outcome), out, what);
}

#[test]
fn the_catalogue_is_byte_exact_across_processes_on_every_small_shape() {
    let out = scratch("catalogue");
    let mut shapes: Vec<(usize, usize, usize, Placement)> = Vec::new();
    for nodes in 1..=4 {
        for rpn in 1..=4 {
            for rails in 1..=2 {
                shapes.push((nodes, rpn, rails, Placement::Block));
            }
        }
    }
    shapes.push((3, 2, 2, Placement::Cyclic));
    for (i, (nodes, rpn, rails, placement)) in shapes.into_iter().enumerate() {
        // Alternate the sizes between shapes: each size class meets every
        // node count, within the suite's time.
        let sizes = ["0,1,1000,4096", "3,64,4097"][i % 2];
        let cfg = config(nodes, rpn, rails, placement);
        let outcome = run_job(&cfg, &[("RANK_CATALOGUE_SIZES", sizes)], &out, Nics::Own);
        expect_all_ok(
            &outcome,
            &out,
            &format!("{nodes} x {rpn} x {rails} ({placement:?})"),
        );
    }
}

#[test]
fn a_rank_killed_mid_collective_leaves_the_others_a_typed_error() {
    let out = scratch("rank-killed");
    let cfg = config(2, 2, 2, Placement::Block);
    let started = Instant::now();
    let outcome = killed_rank_job(&cfg, &out, Nics::Own);
    assert_eq!(outcome.ranks[1].1, RankEnd::Signalled(9));
    assert_eq!(outcome.first_failure, Some(1));
    assert_eq!(outcome.status(), 128 + 9);
    for rank in [0, 2, 3] {
        assert_eq!(
            outcome.ranks[rank].1,
            RankEnd::Exited(0),
            "rank {rank}: {}",
            output(&out, rank, "err")
        );
        let said = output(&out, rank, "out");
        assert!(
            said.contains("typed error: wait did not complete within")
                || said.contains("typed error: rank ")
                    && said.contains("the communicator is revoked"),
            "rank {rank} said {said:?}"
        );
    }
    // Within the waits' bound (5 s) and start-up, far from a hang.
    assert!(started.elapsed() < Duration::from_secs(40));
}

/// A job in which rank 1 kills itself while the others wait in an
/// all-gather (waits bounded at 5 s).
fn killed_rank_job(cfg: &ClusterConfig, out: &Path, nics: Nics) -> JobOutcome {
    run_job(
        cfg,
        &[("RANK_CATALOGUE_DIE", "1"), ("RANK_CATALOGUE_TIMEOUT", "5")],
        out,
        nics,
    )
}

/// A `nicd` outlives a job that lost a rank: the dead rank's context is
/// detached, the stale arrivals at the rendezvous do not count for the
/// next job, the node's memory comes back, and the next job is
/// byte-exact.
#[test]
fn a_nicd_serves_a_good_job_after_a_failed_one() {
    let out = scratch("after-failure");
    let dir = scratch("after-failure-sockets");
    let cfg = config(2, 2, 2, Placement::Block);
    let nicd = railcoll_emu::nicd::Nicd::start(&cfg, &dir).expect("nicd");
    let failed = killed_rank_job(&cfg, &out, Nics::Serving(dir.clone()));
    assert_eq!(failed.ranks[1].1, RankEnd::Signalled(9));
    two_good_jobs(&cfg, &out, &dir, "after the failed one");
    nicd.stop();
}

#[test]
fn a_nicd_killed_mid_collective_leaves_its_ranks_a_typed_error() {
    let out = scratch("nicd-killed");
    let dir = scratch("nicd-killed-sockets");
    let mut nicd = Command::new(RANK)
        .args(["nicd", dir.to_str().expect("utf-8 path"), "2", "2", "2"])
        .stdout(Stdio::null())
        .spawn()
        .expect("nicd starts");
    let ready = Instant::now();
    while !dir.join("job.toml").exists() {
        assert!(
            ready.elapsed() < Duration::from_secs(30),
            "nicd never served"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let cfg = config(2, 2, 2, Placement::Block);
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        nicd.kill().expect("kill nicd");
        nicd.wait().expect("reap nicd")
    });
    // The library's waits and the test loop's polls (the program's
    // timeout bounds both) are bounded at 60 s:
    // only the loss of the nicd, noticed at once, ends the job soon.
    let started = Instant::now();
    let outcome = run_job(
        &cfg,
        &[
            ("RANK_CATALOGUE_ROUNDS", "100000"),
            ("RANK_CATALOGUE_TIMEOUT", "60"),
        ],
        &out,
        Nics::Serving(dir.clone()),
    );
    let ended = started.elapsed();
    killer.join().expect("killer");
    for &(rank, ref end) in &outcome.ranks {
        assert_eq!(*end, RankEnd::Exited(1), "rank {rank}");
        let err = output(&out, rank, "err");
        assert!(
            err.starts_with(&format!("rank {rank}: "))
                && !err.contains("join:")
                && !err.contains("never completed"),
            "rank {rank} reported {err:?}"
        );
    }
    assert!(
        ended < Duration::from_secs(20),
        "the ranks took {ended:?} to notice the nicd had gone"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// One `nicd` serving two jobs, one after the other: the second's
/// hardware barriers (numbered from the start by its new communicator)
/// are not taken for the first's, and every byte is right in both.
#[test]
fn a_nicd_serves_one_job_after_another() {
    let out = scratch("two-jobs");
    let dir = scratch("two-jobs-sockets");
    let cfg = config(2, 2, 2, Placement::Block);
    let nicd = railcoll_emu::nicd::Nicd::start(&cfg, &dir).expect("nicd");
    two_good_jobs(&cfg, &out, &dir, "in turn");
    nicd.stop();
}

/// Two jobs, one after the other, on the `nicd` serving `dir`; every
/// byte right in both.
fn two_good_jobs(cfg: &ClusterConfig, out: &Path, dir: &Path, what: &str) {
    for job in 0..2 {
        let outcome = run_job(
            cfg,
            &[("RANK_CATALOGUE_SIZES", "64,4096")],
            out,
            Nics::Serving(dir.to_path_buf()),
        );
        expect_all_ok(&outcome, out, &format!("job {job} {what}"));
    }
}

#[test]
fn a_process_outside_a_launch_or_its_job_is_refused() {
    let out = scratch("refused");
    // No launcher variables at all.
    let alone = Command::new(RANK)
        .env_clear()
        .env("RAILCOLL_NICD", &out)
        .output()
        .expect("runs");
    assert_eq!(alone.status.code(), Some(1));
    let err = String::from_utf8_lossy(&alone.stderr);
    assert!(err.contains("no launcher started this process"), "{err}");
    // A launcher's job of 4 ranks against a nicd serving 2 nodes x 1.
    let dir = scratch("refused-sockets");
    let cfg = config(2, 1, 1, Placement::Block);
    let nicd = railcoll_emu::nicd::Nicd::start(&cfg, &dir).expect("nicd");
    let stranger = Command::new(RANK)
        .env_clear()
        .env("RAILCOLL_NICD", &dir)
        .envs([
            ("RAILCOLL_RANK", "3"),
            ("RAILCOLL_SIZE", "4"),
            ("RAILCOLL_LOCAL_RANK", "1"),
            ("RAILCOLL_LOCAL_SIZE", "2"),
            ("RAILCOLL_NODE", "1"),
        ])
        .output()
        .expect("runs");
    assert_eq!(stranger.status.code(), Some(1));
    let err = String::from_utf8_lossy(&stranger.stderr);
    assert!(err.contains("is not one of the job nicd serves"), "{err}");
    nicd.stop();
}

/// A vfio-user client of its own, not railcoll's: `nicd` answers it as
/// the device of docs/abi.md §9.2 (BAR0 reads the NIC's identity, the
/// node memory is mappable), takes a context's vector twice from one
/// connection without waiting for itself, and refuses a region that is
/// not there.
#[test]
fn a_plain_vfio_user_client_sees_the_specified_device() {
    use railcoll_host::process::nicd::{BAR0_REGION, IRQ_INDEX, MEMORY_REGION, socket_path};
    use std::os::fd::{AsFd, AsRawFd};
    use vfio_bindings::bindings::vfio::{VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD};

    let dir = scratch("plain-client");
    let cfg = config(1, 2, 1, Placement::Block);
    let nicd = railcoll_emu::nicd::Nicd::start(&cfg, &dir).expect("nicd");
    let mut client = vfio_user::Client::new(&socket_path(&dir, 0, 0)).expect("connect");
    let mut id = [0u8; 8];
    client
        .region_read(
            BAR0_REGION,
            u64::from(railcoll_fw::abi::regs::ID.offset()),
            &mut id,
        )
        .expect("read ID");
    assert_eq!(u64::from_le_bytes(id), railcoll_fw::abi::regs::ID_VALUE);
    let memory = client.region(MEMORY_REGION).expect("node memory region");
    assert!(memory.file_offset.is_some(), "node memory is mappable");
    assert!(memory.size >= 16 << 20);
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    let started = Instant::now();
    for _ in 0..2 {
        let interrupt = railcoll_mem::event_fd::EventFd::new().expect("eventfd");
        client
            .set_irqs(IRQ_INDEX, flags, 1, 1, &[interrupt.as_fd().as_raw_fd()])
            .expect("SET_IRQS");
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the second SET_IRQS waited for the connection's own hold"
    );
    drop(client);
    nicd.stop();
}
