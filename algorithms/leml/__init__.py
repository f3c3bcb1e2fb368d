"""LEML (Yu, Jain, Kar and Dhillon, ICML 2014) and its baselines.

Modules by concern: :mod:`~algorithms.leml.data` (the training data and its observed
label entries), :mod:`~algorithms.leml.objective`, :mod:`~algorithms.leml.w_step` and
:mod:`~algorithms.leml.h_step` (the two half-steps), :mod:`~algorithms.leml.predict`
(batched scoring), :mod:`~algorithms.leml.model` (:class:`LEML`, the method: its step
methods and ``fit``, the loop over them), :mod:`~algorithms.leml.baselines`,
:mod:`~algorithms.leml.losses` and :mod:`~algorithms.leml.solvers` (CG and TRON).
"""

from scarce.algorithms.leml.baselines import BinaryRelevance, ClosedFormLowRank
from scarce.algorithms.leml.data import LEMLData, prepare_data, row_block_bounds, split_rows
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
