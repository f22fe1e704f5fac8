#!/usr/bin/env python3
"""Regenerate the tables and the figure of docs/offload.md.

Runs `railcoll bench COLLECTIVE --overlap --json` (modeled mode on
qsnet2-dual at 4, 8 and 16 processes and on 64 x 16; threads mode on a
small cluster, with the same-run ping-pong ratio), writes the tables between
the `offload:begin` / `offload:end` markers of docs/offload.md and the
figure to docs/figures/offload-overlap.svg.

Usage: python3 docs/gen/offload-figures.py [RAILCOLL]
       (default ./target/release/railcoll; build it with
        cargo build --release -p railcoll-emu)
Takes a few minutes (the 64 x 16 points dominate).
"""
import json
import pathlib
import subprocess
import sys

R = sys.argv[1] if len(sys.argv) > 1 else "./target/release/railcoll"
ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "offload.md"
FIG = ROOT / "docs" / "figures" / "offload-overlap.svg"

# Per collective: the algorithms compared (host-driven, @nic) and the
# native or hardware baseline; sizes (a barrier has none).
SUBJECTS = {
    "allgather": (["ring", "recursive-doubling", "bruck", "smp-direct"], "native", "8,4K"),
    "gather": (["binomial", "smp-tree"], "native", "8,4K"),
    "alltoall": (["pairwise", "bruck"], "native", "8,4K"),
    "bcast": (["binomial", "smp"], "hardware", "8,4K"),
    "barrier": (["rdma", "smp"], "hardware", None),
}
# 64 x 16: the algorithms that run at 1024 ranks (rings and pairwise
# outgrow the counter pool; Direct needs a million puts).
BIG = {
    "allgather": (["recursive-doubling", "bruck", "smp-bruck"], "native", "8"),
    "gather": (["binomial", "smp-tree"], "native", "8"),
    "bcast": (["binomial", "smp"], "hardware", "8"),
    "barrier": (["rdma", "smp"], "hardware", None),
}


def bench(collective, algos, native, sizes, shape, mode="modeled"):
    names = []
    for a in algos:
        names += [a, a + "@nic"] + ([a + "@nic-dma"] if mode == "modeled" else [])
    names.append(native)
    # The SHMEM buffer contract: under MPI's the readiness waits before a
    # chained put are the host's (docs/offload.md, "The buffer contract").
    cmd = [R, "bench", collective, "--overlap", "--json", "--mode", mode,
           "--contract", "shmem", "--algo", ",".join(names)] + shape
    if mode == "modeled":
        cmd += ["--profile", "qsnet2-dual", "--iters", "1"]
    else:
        cmd += ["--iters", "50"]
    if sizes:
        cmd += ["--sizes", sizes]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip().startswith("{")]


def table(collective, algos, native, records, threads=False):
    """Modeled tables carry the `@nic-dma` form too (local copies by the
    NICs' DMA); threads-mode ones host and `@nic` with the ping-pong ratio."""
    by = {(r["algorithm"], r["size"]): r for r in records}
    sizes = sorted({r["size"] for r in records})
    if threads:
        head = ("| algorithm | size | host (us) | `@nic` (us) | `@nic` / host | overlap host | overlap `@nic` |"
                " host / ping-pong | `@nic` / ping-pong |")
        rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    else:
        head = ("| algorithm | size | host (us) | `@nic` (us) | `@nic-dma` (us) | `@nic` / host | `@nic-dma` / host |"
                " overlap host | overlap `@nic` | overlap `@nic-dma` |")
        rule = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    lines = [head, rule]
    for a in algos:
        for s in sizes:
            h, n, d = by.get((a, s)), by.get((a + "@nic", s)), by.get((a + "@nic-dma", s))
            if not h or not n:
                continue
            if threads:
                row = (f"| {a} | {s} | {h['pure_us']:.2f} | {n['pure_us']:.2f} | "
                       f"{n['pure_us'] / h['pure_us']:.2f} | {h['overlap_pct']:.0f} % | {n['overlap_pct']:.0f} % |"
                       f" {h['pingpong_ratio']:.0f} | {n['pingpong_ratio']:.0f} |")
            elif d:
                row = (f"| {a} | {s} | {h['pure_us']:.2f} | {n['pure_us']:.2f} | {d['pure_us']:.2f} | "
                       f"{n['pure_us'] / h['pure_us']:.2f} | {d['pure_us'] / h['pure_us']:.2f} | "
                       f"{h['overlap_pct']:.0f} % | {n['overlap_pct']:.0f} % | {d['overlap_pct']:.0f} % |")
            else:
                continue
            lines.append(row)
    for s in sizes:
        r = by.get((native, s))
        if r:
            if threads:
                row = (f"| {native} (baseline) | {s} | {r['pure_us']:.2f} | - | - | {r['overlap_pct']:.0f} % | - |"
                       f" {r['pingpong_ratio']:.0f} | - |")
            else:
                row = f"| {native} (baseline) | {s} | {r['pure_us']:.2f} | - | - | - | - | {r['overlap_pct']:.0f} % | - | - |"
            lines.append(row)
    return lines


def svg(bars):
    """Grouped bars: overlap % host vs @nic per (collective, algorithm)."""
    w, h, left, top, bottom = 900, 360, 60, 30, 110
    n = len(bars)
    slot = (w - left - 20) / max(n, 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="13">overlap % (OSU), qsnet2-dual modeled, 16 processes (4 x 4), one rail, 8 B blocks: host-driven (grey) vs @nic (blue)</text>']
    plot_h = h - top - bottom
    for pct in (0, 25, 50, 75, 100):
        y = top + plot_h * (1 - pct / 100)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{w - 20}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{pct}</text>')
    for i, (label, host, nic) in enumerate(bars):
        x = left + i * slot
        for j, (v, colour) in enumerate([(host, "#999"), (nic, "#1f6fb4")]):
            bh = plot_h * v / 100
            out.append(f'<rect x="{x + 4 + j * (slot - 8) / 2:.1f}" y="{top + plot_h - bh:.1f}" '
                       f'width="{(slot - 8) / 2:.1f}" height="{bh:.1f}" fill="{colour}"/>')
        out.append(f'<text transform="translate({x + slot / 2:.1f},{top + plot_h + 8}) rotate(60)" '
                   f'text-anchor="start">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    out = []
    procs = [(4, 1), (4, 2), (4, 4)]
    out.append("### Modeled, qsnet2-dual (two rails), 4, 8 and 16 processes\n")
    out.append("Latency is one start-and-wait (`pure`); overlap % as OSU: "
               "100 x (1 - (total - compute) / pure), compute = pure.\n")
    for nodes, rpn in procs:
        shape = ["--nodes", str(nodes), "--ranks-per-node", str(rpn), "--rails", "2", "--sockets", "4"]
        for c, (algos, native, sizes) in SUBJECTS.items():
            recs = bench(c, algos, native, sizes, shape)
            out.append(f"**{c}, {nodes * rpn} processes** ({nodes} x {rpn}, 2 rails)\n")
            out += table(c, algos, native, recs)
            out.append("")
    out.append("### Modeled, qsnet2-dual on one rail, 16 processes\n")
    out.append("The same platform with one rail: every trigger arrives on its put's rail, "
               "so the compiler chains what the algorithm allows.\n")
    bars = []
    shape = ["--nodes", "4", "--ranks-per-node", "4", "--rails", "1", "--sockets", "4"]
    for c, (algos, native, sizes) in SUBJECTS.items():
        recs = bench(c, algos, native, sizes, shape)
        out.append(f"**{c}, 16 processes** (4 x 4, 1 rail)\n")
        out += table(c, algos, native, recs)
        out.append("")
        by = {(r["algorithm"], r["size"]): r for r in recs}
        small = min(r["size"] for r in recs)
        for a in algos:
            if (a, small) in by and (a + "@nic", small) in by:
                bars.append((f"{c} {a}", by[(a, small)]["overlap_pct"], by[(a + "@nic", small)]["overlap_pct"]))
    out.append("### Modeled, qsnet2-dual (two rails), 64 x 16 = 1024 processes\n")
    shape = ["--nodes", "64", "--ranks-per-node", "16", "--rails", "2", "--sockets", "4"]
    for c, (algos, native, sizes) in BIG.items():
        recs = bench(c, algos, native, sizes, shape)
        out.append(f"**{c}, 1024 processes** (64 x 16, 2 rails)\n")
        out += table(c, algos, native, recs)
        out.append("")
    out.append("### Threads mode (this machine's wall time), 4 x 1, one rail\n")
    out.append("Beside each latency, its ratio to a cache-line ping-pong round trip "
               "measured in the same run (`docs/performance.md`); figures of one run.\n")
    shape = ["--nodes", "4", "--ranks-per-node", "1", "--rails", "1"]
    for c in ("allgather", "gather"):
        algos, native, sizes = SUBJECTS[c]
        algos = algos[:2] if c == "allgather" else algos[:1]
        recs = bench(c, algos, native, sizes, shape, mode="threads")
        out.append(f"**{c}, 4 processes, threads mode**\n")
        out += table(c, algos, native, recs, threads=True)
        out.append("")
    body = "\n".join(out)
    text = DOC.read_text()
    begin, end = "<!-- offload:begin -->", "<!-- offload:end -->"
    a = text.index(begin) + len(begin)
    b = text.index(end, a)
    DOC.write_text(text[:a] + "\n" + body + "\n" + text[b:])
    FIG.write_text(svg(bars))
    print(f"wrote {DOC} and {FIG}")


if __name__ == "__main__":
    main()
