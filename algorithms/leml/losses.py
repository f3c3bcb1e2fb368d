"""Loss functions of LEML: value and first two derivatives in the decision value.

Every loss is ``loss(y, z)`` with ``y`` the observed label in ``{0, 1}`` and ``z``
the decision value ``x_i^T W h_j``; all functions are elementwise over arrays of
observed entries (any shape, ``y`` and ``z`` broadcast) and keep the dtype of
``z`` (float32 stays float32).

* ``squared``: ``(z - y)^2`` on the ``{0, 1}`` targets themselves, so the
  natural decision threshold is 0.5.  This is the paper's squared loss
  ``l(a, b) = (a - b)^2`` and keeps ``Y`` sparse: absent labels are zeros.
* ``logistic``: ``log(1 + exp(-s z))`` and
* ``sqhinge``: ``max(0, 1 - s z)^2`` (squared hinge, L2-loss SVM),
  with the margin label ``s = 2 y - 1`` in ``{-1, +1}``; threshold 0.

The second derivative of the squared hinge is the generalised one used by
LIBLINEAR's L2-loss SVM (Lin, Weng and Keerthi, 2008): ``2`` where
``1 - s z > 0`` and ``0`` elsewhere.

References
----------
H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
with Missing Labels", ICML 2014, Sec. 2 (the losses) and Sec. 3.
C.-J. Lin, R. C. Weng and S. S. Keerthi, "Trust Region Newton Method for
Large-Scale Logistic Regression", JMLR 9, 2008.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

__all__ = ["Loss", "LOSSES", "get_loss"]


def _margin_label(y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``s = 2 y - 1`` in the dtype of ``z``."""
    y = np.asarray(y, dtype=np.asarray(z).dtype)
    return 2 * y - 1


def _squared_value(y, z):
    r = z - np.asarray(y, dtype=z.dtype)
    return r * r


def _squared_d1(y, z):
    return 2 * (z - np.asarray(y, dtype=z.dtype))


def _squared_d2(y, z):
    return np.full(np.broadcast_shapes(np.shape(y), z.shape), 2, dtype=z.dtype)


def _logistic_value(y, z):
    return np.logaddexp(0, -_margin_label(y, z) * z).astype(z.dtype, copy=False)


def _logistic_d1(y, z):
    s = _margin_label(y, z)
    return -s * expit(-s * z)


def _logistic_d2(y, z):
    p = expit(z)
    return p * (1 - p)


def _sqhinge_value(y, z):
    m = np.maximum(1 - _margin_label(y, z) * z, 0)
    return m * m


def _sqhinge_d1(y, z):
    s = _margin_label(y, z)
    return -2 * s * np.maximum(1 - s * z, 0)


def _sqhinge_d2(y, z):
    active = (1 - _margin_label(y, z) * z) > 0
    return (2 * active).astype(z.dtype)


@dataclass(frozen=True)
class Loss:
    """A twice (generalised-)differentiable loss ``l(y, z)``.

    Attributes
    ----------
    name : str
        ``"squared"``, ``"logistic"`` or ``"sqhinge"``.
    value, derivative, second_derivative : callable
        ``f(y, z) -> ndarray`` elementwise; ``y`` in ``{0, 1}``, result in the dtype of ``z``.
    threshold : float
        Decision value above which a label is predicted present (0.5 for the
        squared loss on ``{0, 1}`` targets, 0 for the margin losses).
    constant_curvature : bool
        True when ``second_derivative`` does not depend on ``z`` (squared loss), so
        a half-step is a linear system solved by conjugate gradient.
    """

    name: str
    value: object
    derivative: object
    second_derivative: object
    threshold: float
    constant_curvature: bool


LOSSES: dict[str, Loss] = {
    "squared": Loss("squared", _squared_value, _squared_d1, _squared_d2, 0.5, True),
    "logistic": Loss("logistic", _logistic_value, _logistic_d1, _logistic_d2, 0.0, False),
    "sqhinge": Loss("sqhinge", _sqhinge_value, _sqhinge_d1, _sqhinge_d2, 0.0, False),
}


def get_loss(loss: str | Loss) -> Loss:
    """Return the :class:`Loss` named ``loss`` (or ``loss`` itself).

    Raises
    ------
    ValueError
        If the name is not one of ``squared``, ``logistic``, ``sqhinge``.
    """
    if isinstance(loss, Loss):
        return loss
    try:
        return LOSSES[loss]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown loss {loss!r}; expected one of {sorted(LOSSES)}") from None
