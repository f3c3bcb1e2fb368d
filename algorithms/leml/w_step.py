"""LEML's W-step: minimise ``J(., H)`` over ``W`` with ``H`` fixed (Yu et al., Sec. 3).

With ``H`` fixed the problem in ``W`` is a ``d k``-dimensional regularised ERM over the
features ``x~_ij = h_j (x) x_i``, which are never formed:

* any loss with a mask: the gradient and the Hessian-vector product
  ``V -> X^T (D_Omega(X V H^T) H) + lam V`` use ``X V`` (n x k), decision values
  on ``Omega`` only, a sparse ``Omega`` times ``H`` and ``X^T`` times an n x k
  matrix: ``O((nnz(X) + |Omega| + d + L) k)`` (:class:`WStepProducts`);
* squared loss with every label observed (Sec. 3, the special case): ``||Y - X W H^T||^2``
  expands so that only ``Y H`` (``nnz(Y) k``), ``X V`` and ``X^T U`` and the
  ``k x k`` Gram matrix ``H^T H`` appear; the Hessian-vector product is
  ``2 X^T X V (H^T H) + lam V``, and nothing costs ``n L``.

The squared loss is solved by conjugate gradient, the logistic and squared-hinge losses by
TRON (Lin, Weng and Keerthi, 2008) or by steps on a quadratic bound (:func:`update_W`).  The
solver (:func:`solve_w_step`) sees the products only through an *operators* object, so a
backend that holds row blocks of the data elsewhere (``tasks.leml_dask.RowBlockBackend``) runs the
same iterations.

References
----------
H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
with Missing Labels", ICML 2014.
C.-J. Lin, R. C. Weng and S. S. Keerthi, "Trust Region Newton Method for
Large-Scale Logistic Regression", JMLR 9, 2008.
"""

from __future__ import annotations

import copy

import numpy as np

from scarce.algorithms.leml.data import LEMLData, check_factor
from scarce.algorithms.leml.losses import get_loss
from scarce.algorithms.leml.objective import sqnorm
from scarce.algorithms.leml.params import PRECONDITIONERS, W_SOLVERS
from scarce.algorithms.leml.params import check_w_solver as _check_w_solver
from scarce.algorithms.leml.solvers import conjugate_gradient, trust_region_newton
from scarce.algorithms.leml.terms import loss_terms

__all__ = ["PRECONDITIONERS", "W_SOLVERS", "LocalWOperators", "WStepProducts",
           "check_preconditioner", "check_w_solver", "kronecker_preconditioner",
           "observed_gram_diagonal", "observed_shares", "solve_w_step", "update_W",
           "w_gradient", "w_loss_value"]

# Largest d' for which the "bound" W-step diagonalises X^T X (d' x d', once per data);
# above it the bound's linear system is solved by CG.
_EIG_MAX = 4096


#: Rows of a ``d' x k`` product that :func:`_times_in_place` multiplies at a time.
GRAM_ROWS = 1 << 14


def _times_in_place(A: np.ndarray, G: np.ndarray) -> np.ndarray:
    """``A @ G`` written into ``A`` (``d' x k`` times ``k x k``), :data:`GRAM_ROWS` rows at a
    time: ``A @ G`` at once would hold a second ``d' x k`` array beside ``A`` (73 MB at
    d' = 366,932, k = 50 in float32), and numpy's ``matmul(A, G, out=A)`` copies ``A``
    first because the two overlap."""
    for start in range(0, A.shape[0], GRAM_ROWS):
        rows = A[start:start + GRAM_ROWS]
        rows[...] = rows @ G
    return A


class WStepProducts:
    """The loss terms of the W-step's gradient and Hessian-vector product (Yu et al., Sec. 3).

    Built for one ``H`` and one point ``W`` on a :class:`LEMLData`: the whole
    training set or one row block of it (:func:`split_rows`).  Both products are
    sums over the rows of ``X``, so the products of the whole set are the sums of
    the blocks' products; the regulariser ``lam W`` (``lam V``) is not included.

    Never forms ``x~_ij = h_j (x) x_i``: with ``D`` the sparse matrix of loss
    derivatives on ``Omega``, the loss gradient is ``X^T (D H)`` and the
    Hessian-vector product ``V -> X^T (D''_Omega(X V H^T) H)``, where only the
    entries of ``X V H^T`` in ``Omega`` are computed.  For the squared loss on
    fully observed labels: ``2 X^T (X W H^T H - Y H)`` and ``V -> 2 X^T X V (H^T H)``, the
    latter through the dense ``X^T X`` when it is small beside ``X``
    (:meth:`~scarce.algorithms.leml.data.LEMLData.gram`).

    Parameters
    ----------
    data : LEMLData
    H : ndarray of shape (L, k)
    W : ndarray of shape (d', k)
    loss : {"squared", "logistic", "sqhinge"} or Loss
    z : ndarray, optional
        Decision values on the observed entries of ``data`` at ``W`` if already
        computed (see :func:`w_loss_value`).
    gram_left : bool, optional
        Squared loss, fully observed: apply ``2 H^T H`` to ``X^T X V`` (True) or to
        ``X V`` (False); default: on the smaller side of ``data``, ``d' <= n``.  A
        row block passes the choice of the whole set, so it associates the same way.
    """

    def __init__(self, data: LEMLData, H, W, loss, *, z=None, gram_left=None):
        self.data, self.H, self.W = data, H, W
        self.loss = loss = get_loss(loss)
        self.fast = self.squared_fully_observed(loss, data.fully_observed)
        if self.fast:
            self.G2 = 2 * (H.T @ H)
            self.gram_left = (data.n_features <= data.n_samples if gram_left is None
                              else bool(gram_left))
            self.XtX = data.gram()
            return
        self.entries = ent = data.observed_entries()
        self.z = ent.dots(data.X @ W, H) if z is None else z
        if loss.constant_curvature:
            self.d2 = ent.full(_curvature(loss, data.dtype), data.dtype)
        else:
            self.d2 = ent.masked(loss.second_derivative(ent.y, self.z))

    @staticmethod
    def squared_fully_observed(loss, fully_observed: bool) -> bool:
        """The squared loss on fully observed labels: the case whose products use ``H`` only
        through ``2 H^T H`` (and :meth:`for_hess_vec` keeps no ``H``)."""
        return get_loss(loss).name == "squared" and fully_observed

    def for_hess_vec(self) -> WStepProducts:
        """A copy that computes :meth:`hess_vec` only: it holds neither ``W`` nor the decision
        values, nor, on the squared loss's fully observed case (whose Hessian uses only
        ``2 H^T H``), ``H``.

        For a backend that keeps per-block products apart from the solver
        (``tasks.leml_dask``): once the gradient is taken, the copies of ``W`` and ``H`` on a
        worker can be freed for the rest of the CG iterations.
        """
        out = copy.copy(self)
        out.W = out.z = None
        if self.fast:
            out.H = None
        return out

    def gradient(self) -> np.ndarray:
        """The loss term of the gradient at ``W`` (d' x k, a new array)."""
        data, H, xt = self.data, self.H, self.data.xt_matmul
        if self.fast:
            return xt((data.X @ self.W) @ self.G2 - 2 * (data.Y @ H))
        ent = self.entries
        return xt(ent.times(ent.masked(self.loss.derivative(ent.y, self.z)), H))

    def hess_vec(self, V) -> np.ndarray:
        """The loss term of the Hessian at ``W`` times ``V`` (d' x k, a new array)."""
        X, xt = self.data.X, self.data.xt_matmul
        if self.fast and self.XtX is not None:
            return _times_in_place(self.XtX @ V, self.G2) if self.gram_left else \
                self.XtX @ (V @ self.G2)
        if self.fast:
            return _times_in_place(xt(X @ V), self.G2) if self.gram_left else \
                xt((X @ V) @ self.G2)
        ent = self.entries
        return xt(ent.times(self.d2 * ent.dots(X @ V, self.H), self.H))


def w_loss_value(data: LEMLData, H, W, loss) -> tuple[float, np.ndarray]:
    """The loss term of ``J(W, H)`` (float64 sum) and the decision values on ``Omega``.

    Used by the TRON W-step (logistic and squared-hinge losses); a sum over rows,
    so over row blocks (:func:`split_rows`) too.
    """
    loss = get_loss(loss)
    ent = data.observed_entries()
    z = ent.dots(data.X @ W, H)
    return float(ent.masked(loss.value(ent.y, z)).sum(dtype=np.float64)), z


def _regularised(products, W, lam: float):
    """``(grad, hess_vec)`` of ``J(., H)``: the loss terms of ``products`` plus ``lam W``."""
    grad = products.gradient()
    grad += lam * W

    def hess_vec(V):
        out = products.hess_vec(V)
        out += lam * V
        return out

    return grad, hess_vec


def w_gradient(data: LEMLData, H, W, lam: float, loss, *, z=None):
    """Gradient of ``J(., H)`` at ``W`` and its Hessian-vector product (Yu et al., Sec. 3).

    The loss terms of :class:`WStepProducts` plus the regulariser: the gradient is
    ``X^T (D H) + lam W`` and the Hessian-vector product
    ``V -> X^T (D''_Omega(X V H^T) H) + lam V``; for the squared loss on fully
    observed labels ``2 X^T (X W H^T H - Y H) + lam W`` and
    ``V -> 2 X^T X V (H^T H) + lam V``.

    Parameters
    ----------
    data : LEMLData
    H : ndarray of shape (L, k)
    W : ndarray of shape (d', k)
    lam : float
    loss : {"squared", "logistic", "sqhinge"} or Loss
    z : ndarray, optional
        Decision values on the observed entries at ``W`` if already computed.

    Returns
    -------
    grad : ndarray of shape (d', k)
    hess_vec : callable
        ``V (d' x k) -> ndarray (d' x k)``, the Hessian at ``W`` times ``V``.
    """
    return _regularised(WStepProducts(data, H, W, loss, z=z), W, float(lam))


def observed_shares(data: LEMLData) -> np.ndarray | None:
    """``rho_i = |Omega_i| / L``, the share of each row's labels that is observed (n,
    float64), or None when every label is observed."""
    if data.fully_observed:
        return None
    ent = data.entries
    if not ent.dense:
        counts = np.diff(ent.indptr).astype(np.float64)
    elif ent.mask is None:
        counts = np.full(data.n_samples, float(data.n_labels))
    else:
        counts = ent.mask.sum(axis=1, dtype=np.float64)
    return counts / data.n_labels


def observed_gram_diagonal(data: LEMLData) -> np.ndarray:
    """``sum_i rho_i x_i^2`` (d', float64), the diagonal of ``X^T diag(rho) X`` with ``rho``
    the rows' observed shares (:func:`observed_shares`): what :func:`kronecker_preconditioner`
    takes for the squared loss.  With every label observed ``rho = 1``: the diagonal of
    ``X^T X``, kept in ``data``.  A sum over rows, so over row blocks too."""
    return data.gram_diagonal(row_weights=observed_shares(data))


class LocalWOperators:
    """The W-step's loss terms over ``data`` in this process (the operators of
    :func:`solve_w_step` when :func:`update_W` has no backend)."""

    def __init__(self, data: LEMLData, H, loss):
        self.data, self.H, self.loss = data, H, loss
        self.fully_observed = data.fully_observed

    def value(self, W):
        return w_loss_value(self.data, self.H, W, self.loss)

    def observed_gram_diagonal(self) -> np.ndarray:
        return observed_gram_diagonal(self.data)

    def products(self, W, state=None):
        return WStepProducts(self.data, self.H, W, self.loss, z=state)


def check_w_solver(w_solver: str, loss, *, distributed: bool = False) -> None:
    """Raise a ValueError unless ``w_solver`` can run the W-step of ``loss`` (a name or a
    :class:`~scarce.algorithms.leml.losses.Loss`):
    :func:`scarce.algorithms.leml.params.check_w_solver`."""
    _check_w_solver(w_solver, get_loss(loss).name, distributed=distributed)


def _check_w_step(n_features: int, n_labels: int, dtype, H, lam: float, W0=None):
    """Validate the inputs of a W-step: returns ``(H, lam, W0)`` in ``dtype`` (W0 default 0)."""
    lam = float(lam)
    if lam <= 0:
        raise ValueError(f"lam must be positive, got {lam}")
    H = np.ascontiguousarray(H, dtype=dtype)
    if H.ndim != 2 or H.shape[0] != n_labels:
        raise ValueError(f"H has shape {H.shape}, expected ({n_labels}, k)")
    shape = (n_features, H.shape[1])
    W0 = np.zeros(shape, dtype=dtype) if W0 is None else check_factor(W0, shape, dtype, "W0")
    return H, lam, W0


def solve_w_step(operators, W0, lam: float, loss, *, cg_max_iter: int, cg_tol: float,
                 newton_max_iter: int, precondition=None):
    """The solver of :func:`update_W` over any provider of the W-step's loss terms.

    ``operators.products(W, state)`` returns an object with ``gradient()`` and
    ``hess_vec(V)`` (the loss terms, as :class:`WStepProducts`) and
    ``operators.value(W)`` returns ``(loss term, state)`` (as :func:`w_loss_value`;
    ``state`` is passed back to ``products``).  :class:`LocalWOperators` computes them in
    this process; a backend of :func:`update_W` sums them over row blocks held elsewhere
    (``tasks.leml_dask``), and the CG / TRON iterations are the same.  ``precondition``
    (``R -> M^-1 R``, see :func:`kronecker_preconditioner`) preconditions the squared loss's
    CG; None: plain CG.

    Returns
    -------
    W : ndarray
    info : dict with ``cg_iter`` and ``newton_iter``
    """
    loss = get_loss(loss)
    lam = float(lam)
    info = {"cg_iter": 0, "newton_iter": 0}
    if loss.constant_curvature:
        grad, hess_vec = _regularised(operators.products(W0), W0, lam)
        step, info["cg_iter"] = conjugate_gradient(hess_vec, -grad, tol=cg_tol,
                                                   max_iter=cg_max_iter,
                                                   precondition=precondition)
        W = W0 + step
    else:
        def fun(Wc):
            f, state = operators.value(Wc)
            return f + 0.5 * lam * sqnorm(Wc), state

        def gradient(Wc, state):
            return _regularised(operators.products(Wc, state), Wc, lam)

        res = trust_region_newton(fun, gradient, W0, tol=1e-3, max_iter=newton_max_iter,
                                  cg_tol=cg_tol, cg_max_iter=cg_max_iter)
        W = res.x
        info["cg_iter"], info["newton_iter"] = res.n_cg, res.n_iter
    return np.ascontiguousarray(W, dtype=W0.dtype), info


def kronecker_preconditioner(gram_diagonal: np.ndarray, H, lam: float, curvature: float,
                             dtype):
    """``R -> M^-1 R`` for the W-step's Hessian with ``X^T X`` replaced by its diagonal.

    The squared loss's W-step Hessian on fully observed labels is
    ``V -> c X^T X V H^T H + lam V`` (``c`` the loss's curvature), the Kronecker product
    ``c H^T H (x) X^T X + lam I``.  Keeping only the diagonal ``g`` of ``X^T X`` gives
    ``M = c H^T H (x) diag(g) + lam I``, inverted exactly in the eigenbasis of
    ``H^T H = Q diag(t) Q^T``: ``M^-1 R = [(R Q) / (c g t^T + lam)] Q^T``, two ``d' x k x k``
    products.  It corrects both what slows plain CG here: the columns of ``X`` differ in
    norm by orders of magnitude (word frequencies), and so do the eigenvalues of ``H^T H``.
    A library preconditioner (``scipy.sparse.linalg`` takes a ``LinearOperator`` on flat
    vectors, and an incomplete factorisation would need ``X^T X``) sees neither structure.

    With missing labels the Hessian is ``c sum_i (x_i x_i^T) (x) G_i + lam I`` with
    ``G_i = sum_{j in Omega_i} h_j h_j^T``; taking ``G_i ~ rho_i H^T H`` (``rho_i`` the
    share of row ``i``'s labels observed, exact in expectation when the observed entries of
    a row are a uniform draw) gives the same ``M`` with ``g = sum_i rho_i x_i^2``
    (:func:`observed_gram_diagonal`).
    """
    t, Q = np.linalg.eigh(np.asarray(H, dtype=np.float64).T @ np.asarray(H, dtype=np.float64))
    inverse = (1.0 / (curvature * np.outer(gram_diagonal, np.maximum(t, 0.0)) + lam))
    Q, inverse = Q.astype(dtype), inverse.astype(dtype)

    def precondition(R):
        B = R @ Q
        B *= inverse
        return B @ Q.T

    return precondition


def _w_bound_solver(data: LEMLData, H, lam: float, c: float, cg_max_iter: int,
                    cg_tol: float, preconditioner: str = "none"):
    """The solver ``R -> S`` of ``c X^T X S (H^T H) + lam S = R`` (S and R d' x k), built once
    per W-step: H is fixed over its steps, so the factors below are too.

    With ``d' <= _EIG_MAX``: exactly, from ``X^T X = U diag(s) U^T`` (once per data) and
    ``H^T H = Q diag(t) Q^T``: ``S = U [(U^T R Q) / (c s t^T + lam)] Q^T``.  Otherwise
    by at most ``cg_max_iter`` CG iterations on the product
    ``V -> c X^T (X V) (H^T H) + lam V`` (no n x L term), preconditioned by
    :func:`kronecker_preconditioner` with ``preconditioner="diagonal"`` (the system is the
    fully observed squared loss's, whatever the mask)."""
    HtH = H.T @ H
    dtype = data.dtype
    if data.n_features <= _EIG_MAX:
        s, U = data.gram_eigh()
        t, Q = np.linalg.eigh(HtH.astype(np.float64))
        Q = Q.astype(dtype)
        denom = (c * np.outer(s, np.maximum(t, 0.0)) + lam).astype(dtype)

        def solve(R):
            B = (U.T @ R) @ Q
            B /= denom
            return (U @ B) @ Q.T

        return solve
    G2 = (c * HtH).astype(dtype)
    X, xt = data.X, data.xt_matmul

    def hess_vec(V):
        out = xt(X @ V) @ G2
        out += lam * V
        return out

    precondition = (kronecker_preconditioner(data.gram_diagonal(), H, lam, c, dtype)
                     if preconditioner == "diagonal" else None)

    def solve(R):
        return conjugate_gradient(hess_vec, R, tol=cg_tol, max_iter=cg_max_iter,
                                  precondition=precondition)[0]

    return solve


def _bound_update_W(data: LEMLData, H, W, lam: float, loss, n_steps: int,
                    cg_max_iter: int, cg_tol: float, preconditioner: str = "none"):
    """``n_steps`` majorise-minimise steps of the W-step (``w_solver="bound"``).

    With ``c = loss.curvature_bound`` every entry's loss is at most its second-order
    expansion with curvature ``c``, so, adding the unobserved entries' squares too,
    ``J(W + S, H) <= J(W, H) + <G, S> + (c/2) ||X S H^T||_F^2 + lam <W, S> + lam ||S||^2 / 2``
    with ``G = X^T (D H)`` the loss gradient (``D H`` a batch of rows at a time,
    :func:`~scarce.algorithms.leml.terms.loss_terms`).  Its minimiser solves
    ``c X^T X S H^T H + lam S = -(G + lam W)`` (:func:`_w_bound_solver`), a system of
    the fully observed squared loss's structure, so a step costs one gradient
    (``O(|Omega| k)``) and no Hessian-vector product over ``Omega``; the objective
    never increases (Bohning and Lindsay's bound for the logistic loss).
    """
    solve = _w_bound_solver(data, H, lam, float(loss.curvature_bound), cg_max_iter, cg_tol,
                            preconditioner)
    for _ in range(n_steps):
        R = data.xt_matmul(loss_terms(data, data.X @ W, H, loss, rows=True).rows)
        R += lam * W
        W = W - solve(R)
    return W


def update_W(data: LEMLData, H, lam: float, loss, *, W0=None, cg_max_iter: int,
             cg_tol: float, newton_max_iter: int, w_solver: str, backend=None,
             preconditioner: str = "none"):
    """W-step: minimise ``J(., H)`` over ``W`` (Yu et al., Sec. 3).

    Squared loss: conjugate gradient on the normal equations for the step from
    ``W0`` (so the only product spent outside CG is the gradient at ``W0``).
    Logistic and squared hinge: TRON with the same Hessian-vector product inside
    (Lin, Weng and Keerthi, 2008).  Products as in :func:`w_gradient`; the solver
    is :func:`solve_w_step`.  :meth:`scarce.algorithms.leml.LEML.w_step` calls it with the
    estimator's parameters (their defaults and meaning are documented there).

    Parameters
    ----------
    data : LEMLData
    H : ndarray of shape (L, k)
    lam : float
        Regularisation ``lam > 0``.
    loss : {"squared", "logistic", "sqhinge"} or Loss
    W0 : ndarray of shape (d', k), optional
        Warm start (default zeros).
    cg_max_iter : int
        Maximum CG iterations (squared loss) or inner CG iterations per Newton
        step (other losses).
    cg_tol : float
        CG stops when the residual falls below ``cg_tol`` times the gradient norm
        at ``W0`` (squared loss) or at the current Newton iterate.
    newton_max_iter : int
        Newton (TRON) steps, or bound steps with ``w_solver="bound"``, for the
        logistic and squared-hinge losses.
    w_solver : {"tron", "bound"}
        Logistic and squared-hinge losses: TRON (above), or ``newton_max_iter``
        majorise-minimise steps on the quadratic bound of curvature
        ``loss.curvature_bound`` (see :func:`_bound_update_W`): each costs one
        gradient and an exact solve through the eigendecomposition of ``X^T X``
        (kept in ``data``; by CG without ``n x L`` products when ``d' > 4096``),
        where a TRON step costs a gradient and up to ``cg_max_iter``
        Hessian-vector products over ``Omega``.  Unused for the squared loss.
    backend : object, optional
        Where the products of CG and TRON run: an object whose ``operators(H, loss)``
        returns the loss terms over the rows it holds (``value`` and ``products``, see
        :func:`solve_w_step`), such as ``tasks.leml_dask.RowBlockBackend`` over row blocks on
        Dask workers; the iterations themselves run here.  None: over ``data`` in this
        process (:class:`LocalWOperators`).  Not with ``w_solver="bound"`` for a margin
        loss (:func:`check_w_solver`).
    preconditioner : {"none", "diagonal"}, default="none"
        The squared loss: plain CG (the paper's), or CG preconditioned by
        :func:`kronecker_preconditioner`, with missing labels too; the operators then give
        ``sum_i rho_i x_i^2`` (``observed_gram_diagonal()``, the diagonal of ``X^T X`` when
        every label is observed).  The bound W-step's CG (``w_solver="bound"`` above
        4096 features) is preconditioned alike; TRON's CG runs unpreconditioned.

    Returns
    -------
    W : ndarray of shape (d', k)
    info : dict
        ``cg_iter`` (Hessian-vector products) and ``newton_iter``.
    """
    loss = get_loss(loss)
    check_w_solver(w_solver, loss, distributed=backend is not None)
    check_preconditioner(preconditioner)
    H, lam, W0 = _check_w_step(data.n_features, data.n_labels, data.dtype, H, lam, W0)
    if w_solver == "bound" and not loss.constant_curvature:
        W = _bound_update_W(data, H, W0, lam, loss, int(newton_max_iter), cg_max_iter, cg_tol,
                            preconditioner)
        return (np.ascontiguousarray(W, dtype=data.dtype),
                {"cg_iter": 0, "newton_iter": int(newton_max_iter)})
    operators = (LocalWOperators(data, H, loss) if backend is None
                 else backend.operators(H, loss))
    precondition = None
    if preconditioner == "diagonal" and loss.constant_curvature:
        precondition = kronecker_preconditioner(operators.observed_gram_diagonal(), H, lam,
                                                _curvature(loss, data.dtype), data.dtype)
    return solve_w_step(operators, W0, lam, loss, cg_max_iter=cg_max_iter, cg_tol=cg_tol,
                        newton_max_iter=newton_max_iter, precondition=precondition)


def check_preconditioner(preconditioner: str) -> None:
    """Raise a ValueError unless ``preconditioner`` is one of :data:`PRECONDITIONERS`."""
    if preconditioner not in PRECONDITIONERS:
        raise ValueError(f"cg_preconditioner must be one of {PRECONDITIONERS}, got "
                         f"{preconditioner!r}")


def _curvature(loss, dtype) -> float:
    """The constant second derivative of ``loss`` (2 for the squared loss)."""
    return float(loss.second_derivative(np.zeros(1), np.zeros(1, dtype=dtype))[0])
