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

__all__ = ["Loss", "LOSSES", "get_loss", "derivative_into"]


def _operands(y, z):
    """``(y, z)`` as arrays of ``z``'s dtype broadcast to one shape (``z`` then owns it)."""
    z = np.asarray(z)
    y = np.asarray(y, dtype=z.dtype)
    shape = np.broadcast_shapes(y.shape, z.shape)
    if z.shape != shape:
        z = np.broadcast_to(z, shape)
    return y, z


# Elements per block of the elementwise loss functions: their several passes then
# run in cache instead of streaming n x L arrays through memory each time.
_CHUNK = 1 << 15


def _blockwise(fn):
    """Apply the elementwise ``fn(y, z)`` block by block over large C-contiguous
    operands of one shape (the result is the same; other inputs go to ``fn`` whole)."""

    def wrapped(y, z):
        y, z = _operands(y, z)
        if (z.size <= 2 * _CHUNK or y.shape != z.shape or not z.flags.c_contiguous
                or not y.flags.c_contiguous):
            return fn(y, z)
        out = np.empty(z.shape, dtype=z.dtype)
        yf, zf, of = y.reshape(-1), z.reshape(-1), out.reshape(-1)
        for s in range(0, zf.size, _CHUNK):
            of[s:s + _CHUNK] = fn(yf[s:s + _CHUNK], zf[s:s + _CHUNK])
        return out

    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


def _margin(y, z):
    """``s z`` with ``s = 2 y - 1``: a new array of ``z``'s dtype (two passes, no
    temporary ``s``)."""
    y, z = _operands(y, z)
    out = np.multiply(y, 2, out=np.empty(z.shape, dtype=z.dtype))
    out -= 1
    out *= z
    return out


def _squared_value(y, z):
    r = z - np.asarray(y, dtype=z.dtype)
    return r * r


def _squared_d1(y, z):
    return 2 * (z - np.asarray(y, dtype=z.dtype))


def _squared_d2(y, z):
    return np.full(np.broadcast_shapes(np.shape(y), z.shape), 2, dtype=z.dtype)


# The logistic loss and its derivatives are written with y in {0, 1} directly:
# log(1 + exp(-s z)) = log(1 + exp(-|z|)) + (max(z, 0) - y z) and
# -s expit(-s z) = expit(z) - y, in place on one array: measured faster than
# np.logaddexp(0, -s z) for the value and than expit for the derivative.
@_blockwise
def _logistic_value(y, z):
    y, z = _operands(y, z)
    out = np.abs(z, out=np.empty(z.shape, dtype=z.dtype))
    np.negative(out, out=out)
    np.exp(out, out=out)
    if out.dtype == np.float64:
        np.log1p(out, out=out)
    else:
        # float32: NumPy's log is vectorised, log1p is not; log(1 + e) loses only
        # terms e < 2^-24 (absolute error < 6e-8).
        out += 1
        np.log(out, out=out)
    # max(z, 0) - y z = max(-s z, 0) is exact for y in {0, 1}: added last, so the
    # small log term is not cancelled against z.
    r = np.maximum(z, 0)
    r -= y * z
    out += r
    return out


@_blockwise
def _logistic_d1(y, z):
    y, z = _operands(y, z)
    out = expit(z)
    out -= y
    return out


@_blockwise
def _logistic_d2(y, z):
    y, z = _operands(y, z)
    # p (1 - p) is symmetric in z: with p = expit(-|z|) <= 1/2, 1 - p loses nothing.
    p = np.abs(z, out=np.empty(z.shape, dtype=z.dtype))
    np.negative(p, out=p)
    expit(p, out=p)
    q = 1 - p
    p *= q
    return p


@_blockwise
def _sqhinge_value(y, z):
    m = _margin(y, z)  # s z
    np.subtract(1, m, out=m)
    np.maximum(m, 0, out=m)
    m *= m
    return m


@_blockwise
def _sqhinge_d1(y, z):
    y, z = _operands(y, z)
    s = np.multiply(y, 2, out=np.empty(z.shape, dtype=z.dtype))
    s -= 1
    m = np.multiply(s, z)
    np.subtract(1, m, out=m)
    np.maximum(m, 0, out=m)
    m *= s
    m *= -2
    return m


@_blockwise
def _sqhinge_d2(y, z):
    m = _margin(y, z)
    return (2 * (m < 1)).astype(m.dtype)


def _logistic_d1_into(y, z):
    """``expit(z) - y`` written over ``z``, block by block: ``1 / (1 + exp(-z)) - y``
    with NumPy's vectorised ``exp`` (``exp(-z) = inf`` gives the exact limit 0), measured
    faster than ``_logistic_d1``'s ``expit`` into a new array."""
    zf, yf = z.reshape(-1), y.reshape(-1)
    with np.errstate(over="ignore"):
        for s in range(0, zf.size, _CHUNK):
            b = zf[s:s + _CHUNK]
            np.negative(b, out=b)
            np.exp(b, out=b)
            b += 1
            np.reciprocal(b, out=b)
            b -= yf[s:s + _CHUNK]
    return z


def derivative_into(loss, y, z):
    """``loss.derivative(y, z)``, overwriting ``z`` where that is faster (logistic loss,
    ``y`` and ``z`` C-contiguous of one shape and ``z`` writeable float); returns the
    result, which is then ``z`` itself.  For callers that own ``z`` and need it no more."""
    loss = get_loss(loss)
    z = np.asarray(z)
    y = np.asarray(y, dtype=z.dtype) if isinstance(y, np.ndarray) else y
    if (loss.name == "logistic" and isinstance(y, np.ndarray) and y.shape == z.shape
            and z.flags.c_contiguous and y.flags.c_contiguous and z.flags.writeable
            and z.dtype.kind == "f"):
        return _logistic_d1_into(y, z)
    return loss.derivative(y, z)


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
    curvature_bound : float
        ``c = sup_z second_derivative(y, z)`` for both labels: 2 (squared and squared
        hinge) and 1/4 (logistic, Bohning's bound).  Then ``loss(y, z + t) <= loss(y,
        z) + t derivative(y, z) + c t^2 / 2`` for every ``t``, the quadratic majoriser
        of the ``"bound"`` solvers of :func:`scarce.algorithms.leml.w_step.update_W` and
        :func:`~scarce.algorithms.leml.h_step.update_H`.
    """

    name: str
    value: object
    derivative: object
    second_derivative: object
    threshold: float
    constant_curvature: bool
    curvature_bound: float


LOSSES: dict[str, Loss] = {
    "squared": Loss("squared", _squared_value, _squared_d1, _squared_d2, 0.5, True, 2.0),
    "logistic": Loss("logistic", _logistic_value, _logistic_d1, _logistic_d2, 0.0, False, 0.25),
    "sqhinge": Loss("sqhinge", _sqhinge_value, _sqhinge_d1, _sqhinge_d2, 0.0, False, 2.0),
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
