#!/usr/bin/env bash
# The figures of docs/performance.md, "Rails between machines": the same
# measurements (tests/src/bin/rank_catalogue/bench.rs) on 2 nodes x 2
# ranks x 2 rails, three ways, back to back in each of RUNS runs (default
# 3): ranks as threads of one process; ranks as processes over one nicd
# (vfio-user); and each node on its own host (a network namespace), the
# rails crossing between the hosts' nicds as UDP datagrams. Rank 0 prints
# each figure with its ratio to the same run's ping-pong or memcpy; then
# the network's own baselines between the two hosts (a datagram's round
# trip, 1 MiB echoed in 8 KiB datagrams, 32 in flight), measured in the same run.
# Needs root (namespaces). Run from the repository:
#   cargo build --profile test -p railcoll-tests --bin rank_catalogue -p railcoll-emu --bin railcoll
#   bash docs/gen/rails-bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
railcoll=$PWD/target/debug/railcoll
rank=$PWD/target/debug/rank_catalogue
for b in "$railcoll" "$rank"; do
    test -x "$b" || { echo "build $b first (see the header)"; exit 1; }
done
source .ci/netns.sh
tag=rb$$
work=$(mktemp -d)
echo_pid=
trap '[ -z "$echo_pid" ] || kill "$echo_pid" 2>/dev/null; netns_down "$tag" 2; rm -rf "$work"' EXIT
netns_up "$tag" 2
netns_fabric 2 > "$work/fabric.toml"
shape=(--nodes 2 --ranks-per-node 2 --rails 2)
for run in $(seq "${RUNS:-3}"); do
    echo "== run $run"
    "$rank" bench threads 2 2 2
    "$railcoll" launch "${shape[@]}" -- "$rank" bench
    ip netns exec "$tag-h1" "$railcoll" launch "${shape[@]}" --fabric "$work/fabric.toml" \
        --host 1 -- "$rank" bench &
    other=$!
    ip netns exec "$tag-h0" env RANK_BENCH_LABEL=udp "$railcoll" launch "${shape[@]}" \
        --fabric "$work/fabric.toml" --host 0 -- env RANK_BENCH_LABEL=udp "$rank" bench
    wait "$other"
    # The network's own baselines between the two hosts, in the same run.
    ip netns exec "$tag-h1" "$rank" bench udp-echo 10.77.0.2:47700 &
    echo_pid=$!
    sleep 0.2
    ip netns exec "$tag-h0" "$rank" bench udp-probe 10.77.0.2:47700
    kill "$echo_pid"; wait "$echo_pid" 2>/dev/null || true
    echo_pid=
done
