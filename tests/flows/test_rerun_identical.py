"""A run folder's files are a function of what they hold: reruns after the code changed.

For every flow the registry lists, a small run is made; then every step's code digest is changed,
as an edit of the project's code changes it (every key changes, every step computes again under
its new key), and ``scarce rerun`` of the run must answer ``identical``: every file of the
rerun's folder but its manifest (metrics, plots, named outputs; volatile outputs aside) the same
bytes as the run's.  Then one step returns another table, and the rerun answers ``differs``,
naming the file it reaches.  The files are enumerated from the run folder on disk, so a file a
flow adds is compared without being named here.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import tests.flows.sample_flow  # noqa: F401  (registers the 'digits' flow an experiment runs)
from scarce.flows.cli import main
from scarce.flows.registry import FLOWS
from scarce.tasks.steps import Step
from tests.flows.helpers import (
    digits_grid,
    digits_project,
    made_runs,
    manifest,
    new_project,
    strip_project,
)
from tests.flows.test_apply_relations import CONFIG as RELATIONS_CONFIG
from tests.flows.test_apply_relations import SEMEVAL, _semeval_pairs
from tests.flows.test_leml_flow import BIBTEX, _head
from tests.flows.test_leml_flow import CONFIG as LEML_CONFIG

GUM = Path(__file__).resolve().parents[2] / "data" / "coref" / "gum"
STRIP_TRAIN, STRIP_TEST = ["GUM_news_stampede", "GUM_news_worship"], "GUM_news_crane"
GRID = digits_grid(k="[4, 6]")


def _leml(root: Path) -> Path:
    new_project(root, {"leml.yaml": LEML_CONFIG})
    _head(BIBTEX / "bibtex_xmlrepo_train.txt.gz", root / "train.txt", 400)
    _head(BIBTEX / "bibtex_xmlrepo_test.txt.gz", root / "test.txt", 200)
    return root


def _relations(root: Path) -> Path:
    return new_project(root, {"relations.yaml": RELATIONS_CONFIG}, {
        "train.txt": _semeval_pairs(SEMEVAL / "TRAIN_FILE.TXT", 0, 300),
        "test.txt": _semeval_pairs(SEMEVAL / "TEST_FILE_FULL.TXT", 0, 40)})


def _strip(root: Path) -> Path:
    strip_project(root, GUM, STRIP_TRAIN, STRIP_TEST)
    (root / "docs").mkdir()
    shutil.copy(GUM / f"{STRIP_TEST}.conllu.gz", root / "docs")
    return root


def _experiment(root: Path) -> Path:
    digits_project(root, n_samples=150, k=5)
    (root / "configs" / "experiments").mkdir()
    (root / "configs" / "experiments" / "grid.yaml").write_text(GRID)
    return root


@dataclass
class Case:
    """How to make a run of a flow: the project (``make(root)``), the commands that make what
    it needs first (a training run, ``{run}`` in the command its id), and its own command; the
    step whose result the test changes (``change``) and a file of the run folder that then
    differs (``differs``)."""

    make: object
    command: list[str]
    change: str
    differs: str
    before: list[list[str]] = field(default_factory=list)


TRAIN = {"leml": ["run", "leml"], "relations": ["run", "relations"],
         "strip": ["run", "strip", "--config", "configs/strip.yaml"]}
CASES = {
    "leml": Case(_leml, TRAIN["leml"], "leml-predict", "outputs/predictions.parquet"),
    "apply-leml": Case(_leml, ["apply", "{run}", "--input", "test.txt"], "leml-score",
                       "outputs/predictions.parquet", [TRAIN["leml"]]),
    "relations": Case(_relations, TRAIN["relations"], "relations-examples",
                      "outputs/clusters.parquet"),
    "apply-relations": Case(_relations, ["apply", "{run}", "--input", "test.txt"],
                            "relations-assign", "outputs/assignments.parquet",
                            [TRAIN["relations"]]),
    "strip": Case(_strip, TRAIN["strip"], "strip-evaluate", "outputs/rules.parquet"),
    "apply-strip": Case(_strip, ["apply", "{run}", "--input", "docs"], "strip-conllu",
                        f"outputs/predicted/{STRIP_TEST}.conllu", [TRAIN["strip"]]),
    "experiment": Case(_experiment, ["run", "experiment", "grid"], "experiment-table",
                       "outputs/table.parquet"),
}


def test_every_flow_of_the_registry_has_a_case():
    assert sorted(CASES) == sorted(name for name, spec in FLOWS.items()
                                   if spec.target.startswith("scarce."))


def _scarce(project: Path, *args: str) -> tuple[int, str, list[str]]:
    """``scarce ARGS`` in ``project``: exit code, what it printed, the runs it made."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as env, made_runs(project) as made, \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        env.chdir(project)
        env.setenv("SCARCE_ROOT", str(project))
        env.delenv("SCARCE_STORE", raising=False)
        env.delenv("SCARCE_RUNS", raising=False)
        code = main(list(args))
    assert code in (0, 1), err.getvalue()[-3000:]
    return code, out.getvalue(), made


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, prefect_server):
    """flow -> (project, the id of the run of its case): made when a test first asks."""
    made: dict[str, tuple[Path, str]] = {}
    projects: dict[object, Path] = {}

    def run_of(flow: str) -> tuple[Path, str]:
        if flow not in made:
            case = CASES[flow]
            if case.make not in projects:
                projects[case.make] = case.make(tmp_path_factory.mktemp(flow))
            project = projects[case.make]
            last = None
            for command in [*case.before, case.command]:
                args = [a.format(run=last) for a in command]
                code, _, runs = _scarce(project, *args)
                assert code == 0 and runs, args
                last = [r for r in runs if manifest(project, r)["flow"] != "digits"][-1]
            made[flow] = project, last
        return made[flow]

    return run_of


@pytest.fixture
def code_changed(monkeypatch):
    """``change(salts)``: every step's code digest as an edit of its code would make it
    (``salts["*"]`` appended to every step's, ``salts[name]`` to step ``name``'s), so that
    their keys change as with a real edit: read through a property of the class over the
    digest each step holds."""
    def change(salts: dict[str, str]) -> None:
        def get(st: Step) -> str:
            return st.__dict__["code_hash"] + salts.get(st.name, salts.get("*", ""))

        def put(st: Step, value: str) -> None:
            st.__dict__["code_hash"] = value

        monkeypatch.setattr(Step, "code_hash", property(get, put), raising=False)

    return change


def _files(folder: Path) -> dict[str, bytes]:
    """Every file of a run folder but its manifest, by path in the folder: its bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != "manifest.json"}


def _volatile(m: dict) -> set[str]:
    return {f"outputs/{o['name']}" for o in m.get("named_outputs") or [] if o.get("volatile")}


def _another(value):
    """``value`` (what a step returns) with one cell changed: a real change of its table."""
    if isinstance(value, dict):
        return {k: _another(v) for k, v in value.items()}
    if isinstance(value, pd.DataFrame):
        out = value.copy()
        numeric = [c for c in out.columns if pd.api.types.is_numeric_dtype(out[c])
                   and not pd.api.types.is_bool_dtype(out[c])]
        column = (numeric or list(out.columns))[-1]
        first = out[column].iloc[0]
        out.loc[out.index[0], column] = (f"{first}x" if not numeric
                                         else 1 if pd.isna(first) else first + 1)
        return out
    if sp.issparse(value):
        out = value.copy()
        out.data[0] += 1
        return out
    if isinstance(value, np.ndarray):
        out = value.copy()
        out.flat[0] = not out.flat[0] if out.dtype == bool else out.flat[0] + 1
        return out
    raise TypeError(f"no change made to a {type(value).__name__}")


@pytest.mark.parametrize("flow", CASES)
def test_a_rerun_after_every_steps_code_changed_writes_the_same_bytes(flow, recorded,
                                                                         code_changed):
    project, run_id = recorded(flow)
    folder = project / "data" / "runs" / run_id
    old = manifest(project, run_id)
    before = _files(folder)
    assert "metrics.parquet" in before and any(n.startswith("outputs/") for n in before)
    damaged = sorted(n for n in before if n.startswith("outputs/") and n not in _volatile(old))[0]
    (folder / damaged).unlink()  # restored by the rerun, whose file is the same bytes

    code_changed({"*": "-edited"})
    code, out, runs = _scarce(project, "rerun", run_id)
    (rerun_id,) = [r for r in runs if manifest(project, r)["flow"] == old["flow"]]
    lines = out.splitlines()
    assert code == 0 and "identical" in lines, out
    assert not any(line.startswith(("metadata differs", "differs")) for line in lines), out
    assert f"repaired: {damaged} of run {run_id}" in out
    new = manifest(project, rerun_id)
    # every step computed again, under another key: its files are the same bytes
    refs = {o["name"]: o["ref"] for o in new["named_outputs"] if o.get("ref")}
    assert all(refs[o["name"]] != o["ref"] for o in old["named_outputs"] if o.get("ref"))
    assert not any(o["cached"] for o in new["outputs"])
    after = _files(project / "data" / "runs" / rerun_id)
    assert sorted(after) == sorted(before)
    for name in sorted(set(before) - _volatile(old)):
        assert after[name] == before[name], name
    assert _files(folder) == before  # the damaged file restored


@pytest.mark.parametrize("flow", CASES)
def test_a_rerun_whose_step_returns_another_table_differs_naming_the_file(flow, recorded,
                                                                           code_changed,
                                                                           monkeypatch):
    project, run_id = recorded(flow)
    case = CASES[flow]
    old = manifest(project, run_id)
    assert case.change in {o["step"] for o in old["outputs"]}
    (st,) = {o for o in _steps() if o.name == case.change}
    real = st.fn
    monkeypatch.setattr(st, "fn", lambda **kwargs: _another(real(**kwargs)))
    code_changed({case.change: "-changed"})  # its key (and those after it) changes
    code, out, _ = _scarce(project, "rerun", run_id, "--no-refresh")
    assert code == 1, out
    assert any(line.startswith(f"differs: {case.differs}") for line in out.splitlines()), out


def _steps() -> list[Step]:
    """Every step the project declares (its task modules) and the test flow's."""
    import importlib
    import pkgutil

    import scarce.tasks
    from tests.flows import sample_flow

    modules = [importlib.import_module(info.name) for info in
               pkgutil.walk_packages(scarce.tasks.__path__, "scarce.tasks.")] + [sample_flow]
    return [v for m in modules for v in vars(m).values() if isinstance(v, Step)]


def test_the_changed_tables_are_other_tables():
    frame = pd.DataFrame({"a": ["x", "y"], "b": [1.5, 2.0]})
    assert _another(frame)["b"].tolist() == [2.5, 2.0]
    assert _another(pd.DataFrame({"s": ["x"]}))["s"].tolist() == ["xx"]
    assert _another(np.array([True, False])).tolist() == [False, False]
    assert _another(sp.csr_matrix(np.eye(2))).toarray().tolist() == [[2, 0], [0, 1]]
    assert json.dumps(_another({"p": np.array([1])})["p"].tolist()) == "[2]"
