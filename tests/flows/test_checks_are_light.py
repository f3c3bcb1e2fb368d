"""The checks a command makes before it starts Prefect import neither Prefect nor the methods.

Every command that runs flows (``run``, ``apply``, ``rerun``: :data:`flows.cli.FLOW_COMMANDS`)
checks its configs and inputs before it starts a server (:func:`flows.commands.running.
check_runs`).  Those checks read the config schemas (``flows/*_config.py``), which import
neither Prefect, scikit-learn nor Dask, so that bad input is told within the command's
start-up.  Each case runs the command line's ``main`` in a fresh interpreter on bad input
and requires exit 2 with one ``error:`` line, and none of the packages of
:data:`~tests.flows.helpers.FORBIDDEN_BEFORE_START` among the modules the process had imported
when it exited.

The cases are enumerated from the code: an unknown key and a missing input path of every
training flow's config (``run``, and ``run all``), an unknown key of every flow's config in
the registry (an apply flow's through ``apply``, an experiment's through ``run experiment``),
a LEML table's columns and label separator, an experiment whose points cannot run, ``apply``
to a run that is not there (every apply flow), an unknown key, a missing input and an
existing output of every apply flow, each given a model of its flow (so that its checks read
the model and the input's names, as they do before a server starts), and ``rerun`` of a run
whose input is gone.  The runs applied are the models committed in ``tests/data/models``, one
of each training flow (:data:`SAVED`); the one rerun is the LEML table model's.  The apply
and rerun cases of runs made by this code, which need a server to train them, are in
``tests/flows/test_checks_before_start.py``, which checks the same of each command.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from scarce.flows.cli import FLOW_COMMANDS
from scarce.flows.config import INPUT_KIND
from scarce.flows.registry import FLOWS
from tests.flows.helpers import CHECK_WRAPPER, project_flows, strip_project
from tests.flows.test_checks_before_start import GUM, TEST_DOC, TRAIN_DOCS
from tests.flows.test_lean_load import SAVED_MODELS
from tests.flows.test_model_relations import SEMEVAL

pytestmark = pytest.mark.slow  # a Python process per case

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "data" / "examples" / "leml"
#: The committed model of each training flow, by flow (a run folder: manifest and model).
SAVED = SAVED_MODELS
MODEL = SAVED["leml"].name
# The project's own flows: a test module may register a sample flow of its own (`digits`).
OWN = {name: spec for name, spec in FLOWS.items() if spec.target.startswith("scarce.flows.")}
TRAIN, APPLY = project_flows("train"), project_flows("apply")
#: What each apply flow is given (relative to the project): an input its model reads, and a
#: file name its output may have.
GIVEN = {"apply-leml": ("data/bibtex.new.csv", "exists.parquet"),
         "apply-relations": ("new-pairs.txt", "exists.parquet"),
         "apply-strip": (f"{TEST_DOC}.conllu.gz", "exists.conllu")}

LEML = {"seed": 0, "dataset": {"name": "tiny", "format": "table",
                               "train": "data/bibtex.train.csv", "test": "data/bibtex.test.csv",
                               "table": {"labels_column": "tags", "text_column": "text"}},
        "model": {"rank": 4, "outer_iterations": 1, "cg_max_iter": 2}, "baselines": []}
EXPERIMENT = {"flow": "leml", "base": "configs/leml.yaml",
              "set": {"dataset.table.labels_column": "nope"}, "axes": {"seed": [0, 1]},
              "table": {"rows": ["seed"], "columns": ["method"], "metric": "precision@1"}}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A LEML table project and a StRip project (their inputs there), with the committed
    model among its runs (its training files are not in the project) and an experiment whose
    points lack a column."""
    root = strip_project(tmp_path_factory.mktemp("light"), GUM, TRAIN_DOCS, TEST_DOC)
    (root / "data").mkdir()
    for split in ("train", "test", "new"):
        shutil.copy(EXAMPLES / f"bibtex.{split}.csv", root / "data")
    (root / "configs" / "experiments").mkdir()
    (root / "configs" / "leml.yaml").write_text(yaml.safe_dump(LEML))
    (root / "configs" / "experiments" / "bad-column.yaml").write_text(yaml.safe_dump(EXPERIMENT))
    for saved in SAVED.values():
        shutil.copytree(saved, root / "data" / "runs" / saved.name)
    test = (SEMEVAL / "TEST_FILE_FULL.TXT").read_text(encoding="utf-8-sig").splitlines()
    (root / "new-pairs.txt").write_text("\n".join(test[: 4 * 12]) + "\n")
    shutil.copy(GUM / f"{TEST_DOC}.conllu.gz", root)
    for name in ("exists.parquet", "exists.conllu"):
        (root / name).write_bytes(b"the user's file\n")
    (root / "no-text.csv").write_text("title,tags\na,b\n")
    return root


def refused_lightly(project: Path, tmp_path: Path, *args: str) -> str:
    """``scarce ARGS`` in a fresh process: exit 2, one line ``error: ...``, nothing on stdout,
    and none of :data:`~tests.flows.helpers.FORBIDDEN_BEFORE_START` imported; returns the line."""
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "SCARCE_"))}
    env.update(SCARCE_ROOT=str(project), PREFECT_HOME=str(tmp_path / "prefect-home"),
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(REPO),
               MODULES_OUT=str(out))
    done = subprocess.run([sys.executable, "-c", CHECK_WRAPPER, *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600)
    said = f"scarce {' '.join(args)}:\n{done.stderr[-3000:]}"
    assert done.returncode == 2, said
    assert done.stdout == "", said
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), said
    assert json.loads(out.read_text()) == [], said  # (of FORBIDDEN_BEFORE_START)
    assert not (tmp_path / "prefect-home").exists(), said  # (no server looked for)
    return lines[0]


def test_the_commands_that_check_before_start_up_are_the_cases_here():
    assert sorted(FLOW_COMMANDS) == ["apply", "rerun", "run"]
    assert TRAIN == ["leml", "relations", "strip"]
    assert APPLY == [f"apply-{flow}" for flow in TRAIN] == sorted(GIVEN)
    assert sorted(OWN) == sorted([*TRAIN, *APPLY, "experiment"])


def test_every_applied_flow_has_a_committed_model_of_its_own():
    assert sorted(SAVED) == sorted(OWN[name].applies for name in APPLY)
    for flow, saved in SAVED.items():
        manifest = json.loads((saved / "manifest.json").read_text())
        assert manifest["flow"] == flow and manifest["run_id"]
        assert (saved / "outputs" / "model" / "model.json").is_file()


# -- scarce run -------------------------------------------------------------------------------
@pytest.mark.parametrize("flow", [*TRAIN, "all"])
def test_run_with_an_unknown_key(project, tmp_path, flow):
    line = refused_lightly(project, tmp_path, "run", flow, "--set", "no_such_key=1")
    assert "key 'no_such_key': --set: unknown key" in line


def input_keys(model: type[BaseModel], prefix: str = "") -> list[tuple[str, bool]]:
    """The dotted key of every input path of a config model (nested sections too), and
    whether it takes a list."""
    out = []
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            out += input_keys(kind, f"{prefix}{name}.")
            continue
        extra = info.json_schema_extra
        if isinstance(extra, dict) and INPUT_KIND in extra:
            out.append((f"{prefix}{name}", "list" in str(kind)))
    return out


RUN_INPUTS = [(flow, key, many) for flow in TRAIN
              for key, many in input_keys(FLOWS[flow].load_model())]


def test_every_training_flow_has_input_paths():
    assert {flow for flow, _, _ in RUN_INPUTS} == set(TRAIN)


@pytest.mark.parametrize("flow, key, many", RUN_INPUTS,
                         ids=[f"{f}-{k}" for f, k, _ in RUN_INPUTS])
def test_run_with_a_missing_input(project, tmp_path, flow, key, many):
    value = "[gone/missing]" if many else "gone/missing"
    line = refused_lightly(project, tmp_path, "run", flow, "--set", f"{key}={value}")
    assert "gone/missing" in line and "not found" in line and f"key '{key}" in line


@pytest.mark.parametrize("key", ["dataset.table.labels_column", "dataset.table.text_column"])
def test_run_leml_on_a_table_without_the_named_column(project, tmp_path, key):
    line = refused_lightly(project, tmp_path, "run", "leml", "--set", f"{key}=nope")
    assert line == (f"error: {project}/data/bibtex.train.csv: key 'dataset.train': no column "
                    "'nope' (the file's columns: ['text', 'tags'])")


def test_run_leml_on_labels_joined_by_another_separator(project, tmp_path):
    line = refused_lightly(project, tmp_path, "run", "leml", "--set",
                           "dataset.table.label_separator=;")
    assert "key 'dataset.table.label_separator'" in line
    assert "the names are joined by ',', not ';'" in line


def test_run_experiment_whose_points_all_lack_a_column(project, tmp_path):
    line = refused_lightly(project, tmp_path, "run", "experiment", "bad-column")
    assert line.startswith(f"error: {project}/data/bibtex.train.csv: key 'dataset.train': "
                           "none of the 2 grid points can run; the first (seed=0): no column "
                           "'nope'"), line


def test_run_experiment_with_an_unknown_key(project, tmp_path):
    line = refused_lightly(project, tmp_path, "run", "experiment", "bad-column", "--set",
                           "no_such_key=1")
    assert "key 'no_such_key': --set: unknown key" in line


# -- scarce apply -----------------------------------------------------------------------------
@pytest.mark.parametrize("flow", APPLY)
def test_apply_of_a_run_that_is_not_there(project, tmp_path, flow):
    trained = FLOWS[flow].applies
    line = refused_lightly(project, tmp_path, "apply", "latest:nobody", "--flow", trained,
                           "--input", "data/bibtex.new.csv")
    assert f"no finished {trained} run named 'nobody'" in line and "key 'model_run'" in line


def _model_of(flow: str) -> str:
    """The committed model (its run id) that the apply flow ``flow`` applies."""
    return SAVED[OWN[flow].applies].name


@pytest.mark.parametrize("flow", APPLY)
def test_apply_with_an_unknown_key(project, tmp_path, flow):
    line = refused_lightly(project, tmp_path, "apply", _model_of(flow), "--input",
                           GIVEN[flow][0], "--set", "no_such_key=1")
    assert "key 'no_such_key': --set: unknown key" in line


@pytest.mark.parametrize("flow", APPLY)
def test_apply_to_an_input_that_is_not_there(project, tmp_path, flow):
    line = refused_lightly(project, tmp_path, "apply", _model_of(flow), "--input", "gone.txt")
    assert line == f"error: {project}/gone.txt: key 'input': input not found"


@pytest.mark.parametrize("flow", APPLY)
def test_apply_to_an_output_that_exists(project, tmp_path, flow):
    given, output = GIVEN[flow]
    line = refused_lightly(project, tmp_path, "apply", _model_of(flow), "--input", given,
                           "--output", output)
    assert "the output file exists; give --force (or force: true) to replace it" in line
    assert (project / output).read_bytes() == b"the user's file\n"


def test_apply_leml_to_a_table_without_its_text_column(project, tmp_path):
    line = refused_lightly(project, tmp_path, "apply", MODEL, "--input", "no-text.csv")
    assert line == (f"error: {project}/no-text.csv: key 'input': no column 'text' (the file's "
                    "columns: ['title', 'tags'])")


# -- scarce rerun -----------------------------------------------------------------------------
def test_rerun_of_a_run_whose_input_is_gone(project, tmp_path):
    line = refused_lightly(project, tmp_path, "rerun", MODEL)
    assert f"{project}/train.csv" in line and "not found" in line
