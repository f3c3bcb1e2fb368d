"""LEML's factors before they are computed: whether they fit in memory, and the margin start.

Apart from the estimator so that a driver checks the factors' memory from a file's header (the
sizes it declares) without importing the estimator and scikit-learn.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import numpy as np

from scarce.algorithms.memory import check_allocation

if TYPE_CHECKING:
    from scarce.algorithms.leml.data import LEMLData

__all__ = ["check_factor_memory", "check_factors", "margin_factors"]

log = logging.getLogger("scarce.algorithms.leml.model")  # the estimator's log, as before

# Dense arrays the alternation holds at rank k: W and the conjugate-gradient vectors of a W-step
# (W, gradient, residual, direction, Hessian-vector product: 5 of d' x k, and one spare), the
# float64 draw of H and its scaled copy (2 of L x k in float64), X W with a product of the
# same shape (2 of n x k), and the H-step's k x k systems (a Gram matrix and its solve: 2, or
# one per label when labels are missing).
_W_COPIES, _H_COPIES_F64, _N_COPIES, _GRAM_COPIES = 6, 2, 2, 2


def check_factor_memory(n_samples: int, n_features: int, n_labels: int, rank: int, dtype,
                        fully_observed: bool = True, what: str = "") -> None:
    """Stop with one line (:class:`~scarce.algorithms.memory.MemoryBudgetError`) unless the factors
    of rank ``rank`` fit for data of these sizes (``n_features`` with the intercept column):
    what :func:`check_factors` checks, for a caller that knows the sizes before the data
    (a file's header).  ``what`` opens the message (the file the sizes come from)."""
    d, n_labels, n = int(n_features), int(n_labels), int(n_samples)
    item = np.dtype(dtype).itemsize
    grams = _GRAM_COPIES if fully_observed else n_labels + 1
    elements = (_W_COPIES * d * rank + _H_COPIES_F64 * n_labels * rank * 8 / item
                + _N_COPIES * n * rank + grams * rank * rank)
    check_allocation((int(math.ceil(elements)),), dtype,
                     what=f"{what}LEML factors at rank {rank:,} (W {d:,} x {rank:,} with the "
                          f"W-step's vectors, H {n_labels:,} x {rank:,}, X W {n:,} x {rank:,}, "
                          f"{grams} of {rank:,} x {rank:,} in the H-step)",
                     advice="lower the rank")


def check_factors(data: LEMLData, rank: int) -> None:
    """Stop with one line (:class:`~scarce.algorithms.memory.MemoryBudgetError`) before allocating
    factors that cannot fit, and warn when the rank exceeds ``min(d', L)`` (``Z = W H^T``
    cannot use the extra columns, which only cost time and memory)."""
    d, n_labels = data.n_features, data.n_labels
    check_factor_memory(data.n_samples, d, n_labels, rank, data.dtype, data.fully_observed)
    if rank > min(d, n_labels):
        log.warning("rank %d exceeds min(features + intercept, labels) = %d: Z = W H^T has rank "
                    "at most %d, the other columns only cost time and memory", rank,
                    min(d, n_labels), min(d, n_labels))


def margin_factors(W, H, n_labels: int):
    """``[sqrt(2) W, -c e]`` and ``[sqrt(2) H, 1/c]`` with ``c = L^(1/4)``: the squared-loss
    fit ``Z = X W H^T`` of the 0/1 labels as ``{-1, +1}`` margins, ``2 Z - 1`` (``e`` is the
    unit vector of the intercept row, the last row of ``W``)."""
    c = n_labels ** 0.25
    W0 = np.zeros((W.shape[0], W.shape[1] + 1), dtype=W.dtype)
    H0 = np.zeros((H.shape[0], H.shape[1] + 1), dtype=H.dtype)
    W0[:, :-1] = math.sqrt(2) * W
    H0[:, :-1] = math.sqrt(2) * H
    W0[-1, -1] = -c
    H0[:, -1] = 1 / c
    return W0, H0
