//! Rails between machines, on one machine: a job's nodes on two or three
//! hosts (loopback addresses 127.0.0.1-3 standing for them), each host's
//! ranks launched by its own launcher with its own `nicd`, the rails'
//! packets crossing between the `nicd`s as UDP datagrams and every rail's
//! switch on host 0 (`railcoll_emu::fabric`). The catalogue, every
//! algorithm host-driven and on the NICs, checked byte for byte by every
//! rank, on every shape of nodes 2..=4 x ranks per node 1..=4 x rails
//! 1..=2. `.ci/rails` runs the catalogue between network namespaces, with
//! a link that drops packets for a while.
//!
//! Also: a host that never comes leaves the others' ranks a typed error
//! (their bootstrap times out), and their launcher ends; a host's `nicd`
//! killed mid-collective leaves every rank of the job, on both hosts, a
//! typed error within bounds, not a hang.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use railcoll_emu::ClusterConfig;
use railcoll_emu::fabric::{Fabric, Here};
use railcoll_emu::launcher::{JobOutcome, LaunchSpec, Nics, RankEnd, launch};
use railcoll_host::Placement;
use railcoll_tests::jobs;

const RANK: &str = env!("CARGO_BIN_EXE_rank_catalogue");

fn config(nodes: usize, rpn: usize, rails: usize) -> ClusterConfig {
    ClusterConfig {
        shape: railcoll_host::topology::Shape::new(nodes, rpn, 1, rails, Placement::Block)
            .expect("shape"),
        arena_size: 16 << 20,
        wait_timeout: Duration::from_secs(60),
        ..ClusterConfig::default()
    }
}

/// A fabric of `hosts` (each its nodes) on loopback addresses, at a port
/// of this test process's own.
fn fabric(hosts: &[&[u16]], port: u16) -> Fabric {
    let mut text = format!("port = {port}\n");
    for (i, nodes) in hosts.iter().enumerate() {
        text += &format!(
            "[[host]]\naddress = \"127.0.0.{}\"\nnodes = {nodes:?}\n",
            i + 1
        );
    }
    Fabric::parse(&text).expect("fabric")
}

/// Host `host`'s launcher: `rank_catalogue` with `env` on its ranks.
fn spec(
    cfg: &ClusterConfig,
    fabric: &Fabric,
    host: usize,
    env: &str,
    nics: Nics,
    out: &Path,
) -> LaunchSpec {
    let here = Here::new(fabric.clone(), host, cfg.shape.nodes(), cfg.shape.rails).expect("host");
    LaunchSpec {
        program: "sh".into(),
        args: vec!["-c".into(), format!("exec env {env} {RANK}")],
        grace: Duration::from_secs(30),
        nics,
        output: Some(out.to_path_buf()),
        fabric: Some(here),
    }
}

/// Every host's launcher at once; each host's outcome.
fn run(cfg: &ClusterConfig, fabric: &Fabric, sizes: &str, out: &Path) -> Vec<JobOutcome> {
    let env = format!("RANK_CATALOGUE_SIZES={sizes}");
    std::thread::scope(|s| {
        let joins: Vec<_> = (0..fabric.hosts().len())
            .map(|host| {
                let spec = spec(cfg, fabric, host, &env, Nics::Own, out);
                s.spawn(move || launch(cfg, &spec).expect("the host's launcher starts"))
            })
            .collect();
        joins
            .into_iter()
            .map(|j| j.join().expect("launcher"))
            .collect()
    })
}

/// Every rank `outcome` started failed with a typed error of its own
/// (not at joining, when `joined`), nothing hung and nothing succeeded.
fn expect_typed_failures(outcome: &JobOutcome, out: &Path, joined: bool, what: &str) {
    assert!(!outcome.ranks.is_empty(), "{what}: ranks started");
    for (rank, end) in &outcome.ranks {
        let err = jobs::output(out, *rank, "err");
        assert_eq!(*end, RankEnd::Exited(1), "{what}: rank {rank}: {err}");
        assert!(
            err.starts_with(&format!("rank {rank}: ")),
            "{what}: rank {rank}: {err}"
        );
        assert_eq!(err.contains("join:"), !joined, "{what}: rank {rank}: {err}");
    }
}

/// Every rank of the job ran once, on one host, and checked every byte.
fn expect_all_ok(outcomes: &[JobOutcome], size: usize, out: &Path, what: &str) {
    let mut seen: Vec<usize> = outcomes
        .iter()
        .flat_map(|o| o.ranks.iter().map(|(r, _)| *r))
        .collect();
    seen.sort_unstable();
    assert_eq!(
        seen,
        (0..size).collect::<Vec<_>>(),
        "{what}: every rank ran once"
    );
    jobs::expect_all_ok(outcomes, out, what);
    // The data crossed between the hosts' nicds: every rail of every host
    // sent and took datagrams.
    for (host, o) in outcomes.iter().enumerate() {
        assert!(!o.datagrams.is_empty(), "{what}: host {host} has rails");
        for (rail, c) in o.datagrams.iter().enumerate() {
            assert!(
                c.sent > 0 && c.received > 0,
                "{what}: host {host} rail {rail}: {c}"
            );
            assert_eq!(c.refused, 0, "{what}: host {host} rail {rail}: {c}");
        }
    }
}

#[test]
fn the_catalogue_is_byte_exact_with_rails_between_hosts() {
    let out = jobs::scratch("udp", "catalogue");
    let base = port_base();
    // The shape subset of tests/processes.rs that has nodes on two hosts
    // at least: nodes 2..=4 x ranks per node 1..=4 x rails 1..=2, the
    // nodes dealt round two or three hosts, rotated so that host 0 (the
    // switches' and the bootstrap's) changes, and hosts with nodes that
    // are not contiguous.
    let mut i = 0;
    for nodes in 2..=4usize {
        for rpn in 1..=4 {
            for rails in 1..=2 {
                let hosts = nodes.min(3);
                let placed: Vec<Vec<u16>> = (0..hosts)
                    .map(|h| {
                        (0..nodes as u16)
                            .filter(|n| (usize::from(*n) + i) % hosts == h)
                            .collect()
                    })
                    .collect();
                let slices: Vec<&[u16]> = placed.iter().map(Vec::as_slice).collect();
                let cfg = config(nodes, rpn, rails);
                let f = fabric(&slices, base + (i % 3) as u16 * 4);
                let sizes = ["0,1,1000,4096", "3,64,4097,40000"][i % 2];
                let outcomes = run(&cfg, &f, sizes, &out);
                expect_all_ok(
                    &outcomes,
                    nodes * rpn,
                    &out,
                    &format!("{nodes} x {rpn} x {rails} on hosts {placed:?}"),
                );
                i += 1;
            }
        }
    }
}

/// Ports of this test process's own, below the ephemeral range.
fn port_base() -> u16 {
    20_000 + (std::process::id() % 600) as u16 * 20
}

#[test]
fn a_host_that_never_comes_fails_the_others_bootstrap() {
    let out = jobs::scratch("udp", "absent");
    let cfg = ClusterConfig {
        wait_timeout: Duration::from_secs(3),
        ..config(2, 2, 1)
    };
    let f = fabric(&[&[0], &[1]], port_base() + 16);
    let started = Instant::now();
    // The ranks would wait 10 s; host 0's nicd gives the other host 3.
    let spec = spec(&cfg, &f, 0, "RANK_CATALOGUE_TIMEOUT=10", Nics::Own, &out);
    let outcome = launch(&cfg, &spec).expect("host 0's launcher starts");
    expect_typed_failures(&outcome, &out, false, "host 1 absent");
    for (rank, _) in &outcome.ranks {
        let err = jobs::output(&out, *rank, "err");
        assert!(
            err.contains("ranks of another host never came"),
            "rank {rank}: {err}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "host 0's launcher took {:?} to give up",
        started.elapsed()
    );
}

#[test]
fn a_host_killed_mid_collective_leaves_every_rank_a_typed_error() {
    let out = jobs::scratch("udp", "killed");
    let dir = jobs::scratch("udp", "killed-sockets");
    let cfg = ClusterConfig {
        // A dead peer is given up after (1 + 2 + 4 + 8 x 2) x 20 ms.
        retransmit_timeout: Some(Duration::from_millis(20)),
        retry_limit: Some(4),
        ..config(2, 2, 2)
    };
    let f = fabric(&[&[0], &[1]], port_base() + 12);
    let file = out.join("fabric.toml");
    std::fs::write(
        &file,
        format!(
            "port = {}\n[[host]]\naddress = \"127.0.0.1\"\nnodes = [0]\n\
             [[host]]\naddress = \"127.0.0.2\"\nnodes = [1]\n",
            f.port()
        ),
    )
    .expect("fabric file");
    assert_eq!(Fabric::read(&file).expect("reads"), f);
    // Host 1's nicd in a process of its own, to be killed.
    let mut nicd = Command::new(RANK)
        .args(["nicd", dir.to_str().expect("utf-8 path"), "2", "2", "2"])
        .arg(&file)
        .arg("1")
        .stderr(Stdio::null())
        .spawn()
        .expect("nicd starts");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.join("job.toml").exists() {
        assert!(Instant::now() < deadline, "host 1's nicd never served");
        std::thread::sleep(Duration::from_millis(20));
    }
    let env = "RANK_CATALOGUE_TIMEOUT=5 RANK_CATALOGUE_ROUNDS=1000";
    let started = Instant::now();
    let outcomes: Vec<JobOutcome> = std::thread::scope(|s| {
        let host0 = spec(&cfg, &f, 0, env, Nics::Own, &out);
        let host1 = spec(&cfg, &f, 1, env, Nics::Serving(dir.clone()), &out);
        let cfg = &cfg;
        let joins = [
            s.spawn(move || launch(cfg, &host0).expect("host 0 starts")),
            s.spawn(move || launch(cfg, &host1).expect("host 1 starts")),
        ];
        // Mid-job: the ranks have joined and run collectives.
        std::thread::sleep(Duration::from_secs(2));
        nicd.kill().expect("kill host 1's nicd");
        nicd.wait().expect("reap it");
        joins.map(|j| j.join().expect("launcher")).into()
    });
    let ended = started.elapsed();
    for (host, outcome) in outcomes.iter().enumerate() {
        expect_typed_failures(outcome, &out, true, &format!("host {host}"));
    }
    assert!(
        ended < Duration::from_secs(40),
        "the job took {ended:?} to end"
    );
}
