"""Benchmarks: ``scarce bench NAME [options]`` prints a table and writes it as Parquet.

Each module here has ``add_arguments(parser)`` and ``run(args) -> pandas.DataFrame``;
a module with ``USES_PREFECT = False`` runs without a Prefect API of its own; a module's
``check(args)``, if it has one, checks what its parser cannot (a flow's config with ``--set``,
files named by options) before a Prefect API starts and before any work, raising
:class:`~scarce.tasks.errors.InputError` (``run`` may check again: it is also called alone);
the command line prints the table (markdown, for README) and saves it under
``data/bench/<name>-<timestamp>.parquet``.  Timings are reported as ratios to a
peer measured in the same run, since these machines are shared and noisy.

:data:`BENCHMARKS` is the one registry of the names ``scarce bench`` knows; a benchmark's
description in ``scarce bench --help`` is the first line of its module's docstring.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import tokenize
from dataclasses import dataclass
from types import ModuleType


@dataclass(frozen=True)
class Benchmark:
    """A benchmark ``scarce bench NAME`` runs: its name and its module, imported only to run
    it or to show its options (so ``scarce --help`` imports no benchmark)."""

    name: str
    module: str

    @property
    def description(self) -> str:
        """The summary line of the module's docstring, read from its source."""
        return docstring_summary(self.module)

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


@functools.cache
def docstring_summary(module: str) -> str:
    """The first paragraph of ``module``'s docstring as one line, read without importing the
    module (its first tokens only).  Read once per process: every command line built asks for
    each benchmark's summary twice, and finding and tokenizing every benchmark's module was
    most of the time of building it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise ValueError(f"no module {module!r}")
    with open(spec.origin, "rb") as f:
        for tok in tokenize.tokenize(f.readline):
            if tok.type in (tokenize.ENCODING, tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE):
                continue
            if tok.type != tokenize.STRING:
                return ""
            doc = inspect.cleandoc(ast.literal_eval(tok.string))
            return " ".join(doc.split("\n\n", 1)[0].split()).replace("``", "`")
    return ""


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in (
        Benchmark("leml", "scarce.bench.leml"),
        Benchmark("leml-blocks", "scarce.bench.leml_blocks"),
        Benchmark("baselines", "scarce.bench.baselines"),
        Benchmark("relations", "scarce.bench.relations"),
        Benchmark("strip", "scarce.bench.strip"),
        Benchmark("overhead", "scarce.bench.overhead"),
        Benchmark("workers", "scarce.bench.workers"),
        Benchmark("apply", "scarce.bench.apply"),
        Benchmark("load", "scarce.bench.load"),
        Benchmark("store", "scarce.bench.store"),
        Benchmark("latency", "scarce.bench.latency"),
    )
}
