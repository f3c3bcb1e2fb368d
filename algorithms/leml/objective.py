"""The LEML objective (Yu, Jain, Kar and Dhillon, ICML 2014, Sec. 2).

    J(W, H) = sum_{(i, j) in Omega} loss(Y_ij, x_i^T W h_j)
              + (lam / 2) (||W||_F^2 + ||H||_F^2)

the trace-norm regulariser in its factored form, since
``||Z||_* = min_{Z = W H^T} (||W||_F^2 + ||H||_F^2) / 2``.
"""

from __future__ import annotations

import numpy as np

from algorithms.leml.data import LEMLData, check_factor
from algorithms.leml.losses import get_loss

__all__ = ["objective"]


def sqnorm(M) -> float:
    """``||M||_F^2`` as a Python float."""
    return float(np.vdot(M, M))


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
    loss = get_loss(loss)
    lam = float(lam)
    k = np.shape(W)[1]
    W = check_factor(W, (data.n_features, k), data.dtype, "W")
    H = check_factor(H, (data.n_labels, k), data.dtype, "H")
    A = data.X @ W
    reg = 0.5 * lam * (sqnorm(W.astype(np.float64)) + sqnorm(H.astype(np.float64)))
    if data.fully_observed and loss.name == "squared":
        A64, H64 = A.astype(np.float64), H.astype(np.float64)
        Y = data.Y
        yy = float(np.vdot(Y.data, Y.data.astype(np.float64)))
        cross = float(np.vdot(A64, Y @ H64))
        quad = float(np.vdot(A64.T @ A64, H64.T @ H64))
        return yy - 2 * cross + quad + reg
    ent = data.observed_entries()
    z = ent.dots(A, H)
    return float(ent.masked(loss.value(ent.y, z)).sum(dtype=np.float64)) + reg
