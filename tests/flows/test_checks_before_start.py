"""Bad input to a command that runs flows is found before it starts a Prefect server.

Everything that can be checked without the server is checked before it starts
(:meth:`flows.config.FlowConfig.check_before_run`, called by :func:`flows.commands.running.
check_runs`): a config's input paths, a table's columns and label separator, an apply run's
model, input and output.  Each case runs the command as a user does -- a child process
without ``PREFECT_API_URL``, with the shared server (the default outside the test suite) and
a Prefect home of its own -- and the command must exit 2 having printed exactly one line,
``error: ...`` naming what is wrong (no Prefect ``ERROR`` line, nothing on stdout), and
started no server: nothing of a shared server in the Prefect home (the first command to use
one makes its folder there), and no temporary one (it would have printed its start); nor had
it imported Prefect, Dask, scikit-learn, numba or matplotlib
(:data:`~tests.flows.helpers.FORBIDDEN_BEFORE_START`), for any flow's run.

The cases here are those of runs made by this code, once, with the test session's server:
every apply flow's input and output (``apply``, the output by ``--output`` and by ``--set
output=``), a LEML table's text column and kept columns (``apply``), and a rerun of every
training flow's run whose input is gone (``rerun``).  The cases that need no run (every input
path of every training flow's config, a LEML table's columns and label separator, an
experiment whose points all fail: ``run``) are in ``tests/flows/test_checks_are_light.py``,
which runs each command so too, and checks as well that no Prefect home was made at all.
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

from scarce.flows import shared_server
from scarce.flows.registry import FLOWS
from scarce.flows.shared_server import FOLDER
from tests.flows.helpers import CHECK_WRAPPER, first_run, project_flows, run_in, strip_project
from tests.flows.test_model_relations import CONFIG as RELATIONS
from tests.flows.test_model_relations import SEMEVAL

pytestmark = pytest.mark.slow  # trains a run of every flow

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "data" / "examples" / "leml"
GUM = REPO / "data" / "coref" / "gum"
TRAIN_DOCS, TEST_DOC = ["GUM_news_stampede", "GUM_news_worship"], "GUM_news_crane"

LEML = {"seed": 0, "dataset": {"name": "tiny", "format": "table",
                               "train": "data/bibtex.train.csv", "test": "data/bibtex.test.csv",
                               "table": {"labels_column": "tags", "text_column": "text"}},
        "model": {"rank": 4, "outer_iterations": 1, "cg_max_iter": 2}, "baselines": []}
#: What each apply flow is given: an input its model reads, and an output file's name.
APPLY = {"apply-leml": ("data/bibtex.new.csv", "out.parquet"),
         "apply-relations": ("new-pairs.txt", "out.parquet"),
         "apply-strip": (str(GUM / f"{TEST_DOC}.conllu.gz"), "out.conllu")}
TRAIN = project_flows("train")


def test_every_flow_is_enumerated():
    assert sorted(APPLY) == project_flows("apply")
    assert TRAIN == ["leml", "relations", "strip"]
    assert {FLOWS[name].applies for name in APPLY} == set(TRAIN)


@pytest.fixture(scope="module")
def project(tmp_path_factory, prefect_server):
    """A project with a finished run of every training flow (LEML on a table)."""
    root = strip_project(tmp_path_factory.mktemp("checks"), GUM, TRAIN_DOCS, TEST_DOC)
    (root / "data").mkdir()
    for split in ("train", "test", "new"):
        shutil.copy(EXAMPLES / f"bibtex.{split}.csv", root / "data")
    (root / "configs" / "leml.yaml").write_text(yaml.safe_dump(LEML))
    train = (SEMEVAL / "TRAIN_FILE.TXT").read_text(encoding="utf-8-sig").splitlines()
    (root / "pairs.txt").write_text("\n".join(train[: 4 * 60]) + "\n")
    test = (SEMEVAL / "TEST_FILE_FULL.TXT").read_text(encoding="utf-8-sig").splitlines()
    (root / "new-pairs.txt").write_text("\n".join(test[: 4 * 12]) + "\n")
    (root / "configs" / "relations.yaml").write_text(yaml.safe_dump(
        {**RELATIONS, "data": ["pairs.txt"]}))
    for flow in TRAIN:
        run_in(root, "run", flow)
    (root / "exists.parquet").write_bytes(b"the user's file\n")
    (root / "exists.conllu").write_bytes(b"the user's file\n")
    return root


def refused(project: Path, tmp_path: Path, *args: str) -> str:
    """``scarce ARGS`` as a user runs it: exit 2 and one line, ``error: ...``, and no server
    started; returns the line."""
    home = tmp_path / "prefect-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "SCARCE_"))}
    env.update(SCARCE_ROOT=str(project), PREFECT_HOME=str(home), SCARCE_SERVER="shared",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(REPO))
    env["MODULES_OUT"] = str(tmp_path / "modules.json")
    done = subprocess.run([sys.executable, "-c", CHECK_WRAPPER, *args], cwd=project,
                          env=env, capture_output=True, text=True, timeout=600)
    looked = (home / FOLDER).exists()
    if looked:  # (a failing case leaves no server behind)
        shared_server.stop(home, force=True)
    said = f"scarce {' '.join(args)}:\n{done.stderr[-3000:]}"
    assert done.returncode == 2, said
    assert done.stdout == "", said
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), said
    assert not looked, f"a shared server was looked for: {said}"
    imported = {m.split(".")[0] for m in json.loads((tmp_path / "modules.json").read_text())}
    assert imported == set(), f"imported {sorted(imported)}: {said}"
    return lines[0]


# -- scarce apply: every apply flow's input and output --------------------------------------
APPLIED = sorted(APPLY)


@pytest.mark.parametrize("flow", APPLIED)
def test_apply_to_a_missing_input(project, tmp_path, flow):
    run = first_run(project, FLOWS[flow].applies)
    line = refused(project, tmp_path, "apply", run, "--input", "gone.txt")
    assert line == f"error: {project}/gone.txt: key 'input': input not found"


@pytest.mark.parametrize("how", ["--output", "--set output="])
@pytest.mark.parametrize("flow", APPLIED)
def test_apply_to_an_output_that_exists(project, tmp_path, flow, how):
    run = first_run(project, FLOWS[flow].applies)
    given, output = APPLY[flow]
    target = "exists" + Path(output).suffix
    where = [how, target] if how == "--output" else ["--set", f"output={target}"]
    line = refused(project, tmp_path, "apply", run, "--input", given, *where)
    assert "the output file exists; give --force (or force: true) to replace it" in line
    assert target in line
    assert (project / target).read_bytes() == b"the user's file\n"


def test_apply_leml_to_a_table_without_its_text_column(project, tmp_path):
    (project / "no-text.csv").write_text("title,tags\na,b\n")
    line = refused(project, tmp_path, "apply", first_run(project, "leml"), "--input",
                   "no-text.csv")
    assert line == (f"error: {project}/no-text.csv: key 'input': no column 'text' (the file's "
                    "columns: ['title', 'tags'])")


def test_apply_leml_keeping_a_column_the_table_lacks(project, tmp_path):
    line = refused(project, tmp_path, "apply", first_run(project, "leml"), "--input",
                   APPLY["apply-leml"][0], "--keep-column", "nope")
    assert "key 'keep_columns': no column 'nope' to keep" in line


# -- scarce rerun: a run whose input is gone --------------------------------------------------
#: The file each training flow's run reads that the rerun case moves away.
RERUN_INPUT = {"leml": "data/bibtex.train.csv", "relations": "pairs.txt",
               "strip": "splits.tsv"}


@pytest.mark.parametrize("flow", TRAIN)
def test_rerun_of_a_run_whose_input_is_gone(project, tmp_path, flow):
    path = project / RERUN_INPUT[flow]
    away = tmp_path / "away"
    shutil.move(path, away)
    try:
        line = refused(project, tmp_path, "rerun", first_run(project, flow))
    finally:
        shutil.move(away, path)
    assert str(path) in line and "not found" in line, line
