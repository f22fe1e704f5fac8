"""The model fingerprint generated files carry: FNV-1a (64 bits) over the
bytes of the files they depend on, in order. emulator/tests/pinned.rs
computes the same hash and fails when a generated file is stale."""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def fnv1a(files):
    h = 0xcbf29ce484222325
    for f in files:
        for byte in (ROOT / f).read_bytes():
            h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"
