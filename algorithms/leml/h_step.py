"""LEML's H-step: minimise ``J(W, .)`` over ``H`` with ``W`` fixed (Yu et al., Sec. 3).

Kept as one module: the H-step's solvers (direct, conjugate gradient, bound) and their row-
block forms share the per-label systems they solve.

With ``W`` fixed the problem splits into ``L`` independent ``k``-dimensional problems, one
per label, over the inputs ``a_i = W^T x_i``:

* squared loss: for label ``j`` the normal equations
  ``(2 sum_{i in Omega_j} a_i a_i^T + lam I) h_j = 2 sum_{i in Omega_j} y_ij a_i``;
  the ``L`` Gram matrices come from one sparse product ``Omega^T [a_i (x) a_i]``
  (``O(|Omega| k^2)``) and are solved as one batched ``(L, k, k)`` system; fully
  observed, all labels share ``A^T A`` (one ``k x k`` solve with ``L`` right-hand sides);
* other losses: batched Newton with a per-label backtracking line search, the Newton
  directions from explicit Hessians or per-label conjugate gradient, or steps on a
  quadratic bound (:func:`update_H`).

The squared loss's H-step is also written as sums over row blocks
(:func:`update_H_by_blocks`): with ``A_b = X_b W`` the embedding of block ``b``, fully
observed it needs only ``sum_b A_b^T A_b`` (``k x k``) and ``sum_b Y_b^T A_b`` (``L x k``);
with missing labels ``sum_b Y_b^T A_b`` over the observed entries and, one label block at a
time, the per-label Gram matrices ``sum_b sum_{i in Omega_j, i in b} a_i a_i^T`` (so no
process holds ``L x k x k`` at once), each label block added up and solved where it is
added (on a worker, on a cluster), a few label blocks in flight at once.  A *backend*
(:class:`LocalBlocks` here, ``tasks.leml_dask.RowBlockBackend`` on a Dask cluster) computes the
per-block terms where the blocks are and adds them in block order, so any number of workers
gives the same bits.  The logistic and squared-hinge losses' bound steps
(``h_solver="bound"``) are block sums too (:func:`update_H_bound_by_blocks`): per step one
gradient round and the label blocks' fixed Gram matrices, no line search.  Their Newton
steps (``"direct"``, ``"cg"``) stay on :func:`update_H` over the whole data: their per-label
line searches need per-label objective values and fresh Hessians at every trial point, a
round of block sums per line-search step that is not written.

References
----------
H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
with Missing Labels", ICML 2014.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import scipy.sparse as sp

from scarce.algorithms.leml.data import BLOCK, LEMLData, check_factor
from scarce.algorithms.leml.losses import get_loss
from scarce.algorithms.leml.params import H_SOLVERS
from scarce.algorithms.leml.terms import loss_terms

__all__ = ["H_SOLVERS", "LocalBlocks", "update_H", "update_H_bound_by_blocks",
           "update_H_by_blocks"]


def _checked_W(W, n_features: int, dtype) -> np.ndarray:
    """``W`` as a C-contiguous (n_features, k) array of ``dtype``."""
    W = np.asarray(W)
    if W.ndim != 2 or W.shape[0] != n_features:
        raise ValueError(f"W has shape {W.shape}, expected ({n_features}, k)")
    return np.ascontiguousarray(W, dtype=dtype)


def _solve_grams(G_tri, lam, R, iu, ju):
    """Solve ``(G_j + lam I) h_j = r_j`` for every label, batched over label blocks."""
    n_labels, k = R.shape
    out = np.empty_like(R)
    step = max(1, BLOCK // (k * k))
    diag = np.arange(k)
    for s in range(0, n_labels, step):
        e = min(s + step, n_labels)
        G = np.empty((e - s, k, k), dtype=R.dtype)
        G[:, iu, ju] = G_tri[s:e]
        G[:, ju, iu] = G_tri[s:e]
        G[:, diag, diag] += lam
        out[s:e] = np.linalg.solve(G, R[s:e, :, None])[:, :, 0]
    return out


def _per_label_cg(product, lam, g, cg_max_iter, cg_tol):
    """Newton directions of all labels by conjugate gradient, batched over labels.

    Solves ``(A^T D''_j A + lam I) s_j = -g_j`` for every label ``j`` at once; a
    label's iterations stop when its residual falls below ``cg_tol`` times its
    ``||g_j||`` (its later updates are zero).  One ``product(V) = (D'' o (A V^T))^T A``
    per iteration, ``O(|Omega| k)`` (over the whole data, or summed over row blocks).
    Returns ``(steps, iterations)``.
    """
    S = np.zeros_like(g)
    R = -g
    D = R.copy()
    rr = np.einsum("ij,ij->i", R, R, dtype=np.float64)
    stop = (cg_tol * cg_tol) * rr
    active = rr > stop
    n_iter = 0
    while n_iter < cg_max_iter and active.any():
        HD = product(D)
        HD += lam * D
        dhd = np.einsum("ij,ij->i", D, HD, dtype=np.float64)
        active &= dhd > 0
        alpha = np.where(active, rr / np.where(active, dhd, 1.0), 0.0).astype(g.dtype)
        S += alpha[:, None] * D
        R -= alpha[:, None] * HD
        rr_new = np.einsum("ij,ij->i", R, R, dtype=np.float64)
        beta = np.where(active, rr_new / np.where(rr > 0, rr, 1.0), 0.0).astype(g.dtype)
        D *= beta[:, None]
        D += R
        rr = rr_new
        active &= rr > stop
        n_iter += 1
    return S, n_iter


def _bound_update_H(data: LEMLData, A, H, lam: float, loss, n_steps: int, iu, ju):
    """``n_steps`` majorise-minimise steps of the H-step (``h_solver="bound"``).

    Label ``j``'s loss is majorised by its expansion with curvature
    ``c = loss.curvature_bound``, whose minimiser is
    ``h_j - (c sum_{i in Omega_j} a_i a_i^T + lam I)^{-1} g_j``: the matrices are
    those of the squared loss's H-step, formed once (fully observed: one shared
    ``c A^T A + lam I``) and kept over the steps, so a step costs one gradient
    ``O(|Omega| k)`` (a batch of rows at a time, :func:`~scarce.algorithms.leml.terms.loss_terms`);
    no label's objective increases.
    """
    c = float(loss.curvature_bound)
    k = A.shape[1]
    if data.fully_observed:
        M = c * (A.T @ A)
        M[np.diag_indices(k)] += lam
        M = M.astype(np.float64)

        def solve(g):
            return np.linalg.solve(M, g.T.astype(np.float64)).T.astype(A.dtype)
    else:
        G = c * data.observed_entries().weighted_grams(None, A, iu, ju)

        def solve(g):
            return _solve_grams(G, lam, g, iu, ju)
    for _ in range(n_steps):
        g = loss_terms(data, A, H, loss, labels=True).labels
        g += lam * H
        H = H - solve(g)
    return H


def update_H(data: LEMLData, W, lam: float, loss, *, H0=None, newton_max_iter: int,
             h_solver: str, cg_max_iter: int, cg_tol: float):
    """H-step: minimise ``J(W, .)`` over ``H``, all labels at once (Yu et al., Sec. 3).

    Each ``h_j`` solves a ``k``-dimensional problem over ``Omega_j = {i : (i, j) in
    Omega}`` with inputs ``a_i = W^T x_i``.  Squared loss: exact, one batched
    solve of the ``L`` normal equations (fully observed: one shared ``k x k``
    matrix ``2 A^T A + lam I``).  Logistic and squared hinge, ``h_solver="direct"``:
    ``newton_max_iter`` Newton steps for all labels together, each solving the
    ``L`` Hessians ``sum_i D''_ij a_i a_i^T + lam I`` formed explicitly
    (``O(|Omega| k^2)`` per step) with a per-label backtracking (Armijo) line
    search, so no label's objective increases.  ``h_solver="cg"``: the same
    Newton steps and line search, but each label's Newton direction comes from at
    most ``cg_max_iter`` conjugate-gradient iterations (batched over the labels,
    each stopping at its own relative residual ``cg_tol``) on Hessian-vector
    products ``V -> (D'' o (A V^T))^T A + lam V`` of cost ``O(|Omega| k)`` each,
    never forming a Hessian (a truncated Newton method).  For ``k = 100`` one
    set of explicit Hessians costs about as much as 25 such products.
    :meth:`scarce.algorithms.leml.LEML.h_step` calls it with the estimator's parameters (their
    defaults are documented there).

    Parameters
    ----------
    data : LEMLData
    W : ndarray of shape (d', k)
    lam : float
    loss : {"squared", "logistic", "sqhinge"} or Loss
    H0 : ndarray of shape (L, k), optional
        Starting point of the Newton iterations (default zeros); unused for the
        squared loss, whose solution is exact.
    newton_max_iter : int
        Newton steps (or bound steps with ``h_solver="bound"``).
    h_solver : {"direct", "cg", "bound"}
        Newton directions of the logistic and squared-hinge losses: explicit
        per-label Hessians or conjugate gradient (see above); or ``"bound"``:
        ``newton_max_iter`` majorise-minimise steps, each a gradient and a solve
        with the fixed matrices ``c sum_{i in Omega_j} a_i a_i^T + lam I``
        (``c = loss.curvature_bound``, see :func:`_bound_update_H`), without line
        search.  Unused for the squared loss.
    cg_max_iter : int
        Inner CG iterations per Newton step (``h_solver="cg"`` only).
    cg_tol : float
        Relative residual at which the inner CG stops (``h_solver="cg"`` only).

    Returns
    -------
    H : ndarray of shape (L, k)
    info : dict
        ``newton_iter``, and ``cg_iter`` for ``h_solver="cg"``.
    """
    loss = get_loss(loss)
    lam = float(lam)
    if lam <= 0:
        raise ValueError(f"lam must be positive, got {lam}")
    if h_solver not in H_SOLVERS:
        raise ValueError(f"h_solver must be one of {H_SOLVERS}, got {h_solver!r}")
    dtype = data.dtype
    W = _checked_W(W, data.n_features, dtype)
    k = W.shape[1]
    A = data.X @ W
    A = np.ascontiguousarray(A.toarray() if sp.issparse(A) else A)
    info = {"newton_iter": 0}
    iu, ju = np.triu_indices(k)

    if loss.name == "squared" and data.fully_observed:
        M = 2 * (A.T @ A)
        M[np.diag_indices(k)] += lam
        R = 2 * (data.Yt @ A)
        H = np.linalg.solve(M, R.T).T
    elif loss.name == "squared":
        ent = data.observed_entries()
        G = 2 * ent.weighted_grams(None, A, iu, ju)
        R = ent.t_times(ent.masked(2 * ent.y), A)
        H = _solve_grams(G, lam, R, iu, ju)
    else:
        H = (np.zeros((data.n_labels, k), dtype=dtype) if H0 is None
             else check_factor(H0, (data.n_labels, k), dtype, "H0"))

        if h_solver == "bound":
            H = _bound_update_H(data, A, H, lam, loss, int(newton_max_iter), iu, ju)
            info["newton_iter"] = int(newton_max_iter)
            return H, info
        ent = data.observed_entries()
        state: dict = {}  # the decision values of the last H valued, and its curvature

        def values(Hc):
            state["H"], state["z"] = Hc, ent.dots(A, Hc)
            return ent.label_sums(ent.masked(loss.value(ent.y, state["z"])))

        def gradient(Hc):
            z = state["z"] if state.get("H") is Hc else ent.dots(A, Hc)
            state["d2"] = ent.masked(loss.second_derivative(ent.y, z))
            return ent.t_times(ent.masked(loss.derivative(ent.y, z)), A)

        def direction(g):
            d2 = state["d2"]
            if h_solver == "cg":
                step, n_cg = _per_label_cg(lambda D: ent.t_times(d2 * ent.dots(A, D), A),
                                           lam, g, cg_max_iter, cg_tol)
                info["cg_iter"] = info.get("cg_iter", 0) + n_cg
                return step
            return -_solve_grams(ent.weighted_grams(d2, A, iu, ju), lam, g, iu, ju)

        H = _newton_steps(H, lam, int(newton_max_iter), values, gradient, direction, info)
    H = np.ascontiguousarray(H, dtype=dtype)
    return H, info


def _newton_steps(H, lam: float, n_steps: int, values, gradient, direction, info: dict):
    """The margin losses' Newton H-steps with a per-label backtracking (Armijo) line search,
    so that no label's objective increases; shared by :func:`update_H` (the whole data) and
    :func:`update_H_newton_by_blocks` (sums over row blocks).

    ``values(H)``: the per-label loss sums (length L, float64); ``gradient(H)``: the loss
    part of the gradient (L x k), after which ``direction(g)`` gives the Newton step from
    the curvature at that ``H``.  ``lam H`` and ``lam ||h_j||^2 / 2`` are added here.
    Counts the steps in ``info["newton_iter"]``.
    """
    dtype = H.dtype

    def per_label(Hc):
        return values(Hc) + 0.5 * lam * np.einsum("ij,ij->i", Hc, Hc, dtype=np.float64)

    f = per_label(H)
    for _ in range(n_steps):
        g = gradient(H) + lam * H
        step = direction(g)
        slope = np.einsum("ij,ij->i", g, step, dtype=np.float64)
        alpha = np.ones(H.shape[0])
        todo = slope < 0
        if not todo.any():
            break
        alpha[~todo] = 0.0
        for _ls in range(30):
            Hn = H + (alpha[:, None] * step).astype(dtype)
            fn = per_label(Hn)
            ok = fn <= f + 1e-4 * alpha * slope
            todo = todo & ~ok
            if not todo.any():
                break
            alpha[todo] *= 0.5
        if todo.any():  # some labels found no decrease: they keep their h_j
            alpha[todo] = 0.0
            H = H + (alpha[:, None] * step).astype(dtype)
            f = per_label(H)
        else:  # the last trial point is the new H: its values are known
            H, f = Hn, fn
        info["newton_iter"] += 1
    return H


# --------------------------------------------------------------------------- row blocks
def block_embedding(block: LEMLData, W) -> np.ndarray:
    """``A_b = X_b W`` (rows of the block x k), C-ordered, as :func:`update_H` forms ``A``."""
    A = block.X @ W
    return np.ascontiguousarray(A.toarray() if sp.issparse(A) else A)


def block_gram(block: LEMLData, A) -> np.ndarray:
    """``A_b^T A_b`` (k x k)."""
    return A.T @ A


def block_label_products(block: LEMLData, A) -> np.ndarray:
    """``Y_b^T A_b`` (L x k) over the block's observed entries."""
    if block.fully_observed:
        return block.Yt @ A
    ent = block.entries
    return ent.t_times(ent.masked(ent.y), A)


def block_label_grams(block: LEMLData, A, l0: int, l1: int) -> np.ndarray:
    """``sum_{i in Omega_j} a_i a_i^T`` over the block's rows, for labels ``l0 <= j < l1``:
    upper triangles, ``(l1 - l0) x k(k+1)/2``."""
    iu, ju = np.triu_indices(A.shape[1])
    return block.entries.label_grams(A, iu, ju, int(l0), int(l1))


def block_loss_gradient(block: LEMLData, A, H, loss: str) -> np.ndarray:
    """``sum_{(i, j) in Omega, i in b} loss'(y_ij, a_i^T h_j) a_i`` per label (L x k): the
    block's term of the H-step gradient of a margin loss (without ``lam H``)."""
    return loss_terms(block, A, H, loss, labels=True).labels


def block_label_losses(block: LEMLData, A, H, loss: str) -> np.ndarray:
    """``sum_{(i, j) in Omega, i in b} loss(y_ij, a_i^T h_j)`` per label (length L, as
    :func:`update_H` sums them): the block's term of the per-label objectives of the margin
    losses' Newton line search."""
    ent = block.observed_entries()
    return ent.label_sums(ent.masked(get_loss(loss).value(ent.y, ent.dots(A, H))))


def block_curvature(block: LEMLData, A, H, loss: str) -> tuple:
    """``(A_b, D''_b)``: the block's embedding with the second derivatives of the loss at
    ``H`` over its observed entries, kept where the block is for the Newton step's Hessians
    (:func:`block_weighted_label_grams`) or Hessian-vector products
    (:func:`block_curvature_product`)."""
    ent = block.observed_entries()
    return A, ent.masked(get_loss(loss).second_derivative(ent.y, ent.dots(A, H)))


def block_weighted_label_grams(block: LEMLData, curvature, l0: int, l1: int) -> np.ndarray:
    """``sum_{i in Omega_j} D''_ij a_i a_i^T`` over the block's rows for the labels
    ``l0 <= j < l1`` (upper triangles): the block's term of those labels' Newton Hessians,
    from ``curvature`` (:func:`block_curvature`)."""
    A, d2 = curvature
    iu, ju = np.triu_indices(A.shape[1])
    return block.observed_entries().label_grams(A, iu, ju, int(l0), int(l1), d2)


def block_curvature_product(block: LEMLData, curvature, V) -> np.ndarray:
    """``(D'' o (A_b V^T))^T A_b`` (L x k): the block's term of the per-label Hessian-vector
    products of the truncated Newton H-step (``h_solver="cg"``)."""
    A, d2 = curvature
    ent = block.observed_entries()
    return ent.t_times(d2 * ent.dots(A, V), A)


def solve_bound_block(G_half, c: float, lam: float, g) -> np.ndarray:
    """The bound step's ``(c G_j + lam I)^{-1} g_j`` for a label block, from ``G_half`` (the
    block sums of :func:`block_label_grams`) and ``g`` (its rows of the gradient)."""
    k = g.shape[1]
    iu, ju = np.triu_indices(k)
    return _solve_grams(float(c) * G_half, lam, g, iu, ju)


def solve_label_block(G_half, lam: float, R) -> np.ndarray:
    """``h_j`` of a label block from ``G_half`` (the block sums of :func:`block_label_grams`,
    without the factor 2) and ``R`` (its rows of ``2 sum_b Y_b^T A_b``)."""
    k = R.shape[1]
    iu, ju = np.triu_indices(k)
    return _solve_grams(2 * G_half, lam, R, iu, ju)


def sum_in_order(parts) -> np.ndarray:
    """``parts[0] + parts[1] + ...`` left to right: the fixed reduction order."""
    total = np.array(parts[0], copy=True)
    for part in parts[1:]:
        total += part
    return total


class LocalBlocks:
    """Row blocks in this process: the backend of :func:`update_H_by_blocks` without a
    cluster (the same code path, the same block order, one block after the other).

    Parameters
    ----------
    blocks : list of LEMLData
        Contiguous row blocks of the training data in row order
        (:func:`~scarce.algorithms.leml.data.split_rows`, or read one by one from a partition).
    """

    def __init__(self, blocks):
        self.blocks = list(blocks)
        if not self.blocks:
            raise ValueError("LocalBlocks needs at least one row block")
        first = self.blocks[0]
        self.n_features, self.n_labels = first.n_features, first.n_labels
        self.n_samples = sum(b.n_samples for b in self.blocks)
        self.dtype = np.dtype(first.dtype)
        self.fully_observed = first.fully_observed

    def each(self, fn, *shared, per_block=None):
        """``[fn(block_b, per_block[b], *shared) for b]`` (``per_block`` left out when None):
        the per-block terms, in block order."""
        if per_block is None:
            return [fn(block, *shared) for block in self.blocks]
        return [fn(block, item, *shared)
                for block, item in zip(self.blocks, per_block, strict=True)]

    #: label blocks of the H-step in flight at once (one: each is solved when it is built)
    in_flight = 1

    def sum(self, parts) -> np.ndarray:
        """The terms added in block order (:func:`sum_in_order`)."""
        return sum_in_order(parts)

    def reduce(self, fn, parts, *args):
        """``fn(sum of parts, *args)``: a handle for :meth:`fetch` (here the value itself)."""
        return fn(sum_in_order(parts), *args)

    def fetch(self, handle):
        """The value of a :meth:`reduce` handle."""
        return handle


def update_H_by_blocks(backend, W, lam: float, loss, *, label_block: int | None = None):
    """The squared loss's H-step from row-block partial sums (Yu et al., Sec. 3).

    The same normal equations as :func:`update_H`, ``(2 sum_{i in Omega_j} a_i a_i^T +
    lam I) h_j = 2 sum_{i in Omega_j} y_ij a_i``, with every sum over the rows taken block
    by block on ``backend`` and added in block order: equal to :func:`update_H` up to the
    order of the additions (rounding).  Fully observed: ``sum_b A_b^T A_b`` and
    ``sum_b Y_b^T A_b``, one shared ``k x k`` solve.  Missing labels: ``sum_b Y_b^T A_b``
    (``L x k``), then per label block the per-label Gram matrices of its labels summed over
    the row blocks and solved, so at most ``label_block x k x k`` Gram entries exist at once.

    Parameters
    ----------
    backend : LocalBlocks or object with the same ``each`` / ``sum`` / ``reduce`` / ``fetch``
        The row blocks (``n_features``, ``n_labels``, ``dtype``, ``fully_observed`` and
        ``in_flight`` attributes): :class:`LocalBlocks`, or ``tasks.leml_dask.RowBlockBackend`` on a
        cluster, where each label block's Gram matrices are added and solved on a worker.
    W : ndarray of shape (d', k)
    lam : float
    loss : "squared" or Loss
        Only the squared loss (see the module docstring).
    label_block : int, optional
        Labels per block of Gram matrices (default: about 2^22 / k^2 entries).

    Returns
    -------
    H : ndarray of shape (L, k)
    info : dict
        ``newton_iter`` (0: the solution is exact).
    """
    loss = get_loss(loss)
    if loss.name != "squared":
        raise ValueError(f"the H-step runs on row blocks for the squared loss only, got loss "
                         f"{loss.name!r}")
    lam = float(lam)
    if lam <= 0:
        raise ValueError(f"lam must be positive, got {lam}")
    dtype = backend.dtype
    W = _checked_W(W, backend.n_features, dtype)
    k = W.shape[1]
    A = backend.each(block_embedding, W)
    R = 2 * backend.sum(backend.each(block_label_products, per_block=A))
    if backend.fully_observed:
        M = 2 * backend.sum(backend.each(block_gram, per_block=A))
        M[np.diag_indices(k)] += lam
        H = np.linalg.solve(M, R.T).T
    else:
        H = _solve_by_label_blocks(backend, A, R, _label_step(k, label_block),
                                   solve_label_block, lam)
    return np.ascontiguousarray(H, dtype=dtype), {"newton_iter": 0}


def _label_step(k: int, label_block: int | None) -> int:
    """Labels per block of Gram matrices: ``label_block``, by default about 2^22 / k^2."""
    step = max(1, BLOCK // (k * k)) if label_block is None else int(label_block)
    if step < 1:
        raise ValueError(f"label_block must be at least 1, got {label_block}")
    return step


def _solve_by_label_blocks(backend, A, R, step: int, solve, *args,
                           grams=block_label_grams) -> np.ndarray:
    """``solve(G, *args, R[l0:l1])`` for every label block ``l0:l1`` of ``step`` labels, where
    ``G`` is the block's per-label Gram matrices (``grams(block, A_b, l0, l1)``) summed over
    the row blocks (on ``backend``, summed and solved where the parts are), at most
    ``backend.in_flight`` label blocks built and not yet solved at once; the rows of the
    solutions in label order (``R``'s shape)."""
    out = np.empty_like(R)
    window = max(1, int(getattr(backend, "in_flight", 1)))
    pending = deque()  # (l0, l1, handle)
    for l0 in range(0, R.shape[0], step):
        l1 = min(l0 + step, R.shape[0])
        parts = backend.each(grams, l0, l1, per_block=A)
        pending.append((l0, l1, backend.reduce(solve, parts, *args, R[l0:l1])))
        while len(pending) >= window:
            b0, b1, handle = pending.popleft()
            out[b0:b1] = backend.fetch(handle)
    while pending:
        b0, b1, handle = pending.popleft()
        out[b0:b1] = backend.fetch(handle)
    return out


def _margin_arguments(backend, W, H, lam, loss):
    """The checked ``(loss, lam, W, H)`` of a margin loss's H-step on ``backend``'s blocks."""
    loss = get_loss(loss)
    if loss.name == "squared":
        raise ValueError("the squared loss's H-step is exact: use update_H_by_blocks")
    lam = float(lam)
    if lam <= 0:
        raise ValueError(f"lam must be positive, got {lam}")
    W = _checked_W(W, backend.n_features, backend.dtype)
    H = check_factor(H, (backend.n_labels, W.shape[1]), backend.dtype, "H0")
    return loss, lam, W, H


def update_H_bound_by_blocks(backend, W, H, lam: float, loss, *, n_steps: int,
                             label_block: int | None = None):
    """The margin losses' bound H-step (``h_solver="bound"``, :func:`_bound_update_H`) from
    row-block partial sums.

    Each of the ``n_steps`` majorise-minimise steps is one round of block sums: the gradient
    ``sum_b`` :func:`block_loss_gradient` ``+ lam H`` (``L x k``), then the solve with the
    fixed matrices ``c sum_{i in Omega_j} a_i a_i^T + lam I`` (``c =
    loss.curvature_bound``): fully observed one shared ``k x k`` matrix, formed once from
    ``sum_b A_b^T A_b``; with missing labels the per-label Gram matrices of one label block
    at a time, summed over the row blocks and solved where they are summed (as
    :func:`update_H_by_blocks`), built again at every step so that no process holds
    ``L x k x k``.  No line search: the bound makes every step a descent step for every
    label.  Equal to :func:`update_H` with ``h_solver="bound"`` up to the order of the
    additions (rounding).

    Parameters
    ----------
    backend : LocalBlocks or object with the same interface (see :func:`update_H_by_blocks`)
    W : ndarray of shape (d', k)
    H : ndarray of shape (L, k)
        The start of the steps (as ``H0`` of :func:`update_H`).
    lam : float
    loss : "logistic" or "sqhinge" (or their Loss)
    n_steps : int
        Bound steps (the estimator's ``newton_max_iter``).
    label_block : int, optional
        Labels per block of Gram matrices (default: about 2^22 / k^2 entries).

    Returns
    -------
    H : ndarray of shape (L, k)
    info : dict
        ``newton_iter``: the steps taken.
    """
    loss, lam, W, H = _margin_arguments(backend, W, H, lam, loss)
    dtype, k = backend.dtype, W.shape[1]
    c = float(loss.curvature_bound)
    A = backend.each(block_embedding, W)
    if backend.fully_observed:
        M = c * backend.sum(backend.each(block_gram, per_block=A))
        M[np.diag_indices(k)] += lam
        M = M.astype(np.float64)
    step = _label_step(k, label_block)
    for _ in range(int(n_steps)):
        g = backend.sum(backend.each(block_loss_gradient, H, loss.name, per_block=A))
        g += lam * H
        if backend.fully_observed:
            delta = np.linalg.solve(M, g.T.astype(np.float64)).T.astype(dtype)
        else:
            delta = _solve_by_label_blocks(backend, A, g, step, solve_bound_block, c, lam)
        H = H - delta
    return np.ascontiguousarray(H, dtype=dtype), {"newton_iter": int(n_steps)}


def update_H_newton_by_blocks(backend, W, H, lam: float, loss, *, n_steps: int,
                              h_solver: str = "direct", cg_max_iter: int = 10,
                              cg_tol: float = 1e-3, label_block: int | None = None):
    """The margin losses' Newton H-step (``h_solver="direct"`` or ``"cg"``, as
    :func:`update_H`) from row-block partial sums.

    The same iterations as :func:`update_H` (:func:`_newton_steps`: a Newton direction per
    label and a per-label Armijo line search), with every sum over the rows taken block by
    block on ``backend`` and added in block order: the gradient (``L x k``) and the
    curvature ``D''`` (kept with each block, :func:`block_curvature`) once per step; the
    direction from the per-label Hessians ``sum_{i in Omega_j} D''_ij a_i a_i^T + lam I``
    of one label block at a time, summed over the row blocks and solved where they are
    summed (``"direct"``, as :func:`update_H_by_blocks` solves its Gram matrices, so no
    process holds ``L x k x k``), or from batched per-label conjugate gradient whose every
    Hessian-vector product is one round of block sums (``"cg"``); then one round of
    per-label loss sums (length ``L``) per trial point of the line search.  Equal to
    :func:`update_H` up to the order of the additions (rounding).

    Parameters
    ----------
    backend, W, H, lam, loss, label_block : as for :func:`update_H_bound_by_blocks`
    n_steps : int
        Newton steps (the estimator's ``newton_max_iter``).
    h_solver : {"direct", "cg"}
    cg_max_iter, cg_tol : as for :func:`update_H` (``"cg"`` only)

    Returns
    -------
    H : ndarray of shape (L, k)
    info : dict
        ``newton_iter``, and ``cg_iter`` for ``h_solver="cg"``.
    """
    if h_solver not in ("direct", "cg"):
        raise ValueError(f"h_solver must be 'direct' or 'cg' here, got {h_solver!r} "
                         "('bound': update_H_bound_by_blocks)")
    loss, lam, W, H = _margin_arguments(backend, W, H, lam, loss)
    dtype, k = backend.dtype, W.shape[1]
    A = backend.each(block_embedding, W)
    step = _label_step(k, label_block)
    info = {"newton_iter": 0}
    state: dict = {}

    def values(Hc):
        return backend.sum(backend.each(block_label_losses, Hc, loss.name, per_block=A))

    def gradient(Hc):
        state["curvature"] = backend.each(block_curvature, Hc, loss.name, per_block=A)
        return backend.sum(backend.each(block_loss_gradient, Hc, loss.name, per_block=A))

    def direction(g):
        curvature = state["curvature"]
        if h_solver == "cg":
            def product(V):
                return backend.sum(backend.each(block_curvature_product, V,
                                                per_block=curvature))

            found, n_cg = _per_label_cg(product, lam, g, cg_max_iter, cg_tol)
            info["cg_iter"] = info.get("cg_iter", 0) + n_cg
            return found
        return -_solve_by_label_blocks(backend, curvature, g, step, solve_bound_block, 1.0,
                                       lam, grams=block_weighted_label_grams)

    H = _newton_steps(H, lam, int(n_steps), values, gradient, direction, info)
    return np.ascontiguousarray(H, dtype=dtype), info
