"""LEML's training data: the features, the labels and the observed entries ``Omega``.

Kept as one module: the training data's layouts (sparse entries, dense with a mask) and the
row-block split share one representation of Omega.

:func:`prepare_data` validates and converts ``X``, ``Y`` and an optional mask once into a
:class:`LEMLData`, which every half-step reads (Yu, Jain, Kar and Dhillon, ICML 2014, Sec. 3).

Labels: ``Y`` holds ``{0, 1}``; ``Omega`` is a sparse boolean mask, or the non-NaN
entries of a dense ``Y``; without either every entry is observed and absent
labels are 0 (the Extreme Classification convention).  Fully observed labels are kept as a
sparse ``Y`` (the squared loss never needs more); partially observed ones as their observed
entries, sparse (:class:`_SparseEntries`, ``O(|Omega| k)`` per pass) or, when at least 1/16 of
the entries are observed, dense with a 0/1 mask (:class:`_DenseEntries`, BLAS beats gathers
there).

The W-step's products are sums over the rows of ``X``, so :func:`split_rows` cuts the data
into contiguous row blocks (:func:`row_block_bounds`) whose products add up to the whole
set's (the Dask W-step of ``tasks.leml_dask``).

References
----------
H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
with Missing Labels", ICML 2014.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from scarce.algorithms.memory import check_allocation

__all__ = ["LEMLData", "label_block_elements", "label_groups", "labels_layout",
           "labels_per_block", "layout_of_counts", "prepare_data", "prepare_rows",
           "row_block_bounds", "split_rows"]

# Elements per temporary block (entries x k, rows x k(k+1)/2, labels x k(k+1)/2).
BLOCK = 1 << 22
# Largest n x L stored dense for partially observed labels (1 GiB per float32 array).
_DENSE_MAX = 1 << 28
#: ``X^T X V`` is taken through the dense Gram matrix ``X^T X`` when it has at most this many
#: entries per stored entry of ``X``: a dense ``d' x d'`` times ``d' x k`` product (BLAS) runs
#: several times faster per entry than the sparse ``X V`` and ``X^T U`` it replaces, which
#: pass over ``X``'s entries twice; the Gram matrix then also takes no more memory than ``X``.
GRAM_ENTRIES_PER_NNZ = 2
#: Stored values of ``X`` squared in float64 at a time for the diagonal of ``X^T X`` (32 MiB).
DIAGONAL_CHUNK = 1 << 22

# --------------------------------------------------------------------------- label blocks
def labels_per_block(per_label: int) -> int:
    """Labels whose arrays of ``per_label`` elements each take at most :data:`BLOCK` elements
    (at least one): the one rule that sizes the H-step's label blocks
    (:func:`label_block_elements` per label) and its batches of full ``k x k`` matrices."""
    return max(1, BLOCK // max(1, int(per_label)))


def label_block_elements(k: int) -> int:
    """Elements a label block of the H-step holds per label: the upper triangle of the
    label's Gram matrix (``k(k+1)/2``) and its rows of the right-hand side and of the
    solution (``k`` each)."""
    k = int(k)
    return k * (k + 1) // 2 + 2 * k


def label_groups(n_labels: int, k: int) -> list[tuple[int, int]]:
    """The labels ``[(g0, g1), ...]`` in consecutive groups of
    ``labels_per_block(label_block_elements(k))`` from label 0, the last one shorter: the
    H-step's default label blocks, and the labels a dense product of :meth:`label_grams`
    takes at once whatever label range it is asked for."""
    size = labels_per_block(label_block_elements(k))
    return [(g0, min(g0 + size, int(n_labels))) for g0 in range(0, int(n_labels), size)]


# --------------------------------------------------------------------------- entries
def pair_products(rows) -> np.ndarray:
    """``a_i (x) a_i`` of every row ``a_i`` of ``rows`` (r x k), upper triangles in the order of
    ``np.triu_indices(k)``: an r x k(k+1)/2 C-ordered array (the Gram matrices' terms).

    With 16 columns or more, one broadcast product per row of the triangle, each writing a
    contiguous run; with fewer, those runs are too short and two gathers of the pairs'
    columns are faster.  (``rows[:, iu] * rows[:, ju]`` would give a column-major array, which
    a sparse product copies again.)
    """
    r, k = rows.shape
    if k < 16:
        iu, ju = np.triu_indices(k)
        return np.take(rows, iu, axis=1) * np.take(rows, ju, axis=1)
    P = np.empty((r, k * (k + 1) // 2), dtype=rows.dtype)
    start = 0
    for i in range(k):
        np.multiply(rows[:, i:i + 1], rows[:, i:], out=P[:, start:start + k - i])
        start += k - i
    return P


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
        # Chunks of about 2^18 gathered elements stay in cache: measured several times
        # faster than chunks of 2^22.
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

    def label_grams(self, A, l0, l1, v=None):
        """``G[j - l0] = sum_{i in Omega_j} v_ij a_i a_i^T`` (``v`` None: 1) for the labels
        ``l0 <= j < l1``, upper triangles ((l1 - l0) x k(k+1)/2, :func:`pair_products`);
        ``v``: a vector over the entries (CSR order).

        Row-major: for each batch of rows (fixed by ``k`` alone) the products ``a_i (x) a_i``
        of the rows holding an entry of those labels, then one sparse product with their
        entries, ``O(|Omega_{l0:l1}| k^2)``.  A label's terms are added in row order, batch
        after batch, whatever the label range: a range's rows equal those of all labels, bit
        for bit.  Forming ``a_i (x) a_i`` once per row (not once per entry, as a label-major
        gather would) is what makes it fast when rows hold several observed labels.
        """
        n, n_labels = self.shape
        width, size = l1 - l0, A.shape[1] * (A.shape[1] + 1) // 2
        G = np.zeros((width, size), dtype=A.dtype)
        everything = l0 == 0 and l1 == n_labels
        step = max(1, BLOCK // max(size, 1))
        for r0 in range(0, n, step):
            r1 = min(r0 + step, n)
            e0, e1 = int(self.indptr[r0]), int(self.indptr[r1])
            if e0 == e1:
                continue
            cols = self.cols[e0:e1]
            vals = np.ones(e1 - e0, dtype=A.dtype) if v is None else v[e0:e1]
            if everything:
                S = sp.csr_matrix((vals, cols, self.indptr[r0:r1 + 1] - e0),
                                  shape=(r1 - r0, n_labels))
                block = A[r0:r1]
            else:
                keep = (cols >= l0) & (cols < l1)
                if not keep.any():
                    continue
                rows, place = np.unique(self.rows[e0:e1][keep], return_inverse=True)
                S = sp.csr_matrix((vals[keep], (place, cols[keep] - l0)),
                                  shape=(rows.size, width))
                block = A[rows]
            G += S.T @ pair_products(block)
        return G


class _DenseEntries:
    """An n x L label matrix stored dense, with an optional 0/1 mask of observed entries.

    Used for the logistic and squared-hinge losses on fully observed labels, and
    whenever at least 1/16 of the entries are observed (and ``n L <= 2^28``): then
    scoring every entry by BLAS (``A H^T``) and zeroing the unobserved ones is
    faster than gathering the observed ones (in measured W-steps on Bibtex and Delicious
    the crossover was below 1/10 observed).  Vectors over the entries are n x L arrays; callers
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

    def label_grams(self, A, l0, l1, v=None):
        """``G[j - l0] = sum_{i in Omega_j} v_ij a_i a_i^T`` (``v`` None: 1) for the labels
        ``l0 <= j < l1``, upper triangles ((l1 - l0) x k(k+1)/2, :func:`pair_products`);
        ``v``: an n x L array, zero where unobserved (as :meth:`masked` leaves it).

        Row-major: for each batch of rows (fixed by ``k`` and ``L``, not by the label range)
        the products ``a_i (x) a_i``, then BLAS products with the batch's weights, one per
        group of :func:`label_groups` that the range meets, ``O(n (l1 - l0) k^2)`` when the
        range is made of whole groups (the default label blocks).  A BLAS product adds a
        label's terms in an order that depends on where the label falls among the labels
        of the product and on how many there are; a label is always computed in the product
        of its own group, so its bits do not depend on the range it is asked for (a range
        that cuts a group pays for the whole group).
        """
        n, n_labels, k = A.shape[0], self.shape[1], A.shape[1]
        size = k * (k + 1) // 2
        G = np.zeros((l1 - l0, size), dtype=A.dtype)
        step = max(1, BLOCK // max(size, n_labels, 1))
        weights = self.mask if v is None else v
        groups = [(g0, g1) for g0, g1 in label_groups(n_labels, k) if g0 < l1 and g1 > l0]
        for r0 in range(0, n, step):
            P = pair_products(A[r0:r0 + step])
            if weights is None:
                G += P.sum(axis=0)
                continue
            for g0, g1 in groups:
                part = weights[r0:r0 + step, g0:g1].astype(A.dtype, copy=False).T @ P
                a, b = max(l0, g0), min(l1, g1)
                G[a - l0:b - l0] += part[a - g0:b - g0]
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
        An explicit CSR (or C-ordered) copy of ``X^T``: ``X^T U`` on it was measured
        faster than on the CSC view ``X.T``.
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
        self._gram = None
        self._gram_diagonal = None

    def _gram64(self) -> np.ndarray:
        """``X^T X`` (d' x d'), dense, summed in float64."""
        X = self.X.astype(np.float64)
        G = X.T @ X
        return G.toarray() if sp.issparse(G) else np.asarray(G)

    def gram_eigh(self):
        """Eigendecomposition ``X^T X = U diag(s) U^T`` (computed in float64 once, then
        kept): ``(s, U)`` with ``s >= 0`` (float64) and ``U`` in the working dtype."""
        if self._gram_eigh is None:
            s, U = np.linalg.eigh(self._gram64())
            self._gram_eigh = (np.maximum(s, 0.0), np.ascontiguousarray(U, dtype=self.dtype))
        return self._gram_eigh

    def gram(self) -> np.ndarray | None:
        """``X^T X`` (d' x d', dense, in the working dtype, summed in float64; built once, then
        kept) when ``d'^2 <= GRAM_ENTRIES_PER_NNZ nnz(X)`` (see there), else None: then
        ``X^T (X V)`` is the cheaper way to ``X^T X V``."""
        if self._gram is None:
            stored = self.X.nnz if sp.issparse(self.X) else self.X.size
            d = self.n_features
            self._gram = (np.ascontiguousarray(self._gram64(), dtype=self.dtype)
                          if d * d <= GRAM_ENTRIES_PER_NNZ * stored else False)
        return None if self._gram is False else self._gram

    def gram_diagonal(self, row_weights=None) -> np.ndarray:
        """The diagonal of ``X^T X`` (d', float64: each column's sum of squares; built once,
        then kept), summed :data:`DIAGONAL_CHUNK` stored values at a time so that no float64
        copy of ``X`` is made.

        ``row_weights`` (n, float64): the diagonal of ``X^T diag(w) X`` instead, each square
        times its row's weight (not kept); weights of 1 give the unweighted diagonal bit for
        bit (the same chunks, each square times 1).
        """
        if row_weights is None and self._gram_diagonal is not None:
            return self._gram_diagonal
        w = None if row_weights is None else np.asarray(row_weights, dtype=np.float64)
        X, g = self.X, np.zeros(self.n_features)
        if sp.issparse(X):
            for s in range(0, X.nnz, DIAGONAL_CHUNK):
                v = X.data[s:s + DIAGONAL_CHUNK].astype(np.float64)
                v *= v
                if w is not None:  # the row of each stored value
                    v *= w[np.searchsorted(X.indptr, np.arange(s, s + v.size), "right") - 1]
                g += np.bincount(X.indices[s:s + DIAGONAL_CHUNK], weights=v,
                                 minlength=g.size)
        else:
            rows = max(1, DIAGONAL_CHUNK // max(1, g.size))
            for s in range(0, X.shape[0], rows):
                part = X[s:s + rows].astype(np.float64)
                left = part if w is None else part * w[s:s + rows, None]
                g += np.einsum("ij,ij->j", left, part)
        if w is None:
            self._gram_diagonal = g
        return g

    @property
    def fully_observed(self) -> bool:
        return self.Y is not None

    def xt_matmul(self, U):
        """``X^T U`` (d' x k).

        On the explicit CSR copy ``Xt`` (a gather from ``U`` per non-zero), except
        when the d' x k result fits in about 1 MiB: then the CSC view ``X.T``,
        which scatters into that cache-resident result, was faster (Bibtex, Delicious,
        k <= 100); with many features the CSR copy is the faster one.
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


#: The random streams of the two row splits, each drawn from ``(seed, stream)``: the data
#: set's validation rows (chosen by a run's ``dataset.validation_fraction``) and the rows
#: :class:`~scarce.algorithms.leml.LEML` holds out for early stopping, so that the two are not
#: the same rows when both are asked for.
VALIDATION_STREAM, EARLY_STOPPING_STREAM = 101, 303


def held_out_rows(n: int, fraction: float) -> int:
    """How many of ``n`` rows a split of ``fraction`` holds out."""
    return int(round(fraction * n))


def validation_rows(n: int, fraction: float, seed: int,
                    stream: int = VALIDATION_STREAM) -> tuple[np.ndarray, np.ndarray]:
    """The rows kept for fitting and the ``round(fraction n)`` rows held out, drawn from
    ``(seed, stream)`` (both sorted)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, stream]))
    val = np.zeros(n, dtype=bool)
    val[rng.choice(n, size=held_out_rows(n, fraction), replace=False)] = True
    return np.flatnonzero(~val), np.flatnonzero(val)


def check_X(X, dtype) -> sp.csr_matrix | np.ndarray:
    """``X`` as CSR (or a C-ordered array) of ``dtype``, validated by scikit-learn."""
    # imported here: the module's light readers (row blocks, held-out rows) need no sklearn
    from sklearn.utils import check_array

    X = check_array(X, accept_sparse="csr", dtype=dtype, order="C")
    if sp.issparse(X):
        X = sp.csr_matrix(X)
    return X


def add_constant_column(X):
    """``[X, 1]``: the constant feature of an intercept, last."""
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


def check_labels(Y, mask, n, dtype, entries="auto", *, keep_entries=False, index_dtype=None):
    """Return ``(Y_full_csr or None, entries or None, n_labels)``.

    ``keep_entries``: return the observed entries (in the form ``entries`` names, which must
    then be ``"sparse"`` or ``"dense"``) even when every entry is observed, and
    ``index_dtype`` fixes the index type of sparse entries (default: int32 unless a count
    reaches 2^31 - 1): a row block of partially observed data is stored as the whole is
    (:func:`prepare_rows`).
    """
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
    if keep_entries and entries == "auto":
        raise ValueError("keep_entries needs entries='sparse' or 'dense'")
    if mask is None and missing is None and not keep_entries:
        return sp.csr_matrix(Yc, dtype=dtype), None, n_labels

    if mask is None and missing is None:
        omega = sp.csr_matrix(np.ones((n, n_labels), dtype=bool))
    elif mask is None:
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
    if omega.nnz == n * n_labels and not keep_entries:
        return sp.csr_matrix(Yc, dtype=dtype), None, n_labels

    auto = layout_of_counts(n, n_labels, omega.nnz)
    dense = auto["labels"] == "dense" if entries == "auto" else entries == "dense"
    if dense:  # many observed: dense with a mask (see _DenseEntries)
        check_allocation((n, n_labels), dtype, what="observed labels stored dense (n x L)",
                         advice="use entries='sparse'", copies=2)
        y = np.zeros((n, n_labels), dtype=dtype)
        y[Yc.nonzero()] = 1
        return None, _DenseEntries(y, omega.toarray().astype(dtype)), n_labels
    if index_dtype is None:
        index_dtype = _index_dtype(n, n_labels, omega.nnz)
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


def prepare_data(X, Y, mask=None, *, fit_intercept: bool, dtype,
                 entries: str = "auto") -> LEMLData:
    """Validate and convert training data once for the half-steps.

    :meth:`scarce.algorithms.leml.LEML.prepare` calls it with the estimator's ``fit_intercept`` and
    ``dtype``.

    Parameters
    ----------
    X : {array-like, sparse matrix} of shape (n, d)
        Features; converted to CSR (or a C-ordered array) of ``dtype``.
    Y : {array-like, sparse matrix} of shape (n, L)
        Labels in ``{0, 1}``; a dense ``Y`` may mark missing entries with NaN.
    mask : {array-like, sparse matrix} of shape (n, L), optional
        Observed entries ``Omega`` (non-zero = observed).  None: every entry of ``Y``
        that is not NaN is observed; absent labels of a sparse ``Y`` are observed 0.
    fit_intercept : bool
        Append a constant feature 1 (its weights, the last row of ``W``, are
        regularised like the others).
    dtype : {"float32", "float64"} or numpy dtype
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
    dtype, X, Xt = _features(X, fit_intercept, dtype)
    Y_full, ent, n_labels = check_labels(Y, mask, X.shape[0], dtype, entries)
    return LEMLData(X, Xt, n_labels, Y=Y_full, entries=ent, fit_intercept=fit_intercept)


def _features(X, fit_intercept: bool, dtype):
    """The working dtype, the checked ``X`` (with the constant feature) and its transpose."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    X = check_X(X, dtype)
    if fit_intercept:
        X = add_constant_column(X)
    return dtype, X, (X.T.tocsr() if sp.issparse(X) else np.ascontiguousarray(X.T))


def layout_of_counts(n: int, n_labels: int, observed: int | None) -> dict:
    """The label layout :func:`prepare_data` (``entries="auto"``) gives ``n`` rows of
    ``n_labels`` labels of which ``observed`` entries are observed (None: every one), as
    :func:`labels_layout` reports it.

    What decides it is counts only, so the layout of data held in row blocks is known from
    the blocks' sizes without reading them (``tasks.leml_dask.PartitionedData``): every entry
    observed gives ``"full"``; at least 1/16 of them (and ``n x L`` at most 2^28), ``"dense"``;
    else ``"sparse"``, with int64 indices when a count reaches 2^31 - 1.
    """
    if observed is None or observed == n * n_labels:
        return {"labels": "full", "index_dtype": None}
    if 16 * observed >= n * n_labels and n * n_labels <= _DENSE_MAX:
        return {"labels": "dense", "index_dtype": None}
    return {"labels": "sparse", "index_dtype": _index_dtype(n, n_labels, observed).name}


def _index_dtype(n: int, n_labels: int, observed: int) -> np.dtype:
    """int32 indices of sparse observed entries, unless a count reaches 2^31 - 1."""
    return np.dtype(np.int64 if max(observed, n, n_labels) >= 2**31 - 1 else np.int32)


def labels_layout(data: LEMLData) -> dict:
    """How ``data`` stores its labels, for :func:`prepare_rows` to store a row block alike.

    Returns
    -------
    dict
        ``labels``: ``"full"`` (every entry observed, a sparse ``Y``), ``"dense"`` or
        ``"sparse"`` (the observed entries, see :func:`prepare_data`); ``index_dtype``: the
        index type of sparse entries (None otherwise).
    """
    if data.fully_observed:
        return {"labels": "full", "index_dtype": None}
    if data.entries.dense:
        return {"labels": "dense", "index_dtype": None}
    return {"labels": "sparse", "index_dtype": np.dtype(data.entries.cols.dtype).name}


def prepare_rows(X, Y, mask=None, *, fit_intercept: bool, dtype, layout: dict) -> LEMLData:
    """Prepare a row block of the training data as :func:`split_rows` cuts the prepared whole.

    A block prepared on its own by :func:`prepare_data` could store its labels otherwise
    than the whole does (``entries="auto"`` decides by the block's share of observed
    entries, a block whose entries are all observed would get a plain ``Y``), and so
    compute in another order.  Here the whole's choice, :func:`labels_layout`, is imposed:
    rows ``start:stop`` of ``X``, ``Y`` and ``mask`` prepared here equal
    ``split_rows(prepare_data(X, Y, mask), ...)``'s block of those rows, array for array.

    Parameters
    ----------
    X, Y, mask : as :func:`prepare_data`, the rows of one block
    fit_intercept : bool
    dtype : {"float32", "float64"} or numpy dtype
    layout : dict
        :func:`labels_layout` of the whole prepared data.

    Returns
    -------
    LEMLData

    Raises
    ------
    ValueError
        When the rows have missing labels but the layout says every label is observed.
    """
    labels = layout["labels"]
    if labels not in ("full", "dense", "sparse"):
        raise ValueError(f"layout labels must be 'full', 'dense' or 'sparse', got {labels!r}")
    dtype, X, Xt = _features(X, fit_intercept, dtype)
    if labels == "full":
        Y_full, ent, n_labels = check_labels(Y, mask, X.shape[0], dtype)
        if Y_full is None:
            raise ValueError("these rows have unobserved labels but the layout says every "
                             "label is observed")
    else:
        Y_full, ent, n_labels = check_labels(Y, mask, X.shape[0], dtype, labels,
                                             keep_entries=True,
                                             index_dtype=layout.get("index_dtype"))
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


def check_factor(M, shape, dtype, name):
    """``M`` as a C-ordered array of ``dtype``; a ValueError naming ``name`` unless its
    shape is ``shape``."""
    M = np.asarray(M)
    if M.shape != shape:
        raise ValueError(f"{name} has shape {M.shape}, expected {shape}")
    return np.ascontiguousarray(M, dtype=dtype)
