"""The full method of Chen et al. (2005) as one scikit-learn-style estimator.

ranking (entropy, Sec. 2.1) -> subset search per k (invariant criterion under the coverage
constraint, Sec. 2.2 / Table 1) -> stability over k (Table 2, Eqs. 2-3) -> final k-means at
the chosen (k, F_k) -> DCM labels per cluster (Sec. 2.4).

The Prefect flow runs the same steps through the unit functions
(:func:`selection.score_candidate`, :func:`stability.stability_one_sample`); this
estimator is the single-process loop over them and gives the same numbers for the same
``random_state``.
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils import check_random_state

from algorithms.relations.baselines import frequency_ranking
from algorithms.relations.dcm import top_words
from algorithms.relations.entropy import entropy_ranking
from algorithms.relations.selection import (
    SUBSET_RULES,
    best_subsets,
    best_subsets_cross_projection,
    full_kmeans_seed,
    kmeans_labels,
    prefix_sizes,
    prepare_subset,
    search_subsets,
)
from algorithms.relations.stability import choose_k, stability_curve


def int_seed(random_state) -> int:
    """An int seed from ``random_state`` (int kept as is; RandomState/None draw one)."""
    if isinstance(random_state, int | np.integer) and not isinstance(random_state, bool):
        return int(random_state)
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


class RelationDiscovery(ClusterMixin, BaseEstimator):
    """Unsupervised relation discovery with feature selection and model order selection.

    Parameters
    ----------
    k_min, k_max : int, default 2, 20
        The range [K_low, K_high] of cluster numbers.
    ranking : {"entropy", "frequency"} or array of int, default "entropy"
        How to rank the words; an array is used as the ranking (e.g. a chi^2 ranking from
        :func:`baselines.chi2_ranking`).
    theta : float, default 0.9
        Coverage threshold.
    step : int, optional
        Prefix step; default ``n_steps`` geometric prefix lengths (:func:`prefix_sizes`).
    n_steps : int, default 12
    min_prefix : int, default 10
    n_subsamples : int, default 10
        q, subsamples per k.
    rho : float, default 0.9
        Subsample fraction.
    n_init : int, default 3
        k-means restarts.
    row_norm : bool, default True
        L2-normalise rows after selecting the features.
    reg : float, default 1e-3
        Relative ridge of P_W in the invariant criterion.
    entropy_binary : bool, default True
        Rank on the binarised matrix (exact Hamming-histogram algorithm); False ranks the
        real values (needs ``entropy_samples`` for large N).
    entropy_alpha : {"exact", "fixed"}, default "exact"
    entropy_importance : {"change", "removed"}, default "change"
        Rank by ``|E_{-w} - E|`` or by ``E_{-w}`` (see :mod:`algorithms.relations.entropy`).
    entropy_samples : int, optional
        Rank on a seeded subsample of this many pairs.
    baseline : {"closed_form", "simulated", "null_permuted"}, default "closed_form"
        What Eq. 3 subtracts: the random predictor's 1/k (the paper), its simulation, or the
        mean Eq. 2 index of the same scheme on ``n_null`` null datasets whose columns are
        permuted independently (Dudoit and Fridlyand's Clest, a deviation;
        :mod:`algorithms.relations.stability`).
    n_null : int, default 5
        B, null datasets per k with ``baseline="null_permuted"``.
    stability_pairs : {"all", "distinct"}, default "all"
        Pairs counted by Eq. 2: all (the paper) or only pairs with different vectors (a
        deviation; :mod:`algorithms.relations.stability`).
    n_init_reference : int, optional
        k-means restarts of the reference clustering C of each k in the stability step and of
        the final clustering; default ``n_init`` (C is then the clustering the subset search
        scored).  The subset search keeps ``n_init``.
    n_init_subsample : int, optional
        k-means restarts of the subsample clusterings C^mu; default ``n_init``.  Setting it
        to ``n_init_reference`` clusters P and every P^mu with the same algorithm.
    n_references : int, default 1
        R, reference clusterings C_1..C_R per k (each with ``n_init_reference`` restarts and
        its own seed); Eq. 2 is averaged over them (1: the paper's single C).  The final
        clustering is C_1.
    k_rule : {"max", "one_se"}, default "max"
        How k is read off the Eq. 3 curve (:func:`stability.choose_k`): its maximum (the
        paper) or the one-standard-error rule (a deviation).
    subset_rule : {"max", "cross_projection"}, default "max"
        How F_k is chosen among the feasible prefixes: the largest invariant criterion (the
        paper) or Dy and Brodley's cross-projection comparison, which removes the
        criterion's bias towards more features (a deviation; :mod:`selection`).
    n_label_words : int, default 2
        DCM words reported per cluster.
    random_state : int, RandomState or None, default 0

    Attributes
    ----------
    ranking_ : ndarray of int
        Word indices, most important first.
    ranking_scores_ : ndarray or None
        ``E_{-w}`` per word for the entropy ranking.
    search_ : DataFrame
        Every (k, prefix) tried: ``k``, ``n_features``, ``coverage``, ``feasible``, ``criterion``.
    subsets_ : dict
        k -> F_k prefix length.
    subset_comparisons_ : DataFrame or None
        With ``subset_rule="cross_projection"``: every comparison of two prefixes
        (:func:`selection.best_subsets_cross_projection`).
    stability_ : DataFrame
        Per k: ``k``, ``n_features``, ``m_mean``, ``m_random`` (1/k, or the null data's mean
        M), ``m_norm`` (the score), ``m_std``.
    stability_samples_ : DataFrame
        Per (k, subsample): ``m`` and ``m_random``.
    n_clusters_ : int
        The chosen k.
    selected_features_ : ndarray of int
        F for the chosen k (column indices).
    labels_ : ndarray of int
    cluster_labels_ : dict
        Cluster -> list of (word, DCM weight), ``n_label_words`` per cluster, over all words.
    timings_ : dict
        Seconds spent in ``ranking``, ``search``, ``stability``, ``final``.
    """

    def __init__(self, k_min=2, k_max=20, ranking="entropy", theta=0.9, step=None, n_steps=12,
                 min_prefix=10, n_subsamples=10, rho=0.9, n_init=3, row_norm=True, reg=1e-3,
                 entropy_binary=True, entropy_alpha="exact", entropy_importance="change",
                 entropy_samples=None,
                 baseline="closed_form", stability_pairs="all", n_init_reference=None,
                 n_init_subsample=None, n_references=1, k_rule="max", subset_rule="max",
                 n_null=5, n_label_words=2, random_state=0):
        self.k_min = k_min
        self.k_max = k_max
        self.ranking = ranking
        self.theta = theta
        self.step = step
        self.n_steps = n_steps
        self.min_prefix = min_prefix
        self.n_subsamples = n_subsamples
        self.rho = rho
        self.n_init = n_init
        self.row_norm = row_norm
        self.reg = reg
        self.entropy_binary = entropy_binary
        self.entropy_alpha = entropy_alpha
        self.entropy_importance = entropy_importance
        self.entropy_samples = entropy_samples
        self.baseline = baseline
        self.stability_pairs = stability_pairs
        self.n_init_reference = n_init_reference
        self.n_init_subsample = n_init_subsample
        self.n_references = n_references
        self.k_rule = k_rule
        self.subset_rule = subset_rule
        self.n_null = n_null
        self.n_label_words = n_label_words
        self.random_state = random_state

    def _rank(self, X, seed):
        if isinstance(self.ranking, str):
            if self.ranking == "entropy":
                return entropy_ranking(X, binary=bool(self.entropy_binary),
                                       alpha=self.entropy_alpha, importance=self.entropy_importance,
                                       n_samples=self.entropy_samples,
                                       random_state=seed)
            if self.ranking == "frequency":
                return frequency_ranking(X), None
            raise ValueError(f"ranking must be 'entropy', 'frequency' or an array of column "
                             f"indices, got {self.ranking!r}")
        ranking = np.asarray(self.ranking, dtype=np.intp)
        if ranking.ndim != 1 or np.unique(ranking).size != ranking.size or (
                ranking.size and (ranking.min() < 0 or ranking.max() >= X.shape[1])):
            raise ValueError(f"ranking must be distinct column indices in [0, {X.shape[1]})")
        return ranking, None

    def fit(self, X, y=None, feature_names=None):
        """Run the method on the context matrix ``X`` (n_pairs, n_words); ``y`` is ignored."""
        X = sp.csr_matrix(X)
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        n, m = X.shape
        k_min, k_max = int(self.k_min), int(self.k_max)
        if not 1 <= k_min <= k_max < n:
            raise ValueError(f"need 1 <= k_min <= k_max < n_pairs, got k_min={k_min}, "
                             f"k_max={k_max}, n_pairs={n}")
        if not 0.0 <= float(self.theta) <= 1.0:
            raise ValueError(f"theta must be in [0, 1], got {self.theta}")
        if feature_names is None:
            feature_names = np.array([str(j) for j in range(m)], dtype=object)
        feature_names = np.asarray(feature_names, dtype=object)
        if feature_names.shape != (m,):
            raise ValueError(f"feature_names has {feature_names.size} names but X has {m} columns")
        if self.subset_rule not in SUBSET_RULES:
            raise ValueError(f"subset_rule must be one of {SUBSET_RULES}, got "
                             f"{self.subset_rule!r}")
        seed = int_seed(self.random_state)
        timings = {}

        t0 = time.perf_counter()
        self.ranking_, self.ranking_scores_ = self._rank(X, seed)
        timings["ranking"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        sizes = prefix_sizes(self.ranking_.size, step=self.step, n_steps=self.n_steps,
                             min_size=self.min_prefix)
        k_values = list(range(k_min, k_max + 1))
        cross = self.subset_rule == "cross_projection"
        found = search_subsets(X, self.ranking_, k_values, sizes=sizes, theta=self.theta,
                               seed=seed, n_init=self.n_init, row_norm=self.row_norm,
                               reg=self.reg, return_labels=cross)
        if cross:
            self.search_, labels = found
            self.subsets_, self.subset_comparisons_ = best_subsets_cross_projection(
                X, self.ranking_, self.search_, labels, reg=self.reg, row_norm=self.row_norm)
        else:
            self.search_, self.subset_comparisons_ = found, None
            self.subsets_ = best_subsets(self.search_)
        timings["search"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        subsets = {k: self.ranking_[:s] for k, s in self.subsets_.items()}
        n_init_ref = int(self.n_init if self.n_init_reference is None else self.n_init_reference)
        n_init_sub = int(self.n_init if self.n_init_subsample is None else self.n_init_subsample)
        self.stability_samples_, self.stability_ = stability_curve(
            X, subsets, n_samples=self.n_subsamples, seed=seed, rho=self.rho, n_init=n_init_sub,
            row_norm=self.row_norm, baseline=self.baseline, pairs=self.stability_pairs,
            n_init_reference=n_init_ref, n_references=int(self.n_references),
            n_null=int(self.n_null))
        self.n_clusters_ = choose_k(self.stability_, rule=self.k_rule)
        timings["stability"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        self.selected_features_ = np.sort(subsets[self.n_clusters_])
        Z = prepare_subset(X, subsets[self.n_clusters_], row_norm=self.row_norm)
        self.labels_ = kmeans_labels(Z, self.n_clusters_,
                                     random_state=full_kmeans_seed(seed, self.n_clusters_),
                                     n_init=n_init_ref)
        self.cluster_labels_ = {
            c: [w for w, _ in ws]
            for c, ws in top_words(X, self.labels_, feature_names, self.n_label_words).items()}
        timings["final"] = time.perf_counter() - t0
        self.timings_ = timings
        return self

    def stability_table(self) -> pd.DataFrame:
        """``stability_`` as (k, score) for plotting."""
        return self.stability_[["k", "m_norm"]].rename(columns={"m_norm": "score"})
