"""The commands that only read and write files (runs, manifests, the store, a new project's
configs) import neither Prefect nor the methods: their cost is their work, not Prefect's
start-up.

Every command of the command line (and each subcommand of ``cache`` and ``server``) is either
a case of :data:`LIGHT`, run here in a fresh interpreter on a project with a run of each
training flow (the models committed in ``tests/data/models``) and an experiment, or named in
:data:`NEEDS_PREFECT` with the reason; a command added to the command line and to neither
fails :func:`test_every_command_is_a_case_or_needs_prefect`.  Each case must exit as it
should, and none of :data:`~tests.flows.helpers.FORBIDDEN_BEFORE_START` (Prefect, Dask,
scikit-learn, numba, matplotlib) may be among the modules the process had imported when it
exited.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scarce.flows.cli import build_parser
from scarce.tasks.store import Store
from tests.flows.helpers import CHECK_WRAPPER, command_parsers
from tests.flows.test_claims import _experiment_folder
from tests.flows.test_lean_load import SAVED_MODELS

pytestmark = pytest.mark.slow  # a Python process per case

REPO = Path(__file__).resolve().parents[2]
LEML_RUN = SAVED_MODELS["leml"].name
EXPERIMENT = "experiment-toy-1"

#: Command line -> the exit code its work ends with, on the project of :func:`project`.
LIGHT = {
    "runs": 0,
    f"runs {LEML_RUN}": 0,
    "runs --flow leml --format csv --output runs.csv": 0,
    f"diff {LEML_RUN} {LEML_RUN}": 0,
    f"diff {LEML_RUN} {SAVED_MODELS['strip'].name}": 1,
    f"claims {EXPERIMENT}": 0,
    "cache ls": 0,
    "cache gc --dry-run": 0,
    "cache gc": 0,
    "init new-project": 0,
}
#: The commands whose work is Prefect's or the methods', and why.
NEEDS_PREFECT = {
    "run": "runs flows (its checks before start-up are light: test_checks_are_light.py)",
    "rerun": "runs flows (its checks before start-up are light: test_checks_are_light.py)",
    "apply": "runs flows (its checks before start-up are light: test_checks_are_light.py)",
    "bench": "runs the methods and their peers (every benchmark)",
    "deploy": "registers deployments with a Prefect server",
    "serve": "serves deployments with a Prefect server",
    "ui": "starts the Prefect server and UI",
    "server status": "Prefect's settings (its profiles) say where the server's home is",
    "server stop": "Prefect's settings (its profiles) say where the server's home is",
}


#: Every command of the command line, a subcommand's words joined ("cache gc").
ALL = [" ".join(path) for path, parser in command_parsers(build_parser()) if path and not any(
    isinstance(a, argparse._SubParsersAction) for a in parser._actions)]


def command_of(line: str) -> str:
    """The command (of :data:`ALL`) that the command line ``line`` runs."""
    return max((c for c in ALL if f"{line} ".startswith(f"{c} ")), key=len)


def needs_prefect(command: str) -> bool:
    """Whether :data:`NEEDS_PREFECT` names ``command``, or the command it is a subcommand of."""
    return any(f"{command} ".startswith(f"{name} ") for name in NEEDS_PREFECT)


def test_every_command_is_a_case_or_needs_prefect():
    light = {command_of(line) for line in LIGHT}
    assert not [c for c in light if needs_prefect(c)]
    assert [c for c in ALL if c not in light and not needs_prefect(c)] == []
    assert all(any(f"{c} ".startswith(f"{name} ") for c in ALL) for name in NEEDS_PREFECT)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A project whose runs are the committed model of each training flow and an experiment
    over relations (with its children's models), and whose store has one entry."""
    root = tmp_path_factory.mktemp("light-commands")
    runs = root / "data" / "runs"
    runs.mkdir(parents=True)
    for saved in SAVED_MODELS.values():
        shutil.copytree(saved, runs / saved.name)
    _experiment_folder(runs, name=EXPERIMENT)
    Store(root / "data" / "cache").write("unused/0", pd.DataFrame({"x": [1, 2, 3]}))
    return root


@pytest.mark.parametrize("line", sorted(LIGHT))
def test_a_command_that_reads_and_writes_files_imports_no_prefect(project, tmp_path, line):
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "SCARCE_"))}
    env.update(SCARCE_ROOT=str(project), PREFECT_HOME=str(tmp_path / "prefect-home"),
               PYTHONPATH=str(REPO), MODULES_OUT=str(out))
    done = subprocess.run([sys.executable, "-c", CHECK_WRAPPER, *line.split()], cwd=project,
                          env=env, capture_output=True, text=True, timeout=600)
    said = f"scarce {line}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == LIGHT[line], said
    assert "error:" not in done.stderr, said
    assert json.loads(out.read_text()) == [], said  # (of FORBIDDEN_BEFORE_START)
    assert not (tmp_path / "prefect-home").exists(), said
