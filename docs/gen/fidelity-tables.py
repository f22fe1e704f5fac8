#!/usr/bin/env python3
"""Print the qsnet2-dual tables of docs/fidelity.md from `railcoll sweep --json`.

Usage: python3 docs/gen/fidelity-tables.py [RAILCOLL...]  (default ./target/release/railcoll)
"""
import json, subprocess, sys
R = sys.argv[1:] or ["./target/release/railcoll"]
cols = {
  "gather": ["binomial","direct","smp-tree","smp-direct","native"],
  "allgather": ["direct","exchange","bruck","smp-gather-tree","smp-direct","smp-bruck","ml-shm-rd","native"],
  "alltoall": ["direct","bruck","pairwise","native"],
}
out = []
for c in ["gather","allgather","alltoall"]:
    doc = json.loads(subprocess.check_output(R + ["sweep", c, "--scaling", "--sizes", "4,256,1K,2K,4K,8K,32K,64K", "--json", "-q"]))
    for sw in doc["sweeps"]:
        out.append(f"**{c}, {sw['procs']} processes** ({sw['nodes']} nodes x {sw['ranks_per_node']})\n")
        out.append("| size | " + " | ".join(cols[c]) + " | best | best / native |")
        out.append("|---:|" + "---:|"*len(cols[c]) + "---|---:|")
        for p in sw["points"]:
            lat = {r["algorithm"]: r["latency_us"] for r in p["results"]}
            cells = [f"{lat[a]:.1f}" if a in lat else "-" for a in cols[c]]
            out.append(f"| {p['size']} | " + " | ".join(cells) + f" | {p['best']} | {p['speedup']:.2f} |")
        out.append("")
print("\n".join(out))
