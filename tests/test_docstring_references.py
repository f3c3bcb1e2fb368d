"""Every cross-reference of the code's docstrings and comments to one of the project's own
modules (``:mod:``, ``:func:``, ``:class:``, ``:meth:``, ``:attr:``, ``:data:``, ``:exc:``,
``:obj:``) names what it refers to by its import name: ``scarce.tasks.steps``, never the folder
path ``tasks.steps``, which no installed package provides, and the module or object exists.

References without a package (``:func:`fit```, ``:class:`InputError```) are the current
module's or a neighbour's, as Sphinx reads them, and are not checked here.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

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

