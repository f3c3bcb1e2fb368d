"""The security rules, checked on the code and on what a real run writes.

* no pickle (or marshal, shelve, dill, cloudpickle) and no eval/exec in the project's code;
  YAML only through ``safe_load`` (however yaml is imported); no shell commands;
* store paths come from refs (step name + hash), never from a user string with a separator;
  experiment names and run ids that would escape their folder are rejected;
* every file a run leaves in the store is Parquet (or one of Prefect's JSON records).
"""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

import tests.flows.sample_flow  # noqa: F401  (registers the 'digits' flow)
from scarce.flows.cli import main
from scarce.tasks.store import Store
from tests.flows.helpers import digits_project
from tests.sources import nodes, parsed

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scarce", "algorithms", "tasks", "flows", "bench")
UNSAFE_MODULES = {"pickle", "cPickle", "cloudpickle", "dill", "marshal", "shelve", "joblib"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__"}
# PyYAML's loaders and constructors that build arbitrary Python objects, and the functions
# that load through them (a plain ``load`` without a safe Loader among them); ``safe_load``,
# ``safe_load_all`` and ``SafeLoader`` (and subclasses of it) are the allowed way in.
UNSAFE_YAML = {"load", "load_all", "unsafe_load", "unsafe_load_all", "full_load",
               "full_load_all", "Loader", "UnsafeLoader", "FullLoader", "CLoader",
               "CUnsafeLoader", "CFullLoader", "Constructor", "UnsafeConstructor",
               "FullConstructor"}


def _sources() -> list[Path]:
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert len(files) > 30  # the scan sees the project
    return files


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` of a chain of attributes on a name; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _yaml_names(tree: ast.AST) -> set[str]:
    """The names a module binds to the yaml package or one of its submodules, wherever the
    import is (``import yaml``, ``import yaml as y``, ``import yaml.loader as l``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "yaml":
                    names.add(a.asname or "yaml")
    return names


def _unsafe_yaml(tree: ast.AST, where) -> list[str]:
    """Unsafe YAML loading however it is reached: an unsafe name imported from yaml (under any
    alias) or ``from yaml import *``, an attribute of the yaml module (or of an alias of it)
    named as unsafe, whether called, passed as ``Loader=`` or assigned, and
    ``getattr(yaml, "<unsafe>")``."""
    modules = _yaml_names(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "yaml":
            for a in node.names:
                if a.name == "*" or a.name in UNSAFE_YAML:
                    out.append(f"{where(node)} from {node.module} import {a.name}")
        elif isinstance(node, ast.Attribute) and node.attr in UNSAFE_YAML:
            base = _dotted(node.value)
            if base is not None and base.split(".")[0] in modules:
                out.append(f"{where(node)} {base}.{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "getattr" and len(node.args) >= 2
              and (_dotted(node.args[0]) or "").split(".")[0] in modules
              and not (isinstance(node.args[1], ast.Constant)
                       and node.args[1].value not in UNSAFE_YAML)):
            out.append(f"{where(node)} getattr({_dotted(node.args[0])}, ...)")
    return out


def _violations(path: Path, root: Path = ROOT) -> list[str]:
    def where(node) -> str:
        return f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"

    out = []
    for node in nodes(path):
        if isinstance(node, ast.Import):
            out += [f"{where(node)} import {a.name}" for a in node.names
                    if a.name.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] in UNSAFE_MODULES:
                out.append(f"{where(node)} from {node.module} import")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in UNSAFE_CALLS:
                out.append(f"{where(node)} {f.id}()")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                              and kw.value.value is False):
                    out.append(f"{where(node)} shell=")
    out += _unsafe_yaml(parsed(path), where)
    return sorted(out, key=lambda v: int(v.split(" ", 1)[0].rsplit(":", 1)[1]))


def test_no_pickle_eval_unsafe_yaml_or_shell_in_the_code():
    found = [v for p in _sources() for v in _violations(p)]
    assert found == []


def test_the_scan_sees_every_module_of_the_package():
    scanned = {p.relative_to(ROOT).parts[0] for p in _sources()}
    import scarce

    on_disk = {Path(p).name for p in scarce.__path__}
    for sub in ("algorithms", "tasks", "flows", "bench"):
        on_disk |= {Path(p).name for p in importlib.import_module(f"scarce.{sub}").__path__}
    assert on_disk <= scanned, on_disk - scanned


def _probe(tmp_path, source: str) -> list[str]:
    path = tmp_path / "probe.py"
    path.write_text(source)
    return [v.split(" ", 1)[1] for v in _violations(path, tmp_path)]


def test_the_scan_finds_what_it_forbids(tmp_path):
    assert _probe(tmp_path, "import pickle\nfrom yaml import load\nimport yaml\nyaml.load('a')\n"
                  "eval('1')\nimport subprocess\nsubprocess.run('ls', shell=True)\n") == [
        "import pickle", "from yaml import load", "yaml.load", "eval()", "shell="]


UNSAFE_PROBES = {  # a module's source -> what the scan reports of it
    "yaml.load": ("import yaml\nyaml.load(text)\n", ["yaml.load"]),
    "from-import": ("from yaml import load\nload(text)\n", ["from yaml import load"]),
    "from-import-as": ("from yaml import load as parse\nparse(text)\n",
                       ["from yaml import load"]),
    "module-alias": ("import yaml as y\ny.load(text)\n", ["y.load"]),
    "unsafe_load": ("import yaml\nyaml.unsafe_load(text)\n", ["yaml.unsafe_load"]),
    "full_load": ("import yaml\nyaml.full_load(text)\n", ["yaml.full_load"]),
    "load_all": ("import yaml\nyaml.load_all(text)\n", ["yaml.load_all"]),
    "from-import-full_load_all": ("from yaml import full_load_all\n",
                                  ["from yaml import full_load_all"]),
    "Loader-keyword": ("import yaml\nyaml.safe_load(text, Loader=yaml.Loader)\n",
                       ["yaml.Loader"]),
    "UnsafeLoader-keyword": ("import yaml\nyaml.load(text, Loader=yaml.UnsafeLoader)\n",
                             ["yaml.load", "yaml.UnsafeLoader"]),
    "FullLoader-positional": ("import yaml\nyaml.load(text, yaml.FullLoader)\n",
                              ["yaml.load", "yaml.FullLoader"]),
    "loader-imported-as": ("from yaml import UnsafeLoader as L\n",
                           ["from yaml import UnsafeLoader"]),
    "loader-from-submodule": ("from yaml.loader import Loader\n",
                              ["from yaml.loader import Loader"]),
    "constructor-of-submodule": ("import yaml.constructor\nyaml.constructor.UnsafeConstructor\n",
                                 ["yaml.constructor.UnsafeConstructor"]),
    "subclass-of-aliased-loader": ("import yaml.loader as ld\nclass L(ld.FullLoader): pass\n",
                                   ["ld.FullLoader"]),
    "function-assigned": ("import yaml\nparse = yaml.load\nparse(text)\n", ["yaml.load"]),
    "getattr-constant": ("import yaml\ngetattr(yaml, 'load')(text)\n",
                         ["getattr(yaml, ...)"]),
    "getattr-variable": ("import yaml\ngetattr(yaml, name)(text)\n", ["getattr(yaml, ...)"]),
    "star-import": ("from yaml import *\nload(text)\n", ["from yaml import *"]),
    "import-inside-function": ("def read(text):\n    import yaml as y\n"
                               "    return y.full_load(text)\n", ["y.full_load"]),
}
SAFE_PROBES = {
    "safe-functions": "import yaml\nyaml.safe_load(text)\nyaml.safe_load_all(text)\n"
                      "yaml.safe_dump({})\n",
    "safe_load-imported": "from yaml import safe_load\nsafe_load(text)\n",
    "safe_load-imported-as-load": "from yaml import safe_load as load\nload(text)\n",
    "SafeLoader-subclass": "import yaml\nclass L(yaml.SafeLoader): pass\n"
                           "L(text).get_single_data()\n",
    "YAMLError": "import yaml\ntry:\n    pass\nexcept yaml.YAMLError:\n    pass\n",
    "getattr-safe_load": "import yaml\ngetattr(yaml, 'safe_load')(text)\n",
    "other-modules-load": "import json, numpy as np\njson.load(f)\nnp.load(path)\n",
    "own-function-named-load": "def load(text):\n    return text\nload('a')\n",
}


@pytest.mark.parametrize("case", sorted(UNSAFE_PROBES))
def test_the_scan_catches_unsafe_yaml_however_it_is_imported(tmp_path, case):
    source, found = UNSAFE_PROBES[case]
    assert _probe(tmp_path, source) == found


@pytest.mark.parametrize("case", sorted(SAFE_PROBES))
def test_the_scan_passes_safe_yaml_and_other_loads(tmp_path, case):
    assert _probe(tmp_path, SAFE_PROBES[case]) == []


@pytest.mark.parametrize("ref", ["../x/y", "/etc/passwd", "a/b/c", "a/..", "task", "a/"])
def test_store_refuses_refs_that_are_not_task_slash_key(tmp_path, ref):
    with pytest.raises(ValueError, match="not a store ref"):
        Store(tmp_path).path(ref)


@pytest.fixture
def project(tmp_path):
    """A project of the test's own: what one test runs leaves nothing for another."""
    return digits_project(tmp_path / "project")


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
