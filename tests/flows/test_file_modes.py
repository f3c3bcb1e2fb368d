"""Every file scarce writes has the mode the umask gives, ``0o666 & ~umask``, as a file any
other program writes there: under umask 022 others may read it, under 077 only its owner.

Checked for each writer, on the modes on disk, under several umasks; and on the code: nothing
creates a file with a mode of its own (``tempfile.mkstemp`` makes 0600 whatever the umask).
"""

from __future__ import annotations

import ast
import os
import stat
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scarce.tasks.store import Store
from scarce.tasks.store.atomic import atomic_open, atomic_write_bytes, atomic_write_parquet
from scarce.tasks.store.encoding import encode
from tests.flows.helpers import package_sources, scan_finds
from tests.sources import nodes

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("algorithms", "tasks", "flows", "bench")
KEY = "0123456789abcdef" * 2
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16

WRITERS: dict[str, Callable[[Path, pytest.MonkeyPatch], list[Path]]] = {}


def writer(fn):
    WRITERS[fn.__name__.replace("_", "-")] = fn
    return fn


@writer
def store_entries(tmp, monkeypatch):
    store = Store(tmp / "store")
    store.write(f"t/{KEY}", np.arange(3.0))
    store.write(f"t/{KEY}-table", pd.DataFrame({"a": [1, 2]}))
    return [store.path(f"t/{KEY}"), store.path(f"t/{KEY}-table")]


@writer
def entries_and_seal_written_behind(tmp, monkeypatch):
    store = Store(tmp / "store")
    seal = store.prefect_dir / f"{KEY}.sha256.json"
    store.write_later([(f"t/{KEY}-W", np.ones((2, 2)))], seal, lambda d: b"{}")
    store.flush()
    return [store.path(f"t/{KEY}-W"), seal]


@writer
def a_seal(tmp, monkeypatch):
    store = Store(tmp / "store")
    seal = store.prefect_dir / f"{KEY}.sha256.json"
    store.write_file(seal, b"{}")
    return [seal]


@writer
def prefect_records(tmp, monkeypatch):
    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultStore
    from prefect.serializers import JSONSerializer

    store = Store(tmp / "store")
    ResultStore(result_storage=LocalFileSystem(basepath=str(store.prefect_dir)),
                serializer=JSONSerializer()).write(f"t/{KEY}", key=KEY)
    return [store.prefect_dir / KEY]


@writer
def a_lease_and_gc_lock(tmp, monkeypatch):
    store = Store(tmp / "store")
    lease = store.lease("run-1")
    with lease.hold([f"t/{KEY}"]):  # the shared gc lock
        pass
    files = [lease.path, lease.refs_path, store.lease_dir / "gc.lock"]
    assert all(p.is_file() for p in files)
    modes = [p.stat() for p in files]
    lease.release()
    return [(p, m) for p, m in zip(files, modes, strict=True)]


def _record(tmp: Path):
    """A run's record with a named store entry, a file output and a plot."""
    from scarce.flows.run_record import RunRecord

    store = Store(tmp / "store")
    ref = store.write(f"t/{KEY}", np.arange(4.0))
    record = RunRecord("run-1", "digits", store)
    record.name_output("model/x.parquet", ref)
    record.write_output("rules.txt", "a rule\n")
    return record


def _write_folder(record, folder: Path) -> list[Path]:
    from scarce.flows.config import FlowConfig
    from scarce.flows.runtime import RunOptions

    record.write_folder(folder, config=FlowConfig(), options=RunOptions(),
                        metrics=pd.DataFrame({"metric": ["a"], "value": [1.0]}),
                        plots={"curve": PNG}, plot_refs={}, headline={}, run={})
    return [p for p in folder.rglob("*") if p.is_file()]


@writer
def a_run_folder(tmp, monkeypatch):
    """metrics.parquet, plots/, outputs/ (store entries linked, files written), manifest."""
    files = _write_folder(_record(tmp), tmp / "runs" / "run-1")
    assert {p.name for p in files} >= {"metrics.parquet", "curve.png", "x.parquet",
                                       "rules.txt", "manifest.json"}
    return files


@writer
def run_outputs_copied_across_file_systems(tmp, monkeypatch):
    def no_link(*args, **kwargs):
        raise OSError(18, "Invalid cross-device link")

    record = _record(tmp)
    monkeypatch.setattr(os, "link", no_link)
    files = _write_folder(record, tmp / "runs" / "run-1")
    return [p for p in files if p.name == "x.parquet"]


@writer
def a_manifest(tmp, monkeypatch):
    from scarce.flows import manifest as mf

    return [mf.write_manifest(tmp / "run", {"run_id": "run-1"})]


@writer
def runs_output(tmp, monkeypatch):
    from scarce.flows.commands import runs

    frame = pd.DataFrame({"run_id": ["a"], "flow": ["digits"], "seconds": [1.0]})
    out = []
    for fmt in runs.FORMATS:
        out.append(tmp / f"runs.{fmt}")
        runs.write(frame, str(out[-1]), fmt)
    return out


@writer
def apply_output(tmp, monkeypatch):
    from scarce.flows.apply import export

    store = Store(tmp / "store")
    ref = store.write(f"t/{KEY}", pd.DataFrame({"doc": ["d1"], "label": [3]}))
    export(store, [ref], ["in.txt"], tmp / "out.parquet", tmp / "run")
    export(store, [ref], ["in.txt"], tmp / "out.csv", tmp / "run")
    export(store, [ref, ref], ["a/one.txt", "a/two.txt"], tmp / "folder", tmp / "run")
    return [tmp / "out.parquet", tmp / "out.csv", *sorted((tmp / "folder").iterdir())]


@writer
def init_files(tmp, monkeypatch):
    from scarce.flows.init_project import init_project

    return init_project(tmp / "project")


@writer
def the_atomic_writes(tmp, monkeypatch):
    """What every other writer goes through (``scarce bench``'s table, StRip's CoNLL-U)."""
    atomic_write_bytes(tmp / "a.txt", b"a")
    atomic_write_parquet(tmp / "b.parquet", encode(np.zeros(2)))
    with atomic_open(tmp / "c.bin") as fh:
        fh.write(b"c")
    return [tmp / "a.txt", tmp / "b.parquet", tmp / "c.bin"]


@pytest.fixture(params=[0o022, 0o077, 0o002, 0o000], ids=lambda m: f"umask-{m:03o}")
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_every_file_scarce_writes_has_the_mode_the_umask_gives(name, umask, tmp_path,
                                                                monkeypatch):
    written = WRITERS[name](tmp_path, monkeypatch)
    assert written
    for item in written:
        path, st = item if isinstance(item, tuple) else (item, item.stat())
        assert stat.S_IMODE(st.st_mode) == 0o666 & ~umask, (
            f"{path}: {stat.S_IMODE(st.st_mode):o}, not {0o666 & ~umask:o}")


# -- on the code: no file created with a mode of its own -------------------------------------
OWN_MODE = {"mkstemp", "NamedTemporaryFile", "TemporaryFile", "SpooledTemporaryFile", "chmod",
            "fchmod", "lchmod"}


def _violations(path: Path) -> list[str]:
    """Calls in ``path`` that give a file a mode other than the umask's: the temporary-file
    helpers that create 0600, a chmod, an ``os.open`` creating with a mode other than 0o666."""
    out = []
    for node in nodes(path):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        where = f"{path.name}:{node.lineno}"
        if name in OWN_MODE:
            out.append(f"{where}: {name}")
        elif name == "open" and isinstance(func, ast.Attribute) and (
                getattr(func.value, "id", None) == "os") and len(node.args) >= 2:
            creates = "O_CREAT" in ast.unparse(node.args[1])
            mode = node.args[2] if len(node.args) > 2 else next(
                (k.value for k in node.keywords if k.arg == "mode"), None)
            if creates and not (isinstance(mode, ast.Constant) and mode.value == 0o666):
                given = ("0o777 (default)" if mode is None else oct(mode.value)
                         if isinstance(mode, ast.Constant) else ast.unparse(mode))
                out.append(f"{where}: os.open creating with mode {given}")
    return out


def test_no_file_is_created_with_a_mode_of_its_own():
    assert [v for p in package_sources() for v in _violations(p)] == []


def test_the_mode_scan_finds_what_it_forbids(tmp_path):
    assert scan_finds(_violations, (
        "import os, tempfile\n"
        "fd, name = tempfile.mkstemp()\n"
        "fd = os.open('x', os.O_RDWR | os.O_CREAT, 0o644)\n"
        "fd = os.open('y', os.O_WRONLY | os.O_CREAT)\n"
        "fd = os.open('z', os.O_RDWR | os.O_CREAT, 0o666)\n"  # allowed
        "fd = os.open('w', os.O_RDONLY)\n"  # allowed: creates nothing
        "os.chmod('x', 0o600)\n"
        "f = tempfile.NamedTemporaryFile()\n"
    ), tmp_path) == [
        "mkstemp", "os.open creating with mode 0o644", "os.open creating with mode 0o777 (default)",
        "chmod", "NamedTemporaryFile"]
