"""LEML's observed label entries, in their two layouts, and the H-step's label blocks.

The partially observed labels of :class:`~scarce.algorithms.leml.data.LEMLData` are kept as
their observed entries: sparse (:class:`_SparseEntries`, ``O(|Omega| k)`` per pass) or, when
at least 1/16 of the entries are observed, dense with a 0/1 mask (:class:`_DenseEntries`, BLAS
beats gathers there) (Yu, Jain, Kar and Dhillon, ICML 2014, Sec. 3).  Both give the H-step
the products it needs per label: the Gram matrices of the observed rows (by label blocks of
:func:`label_groups`, sized by what a block holds, :func:`labels_per_block`) and the
right-hand sides.

References
----------
H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
with Missing Labels", ICML 2014.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["BLOCK", "label_block_elements", "label_groups", "labels_per_block",
           "pair_products"]

# Elements per temporary block (entries x k, rows x k(k+1)/2, labels x k(k+1)/2).
BLOCK = 1 << 22
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
