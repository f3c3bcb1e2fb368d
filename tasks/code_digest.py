"""A step's code digest: the source of every project module its code can reach.

The reached modules are found by reading the import statements of the source files (nothing is
imported), from the module that declares the step and, transitively, through every module of
:data:`CODE_PACKAGES` it imports, so a helper module called by a step is covered without being
named anywhere.  A step's key holds the digest (:meth:`scarce.tasks.steps.Step.key`), so an edit to
any of those modules gives the step new entries.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from collections.abc import Iterator
from pathlib import Path

from scarce.algorithms import pyast

# Packages whose modules enter a step's code digest: the mathematics and the steps.  Third-party
# code is covered by the package versions each run manifest records.
PACKAGE = "scarce"
CODE_PACKAGES = ("scarce.algorithms", "scarce.tasks")
# The folder holding the package's folders (algorithms/, tasks/, ...): the repository in a
# checkout, site-packages/scarce once installed.
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def in_packages(name: str, packages: tuple[str, ...]) -> bool:
    """True when module ``name`` is one of ``packages`` or inside one of them."""
    return any(name == p or name.startswith(p + ".") for p in packages)


def _module_file(name: str, root: Path) -> Path | None:
    """The source file of module ``name`` (``scarce.<folder>.<...>``) below ``root``, where each
    subpackage of ``scarce`` is a folder of its own (a package's ``__init__.py``); None for any
    other name."""
    parts = name.split(".")
    if len(parts) < 2 or parts[0] != PACKAGE:
        return None
    base = root.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _statements(tree: ast.AST) -> Iterator[ast.AST]:
    """Every statement of ``tree``, at any depth (in functions, classes, branches, handlers and
    match cases).  An import is a statement, so none is missed; the expressions, most of a
    file's nodes, are not visited (``ast.walk`` through them was most of the reading's cost)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        for value in node.__dict__.values():
            if isinstance(value, list):
                todo.extend(v for v in value
                            if isinstance(v, (ast.stmt, ast.excepthandler, ast.match_case)))


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module name an import statement of ``tree`` may load, anywhere in the file
    (function-level imports included); ``from a import b`` yields ``a`` and ``a.b``."""
    out: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                out.update(".".join(parts[: i + 1]) for i in range(len(parts)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *(node.module.split(".") if node.module else [])])
            else:
                base = node.module or ""
            parts = base.split(".")
            out.update(".".join(parts[: i + 1]) for i in range(len(parts)))
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def imported_modules(module: str, root: Path = PROJECT_ROOT) -> set[str]:
    """Names of the modules below ``root`` that the source of ``module`` imports (directly)."""
    path = _module_file(module, root)
    if path is None:
        raise ValueError(f"no module {module!r} below {root}")
    names = _names_imported_by(module, path.name == "__init__.py", path.read_bytes(), str(path))
    return {n for n in names if n != module and _module_file(n, root) is not None}


@functools.lru_cache(maxsize=1024)
def _names_imported_by(module: str, is_init: bool, source: bytes, filename: str) -> frozenset:
    """The names the source imports, memoised on the source bytes themselves (so an edited
    file is parsed again, never served from the memo): every step of a module computes the
    same digest, and parsing is most of its cost."""
    tree = pyast.parse(source, filename=filename)
    return frozenset(_imported_names(tree, module, is_init))


def project_modules(module: str, root: Path = PROJECT_ROOT) -> list[str]:
    """``module`` and every module of :data:`CODE_PACKAGES` it imports, transitively.

    Read from the import statements of the source files below ``root`` (nothing is imported),
    so a helper module called by a step -- ``algorithms/strip/_kernels.py`` below the closure
    counting, say -- is found without being named anywhere.
    """
    return sorted(_reached_sources(module, root))


def _reached_sources(module: str, root: Path) -> dict[str, bytes]:
    """Each module :func:`project_modules` finds, with the source bytes its imports were read
    from.  Every name is looked up below ``root`` once per call: a module's imported names are
    mostly the same few modules, and looking each up again (a ``stat`` or two per name, for
    every module that imports it) was most of the digest's cost."""
    files: dict[str, Path | None] = {}

    def file_of(name: str) -> Path | None:
        if name not in files:
            files[name] = _module_file(name, root)
        return files[name]

    seen: dict[str, bytes] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = file_of(name)
        if path is None:
            continue
        source = seen[name] = path.read_bytes()
        names = _names_imported_by(name, path.name == "__init__.py", source, str(path))
        todo += [d for d in names if d != name and d not in seen
                 and in_packages(d, CODE_PACKAGES) and file_of(d) is not None]
    return seen


def code_digest(module: str, root: Path = PROJECT_ROOT) -> str:
    """sha256 over the name and source bytes of :func:`project_modules` of ``module`` (the
    bytes whose imports were read)."""
    h = hashlib.sha256()
    for name, source in sorted(_reached_sources(module, root).items()):
        h.update(name.encode() + b"\0")
        h.update(source)
        h.update(b"\0")
    return h.hexdigest()
