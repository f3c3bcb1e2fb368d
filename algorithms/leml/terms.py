"""The loss terms over the observed entries that need every decision value, a batch of rows
at a time: the gradient products ``D H`` (W-step) and ``D^T A`` (H-step) and the loss sum.

With ``A = X W`` (n x k) and ``D`` the loss derivatives ``loss'(y_ij, a_i^T h_j)`` on
``Omega`` (zero elsewhere), the W-step's gradient is ``X^T (D H)`` and the H-step's
``D^T A``; the objective sums ``loss(y_ij, a_i^T h_j)`` over ``Omega``.  When the labels are
dense (fully observed, or enough of them observed, see :mod:`scarce.algorithms.leml.data`) these
touch all ``n L`` entries.  Formed whole, the decision values, their derivatives and the
dense label copy were each an ``n x L`` array, held at once (three or four times the label
matrix's dense size).  Here a batch of rows is formed at a time: its labels densified from
the sparse ``Y`` (fully observed) or sliced from the dense entries, its decision values and
derivatives, then added into the ``n x k``, ``L x k`` or scalar results, so the memory added
is a few batches, whatever ``n``.

The batch is :data:`ENTRIES_PER_BATCH` entries, whatever the memory available: the batches
fix the order of additions (``D^T A`` and the loss sum are accumulated batch after batch), so
a batch shrunk to the memory free would give factors whose last bits depend on the machine's
load or on ``SCARCE_MEMORY_LIMIT_GB``, under one store key.  When one batch's arrays do
not fit, the memory guard stops with one line (:func:`scarce.algorithms.memory.check_allocation`).
Results equal the whole-array products up to rounding.  Sparse entries (few observed) are
already ``O(|Omega|)`` and are not batched.

Used by the bound solvers of both half-steps (``w_solver="bound"``, ``h_solver="bound"``, on
the whole data or on each row block) and by the objective of the margin losses and of the
squared loss with missing labels; TRON and the Newton H-step hold their ``n x L`` decision
values and second derivatives over a Newton step instead (their Hessian-vector products
reuse them at every CG iteration).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from scarce.algorithms.leml.data import LEMLData
from scarce.algorithms.leml.losses import derivative_into, get_loss
from scarce.algorithms.memory import check_allocation

__all__ = ["ENTRIES_PER_BATCH", "LossTerms", "batch_rows", "loss_terms"]

#: Most decision values (rows x labels) a batch holds.  Its labels, decision values and
#: derivatives are each that many entries (4 MiB each in float32), small beside the data,
#: and each batch still makes BLAS calls of thousands of rows x ``k`` x hundreds of labels.
ENTRIES_PER_BATCH = 1 << 20
# Arrays of a batch's size alive at once: labels, decision values (then derivatives, in
# place), the loss values and the elementwise functions' temporaries.
_BATCH_COPIES = 4


class LossTerms(NamedTuple):
    """What :func:`loss_terms` computed (None where not asked for)."""

    rows: np.ndarray | None  # D H, n x k
    labels: np.ndarray | None  # D^T A, L x k
    value: float | None  # sum of the loss over Omega, float64


def batch_rows(n_labels: int) -> int:
    """Rows per batch: :data:`ENTRIES_PER_BATCH` entries of ``n_labels`` per row, at least one;
    set by the label count alone, so that the sums (and the factors) are the same bits on any
    machine."""
    return max(1, ENTRIES_PER_BATCH // max(int(n_labels), 1))


def _dense_rows(data: LEMLData):
    """``rows(r0, r1) -> (y, mask)`` for the data's dense labels: fully observed ones
    densified from the sparse ``Y`` a batch at a time (unless a dense copy already exists),
    else the dense entries' rows.  None when the entries are sparse."""
    ent = data.entries
    if ent is None and data.fully_observed:
        Y = data.Y
        return lambda r0, r1: (Y[r0:r1].toarray(), None)
    if not ent.dense:
        return None
    return lambda r0, r1: (ent.y[r0:r1], None if ent.mask is None else ent.mask[r0:r1])


def loss_terms(data: LEMLData, A, H, loss, *, rows: bool = False, labels: bool = False,
               value: bool = False) -> LossTerms:
    """The loss terms at the decision values ``Z = A H^T`` on the observed entries of ``data``.

    Parameters
    ----------
    data : LEMLData
        The whole training data or one row block of it.
    A : ndarray of shape (n, k)
        The embedding ``X W`` of ``data``'s rows.
    H : ndarray of shape (L, k)
    loss : {"squared", "logistic", "sqhinge"} or Loss
    rows : bool
        Compute ``D H`` (n x k), the loss term of the W-step's gradient before ``X^T``.
    labels : bool
        Compute ``D^T A`` (L x k), the loss term of the H-step's gradient.
    value : bool
        Compute ``sum_{(i, j) in Omega} loss(y_ij, z_ij)``, accumulated in float64.

    Returns
    -------
    LossTerms
    """
    loss = get_loss(loss)
    batch = _dense_rows(data)
    if batch is None:  # sparse entries: every product is O(|Omega| k) already
        ent = data.entries
        z = ent.dots(A, H)
        total = float(loss.value(ent.y, z).sum(dtype=np.float64)) if value else None
        D = derivative_into(loss, ent.y, z) if rows or labels else None
        return LossTerms(ent.times(D, H) if rows else None,
                         ent.t_times(D, A) if labels else None, total)
    n, n_labels = A.shape[0], H.shape[0]
    dtype = np.result_type(A, H)
    out_rows = np.empty((n, H.shape[1]), dtype=dtype) if rows else None
    out_labels = np.zeros((n_labels, A.shape[1]), dtype=dtype) if labels else None
    total = 0.0
    step = batch_rows(n_labels)
    check_allocation((min(step, n), n_labels), dtype, copies=_BATCH_COPIES,
                     what="a batch of the loss terms' decision values (rows x labels)",
                     advice="give the process more memory (the batch size is fixed so that "
                     "the factors do not depend on the memory available)")
    Ht = H.T
    for r0 in range(0, n, step):
        r1 = min(r0 + step, n)
        y, mask = batch(r0, r1)
        z = A[r0:r1] @ Ht
        if value:
            v = loss.value(y, z)
            if mask is not None:
                v *= mask
            total += float(v.sum(dtype=np.float64))
            del v
        if rows or labels:
            D = derivative_into(loss, y, z)
            if mask is not None:
                D *= mask
            if rows:
                np.matmul(D, H, out=out_rows[r0:r1])
            if labels:
                out_labels += D.T @ A[r0:r1]
    return LossTerms(out_rows, out_labels, total if value else None)
