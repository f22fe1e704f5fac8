#!/usr/bin/env bash
# railcoll's modeled mode beside SimGrid SMPI, in one run on one machine.
#
#   docs/gen/smpi-bench.sh [NODES RANKS_PER_NODE SIZE PAIRS]
#   docs/gen/smpi-bench.sh latency [NODES SIZES PAIRS]
#
# The first form compares the cost of simulating: wall time and peak
# memory of one all-gather per algorithm, each simulator moving all of its
# data (docs/performance.md, "Beside SimGrid SMPI"). Defaults: 64 nodes x
# 16 ranks (1024), 4 KiB blocks, and the pairs recursive-doubling:rdb,
# bruck:bruck, ring:ring, smp-bruck:smp_simple (railcoll's algorithm, then
# SMPI's `smpi/allgather` selector; SMPI has no SMP-aware Bruck,
# `smp_simple` is its SMP-aware all-gather closest to it). The simulated
# latencies are printed for context only: with several ranks per node the
# two models differ (SMPI shares a host's link among its cores as a fluid,
# railcoll serialises packets on the NIC's ports and models the node's
# shared-memory phase).
#
# The second form compares what is simulated, where the two models should
# agree: one rank per node (default 16 nodes), no contention, blocks of
# SIZES (default 8,4K,64K), pairs recursive-doubling:rdb, ring:ring,
# bruck:bruck; railcoll under the SHMEM buffer contract (no readiness
# messages, as the papers' formulas and SMPI's eager sends); the slowest
# rank's latency from each, and their ratio (docs/fidelity.md).
#
# Both run railcoll on one rail under `hockney` (t_s = 1.6 us, 900 MB/s)
# and SMPI's CM02 model (no latency or bandwidth correction factors), with
# TCP cross-traffic off (railcoll's acks take no link time), on a cluster
# of NODES hosts of RANKS_PER_NODE cores whose private links carry
# 900 MB/s and 0.8 us each (a message crosses two: 1.6 us).
#
# SMPI comes from the distribution (Debian's `simgrid` package, 3.32 on
# bookworm), installed by this script when `smpirun` is missing; it is a
# benchmark dependency only, never a test one. Each run of the first form
# is stopped after TIMEOUT seconds (default 600) or when its processes
# pass CAP_GB GiB of resident memory together (default 12), and the table
# says so (the second form's runs are small). In both, a run that
# delivers a wrong byte is shown as such and fails the script at the end.
# SIZE is one size (8, 4K, 64k, 1M, 1G); SIZES a list of them.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=wall
if [ "${1:-}" = latency ]; then
    mode=latency
    shift
    nodes=${1:-16}
    rpn=1
    sizes=${2:-8,4K,64K}
    pairs=${3:-recursive-doubling:rdb,ring:ring,bruck:bruck}
else
    nodes=${1:-64}
    rpn=${2:-16}
    sizes=${3:-4K}
    pairs=${4:-recursive-doubling:rdb,bruck:bruck,ring:ring,smp-bruck:smp_simple}
    case $sizes in
        *,* | *..*) echo "smpi-bench: one size, not $sizes" >&2; exit 2 ;;
    esac
fi
timeout_s=${TIMEOUT:-600}
cap_gb=${CAP_GB:-12}
command -v /usr/bin/time > /dev/null || { echo "smpi-bench: needs GNU time (/usr/bin/time)" >&2; exit 1; }
if ! command -v smpirun > /dev/null; then
    echo "smpi-bench: installing SimGrid (Debian package simgrid)" >&2
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo=sudo; fi
    $sudo apt-get update -q > /dev/null
    $sudo apt-get install -y --no-install-recommends simgrid libsimgrid-dev > /dev/null
fi
command -v smpicc > /dev/null || { echo "smpi-bench: smpicc missing after installing simgrid" >&2; exit 1; }
# bytes SIZE: a size such as 8, 4K, 64k, 1M or 1G in bytes (fails on
# anything else: call it as an assignment of its own, so that set -e sees).
bytes() {
    python3 -c '
import sys
s = sys.argv[1]
m = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
u = s[-1:].lower()
n = int(s[:-1]) * m[u] if u in m else int(s)
assert n > 0
print(n)' "$1" 2> /dev/null || { echo "smpi-bench: not a size: $1" >&2; return 1; }
}
ranks=$((nodes * rpn))
cargo build --release -q -p railcoll-emu --bin railcoll
bin=target/release/railcoll
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
smpicc -O2 -o "$out/allgather" docs/gen/smpi/allgather.c 2> "$out/cc.err" || { cat "$out/cc.err" >&2; exit 1; }
cat > "$out/platform.xml" <<EOF
<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <cluster id="c" prefix="node-" radical="0-$((nodes - 1))" suffix="" speed="1Gf" core="$rpn"
           bw="900MBps" lat="0.8us" loopback_bw="100000GBps" loopback_lat="0"/>
</platform>
EOF
for ((n = 0; n < nodes; n++)); do echo "node-$n:$rpn"; done > "$out/hosts"

# run NAME CMD...: wall seconds and peak MiB into $out/NAME.time, or a
# reason (timeout, memory cap, refused) into $out/NAME.why.
run() {
    local name=$1
    shift
    rm -f "$out/$name.why"
    # The shell reports a run the watchdog kills ("Killed") on its own
    # stderr: the table says so instead.
    exec 3>&2 2> /dev/null
    # A session (and process group) of its own, whose id is the pid: the
    # watchdog below sums and stops everything the run starts (smpirun
    # forks the simulation); `ps -g` selects by that session id.
    setsid timeout "$timeout_s" /usr/bin/time -f '%e %M' -o "$out/$name.time" "$@" \
        > "$out/$name.out" 2> "$out/$name.err" 3>&- &
    local pid=$! capped=""
    while kill -0 "$pid" 2> /dev/null; do
        local rss
        # The run may end between the test above and this line: then ps
        # finds nothing, which is no error.
        rss=$( { ps -o rss= -g "$pid" 2> /dev/null || true; } | awk '{ s += $1 } END { print s + 0 }')
        if [ "$rss" -gt $((cap_gb * 1024 * 1024)) ]; then
            capped=1
            kill -KILL -- "-$pid" 2> /dev/null || true
        fi
        sleep 1
    done
    set +e
    wait "$pid" 2> /dev/null
    local rc=$?
    set -e
    exec 2>&3 3>&-
    if [ -n "$capped" ]; then
        echo "passed ${cap_gb} GiB" > "$out/$name.why"
    elif [ $rc = 124 ]; then
        echo "stopped at ${timeout_s} s" > "$out/$name.why"
    elif [ $rc != 0 ]; then
        grep -m1 -i -E 'error|refus|needs' "$out/$name.err" \
            | sed -E 's/^.*(is not valid here|error): //; s/; the communicator.*//' \
            | cut -c1-120 > "$out/$name.why" || true
        [ -s "$out/$name.why" ] || echo "failed (exit $rc)" > "$out/$name.why"
    fi
}

wrong=""
smpi_cfg=(--cfg=network/model:CM02 --cfg=network/crosstraffic:0
    --cfg=smpi/simulate-computation:no --log=root.thres:critical)

wrong=""
if [ $mode = latency ]; then
    printf '| algorithm (railcoll / SMPI) | block | SMPI latency (us) | railcoll latency (us) | railcoll / SMPI |\n'
    printf '|---|---:|---:|---:|---:|\n'
    for pair in ${pairs//,/ }; do
        ours=${pair%%:*}
        theirs=${pair##*:}
        for size in ${sizes//,/ }; do
            b=$(bytes "$size")
            # A failed run, or a wrong byte (the program prints "bad 1" and
            # its rank 0 exits non-zero), leaves a cell that says so.
            theirs_us=$( { smpirun -np "$ranks" -platform "$out/platform.xml" -hostfile "$out/hosts" \
                --cfg=smpi/allgather:"$theirs" "${smpi_cfg[@]}" "$out/allgather" "$b" || true; } \
                | awk '/^latency_us/ { if ($4 != 0) print "WRONG"; else print $2; seen = 1 }
                       END { if (!seen) print "FAILED" }')
            ours_us=$( { "$bin" bench allgather --mode modeled --nodes "$nodes" --ranks-per-node 1 \
                --rails 1 --profile hockney --contract shmem --algo "$ours" --sizes "$size" \
                --iters 1 --rounds 1 --json 2> /dev/null || true; } \
                | python3 -c '
import json, sys
r = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print("FAILED" if not r else "%.3f" % r[0]["latency_max_us"] if r[0]["verified"] else "WRONG")')
            ratio=-
            case "$theirs_us $ours_us" in
                *WRONG* | *FAILED*) wrong=1 ;;
                *) ratio=$(python3 -c 'import sys; print("%.4f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$ours_us" "$theirs_us") ;;
            esac
            printf '| %s / %s | %s | %s | %s | %s |\n' "$ours" "$theirs" "$size" "$theirs_us" "$ours_us" "$ratio"
        done
    done
    if [ -n "$wrong" ]; then
        echo "smpi-bench: a run failed or delivered wrong data (the rows that say so)" >&2
        exit 1
    fi
    exit 0
fi

printf '| algorithm (railcoll / SMPI) | railcoll wall (s) | railcoll peak (MiB) | railcoll latency (us) | SMPI wall (s) | SMPI peak (MiB) | SMPI latency (us) | wall ratio railcoll / SMPI |\n'
printf '|---|---:|---:|---:|---:|---:|---:|---:|\n'
block=$(bytes "$sizes")
for pair in ${pairs//,/ }; do
    ours=${pair%%:*}
    theirs=${pair##*:}
    run smpi smpirun -np "$ranks" -platform "$out/platform.xml" -hostfile "$out/hosts" \
        --cfg=smpi/allgather:"$theirs" "${smpi_cfg[@]}" "$out/allgather" "$block"
    run ours "$bin" bench allgather --mode modeled --nodes "$nodes" --ranks-per-node "$rpn" \
        --rails 1 --profile hockney --algo "$ours" --sizes "$sizes" --iters 1 --rounds 1 \
        --data full --json
    row="| $ours / $theirs"
    for who in ours smpi; do
        if [ -e "$out/$who.why" ]; then
            row="$row | $(cat "$out/$who.why") | - | -"
            continue
        fi
        read -r wall kib < "$out/$who.time"
        if [ $who = ours ]; then
            latency=$(python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][0]
print("%.1f" % r["latency_max_us"] if r["verified"] else "WRONG RESULT")' "$out/ours.out")
            ours_wall=$wall
        else
            # The program checks every received byte: "bad 1" on a wrong one.
            latency=$(awk '/^latency_us/ { if ($4 != 0) print "WRONG RESULT"; else printf "%.1f", $2 }' "$out/smpi.out")
            smpi_wall=$wall
        fi
        case $latency in
            WRONG*) wrong=1 ;;
        esac
        row="$row | $wall | $((kib / 1024)) | $latency"
    done
    if [ ! -e "$out/ours.why" ] && [ ! -e "$out/smpi.why" ]; then
        row="$row | $(python3 -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "$ours_wall" "$smpi_wall") |"
    else
        row="$row | - |"
    fi
    echo "$row"
done
if [ -n "$wrong" ]; then
    echo "smpi-bench: a run delivered wrong data (the rows that say so)" >&2
    exit 1
fi
