//! The figures of ranks as processes beside ranks as threads, each as a
//! ratio to baselines measured in the same run (docs/performance.md,
//! "Ranks as processes").
//!
//! `rank_catalogue bench threads NODES RPN RAILS` runs the measurements
//! on an in-process cluster (threads mode); `rank_catalogue bench` as
//! every rank of `railcoll launch` runs them with ranks as processes over
//! the `nicd` in `RAILCOLL_NICD`. Rank 0 prints one line per figure: what,
//! the median time, and its ratio to the same run's cache-line ping-pong
//! round trip (latencies) or memcpy (bandwidth), measured between the
//! rounds. `bench udp-echo ADDR:PORT` echoes datagrams until killed,
//! and `bench udp-probe ADDR:PORT` measures against it the baselines of
//! rails between hosts: a 64-byte datagram's round trip, and 1 MiB echoed
//! in 8 KiB datagrams, 32 in flight (the NICs' window), both sockets'
//! receive buffers as large as a rail's.
//! `RANK_BENCH_ROUNDS` (default 5) rounds; `RANK_BENCH_LABEL`
//! names the processes' lines (default `processes`).

use std::time::Instant;

use railcoll_emu::bench::{median, memcpy_seconds, pingpong_rtt_seconds, time_per_call};
use railcoll_host::process::{Job, JoinOptions};
use railcoll_host::{Comm, RailPolicy, TransferOptions};

/// Collective calls timed per round (the same on every rank).
const CALLS: u32 = 200;

/// `bench [threads NODES RPN RAILS]`.
pub fn main(args: &[String]) -> Result<(), String> {
    let rounds: usize = std::env::var("RANK_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    match args.first().map(String::as_str) {
        Some("threads") => threads(&args[1..], rounds),
        Some("udp-echo") => udp_echo(args.get(1).ok_or("usage: bench udp-echo ADDR:PORT")?),
        Some("udp-probe") => udp_probe(args.get(1).ok_or("usage: bench udp-probe ADDR:PORT")?),
        None => processes(rounds),
        Some(other) => Err(format!("unknown mode {other:?}")),
    }
}

fn threads(args: &[String], rounds: usize) -> Result<(), String> {
    let n = |i: usize| -> Result<usize, String> {
        args.get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| "usage: rank_catalogue bench threads NODES RPN RAILS".to_string())
    };
    let shape = railcoll_host::topology::Shape::new(n(0)?, n(1)?, 1, n(2)?, Default::default())
        .map_err(|e| e.to_string())?;
    let cluster = railcoll_emu::Cluster::new(railcoll_emu::ClusterConfig {
        shape,
        arena_size: 16 << 20,
        check: false,
        ..railcoll_emu::ClusterConfig::default()
    })
    .map_err(|e| e.to_string())?;
    for r in cluster.run(|comm| measure(comm, rounds, "threads")) {
        r.map_err(|e| e.to_string())??;
    }
    Ok(())
}

fn processes(rounds: usize) -> Result<(), String> {
    let dir = std::env::var("RAILCOLL_NICD").map_err(|_| "RAILCOLL_NICD is not set")?;
    let options = JoinOptions {
        check: false,
        ..JoinOptions::default()
    };
    let job = Job::join(dir.as_ref(), &options).map_err(|e| e.to_string())?;
    // What the lines say the ranks were: "processes" unless told (the
    // figures over UDP rails say "udp").
    let label = std::env::var("RANK_BENCH_LABEL").unwrap_or_else(|_| "processes".into());
    measure(job.comm(), rounds, &label)?;
    job.finish().map_err(|e| e.to_string())
}

/// Seconds per call of `CALLS` calls of `op`, the same count on every rank.
fn per_call(mut op: impl FnMut() -> Result<(), railcoll_host::Error>) -> Result<f64, String> {
    let start = Instant::now();
    for _ in 0..CALLS {
        op().map_err(|e| e.to_string())?;
    }
    Ok(start.elapsed().as_secs_f64() / f64::from(CALLS))
}

fn measure(comm: &Comm, rounds: usize, mode: &str) -> Result<(), String> {
    let fail = |e: railcoll_host::Error| e.to_string();
    let n = comm.size();
    let big = 1 << 20;
    let src = comm.alloc(big).map_err(fail)?;
    let dst = comm.alloc(big).map_err(fail)?;
    let send = comm.alloc(4096).map_err(fail)?;
    let recv = comm.alloc(4096 * n).map_err(fail)?;
    // A peer on another node where there is one (the put crosses a rail).
    let topology = *comm.topology();
    let my_node = topology.locate(0).map_err(fail)?.0;
    let peer = (1..n)
        .find(|&r| topology.locate(r).is_ok_and(|(node, _)| node != my_node))
        .unwrap_or(1);
    // (what, per-round seconds, per-round baseline seconds, baseline name)
    let mut rows: Vec<(&str, Vec<f64>, Vec<f64>, &str)> = vec![
        ("put 8 B, one rail", vec![], vec![], "ping-pong"),
        ("put 1 MiB, striped", vec![], vec![], "memcpy"),
        ("barrier", vec![], vec![], "ping-pong"),
        ("all-gather 4 KiB", vec![], vec![], "ping-pong"),
    ];
    for _ in 0..rounds {
        // Rank 0's baseline, while the other ranks wait in the barrier
        // below (a ping-pong measured by every rank at once on a 2-core
        // machine measures the scheduler, not a cache-line hand-off).
        let mut pingpong = f64::NAN;
        if comm.rank() == 0 {
            pingpong = (0..3)
                .map(|_| pingpong_rtt_seconds())
                .fold(f64::INFINITY, f64::min);
        }
        if comm.rank() == 0 && n > 1 {
            for (row, bytes, policy) in [
                (0, 8, RailPolicy::Rail(0)),
                (1, big, RailPolicy::Stripe { threshold: 0 }),
            ] {
                let (s, d) = (
                    src.slice(0, bytes).map_err(fail)?,
                    dst.slice(0, bytes).map_err(fail)?,
                );
                let options = TransferOptions {
                    policy: Some(policy),
                    dest_event: None,
                    wake: false,
                };
                let mut failure = None;
                let t = time_per_call(|| {
                    if let Err(e) = comm
                        .endpoint()
                        .put_with(&s, peer, &d, options)
                        .and_then(|h| h.wait())
                    {
                        failure = Some(e);
                    }
                });
                if let Some(e) = failure {
                    return Err(e.to_string());
                }
                rows[row].1.push(t);
                rows[row].2.push(if row == 0 {
                    pingpong
                } else {
                    memcpy_seconds(bytes)
                });
            }
        }
        comm.barrier().map_err(fail)?;
        rows[2].1.push(per_call(|| comm.barrier())?);
        rows[2].2.push(pingpong);
        rows[3].1.push(per_call(|| comm.allgather(&send, &recv))?);
        rows[3].2.push(pingpong);
    }
    if comm.rank() == 0 {
        for (what, times, baselines, baseline) in &mut rows {
            if times.is_empty() {
                continue;
            }
            let mut ratios: Vec<f64> = times
                .iter()
                .zip(baselines.iter())
                .map(|(t, b)| if *baseline == "memcpy" { b / t } else { t / b })
                .collect();
            let t = median(times);
            let b = median(baselines);
            println!(
                "{mode}\t{what}\t{:.2} us\t{baseline} {:.3} us\tratio {:.2}",
                t * 1e6,
                b * 1e6,
                median(&mut ratios)
            );
        }
    }
    Ok(())
}

/// A receive buffer as large as a rail's socket asks for.
fn grow(socket: &std::net::UdpSocket) -> Result<(), String> {
    railcoll_mem::socket_buffers::grow_receive_buffer(socket, 16 << 20)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn udp_echo(addr: &str) -> Result<(), String> {
    let socket = std::net::UdpSocket::bind(addr).map_err(|e| format!("{addr}: {e}"))?;
    grow(&socket)?;
    let mut buf = vec![0u8; 65_536];
    loop {
        let (n, from) = socket.recv_from(&mut buf).map_err(|e| e.to_string())?;
        socket.send_to(&buf[..n], from).map_err(|e| e.to_string())?;
    }
}

/// The UDP baselines of rails between hosts, against `udp_echo` at
/// `addr`: medians of 5 rounds.
fn udp_probe(addr: &str) -> Result<(), String> {
    let io = |e: std::io::Error| e.to_string();
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").map_err(io)?;
    socket.connect(addr).map_err(io)?;
    grow(&socket)?;
    socket
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .map_err(io)?;
    let mut buf = vec![0u8; 65_536];
    let (mut rtts, mut bulks) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..1000 {
            socket.send(&[7u8; 64]).map_err(io)?;
            socket.recv(&mut buf).map_err(io)?;
        }
        rtts.push(start.elapsed().as_secs_f64() / 1000.0);
        let chunk = [9u8; 8192];
        let start = Instant::now();
        for _ in 0..(1 << 20) / (32 * chunk.len()) {
            for _ in 0..32 {
                socket.send(&chunk).map_err(io)?;
            }
            for _ in 0..32 {
                socket.recv(&mut buf).map_err(io)?;
            }
        }
        bulks.push(start.elapsed().as_secs_f64());
    }
    println!(
        "udp baseline\tdatagram round trip 64 B\t{:.2} us",
        median(&mut rtts) * 1e6
    );
    println!(
        "udp baseline\t1 MiB echoed, 8 KiB datagrams, 32 in flight\t{:.2} us",
        median(&mut bulks) * 1e6
    );
    Ok(())
}
