"""Python sources parsed once per test process, for the tests that scan the code.

Several test modules read every module of the project (imports, file modes, fsyncs, YAML
loads, strings naming our modules); each parsing every file again was most of their time.
A tree is kept per source bytes (an edited file is parsed again) and must be read, never
changed: the next test gets the same objects.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def parsed(path: Path) -> ast.Module:
    """The syntax tree of the file ``path`` (shared: do not change it)."""
    return _parse(Path(path).read_bytes(), str(path))


def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of :func:`parsed` ``(path)``, in :func:`ast.walk` order."""
    return _walk(Path(path).read_bytes(), str(path))


@functools.lru_cache(maxsize=1024)
def _parse(source: bytes, filename: str) -> ast.Module:
    return ast.parse(source, filename=filename)


@functools.lru_cache(maxsize=1024)
def _walk(source: bytes, filename: str) -> tuple[ast.AST, ...]:
    return tuple(ast.walk(_parse(source, filename)))
