"""Conjugate gradient and trust-region Newton (TRON) over array-valued variables.

Both solvers see the problem only through callables: a Hessian-vector product
``hess_vec(V) -> ndarray`` (same shape as ``V``) and, for TRON, the function
value and gradient.  The variables may be of any shape (LEML's W-step works on a
``d x k`` matrix directly, never on a flattened copy) and of any float dtype:
all scalars are Python floats, so float32 arrays stay float32 (NumPy 2 would
promote a float32 array times a ``np.float64`` scalar to float64).

Why not scipy: ``scipy.sparse.linalg.cg`` wants a ``LinearOperator`` on flat
vectors and returns no iteration count, and ``scipy.optimize.minimize(method=
"trust-ncg")`` uses Steihaug CG with its own trust-region rules.  TRON as in
LIBLINEAR (Lin, Weng and Keerthi, 2008) differs in the ways that matter here: the
inner CG stops at a residual of ``cg_tol * ||g||`` (0.1 in LIBLINEAR) or, when the
step leaves the region, steps back to the boundary along the current direction
(the positive root of ``||s + a d|| = delta``); the predicted reduction uses the
CG residual, ``-(g's - s'r)/2``; the radius is first shrunk to the first step
length and then updated with the ratio thresholds ``eta = (1e-4, 0.25, 0.75)``,
factors ``sigma = (0.25, 0.5, 4)`` and the quadratic-interpolation step
``alpha``.  Those rules (and a cap on CG iterations, which LIBLINEAR lacks) are
written out below, line for line after LIBLINEAR's ``tron.cpp``; the only
addition is a warm start from ``x0`` instead of zero, which LEML's alternating
half-steps need.

References
----------
M. R. Hestenes and E. Stiefel, "Methods of conjugate gradients for solving
linear systems", J. Res. NBS 49, 1952.
J. R. Shewchuk, "An Introduction to the Conjugate Gradient Method Without the
Agonizing Pain", Carnegie Mellon University, 1994.
C.-J. Lin, R. C. Weng and S. S. Keerthi, "Trust Region Newton Method for
Large-Scale Logistic Regression", JMLR 9, 627-650, 2008 (Algorithms 1-2).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["conjugate_gradient", "trust_region_newton", "TronResult"]


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.vdot(a, b))


def conjugate_gradient(
    hess_vec: Callable[[np.ndarray], np.ndarray],
    b: np.ndarray,
    x0: np.ndarray | None = None,
    *,
    tol: float = 1e-3,
    max_iter: int = 25,
    precondition: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, int]:
    """Solve ``A x = b`` for a symmetric positive definite ``A`` given as a product.

    Parameters
    ----------
    hess_vec : callable
        ``hess_vec(v)`` returns ``A v`` with the shape and dtype of ``v``.
    b : ndarray
        Right-hand side, any shape.
    x0 : ndarray, optional
        Starting point (default zero; then no product is spent on the initial
        residual).
    tol : float, default=1e-3
        Stop when ``||b - A x|| <= tol * ||b||``.
    max_iter : int, default=25
        Maximum number of iterations, i.e. of calls to ``hess_vec`` after the
        initial residual.
    precondition : callable, optional
        ``precondition(r)`` returns ``M^-1 r`` for a symmetric positive definite ``M``
        close to ``A`` (a new array): preconditioned CG (Shewchuk, 1994, Sec. 12),
        which stops on the same unpreconditioned residual.  None: plain CG.

    Returns
    -------
    x : ndarray
        The approximate solution, in the dtype of ``b``.
    n_iter : int
        Number of iterations (products ``A d``) performed.
    """
    if tol < 0 or max_iter < 0:
        raise ValueError(f"tol and max_iter must be non-negative, got {tol} and {max_iter}")
    if x0 is None:
        x, r = np.zeros_like(b), b.copy()
    else:
        x = np.array(x0, dtype=b.dtype, copy=True)
        r = b - hess_vec(x)
    stop = tol * math.sqrt(_dot(b, b))
    # Plain CG is the preconditioned one with z = r: then r'z is r'r and is not taken twice,
    # so its arithmetic is exactly the textbook CG's.
    z = r if precondition is None else precondition(r)
    rz = _dot(r, z)
    rr = rz if precondition is None else _dot(r, r)
    d = z.copy()
    n_iter = 0
    while n_iter < max_iter and math.sqrt(rr) > stop:
        ad = hess_vec(d)
        dad = _dot(d, ad)
        if dad <= 0 or rz <= 0:  # not positive definite in this direction (or rounding)
            break
        alpha = rz / dad
        x += alpha * d
        r -= alpha * ad
        z = r if precondition is None else precondition(r)
        rz_new = _dot(r, z)
        rr = rz_new if precondition is None else _dot(r, r)
        d *= rz_new / rz
        d += z
        rz = rz_new
        n_iter += 1
    return x, n_iter


def _trcg(hess_vec, g, delta, cg_tol, cg_max_iter):
    """Trust-region CG of LIBLINEAR's ``TRON::trcg``: approximately minimise
    ``g's + s'As/2`` subject to ``||s|| <= delta``.  Returns ``(s, r, n_iter)``
    with ``r = -g - A s`` the residual."""
    s = np.zeros_like(g)
    r = -g
    d = r.copy()
    rr = _dot(r, r)
    cgtol = cg_tol * math.sqrt(rr)
    n_iter = 0
    while math.sqrt(rr) > cgtol and n_iter < cg_max_iter:
        n_iter += 1
        hd = hess_vec(d)
        dhd = _dot(d, hd)
        if dhd <= 0:
            break
        alpha = rr / dhd
        s += alpha * d
        if math.sqrt(_dot(s, s)) > delta:
            # Step back, then move to the boundary: the root a >= 0 of ||s + a d|| = delta.
            s -= alpha * d
            std, sts, dtd = _dot(s, d), _dot(s, s), _dot(d, d)
            dsq = delta * delta
            rad = math.sqrt(max(std * std + dtd * (dsq - sts), 0.0))
            alpha = (dsq - sts) / (std + rad) if std >= 0 else (rad - std) / dtd
            s += alpha * d
            r -= alpha * hd
            break
        r -= alpha * hd
        rr_new = _dot(r, r)
        d *= rr_new / rr
        d += r
        rr = rr_new
    return s, r, n_iter


@dataclass(frozen=True)
class TronResult:
    """Outcome of :func:`trust_region_newton`.

    Attributes
    ----------
    x : ndarray
        Final iterate.
    fun : float
        Function value at ``x``.
    n_iter : int
        Accepted Newton steps.
    n_cg : int
        Hessian-vector products spent in the inner CG.
    """

    x: np.ndarray
    fun: float
    n_iter: int
    n_cg: int


def trust_region_newton(
    fun: Callable[[np.ndarray], tuple[float, object]],
    grad: Callable[[np.ndarray, object], tuple[np.ndarray, Callable]],
    x0: np.ndarray,
    *,
    tol: float = 1e-3,
    max_iter: int = 10,
    cg_tol: float = 0.1,
    cg_max_iter: int = 25,
) -> TronResult:
    """Minimise a twice differentiable convex function by TRON (LIBLINEAR).

    Parameters
    ----------
    fun : callable
        ``fun(x) -> (f, state)``: the value and any state the gradient can reuse
        (for LEML the decision values on the observed entries).
    grad : callable
        ``grad(x, state) -> (g, hess_vec)``: the gradient and the Hessian-vector
        product at ``x``.
    x0 : ndarray
        Starting point (warm start), any shape; its dtype is kept.
    tol : float, default=1e-3
        Stop when ``||g(x)|| <= tol * ||g(x0)||``.
    max_iter : int, default=10
        Maximum number of accepted Newton steps (LIBLINEAR's counter).
    cg_tol : float, default=0.1
        Inner CG stops at residual ``cg_tol * ||g||`` (LIBLINEAR: 0.1).
    cg_max_iter : int, default=25
        Cap on inner CG iterations per Newton step.

    Returns
    -------
    TronResult

    Notes
    -----
    A trial step is accepted only if the actual reduction exceeds
    ``eta0 * predicted`` with ``eta0 = 1e-4``, so the function value never
    increases.  Besides ``max_iter`` accepted steps the loop also ends after
    ``2 * max_iter + 2`` trials in all (LIBLINEAR counts only accepted steps and
    can retry without bound while shrinking the region).
    """
    eta0, eta1, eta2 = 1e-4, 0.25, 0.75
    sigma1, sigma2, sigma3 = 0.25, 0.5, 4.0
    x = np.array(x0, copy=True)
    f, state = fun(x)
    g, hess_vec = grad(x, state)
    gnorm0 = math.sqrt(_dot(g, g))
    delta = gnorm0
    n_iter, n_cg, trials = 0, 0, 0
    if gnorm0 == 0.0:
        return TronResult(x, float(f), 0, 0)
    while n_iter < max_iter and trials < 2 * max_iter + 2:
        trials += 1
        s, r, cg_iter = _trcg(hess_vec, g, delta, cg_tol, cg_max_iter)
        n_cg += cg_iter
        x_new = x + s
        gs = _dot(g, s)
        prered = -0.5 * (gs - _dot(s, r))
        f_new, state_new = fun(x_new)
        actred = f - f_new
        snorm = math.sqrt(_dot(s, s))
        if trials == 1:
            delta = min(delta, snorm)
        if f_new - f - gs <= 0:
            alpha = sigma3
        else:
            alpha = max(sigma1, -0.5 * (gs / (f_new - f - gs)))
        if actred < eta0 * prered:
            delta = min(max(alpha, sigma1) * snorm, sigma2 * delta)
        elif actred < eta1 * prered:
            delta = max(sigma1 * delta, min(alpha * snorm, sigma2 * delta))
        elif actred < eta2 * prered:
            delta = max(sigma1 * delta, min(alpha * snorm, sigma3 * delta))
        else:
            delta = max(delta, min(alpha * snorm, sigma3 * delta))
        if actred > eta0 * prered:
            n_iter += 1
            x, f = x_new, f_new
            g, hess_vec = grad(x, state_new)
            if math.sqrt(_dot(g, g)) <= tol * gnorm0:
                break
        if abs(actred) <= 0 and prered <= 0:
            break
        if abs(actred) <= 1e-12 * abs(f) and abs(prered) <= 1e-12 * abs(f):
            break
        if delta <= 0:
            break
    return TronResult(x, float(f), n_iter, n_cg)
