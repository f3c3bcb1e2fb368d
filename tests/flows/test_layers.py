"""The module map holds: no import cycle, each layer imports only the ones below it, and
importing a module changes nothing in the process (no environment variables set)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from scarce.tasks.code_digest import PROJECT_ROOT, imported_modules
from tests.sources import nodes

PACKAGES = ("algorithms", "tasks", "flows", "bench")
# What each layer may import from the project (its own package and those listed).
ALLOWED = {
    "algorithms": {"algorithms"},
    "tasks": {"algorithms", "tasks"},
    "flows": {"algorithms", "tasks", "flows"},
    "bench": {"algorithms", "tasks", "flows", "bench"},
}
# The command line is the one entry point: `scarce bench NAME` loads the benchmark modules
# (its parser lists them, its handler runs one).
ENTRY_POINT = {"scarce.flows.cli": {"bench"}, "scarce.flows.commands.bench": {"bench"}}


def _modules() -> list[str]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((PROJECT_ROOT / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
            out.append("scarce." + name.removesuffix(".__init__"))
    return out


def _layer(module: str) -> str:
    """``tasks.leml`` -> ``tasks``."""
    return module.split(".")[1]


def _graph() -> dict[str, set[str]]:
    """Every import statement of the project's modules, function-level imports included
    (they hide cycles from the interpreter, not from this test)."""
    mods = set(_modules())
    graph = {}
    for m in mods:
        # a package's __init__ is not a dependency of its own submodules' imports of siblings
        deps = {d for d in imported_modules(m) if d in mods}
        graph[m] = {d for d in deps if not m.startswith(d + ".")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_the_project_modules():
    cycle = _cycle(_graph())
    assert cycle is None, " -> ".join(cycle)


def test_each_layer_imports_only_the_layers_below():
    graph = _graph()
    assert len(graph) > 50 and sum(map(len, graph.values())) > 100  # the names were resolved
    bad = [(m, d) for m, deps in graph.items() for d in deps
           if _layer(d) not in ALLOWED[_layer(m)] | ENTRY_POINT.get(m, set())]
    assert not bad


def test_algorithms_never_import_prefect_or_do_io_through_the_store():
    for m in _modules():
        if m.startswith("scarce.algorithms"):
            assert not any(d.startswith(("prefect", "scarce.tasks", "scarce.flows"))
                           for d in imported_modules(m)), m


@pytest.mark.slow  # starts a Python process
def test_importing_the_modules_sets_no_environment_variable():
    code = (
        "import json, os, importlib, sys\n"
        # the libraries first: scikit-learn and Prefect set variables of their own
        "import numpy, scipy, sklearn, pandas, pyarrow, numba, prefect, prefect_dask\n"
        "before = dict(os.environ)\n"
        "for m in sys.argv[1:]:\n"
        "    importlib.import_module(m)\n"
        "after = dict(os.environ)\n"
        "print(json.dumps(sorted(k for k in set(before) | set(after)"
        " if before.get(k) != after.get(k))))\n"
    )
    mods = [m for m in _modules() if m.startswith(("scarce.flows", "scarce.tasks"))]
    # without the variables the command line would set (the test session sets them)
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_NUM_THREADS") and not k.startswith("PREFECT_SERVER_")}
    out = subprocess.run([sys.executable, "-c", code, *mods], cwd=PROJECT_ROOT, env=env,
                         capture_output=True, text=True, check=True, timeout=300)
    changed = json.loads(out.stdout.strip().splitlines()[-1])
    assert changed == []


BARE = {"algorithms", "tasks", "flows", "bench", "configs"}


def test_no_module_imports_a_bare_top_level_name():
    """Every import of the project's own code goes through ``scarce``: a bare ``tasks`` (or
    ``algorithms``, ``flows``, ``bench``) would load another distribution's package, a user's
    ``tasks.py``, or a second copy of ours beside ``scarce.tasks``.  Checked in the package and
    in the tests, function-level imports and module names written as strings included."""
    import ast
    import re

    root = PROJECT_ROOT
    files = [p for d in (*PACKAGES, "scarce", "tests") for p in sorted((root / d).rglob("*.py"))]
    assert len(files) > 100
    bad = []
    for path in files:
        for node in nodes(path):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                # a module of ours named in a string: "scarce.flows.leml:leml_flow", "-m bench.x"
                names = [m for m in re.findall(r"^([a-z_]+(?:\.\w+)+)(?::\w+)?$", node.value)
                         if _is_our_module(m)]
            bad += [f"{path.relative_to(root)}:{node.lineno}: {n}" for n in names
                    if n.split(".")[0] in BARE]
    assert not bad, bad


def _is_our_module(name: str) -> bool:
    """``tasks.leml`` names a module of ours (``tasks/leml.py``); ``tasks.py`` does not."""
    base = PROJECT_ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def test_every_parse_of_python_source_takes_the_one_lock():
    """Two threads in ``ast.parse`` at once can fail on CPython 3.11 (its converter's depth is
    shared by the interpreter): a module of the project parses through
    :func:`scarce.algorithms.pyast.parse`, never ``ast.parse`` itself."""
    import ast

    calls = []
    for package in PACKAGES:
        for path in sorted((PROJECT_ROOT / package).rglob("*.py")):
            if path.name == "pyast.py" and path.parent.name == "algorithms":
                continue
            for node in nodes(path):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "parse" and isinstance(node.func.value, ast.Name)
                        and node.func.value.id == "ast"):
                    calls.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}")
    assert not calls, calls


def test_parses_in_many_threads_at_once_all_succeed():
    """The lock's behaviour: deep expressions parsed from eight threads at once each give
    the tree a parse in one thread gives."""
    import ast
    from concurrent.futures import ThreadPoolExecutor

    from scarce.algorithms import pyast

    sources = [("(" * depth) + "1" + (")" * depth) + " + x" for depth in range(1, 60)] * 4
    with ThreadPoolExecutor(8) as pool:
        trees = list(pool.map(lambda s: ast.dump(pyast.parse(s, mode="eval")), sources))
    assert trees == [ast.dump(ast.parse(s, mode="eval")) for s in sources]
