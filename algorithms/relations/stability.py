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

Pairs of identical points (``pairs="distinct"``, a deviation; default ``"all"``)
-------------------------------------------------------------------------------
With few selected words many pairs share the same vector (on SemEval 0-10-0, the 46 top
entropy words give under 2,000 distinct vectors for 8,853 pairs, and the 807 pairs with none of the
words all sit at the origin).  k-means puts identical points in the same cluster in every
run, so their pairs count as "together in C and in C^mu" whatever k is: they add a constant,
perfectly stable block to Eq. 2 that grows with the size of the repeated groups and says
nothing about whether the partition is reproducible.  ``pairs="distinct"`` counts Eq. 2 over
the pairs i<j of P^mu whose vectors differ (after selecting F and normalising), i.e.
``(sum_ab C(n_ab,2) - sum_abg C(n_abg,2)) / (sum_b C(n_b,2) - sum_bg C(n_bg,2))`` with g the
group of identical vectors (exact from contingency tables, no assumption that k-means keeps
ties together).  The random predictor is unchanged: for any fixed set of pairs, independent
uniform labels put each pair together with probability 1/k, so E[M(R, C)] = 1/k still.  Levine
and Domany (2001) define the figure of merit over pairs of distinct data points; repeated
points are an artefact of the sparse selected contexts, which is the justification.

Several reference clusterings (``n_references`` R, a variance reduction; default 1)
-----------------------------------------------------------------------------------
Every subsample of a given k is compared with the same C, so C's luck is not averaged out
by the q subsamples: k-means on SemEval contexts has many local optima of nearly equal
inertia, and on 0-10-0 (entropy ranking, ridge 0.1, q = 20, seeds 0, 1, 4) the M_norm of
one k moves by a standard deviation of 0.01 to 0.08 (mostly 0.03 to 0.05) from one
reference clustering (best of 10 restarts, own seed) to another, against a standard error
of about 0.02 from the subsamples and differences of 0.01 to 0.05 between the best k.
Eq. 3 then picks whichever k had the luckiest C.  With R > 1, C_1..C_R are k-means runs
of all pairs with their own seeds (C_1 is the search's) and M(C^mu) is the mean of Eq. 2
against each: Monte Carlo over the algorithm's randomness on the full set, as the q
subsamples are over the data.  R = 1 is the paper.  The final clustering at the chosen k
is C_1.  The cost is R reference runs per k; R references of n restarts cost what one
reference of R * n restarts does.

Restarts of the subsample clusterings (``n_init`` / the model's ``n_init_subsample``)
---------------------------------------------------------------------------------
Eq. 2 measures how reproducible the clustering *algorithm's output* is.  With 3 k-means
restarts per subsample, C^mu lands in a different local optimum from one subsample to the
next: on SemEval 0-10-0 with all 1,880 words, M of one subsample has a standard deviation
of 0.10 to 0.12 around its k's mean, and even R = 20 references of 10 restarts and q = 60
subsamples leave a curve flat to within 0.02 over k = 6 to 10, whose maximum moves from
seed to seed (6, 6, 7, 8, 9).  With 20 restarts per subsample and R = 5 references of 30
(q = 20), that standard deviation drops to 0.03 to 0.08, the references agree with one
another (standard deviation 0.003 to 0.007 on four seeds of five) and the curve peaks at
k = 6 on four seeds (margins 0.02 to 0.06 over the next k; the fifth seed peaks at 5).
Restarts are cheap here (one k-means run on 8,853 x 1,880 takes 0.02 to 0.04 s).  These
figures are from one exploration (2026-11-30, a script calling this module's functions on
the five seeds, not a project command); the benchmark with the method's own subset search
is in the README.

Reading k off the curve (``rule``)
----------------------------------
``"max"`` (the paper) takes the largest M_norm.  ``"one_se"`` (a deviation, off by default)
takes the smallest k within one standard error (over the q subsamples) of the maximum: on
SemEval the curve is a plateau from k of about 6 to 20 whose differences are of the order
of that standard error.

Random predictor
----------------
Default (``baseline="closed_form"``): R assigns every point of P^mu independently and
uniformly to one of k clusters.  Each pair is then together in R with probability 1/k,
independently of C, so E[numerator] = denominator / k and **E[M(R, C)] = 1/k exactly**
(the denominator is fixed given C and P^mu).  ``baseline="simulated"`` draws such labelings
with seeds derived from (seed, k, mu) and averages M; its mean converges to 1/k (tested).

Null-data baseline (``baseline="null_permuted"``, a deviation; Dudoit and Fridlyand, 2002)
----------------------------------------------------------------------------------------
The 1/k of the random predictor does not depend on the data's shape.  With few selected
words the matrix X_F is sparse and has few distinct rows, so large k can look stable on any
data of that shape, and a flat M(k) minus a falling 1/k rises with k.  Clest (Dudoit and
Fridlyand, 2002) and the gap statistic (Tibshirani, Walther and Hastie, 2001) compare
instead with null data of the same shape: here B = ``n_null`` datasets X_F^(b), each
column (word) of X[:, F_k] permuted over the pairs independently (:func:`null_dataset`;
every word keeps its multiset of values, hence its frequency, the co-occurrence of words
is destroyed).  Each null dataset goes through the same scheme as the data: R reference
clusterings of all pairs (the same restarts), the same subsamples P^mu clustered with the
same restarts, Eq. 2 averaged over the references; ``m_random`` is then the mean over the
B null datasets of that Eq. 2 index, and Eq. 3's score is observed M minus null M.  The
cost of the stability step is multiplied by 1 + B.

Seeds
-----
All randomness is derived with ``numpy.random.SeedSequence`` so each unit of work can run
anywhere (a Prefect ``.map``) and give the same numbers:

* subsample mu: ``SeedSequence([seed, 1, mu])`` - the same P^mu for every k (common random
  numbers make the comparison across k less noisy);
* k-means on P^mu: ``SeedSequence([seed, 2, k, mu])`` (``n_init`` restarts, the model's
  ``n_init_subsample``);
* k-means on all of P (the reference C): ``SeedSequence([seed, 0, k])``, shared with the
  subset search so C is the clustering the search scored (unless ``n_init_reference`` gives
  C more restarts than the search used: then C is the best of those restarts, same seed);
  further references C_2..C_R: ``SeedSequence([seed, 0, k, r])``;
* simulated random predictor: ``SeedSequence([seed, 3, k, mu])``;
* null dataset b (``null_permuted``): column permutations from ``SeedSequence([seed, 4, k, b])``;
  its reference clustering r: ``SeedSequence([seed, 5, k, b, r])``; its clustering of
  P^mu: ``SeedSequence([seed, 6, k, b, mu])``.

References
----------
S. Dudoit and J. Fridlyand. A prediction-based resampling method for estimating the
number of clusters in a dataset. Genome Biology 3(7) (2002) (Clest).
R. Tibshirani, G. Walther and T. Hastie. Estimating the number of clusters in a data set
via the gap statistic. J. R. Statist. Soc. B 63(2) (2001).
E. Levine and E. Domany. Resampling method for unsupervised estimation of cluster
validity. Neural Computation 13 (2001).
T. Lange, M. Braun, V. Roth and J. M. Buhmann. Stability-based model selection. NIPS 2002.
J. Chen, D. Ji, C. L. Tan and Z. Niu. Unsupervised Feature Selection for Relation
Extraction. IJCNLP 2005, Table 2, Eqs. 2-3.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp
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


def _cell_pairs(*labelings) -> float:
    """Pairs of points in the same cell of the joint table of ``labelings``."""
    codes = np.stack([np.asarray(lab) for lab in labelings], axis=1)
    _, counts = np.unique(codes, axis=0, return_counts=True)
    return _pairs(counts)


def identical_groups(Z) -> np.ndarray:
    """Group id per row of Z: rows with exactly the same vector share an id (0, 1, ...).

    Ids follow the first occurrence of each vector.
    """
    Z = sp.csr_matrix(Z, copy=True)
    Z.sum_duplicates()
    Z.eliminate_zeros()
    Z.sort_indices()
    seen: dict[tuple[bytes, bytes], int] = {}
    out = np.empty(Z.shape[0], dtype=np.int64)
    for i in range(Z.shape[0]):
        lo, hi = Z.indptr[i], Z.indptr[i + 1]
        key = (Z.indices[lo:hi].astype(np.int64).tobytes(),
               Z.data[lo:hi].astype(np.float64).tobytes())
        out[i] = seen.setdefault(key, len(seen))
    return out


def together_counts(labels_sub, labels_ref, groups=None) -> tuple[float, float]:
    """Pairs together in both labelings, and pairs together in ``labels_ref``.

    Both arrays label the same points.  Computed from the contingency table.  With
    ``groups`` (e.g. :func:`identical_groups`), pairs of points in the same group are left
    out of both counts (``pairs="distinct"``, see the module docstring).
    """
    labels_sub = np.asarray(labels_sub)
    labels_ref = np.asarray(labels_ref)
    if labels_sub.shape != labels_ref.shape or labels_sub.ndim != 1:
        raise ValueError(f"labelings must be 1-D of equal length, got {labels_sub.shape} and "
                         f"{labels_ref.shape}")
    table = contingency_matrix(labels_sub, labels_ref, sparse=True)
    both = _pairs(table.data)
    ref = _pairs(np.asarray(table.sum(axis=0)).ravel())
    if groups is not None:
        groups = np.asarray(groups)
        if groups.shape != labels_ref.shape:
            raise ValueError(f"groups has shape {groups.shape} but the labelings have "
                             f"{labels_ref.shape}")
        both -= _cell_pairs(labels_sub, labels_ref, groups)
        ref -= _cell_pairs(labels_ref, groups)
    return both, ref


def stability_index(labels_sub, labels_ref, groups=None) -> float:
    """Eq. 2: share of the pairs together in ``labels_ref`` that are together in ``labels_sub``.

    ``groups``: leave out pairs within a group (pairs of identical points).  Returns NaN
    when no (counted) pair is together in ``labels_ref``.
    """
    both, ref = together_counts(labels_sub, labels_ref, groups)
    return both / ref if ref > 0 else float("nan")


def stability_index_naive(labels_sub, labels_ref, groups=None) -> float:
    """Eq. 2 from explicit connectivity matrices (O(n^2) memory; for tests)."""
    a = np.asarray(labels_sub)
    b = np.asarray(labels_ref)
    ca = a[:, None] == a[None, :]
    cb = b[:, None] == b[None, :]
    if groups is not None:
        g = np.asarray(groups)
        keep = g[:, None] != g[None, :]
        ca, cb = ca & keep, cb & keep
    iu = np.triu_indices(a.size, 1)
    ref = cb[iu].sum()
    return float((ca & cb)[iu].sum() / ref) if ref > 0 else float("nan")


def random_baseline(k: int, labels_ref=None, *, method: str = "closed_form", n_draws: int = 1,
                    seed: int = 0, sample_index: int = 0, groups=None) -> float:
    """Expected Eq. 2 index of a random predictor with k clusters against ``labels_ref``.

    ``"closed_form"`` returns ``1/k`` (exact for independent uniform labels, see module
    docstring; also for ``groups``, which only removes pairs); ``"simulated"`` averages
    ``n_draws`` seeded uniform labelings, counting the pairs as :func:`stability_index` does.
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
    values = [stability_index(rng.integers(0, k, size=labels_ref.size), labels_ref, groups)
              for _ in range(int(n_draws))]
    return float(np.mean(values))


BASELINES = ("closed_form", "simulated", "null_permuted")


def null_dataset(X, features, seed: int, k: int, null_index: int) -> sp.csr_matrix:
    """Null dataset ``null_index`` (b) for k: ``X[:, features]`` with every column permuted
    over the rows independently, permutations from ``SeedSequence([seed, 4, k, b])``.

    Column j of the result is column ``features[j]`` of X with its entries moved from row i
    to row ``perm_j[i]`` (a uniform permutation of the whole column, zeros included): every
    column keeps its multiset of values, the rows' co-occurrences are destroyed.  Returns an
    (n_rows, len(features)) CSR matrix (not row-normalised).
    """
    Xf = sp.csc_matrix(prepare_subset(X, features, row_norm=False))
    Xf.sum_duplicates()
    n = Xf.shape[0]
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 4, int(k), int(null_index)]))
    indices = np.empty_like(Xf.indices)
    for j in range(Xf.shape[1]):
        lo, hi = Xf.indptr[j], Xf.indptr[j + 1]
        indices[lo:hi] = rng.permutation(n)[Xf.indices[lo:hi]]
    out = sp.csc_matrix((Xf.data.copy(), indices, Xf.indptr.copy()), shape=Xf.shape)
    out = out.tocsr()
    out.sort_indices()
    return out


def _null_points(X, features, seed: int, k: int, null_index: int, row_norm: bool):
    """Null dataset b for k prepared for clustering (row-normalised like the data)."""
    N = null_dataset(X, features, seed, k, null_index)
    return prepare_subset(N, np.arange(N.shape[1]), row_norm=row_norm)


def null_reference_labels(X, features, k: int, null_index: int, *, seed: int = 0,
                          n_init: int = 3, row_norm: bool = True, index: int = 0,
                          points=None) -> np.ndarray:
    """Reference clustering ``index`` (r) of null dataset ``null_index`` (b) for k: k-means
    of all its rows, seed ``SeedSequence([seed, 5, k, b, r])``, ``n_init`` restarts
    (``points``: the prepared null dataset, if already built)."""
    Z = _null_points(X, features, seed, k, null_index, row_norm) if points is None else points
    return kmeans_labels(Z, k, random_state=derived_seed(seed, 5, k, null_index, index),
                         n_init=n_init)


def null_points(X, features, k: int, *, n_null: int, seed: int = 0,
                row_norm: bool = True) -> list:
    """The ``n_null`` null datasets for k, prepared for clustering (b = 0, 1, ...)."""
    return [_null_points(X, features, seed, k, b, row_norm) for b in range(int(n_null))]


def null_references(X, features, k: int, *, n_null: int, n_references: int = 1, seed: int = 0,
                    n_init: int = 3, row_norm: bool = True, points=None) -> np.ndarray:
    """All reference clusterings of the null datasets for k: shape (n_null, R, n_rows)
    (``points``: the datasets from :func:`null_points`, if already built)."""
    if points is None:
        points = null_points(X, features, k, n_null=n_null, seed=seed, row_norm=row_norm)
    return np.stack([
        np.stack([null_reference_labels(X, features, k, b, seed=seed, n_init=n_init,
                                        index=r, points=Zb)
                  for r in range(int(n_references))])
        for b, Zb in enumerate(points)])


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
    pairs: str = "all",
    n_null: int = 1,
    null_labels=None,
    null_data=None,
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
        A 2-D array (or a list) of R labelings gives R reference clusterings C_1..C_R: ``m``
        is then the mean of Eq. 2 against each (``n_references``, see the module docstring).
    baseline : {"closed_form", "simulated", "null_permuted"}
        ``m_random``: 1/k (the paper), simulated uniform labelings, or the mean Eq. 2 index
        of the same scheme on ``n_null`` column-permuted null datasets (a deviation, see the
        module docstring).
    n_baseline_draws : int, default 1
    pairs : {"all", "distinct"}, default "all"
        ``"all"``: Eq. 2 over every pair of P^mu (the paper); ``"distinct"``: only pairs whose
        vectors (after selecting F) differ (a deviation, see the module docstring).
    n_null : int, default 1
        B, null datasets (``baseline="null_permuted"`` only).
    null_labels : array, optional
        Reference clusterings of the null datasets, shape (B, R, n_rows) as returned by
        :func:`null_references`; computed here (with ``n_init`` restarts and R = the number
        of references in ``full_labels``) if omitted.  Pass them to share them across mu.
    null_data : list, optional
        The null datasets from :func:`null_points`; built here if omitted.  Pass them to
        share them across mu.

    Returns
    -------
    dict with ``k``, ``sample_index``, ``n_features``, ``m`` (Eq. 2) and ``m_random``.
    """
    if pairs not in ("all", "distinct"):
        raise ValueError(f"pairs must be 'all' or 'distinct', got {pairs!r}")
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")
    Z = prepare_subset(X, features, row_norm=row_norm)
    if full_labels is None:
        full_labels = kmeans_labels(Z, k, random_state=full_kmeans_seed(seed, k), n_init=n_init)
    refs = np.atleast_2d(np.asarray(full_labels))
    if refs.ndim != 2 or refs.shape[1] != Z.shape[0]:
        raise ValueError(f"full_labels has {refs.shape[-1]} items but X has {Z.shape[0]} rows")
    idx = subsample_indices(Z.shape[0], rho, seed, sample_index)
    sub = kmeans_labels(Z[idx], k, random_state=derived_seed(seed, 2, k, sample_index),
                        n_init=n_init)
    groups = identical_groups(Z[idx]) if pairs == "distinct" else None
    m = [stability_index(sub, ref[idx], groups) for ref in refs]
    if baseline == "null_permuted":
        m_random = _null_sample(X, features, k, sample_index, idx, refs.shape[0], seed=seed,
                                n_init=n_init, row_norm=row_norm, pairs=pairs, n_null=n_null,
                                null_labels=null_labels, null_data=null_data)
    else:
        m_random = [random_baseline(k, ref[idx], method=baseline, n_draws=n_baseline_draws,
                                    seed=seed, sample_index=sample_index, groups=groups)
                    for ref in refs]
    return {
        "k": int(k),
        "sample_index": int(sample_index),
        "n_features": int(len(features)),
        "m": float(np.mean(m)),
        "m_random": float(np.mean(m_random)),
    }


def _null_sample(X, features, k, sample_index, idx, n_refs, *, seed, n_init, row_norm, pairs,
                 n_null, null_labels, null_data) -> list[float]:
    """Eq. 2 on subsample mu (rows ``idx``) of every null dataset, averaged over its
    references: one value per null dataset."""
    n_null = int(n_null)
    if n_null < 1:
        raise ValueError(f"n_null must be at least 1, got {n_null}")
    if null_labels is not None:
        null_labels = np.asarray(null_labels)
        if null_labels.ndim == 2:
            null_labels = null_labels[:, None, :]
        if null_labels.ndim != 3 or null_labels.shape[0] != n_null:
            raise ValueError(f"null_labels must have shape (n_null={n_null}, R, n_rows), got "
                             f"{null_labels.shape}")
    if null_data is None:
        null_data = null_points(X, features, k, n_null=n_null, seed=seed, row_norm=row_norm)
    elif len(null_data) != n_null:
        raise ValueError(f"null_data holds {len(null_data)} datasets, n_null is {n_null}")
    values = []
    for b, Zb in enumerate(null_data):
        if null_labels is None:
            refs_b = np.stack([null_reference_labels(X, features, k, b, seed=seed,
                                                     n_init=n_init, index=r, points=Zb)
                               for r in range(int(n_refs))])
        else:
            refs_b = null_labels[b]
        if refs_b.shape[1] != Zb.shape[0]:
            raise ValueError(f"null_labels has {refs_b.shape[1]} items but X has "
                             f"{Zb.shape[0]} rows")
        sub = kmeans_labels(Zb[idx], k, random_state=derived_seed(seed, 6, k, b, sample_index),
                            n_init=n_init)
        groups = identical_groups(Zb[idx]) if pairs == "distinct" else None
        values.append(float(np.mean([stability_index(sub, ref[idx], groups) for ref in refs_b])))
    return values


def reference_seed(seed: int, k: int, index: int = 0) -> int:
    """Seed of reference clustering ``index`` for k: the search's seed for index 0,
    ``SeedSequence([seed, 0, k, index])`` for the others."""
    return full_kmeans_seed(seed, k) if int(index) == 0 else derived_seed(seed, 0, k, index)


def reference_labels(X, features, k: int, *, seed: int = 0, n_init: int = 3,
                     row_norm: bool = True, index: int = 0) -> np.ndarray:
    """C: k-means of all pairs with the columns ``features``, seed ``full_kmeans_seed(seed, k)``
    (:func:`reference_seed` ``(seed, k, index)`` for the further references C_2..C_R).

    With the subset search's ``n_init`` this is the clustering the search scored.  More
    restarts here (``n_init_reference`` of :func:`stability_curve` and of the model) make C
    the best of many k-means runs: every subsample of a given k is compared with the same C,
    so a poor local optimum in C shifts the whole M(k) and does not average out over the q
    subsamples (measured: see the README).
    """
    Z = prepare_subset(X, features, row_norm=row_norm)
    return kmeans_labels(Z, k, random_state=reference_seed(seed, k, index), n_init=n_init)


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


K_RULES = ("max", "one_se")


def choose_k(curve: pd.DataFrame, rule: str = "max") -> int:
    """The chosen k from the Eq. 3 curve.

    ``"max"`` (the paper): the k with the largest M_norm (the smallest such k on ties).
    ``"one_se"`` (a deviation, off by default): the smallest k whose M_norm is at least
    ``max - se``, with ``se = m_std / sqrt(n_samples)`` the standard error of the mean over
    the q subsamples at the maximising k (the one-standard-error rule of Breiman et al.'s
    CART and of Tibshirani et al.'s gap statistic): when the curve is a plateau whose
    differences are within the subsample noise, the simplest model on the plateau.
    """
    if rule not in K_RULES:
        raise ValueError(f"rule must be one of {K_RULES}, got {rule!r}")
    if curve.empty or curve["m_norm"].isna().all():
        raise ValueError("the stability curve has no finite M_norm")
    best = curve["m_norm"].max()
    k_best = int(curve.loc[curve["m_norm"] == best, "k"].min())
    if rule == "max":
        return k_best
    row = curve[curve["k"] == k_best].iloc[0]
    se = float(row["m_std"]) / np.sqrt(max(float(row["n_samples"]), 1.0))
    se = 0.0 if not np.isfinite(se) else se
    return int(curve.loc[curve["m_norm"] >= best - se, "k"].min())


def stability_curve(X, subsets: dict, *, n_samples: int = 10, seed: int = 0, rho: float = 0.9,
                    n_init: int = 3, row_norm: bool = True, full_labels: dict | None = None,
                    baseline: str = "closed_form", n_baseline_draws: int = 1,
                    pairs: str = "all", n_init_reference: int | None = None,
                    n_references: int = 1, n_null: int = 1
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Driver: every (k, mu) unit in a loop, then Eq. 3.

    Parameters
    ----------
    subsets : dict
        k -> feature indices F_k.
    full_labels : dict, optional
        k -> clustering of all pairs with F_k (reused from the subset search).  Missing
        entries are computed once per k with the shared seed and ``n_init_reference``
        restarts (default ``n_init``).
    n_init_reference : int, optional
        k-means restarts for the reference clustering C only (see :func:`reference_labels`).
    n_references : int, default 1
        R, reference clusterings per k (seeds :func:`reference_seed`); Eq. 2 is averaged
        over them.  Only used for the k missing from ``full_labels``.
    baseline : {"closed_form", "simulated", "null_permuted"}
        With ``"null_permuted"`` the ``n_null`` null datasets of each k and their references
        are built once (:func:`null_points`; :func:`null_references`, ``n_init_reference``
        restarts, as many as the data's references) and shared by the subsamples.

    Returns
    -------
    samples : DataFrame, one row per (k, mu)
    curve : DataFrame, one row per k (see :func:`summarize_stability`)
    """
    rows = []
    n_init_ref = n_init if n_init_reference is None else n_init_reference
    for k in sorted(subsets):
        fl = None if full_labels is None else full_labels.get(k)
        if fl is None:
            fl = np.stack([
                reference_labels(X, subsets[k], k, seed=seed, row_norm=row_norm, index=r,
                                 n_init=n_init_ref)
                for r in range(int(n_references))])
        null_data = null_fl = None
        if baseline == "null_permuted":  # built once per k, shared by the subsamples
            null_data = null_points(X, subsets[k], k, n_null=n_null, seed=seed,
                                    row_norm=row_norm)
            null_fl = null_references(
                X, subsets[k], k, n_null=n_null, n_references=np.atleast_2d(fl).shape[0],
                seed=seed, n_init=n_init_ref, points=null_data)
        for mu in range(int(n_samples)):
            rows.append(stability_one_sample(
                X, subsets[k], k, mu, seed=seed, rho=rho, n_init=n_init, row_norm=row_norm,
                full_labels=fl, baseline=baseline, n_baseline_draws=n_baseline_draws,
                pairs=pairs, n_null=n_null, null_labels=null_fl, null_data=null_data))
    samples = pd.DataFrame(rows)
    return samples, summarize_stability(samples)
