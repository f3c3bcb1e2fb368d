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

#: Files still referring by the folder path, in parts of the code other branches were changing
#: when the rest were fixed; each is fixed with the move to ``scarce.``, then struck from here
#: (``test_the_files_left_to_fix_still_need_it`` says when).
LEFT_TO_FIX = frozenset({
    "algorithms/leml/__init__.py", "algorithms/leml/data.py", "algorithms/leml/h_step.py",
    "algorithms/leml/losses.py", "algorithms/leml/model.py", "algorithms/leml/objective.py",
    "algorithms/leml/predict.py", "algorithms/leml/terms.py", "algorithms/leml/w_step.py",
    "algorithms/strip/_kernels.py", "algorithms/strip/closure.py",
    "algorithms/strip/features.py", "algorithms/strip/pipeline.py",
    "bench/baselines.py", "bench/leml.py", "bench/leml_blocks.py", "bench/leml_cluster.py",
    "bench/leml_partition.py", "bench/leml_peer_child.py", "bench/leml_peers.py",
    "bench/relations.py", "bench/store.py", "bench/strip.py", "bench/workers.py",
    "flows/leml.py", "flows/relations.py", "flows/strip.py",
    "tasks/leml.py", "tasks/leml_files.py", "tasks/leml_table.py", "tasks/steps.py",
    "tasks/store.py", "tasks/strip.py",
    "tasks/leml_dask/__init__.py", "tasks/leml_dask/backend.py", "tasks/leml_dask/clients.py",
    "tasks/leml_dask/cluster.py", "tasks/leml_dask/memory.py", "tasks/leml_dask/partition.py",
    "tasks/leml_dask/scoring.py", "tasks/leml_dask/transport.py",
    "tasks/readers/arff.py", "tasks/readers/jsonl.py", "tasks/readers/names.py",
    "tasks/readers/semeval.py", "tasks/readers/table.py", "tasks/readers/text.py",
    "tasks/readers/xmc.py",
})


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


@pytest.mark.parametrize("path", [p for p in sources()
                                  if p.relative_to(REPO).as_posix() not in LEFT_TO_FIX],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_reference_to_our_code_names_an_importable_module_or_object(path):
    assert not broken(path), "\n".join(broken(path))


def test_the_files_left_to_fix_still_need_it():
    """A file of ``LEFT_TO_FIX`` whose references all resolve is struck from the list, so the
    check above covers it from then on."""
    fixed = sorted(f for f in LEFT_TO_FIX if not (REPO / f).is_file() or not broken(REPO / f))
    assert not fixed, f"no longer to fix: strike {fixed} from LEFT_TO_FIX"
