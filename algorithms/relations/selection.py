"""Feature subset search with the invariant criterion (Chen et al., 2005, Sec. 2.2, Table 1).

For each k in [K_low, K_high] and each prefix F of the ranked word list (in steps), the
pairs are clustered by k-means on the columns F and the partition is scored by the
invariant criterion

    crit(F, k) = trace(P_W^{-1} P_B),

with P_W the within-cluster and P_B the between-cluster scatter matrix of the pairs
restricted to F.  Among the prefixes with coverage(P, F) >= theta (the share of pairs that
have at least one word of F) the one with the largest criterion is F_k.

P_W is singular for sparse words (a word used by one cluster only has zero within
scatter), so we **regularise**: ``P_W + lambda I`` with ``lambda = reg * trace(P_T) / |F|``
(P_T the total scatter; ``reg`` defaults to 1e-3).  We prefer a ridge to the pseudo-inverse
because ``pinv`` gives no weight to directions of zero within-scatter, which are exactly the
words that separate clusters perfectly, and because a relative ridge keeps the criterion
continuous as F grows.  The size of the ridge matters on sparse contexts: with
``reg = 1e-3`` a cluster whose members share one vector on some words has (almost) zero
within-scatter there, and the term ``n_c v^2 / lambda`` dominates the criterion.  On SemEval
0-10-0 (entropy ranking, 12 prefixes from 20 words) F_k then jumps between the 46 and the
1,880 top words from one k to the next (46 for k = 5, 7, 17, 19, 20; 1,880 for k = 8-11, 18),
and the small subsets, having few distinct vectors, look perfectly stable.  ``reg = 0.1``
gives a steady F_k (1,880 or 1,244 words for most k; 545-823 for a few).

Comparing prefixes of different sizes (``subset_rule``)
-------------------------------------------------------
``"max"`` (the paper) takes the feasible prefix with the largest criterion.  The invariant
criterion is biased towards more features: for a fixed partition, trace(P_W^{-1} P_B) cannot
decrease when a feature is added (without the ridge each term n_c v_c^T P_W^{-1} v_c is a
quadratic form that can only grow on a larger space, by the Schur complement; Dy and Brodley,
2004, Sec. 4.2, show the bias for scatter separability and for maximum likelihood; our
relative ridge changes with |F|, so monotonicity is approximate).  On SemEval F_k is then
almost always the whole vocabulary.  ``"cross_projection"`` (a deviation, off by default) is
Dy and Brodley's cross-projection normalisation: to compare subset S_i (clustering C_i found
in S_i) with S_j (clustering C_j), score each clustering in both spaces,

    value(S_i, C_i) = crit(S_i, C_i) * crit(S_j, C_i),
    value(S_j, C_j) = crit(S_j, C_j) * crit(S_i, C_j),

and keep the subset with the larger value: both products evaluate a partition once in each
of the same two spaces, so the dimension bias cancels.  The comparison is not transitive;
as in Dy and Brodley's sequential forward search the prefixes are scanned by increasing
size and each is compared with the best so far (ties keep the smaller prefix).  "Evaluating
C_i in S_j" is :func:`invariant_criterion` of the labels of C_i on the rows of X restricted
to S_j (row-normalised as for the clustering), with S_j's own ridge.  No gold labels are
involved.

Measured on SemEval 0-10-0 (entropy ranking, ridge 0.1, seeds 0-4; README): the bias is real
(the all-words clustering at k = 9 scores 14.4 on the top 46 words and 71.4 on all 1,880),
but for *nested* prefixes cross-projection is biased the other way: a clustering found on the
small prefix keeps its separation in the larger space, which contains those words, while a
clustering found on the larger space loses most of it when projected onto the small prefix.
F_k becomes the smallest feasible prefix (46 words) for 10 of the 19 k (seed 0), the
chosen k returns to the 14-20 of the small-subset regime, always with the 46 words.  The
option is kept for the record, not recommended.

k-means is scikit-learn's ``KMeans`` (k-means++ initialisation, ``n_init`` restarts, seeded
``random_state``).  By default every pair's vector is L2-normalised after the columns F are
selected (``row_norm``), as for the tf-idf contexts, so the clustering compares the
direction of the context vectors; pairs with no word of F stay at the origin.

References
----------
J. G. Dy and C. E. Brodley. Feature Selection for Unsupervised Learning. Journal of Machine
Learning Research 5 (2004), 845-889, Sec. 4.2 (cross-projection normalisation).
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import scipy.linalg as sla
import scipy.sparse as sp
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import normalize


def derived_seed(*entropy: int) -> int:
    """A 32-bit seed derived from integers with ``numpy.random.SeedSequence``."""
    return int(np.random.SeedSequence([int(e) for e in entropy]).generate_state(1)[0])


def full_kmeans_seed(seed: int, k: int) -> int:
    """Seed of the k-means run on all pairs for k: ``SeedSequence([seed, 0, k])``.

    Shared by the subset search and the stability step (the reference clustering C).
    """
    return derived_seed(seed, 0, k)


def _check_X(X) -> sp.csr_matrix:
    if not sp.issparse(X):
        X = sp.csr_matrix(np.asarray(X))
    X = sp.csr_matrix(X)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    return X


def prepare_subset(X, features, *, row_norm: bool = True) -> sp.csr_matrix:
    """X restricted to the columns ``features`` (a copy), rows L2-normalised if ``row_norm``."""
    X = _check_X(X)
    features = np.asarray(features, dtype=np.intp)
    if features.ndim != 1 or features.size == 0:
        raise ValueError("features must be a non-empty 1-D array of column indices")
    if features.min() < 0 or features.max() >= X.shape[1]:
        raise ValueError(f"feature indices must lie in [0, {X.shape[1]}), got "
                         f"[{features.min()}, {features.max()}]")
    Z = X[:, features].tocsr()
    if row_norm:
        Z = normalize(Z, norm="l2", copy=False)
    return Z


def coverage(X, features) -> float:
    """coverage(P, F): the share of rows with at least one non-zero in the columns ``features``."""
    X = _check_X(X)
    sub = X[:, np.asarray(features, dtype=np.intp)]
    return float(np.count_nonzero(sub.getnnz(axis=1)) / X.shape[0])


def kmeans_labels(Z, k: int, *, random_state: int, n_init: int = 3, max_iter: int = 300
                  ) -> np.ndarray:
    """scikit-learn k-means labels (k-means++, ``n_init`` restarts, seeded)."""
    k = int(k)
    if not 1 <= k <= Z.shape[0]:
        raise ValueError(f"k must be in [1, {Z.shape[0]}], got {k}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # fewer distinct points than k
        km = KMeans(n_clusters=k, n_init=int(n_init), max_iter=int(max_iter),
                    random_state=int(random_state))
        return km.fit(Z).labels_.astype(np.int64)


def invariant_criterion(Z, labels, *, reg: float = 1e-3) -> float:
    """trace((P_W + lambda I)^{-1} P_B) with ``lambda = reg * trace(P_T) / d``.

    Parameters
    ----------
    Z : array-like or sparse (n, d)
        The points (the matrix k-means clustered).
    labels : array of int, shape (n,)
    reg : float, default 1e-3
        Relative ridge; must be > 0 (P_W is singular for sparse words).

    Returns
    -------
    float
        ``sum_c n_c (m_c - m)^T (P_W + lambda I)^{-1} (m_c - m)``; 0 when the data have no spread.
    """
    if reg <= 0:
        raise ValueError(f"reg must be positive (P_W is singular for sparse words), got {reg}")
    Z = _check_X(Z).astype(np.float64)
    labels = np.asarray(labels)
    n, d = Z.shape
    if labels.shape != (n,):
        raise ValueError(f"labels has shape {labels.shape} but Z has {n} rows")
    uniq, inv = np.unique(labels, return_inverse=True)
    onehot = sp.csr_matrix((np.ones(n), (inv, np.arange(n))), shape=(uniq.size, n))
    sizes = np.asarray(onehot.sum(axis=1)).ravel()
    sums = np.asarray((onehot @ Z).todense())
    means = sums / sizes[:, None]
    mean = sums.sum(axis=0) / n
    gram = np.asarray((Z.T @ Z).todense())
    P_T = gram - n * np.outer(mean, mean)
    P_W = gram - (sizes[:, None] * means).T @ means
    tr = float(np.trace(P_T))
    if tr <= 0:
        return 0.0
    lam = reg * tr / d
    P_W[np.diag_indices(d)] += lam
    P_W = (P_W + P_W.T) / 2.0
    V = means - mean  # (c, d)
    factor = sla.cho_factor(P_W, lower=True, check_finite=False)
    sol = sla.cho_solve(factor, V.T, check_finite=False)  # (d, c)
    return float(np.sum(sizes * np.einsum("cd,dc->c", V, sol)))


def prefix_sizes(n_features: int, *, step: int | None = None, n_steps: int = 12,
                 min_size: int = 10) -> np.ndarray:
    """Prefix lengths to try: ``step, 2*step, ...`` or ``n_steps`` geometric steps.

    Always ends with ``n_features`` (the whole list).
    """
    n_features = int(n_features)
    if n_features < 1:
        raise ValueError("need at least one feature")
    if step is not None:
        if step < 1:
            raise ValueError(f"step must be positive, got {step}")
        sizes = np.arange(int(step), n_features + 1, int(step))
    else:
        lo = min(max(1, int(min_size)), n_features)
        sizes = np.geomspace(lo, n_features, num=max(1, int(n_steps)))
    sizes = np.unique(np.clip(np.rint(sizes).astype(np.int64), 1, n_features))
    return np.unique(np.append(sizes, n_features))


def score_candidate(X, features, k: int, *, seed: int = 0, n_init: int = 3,
                    row_norm: bool = True, reg: float = 1e-3, theta: float = 0.9,
                    skip_infeasible: bool = True, return_labels: bool = False) -> dict:
    """One unit of the search: cluster with (F, k) and score it.

    The k-means seed is :func:`full_kmeans_seed` ``(seed, k)`` so that the clustering
    scored here is the reference clustering C of the stability step.

    Returns
    -------
    dict with ``k``, ``n_features``, ``coverage``, ``feasible`` (coverage >= theta),
    ``criterion`` (NaN when infeasible and ``skip_infeasible``) and, if ``return_labels``,
    ``labels``.
    """
    features = np.asarray(features, dtype=np.intp)
    cov = coverage(X, features)
    out = {"k": int(k), "n_features": int(features.size), "coverage": cov,
           "feasible": bool(cov >= theta), "criterion": float("nan")}
    if skip_infeasible and not out["feasible"]:
        if return_labels:
            out["labels"] = None
        return out
    Z = prepare_subset(X, features, row_norm=row_norm)
    labels = kmeans_labels(Z, k, random_state=full_kmeans_seed(seed, k), n_init=n_init)
    out["criterion"] = invariant_criterion(Z, labels, reg=reg)
    if return_labels:
        out["labels"] = labels
    return out


def search_subsets(X, ranking, k_values, *, sizes=None, theta: float = 0.9, seed: int = 0,
                   n_init: int = 3, row_norm: bool = True, reg: float = 1e-3,
                   return_labels: bool = False):
    """Driver: :func:`score_candidate` for every (k, prefix); one row per candidate.

    Parameters
    ----------
    ranking : array of int
        Feature indices, most important first.
    k_values : iterable of int
    sizes : array of int, optional
        Prefix lengths; default :func:`prefix_sizes` of ``len(ranking)``.
    return_labels : bool, default False
        Also return a dict ``(k, prefix length) -> labels`` of the feasible candidates (for
        :func:`best_subsets_cross_projection`).
    """
    ranking = np.asarray(ranking, dtype=np.intp)
    sizes = prefix_sizes(ranking.size) if sizes is None else np.asarray(sizes, dtype=np.int64)
    units = [score_candidate(X, ranking[:s], k, seed=seed, n_init=n_init, row_norm=row_norm,
                             reg=reg, theta=theta, return_labels=return_labels)
             for k in k_values for s in sizes]
    frame = pd.DataFrame([{c: u[c] for c in SEARCH_COLUMNS} for u in units],
                         columns=SEARCH_COLUMNS)
    if not return_labels:
        return frame
    labels = {(u["k"], u["n_features"]): u["labels"] for u in units
              if u["labels"] is not None}
    return frame, labels


SEARCH_COLUMNS = ["k", "n_features", "coverage", "feasible", "criterion"]
SUBSET_RULES = ("max", "cross_projection")


def cross_projection_values(Z_i, labels_i, Z_j, labels_j, *, reg: float = 1e-3,
                            crit_ii: float | None = None, crit_jj: float | None = None
                            ) -> tuple[float, float]:
    """Dy and Brodley's normalised values of two (subset, clustering) candidates.

    Returns ``(crit(Z_i, C_i) * crit(Z_j, C_i), crit(Z_j, C_j) * crit(Z_i, C_j))``: each
    clustering scored by :func:`invariant_criterion` in its own space and in the other's.
    ``crit_ii`` / ``crit_jj`` reuse the own-space values when already known.
    """
    c_ii = invariant_criterion(Z_i, labels_i, reg=reg) if crit_ii is None else float(crit_ii)
    c_jj = invariant_criterion(Z_j, labels_j, reg=reg) if crit_jj is None else float(crit_jj)
    return (c_ii * invariant_criterion(Z_j, labels_i, reg=reg),
            c_jj * invariant_criterion(Z_i, labels_j, reg=reg))


def best_subsets_cross_projection(X, ranking, scores: pd.DataFrame, labels: dict, *,
                                  reg: float = 1e-3, row_norm: bool = True
                                  ) -> tuple[dict[int, int], pd.DataFrame]:
    """F_k for every k by cross-projection (``subset_rule="cross_projection"``).

    For each k the feasible prefixes are scanned by increasing size; each is compared with
    the best so far by :func:`cross_projection_values` and replaces it when its value is
    strictly larger.  Without a feasible prefix the fallback of :func:`best_subsets` applies.

    Parameters
    ----------
    scores : DataFrame from :func:`search_subsets`
    labels : dict ``(k, prefix length) -> labels`` from ``search_subsets(...,
        return_labels=True)``

    Returns
    -------
    subsets : dict k -> prefix length
    comparisons : DataFrame, one row per comparison: ``k``, ``best`` and ``candidate``
        (prefix lengths), ``value_best``, ``value_candidate``, ``winner``.
    """
    ranking = np.asarray(ranking, dtype=np.intp)
    fallback = best_subsets(scores)
    out: dict[int, int] = {}
    rows = []
    prepared: dict[int, object] = {}  # the prefixes are the same for every k

    def points(size: int):
        if size not in prepared:
            prepared[size] = prepare_subset(X, ranking[:size], row_norm=row_norm)
        return prepared[size]

    for k, g in scores.groupby("k", sort=True):
        k = int(k)
        ok = g[g["feasible"] & g["criterion"].notna()].sort_values("n_features")
        if ok.empty:
            out[k] = fallback[k]
            continue
        sizes = ok["n_features"].astype(int).tolist()
        crit = dict(zip(sizes, ok["criterion"].astype(float), strict=True))
        best = sizes[0]
        Z_best = points(best)
        for size in sizes[1:]:
            Z = points(size)
            v_best, v_cand = cross_projection_values(
                Z_best, labels[(k, best)], Z, labels[(k, size)], reg=reg,
                crit_ii=crit[best], crit_jj=crit[size])
            winner = size if v_cand > v_best else best
            rows.append({"k": k, "best": best, "candidate": size, "value_best": v_best,
                         "value_candidate": v_cand, "winner": winner})
            if winner == size:
                best, Z_best = size, Z
        out[k] = best
    comparisons = pd.DataFrame(rows, columns=["k", "best", "candidate", "value_best",
                                              "value_candidate", "winner"])
    return out, comparisons


def best_subsets(scores: pd.DataFrame) -> dict[int, int]:
    """F_k for every k: the feasible prefix with the largest criterion.

    If no prefix reaches the coverage threshold for some k, the smallest prefix with the
    largest coverage is used (the constraint cannot be met; documented fallback).

    Returns
    -------
    dict k -> prefix length
    """
    out: dict[int, int] = {}
    for k, g in scores.groupby("k", sort=True):
        ok = g[g["feasible"] & g["criterion"].notna()]
        if len(ok):
            best = ok["criterion"].max()
            out[int(k)] = int(ok.loc[ok["criterion"] == best, "n_features"].min())
        else:
            top = g["coverage"].max()
            out[int(k)] = int(g.loc[g["coverage"] == top, "n_features"].min())
    return out
