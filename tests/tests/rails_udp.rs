//! Rails between machines, on one machine: a job's nodes on two or three
//! hosts (loopback addresses 127.0.0.1-3 standing for them), each host's
//! ranks launched by its own launcher with its own `nicd`, the rails'
//! packets crossing between the `nicd`s as UDP datagrams and every rail's
//! switch on host 0 (`railcoll_emu::fabric`). The catalogue, every
//! algorithm host-driven and on the NICs, checked byte for byte by every
//! rank. `.ci/rails` runs the same between network namespaces, with a
//! link that drops packets for a while.

use std::path::Path;
use std::time::Duration;

use railcoll_emu::ClusterConfig;
use railcoll_emu::fabric::{Fabric, Here};
use railcoll_emu::launcher::{JobOutcome, LaunchSpec, Nics, launch};
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

/// Every host's launcher at once; each host's outcome.
fn run(cfg: &ClusterConfig, fabric: &Fabric, sizes: &str, out: &Path) -> Vec<JobOutcome> {
    std::thread::scope(|s| {
        let joins: Vec<_> = (0..fabric.hosts.len())
            .map(|host| {
                let here = Here::new(fabric.clone(), host, cfg.shape.nodes(), cfg.shape.rails)
                    .expect("host");
                let spec = LaunchSpec {
                    program: "sh".into(),
                    args: vec![
                        "-c".into(),
                        format!("exec env RANK_CATALOGUE_SIZES={sizes} {RANK}"),
                    ],
                    grace: Duration::from_secs(30),
                    nics: Nics::Own,
                    output: Some(out.to_path_buf()),
                    fabric: Some(here),
                };
                s.spawn(move || launch(cfg, &spec).expect("the host's launcher starts"))
            })
            .collect();
        joins
            .into_iter()
            .map(|j| j.join().expect("launcher"))
            .collect()
    })
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
}

#[test]
fn the_catalogue_is_byte_exact_with_rails_between_hosts() {
    let out = jobs::scratch("udp", "catalogue");
    let base = 20_000 + (std::process::id() % 1000) as u16 * 20;
    let cases: [(usize, usize, usize, &[&[u16]]); 3] = [
        (2, 2, 2, &[&[0], &[1]]),
        // A host whose nodes are not contiguous, and host 0 without the
        // most ranks.
        (3, 2, 2, &[&[1], &[0, 2]]),
        (4, 1, 2, &[&[0], &[1, 2], &[3]]),
    ];
    for (i, (nodes, rpn, rails, hosts)) in cases.into_iter().enumerate() {
        let cfg = config(nodes, rpn, rails);
        let f = fabric(hosts, base + i as u16 * 5);
        let sizes = ["0,1,1000,4096", "3,64,4097,40000", "8,9000"][i];
        let outcomes = run(&cfg, &f, sizes, &out);
        expect_all_ok(
            &outcomes,
            nodes * rpn,
            &out,
            &format!("{nodes} x {rpn} x {rails} on {} hosts", hosts.len()),
        );
    }
}
