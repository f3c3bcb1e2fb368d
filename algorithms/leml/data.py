"""LEML's training data: the features, the labels and the observed entries ``Omega``.

:func:`prepare_data` validates and converts ``X``, ``Y`` and an optional mask once into a
:class:`LEMLData`, which every half-step reads (Yu, Jain, Kar and Dhillon, ICML 2014, Sec. 3).

Labels: ``Y`` holds ``{0, 1}``; ``Omega`` is a sparse boolean mask, or the non-NaN
entries of a dense ``Y``; without either every entry is observed and absent
labels are 0 (the Extreme Classification convention).  Fully observed labels are kept as a
sparse ``Y`` (the squared loss never needs more); partially observed ones as their observed
entries, sparse or dense with a 0/1 mask (:mod:`scarce.algorithms.leml.entries`, with the
H-step's label blocks).

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

from scarce.algorithms.leml.entries import _DenseEntries, _SparseEntries
from scarce.algorithms.memory import check_allocation

__all__ = ["LEMLData", "labels_layout", "layout_of_counts", "prepare_data", "prepare_rows",
           "row_block_bounds", "split_rows"]

# Largest n x L stored dense for partially observed labels (1 GiB per float32 array).
_DENSE_MAX = 1 << 28
#: ``X^T X V`` is taken through the dense Gram matrix ``X^T X`` when it has at most this many
#: entries per stored entry of ``X``: a dense ``d' x d'`` times ``d' x k`` product (BLAS) runs
#: several times faster per entry than the sparse ``X V`` and ``X^T U`` it replaces, which
#: pass over ``X``'s entries twice; the Gram matrix then also takes no more memory than ``X``.
GRAM_ENTRIES_PER_NNZ = 2
#: Stored values of ``X`` squared in float64 at a time for the diagonal of ``X^T X`` (32 MiB).
DIAGONAL_CHUNK = 1 << 22

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
