"""LEML: low-rank empirical risk minimisation for multi-label learning.

The model is ``Z = W H^T`` with ``W`` (d x k) and ``H`` (L x k); the decision
value of label ``j`` for instance ``x_i`` is ``x_i^T W h_j``.  Training minimises
over the observed entries ``Omega`` of the label matrix

    J(W, H) = sum_{(i, j) in Omega} loss(Y_ij, x_i^T W h_j)
              + (lam / 2) (||W||_F^2 + ||H||_F^2)

(Yu et al., Sec. 2: the trace-norm regulariser in its factored form, since
``||Z||_* = min_{Z = W H^T} (||W||_F^2 + ||H||_F^2) / 2``)

by alternating minimisation (Sec. 3): with ``H`` fixed the problem in ``W`` is a
``d k``-dimensional regularised ERM over the features ``x~_ij = h_j (x) x_i``; with
``W`` fixed it splits into ``L`` independent ``k``-dimensional problems, one per
label.  The half-steps are public functions over a :class:`LEMLData` built once
by :func:`prepare_data`, so a caller can run and store one half-step at a time;
:class:`LEML` is the short loop over them.

Costs (``n`` instances, ``nnz(X)`` feature non-zeros, ``|Omega|`` observed entries):

* W-step, any loss with a mask (Sec. 3): gradient and Hessian-vector product
  ``V -> X^T (D_Omega(X V H^T) H) + lam V`` use ``X V`` (n x k), decision values
  on ``Omega`` only, a sparse ``Omega`` times ``H`` and ``X^T`` times an n x k
  matrix: ``O((nnz(X) + |Omega| + d + L) k)``; ``x~_ij`` is never formed.  When at
  least 1/16 of the entries are observed the entries are handled as a dense n x L
  block with a 0/1 mask instead (BLAS beats gathers there; see ``prepare_data``).
* W-step, squared loss with every label observed (Sec. 3, the special case): ``||Y - X W H^T||^2``
  expands so that only ``Y H`` (``nnz(Y) k``), ``X V`` and ``X^T U`` and the
  ``k x k`` Gram matrix ``H^T H`` appear; the Hessian-vector product is
  ``2 X^T X V (H^T H) + lam V``, and nothing costs ``n L``.
* H-step, squared loss: for label ``j`` the normal equations
  ``(2 sum_{i in Omega_j} a_i a_i^T + lam I) h_j = 2 sum_{i in Omega_j} y_ij a_i``
  with ``a_i = W^T x_i``; the ``L`` Gram matrices come from one sparse product
  ``Omega^T [a_i (x) a_i]`` (``O(|Omega| k^2)``) and are solved as one batched
  ``(L, k, k)`` system; fully observed, all labels share ``A^T A`` (one ``k x k``
  solve with ``L`` right-hand sides).  Other losses: batched Newton with a
  per-label backtracking line search.

Labels: ``Y`` holds ``{0, 1}``; ``Omega`` is a sparse boolean mask, or the non-NaN
entries of a dense ``Y``; without either every entry is observed and absent
labels are 0 (the Extreme Classification convention).

References
----------
H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
with Missing Labels", ICML 2014.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils import check_array, check_random_state
from sklearn.utils.validation import check_is_fitted
from tqdm.auto import tqdm

from algorithms.leml.losses import derivative_into, get_loss
from algorithms.leml.solvers import conjugate_gradient, trust_region_newton
from algorithms.memory import check_allocation

__all__ = [
    "LEML",
    "LEMLData",
    "prepare_data",
    "update_W",
    "update_H",
    "w_gradient",
    "w_loss_value",
    "WStepProducts",
    "solve_w_step",
    "check_w_step",
    "row_block_bounds",
    "split_rows",
    "objective",
    "top_k_from_scores",
    "predict_top_k_in_batches",
    "threshold_in_batches",
    "initial_factors",
    "squared_margin_start",
    "H_SOLVERS",
    "W_SOLVERS",
    "scores_linear",
    "top_k_linear",
]

log = logging.getLogger(__name__)

# Solvers of the H-step's Newton steps (logistic and squared hinge), see update_H.
H_SOLVERS = ("direct", "cg", "bound")
# Solvers of the W-step for the logistic and squared-hinge losses, see update_W.
W_SOLVERS = ("tron", "bound")
# Largest d' for which the "bound" W-step diagonalises X^T X (d' x d', once per fit);
# above it the bound's linear system is solved by CG.
_EIG_MAX = 4096
# Elements per temporary block (entries x k, rows x k(k+1)/2, labels x k x k).
_BLOCK = 1 << 22
# Largest n x L stored dense for partially observed labels (1 GiB per float32 array).
_DENSE_MAX = 1 << 28


# --------------------------------------------------------------------------- entries
class _SparseEntries:
    """The observed entries ``Omega`` of an n x L label matrix, in CSR order.

    Used when few entries are observed (below 1/16 of ``n L``): decision values by a
    chunked gather over the entries, products with ``H`` and ``A`` as sparse-dense
    products, all ``O(|Omega| k)``.  Vectors over the entries are 1-D, in CSR order.
    """

    dense = False

    def __init__(self, indptr, cols, y, shape):
        n, n_labels = shape
        self.shape = shape
        self.indptr = indptr
        self.cols = cols
        self.rows = np.repeat(np.arange(n, dtype=cols.dtype), np.diff(indptr))
        self.y = y
        self.perm = np.argsort(cols, kind="stable")
        self.t_indices = self.rows[self.perm]
        self.t_indptr = np.zeros(n_labels + 1, dtype=indptr.dtype)
        np.cumsum(np.bincount(cols, minlength=n_labels), out=self.t_indptr[1:])

    @property
    def size(self) -> int:
        return int(self.cols.shape[0])

    def masked(self, v):
        """``v`` restricted to ``Omega`` (already so: only observed entries are stored)."""
        return v

    def full(self, value, dtype):
        return np.full(self.size, value, dtype=dtype)

    def dots(self, A, H):
        """``z_e = A[row_e] . H[col_e]`` for every observed entry ``e``."""
        out = np.empty(self.size, dtype=np.result_type(A, H))
        # Chunks of about 2^18 gathered elements stay in cache: 3-4x faster than
        # chunks of 2^22 (Bibtex, 155K entries, k = 50: 8-11 ms against 37 ms).
        step = max(1, (1 << 18) // max(A.shape[1], 1))
        for s in range(0, self.size, step):
            e = min(s + step, self.size)
            np.einsum("ij,ij->i", A[self.rows[s:e]], H[self.cols[s:e]], out=out[s:e])
        return out

    def times(self, v, H):
        """``S H`` with ``S`` the n x L sparse matrix holding ``v`` on ``Omega``."""
        return sp.csr_matrix((v, self.cols, self.indptr), shape=self.shape) @ H

    def t_times(self, v, A):
        """``S^T A`` (L x k) with ``S`` holding ``v`` on ``Omega``."""
        n, n_labels = self.shape
        St = sp.csr_matrix((v[self.perm], self.t_indices, self.t_indptr), shape=(n_labels, n))
        return St @ A

    def label_sums(self, v):
        return np.bincount(self.cols, weights=v, minlength=self.shape[1])

    def row_slice(self, start, stop):
        """The entries of rows ``start:stop`` (copies), as their own ``_SparseEntries``."""
        e0, e1 = self.indptr[start], self.indptr[stop]
        return _SparseEntries(self.indptr[start:stop + 1] - e0, self.cols[e0:e1].copy(),
                              self.y[e0:e1].copy(), (stop - start, self.shape[1]))

    def weighted_grams(self, v, A, iu, ju):
        """``G[j] = sum_{i in Omega_j} v_ij a_i a_i^T``, upper triangles (L x k(k+1)/2)."""
        n, n_labels = self.shape
        G = np.zeros((n_labels, iu.size), dtype=A.dtype)
        step = max(1, _BLOCK // max(iu.size, 1))
        for r0 in range(0, n, step):
            r1 = min(r0 + step, n)
            e0, e1 = self.indptr[r0], self.indptr[r1]
            if e0 == e1:
                continue
            vals = np.ones(e1 - e0, dtype=A.dtype) if v is None else v[e0:e1]
            S = sp.csr_matrix((vals, self.cols[e0:e1], self.indptr[r0:r1 + 1] - e0),
                              shape=(r1 - r0, n_labels))
            block = A[r0:r1]
            G += S.T @ (block[:, iu] * block[:, ju])
        return G


class _DenseEntries:
    """An n x L label matrix stored dense, with an optional 0/1 mask of observed entries.

    Used for the logistic and squared-hinge losses on fully observed labels, and
    whenever at least 1/16 of the entries are observed (and ``n L <= 2^28``): then
    scoring every entry by BLAS (``A H^T``) and zeroing the unobserved ones is
    faster than gathering the observed ones.  Measured W-steps (20 CG iterations,
    k = 50, float32, one thread): Bibtex 20% observed 0.54 s dense against 0.71 s
    sparse; Delicious 20% observed 2.0 s against 6.2 s, 40% observed 2.0 s against
    11.6 s; the crossover is near 6-9% observed.  Vectors over the entries are n x L arrays; callers
    pass them through :meth:`masked` so unobserved entries contribute nothing.
    """

    dense = True

    def __init__(self, y, mask=None):
        self.y = y
        self.mask = mask  # None: all observed; else 0/1 array in y's dtype
        self.shape = y.shape

    @property
    def size(self) -> int:
        return int(self.y.size if self.mask is None else np.count_nonzero(self.mask))

    def masked(self, v):
        return v if self.mask is None else v * self.mask

    def full(self, value, dtype):
        if self.mask is None:
            return np.full(self.shape, value, dtype=dtype)
        return (value * self.mask).astype(dtype, copy=False)

    def dots(self, A, H):
        return A @ H.T

    def times(self, v, H):
        return v @ H

    def t_times(self, v, A):
        return v.T @ A

    def label_sums(self, v):
        return v.sum(axis=0, dtype=np.float64)

    def row_slice(self, start, stop):
        """Rows ``start:stop`` (copies), as their own ``_DenseEntries``."""
        mask = None if self.mask is None else self.mask[start:stop].copy()
        return _DenseEntries(self.y[start:stop].copy(), mask)

    def weighted_grams(self, v, A, iu, ju):
        n = A.shape[0]
        if v is None:
            v = self.mask
        G = np.zeros((self.shape[1], iu.size), dtype=A.dtype)
        step = max(1, _BLOCK // max(iu.size, self.shape[1], 1))
        for r0 in range(0, n, step):
            block = A[r0:r0 + step]
            P = block[:, iu] * block[:, ju]
            G += P.sum(axis=0) if v is None else v[r0:r0 + step].T @ P
        return G


# --------------------------------------------------------------------------- data
class LEMLData:
    """Training data prepared once for the half-steps (see :func:`prepare_data`).

    Attributes
    ----------
    X : scipy.sparse.csr_matrix or ndarray of shape (n, d')
        Features in the working dtype, with a trailing constant column when
        ``fit_intercept`` (then ``d' = d + 1``).
    Xt : scipy.sparse.csr_matrix or ndarray of shape (d', n)
        An explicit CSR (or C-ordered) copy of ``X^T``: ``X^T U`` on it is about
        1.7x faster than on the CSC view ``X.T``.
    Y : scipy.sparse.csr_matrix of shape (n, L) or None
        The binary label matrix when every entry is observed, else None.
    entries : object or None
        The observed entries when some are missing (else built on demand for the
        non-squared losses, dense n x L).
    fully_observed : bool
    fit_intercept : bool
    """

    def __init__(self, X, Xt, n_labels, *, Y=None, entries=None, fit_intercept=False):
        self.X = X
        self.Xt = Xt
        self.n_labels = int(n_labels)
        self.Y = Y
        self.Yt = None if Y is None else Y.T.tocsr()
        self.entries = entries
        self.fit_intercept = bool(fit_intercept)
        self._gram_eigh = None

    def gram_eigh(self):
        """Eigendecomposition ``X^T X = U diag(s) U^T`` (computed in float64 once, then
        kept): ``(s, U)`` with ``s >= 0`` (float64) and ``U`` in the working dtype."""
        if self._gram_eigh is None:
            X = self.X.astype(np.float64)
            G = X.T @ X
            G = G.toarray() if sp.issparse(G) else np.asarray(G)
            s, U = np.linalg.eigh(G)
            self._gram_eigh = (np.maximum(s, 0.0), np.ascontiguousarray(U, dtype=self.dtype))
        return self._gram_eigh

    @property
    def fully_observed(self) -> bool:
        return self.Y is not None

    def xt_matmul(self, U):
        """``X^T U`` (d' x k).

        On the explicit CSR copy ``Xt`` (a gather from ``U`` per non-zero), except
        when the d' x k result fits in about 1 MiB: then the CSC view ``X.T``,
        which scatters into that cache-resident result, was 1.2-2x faster
        (Bibtex d = 1836, Delicious d = 500, k <= 100); with many features the CSR
        copy is the faster one (``X.T @ U`` on the CSC view of a 110K x 367K matrix with
        11M non-zeros was 1.7x slower than on the CSR copy).
        """
        if sp.issparse(self.X) and self.X.shape[1] * U.shape[1] * U.itemsize <= 1 << 20:
            return self.X.T @ U
        return self.Xt @ U

    @property
    def n_samples(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Columns of :attr:`X` (including the constant one)."""
        return int(self.X.shape[1])

    @property
    def dtype(self) -> np.dtype:
        return self.X.dtype

    @property
    def n_observed(self) -> int:
        """``|Omega|``."""
        if self.fully_observed:
            return self.n_samples * self.n_labels
        return self.entries.size

    def observed_entries(self):
        """The observed entries; for fully observed data a dense n x L copy of ``Y``
        (built once, only the logistic and squared-hinge losses need it)."""
        if self.entries is None:
            check_allocation(
                self.Y.shape, self.Y.dtype,
                what="LEML with the logistic or squared-hinge loss on fully observed labels "
                "(dense n x L label copy)",
                advice="use loss 'squared' (its fully observed case never forms n x L) or "
                "train on a seeded sample of the rows")
            self.entries = _DenseEntries(self.Y.toarray())
        return self.entries


def _check_X(X, dtype) -> sp.csr_matrix | np.ndarray:
    X = check_array(X, accept_sparse="csr", dtype=dtype, order="C")
    if sp.issparse(X):
        X = sp.csr_matrix(X)
    return X


def _add_constant_column(X):
    n = X.shape[0]
    if sp.issparse(X):
        ones = sp.csr_matrix(np.ones((n, 1), dtype=X.dtype))
        return sp.hstack([X, ones], format="csr", dtype=X.dtype)
    return np.hstack([X, np.ones((n, 1), dtype=X.dtype)])


def _check_binary(values, what):
    bad = (values != 0) & (values != 1)
    if bad.any():
        raise ValueError(f"{what} must contain only 0 and 1 (or NaN for missing in a dense Y), "
                         f"found {values[bad][0]!r}")


def _labels(Y, mask, n, dtype, entries="auto"):
    """Return ``(Y_full_csr or None, entries or None, n_labels)``."""
    if entries not in ("auto", "sparse", "dense"):
        raise ValueError(f"entries must be 'auto', 'sparse' or 'dense', got {entries!r}")
    if sp.issparse(Y):
        Yc = sp.csr_matrix(Y, dtype=np.float64, copy=True)
        if Yc.shape[0] != n:
            raise ValueError(f"X has {n} rows but Y has {Yc.shape[0]}")
        Yc.sum_duplicates()
        if np.isnan(Yc.data).any():
            raise ValueError("a sparse Y cannot mark missing entries with NaN; pass a mask "
                             "(or a dense Y with NaN)")
        _check_binary(Yc.data, "Y")
        Yc.eliminate_zeros()
        missing = None
    else:
        Yd = np.asarray(Y, dtype=np.float64)
        if Yd.ndim != 2:
            raise ValueError(f"Y must be 2-D (n_samples, n_labels), got shape {Yd.shape}")
        if Yd.shape[0] != n:
            raise ValueError(f"X has {n} rows but Y has {Yd.shape[0]}")
        missing = np.isnan(Yd)
        _check_binary(Yd[~missing], "Y")
        if not missing.any():
            missing = None
        Yc = sp.csr_matrix(np.where(np.isnan(Yd), 0, Yd))
    n_labels = Yc.shape[1]
    if mask is None and missing is None:
        return sp.csr_matrix(Yc, dtype=dtype), None, n_labels

    if mask is None:
        omega = sp.csr_matrix(~missing)
    else:
        if mask.shape != (n, n_labels):
            raise ValueError(f"mask has shape {mask.shape} but Y has shape {(n, n_labels)}")
        omega = sp.csr_matrix(mask, copy=True).astype(bool)
        omega.eliminate_zeros()
        if missing is not None:
            omega = omega.multiply(sp.csr_matrix(~missing)).tocsr().astype(bool)
    omega.sum_duplicates()
    omega.sort_indices()
    if omega.nnz == n * n_labels:
        return sp.csr_matrix(Yc, dtype=dtype), None, n_labels

    if entries == "auto":
        dense = 16 * omega.nnz >= n * n_labels and n * n_labels <= _DENSE_MAX
    else:
        dense = entries == "dense"
    if dense:  # many observed: dense with a mask (see _DenseEntries)
        check_allocation((n, n_labels), dtype, what="observed labels stored dense (n x L)",
                         advice="use entries='sparse'", copies=2)
        y = np.zeros((n, n_labels), dtype=dtype)
        y[Yc.nonzero()] = 1
        return None, _DenseEntries(y, omega.toarray().astype(dtype)), n_labels
    index_dtype = np.int64 if max(omega.nnz, n, n_labels) >= 2**31 - 1 else np.int32
    indptr = omega.indptr.astype(index_dtype)
    cols = omega.indices.astype(index_dtype)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    key = rows * n_labels + cols
    Yc.sort_indices()
    ykey = np.repeat(np.arange(n, dtype=np.int64), np.diff(Yc.indptr)) * n_labels + Yc.indices
    pos = np.searchsorted(ykey, key)
    hit = pos < ykey.size
    hit[hit] = ykey[pos[hit]] == key[hit]
    entries = _SparseEntries(indptr, cols, hit.astype(dtype), (n, n_labels))
    return None, entries, n_labels


def prepare_data(X, Y, mask=None, *, fit_intercept: bool = False,
                 dtype=np.float32, entries: str = "auto") -> LEMLData:
    """Validate and convert training data once for :func:`update_W` / :func:`update_H`.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n, d)
        Features; converted to CSR (or a C-ordered array) of ``dtype``.
    Y : {array-like, sparse matrix} of shape (n, L)
        Labels in ``{0, 1}``; a dense ``Y`` may mark missing entries with NaN.
    mask : {array-like, sparse matrix} of shape (n, L), optional
        Observed entries ``Omega`` (non-zero = observed).  None: every entry of ``Y``
        that is not NaN is observed; absent labels of a sparse ``Y`` are observed 0.
    fit_intercept : bool, default=False
        Append a constant feature 1 (its weights, the last row of ``W``, are
        regularised like the others).
    dtype : {np.float32, np.float64}, default=np.float32
    entries : {"auto", "sparse", "dense"}, default="auto"
        How partially observed labels are stored: ``"sparse"`` keeps only ``Omega``
        (cost ``O(|Omega| k)`` per pass), ``"dense"`` an n x L array with a 0/1 mask
        (``O(n L k)`` BLAS flops per pass); ``"auto"`` picks dense when at least 1/16
        of the entries are observed and ``n L <= 2^28``.  Results agree to rounding.

    Returns
    -------
    LEMLData

    Raises
    ------
    ValueError
        On mismatched shapes, labels other than 0/1, or an unsupported dtype.
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    X = _check_X(X, dtype)
    if fit_intercept:
        X = _add_constant_column(X)
    Xt = X.T.tocsr() if sp.issparse(X) else np.ascontiguousarray(X.T)
    Y_full, ent, n_labels = _labels(Y, mask, X.shape[0], dtype, entries)
    return LEMLData(X, Xt, n_labels, Y=Y_full, entries=ent, fit_intercept=fit_intercept)


def row_block_bounds(n_samples: int, n_blocks: int) -> list[tuple[int, int]]:
    """Row ranges ``[(start, stop), ...]`` of ``min(n_blocks, n_samples)`` contiguous blocks.

    Block ``b`` holds rows ``b n // B`` to ``(b + 1) n // B`` (``B`` blocks), so the
    blocks depend only on ``n`` and ``B`` and their sizes differ by at most one row.
    """
    n_samples, n_blocks = int(n_samples), int(n_blocks)
    if n_blocks < 1:
        raise ValueError(f"n_blocks must be at least 1, got {n_blocks}")
    n_blocks = max(1, min(n_blocks, n_samples))
    edges = [b * n_samples // n_blocks for b in range(n_blocks + 1)]
    return list(zip(edges[:-1], edges[1:], strict=True))


def split_rows(data: LEMLData, n_blocks: int) -> list[LEMLData]:
    """Split prepared data into contiguous row blocks (see :func:`row_block_bounds`).

    The W-step's gradient and Hessian-vector product are sums over the rows of
    ``X`` (and of the label rows), so over the blocks: for every block ``b``,
    ``WStepProducts(blocks[b], ...)`` gives one term and the terms add up to the
    products of ``data`` (up to rounding).  Each block is a :class:`LEMLData` with
    its own copies of its rows of ``X``, ``X^T``, ``Y`` and the observed entries.

    Parameters
    ----------
    data : LEMLData
    n_blocks : int
        Number of blocks, clipped to the number of rows.

    Returns
    -------
    list of LEMLData
    """
    blocks = []
    for start, stop in row_block_bounds(data.n_samples, n_blocks):
        X = data.X[start:stop]
        X = sp.csr_matrix(X, copy=True) if sp.issparse(X) else np.array(X, order="C")
        Xt = X.T.tocsr() if sp.issparse(X) else np.ascontiguousarray(X.T)
        Y = None if data.Y is None else sp.csr_matrix(data.Y[start:stop], copy=True)
        entries = None if data.entries is None else data.entries.row_slice(start, stop)
        blocks.append(LEMLData(X, Xt, data.n_labels, Y=Y, entries=entries,
                               fit_intercept=data.fit_intercept))
    return blocks


# --------------------------------------------------------------------------- half-steps
def _check_factor(M, shape, dtype, name):
    M = np.asarray(M)
    if M.shape != shape:
        raise ValueError(f"{name} has shape {M.shape}, expected {shape}")
    return np.ascontiguousarray(M, dtype=dtype)


def _sqnorm(M) -> float:
    return float(np.vdot(M, M))


def objective(data: LEMLData, W, H, lam: float, loss="squared") -> float:
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
    W = _check_factor(W, (data.n_features, k), data.dtype, "W")
    H = _check_factor(H, (data.n_labels, k), data.dtype, "H")
    A = data.X @ W
    reg = 0.5 * lam * (_sqnorm(W.astype(np.float64)) + _sqnorm(H.astype(np.float64)))
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
    fully observed labels: ``2 X^T (X W H^T H - Y H)`` and ``V -> 2 X^T X V (H^T H)``.

    Parameters
    ----------
    data : LEMLData
    H : ndarray of shape (L, k)
    W : ndarray of shape (d', k)
    loss : {"squared", "logistic", "sqhinge"} or Loss, default="squared"
    z : ndarray, optional
        Decision values on the observed entries of ``data`` at ``W`` if already
        computed (see :func:`w_loss_value`).
    gram_left : bool, optional
        Squared loss, fully observed: apply ``2 H^T H`` to ``X^T X V`` (True) or to
        ``X V`` (False); default: on the smaller side of ``data``, ``d' <= n``.  A
        row block passes the choice of the whole set, so it associates the same way.
    """

    def __init__(self, data: LEMLData, H, W, loss="squared", *, z=None, gram_left=None):
        self.data, self.H, self.W = data, H, W
        self.loss = loss = get_loss(loss)
        self.fast = loss.name == "squared" and data.fully_observed
        if self.fast:
            self.G2 = 2 * (H.T @ H)
            self.gram_left = (data.n_features <= data.n_samples if gram_left is None
                              else bool(gram_left))
            return
        self.entries = ent = data.observed_entries()
        self.z = ent.dots(data.X @ W, H) if z is None else z
        if loss.constant_curvature:
            c = float(loss.second_derivative(np.zeros(1), np.zeros(1, dtype=data.dtype))[0])
            self.d2 = ent.full(c, data.dtype)
        else:
            self.d2 = ent.masked(loss.second_derivative(ent.y, self.z))

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
        if self.fast:
            return xt(X @ V) @ self.G2 if self.gram_left else xt((X @ V) @ self.G2)
        ent = self.entries
        return xt(ent.times(self.d2 * ent.dots(X @ V, self.H), self.H))


def w_loss_value(data: LEMLData, H, W, loss="squared") -> tuple[float, np.ndarray]:
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


def w_gradient(data: LEMLData, H, W, lam: float, loss="squared", *, z=None):
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


class _LocalWOperators:
    """The W-step's products on one process, for :func:`solve_w_step`."""

    def __init__(self, data: LEMLData, H, loss):
        self.data, self.H, self.loss = data, H, loss

    def value(self, W):
        return w_loss_value(self.data, self.H, W, self.loss)

    def products(self, W, state=None):
        return WStepProducts(self.data, self.H, W, self.loss, z=state)


def check_w_step(n_features: int, n_labels: int, dtype, H, lam: float, W0=None):
    """Validate the inputs of a W-step: returns ``(H, lam, W0)`` in ``dtype`` (W0 default 0)."""
    lam = float(lam)
    if lam <= 0:
        raise ValueError(f"lam must be positive, got {lam}")
    H = np.ascontiguousarray(H, dtype=dtype)
    if H.ndim != 2 or H.shape[0] != n_labels:
        raise ValueError(f"H has shape {H.shape}, expected ({n_labels}, k)")
    shape = (n_features, H.shape[1])
    W0 = np.zeros(shape, dtype=dtype) if W0 is None else _check_factor(W0, shape, dtype, "W0")
    return H, lam, W0


def solve_w_step(operators, W0, lam: float, loss="squared", *, cg_max_iter: int = 25,
                 cg_tol: float = 1e-3, newton_max_iter: int = 3):
    """The solver of :func:`update_W` over any provider of the W-step's loss terms.

    ``operators.products(W, state)`` returns an object with ``gradient()`` and
    ``hess_vec(V)`` (the loss terms, as :class:`WStepProducts`) and
    ``operators.value(W)`` returns ``(loss term, state)`` (as :func:`w_loss_value`;
    ``state`` is passed back to ``products``).  :func:`update_W` computes them on
    one process; a distributed caller sums them over row blocks held elsewhere
    (``tasks.leml_dask``) and gets the same CG / TRON iterations.

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
                                                   max_iter=cg_max_iter)
        W = W0 + step
    else:
        def fun(Wc):
            f, state = operators.value(Wc)
            return f + 0.5 * lam * _sqnorm(Wc), state

        def gradient(Wc, state):
            return _regularised(operators.products(Wc, state), Wc, lam)

        res = trust_region_newton(fun, gradient, W0, tol=1e-3, max_iter=newton_max_iter,
                                  cg_tol=cg_tol, cg_max_iter=cg_max_iter)
        W = res.x
        info["cg_iter"], info["newton_iter"] = res.n_cg, res.n_iter
    return np.ascontiguousarray(W, dtype=W0.dtype), info


def _w_bound_solver(data: LEMLData, HtH, lam: float, c: float, cg_max_iter: int,
                    cg_tol: float):
    """The solver ``R -> S`` of ``c X^T X S (H^T H) + lam S = R`` (S and R d' x k), built once
    per W-step: H is fixed over its steps, so the factors below are too.

    With ``d' <= _EIG_MAX``: exactly, from ``X^T X = U diag(s) U^T`` (once per data) and
    ``H^T H = Q diag(t) Q^T``: ``S = U [(U^T R Q) / (c s t^T + lam)] Q^T``.  Otherwise
    by at most ``cg_max_iter`` CG iterations on the product
    ``V -> c X^T (X V) (H^T H) + lam V`` (no n x L term)."""
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

    def solve(R):
        return conjugate_gradient(hess_vec, R, tol=cg_tol, max_iter=cg_max_iter)[0]

    return solve


def _bound_update_W(data: LEMLData, H, W, lam: float, loss, n_steps: int,
                    cg_max_iter: int, cg_tol: float):
    """``n_steps`` majorise-minimise steps of the W-step (``w_solver="bound"``).

    With ``c = loss.curvature_bound`` every entry's loss is at most its second-order
    expansion with curvature ``c``, so, adding the unobserved entries' squares too,
    ``J(W + S, H) <= J(W, H) + <G, S> + (c/2) ||X S H^T||_F^2 + lam <W, S> + lam ||S||^2 / 2``
    with ``G = X^T (D H)`` the loss gradient.  Its minimiser solves
    ``c X^T X S H^T H + lam S = -(G + lam W)`` (:func:`_w_bound_solver`), a system of
    the fully observed squared loss's structure, so a step costs one gradient
    (``O(|Omega| k)``) and no Hessian-vector product over ``Omega``; the objective
    never increases (Bohning and Lindsay's bound for the logistic loss).
    """
    ent = data.observed_entries()
    solve = _w_bound_solver(data, H.T @ H, lam, float(loss.curvature_bound), cg_max_iter,
                            cg_tol)
    for _ in range(n_steps):
        D = derivative_into(loss, ent.y, ent.dots(data.X @ W, H))
        R = data.xt_matmul(ent.times(ent.masked(D), H))
        del D
        R += lam * W
        W = W - solve(R)
    return W


def update_W(data: LEMLData, H, lam: float, loss="squared", *, W0=None,
             cg_max_iter: int = 25, cg_tol: float = 1e-3, newton_max_iter: int = 3,
             w_solver: str = "tron", return_info: bool = False):
    """W-step: minimise ``J(., H)`` over ``W`` (Yu et al., Sec. 3).

    Squared loss: conjugate gradient on the normal equations for the step from
    ``W0`` (so the only product spent outside CG is the gradient at ``W0``).
    Logistic and squared hinge: TRON with the same Hessian-vector product inside
    (Lin, Weng and Keerthi, 2008).  Products as in :func:`w_gradient`; the solver
    is :func:`solve_w_step`.

    Parameters
    ----------
    data : LEMLData
    H : ndarray of shape (L, k)
    lam : float
        Regularisation ``lam > 0``.
    loss : {"squared", "logistic", "sqhinge"} or Loss, default="squared"
    W0 : ndarray of shape (d', k), optional
        Warm start (default zeros).
    cg_max_iter : int, default=25
        Maximum CG iterations (squared loss) or inner CG iterations per Newton
        step (other losses).
    cg_tol : float, default=1e-3
        CG stops when the residual falls below ``cg_tol`` times the gradient norm
        at ``W0`` (squared loss) or at the current Newton iterate.
    newton_max_iter : int, default=3
        Newton (TRON) steps, or bound steps with ``w_solver="bound"``, for the
        logistic and squared-hinge losses.
    w_solver : {"tron", "bound"}, default="tron"
        Logistic and squared-hinge losses: TRON (above), or ``newton_max_iter``
        majorise-minimise steps on the quadratic bound of curvature
        ``loss.curvature_bound`` (see :func:`_bound_update_W`): each costs one
        gradient and an exact solve through the eigendecomposition of ``X^T X``
        (kept in ``data``; by CG without ``n x L`` products when ``d' > 4096``),
        where a TRON step costs a gradient and up to ``cg_max_iter``
        Hessian-vector products over ``Omega``.  Unused for the squared loss.
    return_info : bool, default=False
        Also return a dict with ``cg_iter`` (Hessian-vector products) and
        ``newton_iter``.

    Returns
    -------
    W : ndarray of shape (d', k)
    info : dict, only if ``return_info``
    """
    loss = get_loss(loss)
    if w_solver not in W_SOLVERS:
        raise ValueError(f"w_solver must be one of {W_SOLVERS}, got {w_solver!r}")
    H, lam, W0 = check_w_step(data.n_features, data.n_labels, data.dtype, H, lam, W0)
    if w_solver == "bound" and not loss.constant_curvature:
        W = _bound_update_W(data, H, W0, lam, loss, int(newton_max_iter), cg_max_iter, cg_tol)
        W = np.ascontiguousarray(W, dtype=data.dtype)
        info = {"cg_iter": 0, "newton_iter": int(newton_max_iter)}
        return (W, info) if return_info else W
    W, info = solve_w_step(_LocalWOperators(data, H, loss), W0, lam, loss,
                           cg_max_iter=cg_max_iter, cg_tol=cg_tol,
                           newton_max_iter=newton_max_iter)
    return (W, info) if return_info else W


def _solve_grams(G_tri, lam, R, iu, ju):
    """Solve ``(G_j + lam I) h_j = r_j`` for every label, batched over label blocks."""
    n_labels, k = R.shape
    out = np.empty_like(R)
    step = max(1, _BLOCK // (k * k))
    diag = np.arange(k)
    for s in range(0, n_labels, step):
        e = min(s + step, n_labels)
        G = np.empty((e - s, k, k), dtype=R.dtype)
        G[:, iu, ju] = G_tri[s:e]
        G[:, ju, iu] = G_tri[s:e]
        G[:, diag, diag] += lam
        out[s:e] = np.linalg.solve(G, R[s:e, :, None])[:, :, 0]
    return out


def _per_label_cg(ent, A, d2, lam, g, cg_max_iter, cg_tol):
    """Newton directions of all labels by conjugate gradient, batched over labels.

    Solves ``(A^T D''_j A + lam I) s_j = -g_j`` for every label ``j`` at once; a
    label's iterations stop when its residual falls below ``cg_tol`` times its
    ``||g_j||`` (its later updates are zero).  One product
    ``V -> (D'' o (A V^T))^T A + lam V`` per iteration, ``O(|Omega| k)``.
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
        HD = ent.t_times(d2 * ent.dots(A, D), A)
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


def _bound_update_H(data: LEMLData, ent, A, H, lam: float, loss, n_steps: int, iu, ju):
    """``n_steps`` majorise-minimise steps of the H-step (``h_solver="bound"``).

    Label ``j``'s loss is majorised by its expansion with curvature
    ``c = loss.curvature_bound``, whose minimiser is
    ``h_j - (c sum_{i in Omega_j} a_i a_i^T + lam I)^{-1} g_j``: the matrices are
    those of the squared loss's H-step, formed once (fully observed: one shared
    ``c A^T A + lam I``) and kept over the steps, so a step costs one gradient
    ``O(|Omega| k)``; no label's objective increases.
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
        G = c * ent.weighted_grams(None, A, iu, ju)

        def solve(g):
            return _solve_grams(G, lam, g, iu, ju)
    for _ in range(n_steps):
        D = derivative_into(loss, ent.y, ent.dots(A, H))
        g = ent.t_times(ent.masked(D), A)
        del D
        g += lam * H
        H = H - solve(g)
    return H


def update_H(data: LEMLData, W, lam: float, loss="squared", *, H0=None,
             newton_max_iter: int = 3, h_solver: str = "direct", cg_max_iter: int = 25,
             cg_tol: float = 1e-3, return_info: bool = False):
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

    Parameters
    ----------
    data : LEMLData
    W : ndarray of shape (d', k)
    lam : float
    loss : {"squared", "logistic", "sqhinge"} or Loss, default="squared"
    H0 : ndarray of shape (L, k), optional
        Starting point of the Newton iterations (default zeros); unused for the
        squared loss, whose solution is exact.
    newton_max_iter : int, default=3
        Newton steps (or bound steps with ``h_solver="bound"``).
    h_solver : {"direct", "cg", "bound"}, default="direct"
        Newton directions of the logistic and squared-hinge losses: explicit
        per-label Hessians or conjugate gradient (see above); or ``"bound"``:
        ``newton_max_iter`` majorise-minimise steps, each a gradient and a solve
        with the fixed matrices ``c sum_{i in Omega_j} a_i a_i^T + lam I``
        (``c = loss.curvature_bound``, see :func:`_bound_update_H`), without line
        search.  Unused for the squared loss.
    cg_max_iter : int, default=25
        Inner CG iterations per Newton step (``h_solver="cg"`` only).
    cg_tol : float, default=1e-3
        Relative residual at which the inner CG stops (``h_solver="cg"`` only).
    return_info : bool, default=False
        Also return a dict with ``newton_iter`` (and ``cg_iter`` for ``"cg"``).

    Returns
    -------
    H : ndarray of shape (L, k)
    info : dict, only if ``return_info``
    """
    loss = get_loss(loss)
    lam = float(lam)
    if lam <= 0:
        raise ValueError(f"lam must be positive, got {lam}")
    if h_solver not in H_SOLVERS:
        raise ValueError(f"h_solver must be one of {H_SOLVERS}, got {h_solver!r}")
    dtype = data.dtype
    W = np.asarray(W)
    if W.ndim != 2 or W.shape[0] != data.n_features:
        raise ValueError(f"W has shape {W.shape}, expected ({data.n_features}, k)")
    W = np.ascontiguousarray(W, dtype=dtype)
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
        ent = data.observed_entries()
        H = (np.zeros((data.n_labels, k), dtype=dtype) if H0 is None
             else _check_factor(H0, (data.n_labels, k), dtype, "H0"))

        def per_label(Hc):
            z = ent.dots(A, Hc)
            f = ent.label_sums(ent.masked(loss.value(ent.y, z)))
            return f + 0.5 * lam * np.einsum("ij,ij->i", Hc, Hc, dtype=np.float64), z

        if h_solver == "bound":
            H = _bound_update_H(data, ent, A, H, lam, loss, int(newton_max_iter), iu, ju)
            info["newton_iter"] = int(newton_max_iter)
            return (H, info) if return_info else H
        f, z = per_label(H)
        for _ in range(newton_max_iter):
            g = ent.t_times(ent.masked(loss.derivative(ent.y, z)), A) + lam * H
            d2 = ent.masked(loss.second_derivative(ent.y, z))
            if h_solver == "cg":
                step, n_cg = _per_label_cg(ent, A, d2, lam, g, cg_max_iter, cg_tol)
                info["cg_iter"] = info.get("cg_iter", 0) + n_cg
            else:
                step = -_solve_grams(ent.weighted_grams(d2, A, iu, ju), lam, g, iu, ju)
            slope = np.einsum("ij,ij->i", g, step, dtype=np.float64)
            alpha = np.ones(data.n_labels)
            todo = slope < 0
            if not todo.any():
                break
            alpha[~todo] = 0.0
            for _ls in range(30):
                Hn = H + (alpha[:, None] * step).astype(dtype)
                fn, zn = per_label(Hn)
                ok = fn <= f + 1e-4 * alpha * slope
                todo = todo & ~ok
                if not todo.any():
                    break
                alpha[todo] *= 0.5
            if todo.any():  # some labels found no decrease: they keep their h_j
                alpha[todo] = 0.0
                H = H + (alpha[:, None] * step).astype(dtype)
                f, z = per_label(H)
            else:  # the last trial point is the new H: reuse its values
                H, f, z = Hn, fn, zn
            info["newton_iter"] += 1
    H = np.ascontiguousarray(H, dtype=dtype)
    return (H, info) if return_info else H


def squared_margin_start(data: LEMLData, H, lam: float, n_iter: int, *,
                         cg_max_iter: int = 25, cg_tol: float = 1e-3):
    """Starting factors for a margin loss from ``n_iter`` squared-loss iterations.

    Runs ``n_iter`` alternating iterations of the squared loss on the 0/1 labels
    from ``W = 0`` and the given ``H`` (rank ``k - 1``), then maps the fit
    ``Z = X W H^T`` to the ``{-1, +1}`` margins of the logistic and squared-hinge
    losses with one more column: ``W0 = [sqrt(2) W, -c e]``, ``H0 = [sqrt(2) H, 1/c]``
    with ``e`` the unit vector of the intercept row (``data.fit_intercept`` must be
    True) and ``c = L^(1/4)``, so ``X W0 H0^T = 2 Z - 1`` exactly and the extra
    column's two factors have equal norms.

    Parameters
    ----------
    data : LEMLData
    H : ndarray of shape (L, k - 1)
        Initial ``H`` of the squared-loss iterations.
    lam : float
    n_iter : int
    cg_max_iter, cg_tol : see :func:`update_W`

    Returns
    -------
    W0 : ndarray of shape (d', k)
    H0 : ndarray of shape (L, k)
    """
    if not data.fit_intercept:
        raise ValueError("squared_margin_start needs data prepared with fit_intercept=True")
    dtype = data.dtype
    H = np.ascontiguousarray(H, dtype=dtype)
    W = np.zeros((data.n_features, H.shape[1]), dtype=dtype)
    for _ in range(int(n_iter)):
        W = update_W(data, H, lam, "squared", W0=W, cg_max_iter=cg_max_iter, cg_tol=cg_tol)
        H = update_H(data, W, lam, "squared", H0=H)
    c = data.n_labels ** 0.25
    W0 = np.zeros((data.n_features, H.shape[1] + 1), dtype=dtype)
    H0 = np.zeros((data.n_labels, H.shape[1] + 1), dtype=dtype)
    W0[:, :-1] = math.sqrt(2) * W
    H0[:, :-1] = math.sqrt(2) * H
    W0[-1, -1] = -c
    H0[:, -1] = 1 / c
    return W0, H0


# --------------------------------------------------------------------------- prediction
def top_k_from_scores(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores of each row, best first.

    Within the selected ``k`` ties are broken by the lower label index (as a
    stable ``argsort(-scores)``); a tie at the ``k``-th place may select either.

    Parameters
    ----------
    scores : ndarray of shape (n, L)
    k : int
        ``1 <= k``; clipped to ``L``.

    Returns
    -------
    ndarray of shape (n, min(k, L)), int64
    """
    scores = np.asarray(scores)
    n, n_labels = scores.shape
    k = min(int(k), n_labels)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if k < n_labels:
        idx = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        idx = np.broadcast_to(np.arange(n_labels), (n, n_labels))
    vals = np.take_along_axis(scores, idx, axis=1)
    order = np.lexsort((idx, -vals), axis=1)
    return np.take_along_axis(idx, order, axis=1).astype(np.int64)


def predict_top_k_in_batches(score_rows: Callable, n_samples: int, k: int,
                             batch_size: int = 2048) -> np.ndarray:
    """Top-``k`` labels for ``n_samples`` rows, scoring ``batch_size`` rows at a time.

    ``score_rows(start, stop)`` returns the dense scores of rows ``start:stop``;
    so at most ``batch_size x L`` scores exist at once.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    parts = [top_k_from_scores(score_rows(s, min(s + batch_size, n_samples)), k)
             for s in range(0, n_samples, batch_size)]
    if not parts:
        return np.empty((0, int(k)), dtype=np.int64)
    return np.vstack(parts)


def threshold_in_batches(score_rows: Callable, n_samples: int, threshold: float,
                         batch_size: int = 2048) -> sp.csr_matrix:
    """Sparse 0/1 matrix ``scores > threshold``, scoring ``batch_size`` rows at a time."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    parts = [sp.csr_matrix(score_rows(s, min(s + batch_size, n_samples)) > threshold,
                           dtype=np.int8)
             for s in range(0, n_samples, batch_size)]
    if not parts:
        return sp.csr_matrix(score_rows(0, 0).shape, dtype=np.int8)
    return sp.vstack(parts, format="csr", dtype=np.int8)


def initial_factors(n_features: int, n_labels: int, rank: int, dtype=np.float32,
                    random_state=None) -> tuple[np.ndarray, np.ndarray]:
    """The starting point of :class:`LEML`: ``W = 0`` and ``H ~ N(0, 1/k)`` entrywise.

    Parameters
    ----------
    n_features : int
        Rows of ``W`` (including the constant feature when fitting an intercept).
    n_labels : int
    rank : int
    dtype : {np.float32, np.float64}, default=np.float32
    random_state : int, RandomState instance or None

    Returns
    -------
    W : ndarray of shape (n_features, rank)
    H : ndarray of shape (n_labels, rank)
    """
    rng = check_random_state(random_state)
    H = (rng.standard_normal((n_labels, rank)) / math.sqrt(rank)).astype(dtype)
    return np.zeros((n_features, rank), dtype=dtype), H


def _embed_linear(X, W, fit_intercept):
    X = _check_X(X, W.dtype)
    d = W.shape[0] - int(fit_intercept)
    if X.shape[1] != d:
        raise ValueError(f"X has {X.shape[1]} features but W has {W.shape[0]} rows "
                         f"(fit_intercept={fit_intercept}, so {d} features expected)")
    A = X @ W[:d]
    if fit_intercept:
        A += W[d]
    return A


def scores_linear(X, W, H, fit_intercept: bool = False) -> np.ndarray:
    """Decision values ``(X W + w_0) H^T`` (dense, n x L) for stored factors.

    ``W`` is ``(d + fit_intercept) x k`` with the intercept weights last, as
    :attr:`LEML.W_`; ``X`` is converted to ``W``'s dtype.
    """
    return _embed_linear(X, W, fit_intercept) @ np.asarray(H, dtype=W.dtype).T


def top_k_linear(X, W, H, k: int, fit_intercept: bool = False,
                 batch_size: int = 2048) -> np.ndarray:
    """Top-``k`` labels per row for stored factors, scoring ``batch_size`` rows at a time."""
    A = _embed_linear(X, W, fit_intercept)
    H = np.asarray(H, dtype=W.dtype)
    return predict_top_k_in_batches(lambda s, e: A[s:e] @ H.T, A.shape[0], k, batch_size)


# --------------------------------------------------------------------------- estimator
class LEML(BaseEstimator):
    """Low-rank multi-label learning with missing labels (Yu, Jain, Kar and Dhillon, 2014).

    Minimises ``sum_{(i,j) in Omega} loss(Y_ij, x_i^T W h_j) + lam/2 (||W||^2 + ||H||^2)``
    (Sec. 2, the factored trace-norm surrogate) by alternating W-steps and H-steps, see
    :func:`update_W` and :func:`update_H`.

    Parameters
    ----------
    rank : int, default=50
        ``k``, the rank of ``Z = W H^T``.
    lam : float, default=1.0
        Regularisation ``lam > 0``.
    loss : {"squared", "logistic", "sqhinge"}, default="squared"
        See :mod:`algorithms.leml.losses`.  Squared loss fits the ``{0, 1}`` labels
        (threshold 0.5); logistic and squared hinge use ``{-1, +1}`` margins
        (threshold 0).
    max_iter : int, default=10
        Outer (alternating) iterations ``T``, counted from 0 also after a warm start.
    cg_max_iter : int, default=25
        CG iterations per W-step (squared loss), or inner CG iterations per Newton
        step (other losses).
    cg_tol : float, default=1e-3
        Relative residual at which CG stops.
    newton_max_iter : int, default=3
        Newton steps (or bound steps, see ``w_solver`` and ``h_solver``) per
        half-step for the logistic and squared-hinge losses.
    fit_intercept : bool, default=False
        Add a constant feature; its weights are the last row of ``W_``.
    h_solver : {"direct", "cg", "bound"}, default="direct"
        Newton directions of the H-step for the logistic and squared-hinge losses:
        explicit ``k x k`` Hessians per label (``O(|Omega| k^2)`` per Newton step)
        or at most ``cg_max_iter`` conjugate-gradient iterations of
        ``O(|Omega| k)`` each; or ``"bound"``: ``newton_max_iter``
        majorise-minimise steps on the quadratic bound of curvature
        ``c = loss.curvature_bound`` (1/4 logistic, 2 squared hinge), each one
        gradient and a solve with matrices formed once per H-step, see
        :func:`update_H`.  No effect on the squared loss.
    w_solver : {"tron", "bound"}, default="tron"
        W-step of the logistic and squared-hinge losses: TRON with
        Hessian-vector products over ``Omega``, or ``newton_max_iter``
        majorise-minimise steps on the same quadratic bound, each one gradient
        and an exact solve of ``c X^T X S H^T H + lam S = -grad`` through the
        eigendecomposition of ``X^T X`` (computed once per fit), see
        :func:`update_W`.  No effect on the squared loss.
    squared_init_iter : int, default=0
        Logistic and squared-hinge losses only (needs ``fit_intercept=True``): when
        positive and no ``W_init`` / ``H_init`` is given, start from
        ``squared_init_iter`` alternating iterations of the squared loss (cheap when
        every label is observed) at rank ``k - 1``, mapped to the ``{-1, +1}``
        margins: with ``Z = X W H^T`` the squared-loss fit of the 0/1 labels, the
        starting factors ``W0 = [sqrt(2) W, -c e]`` and ``H0 = [sqrt(2) H, 1 / c]``
        (``e`` the intercept row, ``c = L^(1/4)`` balancing the two norms) give
        exactly ``X W0 H0^T = 2 Z - 1``, see :func:`squared_margin_start`.  Those
        iterations are not counted in ``max_iter``, ``objective_`` or ``n_iter_``
        and do not call ``callback``.  Ignored for the squared loss.
    dtype : {np.float32, np.float64}, default=np.float32
    random_state : int, RandomState instance or None, default=None
        Seeds the random initial ``H`` (normal, scaled by ``1/sqrt(k)``; ``W``
        starts at zero), see :func:`initial_factors`.
    verbose : bool, default=False
        Show a tqdm progress bar over outer iterations with the objective.
    callback : callable, optional
        ``callback(iteration, seconds, objective)`` after each outer iteration
        (``iteration`` counts completed iterations, from 1; ``seconds`` is that
        iteration's wall time).  ``W_`` and ``H_`` already hold that iteration's
        factors when it is called.

    Attributes
    ----------
    W_ : ndarray of shape (n_features + fit_intercept, k)
    H_ : ndarray of shape (n_labels, k)
    objective_ : list of float
        Objective after each outer iteration of the last ``fit`` call.
    n_iter_ : int
        Outer iterations completed in total (including those before a warm start).
    threshold_ : float
        Decision threshold used by :meth:`predict`.
    n_features_in_ : int
    n_labels_ : int

    References
    ----------
    H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
    with Missing Labels", ICML 2014.
    """

    def __init__(self, rank=50, lam=1.0, loss="squared", max_iter=10, cg_max_iter=25,
                 cg_tol=1e-3, newton_max_iter=3, fit_intercept=False, h_solver="direct",
                 squared_init_iter=0, dtype=np.float32, random_state=None, verbose=False,
                 callback=None, w_solver="tron"):
        self.rank = rank
        self.lam = lam
        self.loss = loss
        self.max_iter = max_iter
        self.cg_max_iter = cg_max_iter
        self.cg_tol = cg_tol
        self.newton_max_iter = newton_max_iter
        self.fit_intercept = fit_intercept
        self.h_solver = h_solver
        self.squared_init_iter = squared_init_iter
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.callback = callback
        self.w_solver = w_solver

    def _validate_params_(self):
        if not (isinstance(self.rank, int | np.integer) and self.rank >= 1):
            raise ValueError(f"rank must be a positive integer, got {self.rank!r}")
        if not self.lam > 0:
            raise ValueError(f"lam must be positive, got {self.lam!r}")
        if self.h_solver not in H_SOLVERS:
            raise ValueError(f"h_solver must be one of {H_SOLVERS}, got {self.h_solver!r}")
        if self.w_solver not in W_SOLVERS:
            raise ValueError(f"w_solver must be one of {W_SOLVERS}, got {self.w_solver!r}")
        for name in ("max_iter", "cg_max_iter", "newton_max_iter", "squared_init_iter"):
            value = getattr(self, name)
            if not (isinstance(value, int | np.integer) and value >= 0):
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if not self.cg_tol >= 0:
            raise ValueError(f"cg_tol must be non-negative, got {self.cg_tol!r}")
        loss = get_loss(self.loss)
        if self.squared_init_iter > 0 and loss.name != "squared":
            if not self.fit_intercept:
                raise ValueError("squared_init_iter > 0 needs fit_intercept=True (the "
                                 "margin offset -1 is carried by the intercept row)")
            if self.rank < 2:
                raise ValueError("squared_init_iter > 0 needs rank >= 2")
        return loss

    def fit(self, X, Y, mask=None, *, W_init=None, H_init=None, start_iter: int = 0):
        """Fit ``W_`` and ``H_`` by alternating minimisation.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n, d)
        Y : {array-like, sparse matrix} of shape (n, L)
            Labels in ``{0, 1}``; a dense ``Y`` may hold NaN for missing entries.
        mask : {array-like, sparse matrix} of shape (n, L), optional
            Observed entries; None means every (non-NaN) entry is observed.
        W_init, H_init : ndarray, optional
            Warm start, shapes ``(d + fit_intercept, rank)`` and ``(L, rank)``
            (e.g. the factors stored after iteration ``start_iter``).
        start_iter : int, default=0
            Outer iterations already done; the loop runs ``start_iter+1 .. max_iter``
            and a resumed run ends with the same factors as an uninterrupted one.

        Returns
        -------
        self
        """
        loss = self._validate_params_()
        data = prepare_data(X, Y, mask, fit_intercept=self.fit_intercept, dtype=self.dtype)
        k = int(self.rank)
        start_iter = int(start_iter)
        if start_iter < 0:
            raise ValueError(f"start_iter must be non-negative, got {start_iter}")
        if start_iter > 0 and (W_init is None or H_init is None):
            raise ValueError("start_iter > 0 needs both W_init and H_init")
        dtype = data.dtype
        W, H = initial_factors(data.n_features, data.n_labels, k, dtype, self.random_state)
        if H_init is not None:
            H = _check_factor(H_init, (data.n_labels, k), dtype, "H_init")
        if W_init is not None:
            W = _check_factor(W_init, (data.n_features, k), dtype, "W_init")
        steps = dict(cg_max_iter=int(self.cg_max_iter), cg_tol=float(self.cg_tol),
                     newton_max_iter=int(self.newton_max_iter))
        lam = float(self.lam)
        if (self.squared_init_iter > 0 and loss.name != "squared" and W_init is None
                and H_init is None):
            W, H = squared_margin_start(data, H[:, :k - 1], lam, int(self.squared_init_iter),
                                        cg_max_iter=steps["cg_max_iter"],
                                        cg_tol=steps["cg_tol"])

        self.n_features_in_ = data.n_features - int(self.fit_intercept)
        self.n_labels_ = data.n_labels
        self.threshold_ = loss.threshold
        self.W_, self.H_ = W, H
        self.objective_ = []
        bar = tqdm(range(start_iter, int(self.max_iter)), disable=not self.verbose,
                   desc="LEML", unit="it")
        for t in bar:
            t0 = time.perf_counter()
            W, w_info = update_W(data, H, lam, loss, W0=W, return_info=True,
                                 w_solver=self.w_solver, **steps)
            t1 = time.perf_counter()
            H = update_H(data, W, lam, loss, H0=H, h_solver=self.h_solver, **steps)
            t2 = time.perf_counter()
            obj = objective(data, W, H, lam, loss)
            seconds = time.perf_counter() - t0
            log.debug("iteration %d: W-step %.3fs (%d CG), H-step %.3fs, objective %.6g",
                      t + 1, t1 - t0, w_info["cg_iter"], t2 - t1, obj)
            self.W_, self.H_ = W, H
            self.objective_.append(obj)
            self.n_iter_ = t + 1
            bar.set_postfix(objective=f"{obj:.6g}")
            if self.callback is not None:
                self.callback(t + 1, seconds, obj)
        self.W_, self.H_ = W, H
        self.n_iter_ = max(start_iter, int(self.max_iter))
        return self

    # -- prediction
    def _embed(self, X):
        """``A = X W + intercept`` (n x k) for new ``X``."""
        check_is_fitted(self, ("W_", "H_"))
        X = _check_X(X, self.W_.dtype)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features but LEML was fitted with "
                             f"{self.n_features_in_}")
        return _embed_linear(X, self.W_, self.fit_intercept)

    def decision_function(self, X) -> np.ndarray:
        """Decision values ``X W H^T`` (n x L, dense; for large L use :meth:`predict_top_k`)."""
        A = self._embed(X)
        check_allocation((A.shape[0], self.H_.shape[0]), A.dtype,
                         what="LEML decision_function (n x L)",
                         advice="score row batches with predict_top_k or predict (batch_size), "
                         "or pass fewer rows at a time")
        return A @ self.H_.T

    def predict(self, X, batch_size: int = 2048) -> sp.csr_matrix:
        """Labels with decision value above ``threshold_``, as a sparse 0/1 matrix (int8).

        The threshold is 0.5 for the squared loss (fitted to ``{0, 1}``) and 0 for
        the logistic and squared-hinge losses (fitted to ``{-1, +1}`` margins).
        """
        A = self._embed(X)
        return threshold_in_batches(lambda s, e: A[s:e] @ self.H_.T, A.shape[0],
                                    self.threshold_, batch_size)

    def predict_top_k(self, X, k: int = 5, batch_size: int = 2048) -> np.ndarray:
        """The ``k`` labels of highest decision value per row, best first (n x k ints).

        Scores ``batch_size`` rows at a time, so no n x L matrix is allocated.
        """
        A = self._embed(X)
        return predict_top_k_in_batches(lambda s, e: A[s:e] @ self.H_.T, A.shape[0], k,
                                        batch_size)
