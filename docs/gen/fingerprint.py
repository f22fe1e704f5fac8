"""What the generators of docs/gen share: the model fingerprint generated
files carry (FNV-1a, 64 bits, over the bytes of the files they depend on,
in order; emulator/tests/pinned.rs computes the same hash and fails when a
generated file is stale), and writing a generated file or, with --check,
comparing it."""
import difflib
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def fnv1a(files):
    return fnv1a_bytes(b"".join((ROOT / f).read_bytes() for f in files))


def fnv1a_bytes(data):
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def write_or_check(path, new, check):
    """Write `new` to `path`; with `check`, write nothing and exit 1 with a
    unified diff if `path` differs from it."""
    if not check:
        path.write_text(new)
        return
    old = path.read_text()
    if new != old:
        name = str(path.relative_to(ROOT))
        sys.stdout.writelines(difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True),
            name, f"{name} (regenerated)"))
        sys.exit(1)
