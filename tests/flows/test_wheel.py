"""The package as a user installs it: a wheel, a fresh environment, an empty folder; and
``import scarce.flows`` from the repository's root, installed or not.

The wheel must hold the one import name ``scarce`` (no top-level ``algorithms``, ``tasks``,
``flows``, ``bench``) with the default configs as package data, and from it ``scarce init`` and
``scarce run`` must work in a folder of the user's that has a ``tasks.py`` of its own (as invoke
and Celery projects do), with the store and the runs under that folder.

The fresh environment borrows the test environment's third-party packages through a path file
(an install of Prefect and the numeric stack would take minutes); the path file adds their
folder to ``sys.path`` without running its path files, so this checkout's editable install is
not visible there: ``scarce`` comes from the wheel alone.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pandas as pd
import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "data" / "examples" / "leml"

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build = tmp_path_factory.mktemp("build")
    # a copy of the sources, so that the build leaves nothing in the checkout (build/, egg-info)
    shutil.copytree(REPO, build / "src", ignore=shutil.ignore_patterns(
        ".git", ".venv", "data", "tests", "docs", "__pycache__", "*.egg-info", "build"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "--disable-pip-version-check", "-q", "-w", str(out), str(build / "src")],
                   check=True, capture_output=True, timeout=600)
    (path,) = out.glob("scarce-*.whl")
    return path


@pytest.mark.slow
def test_the_wheel_installs_one_import_name_with_its_configs(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"scarce"}, sorted(tops)
    for flow in ("leml", "relations", "strip", "deployments", "apply-leml"):
        assert f"scarce/configs/{flow}.yaml" in names
    assert "scarce/configs/experiments/relations-corpora.yaml" in names
    assert {"scarce/__init__.py", "scarce/flows/cli.py", "scarce/tasks/store/folder.py",
            "scarce/algorithms/leml/model.py", "scarce/bench/leml.py"} <= set(names)


@pytest.fixture(scope="module")
def fresh(wheel, tmp_path_factory) -> Path:
    """A new environment holding the wheel; returns its bin folder."""
    env = tmp_path_factory.mktemp("venv") / "env"
    venv.EnvBuilder(with_pip=False).create(env)
    site = Path(sysconfig.get_paths(vars={"base": str(env), "platbase": str(env)})["purelib"])
    (site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"),
                    "install", "--no-deps", "--disable-pip-version-check", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=600)
    return env / "bin"


def _run(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SCARCE_", "PYTHONPATH", "VIRTUAL_ENV"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["SCARCE_SERVER"] = "temporary"  # no background server left after the test
    # a new Prefect home migrates its database at the first start: slow on a loaded machine
    env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "600"
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)


@pytest.mark.slow
def test_init_run_and_apply_from_the_wheel_beside_a_tasks_py(fresh, tmp_path):
    work = tmp_path / "my-project"
    work.mkdir()
    (work / "tasks.py").write_text("WHOSE = 'the user'\n")  # an invoke or Celery project's
    out = _run(fresh, work, str(fresh / "python"), "-c",
               "import scarce, tasks; print(scarce.__file__); print(tasks.WHOSE)")
    assert out.returncode == 0, out.stderr
    where, whose = out.stdout.split("\n")[:2]
    assert "site-packages" in where and str(REPO) not in where and whose == "the user"
    out = _run(fresh, work, str(fresh / "scarce"), "init")
    assert out.returncode == 0, out.stderr
    assert (work / "configs" / "leml.yaml").is_file() and (work / "data").is_dir()
    # the user's data: a CSV of text and tags (the example shipped in the repository)
    for split in ("train", "test", "new"):
        shutil.copy(EXAMPLES / f"bibtex.{split}.csv", work / "data" / f"{split}.csv")
    out = _run(fresh, work, str(fresh / "scarce"), "run", "leml", "--set",
               "model.outer_iterations=2", "--set", "model.rank=8")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "precision@1" in out.stdout
    (run,) = (work / "data" / "runs").iterdir()
    assert (run / "manifest.json").is_file() and (work / "data" / "cache").is_dir()
    new_rows = len(pd.read_csv(work / "data" / "new.csv"))
    out = _run(fresh, work, str(fresh / "scarce"), "apply", run.name, "--input", "data/new.csv",
               "--output", "labels.csv")  # unlabelled rows: a text column only
    assert out.returncode == 0, out.stderr[-3000:]
    applied = pd.read_csv(work / "labels.csv")
    assert len(applied) == new_rows * 5 and applied["label_name"].notna().all()
    out = _run(fresh, work, str(fresh / "python"), "-c",
               "import scarce; m = scarce.load_model('latest'); "
               "print(m.predict_top_k(['some text'], 5).to_json(orient='records')); "
               "print(m.predict_top_k('data/new.csv', 5).to_csv(index=False), end='')")
    assert out.returncode == 0, out.stderr[-3000:]
    first, table = out.stdout.split("\n", 1)
    top = pd.read_json(io.StringIO(first), orient="records")
    assert len(top) == 5 and set(top["label_name"]) <= set(applied["label_name"].unique()) | set(
        pd.read_csv(work / "data" / "train.csv")["tags"].str.split(",").explode())
    assert table == (work / "labels.csv").read_text()  # the Python model equals scarce apply
    # nothing of the project was written into the environment
    assert not list((fresh.parent).rglob("data/cache"))


#: Run from the repository's root: every subpackage imports (from this checkout, where
#: ``./scarce`` is found first), ``scarce.load_model`` works, nothing else is exposed.
FROM_THE_ROOT = """
import importlib, json, sys
import scarce
import scarce.algorithms.leml, scarce.tasks.store, scarce.flows.cli, scarce.bench, scarce.configs
from scarce.flows.models import load_model
exposed = []
for name in ("tests", "setup", "data", "docs", "scarce"):
    try:
        importlib.import_module("scarce." + name)
        exposed.append(name)
    except ModuleNotFoundError:
        pass
print(json.dumps({"scarce": scarce.__file__, "flows": scarce.flows.__file__,
                  "configs": list(scarce.configs.__path__), "exposed": exposed,
                  "load_model": scarce.load_model.__module__}))
"""


def _imported_from_the_root(out: subprocess.CompletedProcess) -> dict:
    import json

    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads(out.stdout.splitlines()[-1])
    assert found["scarce"] == str(REPO / "scarce" / "__init__.py")
    assert found["flows"] == str(REPO / "flows" / "__init__.py")
    assert found["configs"] == [str(REPO / "configs")]
    assert found["exposed"] == []
    return found


@pytest.mark.slow  # starts a Python process
def test_a_checkout_imports_its_subpackages_from_its_root_without_an_install():
    """No install at all: Python without its site machinery (so no editable finder), the
    third-party packages on the path, the repository's root the working folder."""
    purelib = sysconfig.get_paths()["purelib"]
    code = f"import sys; sys.path.append({purelib!r})\n" + FROM_THE_ROOT
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "SCARCE_"))}
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    _imported_from_the_root(out)


@pytest.mark.slow
def test_the_wheel_installed_imports_its_subpackages_from_the_repository_root(fresh):
    """The root's ``scarce/`` shadows the installed package there: its subpackages are then
    the checkout's folders, one copy, not a mix and not a failure."""
    _imported_from_the_root(_run(fresh, REPO, str(fresh / "python"), "-c", FROM_THE_ROOT))


def test_the_checkout_finder_knows_the_folders_setup_py_maps():
    import ast

    import scarce

    tree = ast.parse((REPO / "setup.py").read_text())
    (folders,) = [ast.literal_eval(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") ==
                  "FOLDERS"]
    assert set(scarce.SUBPACKAGES) == {*folders, "configs"}
