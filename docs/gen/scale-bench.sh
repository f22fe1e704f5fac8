#!/usr/bin/env bash
# Modeled mode at scale: wall time and peak memory of one all-gather per
# algorithm and data mode (docs/performance.md, "Modeled mode: emulator
# speed and scale"). Every run of an algorithm must give the same virtual
# latency and trace hash whatever its data mode, or the script fails.
#
#   docs/gen/scale-bench.sh [NODES RANKS_PER_NODE SIZE ALGOS MODES]
#
# Defaults: 64 nodes x 16 ranks (1024), 4 KiB blocks, recursive-doubling,
# smp-bruck and bruck, data full, none and sample=4; one rail, `hockney`.
# GNU time measures each run's wall time and peak resident memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
nodes=${1:-64}
rpn=${2:-16}
size=${3:-4K}
algos=${4:-recursive-doubling,smp-bruck,bruck}
modes=${5:-full,none,sample=4}
command -v /usr/bin/time > /dev/null || { echo "scale-bench: needs GNU time (/usr/bin/time)" >&2; exit 1; }
cargo build --release -q -p railcoll-emu --bin railcoll
bin=target/release/railcoll
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '| algorithm | --data | virtual latency (us) | trace hash | events | wall (s) | peak memory (MiB) |\n'
printf '|---|---|---:|---|---:|---:|---:|\n'
for algo in ${algos//,/ }; do
    want=""
    for data in ${modes//,/ }; do
        /usr/bin/time -f '%e %M' -o "$out/time" "$bin" bench allgather --mode modeled \
            --nodes "$nodes" --ranks-per-node "$rpn" --rails 1 --profile hockney \
            --algo "$algo" --sizes "$size" --iters 1 --rounds 1 --data "$data" --json \
            > "$out/json" 2> "$out/err" || { cat "$out/err" >&2; exit 1; }
        read -r wall kib < "$out/time"
        line=$(python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][0]
print("%.3f %s %s" % (r["latency_us"], r["trace_hash"], r["events"]))' "$out/json")
        read -r latency hash events <<< "$line"
        if [ -z "$want" ]; then
            want="$latency $hash"
        elif [ "$want" != "$latency $hash" ]; then
            echo "scale-bench: $algo with --data $data gave $latency $hash, not $want" >&2
            exit 1
        fi
        printf '| %s | %s | %s | `%s` | %s | %s | %s |\n' "$algo" "$data" "$latency" "$hash" \
            "$events" "$wall" "$((kib / 1024))"
    done
done
