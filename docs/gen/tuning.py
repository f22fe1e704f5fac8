#!/usr/bin/env python3
"""Regenerate the library's built-in tuning table, host/tuning/default.toml,
from the model.

The table is what `railcoll tune` measures on [QA08]'s platform (the
qsnet2-4x4 preset under qsnet2-dual: 4 nodes x 1, 2 and 4 ranks, 2 rails,
every collective, every host-driven algorithm, 4 B to 1 MiB), followed by
the fallback rules of host/tuning/fallback.toml ([QA08]'s cut-offs) for
every other shape. The file records the fingerprint of the model it was
made from (the pinned runs, the profile, the fallback rules);
emulator/tests/pinned.rs fails when they change and the table was not
regenerated.

Usage: python3 docs/gen/tuning.py [--check] [RAILCOLL]
       (default ./target/release/railcoll; build it with
        cargo build --release -p railcoll-emu)
--check writes nothing: it prints a unified diff and exits 1 if the
regenerated table would differ from the one on disk (CI runs it).
"""
import pathlib
import subprocess
import sys

from fingerprint import ROOT, fnv1a, fnv1a_bytes, write_or_check

TABLE = ROOT / "host" / "tuning" / "default.toml"
FINGERPRINTED = ["emulator/tests/pinned/modeled.tsv", "emulator/profiles/qsnet2-dual.toml",
                 "host/tuning/fallback.toml", "docs/gen/tuning.py",
                 "emulator/src/workbench/tune.rs"]


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    if len(args) > 1 or any(a.startswith("-") for a in args):
        sys.exit(__doc__)
    railcoll = args[0] if args else str(ROOT / "target" / "release" / "railcoll")
    # The papers' algorithms as published (no readiness messages, the
    # SHMEM buffer contract): the table the library has always shipped.
    # A table per contract is a follow-up (docs/performance.md).
    command = ["tune", "all", "--scaling", "--builtin", "--sizes", "4..1M",
               "--contract", "shmem"]
    tmp = TABLE.with_name(".default.toml.partial")
    subprocess.run([railcoll] + command + ["-o", str(tmp), "-q"], check=True,
                   stdout=subprocess.DEVNULL)
    body = tmp.read_text()
    tmp.unlink()
    header = (
        "# railcoll's built-in tuning table, derived from the model: the best\n"
        "# algorithm per size that `railcoll " + " ".join(command) + "`\n"
        "# measures on [QA08]'s platform under qsnet2-dual, then [QA08]'s cut-offs\n"
        "# (host/tuning/fallback.toml) for every other shape. Regenerate with\n"
        "#   cargo build --release -p railcoll-emu && python3 docs/gen/tuning.py\n"
        f"# Model fingerprint `{fnv1a(FINGERPRINTED)}` (FNV-1a over "
        + ", ".join(FINGERPRINTED) + ").\n"
    )
    # `railcoll tune` starts its file with one comment line of its own.
    body = "".join(l for l in body.splitlines(keepends=True) if not l.startswith("#"))
    # CI checks the fingerprint and this hash (emulator/tests/pinned.rs)
    # instead of regenerating the table (two minutes of its fifteen): a
    # stale table or a hand-edited rule fails there.
    header += (f"# Rules hash `{fnv1a_bytes(body.encode())}` (FNV-1a over the rules below, "
               "checked by emulator/tests/pinned.rs).\n")
    write_or_check(TABLE, header + body, check)


if __name__ == "__main__":
    main()
