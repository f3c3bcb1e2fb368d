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

from scarce.tasks.store import Store
from scarce.tasks.store.encoding import CorruptEntry, read_checked_table
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
    # the seal of file sha256s (tasks.store.seals.write_seal) is always exercised.
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


@pytest.mark.usefixtures("prefect_server")
def test_folders_and_files_in_the_way_are_damage_recomputed_like_any(tmp_path, monkeypatch):
    """A folder in place of an entry, of a step's seal or of Prefect's record, and a file in
    place of a step's folder: the next run names each as damaged, runs those steps again and
    ends with the same outputs (the write removes what stood in the way); ``cache gc`` leaves a
    folder in an entry's place alone (scarce did not write it) and names it."""
    import contextlib
    import io

    from scarce.flows.cli import main
    from scarce.tasks.store.seals import seal_path
    from tests.flows.helpers import manifest, runs
    from tests.flows.test_bad_inputs import Case, make_project

    project = tmp_path / "project"
    make_project(project, Case("", "leml", ""))
    # a test set of its own, so that no entry of the test set is one of the training set's
    (project / "good" / "test.txt").write_text("3 4 3\n0 0:1.0 1:0.5\n1 1:1.0\n2 2:1.0 3:0.25\n")
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    for var in ("SCARCE_STORE", "SCARCE_RUNS", "SCARCE_MEMORY_LIMIT_GB"):
        monkeypatch.delenv(var, raising=False)
    quiet = contextlib.redirect_stdout(io.StringIO())
    with quiet:
        assert main(["run", "leml"]) == 0
    (first,) = runs(project)
    reference = manifest(project, first)
    store = Store(project / "data" / "cache")
    by_step: dict[str, list[str]] = {}
    for o in reference["outputs"]:
        by_step.setdefault(o["step"], []).append(o["ref"])

    def key_of(ref: str) -> str:
        return ref.split("/", 1)[1][:32]

    key = {step: key_of(refs[0]) for step, refs in by_step.items()}

    damaged: set[str] = set()
    for step in ("leml-load", "leml-init", "leml-alternate-W"):  # an entry: a folder
        ref = sorted(by_step[step])[-1]
        path = store.path(ref)
        path.unlink()
        (path / "nested").mkdir(parents=True)
        (path / "nested" / "part-0.parquet").write_bytes(b"PAR1")
        damaged.update(r for r in by_step[step] if key_of(r) == key_of(ref))  # its call's
    seal = seal_path(store, key["leml-evaluate"])  # a seal: a folder
    seal.unlink()
    seal.mkdir()
    damaged.update(by_step["leml-evaluate"])
    record = store.prefect_dir / key["leml-alternate-H"]  # Prefect's record: a folder
    record.unlink()
    record.mkdir()
    damaged.update(by_step["leml-alternate-H"])
    folder = store.root / "leml-predict"  # a step's folder: a file
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()
    folder.write_bytes(b"not a folder")
    damaged.update(by_step["leml-predict"])

    with quiet:
        assert main(["run", "leml"]) == 0
    (second,) = set(runs(project)) - {first}
    again = manifest(project, second)
    recomputed = {o["ref"] for o in again["outputs"] if not o["cached"]}
    assert damaged <= recomputed, sorted(damaged - recomputed)
    assert procs.stable_outputs(again) == procs.stable_outputs(reference)
    assert all(store.verify(r) for r in store.refs())
    assert seal.is_file() and record.is_file() and folder.is_dir()

    # a folder in an entry's place that no step of a run stands for: scarce did not write it,
    # and gc leaves it (named)
    stray = store.path(f"leml-load/{'0' * 32}")
    (stray / "x").mkdir(parents=True)
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        assert main(["cache", "gc"]) == 0
    assert stray.is_dir() and f"leml-load/{'0' * 32}.parquet/  (a folder)" in said.getvalue()
