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
Default (``baseline="closed_form"``): R assigns every point of P^mu independently and
uniformly to one of k clusters.  Each pair is then together in R with probability 1/k,
independently of C, so E[numerator] = denominator / k and **E[M(R, C)] = 1/k exactly**
(the denominator is fixed given C and P^mu).  ``baseline="simulated"`` draws such labelings
with seeds derived from (seed, k, mu) and averages M; its mean converges to 1/k (tested).

Seeds
-----
All randomness is derived with ``numpy.random.SeedSequence`` so each unit of work can run
anywhere (a Prefect ``.map``) and give the same numbers:

* subsample mu: ``SeedSequence([seed, 1, mu])`` - the same P^mu for every k (common random
  numbers make the comparison across k less noisy);
* k-means on P^mu: ``SeedSequence([seed, 2, k, mu])``;
* k-means on all of P (the reference C): ``SeedSequence([seed, 0, k])``, shared with the
  subset search so C is the clustering the search scored;
* simulated random predictor: ``SeedSequence([seed, 3, k, mu])``.

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

from algorithms.relations.selection import (
    derived_seed,
    full_kmeans_seed,
    kmeans_labels,
    prepare_subset,
)


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
    both = _pairs(table.data)
    ref = _pairs(np.asarray(table.sum(axis=0)).ravel())
    return both, ref


def stability_index(labels_sub, labels_ref) -> float:
    """Eq. 2: share of the pairs together in ``labels_ref`` that are together in ``labels_sub``.

    Returns NaN when no pair is together in ``labels_ref`` (every cluster a singleton).
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


def random_baseline(k: int, labels_ref=None, *, method: str = "closed_form", n_draws: int = 1,
                    seed: int = 0, sample_index: int = 0) -> float:
    """Expected Eq. 2 index of a random predictor with k clusters against ``labels_ref``.

    ``"closed_form"`` returns ``1/k`` (exact for independent uniform labels, see module
    docstring); ``"simulated"`` averages ``n_draws`` seeded uniform labelings.
    """
    k = int(k)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if method == "closed_form":
        return 1.0 / k
    if method != "simulated":
        raise ValueError(f"method must be 'closed_form' or 'simulated', got {method!r}")
    if labels_ref is None:
        raise ValueError("the simulated baseline needs labels_ref")
    labels_ref = np.asarray(labels_ref)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 3, k, int(sample_index)]))
    values = [stability_index(rng.integers(0, k, size=labels_ref.size), labels_ref)
              for _ in range(int(n_draws))]
    return float(np.mean(values))


def subsample_indices(n: int, rho: float, seed: int, sample_index: int) -> np.ndarray:
    """Sorted indices of subsample ``sample_index``: ``round(rho * n)`` points, no replacement."""
    if not 0.0 < rho <= 1.0:
        raise ValueError(f"rho must be in (0, 1], got {rho}")
    size = max(2, int(round(rho * n)))
    if size > n:
        raise ValueError(f"cannot draw {size} of {n} points")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 1, int(sample_index)]))
    return np.sort(rng.choice(n, size=size, replace=False))


def stability_one_sample(
    X,
    features,
    k: int,
    sample_index: int,
    *,
    seed: int = 0,
    rho: float = 0.9,
    n_init: int = 3,
    row_norm: bool = True,
    full_labels=None,
    baseline: str = "closed_form",
    n_baseline_draws: int = 1,
) -> dict:
    """One unit of the stability estimate: Eq. 2 for subsample ``sample_index``.

    Parameters
    ----------
    X : sparse matrix (n_pairs, n_words)
    features : array of int
        The feature subset F (column indices).
    k : int
    sample_index : int
        mu; seeds are derived from (seed, k, mu) as in the module docstring.
    seed : int, default 0
    rho : float, default 0.9
        Subsample fraction.
    n_init : int, default 3
        k-means restarts.
    row_norm : bool, default True
        L2-normalise rows after selecting F (see :func:`selection.prepare_subset`).
    full_labels : array of int, optional
        C, the clustering of all pairs with (F, k); computed with the shared seed if omitted.
    baseline : {"closed_form", "simulated"}
    n_baseline_draws : int, default 1

    Returns
    -------
    dict with ``k``, ``sample_index``, ``n_features``, ``m`` (Eq. 2) and ``m_random``.
    """
    Z = prepare_subset(X, features, row_norm=row_norm)
    if full_labels is None:
        full_labels = kmeans_labels(Z, k, random_state=full_kmeans_seed(seed, k), n_init=n_init)
    full_labels = np.asarray(full_labels)
    if full_labels.shape[0] != Z.shape[0]:
        raise ValueError(f"full_labels has {full_labels.shape[0]} items but X has "
                         f"{Z.shape[0]} rows")
    idx = subsample_indices(Z.shape[0], rho, seed, sample_index)
    sub = kmeans_labels(Z[idx], k, random_state=derived_seed(seed, 2, k, sample_index),
                        n_init=n_init)
    ref = full_labels[idx]
    return {
        "k": int(k),
        "sample_index": int(sample_index),
        "n_features": int(len(features)),
        "m": stability_index(sub, ref),
        "m_random": random_baseline(k, ref, method=baseline, n_draws=n_baseline_draws,
                                    seed=seed, sample_index=sample_index),
    }


def summarize_stability(samples: pd.DataFrame) -> pd.DataFrame:
    """Eq. 3 per k from the rows of :func:`stability_one_sample`.

    Returns a DataFrame sorted by k with ``k``, ``n_features``, ``m_mean``, ``m_random``,
    ``m_norm`` (= m_mean - m_random) and ``m_std`` (across subsamples).
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
    """The k with the largest M_norm (the smallest such k on ties)."""
    if curve.empty or curve["m_norm"].isna().all():
        raise ValueError("the stability curve has no finite M_norm")
    best = curve["m_norm"].max()
    return int(curve.loc[curve["m_norm"] == best, "k"].min())


def stability_curve(X, subsets: dict, *, n_samples: int = 10, seed: int = 0, rho: float = 0.9,
                    n_init: int = 3, row_norm: bool = True, full_labels: dict | None = None,
                    baseline: str = "closed_form", n_baseline_draws: int = 1
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Driver: every (k, mu) unit in a loop, then Eq. 3.

    Parameters
    ----------
    subsets : dict
        k -> feature indices F_k.
    full_labels : dict, optional
        k -> clustering of all pairs with F_k (reused from the subset search).

    Returns
    -------
    samples : DataFrame, one row per (k, mu)
    curve : DataFrame, one row per k (see :func:`summarize_stability`)
    """
    rows = []
    for k in sorted(subsets):
        fl = None if full_labels is None else full_labels.get(k)
        for mu in range(int(n_samples)):
            rows.append(stability_one_sample(
                X, subsets[k], k, mu, seed=seed, rho=rho, n_init=n_init, row_norm=row_norm,
                full_labels=fl, baseline=baseline, n_baseline_draws=n_baseline_draws))
    samples = pd.DataFrame(rows)
    return samples, summarize_stability(samples)
