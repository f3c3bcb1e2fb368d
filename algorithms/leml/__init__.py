"""LEML (Yu, Jain, Kar and Dhillon, ICML 2014) and its baselines.

Modules by concern: :mod:`~scarce.algorithms.leml.data` (the training data and its row
blocks), :mod:`~scarce.algorithms.leml.entries` (the observed label entries and the H-step's
label blocks), :mod:`~scarce.algorithms.leml.objective`, :mod:`~scarce.algorithms.leml.w_step` and
:mod:`~scarce.algorithms.leml.h_step` (the two half-steps), :mod:`~scarce.algorithms.leml.predict`
(batched scoring), :mod:`~scarce.algorithms.leml.model` (:class:`LEML`, the method: its step
methods and ``fit``, the loop over them), :mod:`~scarce.algorithms.leml.baselines`,
:mod:`~scarce.algorithms.leml.losses` and :mod:`~scarce.algorithms.leml.solvers` (CG and TRON).

The names below are imported from their modules on first use, so that importing one module
of the package (:mod:`~scarce.algorithms.leml.predict`, which a loaded model scores with) does not
import the estimator and scikit-learn with it.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what each name is: for readers and checkers, and for the step keys' code
    # digest, which finds a module's dependencies in its import statements
    from scarce.algorithms.leml.baselines import BinaryRelevance, ClosedFormLowRank
    from scarce.algorithms.leml.data import (
        LEMLData,
        prepare_data,
        row_block_bounds,
        split_rows,
    )
    from scarce.algorithms.leml.h_step import (
        H_SOLVERS,
        LocalBlocks,
        update_H,
        update_H_bound_by_blocks,
        update_H_by_blocks,
        update_H_newton_by_blocks,
    )
    from scarce.algorithms.leml.model import LEML
    from scarce.algorithms.leml.objective import objective, objective_by_blocks
    from scarce.algorithms.leml.w_step import (
        PRECONDITIONERS,
        W_SOLVERS,
        LocalWOperators,
        WStepProducts,
        solve_w_step,
        update_W,
        w_gradient,
        w_loss_value,
    )

#: The module of each public name (the imports above, as lazy_loader's ``submod_attrs``;
#: that library would need this map and those imports all the same, so it is not used).
SUBMODULE_NAMES = {
    "baselines": ("BinaryRelevance", "ClosedFormLowRank"),
    "data": ("LEMLData", "prepare_data", "row_block_bounds", "split_rows"),
    "h_step": ("H_SOLVERS", "LocalBlocks", "update_H", "update_H_bound_by_blocks",
               "update_H_by_blocks", "update_H_newton_by_blocks"),
    "model": ("LEML",),
    "objective": ("objective", "objective_by_blocks"),
    "w_step": ("PRECONDITIONERS", "W_SOLVERS", "LocalWOperators", "WStepProducts",
               "solve_w_step", "update_W", "w_gradient", "w_loss_value"),
}
_MODULE_OF = {name: module for module, names in SUBMODULE_NAMES.items() for name in names}

__all__ = [
    "LEML",
    "LEMLData",
    "BinaryRelevance",
    "ClosedFormLowRank",
    "H_SOLVERS",
    "PRECONDITIONERS",
    "W_SOLVERS",
    "LocalBlocks",
    "LocalWOperators",
    "WStepProducts",
    "objective",
    "objective_by_blocks",
    "prepare_data",
    "row_block_bounds",
    "solve_w_step",
    "split_rows",
    "update_H",
    "update_H_bound_by_blocks",
    "update_H_newton_by_blocks",
    "update_H_by_blocks",
    "update_W",
    "w_gradient",
    "w_loss_value",
]


class _Package(types.ModuleType):
    """This package, whose ``objective`` stays the function of that name.

    ``objective`` names both a function exported here and its module; the import system binds
    a submodule, once imported (by the estimator, say), to its name in the package, which
    would put the module in the function's place.  That binding is not made for a name of
    :data:`SUBMODULE_NAMES`' (the module stays in ``sys.modules``), so that the name is the
    function whenever it is read.  Importing the module at once would have kept it too, but
    with the losses' scipy.special, which a loaded model's scoring does not need.
    """

    def __setattr__(self, name: str, value) -> None:
        if (name in _MODULE_OF and isinstance(value, types.ModuleType)
                and value.__name__ == f"{self.__name__}.{name}"):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_MODULE_OF})
