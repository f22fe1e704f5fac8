//! Host-driven against NIC-chained (`sched::offload`) runs of the same
//! algorithms, in modeled mode: the table of `docs/performance.md`'s
//! offload section.
//!
//! ```sh
//! cargo run --release -p railcoll-emu --example offload_compare
//! ```
//!
//! Each point is a fresh modeled cluster: every rank fills its buffers,
//! runs the collective once to warm up, then `ITERS` times, each after a
//! hardware barrier; the latency is the slowest rank's mean (virtual
//! time), as `railcoll bench` reports for gathers.

use railcoll_emu::modeled::Profile;
use railcoll_emu::{Cluster, ClusterConfig, Mode};
use railcoll_host::sched::offload;
use railcoll_host::sched::verify::Budget;
use railcoll_host::sched::{Algorithm, Collective, Shape};
use railcoll_host::{Comm, Placement};

const ITERS: usize = 4;

fn latency_us(
    profile: &Profile,
    shape: Shape,
    c: Collective,
    a: Algorithm,
    bytes: usize,
    nic: bool,
) -> Result<f64, String> {
    let n = shape.size();
    let cluster = Cluster::modeled(
        ClusterConfig {
            shape,
            mode: Mode::Modeled,
            arena_size: (bytes * n * 16).max(1 << 20).next_power_of_two(),
            packet_size: profile.packet_size,
            ..ClusterConfig::default()
        },
        profile.clone(),
    )
    .map_err(|e| e.to_string())?;
    let per_rank = cluster.run(|comm: &Comm| -> Result<f64, railcoll_host::Error> {
        let send = comm.alloc(bytes.max(1))?;
        let recv = comm.alloc((bytes * n).max(1))?;
        let host = comm.schedule(c, a, bytes, 0)?;
        let set = if nic {
            let budget = Budget::for_nic(comm.endpoint().nic_limits());
            std::sync::Arc::new(offload::compile(&host, &budget)?.set)
        } else {
            host
        };
        comm.run_schedule(&set, &send, &recv)?;
        let mut total = 0.0;
        for _ in 0..ITERS {
            comm.barrier_with(Algorithm::Hardware)?;
            let start = cluster.now_ns();
            comm.run_schedule(&set, &send, &recv)?;
            total += cluster.now_ns() - start;
        }
        comm.barrier()?;
        Ok(total / ITERS as f64)
    });
    let mut worst = 0.0f64;
    for r in per_rank {
        worst = worst.max(r.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?);
    }
    Ok(worst / 1e3)
}

fn main() -> Result<(), String> {
    let cases = [
        (Collective::Allgather, Algorithm::Ring),
        (Collective::Allgather, Algorithm::RecursiveDoubling),
        (Collective::Allgather, Algorithm::Bruck),
        (Collective::Gather, Algorithm::Binomial),
    ];
    println!(
        "| profile | ranks | collective | algorithm | block | host-driven (us) | NIC-chained (us) | chained / host |"
    );
    println!("|---|---:|---|---|---:|---:|---:|---:|");
    for (profile_name, nodes) in [("clan-via", 8), ("qsnet2-dual", 8), ("qsnet2-dual", 16)] {
        let profile = Profile::builtin(profile_name).map_err(|e| e.to_string())?;
        let shape = Shape::new(nodes, 1, 1, 1, Placement::Block).map_err(|e| e.to_string())?;
        for (c, a) in cases {
            for bytes in [8usize, 4096] {
                let host = latency_us(&profile, shape, c, a, bytes, false)?;
                let nic = latency_us(&profile, shape, c, a, bytes, true)?;
                println!(
                    "| {profile_name} | {} | {c} | {a} | {bytes} | {host:.2} | {nic:.2} | {:.2} |",
                    shape.size(),
                    nic / host
                );
            }
        }
    }
    Ok(())
}
