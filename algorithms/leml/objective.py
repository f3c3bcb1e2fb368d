"""The LEML objective (Yu, Jain, Kar and Dhillon, ICML 2014, Sec. 2).

    J(W, H) = sum_{(i, j) in Omega} loss(Y_ij, x_i^T W h_j)
              + (lam / 2) (||W||_F^2 + ||H||_F^2)

the trace-norm regulariser in its factored form, since
``||Z||_* = min_{Z = W H^T} (||W||_F^2 + ||H||_F^2) / 2``.
"""

from __future__ import annotations

import numpy as np

from scarce.algorithms.leml.data import LEMLData, check_factor
from scarce.algorithms.leml.losses import get_loss
from scarce.algorithms.leml.terms import loss_terms

__all__ = ["loss_term", "objective", "objective_by_blocks"]

#: Rows of ``X W`` that :func:`loss_term` holds at a time (squared loss, fully observed).
LOSS_ROWS = 1 << 14


def sqnorm(M) -> float:
    """``||M||_F^2`` as a Python float."""
    return float(np.vdot(M, M))


def loss_term(data: LEMLData, W, H, loss) -> float:
    """The loss term of ``J(W, H)`` (no regulariser) on ``data``, accumulated in float64:
    a sum over the rows, so over row blocks too (:func:`objective_by_blocks`).

    For the squared loss on fully observed labels it is expanded as
    ``||Y||^2 - 2 <X W, Y H> + <(X W)^T X W, H^T H>``, never forming ``X W H^T``, and
    ``X W`` is taken :data:`LOSS_ROWS` rows at a time: whole, its float64 copy and
    ``Y H`` were three ``n x k`` arrays held at once (for a full-scale row block the
    highest a worker's memory rose outside a block's read).
    Otherwise it is summed a batch of rows at a time
    (:func:`~scarce.algorithms.leml.terms.loss_terms`).  ``W`` and ``H`` are in ``data``'s dtype.
    """
    loss = get_loss(loss)
    if data.fully_observed and loss.name == "squared":
        H64 = H.astype(np.float64)
        X, Y = data.X, data.Y
        yy = float(np.vdot(Y.data, Y.data.astype(np.float64)))
        cross, gram = 0.0, np.zeros((H.shape[1], H.shape[1]))
        for start in range(0, data.n_samples, LOSS_ROWS):
            rows = slice(start, start + LOSS_ROWS)
            A64 = (X[rows] @ W).astype(np.float64)
            cross += float(np.vdot(A64, Y[rows] @ H64))
            gram += A64.T @ A64
        quad = float(np.vdot(gram, H64.T @ H64))
        return yy - 2 * cross + quad
    return loss_terms(data, data.X @ W, H, loss, value=True).value


def _regulariser(W, H, lam: float) -> float:
    return 0.5 * lam * (sqnorm(W.astype(np.float64)) + sqnorm(H.astype(np.float64)))


def objective(data: LEMLData, W, H, lam: float, loss) -> float:
    """The LEML objective ``J(W, H)`` (Yu et al., Sec. 2), accumulated in float64.

    For the squared loss on fully observed labels the loss term is expanded as
    ``||Y||^2 - 2 <X W, Y H> + <(X W)^T X W, H^T H>``, never forming ``X W H^T``.

    Parameters
    ----------
    data : LEMLData
    W : ndarray of shape (d', k)
    H : ndarray of shape (L, k)
    lam : float
    loss : {"squared", "logistic", "sqhinge"} or Loss

    Returns
    -------
    float
    """
    lam = float(lam)
    k = np.shape(W)[1]
    W = check_factor(W, (data.n_features, k), data.dtype, "W")
    H = check_factor(H, (data.n_labels, k), data.dtype, "H")
    return loss_term(data, W, H, loss) + _regulariser(W, H, lam)


def objective_by_blocks(backend, W, H, lam: float, loss) -> float:
    """:func:`objective` with its loss term summed over row blocks, in block order.

    Each block's term is :func:`loss_term` of its rows, computed where the block lives
    (``backend``: :class:`~scarce.algorithms.leml.h_step.LocalBlocks`, or
    ``tasks.leml_dask.RowBlockBackend`` on Dask workers); the terms are added in block order, so
    any number of workers gives the same bits, and the result equals :func:`objective`
    up to the order of the additions.

    Parameters
    ----------
    backend : object
        The row blocks (``each`` / ``sum`` methods; ``n_features``, ``n_labels`` and
        ``dtype`` attributes).
    W : ndarray of shape (d', k)
    H : ndarray of shape (L, k)
    lam : float
    loss : {"squared", "logistic", "sqhinge"} or Loss

    Returns
    -------
    float
    """
    loss = get_loss(loss)
    lam = float(lam)
    k = np.shape(W)[1]
    W = check_factor(W, (backend.n_features, k), backend.dtype, "W")
    H = check_factor(H, (backend.n_labels, k), backend.dtype, "H")
    terms = backend.sum(backend.each(loss_term, W, H, loss.name))
    return float(terms) + _regulariser(W, H, lam)
