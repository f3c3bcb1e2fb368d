"""Entropy-based feature ranking (Dash et al., 2000) as used by Chen et al. (2005, Sec. 2.1).

For data points ``p_1..p_N`` with features ``f_1..f_M``:

    D_ij  = ||p_i - p_j||_2                          (Euclidean distance)
    alpha = -ln(0.5) / mean_{i<j}(D_ij)              (so that S = 0.5 at the mean distance)
    S_ij  = exp(-alpha * D_ij)
    E     = -sum_{i != j} [S_ij log S_ij + (1 - S_ij) log(1 - S_ij)]

(natural logarithms; terms with S in {0, 1} are 0; the sum runs over ordered pairs,
i.e. twice the sum over ``i < j``, the diagonal contributing nothing).  Data with a
clear cluster structure has low E.  The importance of word ``w`` is ``E_{-w}``, the
entropy of the data with column ``w`` removed: if removing ``w`` leaves the lowest
entropy, the clusters are clearest without it, so ``w`` is the least important word.

Which ranking
-------------
Two readings of "importance" exist in the sources.  The ranking here is by
``|E_{-w} - E|``, how much the entropy of the data changes when ``w`` is removed; the
word whose removal changes E least is the least important.  This is the criterion of
Dash, Liu and Yao (1997) on which Dash and Liu (2000) build ("remove as many features as
possible and yet maintain the level of distinction between the samples as if no features
had been removed"; Kantardzic, *Data Mining*, 2nd ed. 2011, Sec. 3.4: the feature removed
first is the one for which "the difference between entropy for F and entropy for F - f is
minimum").  The literal reading of Chen et al. (2005, Sec. 2.1), ``E_{-w}`` itself ranked
by decreasing value, was an option (``importance="removed"``, the estimator's
``entropy_importance``, the benchmark's ``--entropy-importance``) and was removed; no
configuration or documented benchmark command used it.

Why not ``E_{-w}`` itself: on sparse binary context vectors ``E_{-w} - E`` is
negative for almost every frequent word, because removing a word present in many
pairs shortens many distances at once and moves the distance histogram as a whole,
whatever the word says about the clusters.  Measured on SemEval-2010 Task 8 (8,853
pairs of the 9 types, 0-10-0 contexts, 1,880 words): ranked by ``E_{-w}`` the most
frequent and most relation-bearing words (``mid:of``, ``the``, ``from``, ``into``,
``a``, ``in``, ``by``, ``caused``) are ranked **last**, so a prefix reaches the
coverage threshold theta = 0.9 only with the whole vocabulary (coverage of the first
1,000 words: 0.36) and the feature selection never acts.  Ranked by ``|E_{-w} - E|`` the
same words come first (it correlates with log df at r = 0.53) and the first 50 words
already cover 0.91 of the pairs.

Every ``E_{-w}`` is computed once on the full feature set (single pass).
Dash and Liu (2000) used the measure inside a sequential backward elimination that
re-scores all remaining words after every removal (M passes); with thousands of words
that multiplies the cost by M for a ranking Chen et al. did not use, so it is not
offered here.

Speed
-----
The naive computation (:func:`entropy_ranking_naive`) recomputes all distances for
every word: O(M * N^2 * M).  Removing ``w`` changes ``D_ij`` only for the pairs that
differ on ``w``; we exploit that:

* Binary features (:func:`entropy_scores` with ``binary``): ``D_ij^2`` is the Hamming
  distance, an integer ``<= 2 * max_row_nnz``.  ``E`` and ``mean(D)`` are sums over the
  histogram ``H[d]`` of those integers.  Removing ``w`` moves exactly the pairs that
  differ on ``w`` from bin ``d`` to bin ``d - 1``.  Their histogram ``h_w[d]`` is
  ``A_w - B_w`` with ``A_w[d] = sum_{i in P_w} #{j : D2_ij = d}`` (a sparse-dense
  product of X^T with the per-row histograms) and ``B_w[d] = #{i, j in P_w : D2_ij = d}``
  (posting lists), so one pass over the pairwise distances in row blocks gives every
  ``E_{-w}`` *exactly*, with ``alpha`` recomputed per removal from the shifted histogram.
  Cost O(N^2 + sum_w df_w^2 + M * max_d), memory O(block * N + M * max_d).
* Real-valued features (tf-idf): for each ``w`` the distances of the pairs touching
  ``P_w`` (rows with ``w`` non-zero) are updated, giving the exact new mean distance and
  hence ``alpha_w``; the unaffected pairs contribute ``Phi(alpha_w) - (their old part)``
  where ``Phi(a) = sum_{i<j} g(a D_ij)`` is one smooth scalar function of ``a``, evaluated
  exactly at 17 Chebyshev nodes spanning all ``alpha_w`` and interpolated (the ``alpha_w``
  differ by ~1/M relative, so the interpolation error is at rounding level; the tests
  compare with the naive formula).  Cost O(N^2 + N * nnz(X)), memory O(N^2): use
  ``n_samples`` for large N.

Keeping the full data's ``alpha`` for every removal (``alpha="fixed"``, an approximation
that a "pairs that differ" shortcut gives for free) was an option and was removed
(``entropy_alpha: fixed``); ``alpha`` is always recomputed per removal, as defined.

References
----------
M. Dash, H. Liu and J. Yao. Dimensionality reduction of unsupervised data. ICTAI 1997.
M. Dash and H. Liu. Feature Selection for Clustering. PAKDD 2000, 110-121.
M. Kantardzic. Data Mining: Concepts, Models, Methods, and Algorithms, 2nd ed., 2011,
Sec. 3.4 (entropy measure for ranking features).
M. Dash, K. Choi, P. Scheuermann and H. Liu. Feature Selection for Clustering - A Filter
Solution. ICDM 2002.
J. Chen, D. Ji, C. L. Tan and Z. Niu. Unsupervised Feature Selection for Relation
Extraction. IJCNLP 2005, Sec. 2.1.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numpy.polynomial import chebyshev
from scipy.spatial.distance import pdist
from sklearn.utils import check_random_state

from scarce.algorithms.memory import check_allocation

LN2 = float(np.log(2.0))  # -ln 0.5


def pair_entropy(x: np.ndarray) -> np.ndarray:
    """``-(S ln S + (1 - S) ln(1 - S))`` with ``S = exp(-x)``, elementwise, 0 at x = 0."""
    x = np.asarray(x, dtype=np.float64)
    s = np.exp(-x)
    om = -np.expm1(-x)  # 1 - S, accurate for small x
    with np.errstate(divide="ignore", invalid="ignore"):
        tail = np.where(om > 0, om * np.log(np.where(om > 0, om, 1.0)), 0.0)
    return x * s - tail


def _entropy_of_distances(dist: np.ndarray) -> float:
    """E over ordered pairs from the condensed (i < j) distance vector."""
    if dist.size == 0:
        return 0.0
    mean = float(dist.mean())
    if mean == 0.0:
        return 0.0
    return 2.0 * float(pair_entropy(LN2 / mean * dist).sum())


def data_entropy(X) -> float:
    """Entropy E of the data (Dash et al., 2000) by direct summation over all pairs."""
    Xd = X.toarray() if sp.issparse(X) else np.asarray(X)
    return _entropy_of_distances(pdist(np.asarray(Xd, dtype=np.float64), "euclidean"))


def rank_by_scores(scores: np.ndarray, tie_break: np.ndarray | None = None, *,
                   digits: int = 12) -> np.ndarray:
    """Feature indices by decreasing score (most important first).

    Scores are compared after rounding to ``digits`` significant digits relative to the largest
    magnitude, so values that are equal in exact arithmetic tie in any implementation;
    ties go to the larger ``tie_break`` (e.g. document frequency), then the lower index.
    """
    scores = np.asarray(scores, dtype=np.float64)
    scale = float(np.max(np.abs(scores))) if scores.size else 0.0
    key = np.round(scores / scale, int(digits)) if scale > 0 else scores
    tb = np.zeros_like(key) if tie_break is None else np.asarray(tie_break, dtype=np.float64)
    idx = np.arange(scores.size)
    return np.lexsort((idx, -tb, -key))


def entropy_ranking_naive(X) -> tuple[np.ndarray, np.ndarray]:
    """Reference implementation: recompute all distances after removing each word.

    O(M^2 N^2); for tests and for measuring the speed-up only.

    Returns
    -------
    ranking : ndarray of int
        Feature indices, most important first (largest ``|E_{-w} - E|``).
    scores : ndarray of float
        ``E_{-w}`` per feature.
    """
    Xd = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
    full = _entropy_of_distances(pdist(Xd, "euclidean"))
    scores = np.empty(Xd.shape[1])
    for w in range(Xd.shape[1]):
        scores[w] = _entropy_of_distances(pdist(np.delete(Xd, w, axis=1), "euclidean"))
    df = (Xd != 0).sum(axis=0)
    return _rank(scores, full, df), scores


def _rank(scores: np.ndarray, full: float, df: np.ndarray) -> np.ndarray:
    # |E_{-w} - E| is a difference of two sums of N^2 terms: compare it at 9 digits so
    # that values equal in exact arithmetic tie in any implementation.
    return rank_by_scores(np.abs(scores - full), df, digits=9)


def _as_csr(X) -> sp.csr_matrix:
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64, copy=True)
    else:
        X = sp.csr_matrix(np.asarray(X, dtype=np.float64))
    if X.ndim != 2 or X.shape[0] < 2 or X.shape[1] < 1:
        raise ValueError(f"X must be 2-D with at least 2 rows and 1 column, got shape {X.shape}")
    if not np.all(np.isfinite(X.data)):
        raise ValueError("X contains NaN or infinite values")
    X.eliminate_zeros()
    X.sort_indices()
    return X


def _binary_scores(X: sp.csr_matrix, block_size: int) -> tuple[np.ndarray, float]:
    n, m = X.shape
    Xb = sp.csr_matrix((np.ones(X.nnz, dtype=np.int64), X.indices.copy(), X.indptr.copy()),
                       shape=X.shape)
    r = np.diff(Xb.indptr).astype(np.int64)
    nbins = int(2 * r.max()) + 2 if n else 2  # one spare bin so d + 1 is always valid
    XT = Xb.T.tocsr()
    Xc = Xb.tocsc()
    postings = [Xc.indices[Xc.indptr[w]:Xc.indptr[w + 1]] for w in range(m)]
    H = np.zeros(nbins, dtype=np.int64)
    A = np.zeros((m, nbins), dtype=np.int64)
    B = np.zeros((m, nbins), dtype=np.int64)
    check_allocation((min(block_size, n), n), np.int64, copies=4,
                     what="entropy ranking (a block of rows x N distances)",
                     advice="lower block_size")
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        blk = Xb[start:stop]
        G = (blk @ XT).toarray()
        D2 = r[start:stop, None] + r[None, :] - 2 * G
        b = stop - start
        hist = np.bincount((D2 + (np.arange(b) * nbins)[:, None]).ravel(),
                           minlength=b * nbins).reshape(b, nbins)
        H += hist.sum(axis=0)
        A += np.asarray(blk.T @ hist)
        bc = blk.tocsc()
        for w in np.flatnonzero(np.diff(bc.indptr)):
            rows = bc.indices[bc.indptr[w]:bc.indptr[w + 1]]
            sub = D2[np.ix_(rows, postings[w])]
            B[w] += np.bincount(sub.ravel(), minlength=nbins)
    H[0] -= n  # drop the diagonal
    Hu = H // 2  # unordered pairs i < j
    h = A - B  # pairs differing on w (each unordered pair once), by D^2 before removal
    Hw = Hu[None, :] - h
    Hw[:, :-1] += h[:, 1:]
    n_pairs = n * (n - 1) // 2
    root = np.sqrt(np.arange(nbins, dtype=np.float64))
    mean0 = float(Hu @ root) / n_pairs
    alpha0 = LN2 / mean0 if mean0 > 0 else 0.0
    full = 2.0 * float(Hu @ pair_entropy(alpha0 * root))
    means = (Hw @ root) / n_pairs
    with np.errstate(divide="ignore"):
        alphas = np.where(means > 0, LN2 / np.where(means > 0, means, 1.0), 0.0)
    G_ = pair_entropy(alphas[:, None] * root[None, :])
    return 2.0 * (Hw * G_).sum(axis=1), full


def _real_scores(X: sp.csr_matrix) -> tuple[np.ndarray, float]:
    n, m = X.shape
    check_allocation((n, n), np.float64, copies=3,
                     what="entropy ranking with real-valued weights (N x N squared distances)",
                     advice="rank on a seeded subsample (n_samples; entropy_samples in the "
                     "relations config) or use binary weights (histogram method, O(N) memory)")
    G = (X @ X.T).toarray()
    r = np.diag(G).copy()
    D2 = r[:, None] + r[None, :] - 2.0 * G
    del G
    D2[D2 < 1e-12 * max(float(r.max()), 1e-300)] = 0.0
    np.fill_diagonal(D2, 0.0)
    iu = np.triu_indices(n, 1)
    dv = np.sqrt(D2[iu])
    n_pairs = dv.size
    mean0 = float(dv.mean())
    full = 2.0 * float(pair_entropy((LN2 / mean0 if mean0 > 0 else 0.0) * dv).sum())
    Xc = X.tocsc()

    def affected(w):
        rows = Xc.indices[Xc.indptr[w]:Xc.indptr[w + 1]]
        vals = Xc.data[Xc.indptr[w]:Xc.indptr[w + 1]]
        col = np.zeros(n)
        col[rows] = vals
        old2 = D2[rows]
        new2 = np.maximum(old2 - (vals[:, None] - col[None, :]) ** 2, 0.0)
        new2[new2 < 1e-12 * max(float(r.max()), 1e-300)] = 0.0
        weight = np.ones_like(old2)
        weight[:, rows] = 0.5  # pairs inside P_w are seen twice
        weight[np.arange(rows.size), rows] = 0.0
        return np.sqrt(old2), np.sqrt(new2), weight

    means = np.empty(m)
    for w in range(m):
        old, new, weight = affected(w)
        means[w] = mean0 - float((weight * (old - new)).sum()) / n_pairs
    with np.errstate(divide="ignore"):
        alphas = np.where(means > 0, LN2 / np.where(means > 0, means, 1.0), 0.0)

    def phi(a):
        return np.array([float(pair_entropy(ai * dv).sum()) for ai in np.atleast_1d(a)])

    uniq = np.unique(alphas)
    if uniq.size <= 17:
        table = dict(zip(uniq, phi(uniq), strict=True))
        base = np.array([table[a] for a in alphas])
    else:
        lo, hi = float(uniq[0]), float(uniq[-1])
        cheb = chebyshev.Chebyshev.interpolate(phi, 16, domain=[lo, hi])
        base = cheb(alphas)
    scores = np.empty(m)
    for w in range(m):
        old, new, weight = affected(w)
        a = alphas[w]
        scores[w] = 2.0 * (base[w] - float((weight * pair_entropy(a * old)).sum())
                           + float((weight * pair_entropy(a * new)).sum()))
    return scores, full


def entropy_scores(
    X,
    *,
    binary: str | bool = "auto",
    n_samples: int | None = None,
    random_state=None,
    block_size: int = 512,
    return_entropy: bool = False,
):
    """``E_{-w}`` for every feature ``w``: the entropy of the data without ``w``.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_points, n_features)
    binary : {"auto", True, False}, default "auto"
        Use the exact Hamming-histogram algorithm.  ``"auto"`` uses it when every stored
        value of X is 1; ``True`` treats every non-zero as 1 (binarises X).
    n_samples : int, optional
        Score on a seeded random subsample of this many points (without replacement);
        ``None`` uses all points.  Words absent from the subsample score the subsample's
        full entropy (removing them changes nothing).
    random_state : int, RandomState or None
        Seed for the subsample.
    block_size : int, default 512
        Rows per block of the pairwise-distance pass (binary algorithm).
    return_entropy : bool, default False
        Also return ``E``, the entropy of the (sub)sampled data with every feature.

    Returns
    -------
    scores : ndarray of float64, shape (n_features,)
    entropy : float
        Only if ``return_entropy``.
    """
    X = _as_csr(X)
    if n_samples is not None:
        n_samples = int(n_samples)
        if n_samples < 2:
            raise ValueError(f"n_samples must be at least 2, got {n_samples}")
        if n_samples < X.shape[0]:
            rng = check_random_state(random_state)
            idx = np.sort(rng.choice(X.shape[0], size=n_samples, replace=False))
            X = X[idx]
    if binary == "auto":
        binary = bool(np.all(X.data == 1.0))
    elif binary not in (True, False):
        raise ValueError(f"binary must be 'auto', True or False, got {binary!r}")
    if binary:
        scores, full = _binary_scores(X, max(1, int(block_size)))
    else:
        scores, full = _real_scores(X)
    return (scores, full) if return_entropy else scores


def entropy_ranking(X, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    """Rank features by decreasing ``|E_{-w} - E|`` (most important first; Dash, Liu and Yao
    1997, see the module docstring).

    Parameters
    ----------
    **kwargs
        Those of :func:`entropy_scores`.

    Ties (e.g. words with the same posting-list geometry) go to the more frequent word,
    then the lower index.

    Returns
    -------
    ranking : ndarray of int, shape (n_features,)
    scores : ndarray of float, shape (n_features,)
        ``E_{-w}`` per feature (not reordered).
    """
    kwargs.pop("return_entropy", None)
    scores, full = entropy_scores(X, return_entropy=True, **kwargs)
    df = np.diff(sp.csc_matrix(X).indptr) if sp.issparse(X) else (np.asarray(X) != 0).sum(0)
    return _rank(scores, full, df), scores
