"""Damaged store entries are detected, reported and recomputed; the results do not change.

After a complete ``scarce run leml`` (the session's reference run, copied to a fresh
project), seeded damage hits entries of every step (outputs compared by ``rerun``; the wall-clock
tables are left alone): the file cut short, a range of
bytes zeroed, or a few bytes flipped at random offsets. The same command again must
name every damaged entry in a warning (``store entry <ref> is damaged``), run the steps
that wrote them again (not report them cached), and end with the reference run's
outputs, byte for byte; afterwards every entry of the store passes its checksum.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tasks.store import CorruptEntry, Store, read_checked_table
from tests.flows import procs

SEED = 20261129
# entries damaged per step: every step of the flow, the two alternating halves twice
PER_STEP = {
    "leml-load": 2,
    "leml-init": 1,
    "leml-alternate-W": 2,
    "leml-alternate-H": 2,
    "leml-evaluate": 1,
    "leml-collect": 1,
}
KINDS = ("truncate", "zero", "flip")


def damage(path, kind: str, rng: np.random.Generator) -> str:
    """Damage the file in place; returns a description."""
    data = bytearray(path.read_bytes())
    size = len(data)
    if kind == "truncate":
        cut = int(rng.integers(0, size))
        path.write_bytes(bytes(data[:cut]))
        return f"truncated {size} -> {cut} bytes"
    if kind == "zero":
        while True:
            start = int(rng.integers(0, size - 1))
            stop = min(size, start + int(rng.integers(1, 65)))
            if any(data[start:stop]):
                break
        data[start:stop] = bytes(stop - start)
        path.write_bytes(bytes(data))
        return f"zeroed bytes [{start}, {stop}) of {size}"
    offsets = sorted(int(o) for o in rng.choice(size, size=int(rng.integers(1, 5)), replace=False))
    for o in offsets:
        data[o] ^= int(rng.integers(1, 256))
    path.write_bytes(bytes(data))
    return f"flipped bytes at {offsets} of {size}"


@pytest.mark.usefixtures("prefect_server")
def test_damaged_entries_are_detected_and_recomputed(tmp_path_factory):
    ref_project, reference = procs.reference(tmp_path_factory, "leml")
    project = tmp_path_factory.mktemp("leml-damage") / "project"
    shutil.copytree(ref_project, project)
    store = Store(project / "data" / "cache")
    rng = np.random.default_rng(SEED)

    by_step: dict[str, list[str]] = {}
    for o in reference["outputs"]:  # wall-clock tables aside: their bytes are not compared
        if not o["volatile"]:
            by_step.setdefault(o["step"], []).append(o["ref"])
    damaged: dict[str, str] = {}
    n = 0
    for step_name, count in PER_STEP.items():
        for ref in rng.choice(sorted(by_step[step_name]), size=count, replace=False):
            kind = KINDS[n % len(KINDS)]
            damaged[str(ref)] = f"{kind}: {damage(store.path(str(ref)), kind, rng)}"
            n += 1
    # One more, aimed where the checksum inside the file does not look: the leading
    # magic bytes (like Parquet statistics, they do not change what is read), so that
    # the seal of file sha256s (tasks.steps.write_seal) is always exercised.
    magic = str(rng.choice(sorted(set(by_step["leml-alternate-W"]) - set(damaged))))
    path = store.path(magic)
    path.write_bytes(b"XAR1" + path.read_bytes()[4:])
    damaged[magic] = "magic: first byte of the file changed"
    # still readable after the damage: only the seal tells these from the written bytes
    readable = sorted(r for r in damaged if store.verify(r))
    assert magic in readable

    before = set(procs.run_ids(project))
    output = procs.run(project, ["run", "leml"], project / "rerun.log")
    (new,) = set(procs.run_ids(project)) - before
    manifest = procs.manifest(project, new)

    lines = output.splitlines()
    warned = {r for r in damaged if any(f"store entry {r} is damaged" in x for x in lines)}
    recomputed = {o["ref"] for o in manifest["outputs"] if o["ref"] in damaged and not o["cached"]}
    counts = {k: sum(v.startswith(k) for v in damaged.values()) for k in (*KINDS, "magic")}
    print(
        f"\n{len(damaged)} corruptions tried ({counts}), {len(warned)} detected with a "
        f"warning, {len(recomputed)} recomputed; {len(readable)} were still readable "
        "(caught by the seal)"
    )
    for r, what in sorted(damaged.items()):
        print(f"  {r}: {what}")
    assert warned == set(damaged), sorted(set(damaged) - warned)
    assert recomputed == set(damaged)
    assert procs.stable_outputs(manifest) == procs.stable_outputs(reference)
    assert all(store.verify(r) for r in store.refs())


def test_every_single_byte_flip_is_corrupt_or_reads_back_the_same(tmp_path):
    """Flip each byte of a small entry in turn: the checked reader raises CorruptEntry
    (never another exception) or returns exactly the stored table; the second case
    (Parquet statistics, page headers, magic bytes) is what the seal is for."""
    rng = np.random.default_rng(SEED)
    store = Store(tmp_path)
    ref = store.write("t/dense", rng.normal(size=(12, 3)).astype(np.float32))
    path = store.path(ref)
    original = path.read_bytes()
    table = read_checked_table(path)
    corrupt = same = 0
    for i in range(len(original)):
        data = bytearray(original)
        data[i] ^= 0xFF
        path.write_bytes(bytes(data))
        try:
            got = read_checked_table(path)
        except CorruptEntry:
            corrupt += 1
        else:
            assert got.equals(table) and got.schema.metadata == table.schema.metadata, i
            same += 1
    print(f"\n{len(original)} single-byte flips: {corrupt} CorruptEntry, {same} read back intact")
    assert corrupt + same == len(original) and corrupt > same
