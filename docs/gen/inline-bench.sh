#!/usr/bin/env bash
# The figures of docs/performance.md, "Waiting ranks run the NICs (issue
# 30)": threads mode with waiting ranks running the NICs (the default)
# beside the same binary with `--no-inline-nic` (all NIC work on the
# workers), interleaved in each of RUNS runs (default 6): an 8-byte and a
# 1 MiB put (2 x 1, 2 rails), the barriers on 2 x 1, 2 x 2 and 4 x 1, and
# the 4 KiB all-gathers on 4 x 1. Prints, per figure, the median latency
# of each setting, the median and range over runs of the per-run ratio
# (inline / workers only), and the inline latency's ratio to the same
# run's cache-line ping-pong. Every collective's receive buffers are
# checked (a result the benchmark could not verify stops the script);
# the put benchmark checks nothing. Run from the repository:
#   cargo build --release -p railcoll-emu --bin railcoll
#   bash docs/gen/inline-bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
railcoll=${RAILCOLL:-$PWD/target/release/railcoll}
test -x "$railcoll" || { echo "build $railcoll first (see the header)" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for run in $(seq "${RUNS:-6}"); do
    # The order alternates between runs, so that neither setting always
    # follows the other's heaviest benchmark.
    order="inline workers"
    [ $((run % 2)) = 0 ] && order="workers inline"
    for setting in $order; do
        flag=()
        [ "$setting" = workers ] && flag=(--no-inline-nic)
        tag() { sed "s/^{/{\"run\":$run,\"setting\":\"$setting\",\"bench\":\"$1\",/"; }
        "$railcoll" bench put --sizes 8,1M --rounds 5 --json "${flag[@]}" | tag put >> "$out"
        for shape in "2 1" "2 2" "4 1"; do
            set -- $shape
            "$railcoll" bench barrier --nodes "$1" --ranks-per-node "$2" --rounds 3 --json \
                "${flag[@]}" | tag "barrier ${1}x$2" >> "$out"
        done
        "$railcoll" bench allgather --nodes 4 --ranks-per-node 1 --sizes 4K --rounds 3 --json \
            "${flag[@]}" | tag "allgather 4x1" >> "$out"
    done
done
python3 - "$out" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def key(r):
    if "algorithm" in r:
        return (r["bench"], f"{r['algorithm']}, {r['size']} B")
    return (r["bench"], f"{r['size']} B, {r['rails']} rail(s)")
by = {}
for r in rows:
    if r["bench"] != "put" and not r.get("verified", True):
        sys.exit(f"unverified result: {r}")
    if not isinstance(r.get("latency_us"), (int, float)):
        sys.exit(f"no latency: {r}")
    by.setdefault(key(r), {}).setdefault(r["run"], {})[r["setting"]] = r
print("| figure | inline us | workers only us | inline / workers: median (range) | inline / ping-pong |")
print("|---|---:|---:|---:|---:|")
for k, runs in by.items():
    pairs = [v for v in runs.values() if "inline" in v and "workers" in v]
    if not pairs:
        continue
    inl = statistics.median(p["inline"]["latency_us"] for p in pairs)
    wrk = statistics.median(p["workers"]["latency_us"] for p in pairs)
    ratios = [p["inline"]["latency_us"] / p["workers"]["latency_us"] for p in pairs]
    pp = statistics.median(p["inline"]["pingpong_ratio"] for p in pairs)
    print(f"| {k[0]}: {k[1]} | {inl:.2f} | {wrk:.2f} | "
          f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | {pp:.0f}x |")
EOF
