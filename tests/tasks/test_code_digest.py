"""A step's cache key covers the source of every project module its code can reach.

The reached modules are found by reading import statements (``tasks.code_digest.project_modules``);
these tests edit copies of the project's sources and check the key moves exactly when a reached
module changes, and cross-check the static reading against what the step functions actually
refer to at run time.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import shutil
import types
from pathlib import Path

import pytest

import scarce.tasks
import scarce.tasks.store
from scarce.tasks.code_digest import (
    CODE_PACKAGES,
    PROJECT_ROOT,
    code_digest,
    imported_modules,
    in_packages,
    project_modules,
)
from scarce.tasks.steps import Step


def step_modules() -> list[str]:
    """Every module of ``scarce.tasks`` that declares a step, found by importing them all (a
    new step module cannot be missed)."""
    out = set()
    for info in pkgutil.walk_packages(scarce.tasks.__path__, "scarce.tasks."):
        module = importlib.import_module(info.name)
        out.update(v.fn.__module__ for v in vars(module).values() if isinstance(v, Step))
    return sorted(out)


STEP_MODULES = step_modules()
#: The modules of the result store's package: the step machinery writes and checks entries
#: with all of them.
STORE_MODULES = sorted(["scarce.tasks.store", *(
    info.name for info in pkgutil.walk_packages(scarce.tasks.store.__path__,
                                                "scarce.tasks.store."))])
FOLDERS = [pkg.removeprefix("scarce.") for pkg in CODE_PACKAGES]  # algorithms/, tasks/


def _file(tree: Path, name: str) -> Path:
    """The source file of module ``scarce.<folder>.<...>`` in ``tree``."""
    parts = name.split(".")[1:]
    path = tree.joinpath(*parts).with_suffix(".py")
    return path if path.is_file() else tree.joinpath(*parts, "__init__.py")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of ``algorithms/`` and ``tasks/`` to edit."""
    for folder in FOLDERS:
        shutil.copytree(PROJECT_ROOT / folder, tmp_path / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _edit_a_function(path: Path) -> None:
    """Change the body of the first function of the file (a new first statement)."""
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if stripped.startswith("def ") and line.rstrip().endswith(":"):
            indent = " " * (len(line) - len(stripped) + 4)
            lines.insert(i + 1, f"{indent}_edited = 1\n")
            path.write_text("".join(lines))
            return
    path.write_text(path.read_text() + "\n\ndef _edited():\n    return 1\n")


def test_the_step_modules_are_found():
    assert {"scarce.tasks.leml", "scarce.tasks.leml_data", "scarce.tasks.relations",
            "scarce.tasks.experiment"} <= set(STEP_MODULES)
    assert {"scarce.tasks.strip.training", "scarce.tasks.strip.evaluation"} <= set(STEP_MODULES)


#: The StRip step modules whose code reaches the pair graph (``algorithms.strip.closure``),
#: which counts with the union-find kernel of ``algorithms.strip._kernels``.
CLUSTERING = [m for m in STEP_MODULES if m.startswith("scarce.tasks.strip.")
              and "scarce.algorithms.strip.closure" in project_modules(m)]


def test_the_strip_steps_that_cluster_are_found():
    assert {"scarce.tasks.strip.pairs", "scarce.tasks.strip.training",
            "scarce.tasks.strip.evaluation", "scarce.tasks.strip.apply"} <= set(CLUSTERING)


@pytest.mark.parametrize("module", CLUSTERING)
def test_the_union_find_kernel_is_in_the_key_of_every_strip_step_that_clusters(tree, module):
    assert "scarce.algorithms.strip._kernels" in project_modules(module, tree)
    before = code_digest(module, tree)
    _edit_a_function(tree / "algorithms" / "strip" / "_kernels.py")
    assert code_digest(module, tree) != before


@pytest.mark.parametrize("module", STEP_MODULES)
def test_editing_any_reached_module_changes_the_key(tree, module):
    reached = project_modules(module, tree)
    assert module in reached and {"scarce.tasks.steps", *STORE_MODULES} <= set(reached)
    before = code_digest(module, tree)
    for name in reached:  # each edit alone changes the key; each is undone before the next
        path = _file(tree, name)
        original = path.read_text()
        _edit_a_function(path)
        assert code_digest(module, tree) != before, name
        path.write_text(original)
    assert code_digest(module, tree) == before  # every edit undone: the key is back


@pytest.mark.parametrize("module", STEP_MODULES)
def test_editing_an_unreached_module_leaves_the_key(tree, module):
    reached = set(project_modules(module, tree))
    others = sorted(
        "scarce." + ".".join(p.relative_to(tree).with_suffix("").parts).removesuffix(".__init__")
        for folder in FOLDERS for p in (tree / folder).rglob("*.py"))
    unreached = [m for m in others if m not in reached]
    assert unreached, "every module is reached: the test would prove nothing"
    before = code_digest(module, tree)
    for name in unreached:
        _edit_a_function(_file(tree, name))
    assert code_digest(module, tree) == before


def _referenced_modules(fn: types.FunctionType) -> set[str]:
    """Project modules a function refers to through its globals (names it loads, and the
    modules of the functions and classes they are), followed one level into the functions of
    its own module -- an independent reading of what a step calls."""
    out: set[str] = set()
    seen: set[int] = set()

    def visit(f: types.FunctionType) -> None:
        if id(f) in seen:
            return
        seen.add(id(f))
        codes = [f.__code__]
        while codes:
            code = codes.pop()
            codes.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
            for name in code.co_names:
                obj = f.__globals__.get(name)
                if isinstance(obj, types.ModuleType):
                    out.add(obj.__name__)
                elif obj is not None and getattr(obj, "__module__", None):
                    out.add(obj.__module__)
                    if isinstance(obj, types.FunctionType) and obj.__module__ == f.__module__:
                        visit(obj)

    visit(fn)
    return {m for m in out if in_packages(m, CODE_PACKAGES)}


@pytest.mark.parametrize("module", STEP_MODULES)
def test_every_module_a_step_refers_to_is_in_its_key(module):
    mod = importlib.import_module(module)
    steps = [v for v in vars(mod).values() if isinstance(v, Step) and v.fn.__module__ == module]
    assert steps
    for st in steps:  # a package's steps are defined in its modules: each keyed by its own
        assert in_packages(st.fn.__module__, (module,))
        reached = set(project_modules(st.fn.__module__))
        assert st.code_hash == code_digest(st.fn.__module__)
        missing = _referenced_modules(inspect.unwrap(st.fn)) - reached
        assert not missing, (st.name, missing)


@pytest.mark.parametrize("module", STEP_MODULES)
def test_the_key_covers_the_module_itself_and_what_it_imports(module):
    """The digest maps module names to files: were the names and the files to disagree (a
    package renamed, a folder moved), the digest would cover no module and every key would stop
    changing with the code.  Each step module reaches itself, the step machinery (every module
    of the store's package), and, when it imports the mathematics, more than a handful of it."""
    reached = project_modules(module)
    assert module in reached
    assert {"scarce.tasks.steps", "scarce.tasks.code_digest", "scarce.tasks.errors",
            *STORE_MODULES} <= set(reached)
    if any(m.startswith("scarce.algorithms.") for m in imported_modules(module)):
        assert sum(m.startswith("scarce.algorithms.") for m in reached) >= 3, reached
    assert all(in_packages(m, CODE_PACKAGES) for m in reached)
