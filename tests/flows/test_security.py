"""Issue 7's security rules, checked on the code and on what a real run writes.

* no pickle (or marshal, shelve, dill, cloudpickle) and no eval/exec in the project's code;
  YAML only through ``safe_load``; no shell commands;
* store paths come from refs (step name + hash), never from a user string with a separator;
  experiment names and run ids that would escape their folder are rejected;
* every file a run leaves in the store is Parquet (or one of Prefect's JSON records).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import tests.flows.sample_flow  # noqa: F401  (registers the 'digits' flow)
from scarce.flows.cli import main
from scarce.tasks.store import Store
from tests.flows.helpers import digits_project

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("algorithms", "tasks", "flows", "bench")
UNSAFE_MODULES = {"pickle", "cPickle", "cloudpickle", "dill", "marshal", "shelve", "joblib"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__"}
UNSAFE_YAML = {"load", "unsafe_load", "full_load", "load_all", "unsafe_load_all"}


def _sources() -> list[Path]:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 30  # the scan sees the project
    return files


def _violations(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            out += [f"{where} import {a.name}" for a in node.names
                    if a.name.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in UNSAFE_MODULES:
                out.append(f"{where} from {node.module} import")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in UNSAFE_CALLS:
                out.append(f"{where} {f.id}()")
            if (isinstance(f, ast.Attribute) and f.attr in UNSAFE_YAML
                    and isinstance(f.value, ast.Name) and f.value.id == "yaml"):
                out.append(f"{where} yaml.{f.attr}()")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                              and kw.value.value is False):
                    out.append(f"{where} shell=")
    return out


def test_no_pickle_eval_unsafe_yaml_or_shell_in_the_code():
    found = [v for p in _sources() for v in _violations(p)]
    assert found == []


def test_the_scan_finds_what_it_forbids(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text("import pickle\nfrom yaml import load\nimport yaml\nyaml.load('a')\n"
                   "eval('1')\nimport subprocess\nsubprocess.run('ls', shell=True)\n")
    found = _violations(bad, tmp_path)
    assert [v.split(" ", 1)[1] for v in found] == [
        "import pickle", "yaml.load()", "eval()", "shell="]


@pytest.mark.parametrize("ref", ["../x/y", "/etc/passwd", "a/b/c", "a/..", "task", "a/"])
def test_store_refuses_refs_that_are_not_task_slash_key(tmp_path, ref):
    with pytest.raises(ValueError, match="not a store ref"):
        Store(tmp_path).path(ref)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return digits_project(tmp_path_factory.mktemp("project"))


def _cli(capsys, *args):
    code = main(list(args))
    return code, capsys.readouterr().err


@pytest.mark.usefixtures("in_project")
@pytest.mark.parametrize("name", ["../../outside", "a/b", ".hidden", ""])
def test_experiment_names_that_are_paths_are_rejected(project, capsys, name):
    code, err = _cli(capsys, "run", "digits", "--set", f"name='{name}'")
    assert code == 2
    assert "key 'name'" in err
    assert not (project / "data" / "runs").exists() or not any(
        (project / "data" / "runs").iterdir())
    assert not (project.parent / "outside").exists()


@pytest.mark.usefixtures("in_project")
def test_rerun_of_a_path_is_rejected(project, capsys):
    code, err = _cli(capsys, "rerun", "../../etc")
    assert code == 2 and "not a run id" in err


@pytest.mark.usefixtures("prefect_server", "in_project")
def test_a_run_leaves_only_parquet_and_json_in_the_store(project, capsys):
    code, err = _cli(capsys, "run", "digits", "--set", "name=probe")
    assert code == 0, err[-2000:]
    files = [p for p in (project / "data" / "cache").rglob("*") if p.is_file()]
    parquet = [p for p in files if p.suffix == ".parquet"]
    assert len(parquet) >= 3
    for p in parquet:
        raw = p.read_bytes()
        assert raw[:4] == b"PAR1" and raw[-4:] == b"PAR1", p
    for p in set(files) - set(parquet):
        if p.parts[-2:] == ("_leases", "gc.lock"):  # an empty lock file (flock), no data
            assert p.stat().st_size == 0
            continue
        assert "_prefect" in p.parts, p
        json.loads(p.read_text())  # Prefect's records: JSON, not pickle
    (run,) = list((project / "data" / "runs").iterdir())
    assert run.name.startswith("digits-probe-")
