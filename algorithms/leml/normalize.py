"""Rows of a feature matrix scaled to unit Euclidean norm (the ``l2`` row normalisation).

A per-row operation, so the training and the test rows are scaled alike without shared
statistics.  Pure functions of a CSR matrix.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["normalize_rows", "unit_rows"]


def normalize_rows(X: sp.csr_matrix) -> sp.csr_matrix:
    """Every row of ``X`` scaled to unit L2 norm, in ``X``'s dtype.  Rows whose sum of
    squares would overflow that dtype (float32 values above about 1e19) are scaled in
    float64, where it cannot: in float32 their norm would be infinite and the row zero."""
    dt = X.dtype
    large = float(np.sqrt(np.finfo(dt).max / max(1, int(np.diff(X.indptr).max(initial=0)))))
    if X.nnz and float(np.abs(X.data).max()) >= large:
        return unit_rows(X.astype(np.float64)).astype(dt)
    return unit_rows(X).astype(dt)


def unit_rows(X: sp.csr_matrix) -> sp.csr_matrix:
    """scikit-learn's ``normalize(X, norm="l2")`` of a float CSR matrix, to the last bit.

    Its arithmetic step for step (``inplace_csr_row_normalize_l2``): each stored value squared
    in ``X``'s dtype, a row's squares summed in float64 in storage order, each value divided by
    the root of the sum in float64 and rounded back to ``X``'s dtype, a row whose sum is zero
    left as it is.  Not scikit-learn's own because importing it takes longer than a model
    loaded into Python takes to read a file and score it; a test checks the bits against it.
    """
    X = sp.csr_matrix(X)
    counts = np.diff(X.indptr)
    squares = X.data * X.data
    # bincount adds its weights one by one in float64, in the order given
    sums = np.bincount(np.repeat(np.arange(X.shape[0]), counts), weights=squares,
                       minlength=X.shape[0]).astype(np.float64)  # (int64 when X has none)
    roots = np.sqrt(sums, out=np.ones_like(sums), where=sums != 0)
    out = X.copy()
    out.data = (X.data / np.repeat(roots, counts)).astype(X.dtype)
    return out
