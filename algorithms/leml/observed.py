"""The observed label entries Omega: drawn, checked and counted (Yu et al., Sec. 5).

Pure functions of arrays: the missing-label experiment's uniform mask over the ``n x L``
label matrix, the reason such a mask leaves nothing to learn from, and the label counts a
mask lets the model see (the labels' propensities for PSP@k are taken from them).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from scarce.algorithms.memory import check_allocation

#: The stream of the mask's draws: ``(seed, MASK_STREAM)``, and ``(seed, MASK_STREAM, part)``
#: for the part of a folder of parts.
MASK_STREAM = 202


def observed_mask(n: int, n_labels: int, observed_fraction: float, seed: int,
                  part: int | None = None) -> sp.csr_matrix:
    """Omega: each entry of an ``n x n_labels`` label matrix kept with probability
    ``observed_fraction``, uniformly at random, as a boolean CSR matrix with sorted indices.

    The draws come from ``(seed, MASK_STREAM)``, or ``(seed, MASK_STREAM, part)`` for part
    ``part`` of a folder of parts (each part's mask made without the others), one row block
    of about 2^22 entries at a time (the memory guard names the block's size first).
    """
    rng = np.random.default_rng(np.random.SeedSequence(
        [seed, MASK_STREAM] if part is None else [seed, MASK_STREAM, part]))
    rows, cols = [], []
    block = max(1, (1 << 22) // max(n_labels, 1))
    check_allocation((min(block, n), n_labels), np.float64, copies=2,
                     what="the uniform draws of a row block of the mask",
                     advice="check the number of labels the training file declares")
    for start in range(0, n, block):
        stop = min(start + block, n)
        keep = rng.random((stop - start, n_labels)) < observed_fraction
        r, c = np.nonzero(keep)
        rows.append(r + start)
        cols.append(c)
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    mask = sp.csr_matrix((np.ones(r.size, dtype=bool), (r, c)), shape=(n, n_labels))
    mask.sort_indices()
    return mask


def nothing_observed(mask: sp.csr_matrix, Y, observed_fraction: float) -> str | None:
    """Why ``mask`` (drawn at ``observed_fraction``) leaves the model nothing to learn from
    the labels ``Y``: it observes no entry, or none of ``Y``'s positive labels; with the
    fraction at which one would be observed on average.  None when it observes some."""
    n, n_labels = Y.shape
    positives = int(sp.csr_matrix(Y).count_nonzero())
    if mask.nnz == 0:
        return (f"{observed_fraction:g} observes none of the {n:,} x {n_labels:,} entries of "
                "the training labels, so there is nothing to learn from (at "
                f"1/{n * n_labels:,} one entry is observed on average)")
    if positives and not mask.multiply(sp.csr_matrix(Y)).count_nonzero():
        return (f"{observed_fraction:g} observes {mask.nnz:,} of the {n:,} x {n_labels:,} "
                f"entries of the training labels but none of its {positives:,} positive "
                "labels, so there is nothing to learn from (at "
                f"1/{positives:,} one positive label is observed on average)")
    return None


def observed_label_counts(Y, mask=None) -> np.ndarray:
    """Per label, the rows of ``Y`` where it is a positive label the model sees: an entry
    of ``Y`` that ``mask`` observes (every entry without one); explicit zeros not counted."""
    # a copy: eliminate_zeros works in place, and csr_matrix(Y) shares Y's arrays
    Y = (sp.csr_matrix(Y, copy=True) if mask is None
         else sp.csr_matrix(Y).multiply(sp.csr_matrix(mask)).tocsr())
    Y.eliminate_zeros()
    return np.bincount(Y.indices, minlength=Y.shape[1])
