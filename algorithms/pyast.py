"""``ast.parse`` under one process-wide lock.

CPython 3.11 before 3.11.8 tracks the AST converter's recursion depth in state shared by the
whole interpreter, so two threads parsing at once can fail with ``SystemError: AST
constructor recursion depth mismatch``.  Prefect runs a flow's tasks in threads, and scarce
parses Python source inside them (a step's code digest, an estimator's parameter reads, a
table cell written as a Python literal): every parse of the project goes through
:func:`parse` (``tests/test_layers.py`` checks that no module calls ``ast.parse`` itself).

The cyclic garbage collector is paused while a file parses: the parser allocates a node per
token or so, and the collections those allocations set off each traverse the whole heap of the
process (Prefect, pandas and scikit-learn, once imported): longer than the parse itself when a
step's code digest read the project's sources.  A syntax tree holds no reference cycles (no
node refers to its parent), so reference counting frees it.
"""

from __future__ import annotations

import ast
import gc
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """:func:`ast.parse`, one thread at a time, without a garbage collection."""
    with _LOCK:
        enabled = gc.isenabled()
        gc.disable()
        try:
            return ast.parse(source, filename=filename, mode=mode)
        finally:
            if enabled:
                gc.enable()
