"""Every cross-reference of the code's docstrings and comments to one of the project's own
modules (``:mod:``, ``:func:``, ``:class:``, ``:meth:``, ``:attr:``, ``:data:``, ``:exc:``,
``:obj:``) names what it refers to by its import name: ``scarce.tasks.steps``, never the folder
path ``tasks.steps``, which no installed package provides, and the module or object exists.

The same for the Python code written as text: a string of the code or the tests that a child
process runs (``python -c``, a script written out) and the code blocks of the docs import the
project as ``scarce.*``.  Run from the checkout, ``from flows.cli import main`` still imported,
a second copy of the module beside ``scarce.flows.cli``; from anywhere else it fails.

References without a package (``:func:`fit```, ``:class:`InputError```) are the current
module's or a neighbour's, as Sphinx reads them, and are not checked here.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.sources import nodes

REPO = Path(__file__).resolve().parents[1]
#: The folders installed under the import name ``scarce`` (setup.py's package-dir).
PACKAGES = ("algorithms", "tasks", "flows", "bench", "configs")
ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|obj|exc):`~?([A-Za-z_][\w.]*)`")



def sources() -> list[Path]:
    """The project's Python files: the packages under ``scarce`` and the package itself."""
    return sorted(p for folder in (*PACKAGES, "scarce") for p in (REPO / folder).rglob("*.py"))


def references(text: str) -> list[tuple[int, str]]:
    """(line, target) of every role whose target is one of the project's own names."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in ROLE.finditer(line):
            if m.group(1).split(".")[0] in (*PACKAGES, "scarce"):
                out.append((number, m.group(1)))
    return out


def resolves(target: str) -> bool:
    """Whether ``target`` is an importable module, or an object reached from one by
    attributes (a function, a class, a method or class attribute)."""
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def broken(path: Path, text: str | None = None) -> list[str]:
    """``file:line: target (why)`` for each reference of ``path`` (or of ``text``, given as that
    file's) that does not resolve."""
    rel = path.relative_to(REPO).as_posix()
    out = []
    text = path.read_text(encoding="utf-8") if text is None else text
    for number, target in references(text):
        if not target.startswith("scarce."):
            out.append(f"{rel}:{number}: {target} (the import name is scarce.{target})")
        elif not resolves(target):
            out.append(f"{rel}:{number}: {target} (no such module or object)")
    return out


def test_the_checker_tells_an_old_name_and_a_missing_object_from_a_good_reference():
    assert resolves("scarce.tasks.errors") and resolves("scarce.tasks.errors.InputError")
    assert resolves("scarce.flows.cli.main")
    assert not resolves("scarce.tasks.errors.NoSuchError")
    assert not resolves("scarce.no_such_module")
    text = ('"""See :mod:`tasks.errors`, :class:`~scarce.tasks.errors.Nope`,\n'
            ':func:`scarce.flows.cli.main` and :func:`fit`."""\n')
    assert broken(REPO / "tasks" / "sample.py", text) == [
        "tasks/sample.py:1: tasks.errors (the import name is scarce.tasks.errors)",
        "tasks/sample.py:1: scarce.tasks.errors.Nope (no such module or object)"]


@pytest.mark.parametrize("path", sources(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_reference_to_our_code_names_an_importable_module_or_object(path):
    assert not broken(path), "\n".join(broken(path))



def old_imports(code: str) -> list[str]:
    """The modules that Python source ``code`` imports by a folder path of ours
    (``flows.cli``), not by the import name; none when ``code`` is not Python."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module)
    return [n for n in names if n.split(".")[0] in PACKAGES]


MINUS_M = re.compile(r"(?:^|[\s\"'])-m\s+([A-Za-z_][\w.]*)")


def old_runs(text: str) -> list[str]:
    """The modules of ours that ``text`` runs (``python -m``) by a folder path, not by the
    import name."""
    return [m for m in MINUS_M.findall(text) if m.split(".")[0] in PACKAGES]


def code_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string literal of a Python file that could be code (it says
    ``import``)."""
    return [(node.lineno, node.value) for node in nodes(path)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and ("import" in node.value or "-m " in node.value)]


FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
PYTHON_C = re.compile(r"python3? -c (\"[^\"]*\"|'[^']*')")


def doc_code(text: str) -> list[str]:
    """The Python code of a Markdown page: its fenced blocks, and the code of each
    ``python -c "..."`` in them or in its text."""
    blocks = FENCE.findall(text)
    return blocks + [m.group(1)[1:-1] for m in PYTHON_C.finditer(text)]


def _old(*parts: str) -> str:
    """An old name spelled in parts: tests/flows/test_layers.py refuses a string that is a bare
    module name of ours, and this file's examples are such names."""
    return ".".join(parts)


def test_the_code_check_finds_an_old_import_in_a_string_and_in_a_doc_block(tmp_path):
    assert old_imports("import sys, tests.flows.sample_flow; from flows.cli import main") == [
        _old("flows", "cli")]
    assert old_imports("import bench.overhead\nfrom scarce.flows import cli") == [
        _old("bench", "overhead")]
    assert old_imports("from scarce.flows.cli import main") == []
    assert old_imports("the tasks import each other") == []  # not Python
    sample = tmp_path / "sample.py"
    sample.write_text('CODE = "from tasks.store import Store"\n')
    assert code_strings(sample) == [(1, "from tasks.store import Store")]
    page = ('Run\n\n```python\nfrom algorithms.leml import LEML\n```\n\n'
            'or `python -c "import flows.cli"`.\n')
    assert [old_imports(code) for code in doc_code(page)] == [[_old("algorithms", "leml")],
                                                              [_old("flows", "cli")]]
    assert old_runs("python -m bench.overhead --quick") == [_old("bench", "overhead")]
    assert old_runs("python -m scarce.flows.cli; -m pytest") == []


def pages() -> list[Path]:
    """The Markdown pages of the project (the dated journal included: its commands are run
    again)."""
    return sorted([*REPO.glob("*.md"), *(REPO / "docs").rglob("*.md")])


#: (file, module) of a string that imports a folder name on purpose, and why.
ON_PURPOSE = {
    ("tests/flows/test_wheel.py", "tasks"): "a user's own tasks.py beside the installed scarce",
    **{("tests/test_docstring_references.py", _old(*name)): "this check's own examples"
       for name in (("flows", "cli"), ("bench", "overhead"), ("tasks", "store"))},
}


@pytest.mark.parametrize("path", [*sources(), *sorted((REPO / "tests").rglob("*.py"))],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_code_in_a_string_imports_the_project_by_its_import_name(path):
    rel = path.relative_to(REPO).as_posix()
    bad = [f"{number}: {name}" for number, code in code_strings(path)
           for name in [*old_imports(code), *old_runs(code)] if (rel, name) not in ON_PURPOSE]
    assert not bad, f"{path.relative_to(REPO)}: the import name is scarce.<name>: {bad}"


@pytest.mark.parametrize("path", pages(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_docs_code_imports_the_project_by_its_import_name(path):
    text = path.read_text(encoding="utf-8")
    bad = [name for code in doc_code(text) for name in old_imports(code)] + old_runs(text)
    assert not bad, f"{path.relative_to(REPO)}: the import name is scarce.<name>: {bad}"
