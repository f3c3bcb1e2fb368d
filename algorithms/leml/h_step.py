"""LEML's H-step: minimise ``J(W, .)`` over ``H`` with ``W`` fixed (Yu et al., Sec. 3).

With ``W`` fixed the problem splits into ``L`` independent ``k``-dimensional problems, one
per label, over the inputs ``a_i = W^T x_i``:

* squared loss: for label ``j`` the normal equations
  ``(2 sum_{i in Omega_j} a_i a_i^T + lam I) h_j = 2 sum_{i in Omega_j} y_ij a_i``;
  fully observed, all labels share ``A^T A`` (one ``k x k`` solve with ``L`` right-hand
  sides);
* logistic and squared-hinge losses: batched Newton steps with a per-label backtracking
  line search, the Newton directions from explicit Hessians or per-label conjugate
  gradient; or steps on a quadratic bound, without line search.

Every sum over the rows is written once, as a sum over row blocks: a *backend* holds the
blocks and computes the per-block terms where they are (the ``block_*`` functions), then
adds them in block order (:func:`sum_in_order`), so any number of workers gives the same
bits.  :class:`LocalBlocks` holds them in this process; ``tasks.leml_dask.RowBlockBackend``
on Dask workers.  The whole data is :class:`LocalBlocks` of one block: :func:`update_H`
takes either.  With ``A_b = X_b W`` kept with block ``b``, the terms are ``A_b^T A_b``
(``k x k``), ``Y_b^T A_b`` (``L x k``), the margin losses' gradient ``D_b^T A_b``, their
per-label loss sums, and the per-label Gram matrices ``sum_{i in Omega_j, i in b} v_ij a_i
a_i^T`` (``v`` 1, or the loss's second derivatives for a Newton Hessian), built row-major
by the observed entries' :meth:`label_grams`.  Those are formed for one *label block* at a
time, summed over the row blocks and solved where they are summed, a few label blocks in
flight at once, so no process need hold ``L x k x k``; the bound steps' Gram matrices do
not change over the steps and are kept when the backend says so
(:attr:`LocalBlocks.keep_label_grams`), else built again at each step.  A default label
block holds about 2^22 elements: per label its Gram matrix's upper triangle and its rows
of the right-hand side and the solution
(:func:`~scarce.algorithms.leml.entries.label_block_elements`); the solve expands the
triangles into full ``k x k`` matrices about 2^22 elements at a time.  A label's Gram
matrix is added in row order, and with dense observed entries taken from the BLAS product
over its default label block, whatever label block holds it, so the label blocks do not
change the factors (:func:`label_block_nbytes` counts a block's bytes).

The margin losses' gradient ``D_b^T A_b`` is taken two ways on purpose: the bound steps
take it a batch of rows at a time (:func:`~scarce.algorithms.leml.terms.loss_terms`, no
``n x L`` array held), the Newton steps from the decision values each block keeps, since
their Hessians need the ``n x L`` second derivatives at that point anyway.  The Newton
steps (:func:`_newton_steps`) need the per-label objectives at every trial point of the line
search: one round of block sums per trial, each block keeping its decision values
(:func:`block_trial`) for the gradient and curvature at the point the search accepts.

References
----------
H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
with Missing Labels", ICML 2014.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from scarce.algorithms.leml.data import LEMLData, check_factor
from scarce.algorithms.leml.entries import (
    BLOCK,
    label_block_elements,
    label_groups,
    labels_per_block,
)
from scarce.algorithms.leml.losses import get_loss
from scarce.algorithms.leml.params import H_SOLVERS
from scarce.algorithms.leml.terms import loss_terms

__all__ = ["H_SOLVERS", "LocalBlocks", "label_block_nbytes", "update_H",
           "update_H_bound_by_blocks", "update_H_by_blocks", "update_H_newton_by_blocks"]


def _checked_W(W, n_features: int, dtype) -> np.ndarray:
    """``W`` as a C-contiguous (n_features, k) array of ``dtype``."""
    W = np.asarray(W)
    if W.ndim != 2 or W.shape[0] != n_features:
        raise ValueError(f"W has shape {W.shape}, expected ({n_features}, k)")
    return np.ascontiguousarray(W, dtype=dtype)


@lru_cache(maxsize=4)
def _symmetric_index(k: int) -> np.ndarray:
    """``S`` (``k * k``, read-only, kept for the next label block) with ``S[i k + j]`` the
    place of entry ``(i, j)`` (or ``(j, i)``) in an upper triangle in ``np.triu_indices(k)``
    order: ``G_tri[:, S]`` is the full matrices, one gather."""
    iu, ju = np.triu_indices(k)
    S = np.empty((k, k), dtype=np.intp)
    S[iu, ju] = S[ju, iu] = np.arange(iu.size)
    S = S.ravel()
    S.flags.writeable = False
    return S


def _solve_grams(G_tri, c: float, lam: float, R) -> np.ndarray:
    """Solve ``(c G_j + lam I) h_j = r_j`` for every label from the upper triangles ``G_tri``,
    the full matrices formed :func:`~scarce.algorithms.leml.entries.labels_per_block` ``(k^2)``
    labels at a time (one gather each, then scaled)."""
    n_labels, k = R.shape
    out = np.empty_like(R)
    step = labels_per_block(k * k)
    S, diag = _symmetric_index(k), np.arange(k)
    for s in range(0, n_labels, step):
        e = min(s + step, n_labels)
        G = np.take(G_tri[s:e], S, axis=1).reshape(e - s, k, k)
        if c != 1:
            G *= c
        G[:, diag, diag] += lam
        out[s:e] = np.linalg.solve(G, R[s:e, :, None])[:, :, 0]
        del G  # before the next batch is gathered: one batch at a time
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


def _newton_steps(H, lam: float, n_steps: int, values, gradient, direction, info: dict):
    """The margin losses' Newton H-steps with a per-label backtracking (Armijo) line search,
    so that no label's objective increases (:func:`update_H_newton_by_blocks`).

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




# --------------------------------------------------------------------------- per-block terms
def block_embedding(block: LEMLData, W) -> np.ndarray:
    """``A_b = X_b W`` (rows of the block x k), C-ordered."""
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
    return block.entries.label_grams(A, int(l0), int(l1))


def block_loss_gradient(block: LEMLData, A, H, loss: str) -> np.ndarray:
    """``sum_{(i, j) in Omega, i in b} loss'(y_ij, a_i^T h_j) a_i`` per label (L x k), a batch
    of rows at a time (:func:`~scarce.algorithms.leml.terms.loss_terms`): the block's term of
    the bound steps' gradient (without ``lam H``)."""
    return loss_terms(block, A, H, loss, labels=True).labels


class Trial(NamedTuple):
    """A block at a trial point ``H`` of the Newton line search (kept where the block is)."""

    A: np.ndarray  # the block's embedding
    z: np.ndarray  # decision values a_i^T h_j on the block's observed entries
    losses: np.ndarray  # per-label loss sums over the block (length L, float64)


class Curvature(NamedTuple):
    """A block's terms of a Newton step at the accepted point (kept where the block is)."""

    A: np.ndarray
    d2: np.ndarray  # loss''(y_ij, z_ij) on the observed entries, zero elsewhere
    gradient: np.ndarray  # sum_i loss'(y_ij, z_ij) a_i per label (L x k)


def block_trial(block: LEMLData, A, H, loss: str) -> Trial:
    """The block at ``H``: its decision values and per-label loss sums (a trial point of the
    line search, and if accepted the point of the next Newton step)."""
    ent = block.observed_entries()
    z = ent.dots(A, H)
    return Trial(A, z, ent.label_sums(ent.masked(get_loss(loss).value(ent.y, z))))


def trial_losses(block: LEMLData, trial: Trial) -> np.ndarray:
    """The block's per-label loss sums at a trial point (length L)."""
    return trial.losses


def block_curvature(block: LEMLData, trial: Trial, loss: str) -> Curvature:
    """The block's gradient ``D'^T A_b`` and second derivatives ``D''`` at a trial point, from
    its decision values; ``D''`` stays with the block for the Newton step's Hessians
    (:func:`block_weighted_label_grams`) or Hessian-vector products
    (:func:`block_curvature_product`)."""
    loss, ent, z = get_loss(loss), block.observed_entries(), trial.z
    d2 = ent.masked(loss.second_derivative(ent.y, z))
    return Curvature(trial.A, d2, ent.t_times(ent.masked(loss.derivative(ent.y, z)), trial.A))


def curvature_gradient(block: LEMLData, curvature: Curvature) -> np.ndarray:
    """The block's term of the Newton step's gradient (L x k, without ``lam H``)."""
    return curvature.gradient


def block_weighted_label_grams(block: LEMLData, curvature: Curvature, l0: int,
                               l1: int) -> np.ndarray:
    """``sum_{i in Omega_j} D''_ij a_i a_i^T`` over the block's rows for the labels
    ``l0 <= j < l1`` (upper triangles): the block's term of those labels' Newton Hessians."""
    return block.observed_entries().label_grams(curvature.A, int(l0), int(l1), curvature.d2)


def block_curvature_product(block: LEMLData, curvature: Curvature, V) -> np.ndarray:
    """``(D'' o (A_b V^T))^T A_b`` (L x k): the block's term of the per-label Hessian-vector
    products of the truncated Newton H-step (``h_solver="cg"``)."""
    ent = block.observed_entries()
    return ent.t_times(curvature.d2 * ent.dots(curvature.A, V), curvature.A)


def kept_label_grams(G_half) -> np.ndarray:
    """A label block's Gram matrices summed over the row blocks, kept where they were summed
    (the bound steps solve with them at every step)."""
    return G_half


def solve_bound_block(G_half, c: float, lam: float, g) -> np.ndarray:
    """``(c G_j + lam I)^{-1} g_j`` for a label block, from ``G_half`` (the block sums of
    :func:`block_label_grams` or :func:`block_weighted_label_grams`) and ``g`` (its rows of
    the gradient): the bound step (``c = loss.curvature_bound``) and the Newton step
    (``c = 1``, weighted Gram matrices)."""
    return _solve_grams(G_half, float(c), lam, g)


def solve_label_block(G_half, lam: float, R) -> np.ndarray:
    """``h_j`` of a label block from ``G_half`` (the block sums of :func:`block_label_grams`,
    without the factor 2) and ``R`` (its rows of ``2 sum_b Y_b^T A_b``)."""
    return _solve_grams(G_half, 2.0, lam, R)


def sum_in_order(parts) -> np.ndarray:
    """``parts[0] + parts[1] + ...`` left to right: the fixed reduction order."""
    total = np.array(parts[0], copy=True)
    for part in parts[1:]:
        total += part
    return total


class LocalBlocks:
    """Row blocks in this process: the backend of the H-step without a cluster (the same code
    path, the same block order, one block after the other); ``LocalBlocks([data])`` is the
    whole data.

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
    #: the bound steps' Gram matrices are built once and kept over the steps, here in this
    #: process (``L x k(k+1)/2`` entries, as many as the data's own labels hold when ``k`` is
    #: small beside the rows), rather than built again at each step
    keep_label_grams = True

    def sum(self, parts) -> np.ndarray:
        """The terms added in block order (:func:`sum_in_order`)."""
        return sum_in_order(parts)

    def reduce(self, fn, parts, *args):
        """``fn(sum of parts, *args)``: a handle for :meth:`fetch` (here the value itself)."""
        return fn(sum_in_order(parts), *args)

    def fetch(self, handle):
        """The value of a :meth:`reduce` handle."""
        return handle


# --------------------------------------------------------------------------- label blocks
def _label_ranges(n_labels: int, k: int, label_block: int | None) -> list[tuple[int, int]]:
    """The label blocks ``[(l0, l1), ...]``: ``label_block`` labels each, by default the groups
    of :func:`~scarce.algorithms.leml.entries.label_groups` (about 2^22 elements of Gram
    triangles and rows each).  Any label blocks give the same factors: a label's Gram matrix
    does not depend on the block that asks for it."""
    if label_block is None:
        return label_groups(n_labels, k)
    step = int(label_block)
    if step < 1:
        raise ValueError(f"label_block must be at least 1, got {label_block}")
    return [(l0, min(l0 + step, n_labels)) for l0 in range(0, n_labels, step)]


def label_block_nbytes(n_labels: int, k: int, dtype, *, parts: int, rows: int) -> int:
    """Bytes one default label block of the H-step's per-label Gram matrices takes where it is
    built and solved, an upper estimate: ``parts`` row blocks' Gram triangles of its labels,
    the product being added while one is built and the pair products of a batch of at most
    ``rows`` rows (:meth:`label_grams`), the triangles' sum and its rows of the right-hand
    side and of the solution, in ``dtype``; and one batch of full ``k x k`` matrices
    (:func:`_solve_grams`), in ``dtype`` and, for float32, in the float64 copy that
    ``np.linalg.solve`` works on.  The label block holds
    ``labels_per_block(label_block_elements(k))`` labels (at most ``n_labels``); the full
    matrices, ``labels_per_block(k^2)`` labels at a time."""
    k, item = int(k), np.dtype(dtype).itemsize
    tri = k * (k + 1) // 2
    labels = min(int(n_labels), labels_per_block(label_block_elements(k)))
    batch = min(labels, labels_per_block(k * k))
    pairs = min(BLOCK, max(1, int(rows)) * tri)
    return int(item * ((int(parts) + 2) * labels * tri + 2 * labels * k + pairs)
               + (item + (8 if item < 8 else 0)) * batch * k * k)


def _solve_by_label_blocks(backend, ranges, R, parts_of, solve, *args) -> np.ndarray:
    """``solve(G, *args, R[l0:l1])`` for every label block ``(l0, l1)`` of ``ranges``, where
    ``G`` is the sum of ``parts_of(l0, l1)`` (the row blocks' Gram matrices of those labels,
    or one kept sum), summed and solved on ``backend`` where the parts are, at most
    ``backend.in_flight`` label blocks built and not yet solved at once; the rows of the
    solutions in label order (``R``'s shape)."""
    out = np.empty_like(R)
    window = max(1, int(getattr(backend, "in_flight", 1)))
    pending = deque()  # (l0, l1, handle)
    for l0, l1 in ranges:
        pending.append((l0, l1, backend.reduce(solve, parts_of(l0, l1), *args, R[l0:l1])))
        while len(pending) >= window:
            b0, b1, handle = pending.popleft()
            out[b0:b1] = backend.fetch(handle)
    while pending:
        b0, b1, handle = pending.popleft()
        out[b0:b1] = backend.fetch(handle)
    return out


def _block_grams(backend, per_block, grams):
    """``parts_of(l0, l1)`` for :func:`_solve_by_label_blocks`: each row block's
    ``grams(block, per_block[b], l0, l1)``."""
    return lambda l0, l1: backend.each(grams, l0, l1, per_block=per_block)


# --------------------------------------------------------------------------- the H-step
def _backend_of(data):
    """``data`` as a backend: prepared data is one row block in this process."""
    return LocalBlocks([data]) if isinstance(data, LEMLData) else data


def update_H(data, W, lam: float, loss, *, H0=None, newton_max_iter: int, h_solver: str,
             cg_max_iter: int, cg_tol: float, label_block: int | None = None):
    """H-step: minimise ``J(W, .)`` over ``H``, all labels at once (Yu et al., Sec. 3).

    Each ``h_j`` solves a ``k``-dimensional problem over ``Omega_j = {i : (i, j) in
    Omega}`` with inputs ``a_i = W^T x_i``.  Squared loss: exact, the ``L`` normal equations
    (:func:`update_H_by_blocks`).  Logistic and squared hinge, ``h_solver="direct"``:
    ``newton_max_iter`` Newton steps for all labels together, each solving the ``L``
    Hessians ``sum_i D''_ij a_i a_i^T + lam I`` formed explicitly (``O(|Omega| k^2)`` per
    step) with a per-label backtracking (Armijo) line search, so no label's objective
    increases.  ``h_solver="cg"``: the same Newton steps and line search, but each label's
    Newton direction comes from at most ``cg_max_iter`` conjugate-gradient iterations
    (batched over the labels, each stopping at its own relative residual ``cg_tol``) on
    Hessian-vector products ``V -> (D'' o (A V^T))^T A + lam V`` of cost ``O(|Omega| k)``
    each, never forming a Hessian (a truncated Newton method); for ``k = 100`` one set of
    explicit Hessians costs about as much as 25 such products
    (:func:`update_H_newton_by_blocks`).  ``h_solver="bound"``: steps on a quadratic bound
    (:func:`update_H_bound_by_blocks`).  :meth:`scarce.algorithms.leml.LEML.h_step` calls it
    with the estimator's parameters (their defaults are documented there).

    Parameters
    ----------
    data : LEMLData, or a backend of row blocks
        The whole training data (one row block in this process), or its row blocks
        (:class:`LocalBlocks`, ``tasks.leml_dask.RowBlockBackend``): the same factors up to
        the order of the additions.
    W : ndarray of shape (d', k)
    lam : float
    loss : {"squared", "logistic", "sqhinge"} or Loss
    H0 : ndarray of shape (L, k), optional
        Starting point of the Newton or bound steps (default zeros); unused for the
        squared loss, whose solution is exact.
    newton_max_iter : int
        Newton steps (or bound steps with ``h_solver="bound"``).
    h_solver : {"direct", "cg", "bound"}
        Newton directions of the logistic and squared-hinge losses: explicit
        per-label Hessians or conjugate gradient (see above); or ``"bound"``:
        ``newton_max_iter`` majorise-minimise steps, each a gradient and a solve
        with the fixed matrices ``c sum_{i in Omega_j} a_i a_i^T + lam I``
        (``c = loss.curvature_bound``), without line search.  Unused for the squared loss.
    cg_max_iter : int
        Inner CG iterations per Newton step (``h_solver="cg"`` only).
    cg_tol : float
        Relative residual at which the inner CG stops (``h_solver="cg"`` only).
    label_block : int, optional
        Labels per block of Gram matrices (default: about 2^22 elements of Gram triangles and
        rows, :func:`_label_ranges`); the factors do not depend on it.

    Returns
    -------
    H : ndarray of shape (L, k)
    info : dict
        ``newton_iter``, and ``cg_iter`` for ``h_solver="cg"``.
    """
    if h_solver not in H_SOLVERS:
        raise ValueError(f"h_solver must be one of {H_SOLVERS}, got {h_solver!r}")
    backend = _backend_of(data)
    loss = get_loss(loss)
    if loss.name == "squared":
        return update_H_by_blocks(backend, W, lam, loss, label_block=label_block)
    if H0 is None:
        H0 = np.zeros((backend.n_labels, np.shape(W)[-1]), dtype=backend.dtype)
    if h_solver == "bound":
        return update_H_bound_by_blocks(backend, W, H0, lam, loss,
                                        n_steps=int(newton_max_iter), label_block=label_block)
    return update_H_newton_by_blocks(backend, W, H0, lam, loss, n_steps=int(newton_max_iter),
                                     h_solver=h_solver, cg_max_iter=cg_max_iter,
                                     cg_tol=cg_tol, label_block=label_block)


def update_H_by_blocks(backend, W, lam: float, loss, *, label_block: int | None = None):
    """The squared loss's H-step (Yu et al., Sec. 3), every sum over the rows taken block by
    block on ``backend`` and added in block order.

    The normal equations ``(2 sum_{i in Omega_j} a_i a_i^T + lam I) h_j = 2 sum_{i in
    Omega_j} y_ij a_i``.  Fully observed: ``sum_b A_b^T A_b`` and ``sum_b Y_b^T A_b``, one
    shared ``k x k`` solve.  Missing labels: ``sum_b Y_b^T A_b`` (``L x k``), then per label
    block the per-label Gram matrices of its labels summed over the row blocks and solved, so
    only the label blocks in flight hold Gram matrices (about 2^22 elements each by default).

    Parameters
    ----------
    backend : LocalBlocks or object with the same ``each`` / ``sum`` / ``reduce`` / ``fetch``
        The row blocks (``n_features``, ``n_labels``, ``dtype``, ``fully_observed`` and
        ``in_flight`` attributes): :class:`LocalBlocks`, or ``tasks.leml_dask.RowBlockBackend``
        on a cluster, where each label block's Gram matrices are added and solved on a worker.
    W : ndarray of shape (d', k)
    lam : float
    loss : "squared" or Loss
    label_block : int, optional
        Labels per block of Gram matrices (default: see :func:`_label_ranges`).

    Returns
    -------
    H : ndarray of shape (L, k)
    info : dict
        ``newton_iter`` (0: the solution is exact).
    """
    loss = get_loss(loss)
    if loss.name != "squared":
        raise ValueError(f"the exact H-step (normal equations) is for the squared loss only, "
                         f"got loss {loss.name!r}")
    lam = _checked_lam(lam)
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
        H = _solve_by_label_blocks(backend, _label_ranges(backend.n_labels, k, label_block), R,
                                   _block_grams(backend, A, block_label_grams),
                                   solve_label_block, lam)
    return np.ascontiguousarray(H, dtype=dtype), {"newton_iter": 0}


def _checked_lam(lam) -> float:
    lam = float(lam)
    if lam <= 0:
        raise ValueError(f"lam must be positive, got {lam}")
    return lam


def _margin_arguments(backend, W, H, lam, loss):
    """The checked ``(loss, lam, W, H)`` of a margin loss's H-step on ``backend``'s blocks."""
    loss = get_loss(loss)
    if loss.name == "squared":
        raise ValueError("the squared loss's H-step is exact: use update_H_by_blocks")
    lam = _checked_lam(lam)
    W = _checked_W(W, backend.n_features, backend.dtype)
    H = check_factor(H, (backend.n_labels, W.shape[1]), backend.dtype, "H0")
    return loss, lam, W, H


def update_H_bound_by_blocks(backend, W, H, lam: float, loss, *, n_steps: int,
                             label_block: int | None = None):
    """The margin losses' bound H-step (``h_solver="bound"``) from row-block sums.

    Label ``j``'s loss is majorised by its expansion with curvature ``c =
    loss.curvature_bound``, whose minimiser is ``h_j - (c sum_{i in Omega_j} a_i a_i^T + lam
    I)^{-1} g_j``: the matrices of the squared loss's H-step, which do not change over the
    steps.  Each of the ``n_steps`` steps is one round of block sums for the gradient ``g =
    sum_b`` :func:`block_loss_gradient` ``+ lam H`` (``L x k``, ``O(|Omega| k)``), then the
    solve: fully observed with one shared ``k x k`` matrix from ``sum_b A_b^T A_b``; with
    missing labels with the per-label Gram matrices of one label block at a time, summed over
    the row blocks where they are solved, built once and kept when the backend keeps them
    (:attr:`LocalBlocks.keep_label_grams`), else built again at every step.  No line search:
    no label's objective increases.

    Parameters
    ----------
    backend : LocalBlocks or object with the same interface (see :func:`update_H_by_blocks`)
    W : ndarray of shape (d', k)
    H : ndarray of shape (L, k)
        The start of the steps (``H0`` of :func:`update_H`).
    lam : float
    loss : "logistic" or "sqhinge" (or their Loss)
    n_steps : int
        Bound steps (the estimator's ``newton_max_iter``).
    label_block : int, optional
        Labels per block of Gram matrices (default: see :func:`_label_ranges`).

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
    else:
        ranges = _label_ranges(backend.n_labels, k, label_block)
        parts_of = _block_grams(backend, A, block_label_grams)
        if getattr(backend, "keep_label_grams", False) and n_steps > 0:
            kept = {l0: backend.reduce(kept_label_grams, parts_of(l0, l1))
                    for l0, l1 in ranges}

            def parts_of(l0, l1):
                return [kept[l0]]
    for _ in range(int(n_steps)):
        g = backend.sum(backend.each(block_loss_gradient, H, loss.name, per_block=A))
        g += lam * H
        if backend.fully_observed:
            delta = np.linalg.solve(M, g.T.astype(np.float64)).T.astype(dtype)
        else:
            delta = _solve_by_label_blocks(backend, ranges, g, parts_of, solve_bound_block,
                                           c, lam)
        H = H - delta
    return np.ascontiguousarray(H, dtype=dtype), {"newton_iter": int(n_steps)}


def update_H_newton_by_blocks(backend, W, H, lam: float, loss, *, n_steps: int,
                              h_solver: str = "direct", cg_max_iter: int = 10,
                              cg_tol: float = 1e-3, label_block: int | None = None):
    """The margin losses' Newton H-step (``h_solver="direct"`` or ``"cg"``) from row-block
    sums.

    :func:`_newton_steps` (a Newton direction per label and a per-label Armijo line search)
    with every sum over the rows taken block by block on ``backend`` and added in block
    order: per trial point of the line search one round of per-label loss sums (length
    ``L``), each block keeping its decision values (:func:`block_trial`); at the accepted
    point the gradient (``L x k``), the curvature ``D''`` staying with each block
    (:func:`block_curvature`); the direction from the per-label Hessians ``sum_{i in
    Omega_j} D''_ij a_i a_i^T + lam I`` of one label block at a time, summed over the row
    blocks and solved where they are summed (``"direct"``), or from batched per-label
    conjugate gradient whose every Hessian-vector product is one round of block sums
    (``"cg"``).

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
    ranges = _label_ranges(backend.n_labels, k, label_block)
    info = {"newton_iter": 0}
    state: dict = {}  # the last trial point and its blocks; the curvature of the last step

    def values(Hc):
        state["H"], state["trials"] = Hc, backend.each(block_trial, Hc, loss.name, per_block=A)
        return backend.sum(backend.each(trial_losses, per_block=state["trials"]))

    def gradient(Hc):
        trials = (state["trials"] if state.get("H") is Hc
                  else backend.each(block_trial, Hc, loss.name, per_block=A))
        state.clear()  # the decision values are needed no more
        state["curvature"] = backend.each(block_curvature, loss.name, per_block=trials)
        return backend.sum(backend.each(curvature_gradient, per_block=state["curvature"]))

    def direction(g):
        curvature = state["curvature"]
        if h_solver == "cg":
            def product(V):
                return backend.sum(backend.each(block_curvature_product, V,
                                                per_block=curvature))

            found, n_cg = _per_label_cg(product, lam, g, cg_max_iter, cg_tol)
            info["cg_iter"] = info.get("cg_iter", 0) + n_cg
            return found
        return -_solve_by_label_blocks(
            backend, ranges, g, _block_grams(backend, curvature, block_weighted_label_grams),
            solve_bound_block, 1.0, lam)

    H = _newton_steps(H, lam, int(n_steps), values, gradient, direction, info)
    return np.ascontiguousarray(H, dtype=dtype), info
