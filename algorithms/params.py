"""A declared parameter of an estimator: its default, the kind of value it takes, its bounds.

An estimator's parameters are declared once in a table of these (``algorithms/leml/params.py``,
``algorithms/relations/params.py``), a module that imports nothing heavy: the estimator's
signature and checks read it, and so does the flow's config schema (its defaults and pydantic
bounds), which a command validates before it imports the estimator.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["AUTO", "Param"]

#: The value of a parameter that leaves the choice to the estimator (``squared_init_iter``,
#: ``w_solver``, ``h_solver`` of LEML).
AUTO = "auto"


@dataclass(frozen=True)
class Param:
    """One parameter: its default, what kind of value it takes and its bounds.

    ``kind`` is ``count`` (an integer, never a bool), ``real`` (a finite number), ``bool``,
    ``choice`` (one of ``choices``) or ``count_or_auto`` (a count, or :data:`AUTO`);
    ``optional``: ``None`` too.
    """

    default: Any
    kind: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple = field(default=())
    optional: bool = False  # None is a value too (``null`` in a config)

    def bounds(self) -> dict[str, float]:
        """The bounds as pydantic's ``Field`` arguments (``ge``, ``gt``, ``le``, ``lt``)."""
        return {k: v for k, v in (("ge", self.ge), ("gt", self.gt), ("le", self.le),
                                  ("lt", self.lt)) if v is not None}

    def holds(self, value: Any) -> bool:
        """Whether ``value`` is of this kind and within the bounds."""
        if value is None and self.optional:
            return True
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if self.kind == "bool":
            return isinstance(value, bool | np.bool_)
        if self.kind == "count_or_auto" and value == AUTO:
            return True
        if self.kind in ("count", "count_or_auto"):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool):
                return False
        elif not isinstance(value, numbers.Real) or isinstance(value, bool) or not (
                math.isfinite(value)):
            return False
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))

    def expected(self) -> str:
        """What a value must be, in words (for the error that names the parameter)."""
        if self.kind == "choice":
            return f"one of {self.choices}"
        if self.kind == "bool":
            return "True or False"
        if self.kind in ("count", "count_or_auto"):
            word = {0: "a non-negative integer", 1: "a positive integer"}.get(
                self.ge, f"an integer of at least {self.ge:g}")
            return word + (f" or {AUTO!r}" if self.kind == "count_or_auto" else "")
        if self.gt == 0 and self.lt is None:
            return "a positive finite number"
        low = f"[{self.ge:g}" if self.ge is not None else f"({self.gt:g}"
        high = f"{self.le:g}]" if self.le is not None else f"{self.lt:g})"
        return f"in {low}, {high}"
