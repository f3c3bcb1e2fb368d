"""The synthetic Wikipedia-shaped problem of the LEML benchmarks (``bench.leml``'s
``synthetic`` and ``w-step`` sections, ``bench.leml_cluster``)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["WIKI", "synthetic_wikipedia"]

# The Wikipedia set of Yu et al. (Table 2): points, features, labels.
WIKI = (881_805, 366_932, 213_707)


def synthetic_wikipedia(n, d, n_labels, *, nnz_row=100, labels_row=2.5, topics=50,
                        seed=0, stream=()):
    """A synthetic problem shaped like the Wikipedia set of Yu et al., with low-rank labels.

    Each point has a latent topic ``t`` (one of ``topics``); half of its ``nnz_row``
    binary features (scaled to unit row norm) come from topic ``t``'s block of
    features, half uniformly from all; its labels (Poisson, mean ``labels_row``, at
    least 1) are drawn from topic ``t``'s block of labels.  So ``E[Y | X]`` has rank
    at most ``topics``.  Duplicate feature indices within a row are kept (they add).
    ``stream`` (integers) draws another sample of the same distribution: the parts of a
    partitioned problem, each generated on its own.

    Returns
    -------
    X : csr_matrix (n, d) float32, Y : csr_matrix (n, n_labels) float32, with sorted labels.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, 303, *stream]))
    topic = rng.integers(0, topics, size=n)
    f_block, l_block = d // topics, n_labels // topics
    half = nnz_row // 2
    cols = np.empty((n, nnz_row), dtype=np.int32)
    step = 1 << 16
    for s in range(0, n, step):
        e = min(s + step, n)
        t = topic[s:e, None]
        cols[s:e, :half] = t * f_block + rng.integers(0, f_block, size=(e - s, half))
        cols[s:e, half:] = rng.integers(0, d, size=(e - s, nnz_row - half))
    data = np.full(n * nnz_row, 1 / np.sqrt(nnz_row), dtype=np.float32)
    indptr = np.arange(0, n * nnz_row + 1, nnz_row, dtype=np.int64)
    X = sp.csr_matrix((data, cols.reshape(-1), indptr), shape=(n, d))
    del cols
    counts = np.maximum(1, rng.poisson(labels_row, size=n))
    rows = np.repeat(np.arange(n), counts)
    labels = np.repeat(topic, counts) * l_block + rng.integers(0, l_block, size=rows.size)
    Y = sp.csr_matrix((np.ones(rows.size, dtype=np.float32), (rows, labels)),
                      shape=(n, n_labels))
    Y.data[:] = 1  # a label drawn twice for a point is one label
    return X, Y
