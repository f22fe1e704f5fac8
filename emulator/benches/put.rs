//! `cargo bench -p railcoll-emu`: the decoders and the emulated put path,
//! each group with a baseline in the same run (a 64-byte copy for the
//! decoders, memcpy of the same size for puts), so that the ratio is what
//! to read: the machine's speed drifts between runs.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use railcoll_emu::{Cluster, ClusterConfig};
use railcoll_fw::abi::command::{Command, DmaCommand, DmaKind};
use railcoll_fw::abi::event::EventId;
use railcoll_fw::abi::packet::{DataPacket, Packet, Route};
use railcoll_host::RailPolicy;
use std::hint::black_box;

fn decoders(c: &mut Criterion) {
    let mut g = c.benchmark_group("decode");
    let block = Command::Dma(DmaCommand {
        kind: DmaKind::Put,
        len: 4096,
        vp: 3,
        src_addr: 0x1000,
        dst_addr: 0x2000,
        src_event: Some(EventId(1)),
        dst_event: Some(EventId(2)),
        wake: false,
    })
    .emit(7);
    let header = Packet::Data(DataPacket {
        route: Route {
            src_node: 0,
            src_ctx: 0,
            dst_node: 1,
            dst_ctx: 0,
            job_key: 9,
        },
        seq: 5,
        addr: 0x2000,
        len: 2048,
        event: 2,
        cookie: 7,
        last: true,
        get_response: false,
        dma_addr: 0x2000,
        dma_len: 2048,
        wake: false,
        queue: false,
        retry: false,
        flow: 1,
    })
    .emit();
    let raw = block.to_bytes();
    g.bench_function("baseline_copy_64B", |b| {
        b.iter(|| black_box(black_box(raw)))
    });
    g.bench_function("command_parse", |b| {
        b.iter(|| Command::parse(black_box(&block), 512))
    });
    g.bench_function("packet_parse", |b| {
        b.iter(|| Packet::parse(black_box(&header)))
    });
    g.finish();
}

fn puts(c: &mut Criterion) {
    let cluster = Cluster::new(ClusterConfig {
        arena_size: 4 << 20,
        ..ClusterConfig::default()
    })
    .expect("cluster");
    let mut g = c.benchmark_group("put");
    g.sample_size(20);
    for size in [8usize, 64 << 10, 1 << 20] {
        g.throughput(Throughput::Bytes(size as u64));
        let src = vec![1u8; size];
        let mut dst = vec![0u8; size];
        g.bench_with_input(BenchmarkId::new("baseline_memcpy", size), &size, |b, _| {
            b.iter(|| dst.copy_from_slice(black_box(&src)))
        });
        for (name, policy) in [
            ("rail0", RailPolicy::Rail(0)),
            ("striped", RailPolicy::Stripe { threshold: 0 }),
        ] {
            g.bench_with_input(BenchmarkId::new(name, size), &size, |b, &size| {
                b.iter_custom(|iters| {
                    let times = cluster.run(|comm| {
                        let s = comm.alloc(size).expect("alloc");
                        let d = comm.alloc(size).expect("alloc");
                        if comm.rank() != 0 {
                            return std::time::Duration::ZERO;
                        }
                        let opts = railcoll_host::TransferOptions {
                            policy: Some(policy),
                            dest_event: None,
                            wake: false,
                        };
                        let start = std::time::Instant::now();
                        for _ in 0..iters {
                            comm.endpoint()
                                .put_with(&s, 1, &d, opts)
                                .expect("put")
                                .wait()
                                .expect("complete");
                        }
                        start.elapsed()
                    });
                    times
                        .into_iter()
                        .next()
                        .and_then(Result::ok)
                        .unwrap_or_default()
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, decoders, puts);
criterion_main!(benches);
