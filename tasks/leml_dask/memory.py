"""Bytes the row blocks and the solvers' arrays take, and the check that they fit the workers.

Refuses, before anything is sent, row blocks and working arrays that would not fit a worker's
memory limit, naming the option to change.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from scarce.algorithms.leml.data import (
    LEMLData,
)
from scarce.tasks.leml_dask.cluster import cluster_workers


def prepared_nbytes(n_rows: int, n_features: int, n_labels: int, *, nnz_x: int, nnz_y: int,
                    nnz_mask: int, labels: str, index_dtype: str | None, dtype,
                    fit_intercept: bool) -> int:
    """Bytes of a prepared row block (:func:`~scarce.algorithms.leml.data.prepare_rows`) from its
    shape and stored entries.

    ``n_features`` counts the constant feature of an intercept and ``nnz_x`` the stored
    entries of ``X`` without it.  ``X`` and its transpose are each CSR (values and int32
    column indices per entry, a row pointer); fully observed labels a CSR ``Y``; observed
    entries kept sparse (``labels="sparse"``) hold per entry the column, the row, the value,
    the transposed order (int64) and the transposed row index; dense ones an ``n x L``
    array of values and one of the mask.
    """
    item, idx = np.dtype(dtype).itemsize, 4
    nnz_x += n_rows if fit_intercept else 0
    size = 2 * nnz_x * (item + idx) + (n_rows + n_features + 2) * idx
    if labels == "full":
        size += nnz_y * (item + idx) + (n_rows + 1) * idx
    elif labels == "dense":
        size += 2 * n_rows * n_labels * item
    else:
        i = np.dtype(index_dtype or "int32").itemsize
        size += nnz_mask * (3 * i + item + 8) + (n_rows + n_labels + 2) * i
    return int(size)


def data_nbytes(data: LEMLData) -> int:
    """The bytes of every array a prepared :class:`LEMLData` holds (its X, X transposed, Y
    and observed entries)."""
    def arrays(value):
        if value is None:
            return
        if sp.issparse(value):
            yield from (value.data, value.indices, value.indptr)
        elif isinstance(value, np.ndarray):
            yield value
        else:
            for v in vars(value).values():
                if isinstance(v, np.ndarray):
                    yield v

    return int(sum(a.nbytes for part in (data.X, data.Xt, data.Y, data.entries)
                   for a in arrays(part)))


def working_nbytes(block_rows: list[int], *, n_features: int, n_labels: int, rank: int,
                   dtype, fully_observed: bool) -> int:
    """Bytes of the rank-``k`` working arrays a worker holding row blocks of ``block_rows``
    rows needs on top of the blocks' data, an upper estimate: per block ``A_b = X_b W`` and
    a product of its shape (``2 n_b x k``), the ``d' x k`` term and the ``L x k`` label
    product it returns, plus the factors and one more of each; with missing labels, one
    label block of the H-step's per-label Gram matrices with a part per block, built and
    solved (:func:`~scarce.algorithms.leml.h_step.label_block_nbytes`, the label blocks'
    own rule)."""
    from scarce.algorithms.leml.h_step import label_block_nbytes

    item, k, held = np.dtype(dtype).itemsize, int(rank), len(block_rows)
    size = sum(2 * n * k * item for n in block_rows)
    size += (held + 2) * (n_features + n_labels) * k * item
    if not fully_observed:
        size += label_block_nbytes(n_labels, k, dtype, parts=held,
                                   rows=max(block_rows, default=1))
    return int(size)


#: Arrays of ``d' x k`` (in the factors' dtype) that the process driving a W-step holds at
#: once, an upper count: the start and the gradient, CG's solution, residual, direction and
#: product, the Hessian product's sum and the term being added to it, the step and the new
#: ``W``, and for the margin losses TRON's trial point and its gradient; and arrays of
#: ``L x k`` (float64): ``H``, the H-step's right-hand side and its sums.  A test traces the
#: peak of a start, a W-step, an H-step and the objective driven from one process against
#: this count (``tests/tasks/test_leml_dask.py``).
DRIVER_W_ARRAYS, DRIVER_H_ARRAYS = 16, 4


def driver_nbytes(*, n_features: int, n_labels: int, rank: int, dtype) -> int:
    """Bytes of the solver's arrays in the process that drives a step (the flow's, or with
    ``compute.solvers: worker`` a worker's), an upper estimate: :data:`DRIVER_W_ARRAYS` of
    ``d' x k`` and :data:`DRIVER_H_ARRAYS` of ``L x k``."""
    k = int(rank)
    return int(DRIVER_W_ARRAYS * n_features * k * np.dtype(dtype).itemsize
               + DRIVER_H_ARRAYS * n_labels * k * 8)


def check_worker_memory(client, block_workers: list[str], sizes: list[int], *,
                        blocks: int, working=None, driver: str | None = None,
                        driver_bytes: int = 0) -> None:
    """Refuse, before anything is sent, row blocks that would not fit their workers.

    Each worker holds the blocks placed on it (``block_workers``, sizes in ``sizes``) and,
    when ``working`` is given (a function of the indices of a worker's blocks, such as
    :func:`working_nbytes` of their rows), the step's rank-``k`` working arrays; when that
    exceeds :data:`~scarce.algorithms.memory.HEADROOM` of the worker's memory limit (the
    ``--memory-limit`` of ``dask worker``, the ``memory_limit`` of a LocalCluster; none set:
    no check), :class:`~scarce.algorithms.memory.MemoryBudgetError` says in one line which option
    to change.  The worker ``driver`` (the one this step runs on, :func:`this_worker`) holds
    ``driver_bytes`` more: the solver's arrays (:func:`driver_nbytes`).
    """
    from scarce.algorithms.memory import HEADROOM, MemoryBudgetError, format_bytes

    limits = {addr: info.get("memory_limit") or 0
              for addr, info in cluster_workers(client).items()}
    held: dict[str, list[int]] = {}
    for b, worker in enumerate(block_workers):
        held.setdefault(worker, []).append(b)
    if driver in limits:
        held.setdefault(driver, [])
    for worker, mine in held.items():
        limit = limits.get(worker, 0)
        data = sum(sizes[b] for b in mine)
        extra = 0 if working is None or not mine else int(working(mine))
        solver = driver_bytes if worker == driver else 0
        if limit and data + extra + solver > HEADROOM * limit:
            arrays = f", {format_bytes(extra)} of working arrays" if extra else ""
            arrays += (f", {format_bytes(solver)} of the solver's arrays (it drives the step:"
                       " compute.solvers worker)" if solver else "")
            raise MemoryBudgetError(
                f"LEML on Dask: worker {worker} would hold {len(mine)} row block(s) of the "
                f"training data, {format_bytes(data)}{arrays}, over {HEADROOM:.0%} of its "
                f"memory limit {format_bytes(limit)}: add workers (compute.workers, or more "
                f"`dask worker` processes) or raise their --memory-limit; compute.row_blocks "
                f"({blocks} over {len(limits)} workers now) spreads the blocks more evenly"
                + ("; a lower model.rank shrinks the working arrays" if extra or solver
                   else "")
                + ("; compute.solvers flow keeps the solver's arrays in the flow's process"
                   if solver else ""))
