"""``scarce cache gc`` keeps what runs use: the plots their manifests show, the Prefect records
of the entries it keeps, and everything a running run has used or written; it deletes only what
scarce wrote, wherever the store's root is."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prefect import flow

import tests.flows.sample_flow as sample
from scarce.flows.cli import main, referenced_refs
from scarce.flows.runtime import RunContext, RunOptions
from scarce.tasks.store import Store
from scarce.tasks.store.layout import SEAL_SUFFIX
from tests.flows import procs
from tests.flows.helpers import digits_project, made_runs, manifest, runs


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = digits_project(tmp_path / "project", n_samples=200, k=6)
    monkeypatch.setenv("SCARCE_ROOT", str(root))
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    return root


def cli(capsys, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


@pytest.mark.usefixtures("prefect_server")
def test_gc_keeps_the_plots_of_existing_runs_and_says_what_it_frees(project, capsys):
    cli(capsys, "run", "digits")
    (run_id,) = runs(project)
    plot = manifest(project, run_id)["plots"][0]
    assert plot["ref"].startswith("plots/")
    store = Store(project / "data" / "cache")
    assert store.exists(plot["ref"])

    out = cli(capsys, "cache", "gc", "--dry-run")
    assert "would remove 0 entries (0.0 MB)" in out

    # Without the run folder nothing refers to the entries: all of them would go, the plot too.
    (project / "data" / "runs" / run_id / "manifest.json").unlink()
    out = cli(capsys, "cache", "gc", "--dry-run")
    total = sum(store.size(r) for r in store.refs())
    assert f"would remove {len(store.refs())} entries ({total / 1e6:.1f} MB)" in out
    assert plot["ref"] in out

    # scarce recognises every file a real run wrote: none is foreign, and gc removes them all,
    # with every Prefect record and seal
    assert store.scan().foreign == [] and "did not write" not in out
    n = len(store.refs())
    records = {p.name for p in store.prefect_dir.iterdir()}
    assert records and {r for r in records if not r.endswith(".sha256.json")} == {
        r.removesuffix(".sha256.json") for r in records if r.endswith(".sha256.json")}
    out = cli(capsys, "cache", "gc")
    assert f"removed {n} entries" in out and "did not write" not in out
    assert store.refs() == [] and list(store.prefect_dir.iterdir()) == []


@pytest.mark.usefixtures("prefect_server")
def test_gc_leaves_the_records_of_the_entries_it_keeps(project, capsys):
    cli(capsys, "run", "digits")
    store = Store(project / "data" / "cache")
    orphan = "plots/" + "0" * 32
    store.write(orphan, pd.DataFrame({"png": [b"not a plot"]}))
    out = cli(capsys, "cache", "gc")
    assert "removed 1 entries" in out and orphan in out
    assert not store.exists(orphan)

    with made_runs(project) as made:
        cli(capsys, "run", "digits")
    (second,) = (manifest(project, r) for r in made)
    assert second["cache_hits"] == ["digits-cluster", "digits-evaluate", "digits-load"]
    assert all(o["cached"] for o in second["outputs"])


@pytest.mark.usefixtures("prefect_server")
def test_gc_in_the_middle_of_a_run_keeps_what_the_run_uses(project, tmp_path):
    """gc between two steps: the first step's entries (written by the run, or taken from the
    cache of an earlier run that no manifest names any more) survive, and the run finishes."""
    config = sample.DigitsConfig(data=str(project / "digits.csv"), n_samples=200, k=6)
    store_root, runs_root = project / "data" / "cache", project / "data" / "runs"
    reports = []

    @flow(name="digits-gc")
    def with_gc_midway(run_id: str) -> dict:
        ctx = RunContext.open("digits", config,
                              RunOptions(store=str(store_root), runs=str(runs_root),
                                         run_id=run_id))
        data = ctx.run(sample.load, path=config.data, n_samples=config.n_samples,
                       seed=config.seed)
        # what `scarce cache gc` does, while this run is live
        reports.append(Store(store_root).gc(referenced_refs(runs_root)))
        labels = ctx.run(sample.cluster, data=data, k=config.k, n_init=config.n_init,
                         seed=config.seed)
        return ctx.finish(ctx.run(sample.evaluate, data=data, labels=labels))

    first = with_gc_midway("first")
    assert reports[0].live_runs == ["first"] and reports[0].removed == []
    assert reports[0].kept_for_live_runs == 2  # the X and y just written

    # An earlier run's entries that no manifest names: the second run takes `load` from
    # them; gc keeps those and removes the rest (cluster, evaluate), which the run recomputes.
    (runs_root / "first" / "manifest.json").unlink()
    for path in store_root.rglob("*.parquet"):  # written an hour ago
        st = path.stat()
        os.utime(path, (st.st_atime - 3600, st.st_mtime - 3600))
    second = with_gc_midway("second")
    load_refs = {o["ref"] for o in first["manifest"]["outputs"] if o["step"] == "digits-load"}
    assert set(reports[1].removed) == {
        o["ref"] for o in first["manifest"]["outputs"] if o["step"] != "digits-load"}
    hits = {o["ref"] for o in second["manifest"]["outputs"] if o["cached"]}
    assert hits == load_refs
    assert procs.stable_outputs(second["manifest"]) == procs.stable_outputs(first["manifest"])
    assert not list((store_root / "_leases").glob("*.lease"))  # released at the end


@pytest.mark.usefixtures("prefect_server")
def test_gc_beside_a_running_scarce_run_spares_it(tmp_path_factory):
    """The reported case, frozen in place: `scarce run leml` stopped (SIGSTOP) after
    its second alternating iteration, `scarce cache gc` run to the end beside it, then the
    run continued: it finishes with the uninterrupted run's outputs."""
    project = procs.make_project(tmp_path_factory.mktemp("leml-gc"), "leml")
    store_root = project / "data" / "cache"
    child = procs.start(project, ["run", "leml"], project / "run.log")

    def midway() -> bool:
        done_w = [p for p in procs.entries(store_root, "leml-alternate-W") if p.stem.endswith("-W")]
        return len(done_w) >= 2 and not procs.entries(store_root, "leml-evaluate")

    reached = procs.wait_until(child, midway)
    assert reached, child.output()[-3000:]
    os.killpg(child.proc.pid, signal.SIGSTOP)
    try:
        before = set(Store(store_root).refs())
        out = procs.run(project, ["cache", "gc"], project / "gc.log")
    finally:
        os.killpg(child.proc.pid, signal.SIGCONT)
    assert "running run(s)" in out, out
    assert child.wait(600) == 0, child.output()[-4000:]
    assert before <= set(Store(store_root).refs())  # nothing the run had was removed
    _, reference = procs.reference(tmp_path_factory, "leml")
    assert procs.stable_outputs(procs.only_manifest(project)) == procs.stable_outputs(reference)


# -- gc deletes only what scarce wrote --------------------------------------------------------
# The store's root set to a data folder or to the project: gc once deleted the user's
# data/tables/user.parquet and data/user.parquet (any *.parquet one level below the root).

LAYOUTS = {"data-folder": "data", "project-root": "."}  # the store's root in the project
REPORTED_FILES = {  # the user's files of the reported case, reported relative to the store's root
    "data-folder": ["tables/user.parquet", "user.parquet"],
    "project-root": ["configs/digits.yaml", "data/tables/", "data/user.parquet", "digits.csv"],
}
TMP = "1234abcd"  # the random part of a temporary's name


@dataclass
class Placed:
    """A copy of a real store, for a placement to put the user's files in."""

    top: Path  # holds the project and the user's folder outside it
    root: Path  # the store's root
    mine: Path  # a folder of the user's outside the store
    keys: dict[str, str]  # step -> key of its call
    own: set[str]  # scarce's files (relative to ``top``): what gc removes

    def entry(self, step: str, part: str = "") -> Path:
        return self.root / step / f"{self.keys[step]}{'-' + part if part else ''}.parquet"

    def record(self, step: str, seal: bool = False) -> Path:
        return self.root / "_prefect" / f"{self.keys[step]}{SEAL_SUFFIX if seal else ''}"

    def replace(self, path: Path) -> None:
        """``path``, one of scarce's files, is about to become the user's."""
        self.own.discard(str(path.relative_to(self.top)))
        path.unlink()


def user_parquet(path: Path, **metadata: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"a": [1, 2]})
    pq.write_table(table.replace_schema_metadata(metadata or None), path)


FOREIGN: dict[str, Callable[[Placed], list[str]]] = {}  # placement -> the paths it reports


def placement(fn: Callable[[Placed], list[str]]) -> Callable[[Placed], list[str]]:
    FOREIGN[fn.__name__.replace("_", "-")] = fn
    return fn


@placement
def only_the_reported_files(s: Placed) -> list[str]:
    return []


@placement
def a_user_parquet_in_a_task_folder(s: Placed) -> list[str]:
    user_parquet(s.root / "digits-load" / "user.parquet")
    return ["digits-load/user.parquet"]


@placement
def entry_names_without_scarce_metadata(s: Placed) -> list[str]:
    user_parquet(s.root / "digits-load" / f"{'a' * 32}.parquet")
    user_parquet(s.root / "digits-load" / f"{'a' * 32}-X.parquet")
    # some of an entry's keys, not all of them
    user_parquet(s.root / "digits-cluster" / f"{'b' * 32}.parquet",
                 **{"scarce.kind": b"dense", "scarce.format_version": b"1"})
    return [f"digits-cluster/{'b' * 32}.parquet", f"digits-load/{'a' * 32}-X.parquet",
            f"digits-load/{'a' * 32}.parquet"]


@placement
def an_entry_name_on_a_file_that_is_not_parquet(s: Placed) -> list[str]:
    (s.root / "digits-load" / f"{'c' * 32}.parquet").write_text("a note of the user's\n")
    return [f"digits-load/{'c' * 32}.parquet"]


@placement
def a_damaged_entry(s: Placed) -> list[str]:
    """Truncated: scarce cannot show it wrote it (its step writes it again when it runs)."""
    path = s.entry("digits-load", "X")
    data = path.read_bytes()
    s.replace(path)
    path.write_bytes(data[: len(data) // 2])
    return [str(path.relative_to(s.root))]


@placement
def files_of_other_kinds_in_a_task_folder(s: Placed) -> list[str]:
    (s.root / "digits-cluster" / "notes.txt").write_text("mine\n")
    os.mkfifo(s.root / "digits-cluster" / "pipe")
    return ["digits-cluster/notes.txt", "digits-cluster/pipe"]


@placement
def folders_in_a_task_folder(s: Placed) -> list[str]:
    user_parquet(s.root / "digits-load" / "sub" / "user.parquet")
    folder = s.root / "digits-load" / f"{'d' * 32}.parquet"  # named as an entry
    folder.mkdir()
    shutil.copy(s.entry("digits-cluster"), folder / f"{s.keys['digits-cluster']}.parquet")
    return [f"digits-load/{'d' * 32}.parquet/", "digits-load/sub/"]


@placement
def symbolic_links_to_the_users_files(s: Placed) -> list[str]:
    """To a copy of an entry the user keeps (scarce's format, outside the store)."""
    kept = s.mine / "kept.parquet"
    shutil.copy(s.entry("digits-cluster"), kept)
    (s.root / "digits-load" / f"{'e' * 32}.parquet").symlink_to(kept)
    copies = s.mine / "copies"
    copies.mkdir()
    shutil.copy(s.entry("digits-cluster"), copies / s.entry("digits-cluster").name)
    (s.root / "digits-copies").symlink_to(copies)  # a task folder's place
    return ["digits-copies", f"digits-load/{'e' * 32}.parquet"]


@placement
def temporary_looking_files_that_are_not_scarces(s: Placed) -> list[str]:
    names = ["digits-load/.user.parquet.abcd1234.tmp", "digits-load/.notes.tmp",
             f"digits-load/.{s.entry('digits-load', 'y').name}.tmp",  # no random part
             "_prefect/.notes.json.abcd1234.tmp"]
    for name in names:
        (s.root / name).write_text("the user's\n")
    link = f"digits-load/.{s.entry('digits-load', 'y').name}.abcd9999.tmp"
    (s.root / link).symlink_to(s.mine / "nowhere")
    return sorted([*names, link])


@placement
def records_of_removed_steps_that_are_not_records(s: Placed) -> list[str]:
    """Named as the record and seal of a removed step: a user's file, another step's record,
    a folder, a link to a copy of the real record."""
    out = []
    another = s.record("digits-cluster").read_bytes()
    for step, seal, content in (("digits-load", False, b'{"mine": true}'),
                                ("digits-load", True, b'{"notes": "mine"}'),
                                ("digits-evaluate", False, another)):
        path = s.record(step, seal)
        s.replace(path)
        path.write_bytes(content)
        out.append(str(path.relative_to(s.root)))
    path = s.record("digits-cluster")
    (s.mine / "record.json").write_bytes(path.read_bytes())
    s.replace(path)
    path.symlink_to(s.mine / "record.json")
    seal = s.record("digits-cluster", seal=True)
    s.replace(seal)
    (seal / "x").mkdir(parents=True)
    return sorted([*out, str(path.relative_to(s.root)), f"{seal.relative_to(s.root)}/"])


@placement
def the_users_files_in_scarces_folders(s: Placed) -> list[str]:
    (s.root / "_prefect" / "notes.json").write_text("{}")
    (s.root / "_leases").mkdir()
    (s.root / "_leases" / "notes.txt").write_text("mine\n")
    (s.root / "_leases" / "mine.lease").write_text("not a lease of scarce's\n")
    return ["_leases/mine.lease", "_leases/notes.txt", "_prefect/notes.json"]


@placement
def the_users_files_at_the_root(s: Placed) -> list[str]:
    (s.root / ".git").mkdir()
    (s.root / ".git" / "config").write_text("[core]\n")
    user_parquet(s.root / "_mine" / f"{s.keys['digits-cluster']}.parquet")
    (s.root / "plots").write_text("a file where a task folder would be\n")
    return [".git/", "_mine/", "plots"]


def _tree(top: Path) -> dict[str, tuple]:
    """Every path under ``top`` (links not followed): its kind and content."""
    out: dict[str, tuple] = {}
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(top))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("folder",)
            elif path.is_file():
                out[rel] = ("file", path.read_bytes(), path.stat().st_mode)
            else:
                out[rel] = ("other", path.stat().st_mode)
    return out


def real_store(top: Path, where: str) -> tuple[dict[str, str], set[str]]:
    """A project in ``top`` whose store (at ``where`` in it) holds what a run of the digits
    flow writes: each step's entries and seal by the steps' own code, and Prefect's record of
    each call as a step's task writes it (its result store, the JSON serializer); and the
    reported case's user files.  Returns the steps' keys and scarce's files."""
    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultStore
    from prefect.serializers import JSONSerializer

    from scarce.tasks.steps import execute

    project = digits_project(top / "project", n_samples=60, k=3)
    (top / "mine").mkdir()
    store = Store(project / where)
    results = ResultStore(result_storage=LocalFileSystem(basepath=str(store.prefect_dir)),
                          serializer=JSONSerializer())
    keys: dict[str, str] = {}

    def run(st, **call):
        refs = execute(st, store, call, write_behind=False)
        keys[st.name] = st.key(call)
        results.write(refs, key=keys[st.name])
        return refs

    data = run(sample.load, path=str(project / "digits.csv"), n_samples=60, seed=0)
    labels = run(sample.cluster, data=data, k=3, n_init=1, seed=0)
    run(sample.evaluate, data=data, labels=labels)
    own = {str(p.relative_to(top)) for p in store.root.rglob("*")
           if p.is_file() and p.relative_to(store.root).parts[0].startswith(("digits-",
                                                                             "_prefect"))}
    user_parquet(project / "data" / "user.parquet")
    user_parquet(project / "data" / "tables" / "user.parquet")
    return keys, own


@pytest.fixture(scope="module")
def real_stores(tmp_path_factory) -> dict[str, tuple[Path, dict[str, str], set[str]]]:
    """Per layout: the folder of :func:`real_store`'s project, the keys and scarce's files."""
    out = {}
    for layout, where in LAYOUTS.items():
        top = tmp_path_factory.mktemp(layout)
        out[layout] = (top, *real_store(top, where))
    return out


@pytest.mark.parametrize("dry_run", [False, True], ids=["gc", "dry-run"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("case", sorted(FOREIGN))
def test_gc_deletes_only_what_scarce_wrote_and_names_the_rest(real_stores, case, layout,
                                                               dry_run, tmp_path, monkeypatch,
                                                               capsys):
    built, keys, own = real_stores[layout]
    top = tmp_path / "copy"
    shutil.copytree(built, top, symlinks=True)
    project = top / "project"
    s = Placed(top, (project / LAYOUTS[layout]).resolve(), top / "mine", keys, set(own))
    for step, part in (("digits-cluster", ""), ("digits-load", "X")):  # writes cut short
        tmp = s.entry(step, part).with_name(f".{s.entry(step, part).name}.{TMP}.tmp")
        tmp.write_bytes(b"PAR1 half an entry")
        s.own.add(str(tmp.relative_to(top)))
    seal_tmp = s.root / "_prefect" / f".{s.keys['digits-load']}{SEAL_SUFFIX}.{TMP}.tmp"
    seal_tmp.write_bytes(b"{")
    s.own.add(str(seal_tmp.relative_to(top)))
    foreign = sorted(FOREIGN[case](s) + REPORTED_FILES[layout])
    entries = [p for p in s.own if p.endswith(".parquet")]
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    monkeypatch.setenv("SCARCE_STORE", str(s.root))
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    before = _tree(top)

    said = (f"{len(foreign)} {'file' if len(foreign) == 1 else 'files'} in the store that "
            "scarce did not write")
    refs = Store(s.root).refs()
    assert len(refs) == len(entries)
    out = cli(capsys, "cache", "ls")
    assert f"{len(entries)} entries" in out and said in out, out
    assert [line.split("  (")[0].strip() for line in out.splitlines()
            if "  (" in line] == foreign, out
    out = cli(capsys, "cache", "gc", *(["--dry-run"] if dry_run else []))
    verb = "would remove" if dry_run else "removed"
    assert f"{verb} {len(entries)} entries" in out and said in out, out
    assert [line.split("  (")[0].strip() for line in out.splitlines()
            if "  (" in line] == foreign, out

    after = _tree(top)
    lock = {str(p.relative_to(top)) for p in (s.root / "_leases", s.root / "_leases" / "gc.lock")}
    expected = before if dry_run else {k: v for k, v in before.items() if k not in s.own}
    assert {k: v for k, v in after.items() if k not in lock} == {
        k: v for k, v in expected.items() if k not in lock}
    assert Store(s.root).refs() == (refs if dry_run else [])
