"""Baselines and ablations of Chen et al. (2005), Tables 4-5.

* :func:`hasegawa_clustering` - Hasegawa, Sekine and Grishman (2004): cosine similarity of
  the between-entity word vectors and complete-linkage hierarchical clustering cut at the
  true number of types.  Build the vectors with
  ``build_contexts(..., window="0-5-0", position_tags=False)`` (words between the entities
  only; Hasegawa et al. used at most 5 intervening words).
* :func:`kmeans_baseline` - k-means on all features at a given k (the true k).  RLBaseline,
  the k estimated by stability on all features and k-means at that k, is the estimator's
  :meth:`~scarce.algorithms.relations.model.RelationDiscovery.select_k` on all words.
* :func:`frequency_ranking` and :func:`chi2_ranking` - the ranking ablations.  The chi^2
  statistic needs class labels; the paper does not say where they come from in its
  unsupervised setting.  :func:`chi2_ranking` takes any labels; :func:`chi2_pseudo_ranking`
  uses k-means pseudo-labels on all features (label-free, the default for the ablation);
  passing gold labels gives a supervised upper bound and must be reported as such.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.cluster.hierarchy import cut_tree, linkage
from sklearn.feature_selection import chi2
from sklearn.preprocessing import normalize

from scarce.algorithms.memory import check_allocation
from scarce.algorithms.relations.entropy import rank_by_scores
from scarce.algorithms.relations.stability import reference_labels


def cosine_distance_condensed(X, *, block_size: int = 1024) -> np.ndarray:
    """Condensed (i < j) cosine distances ``1 - cos`` of the rows of X, in row blocks.

    A row with no non-zero has similarity 0 (distance 1) to every other row.
    Memory: n(n-1)/2 float64.
    """
    Xn = normalize(sp.csr_matrix(X, dtype=np.float64), norm="l2")
    XT = Xn.T.tocsr()
    n = Xn.shape[0]
    check_allocation((n * (n - 1) // 2,), np.float64, copies=2,
                     what="complete-link baseline (N(N-1)/2 cosine distances)",
                     advice="sample the pairs (max_pairs in the relations config) or turn the "
                     "baselines off (baselines: false)")
    out = np.empty(n * (n - 1) // 2, dtype=np.float64)
    pos = 0
    for start in range(0, n, block_size):
        stop = min(start + block_size, n)
        sim = (Xn[start:stop] @ XT).toarray()
        for i in range(start, stop):
            row = sim[i - start, i + 1:]
            out[pos:pos + row.size] = 1.0 - row
            pos += row.size
    np.clip(out, 0.0, 2.0, out=out)
    return out


def hasegawa_clustering(X, n_clusters: int) -> np.ndarray:
    """Complete-linkage clustering of cosine distances, cut into ``n_clusters`` clusters.

    Parameters
    ----------
    X : sparse (n_pairs, n_words)
        Between-entity word vectors.
    n_clusters : int
        The true number of relation types.

    Returns
    -------
    ndarray of int, labels in ``0..n_clusters-1``.

    The tree is cut after ``n - n_clusters`` merges (``scipy.cluster.hierarchy.cut_tree``),
    so exactly ``n_clusters`` clusters come out even when many merges tie at distance 1
    (pairs sharing no between-word), where a height threshold (``fcluster(maxclust)``)
    collapses to one cluster.
    """
    n = X.shape[0]
    if not 1 <= int(n_clusters) <= n:
        raise ValueError(f"n_clusters must be in [1, {n}], got {n_clusters}")
    Z = linkage(cosine_distance_condensed(X), method="complete")
    return cut_tree(Z, n_clusters=int(n_clusters)).ravel().astype(np.int64)


def kmeans_baseline(X, k: int, *, seed: int, n_init: int, row_norm: bool) -> np.ndarray:
    """k-means on all features, seeded and row-normalised as the method's first reference
    clustering C_1 (:func:`stability.reference_labels` with every column)."""
    return reference_labels(X, np.arange(X.shape[1]), k, seed=seed, n_init=n_init,
                            row_norm=row_norm, index=0)


def frequency_ranking(X) -> tuple[np.ndarray, np.ndarray]:
    """Features by decreasing document frequency (ties: lower index first).

    Returns ``(ranking, scores)``, the scores being the document frequencies.
    """
    df = np.diff(sp.csc_matrix(X).indptr).astype(np.float64)
    return rank_by_scores(df), df


def chi2_ranking(X, labels) -> tuple[np.ndarray, np.ndarray]:
    """Features by decreasing chi^2 statistic against ``labels`` (scikit-learn's ``chi2``).

    Returns ``(ranking, scores)``; undefined scores (constant features) count as 0.
    """
    X = sp.csr_matrix(X)
    if X.nnz and X.data.min() < 0:
        raise ValueError("chi2 needs non-negative features")
    scores, _ = chi2(X, np.asarray(labels))
    scores = np.nan_to_num(scores, nan=0.0)
    df = np.diff(sp.csc_matrix(X).indptr)
    return rank_by_scores(scores, df), scores


def chi2_pseudo_ranking(X, k: int, *, seed: int, n_init: int, row_norm: bool
                        ) -> tuple[np.ndarray, np.ndarray]:
    """chi^2 ranking against k-means pseudo-labels (all features, k clusters)."""
    return chi2_ranking(X, kmeans_baseline(X, k, seed=seed, n_init=n_init, row_norm=row_norm))
