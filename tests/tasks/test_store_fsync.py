"""What a write costs in fsyncs, and what a crash at any moment of it leaves.

Every file is fsync-ed before its rename; a group of writes (a step's entries, a run folder's
files, a folder of outputs) fsyncs each folder it changed once, after its last rename, rather
than once per file; what declares a group complete (a step's seal, a run folder's final name)
is written after that, so that no crash keeps it without what it names.

The truth the counts are held to is the disk: the names a writer made (the tree before and
after) and the folders they are in.  The crash model is the one POSIX gives: a file's bytes
last once the file is fsync-ed, a name made in a folder (a rename, a link, a new folder) once
that folder is fsync-ed after it.
"""

from __future__ import annotations

import ast
import os
import stat
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scarce.tasks.steps import execute, step
from scarce.tasks.store import Store
from scarce.tasks.store.atomic import TEMP_NAME
from scarce.tasks.store.seals import seal_path
from tests.flows.helpers import package_sources, scan_finds
from tests.sources import parsed

ROOT = Path(__file__).resolve().parents[2]
KEY = "0123456789abcdef" * 2
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16


class Journal:
    """The calls that decide what lasts a crash, in order, as the process made them:
    ``("data", inode, path)`` a file's fsync, ``("folder", inode, path)`` a folder's,
    ``("link", folder inode, name, inode)`` a name made (``os.replace``, ``os.rename``,
    ``os.link``, ``os.mkdir``).  Other threads' calls (the background writer's) included."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple] = []
        real = {n: getattr(os, n) for n in ("fsync", "replace", "rename", "link", "mkdir")}

        def fsync(fd):
            st = os.fstat(fd)
            kind = "folder" if stat.S_ISDIR(st.st_mode) else "data"
            self.events.append((kind, st.st_ino, os.readlink(f"/proc/self/fd/{fd}")))
            return real["fsync"](fd)

        def naming(name):
            def call(src, dst, *args, **kwargs):
                out = real[name](src, dst, *args, **kwargs)
                self._made(dst)
                return out
            return call

        def mkdir(path, *args, **kwargs):
            out = real["mkdir"](path, *args, **kwargs)
            self._made(path)
            return out

        monkeypatch.setattr(os, "fsync", fsync)
        for name in ("replace", "rename", "link"):
            monkeypatch.setattr(os, name, naming(name))
        monkeypatch.setattr(os, "mkdir", mkdir)

    def _made(self, path) -> None:
        path = Path(os.path.abspath(os.fsdecode(path)))
        self.events.append(("link", path.parent.stat().st_ino, path.name, path.lstat().st_ino))

    # -- counts ------------------------------------------------------------------------------
    def files_synced(self) -> Counter:
        """Each file fsync-ed, by its final path (a temporary's name undone), and how often."""
        out: Counter = Counter()
        for path in (e[2] for e in self.events if e[0] == "data"):
            p = Path(path)
            while (m := TEMP_NAME.fullmatch(p.name)) is not None:
                p = p.with_name(m["name"])
            out[p] += 1
        return out

    def folders_synced(self) -> Counter:
        return Counter(Path(e[2]) for e in self.events if e[0] == "folder")

    def inodes_synced(self, kind: str) -> Counter:
        """Each file (``"data"``) or folder (``"folder"``) fsync-ed, by inode (what a rename
        keeps), and how often."""
        return Counter(e[1] for e in self.events if e[0] == kind)

    # -- what a crash after the first k events keeps ------------------------------------------
    def lasting(self, k: int) -> tuple[dict[tuple[int, str], int], set[int]]:
        """The names made in the first ``k`` events that a crash right after them keeps (folder
        inode, name -> inode: made, then its folder fsync-ed), and the inodes whose bytes
        last (fsync-ed)."""
        names: dict[tuple[int, str], int] = {}
        events = self.events[:k]
        for i, event in enumerate(events):
            if event[0] == "link" and any(e[0] == "folder" and e[1] == event[1]
                                          for e in events[i + 1:]):
                names[(event[1], event[2])] = event[3]
        return names, {e[1] for e in events if e[0] == "data"}


def tree(root: Path) -> dict[tuple[int, str], int]:
    """(folder inode, name) -> inode of everything below ``root``: what exists before a
    writer starts, and so lasts whatever happens to the writer."""
    out = {}
    for folder, dirs, files in os.walk(root):
        ino = os.stat(folder).st_ino
        for name in dirs + files:
            out[(ino, name)] = os.lstat(os.path.join(folder, name)).st_ino
    return out


def resolve(path: Path, base: Path, names: dict, before: dict) -> int | None:
    """The inode ``path`` (below ``base``, which lasts) names after the crash, else None."""
    ino = base.stat().st_ino
    for part in path.relative_to(base).parts:
        key = (ino, part)
        if key in names:
            ino = names[key]
        elif key in before:
            ino = before[key]
        else:
            return None
    return ino


def assert_never_declared_without_its_files(journal: Journal, base: Path, before: dict,
                                            declaring: Path, named: list[Path]) -> int:
    """After a crash at every moment of ``journal``: when ``declaring`` (a seal, a run folder's
    final name) names what it names at the end, every path of ``named`` does too, with its
    bytes; returns how many moments declared it."""
    final = {p: p.lstat().st_ino for p in [declaring, *named]}
    existed = set(before.values())  # a hard link's bytes lasted before the writer began
    declared = 0
    for k in range(len(journal.events) + 1):
        names, data = journal.lasting(k)
        if resolve(declaring, base, names, before) != final[declaring]:
            continue
        declared += 1
        for p in named:
            assert resolve(p, base, names, before) == final[p], (
                f"a crash after event {k} keeps {declaring.name} without {p}")
            assert final[p] in data or final[p] in existed or p.is_dir(), (
                f"a crash after event {k} keeps {declaring.name} and the name {p} without "
                "its bytes")
    return declared


# -- a step's checkpoint ----------------------------------------------------------------------
def _w_step(a: int) -> dict:  # the shape of LEML's W-step: a factor and its timings
    return {"W": np.full((5, 3), float(a), np.float32),
            "timings": pd.DataFrame({"seconds": [0.5]})}


def _h_step(a: int) -> dict:  # the H-step's: a factor, the iteration's trace, timings
    return {"H": np.full((4, 3), float(a), np.float32),
            "trace": pd.DataFrame({"objective": [1.0 / (a + 1)]}),
            "timings": pd.DataFrame({"seconds": [0.25]})}


W_STEP = step("t-w", outputs=("W",), volatile=("timings",), write_behind=True)(_w_step)
H_STEP = step("t-h", outputs=("H", "trace"), volatile=("timings",), write_behind=True)(_h_step)
STEPS = {"w-step": W_STEP, "h-step": H_STEP}
WRITES = ("in-place", "behind")


def _checkpoint(st, store: Store, a: int, write: str) -> tuple[str, dict[str, str]]:
    """Run the step on ``a`` and write its outputs as ``write`` says; its key and refs."""
    call = {"a": a}
    refs = execute(st, store, call, write_behind=write == "behind")
    store.flush()
    return st.key(call), refs


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("name", sorted(STEPS))
def test_a_checkpoint_fsyncs_each_file_once_and_each_folder_once(tmp_path, monkeypatch, name,
                                                                 write):
    """Hand-counted: the W-step writes W, its timings and its seal (3 files), the H-step H,
    trace, timings and its seal (4); each writes in two folders, its task folder (its
    entries, one fsync for all) and ``_prefect`` (the seal): 5 and 6 fsyncs, 11 an
    iteration, where a folder fsync per file would make 6 and 8."""
    st = STEPS[name]
    store = Store(tmp_path / "store")
    _checkpoint(st, store, 0, write)  # the folders exist, as after a run's first iteration
    journal = Journal(monkeypatch)
    key, refs = _checkpoint(st, store, 1, write)
    files = {"w-step": 3, "h-step": 4}[name]
    expected_files = Counter({store.path(r): 1 for r in refs.values()}
                             | {seal_path(store, key): 1})
    assert journal.files_synced() == expected_files
    task_folder = store.root / st.name
    assert journal.folders_synced() == Counter({task_folder: 1, store.prefect_dir: 1})
    assert len(journal.files_synced()) == files
    assert sum(1 for e in journal.events if e[0] in ("data", "folder")) == files + 2


@pytest.mark.parametrize("write", WRITES)
def test_the_first_checkpoint_also_fsyncs_the_folders_it_created_in_theirs(tmp_path,
                                                                           monkeypatch, write):
    """A fresh store: the store's folder is made in ``tmp_path``, the task folder and
    ``_prefect`` in the store's; each parent is fsync-ed once for the entries' group (the
    store's parent, the store), once more for ``_prefect`` made by the seal's own write."""
    store = Store(tmp_path / "store")
    journal = Journal(monkeypatch)
    key, refs = _checkpoint(W_STEP, store, 1, write)
    assert journal.files_synced() == Counter(
        {store.path(refs["W"]): 1, store.path(refs["timings"]): 1, seal_path(store, key): 1})
    assert journal.folders_synced() == Counter(
        {tmp_path: 1, store.root: 2, store.root / W_STEP.name: 1, store.prefect_dir: 1})


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("fresh", [True, False], ids=["fresh-store", "folders-there"])
@pytest.mark.parametrize("name", sorted(STEPS))
def test_no_crash_keeps_a_seal_without_the_entries_it_names(tmp_path, monkeypatch, name,
                                                            write, fresh):
    st = STEPS[name]
    store = Store(tmp_path / "store")
    if not fresh:
        _checkpoint(st, store, 0, write)
    before = tree(tmp_path)
    journal = Journal(monkeypatch)
    key, refs = _checkpoint(st, store, 1, write)
    entries = [store.path(r) for r in refs.values()]
    # the moments that keep the seal: from its folder's fsync on, the last event
    declared = assert_never_declared_without_its_files(
        journal, tmp_path, before, seal_path(store, key), entries)
    assert declared == 1


class Crash(BaseException):
    """The process dying at that call (not an error any code catches)."""


@pytest.mark.parametrize("lost", [0, 1, 3], ids=["entries-kept", "one-lost", "all-lost"])
@pytest.mark.parametrize("write", WRITES)
def test_a_crash_before_the_entries_folder_is_fsynced_leaves_no_seal_and_a_rerun_completes(
        tmp_path, monkeypatch, write, lost):
    """The process dies at the fsync of the entries' folder, after their renames: no seal is
    written.  Whether the machine then keeps the unsynced names (``entries-kept``) or loses
    some or all of them, the cache check (with Prefect's record there, which nothing
    orders) either reads every entry whole or finds the step not done; the step run again
    writes the bytes an uninterrupted run writes."""
    st = H_STEP
    store = Store(tmp_path / "store")
    _checkpoint(st, store, 0, write)
    call = {"a": 1}
    key = st.key(call)
    real_fsync = os.fsync

    def dying(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode) and os.readlink(f"/proc/self/fd/{fd}") == str(
                store.root / st.name):
            raise Crash
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", dying)
    with pytest.raises(Crash):
        _checkpoint(st, store, 1, write)
    monkeypatch.setattr(os, "fsync", real_fsync)
    from scarce.tasks.store import background

    refs = st.refs(key)
    for name in [*refs.values(), str(seal_path(store, key))]:  # died with the process
        background.forget(store.root, name)
    assert not seal_path(store, key).exists()
    for ref in list(refs.values())[:lost]:
        store.path(ref).unlink()
    store.prefect_dir.joinpath(key).write_text("{}")  # Prefect's record, written regardless
    hit = st.clean_hit(store, call)
    assert set(st.damaged(store, key)) == set(list(refs.values())[:lost])
    assert hit == (None if lost else refs)
    execute(st, store, call, write_behind=False)  # the resumed run computes it again
    clean = Store(tmp_path / "clean")
    execute(st, clean, call, write_behind=False)
    for ref in refs.values():
        if not st.is_volatile(ref):
            assert store.path(ref).read_bytes() == clean.path(ref).read_bytes()
    assert seal_path(store, key).read_bytes() == seal_path(clean, key).read_bytes()
    assert st.clean_hit(store, call) == refs


# -- every writer of several files, and every single one ----------------------------------------
#: name -> a function that prepares what the writer needs below a folder (a store entry to
#: link, a folder to write into) and returns the write itself.
WRITERS: dict[str, Callable[[Path], Callable[[], object]]] = {}


def writer(fn):
    WRITERS[fn.__name__.replace("_", "-")] = fn
    return fn


@writer
def a_store_entry(tmp):
    return lambda: Store(tmp / "store").write(f"t/{KEY}", np.arange(3.0))


@writer
def a_seal(tmp):
    store = Store(tmp / "store")
    return lambda: store.write_file(seal_path(store, KEY), b"{}")


@writer
def entries_of_two_tasks_at_once(tmp):
    return lambda: Store(tmp / "store").write_all([
        (f"t/{KEY}-a", np.arange(3.0)), (f"t/{KEY}-b", pd.DataFrame({"x": [1]})),
        (f"u/{KEY}", np.zeros(2))])


def _record(tmp: Path):
    from scarce.flows.run_record import RunRecord

    store = Store(tmp / "store")
    ref = store.write(f"t/{KEY}", np.arange(4.0))
    record = RunRecord("run-1", "digits", store)
    record.name_output("model/x.parquet", ref)
    record.write_output("rules.txt", "a rule\n")
    record.write_output("predicted/a.conllu", "# a\n")
    record.write_output("predicted/b.conllu", "# b\n")
    (tmp / "runs").mkdir()
    return record


def _folder_args() -> dict:
    from scarce.flows.config import FlowConfig
    from scarce.flows.runtime import RunOptions

    return {"config": FlowConfig(), "options": RunOptions(),
            "metrics": pd.DataFrame({"metric": ["a"], "value": [1.0]}),
            "plots": {"curve": PNG, "other": PNG}, "plot_refs": {}, "headline": {}, "run": {}}


@writer
def a_run_folder(tmp):
    """metrics.parquet, plots/, outputs/ (a store entry linked, files written), manifest,
    under a hidden name, then renamed."""
    record = _record(tmp)
    return lambda: record.publish(tmp / "runs" / "run-1", **_folder_args())


@writer
def a_run_folder_copied_across_file_systems(tmp):
    record = _record(tmp)

    def publish():
        def no_link(*args, **kwargs):
            raise OSError(18, "Invalid cross-device link")

        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(os, "link", no_link)
            record.publish(tmp / "runs" / "run-1", **_folder_args())

    return publish


@writer
def a_manifest(tmp):
    from scarce.flows import manifest as mf

    return lambda: mf.write_manifest(tmp / "run", {"run_id": "run-1"})


@writer
def a_file_restored_by_rerun(tmp):
    from scarce.flows.run_record import link_or_copy

    (tmp / "fresh.txt").write_bytes(b"x")
    (tmp / "run").mkdir()
    return lambda: link_or_copy(tmp / "fresh.txt", tmp / "run" / "restored.txt")


@writer
def apply_outputs(tmp):
    from scarce.flows.apply import export

    store = Store(tmp / "store")
    ref = store.write(f"t/{KEY}", pd.DataFrame({"doc": ["d1"], "label": [3]}))

    for command in ("file", "folder"):  # one command each: a folder of its own
        (tmp / command).mkdir()

    def write():
        export(store, [ref], ["in.txt"], tmp / "file" / "new" / "out.parquet", tmp / "run")
        export(store, [ref, ref, ref], ["a/one.txt", "a/two.txt", "a/three.txt"],
               tmp / "folder" / "new" / "deeper", tmp / "run")

    return write


@writer
def apply_strip_outputs(tmp):
    from scarce.flows.apply_strip import write_outputs

    return lambda: write_outputs([tmp / "out" / "a.conllu", tmp / "out" / "b.conllu",
                                  tmp / "out" / "sub" / "c.conllu"], ["# a\n", "# b\n", "# c\n"])


@writer
def init_files(tmp):
    from scarce.flows.init_project import init_project

    return lambda: init_project(tmp / "project")


@writer
def runs_tables(tmp):
    from scarce.flows.commands import runs

    frame = pd.DataFrame({"run_id": ["a"], "flow": ["digits"], "seconds": [1.0]})
    for fmt in runs.FORMATS:  # one command each: a folder of its own
        (tmp / fmt).mkdir()
    return lambda: [runs.write(frame, str(tmp / fmt / f"runs.{fmt}"), fmt)
                    for fmt in runs.FORMATS]


@writer
def bench_peer_split(tmp):
    import scipy.sparse as sp

    from scarce.bench.leml_peers import write_split

    (tmp / "split").mkdir()
    m = sp.random(4, 3, density=0.5, format="csr", random_state=0)
    return lambda: write_split(tmp / "split", m, m, m)


@writer
def bench_cluster_parts(tmp):
    from scarce.bench.leml_cluster import write_parts

    return lambda: write_parts(tmp / "parts", 10, 200, 100, 3, seed=1, stream=0)


@writer
def bench_partition_entry(tmp):
    from scarce.bench.leml_partition import write_matrix

    return lambda: write_matrix(tmp / "x.parquet", 10, 20, 3, 0)


@pytest.mark.parametrize("name", ["a-run-folder", "a-run-folder-copied-across-file-systems"])
def test_no_crash_keeps_a_run_folder_under_its_name_without_its_files(tmp_path, monkeypatch,
                                                                      name):
    write = WRITERS[name](tmp_path)
    before = tree(tmp_path)
    journal = Journal(monkeypatch)
    write()
    monkeypatch.undo()
    run_dir = tmp_path / "runs" / "run-1"
    files = sorted(run_dir.rglob("*"))
    assert {p.name for p in files} >= {"metrics.parquet", "curve.png", "x.parquet", "rules.txt",
                                       "a.conllu", "manifest.json", "outputs", "plots"}
    assert assert_never_declared_without_its_files(journal, tmp_path, before, run_dir,
                                                   files) == 1


def _names(root: Path) -> dict[Path, int]:
    return {p: p.lstat().st_ino for p in root.rglob("*")}


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_every_writer_fsyncs_each_file_it_writes_once_and_each_folder_it_changes_once(
        tmp_path, monkeypatch, name):
    """The disk says what was written: every new name (or a name given a new file) is in a
    folder that is fsync-ed once, and every new regular file was fsync-ed once before its
    rename (but a hard link of a file already written: a run's outputs from the store)."""
    write = WRITERS[name](tmp_path)
    before = _names(tmp_path)
    journal = Journal(monkeypatch)
    write()
    monkeypatch.undo()
    after = _names(tmp_path)
    changed = {p for p, ino in after.items() if before.get(p) != ino}
    assert changed, "the writer wrote nothing"
    hard_links = {p for p in changed if p.is_file() and p.stat().st_nlink > 1}
    written = {p for p in changed if p.is_file()} - hard_links
    assert journal.inodes_synced("data") == Counter({p.stat().st_ino: 1 for p in written}), (
        sorted(journal.files_synced().items()), sorted(written))
    folders = {p.parent for p in changed}
    assert journal.inodes_synced("folder") == Counter({p.stat().st_ino: 1 for p in folders}), (
        sorted(journal.folders_synced().items()), sorted(folders))


# -- on the code: a write in a loop belongs to a group ------------------------------------------
#: The calls that write one file and take a group of folder fsyncs (``syncs``).
HELPERS = {"atomic_write_bytes": 2, "atomic_write_parquet": 2, "atomic_open": 1,
           "link_or_copy": 2, "write_manifest": 2, "_write_entry": 2}


def _calls_in_loops(tree: ast.AST):
    """(call, inside a loop or comprehension of its function) for every call of a helper."""
    def visit(node, looped):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            looped = False
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in HELPERS:
                yield node, name, looped
        inner = looped or isinstance(node, ast.For | ast.While | ast.comprehension
                                     | ast.ListComp | ast.DictComp | ast.SetComp
                                     | ast.GeneratorExp)
        for child in ast.iter_child_nodes(node):
            yield from visit(child, inner)

    yield from visit(tree, False)


def _passes_syncs(call: ast.Call, name: str) -> bool:
    return len(call.args) > HELPERS[name] or any(k.arg == "syncs" for k in call.keywords)


def _ungrouped_in_loops(path: Path) -> list[str]:
    return [f"{path.name}:{call.lineno}: {name}"
            for call, name, looped in _calls_in_loops(parsed(path))
            if looped and not _passes_syncs(call, name)]


def test_no_file_is_written_in_a_loop_with_a_folder_fsync_of_its_own():
    assert [v for p in package_sources() for v in _ungrouped_in_loops(p)] == []


def test_the_loop_scan_finds_what_it_forbids(tmp_path):
    assert scan_finds(_ungrouped_in_loops, (
        "def f(paths, syncs):\n"
        "    for p in paths:\n"
        "        atomic_write_bytes(p, b'x')\n"
        "    [atomic_write_parquet(p, t) for p in paths]\n"
        "    for p in paths:\n"
        "        atomic_write_bytes(p, b'x', syncs)\n"  # allowed: in a group
        "        link_or_copy(p, p, syncs=syncs)\n"  # allowed
        "    atomic_write_bytes(paths[0], b'x')\n"  # allowed: one file
        "    for p in paths:\n"
        "        def one():\n"
        "            atomic_write_bytes(p, b'x')\n"  # allowed: its own function's one file
        "    while paths:\n"
        "        with atomic_open(paths.pop()) as fh:\n"
        "            fh.write(b'x')\n"
    ), tmp_path) == [
        "atomic_write_bytes", "atomic_write_parquet", "atomic_open"]
