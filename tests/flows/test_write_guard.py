"""Nothing written where it must not be: user-named outputs, reruns and run folders.

* ``scarce apply --output`` refuses, before anything runs, a path that is one of its inputs
  (under any name), inside the store or the runs folder, or an existing file without
  ``--force``; an output whose name says another format than the one written;
* ``scarce rerun`` writes to the store the environment names today, never to the one its
  manifest recorded, and hashes the recorded run's files on disk: a damaged one is reported and,
  when the rerun reproduces its bytes, restored;
* a run that fails while its folder is written leaves no run folder (the folder is written
  under a hidden name and renamed when complete), and a runs folder that cannot be written is
  refused before the run computes.

Each class is checked on several instances.  The LEML model is a tiny one (the Bibtex sample of
``test_leml_flow.py``); the rerun and run-folder cases use the test ``digits`` flow.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import scarce.flows.manifest as flow_manifest
import scarce.flows.run_record as run_record
import tests.flows.sample_flow  # noqa: F401  (registers the 'digits' flow)
from scarce.flows.cli import main
from scarce.flows.outputs import Protected, check_targets
from scarce.tasks.errors import InputError
from tests.flows.helpers import digits_project, made_runs, manifest, run_in, runs
from tests.flows.test_leml_flow import BIBTEX, CONFIG, _head

pytestmark = pytest.mark.usefixtures("prefect_server")


def _tree(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` but Prefect's records and the store's leases."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and not {"_prefect", "_leases"} & set(rel.parts):
            out[str(rel)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err[-2000:]
    assert "Traceback" not in err
    return lines[0]


# -- scarce apply --output ---------------------------------------------------------------
@pytest.fixture(scope="module")
def leml_project(tmp_path_factory, prefect_server):
    """A project with a trained tiny LEML model; returns (root, training run id)."""
    root = tmp_path_factory.mktemp("write-guard")
    (root / "configs").mkdir()
    _head(BIBTEX / "bibtex_xmlrepo_train.txt.gz", root / "train.txt", 300)
    _head(BIBTEX / "bibtex_xmlrepo_test.txt.gz", root / "test.txt", 40)
    (root / "configs" / "leml.yaml").write_text(CONFIG)
    (root / "inbox").mkdir()
    shutil.copy(root / "test.txt", root / "inbox" / "a.txt")
    run_in(root, "run", "leml")
    (run,) = runs(root)
    return root, run


@pytest.fixture
def leml(leml_project, monkeypatch):
    root, run = leml_project
    monkeypatch.setenv("SCARCE_ROOT", str(root))
    monkeypatch.chdir(root)
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    return root, run


def _store_entry(root: Path, run: str) -> str:
    m = manifest(root, run)
    ref = next(o["ref"] for o in m["named_outputs"] if o["name"] == "predictions.parquet")
    return f"data/cache/{ref}.parquet"


# (what the case does to the project before the command, --input, --output, expected words)
FORBIDDEN = {
    "output-is-the-input": (None, "test.txt", "test.txt", "would overwrite an input file"),
    "output-is-the-input-by-another-path": (None, "test.txt", "inbox/../test.txt",
                                            "would overwrite an input file"),
    "output-is-a-symlink-to-the-input": ("symlink", "test.txt", "link.csv",
                                         "would overwrite an input file"),
    "output-is-a-hard-link-of-the-input": ("hardlink", "test.txt", "hard.csv",
                                           "would overwrite an input file"),
    "output-among-the-input-files": (None, "inbox", "inbox", "among the input files"),
    "output-is-a-recorded-run-output": (None, "test.txt",
                                        "data/runs/{run}/outputs/predictions.parquet",
                                        "inside the runs folder"),
    "output-in-the-runs-folder": (None, "test.txt", "data/runs/mine.parquet",
                                  "inside the runs folder"),
    "output-is-a-store-entry": (None, "test.txt", "{entry}", "inside the result store"),
    "output-in-the-store": (None, "test.txt", "data/cache/mine.csv", "inside the result store"),
    "output-exists": ("existing", "test.txt", "old.csv", "exists; give --force"),
    "output-is-a-txt-name": (None, "test.txt", "out.txt", "must end in .parquet or .csv"),
}


@pytest.mark.parametrize("case", sorted(FORBIDDEN))
def test_apply_refuses_an_output_where_nothing_may_be_written(leml, capsys, case):
    root, run = leml
    setup, source, target, words = FORBIDDEN[case]
    if setup == "symlink":
        os.symlink(root / source, root / target)
    elif setup == "hardlink":
        os.link(root / source, root / target)
    elif setup == "existing":
        (root / target).write_text("the user's own file\n")
    target = target.format(run=run, entry=_store_entry(root, run))
    before = _tree(root)
    code, _, err = _cli(capsys, "apply", run, "--input", source, "--output", target)
    assert code == 2, err[-2000:]
    line = _one_error(err)
    assert words in line and "output" in line, line
    assert _tree(root) == before  # nothing written: inputs, store, run folders, the target
    for name in ("link.csv", "hard.csv", "old.csv"):
        (root / name).unlink(missing_ok=True)


@pytest.mark.parametrize("output", ["old.csv", "old.parquet"])
def test_apply_force_replaces_an_existing_output(leml, capsys, output):
    root, run = leml
    (root / output).write_text("the user's own file\n")
    code, _, err = _cli(capsys, "apply", run, "--input", "test.txt", "--output", output,
                        "--force")
    assert code == 0, err[-2000:]
    apply_run = runs(root)[-1]
    published = pd.read_parquet(root / "data" / "runs" / apply_run / "outputs"
                                / "predictions.parquet")
    written = (pd.read_csv(root / output) if output.endswith(".csv")
               else pd.read_parquet(root / output))
    assert len(written) == len(published) > 0
    assert written["label"].tolist() == published["label"].tolist()
    (root / output).unlink()


def test_apply_output_the_disk_refuses_after_the_work_keeps_the_run(leml, capsys, monkeypatch):
    """A disk that fills between the check and the write: one line naming the file and the
    run folder that keeps the results; the run is recorded, its predictions there."""
    import scarce.flows.apply as apply_module

    root, run = leml

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(apply_module, "atomic_write_bytes", full)
    with made_runs(root) as made:
        code, _, err = _cli(capsys, "apply", run, "--input", "test.txt", "--output", "late.csv")
    assert code == 2, err[-2000:]
    line = _one_error(err)
    assert "No space left on device" in line and "results are kept in" in line, line
    (new,) = made
    assert new in line
    assert len(pd.read_parquet(root / "data" / "runs" / new / "outputs"
                               / "predictions.parquet")) > 0
    assert not (root / "late.csv").exists()


@pytest.mark.parametrize("case", ["same-file", "hard-link", "symlink", "in-store", "in-runs",
                                  "among-inputs", "exists"])
def test_check_targets_refuses_each_instance(tmp_path, case):
    """The rule alone, on paths of every kind (it serves all three apply flows)."""
    store, runs_root, inbox = tmp_path / "store", tmp_path / "runs", tmp_path / "inbox"
    for d in (store, runs_root / "r1" / "outputs", inbox):
        d.mkdir(parents=True)
    doc = inbox / "doc.conllu"
    doc.write_text("# newdoc id = d\n")
    targets = {
        "same-file": doc,
        "hard-link": tmp_path / "hard.conllu",
        "symlink": tmp_path / "soft.conllu",
        "in-store": store / "task" / "x.conllu",
        "in-runs": runs_root / "r1" / "outputs" / "doc.conllu",
        "among-inputs": inbox / "new.conllu",
        "exists": tmp_path / "exists.conllu",
    }
    os.link(doc, targets["hard-link"])
    os.symlink(doc, targets["symlink"])
    targets["exists"].write_text("mine\n")
    protected = Protected(store, runs_root, [])
    with pytest.raises(InputError, match="key 'output'"):
        check_targets([targets[case]], inputs=[doc], source=inbox, protected=protected,
                      force=False)
    # --force lifts only the rule against replacing an existing file
    if case == "exists":
        check_targets([targets[case]], inputs=[doc], source=inbox, protected=protected,
                      force=True)
    else:
        with pytest.raises(InputError):
            check_targets([targets[case]], inputs=[doc], source=inbox, protected=protected,
                          force=True)


# -- scarce rerun --------------------------------------------------------------------------
@pytest.fixture
def digits(tmp_path, monkeypatch):
    """A fresh project of the test digits flow with one finished run; (root, run id)."""
    root = digits_project(tmp_path / "project", n_samples=150, k=5)
    monkeypatch.setenv("SCARCE_ROOT", str(root))
    monkeypatch.chdir(root)
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    assert main(["run", "digits"]) == 0
    return root, runs(root)[0]


def _edit_manifest(root: Path, run: str, **changes) -> None:
    path = root / "data" / "runs" / run / "manifest.json"
    m = json.loads(path.read_text())
    m.update(changes)
    path.write_text(json.dumps(m))


@pytest.mark.parametrize("recorded", ["elsewhere/store", "{root}/data/cache-old", "/"])
def test_rerun_writes_to_todays_store_not_the_recorded_one(digits, capsys, tmp_path, recorded,
                                                           monkeypatch):
    root, run = digits
    recorded = recorded.format(root=root)
    _edit_manifest(root, run, store=recorded)
    today = tmp_path / "today-store"
    monkeypatch.setenv("SCARCE_STORE", str(today))
    before = set(Path(recorded).rglob("*")) if Path(recorded).is_dir() and recorded != "/" \
        else None
    code, out, err = _cli(capsys, "rerun", run)
    assert code == 0, err[-2000:]
    assert out.rstrip().endswith("identical")
    assert not (root / "elsewhere").exists() and not (root / "data" / "cache-old").exists()
    if before is not None:
        assert set(Path(recorded).rglob("*")) == before
    new = manifest(root, runs(root)[-1])
    assert Path(new["store"]) == today
    assert all((today / f"{o['ref']}.parquet").is_file() for o in new["outputs"])


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    with open(path, "r+b") as fh:  # in place: a hard link of a store entry is cut with it
        fh.truncate(min(50, len(data) - 1))


DAMAGE = {
    "truncated-output": ("outputs/labels.parquet", _truncate),
    "deleted-output": ("outputs/labels.parquet", lambda p: p.unlink()),
    "edited-text-output": ("outputs/model/k.txt", lambda p: p.write_text("99\n")),
    "replaced-metrics": ("metrics.parquet", lambda p: p.write_bytes(b"PAR1 not metrics")),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_rerun_hashes_the_recorded_files_on_disk_and_restores_them(digits, capsys, case):
    root, run = digits
    name, damage = DAMAGE[case]
    folder = root / "data" / "runs" / run
    recorded = flow_manifest.recorded_files(manifest(root, run))[name]
    damage(folder / name)
    code, out, err = _cli(capsys, "rerun", run)
    assert code == 0, err[-2000:]
    assert f"repaired: {name} of run {run}" in out
    assert out.rstrip().endswith("identical")
    assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == recorded
    assert flow_manifest.damaged_outputs(folder, manifest(root, run)) == {}


def test_rerun_reports_a_damaged_file_it_does_not_reproduce(digits, capsys):
    """The recorded file is damaged and the rerun makes other bytes (here its recorded config
    was edited): the damage is said, the file is left as it is, and the exit is 1."""
    root, run = digits
    m = manifest(root, run)
    _edit_manifest(root, run, config={**m["config"], "k": 4})
    k_txt = root / "data" / "runs" / run / "outputs" / "model" / "k.txt"
    k_txt.write_text("99\n")
    code, out, _ = _cli(capsys, "rerun", run)
    assert code == 1
    assert f"damaged: outputs/model/k.txt of run {run}" in out
    assert "differs: outputs/model/k.txt" in out
    assert k_txt.read_text() == "99\n"


# -- the run folder --------------------------------------------------------------------------
def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(args[0]) if args else None)


_REAL = {"atomic_write_parquet": run_record.atomic_write_parquet,
         "atomic_write_bytes": run_record.atomic_write_bytes,
         "link_or_copy": run_record.link_or_copy}

FAIL_AT = {  # where a full disk hits while the run folder is written (flows/run_record.py)
    "metrics": (run_record, "atomic_write_parquet"),
    "plots-and-text-outputs": (run_record, "atomic_write_bytes"),
    "named-outputs": (run_record, "link_or_copy"),
    "manifest": (flow_manifest, "atomic_write_bytes"),
}


@pytest.mark.parametrize("where", sorted(FAIL_AT))
def test_a_run_that_fails_writing_its_folder_leaves_none(tmp_path, monkeypatch, capsys, where):
    root = digits_project(tmp_path / "project", n_samples=150, k=5)
    monkeypatch.setenv("SCARCE_ROOT", str(root))
    monkeypatch.chdir(root)
    for var in ("SCARCE_STORE", "SCARCE_RUNS"):
        monkeypatch.delenv(var, raising=False)
    module, name = FAIL_AT[where]
    monkeypatch.setattr(module, name, _no_space)
    code, _, err = _cli(capsys, "run", "digits")
    assert code == 2, err[-2000:]
    line = _one_error(err)
    assert "cannot write the run folder: No space left on device" in line, line
    assert "runs folder (or $SCARCE_RUNS)" in line
    runs_dir = root / "data" / "runs"
    assert not runs_dir.exists() or list(runs_dir.iterdir()) == []  # hidden folders too
    # what was computed is kept: the same run then takes every step from the store
    monkeypatch.setattr(module, name, _REAL[name])  # the disk has room again
    assert main(["run", "digits"]) == 0
    (run,) = runs(root)
    assert {"digits-load", "digits-cluster", "digits-evaluate"} <= set(
        manifest(root, run)["cache_hits"])


def test_gc_removes_a_half_written_run_folder(digits, capsys):
    root, run = digits
    partial = root / "data" / "runs" / f".digits-x{flow_manifest.PARTIAL}abc123"
    shutil.copytree(root / "data" / "runs" / run, partial)  # as left by a kill before rename
    assert runs(root) and flow_manifest.run_folders(root / "data" / "runs") == [
        root / "data" / "runs" / run]
    code, out, _ = _cli(capsys, "cache", "gc")
    assert code == 0 and f"removed the half-written run folder {partial.name}" in out
    assert not partial.exists() and (root / "data" / "runs" / run).is_dir()


RUNS_FOLDER = {  # SCARCE_RUNS, relative to the project; the words of the one error line
    "a-file": ("a-file", "is not a folder"),
    "under-a-file": ("a-file/runs", "is not a folder"),
    "read-only": ("read-only-runs", "is not writable"),
}


@pytest.mark.parametrize("case", sorted(RUNS_FOLDER))
def test_a_runs_folder_that_cannot_be_written_is_refused_before_the_run(
        tmp_path, monkeypatch, capsys, case):
    root = digits_project(tmp_path / "project", n_samples=150, k=5)
    (root / "a-file").write_text("not a folder\n")
    (root / "read-only-runs").mkdir()
    monkeypatch.setenv("SCARCE_ROOT", str(root))
    monkeypatch.chdir(root)
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    value, words = RUNS_FOLDER[case]
    monkeypatch.setenv("SCARCE_RUNS", str(root / value))
    real_access = os.access
    read_only = str(root / "read-only-runs")

    def access(path, mode, *a, **k):  # root ignores permission bits: a read-only mount
        if str(path) == read_only and mode & os.W_OK:
            return False
        return real_access(path, mode, *a, **k)

    monkeypatch.setattr(os, "access", access)
    code, _, err = _cli(capsys, "run", "digits")
    assert code == 2, err[-2000:]
    line = _one_error(err)
    assert words in line and "SCARCE_RUNS" in line, line
    assert not (root / "data" / "cache").exists()  # refused before anything was computed


# -- small commands ------------------------------------------------------------------------
@pytest.mark.parametrize("flow", ["bogus", "LEML", "leml-"])
def test_runs_of_an_unknown_flow_is_a_usage_error(capsys, flow):
    with pytest.raises(SystemExit) as exit_:
        main(["runs", "--flow", flow])
    assert exit_.value.code == 2
    out = capsys.readouterr()
    assert out.out == "" and f"argument --flow: invalid choice: {flow!r}" in out.err


class _ClosedPipe(io.StringIO):
    def write(self, text):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    def fileno(self):
        raise io.UnsupportedOperation("no file")


@pytest.mark.parametrize("args", [["runs"], ["runs", "{run}"], ["cache", "ls"]])
def test_a_closed_pipe_ends_the_command_quietly(digits, monkeypatch, capsys, args):
    root, run = digits
    monkeypatch.setattr("sys.stdout", _ClosedPipe())
    code = main([a.format(run=run) for a in args])
    err = capsys.readouterr().err
    assert code == 141
    assert "error" not in err and "Traceback" not in err
