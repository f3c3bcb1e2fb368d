"""Resampling stability for model order selection (Chen et al., 2005, Table 2).

For a feature subset F and a number of clusters k, let C be the k-means clustering of
all pairs P and C^mu that of a subsample P^mu of ``rho * |P|`` pairs.  Eq. 2:

    M(C^mu, C) = #{i<j in P^mu : together in C^mu and in C} / #{i<j in P^mu : together in C}

Eq. 3 (difference form): M_norm(F, k) = mean_mu M(C^mu, C) - mean_mu M(R^mu, C), where R^mu
is a random predictor splitting P^mu into k clusters.  The k (and its F_k) with the largest
M_norm is chosen (Levine and Domany, 2001; Lange et al., 2002).

Counts come from contingency tables (never N x N): with ``n_ab`` the number of points in
cluster a of C^mu and b of C, the numerator is ``sum_ab C(n_ab, 2)`` and the denominator
``sum_b C(n_.b, 2)``.

Random predictor
----------------
R assigns every point of P^mu independently and uniformly to one of k clusters.  Each pair is
then together in R with probability 1/k, independently of C, so E[numerator] = denominator / k
and **E[M(R, C)] = 1/k exactly** (the denominator is fixed given C and P^mu).

Several reference clusterings (``n_references`` R, a variance reduction; default 1)
-----------------------------------------------------------------------------------
Every subsample of a given k is compared with the same C, so C's luck is not averaged out
by the q subsamples: k-means on relation contexts has many local optima of nearly equal
inertia, and the M_norm of one k moves from one reference clustering to another by about as
much as the best k's differ, so Eq. 3 picks whichever k had the luckiest C.  With R > 1,
C_1..C_R are k-means runs of all pairs with their own seeds (C_1 has the search's seed) and
M(C^mu) is the mean of Eq. 2 against each: Monte Carlo over the algorithm's randomness on
the full set, as the q subsamples are over the data.  R = 1 is the paper.  The final
clustering at the chosen k is C_1.  The cost is R reference runs per k; R references of n
restarts cost what one reference of R * n restarts does.

Restarts of the subsample clusterings (the estimator's ``n_init_subsample``)
---------------------------------------------------------------------------
Eq. 2 measures how reproducible the clustering *algorithm's output* is.  With few k-means
restarts per subsample, C^mu lands in a different local optimum from one subsample to the
next, and the curve over k is flat within that noise, its maximum moving from seed to seed;
more restarts per subsample (and several references) make the references agree and the
curve peak at one k.  Restarts are cheap next to the rest of the search.  The measurements
behind both choices are in the docs' journal (relations: stability references and
restarts).

Deviations that were measured and removed
-----------------------------------------
Counting Eq. 2 over pairs of different vectors only (``stability_pairs: distinct``: it
changed no chosen k), the one-standard-error rule for reading k off the curve
(``k_rule: one_se``), a simulated random predictor (``random_baseline: simulated``: its mean
is 1/k) and Clest's column-permuted null data in place of 1/k (``baseline: null_permuted``:
it made the choice worse) were options; their figures and commands are in the docs' journal.

Seeds
-----
All randomness is derived with ``numpy.random.SeedSequence`` so each unit of work can run
anywhere (a Prefect ``.map``) and give the same numbers:

* subsample mu: ``SeedSequence([seed, 1, mu])`` - the same P^mu for every k (common random
  numbers make the comparison across k less noisy);
* k-means on P^mu: ``SeedSequence([seed, 2, k, mu])``;
* k-means on all of P (the reference C_1): ``SeedSequence([seed, 0, k])``, shared with the
  subset search, so with the search's restarts C_1 is the clustering the search scored;
  further references C_2..C_R: ``SeedSequence([seed, 0, k, r])``.

References
----------
E. Levine and E. Domany. Resampling method for unsupervised estimation of cluster
validity. Neural Computation 13 (2001).
T. Lange, M. Braun, V. Roth and J. M. Buhmann. Stability-based model selection. NIPS 2002.
J. Chen, D. Ji, C. L. Tan and Z. Niu. Unsupervised Feature Selection for Relation
Extraction. IJCNLP 2005, Table 2, Eqs. 2-3.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.metrics.cluster import contingency_matrix

from scarce.algorithms.relations.selection import (
    derived_seed,
    full_kmeans_seed,
    kmeans_labels,
    prepare_subset,
)

SAMPLE_COLUMNS = ["k", "sample_index", "n_features", "m", "m_random"]


def _pairs(counts) -> float:
    counts = np.asarray(counts, dtype=np.float64)
    return float((counts * (counts - 1.0)).sum() / 2.0)


def together_counts(labels_sub, labels_ref) -> tuple[float, float]:
    """Pairs together in both labelings, and pairs together in ``labels_ref``.

    Both arrays label the same points.  Computed from the contingency table.
    """
    labels_sub = np.asarray(labels_sub)
    labels_ref = np.asarray(labels_ref)
    if labels_sub.shape != labels_ref.shape or labels_sub.ndim != 1:
        raise ValueError(f"labelings must be 1-D of equal length, got {labels_sub.shape} and "
                         f"{labels_ref.shape}")
    table = contingency_matrix(labels_sub, labels_ref, sparse=True)
    return _pairs(table.data), _pairs(np.asarray(table.sum(axis=0)).ravel())


def stability_index(labels_sub, labels_ref) -> float:
    """Eq. 2: share of the pairs together in ``labels_ref`` that are together in ``labels_sub``.

    Returns NaN when no pair is together in ``labels_ref``.
    """
    both, ref = together_counts(labels_sub, labels_ref)
    return both / ref if ref > 0 else float("nan")


def stability_index_naive(labels_sub, labels_ref) -> float:
    """Eq. 2 from explicit connectivity matrices (O(n^2) memory; for tests)."""
    a = np.asarray(labels_sub)
    b = np.asarray(labels_ref)
    ca = a[:, None] == a[None, :]
    cb = b[:, None] == b[None, :]
    iu = np.triu_indices(a.size, 1)
    ref = cb[iu].sum()
    return float((ca & cb)[iu].sum() / ref) if ref > 0 else float("nan")


def random_baseline(k: int) -> float:
    """E[M(R, C)] of the random predictor with k clusters: exactly ``1/k`` (module docstring)."""
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    return 1.0 / k


def subsample_indices(n: int, rho: float, seed: int, sample_index: int) -> np.ndarray:
    """Sorted indices of subsample ``sample_index``: ``round(rho * n)`` points, no replacement."""
    if not 0.0 < rho <= 1.0:
        raise ValueError(f"rho must be in (0, 1], got {rho}")
    size = max(2, int(round(rho * n)))
    if size > n:
        raise ValueError(f"cannot draw {size} of {n} points")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 1, int(sample_index)]))
    return np.sort(rng.choice(n, size=size, replace=False))


def reference_seed(seed: int, k: int, index: int) -> int:
    """Seed of reference clustering ``index`` for k: the search's seed for index 0,
    ``SeedSequence([seed, 0, k, index])`` for the others."""
    return full_kmeans_seed(seed, k) if int(index) == 0 else derived_seed(seed, 0, k, index)


def reference_labels(X, features, k: int, *, seed: int, n_init: int, row_norm: bool,
                     index: int) -> np.ndarray:
    """Reference clustering C_{index+1}: k-means of all pairs on the columns ``features``
    with ``n_init`` restarts, seed :func:`reference_seed` ``(seed, k, index)``.

    With the subset search's restarts, C_1 is the clustering the search scored.  More
    restarts (the estimator's ``n_init_reference``) make C the best of many k-means runs:
    every subsample of a given k is compared with the same C, so a poor local optimum in C
    shifts the whole M(k) and does not average out over the q subsamples.
    """
    Z = prepare_subset(X, features, row_norm=row_norm)
    return kmeans_labels(Z, k, random_state=reference_seed(seed, k, index), n_init=n_init)


def stability_one_sample(X, features, k: int, sample_index: int, references, *, seed: int,
                         rho: float, n_init: int, row_norm: bool) -> dict:
    """One unit of the stability estimate: Eq. 2 for subsample ``sample_index``.

    Parameters
    ----------
    X : sparse matrix (n_pairs, n_words)
    features : array of int
        The feature subset F (column indices).
    k : int
    sample_index : int
        mu; seeds are derived from (seed, k, mu) as in the module docstring.
    references : array of int, shape (n_pairs,) or (R, n_pairs), or a list of R labelings
        C_1..C_R, the clusterings of all pairs with (F, k) (:func:`reference_labels`); ``m``
        is the mean of Eq. 2 against each.
    seed : int
    rho : float
        Subsample fraction.
    n_init : int
        k-means restarts of the subsample clustering C^mu.
    row_norm : bool
        L2-normalise rows after selecting F (see :func:`selection.prepare_subset`).

    Returns
    -------
    dict with :data:`SAMPLE_COLUMNS`: ``k``, ``sample_index``, ``n_features``, ``m`` (Eq. 2)
    and ``m_random`` (1/k, :func:`random_baseline`).
    """
    Z = prepare_subset(X, features, row_norm=row_norm)
    refs = np.atleast_2d(np.asarray(references))
    if refs.ndim != 2 or refs.shape[1] != Z.shape[0]:
        raise ValueError(f"references have {refs.shape[-1]} items but X has {Z.shape[0]} rows")
    idx = subsample_indices(Z.shape[0], rho, seed, sample_index)
    sub = kmeans_labels(Z[idx], k, random_state=derived_seed(seed, 2, k, sample_index),
                        n_init=n_init)
    return {
        "k": int(k),
        "sample_index": int(sample_index),
        "n_features": int(len(features)),
        "m": float(np.mean([stability_index(sub, ref[idx]) for ref in refs])),
        "m_random": random_baseline(k),
    }


def summarize_stability(samples: pd.DataFrame) -> pd.DataFrame:
    """Eq. 3 per k from the rows of :func:`stability_one_sample`.

    Returns a DataFrame sorted by k with ``k``, ``n_features``, ``m_mean``, ``m_random``,
    ``m_norm`` (= m_mean - m_random), ``m_std`` (across subsamples) and ``n_samples``.
    """
    g = samples.groupby("k", sort=True)
    out = pd.DataFrame({
        "n_features": g["n_features"].first(),
        "m_mean": g["m"].mean(),
        "m_random": g["m_random"].mean(),
        "m_std": g["m"].std(ddof=0),
        "n_samples": g["m"].size(),
    }).reset_index()
    out["m_norm"] = out["m_mean"] - out["m_random"]
    return out[["k", "n_features", "m_mean", "m_random", "m_norm", "m_std", "n_samples"]]


def choose_k(curve: pd.DataFrame) -> int:
    """The chosen k from the Eq. 3 curve: the largest M_norm (the smallest such k on ties)."""
    if curve.empty or curve["m_norm"].isna().all():
        raise ValueError("the stability curve has no finite M_norm")
    best = curve["m_norm"].max()
    return int(curve.loc[curve["m_norm"] == best, "k"].min())
