"""Bad configs, environments and stores through ``scarce``, end to end.

Each case runs the command line in a fresh copy of the small valid project of
``test_bad_inputs.py`` and must exit with code 2 and print one ``error:`` line, its last, naming
the file and line, or the key or variable, at fault, with no traceback, and leave no store entry
and no run folder.  Each class is checked on several instances:

* a document a config never is: nested deeper than ``flows.config.MAX_DEPTH`` (as text, through
  aliases, in a ``--set`` value, in an experiment file), or giving a key twice (a config, a
  ``--set`` value, an experiment and its base, a deployments file);
* a value of another type than its key's: a quoted number, a number for a string, a float for an
  int, a string for a bool;
* a missing input file or folder (or one of the other kind), for every key that names one in
  the three flows, and an experiment's base; also when a rerun finds its input gone;
* ``SCARCE_MEMORY_LIMIT_GB`` that is no positive, finite number;
* a store the system refuses to write: a full disk, a read-only or foreign file system, simulated
  at the system call (as root, a chmod does not stop a write).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

import scarce.tasks.store.atomic as store_module
from scarce.flows.cli import main
from tests.flows.helpers import runs
from tests.flows.test_bad_inputs import Case, make_project

pytestmark = pytest.mark.usefixtures("prefect_server")

DEEP = "[" * 5000 + "]" * 5000
LEML = ("seed: 0\n"
        "dataset: {name: tiny, format: xmc, train: good/train.txt, test: good/test.txt}\n"
        "model: {rank: 2, outer_iterations: 1}\n")
EXPERIMENT = ("flow: leml\nbase: configs/leml.yaml\naxes:\n  seed: [0, 1]\n"
              "table: {rows: [seed], metric: precision@1}\n")
STORE = "store (or $SCARCE_STORE)"


@dataclass(frozen=True)
class Bad:
    name: str
    args: tuple[str, ...]  # the command line
    expect: tuple[str, ...]  # texts the one error line must contain
    files: tuple[tuple[str, str], ...] = ()  # (path in the project, text) written first
    env: tuple[tuple[str, str], ...] = ()


def run(flow: str, mine: str) -> tuple[str, ...]:
    """``scarce run FLOW --config mine/<mine>.yaml``."""
    return ("run", flow, "--config", f"mine/{mine}.yaml")


def deep_mappings(under: str, levels: int = 3000) -> str:
    return f"{under}:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(levels)) \
        + "  " * (levels + 1) + "v\n"


def alias_chain(n: int = 200) -> str:
    return "".join(f"a{i}: &a{i} [{f'*a{i - 1}' if i else 0}]\n" for i in range(n))


DEEP_CASES = [
    Bad("config-deep-lists", run("leml", "deep"), ("mine/deep.yaml:4: invalid YAML: nested "
                                                   "deeper than 50 levels",),
        (("mine/deep.yaml", LEML + f"baselines: {DEEP}\n"),)),
    Bad("config-deep-mappings", run("strip", "deep"), ("mine/deep.yaml:50: invalid YAML: "
                                                       "nested deeper than 50 levels",),
        (("mine/deep.yaml", deep_mappings("sources")),)),
    Bad("config-deep-aliases", run("relations", "deep"), ("mine/deep.yaml:48: invalid YAML: "
                                                          "nested deeper than 50 levels "
                                                          "(through aliases)",),
        (("mine/deep.yaml", alias_chain()),)),
    Bad("config-recursive-alias", run("leml", "loop"), ("mine/loop.yaml:4: invalid YAML: an "
                                                        "alias refers to a node that contains "
                                                        "it",),
        (("mine/loop.yaml", LEML + "baselines: &b [*b]\n"),)),
    Bad("set-deep", ("run", "relations", "--set", f"data={DEEP}"),
        ("relations.yaml: key 'data': --set: value", "nested deeper than 50 levels")),
    Bad("set-deep-mappings", ("run", "leml", "--set", "model=" + "{a: " * 80 + "1" + "}" * 80),
        ("leml.yaml: key 'model': --set: value", "nested deeper than 50 levels")),
    Bad("experiment-deep", ("run", "experiment", "--config", "mine/exp.yaml"),
        ("mine/exp.yaml:6: invalid YAML: nested deeper than 50 levels",),
        (("mine/exp.yaml", EXPERIMENT + f"set: {{model.rank: {DEEP}}}\n"),)),
    Bad("deployments-deep", ("deploy", "--config", "mine/dep.yaml"),
        ("mine/dep.yaml:", "invalid YAML: nested deeper than 50 levels"),
        (("mine/dep.yaml", deep_mappings("deployments")),)),
]

DUPLICATE_CASES = [
    Bad("config-twice-top", run("leml", "twice"),
        ("mine/twice.yaml:4: key 'seed': invalid YAML: the key is given twice (first on "
         "line 1)",), (("mine/twice.yaml", LEML + "seed: 1\n"),)),
    Bad("config-twice-nested", run("leml", "twice"),
        ("mine/twice.yaml:5: key 'model.rank': invalid YAML: the key is given twice (first on "
         "line 4)",),
        (("mine/twice.yaml", LEML.replace("model: {rank: 2, outer_iterations: 1}\n",
                                          "model:\n  rank: 2\n  rank: 3\n")),)),
    Bad("config-twice-flow-mapping", run("strip", "twice"),
        ("mine/twice.yaml:2: key 'sources.kind': invalid YAML: the key is given twice",),
        (("mine/twice.yaml", "seed: 0\nsources: {kind: etype, kind: fraction}\n"),)),
    Bad("set-twice", ("run", "leml", "--set", "model={rank: 1, rank: 2}"),
        ("leml.yaml: key 'model': --set: value", "the key is given twice")),
    Bad("experiment-twice", ("run", "experiment", "--config", "mine/exp.yaml"),
        ("mine/exp.yaml:5: key 'axes.seed': invalid YAML: the key is given twice (first on "
         "line 4)",),
        (("mine/exp.yaml", EXPERIMENT.replace("  seed: [0, 1]\n",
                                              "  seed: [0, 1]\n  seed: [2]\n")),)),
    Bad("experiment-base-twice", ("run", "experiment", "--config", "mine/exp.yaml"),
        ("mine/base.yaml:4: key 'seed': invalid YAML: the key is given twice",),
        (("mine/exp.yaml", EXPERIMENT.replace("configs/leml.yaml", "mine/base.yaml")),
         ("mine/base.yaml", LEML + "seed: 1\n"))),
    Bad("deployments-twice", ("deploy", "--config", "mine/dep.yaml"),
        ("mine/dep.yaml:5: key 'deployments.nightly': invalid YAML: the key is given twice",),
        (("mine/dep.yaml", "deployments:\n  nightly:\n    flow: leml\n"
                           "    config: configs/leml.yaml\n  nightly:\n    flow: strip\n"),)),
]

TYPE_CASES = [
    Bad("config-rank-quoted", run("leml", "typed"),
        ("mine/typed.yaml: key 'model.rank': Input should be a valid integer (got '2')",),
        (("mine/typed.yaml", LEML.replace("rank: 2", "rank: '2'")),)),
    Bad("set-rank-quoted", ("run", "leml", "--set", "model.rank='5'"),
        ("key 'model.rank': Input should be a valid integer (got '5')",)),
    Bad("set-lam-quoted", ("run", "leml", "--set", 'model.lam="0.5"'),
        ("key 'model.lam': Input should be a valid number (got '0.5')",)),
    Bad("set-bool-as-string", ("run", "leml", "--set", "model.fit_intercept='yes'"),
        ("key 'model.fit_intercept': Input should be a valid boolean (got 'yes')",)),
    Bad("strip-window-quoted", ("run", "strip", "--set", "window='20'"),
        ("key 'window': Input should be a valid integer (got '20')",)),
    Bad("relations-int-as-float", ("run", "relations", "--set", "k_low=2.0"),
        ("key 'k_low': Input should be a valid integer (got 2.0)",)),
    Bad("relations-number-for-string", ("run", "relations", "--set", "dataset=5"),
        ("key 'dataset': Input should be a valid string (got 5)",)),
    Bad("strip-ratio-list-of-strings", ("run", "strip", "--set", "loss_ratios=['1', 2]"),
        ("key 'loss_ratios.0': Input should be a valid number (got '1')",)),
]

PATH_CASES = [
    Bad("strip-splits-file-missing", ("run", "strip", "--set", "splits_file=nope.tsv"),
        ("nope.tsv: key 'splits_file': file not found",)),
    Bad("strip-splits-file-a-folder", ("run", "strip", "--set", "splits_file=good/gum"),
        ("good/gum: key 'splits_file': a folder where a file is expected",)),
    Bad("strip-data-dir-missing", ("run", "strip", "--set", "data_dir=nope"),
        ("nope: key 'data_dir': folder not found",)),
    Bad("strip-data-dir-a-file", ("run", "strip", "--set", "data_dir=good/train.txt"),
        ("good/train.txt: key 'data_dir': a file where a folder is expected",)),
    Bad("leml-train-missing", ("run", "leml", "--set", "dataset.train=nope.txt"),
        ("nope.txt: key 'dataset.train': file or folder not found",)),
    Bad("leml-test-folder-missing", ("run", "leml", "--set", "dataset.test=nope/"),
        ("nope: key 'dataset.test': file or folder not found",)),
    Bad("relations-second-file-missing",
        ("run", "relations", "--set", "data=[good/pairs.jsonl, nope.jsonl]"),
        ("nope.jsonl: key 'data.1': file not found",)),
    Bad("relations-a-folder", ("run", "relations", "--set", "data=[good]"),
        ("good: key 'data.0': a folder where a file is expected",)),
    Bad("config-file-names-a-missing-file", run("leml", "gone"),
        ("gone.txt: key 'dataset.test': file or folder not found",),
        (("mine/gone.yaml", LEML.replace("test: good/test.txt", "test: gone.txt")),)),
    Bad("experiment-base-missing", ("run", "experiment", "--config", "mine/exp.yaml"),
        ("mine/none.yaml: key 'base': file not found",),
        (("mine/exp.yaml", EXPERIMENT.replace("configs/leml.yaml", "mine/none.yaml")),)),
]

MEMORY_CASES = [
    Bad(f"memory-limit-{value}", ("run", "leml"),
        (f"key 'SCARCE_MEMORY_LIMIT_GB': SCARCE_MEMORY_LIMIT_GB must be a positive, finite "
         f"number of GiB, got '{value}'",), env=(("SCARCE_MEMORY_LIMIT_GB", value),))
    for value in ("-5", "0", "nan", "inf", "-inf", "1e999")
]


@dataclass
class Outcome:
    code: int
    err: str
    entries: list[str]  # files of the store but Prefect's records and the leases
    runs: list[str]  # files and folders under data/runs


def invoke(project: Path, args: list[str], monkeypatch, env=()) -> Outcome:
    """``scarce ARGS`` in ``project`` (in this process, so that a test may patch it)."""
    monkeypatch.chdir(project)
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    for var in ("SCARCE_STORE", "SCARCE_RUNS", "SCARCE_MEMORY_LIMIT_GB"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env:
        monkeypatch.setenv(var, value)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(args)
    cache, runs_dir = project / "data" / "cache", project / "data" / "runs"
    entries = sorted(
        str(p.relative_to(cache)) for p in (cache.rglob("*") if cache.is_dir() else [])
        if p.is_file() and p.relative_to(cache).parts[0] not in ("_prefect", "_leases"))
    written = sorted(str(p.relative_to(runs_dir))
                     for p in (runs_dir.rglob("*") if runs_dir.is_dir() else []))
    return Outcome(code, err.getvalue(), entries, written)


def the_error_line(outcome: Outcome) -> str:
    """The one ``error:`` line, checked to be the last thing said, short, with no traceback."""
    assert outcome.code == 2, outcome.err[-3000:]
    lines = [line for line in outcome.err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, outcome.err[-3000:]
    assert "Traceback" not in outcome.err
    assert outcome.err.rstrip().splitlines()[-1] == lines[0]
    assert len(lines[0]) < 500, lines[0][:1000]
    assert len(outcome.err) < 20_000
    return lines[0]


def project_for(root: Path, bad: Bad) -> Path:
    project = root / bad.name
    make_project(project, Case("", "leml", ""))
    for rel, text in bad.files:
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    return project


@pytest.mark.parametrize("bad", DEEP_CASES + DUPLICATE_CASES + TYPE_CASES + PATH_CASES
                         + MEMORY_CASES, ids=lambda b: b.name)
def test_refused_in_one_line_naming_the_place_before_anything_runs(bad, tmp_path, monkeypatch):
    project = project_for(tmp_path, bad)
    outcome = invoke(project, list(bad.args), monkeypatch, bad.env)
    line = the_error_line(outcome)
    for text in bad.expect:
        assert text in line, line
    assert outcome.entries == [] and outcome.runs == []
    assert not (project / "data" / "cache").exists()  # refused before the store was opened


# -- inputs gone by the time a run starts -------------------------------------------------------
def test_a_rerun_whose_input_is_gone_is_refused_naming_the_key(tmp_path, monkeypatch):
    project = project_for(tmp_path, Bad("rerun", (), ()))
    assert invoke(project, ["run", "leml"], monkeypatch).code == 0
    (run_id,) = runs(project)
    (project / "good" / "test.txt").unlink()
    outcome = invoke(project, ["rerun", run_id], monkeypatch)
    line = the_error_line(outcome)
    assert f"{project}/good/test.txt: key 'dataset.test': file or folder not found" in line
    assert runs(project) == [run_id]


# -- a store the system refuses to write ---------------------------------------------------------
def _refuse(code: int, under: Path, real):
    """``real`` failing with ``code`` for the files under ``under``, as the system would."""

    def call(*args, **kwargs):
        target = args[1] if real is os.replace else (kwargs.get("dir") or args[0])
        if isinstance(target, int):  # a file descriptor
            target = os.readlink(f"/proc/self/fd/{target}")
        if str(target).startswith(str(under)):
            raise OSError(code, os.strerror(code), str(target))
        return real(*args, **kwargs)

    return call


REFUSED = {  # the system call that fails, and how
    "full-disk": (os, "fsync", errno.ENOSPC),
    "quota": (os, "fsync", errno.EDQUOT),
    "read-only-rename": (os, "replace", errno.EROFS),
    "foreign-folder": (store_module, "_new_temp", errno.EACCES),  # an entry's file
    "read-only-lease": (os, "open", errno.EROFS),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_store_write_the_system_refuses_is_one_line_naming_the_store(case, tmp_path,
                                                                       monkeypatch):
    project = project_for(tmp_path, Bad(case, (), ()))
    store = project / "data" / "cache"
    module, name, code = REFUSED[case]
    monkeypatch.setattr(module, name, _refuse(code, store, getattr(module, name)))
    outcome = invoke(project, ["run", "leml"], monkeypatch)
    line = the_error_line(outcome)
    assert f"error: {store}: key '{STORE}': cannot write " in line, line
    assert line.endswith(f": {os.strerror(code)}"), line
    assert outcome.entries == [] and outcome.runs == []
    assert list(store.rglob(".*.tmp*")) == []  # no temporary file left
