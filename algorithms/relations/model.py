"""The method of Chen et al. (2005) as one scikit-learn-style estimator with step methods.

ranking (entropy, Sec. 2.1) -> subset search per k (invariant criterion under the coverage
constraint, Sec. 2.2 / Table 1) -> stability over k (Table 2, Eqs. 2-3) -> DCM labels of the
clusters at the chosen (k, F_k) (Sec. 2.4).

Each step is a method: a pure function of its arguments and of the parameters it reads.
:meth:`RelationDiscovery.fit` is the plain loop over them; the Prefect flow
(``flows/relations.py``) runs the same methods as separate cached tasks, one per unit:

===========================================  ==================================  =============
step                                         units                               returns
===========================================  ==================================  =============
``rank(X)``                                  once                                ranking, scores
``score_candidate(X, F, k)``                 ``candidate_units(n_words)``        a search row
``choose_subsets(rows)``                     once                                search, F_k
``cluster_reference(X, F_k, k, r)``          ``reference_units()``               C_r labels
``score_subsample(X, F_k, k, mu, [C_r])``    ``stability_units()``               Eq. 2 row
``choose_k(rows)``                           once                                samples, curve, k
``label(X, C_1, words)``                     once                                DCM words
``centroids(X, F_k, C_1, k)``                once                                centroids
``assign(X, F_k, centroids)``                any new pairs                       clusters
===========================================  ==================================  =============

``centroids`` and ``assign`` are what a trained model keeps and applies: each pair goes to
the nearest centroid of the final clustering in the space that clustering used (the columns
F_k, rows L2-normalised with ``row_norm``); :meth:`~RelationDiscovery.predict` is ``assign``
with the fitted ``selected_features_`` and ``cluster_centers_``.

:meth:`~RelationDiscovery.select_k` is the loop over ``cluster_reference``,
``score_subsample`` and ``choose_k`` for given subsets; with every word for every k it is the
paper's RLBaseline.  :meth:`~RelationDiscovery.step_params` names the parameters a step reads
(found in the method's source), so a driver can key a cached step by exactly those.
"""

from __future__ import annotations

import ast
import functools
import inspect
import numbers
import textwrap
import time
from contextlib import contextmanager

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin, clone
from sklearn.utils import check_random_state

from scarce.algorithms import pyast
from scarce.algorithms.relations import selection
from scarce.algorithms.relations.dcm import top_words
from scarce.algorithms.relations.params import DEFAULTS as _D
from scarce.algorithms.relations.params import RANKINGS, check_n_pairs, k_values
from scarce.algorithms.relations.params import TooFewPairsError as TooFewPairsError  # (re-exported)


def int_seed(random_state) -> int:
    """An int seed from ``random_state`` (int kept as is; RandomState/None draw one)."""
    if _is_int(random_state):
        return int(random_state)
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _table(rows, order: list[str]) -> pd.DataFrame:
    """Unit results (dicts or one-row DataFrames) as one table sorted by ``order``."""
    frames = [r if isinstance(r, pd.DataFrame) else pd.DataFrame([r]) for r in rows]
    if not frames:
        raise ValueError("no unit results to combine")
    return pd.concat(frames, ignore_index=True).sort_values(order).reset_index(drop=True)


@contextmanager
def _timed(timings: dict, name: str):
    t0 = time.perf_counter()
    yield
    timings[name] = time.perf_counter() - t0


class RelationDiscovery(ClusterMixin, BaseEstimator):
    """Unsupervised relation discovery with feature selection and model order selection.

    Parameters
    ----------
    k_low, k_high : int, default 2, 20
        K_low and K_high, the range of numbers of clusters tried.
    ranking : {"entropy", "frequency", "chi2"} or array of int, default "entropy"
        How to rank the words: the entropy measure (Dash et al.; Sec. 2.1), or the ablations
        document frequency and chi^2 against k-means pseudo-labels on all words
        (label-free); an array is used as the ranking.
    entropy_binary : bool, default True
        Rank on the binarised matrix (the exact Hamming-histogram algorithm); False ranks
        the real values (needs ``entropy_samples`` for large N).
    entropy_samples : int, optional
        Rank on a seeded subsample of this many pairs; None ranks on all pairs.
    chi2_k : int, optional
        k of the chi^2 pseudo-labels; None: ``(k_low + k_high) // 2``.
    prefix_step : int, optional
        Prefix lengths ``prefix_step, 2 * prefix_step, ...``; None: ``n_prefixes``
        geometric lengths from ``min_prefix`` to all words.
    n_prefixes : int, default 12
        Number of geometric prefix lengths.
    min_prefix : int, default 10
        Smallest geometric prefix length.
    theta : float, default 0.9
        Coverage threshold: the share of pairs with at least one selected word.
    reg : float, default 1e-3
        Relative ridge of P_W in the invariant criterion
        (:func:`selection.invariant_criterion`).
    row_norm : bool, default True
        L2-normalise the pairs after selecting the words.
    n_init : int, default 3
        k-means restarts of the subset search (and of the references and subsample
        clusterings unless set below).
    n_subsamples : int, default 10
        q, subsamples per k.
    rho : float, default 0.9
        Subsample fraction.
    n_init_reference : int, optional
        k-means restarts of each reference clustering C of a k (and so of the final
        clustering, C_1 of the chosen k); None: ``n_init`` (C_1 is then the clustering the
        subset search scored).
    n_init_subsample : int, optional
        k-means restarts of the subsample clusterings C^mu; None: ``n_init``.
    n_references : int, default 1
        R, reference clusterings C_1..C_R per k, each with its own seed; Eq. 2 is averaged
        over them (1: the paper's single C; :mod:`scarce.algorithms.relations.stability`).
    n_label_words : int, default 2
        DCM words reported per cluster.
    random_state : int, RandomState or None, default 0
        The step methods need an int; :meth:`fit` draws one from a RandomState or None.

    Attributes
    ----------
    ranking_ : ndarray of int
        Word indices, most important first.
    ranking_scores_ : ndarray or None
        Per word: ``E_{-w}`` (entropy), the document frequency or the chi^2 statistic.
    search_ : DataFrame
        Every (k, prefix) tried: ``k``, ``n_features``, ``coverage``, ``feasible``, ``criterion``.
    subsets_ : dict
        k -> F_k prefix length.
    stability_ : DataFrame
        Per k: ``k``, ``n_features``, ``m_mean``, ``m_random`` (1/k), ``m_norm`` (the score),
        ``m_std``, ``n_samples``.
    stability_samples_ : DataFrame
        Per (k, subsample): ``m`` and ``m_random``.
    n_features_in_ : int
        The number of columns of the X it was fitted on.
    n_clusters_ : int
        The chosen k.
    selected_features_ : ndarray of int
        F for the chosen k (column indices).
    labels_ : ndarray of int
        C_1 of the chosen k.
    cluster_centers_ : ndarray (n_clusters_, len(selected_features_))
        The mean of each cluster of ``labels_`` in the space k-means clustered (the columns
        ``selected_features_``, in that order, rows normalised with ``row_norm``);
        :meth:`predict` assigns to the nearest.  NaN for a cluster k-means left empty.
    cluster_labels_ : dict
        Cluster -> list of words, ``n_label_words`` per cluster by DCM weight over all words.
    timings_ : dict
        Seconds spent in ``ranking``, ``search``, ``stability``, ``final``.

    References
    ----------
    J. Chen, D. Ji, C. L. Tan and Z. Niu. Unsupervised Feature Selection for Relation
    Extraction. IJCNLP 2005.
    """

    # The defaults (and bounds) are declared once, in algorithms.relations.params.
    def __init__(self, k_low=_D["k_low"], k_high=_D["k_high"], ranking=_D["ranking"],
                 entropy_binary=_D["entropy_binary"], entropy_samples=_D["entropy_samples"],
                 chi2_k=_D["chi2_k"], prefix_step=_D["prefix_step"],
                 n_prefixes=_D["n_prefixes"], min_prefix=_D["min_prefix"], theta=_D["theta"],
                 reg=_D["reg"], row_norm=_D["row_norm"], n_init=_D["n_init"],
                 n_subsamples=_D["n_subsamples"], rho=_D["rho"],
                 n_init_reference=_D["n_init_reference"],
                 n_init_subsample=_D["n_init_subsample"], n_references=_D["n_references"],
                 n_label_words=_D["n_label_words"], random_state=0):
        self.k_low = k_low
        self.k_high = k_high
        self.ranking = ranking
        self.entropy_binary = entropy_binary
        self.entropy_samples = entropy_samples
        self.chi2_k = chi2_k
        self.prefix_step = prefix_step
        self.n_prefixes = n_prefixes
        self.min_prefix = min_prefix
        self.theta = theta
        self.reg = reg
        self.row_norm = row_norm
        self.n_init = n_init
        self.n_subsamples = n_subsamples
        self.rho = rho
        self.n_init_reference = n_init_reference
        self.n_init_subsample = n_init_subsample
        self.n_references = n_references
        self.n_label_words = n_label_words
        self.random_state = random_state

    # -- what the steps read ------------------------------------------------------------
    def step_params(self, step: str) -> dict:
        """The parameters the step method ``step`` reads, with their values.

        Found in the source: every ``self.<parameter>`` of the method and of the methods it
        calls on ``self``.  A driver that keys a cached step by these (the flow's tasks do)
        reruns it exactly when one of them changes: adding subsamples, say, leaves the
        subset search and the existing subsample units as they were.
        """
        reads = _param_reads(type(self))
        if step not in reads:
            raise ValueError(f"no step method {step!r}; methods: {sorted(reads)}")
        return {p: getattr(self, p) for p in sorted(reads[step])}

    def _seed(self) -> int:
        if not _is_int(self.random_state):
            raise ValueError(f"the step methods need an int random_state, got "
                             f"{self.random_state!r} (fit draws one from a RandomState)")
        return int(self.random_state)

    def _reference_restarts(self) -> int:
        return int(self.n_init if self.n_init_reference is None else self.n_init_reference)

    def _subsample_restarts(self) -> int:
        return int(self.n_init if self.n_init_subsample is None else self.n_init_subsample)

    # -- the units ------------------------------------------------------------------------
    def k_values(self, n_pairs: int | None = None) -> list[int]:
        """K_low..K_high, checked (against the number of pairs, when given):
        :func:`scarce.algorithms.relations.params.k_values`."""
        return k_values(self.k_low, self.k_high, n_pairs)

    def check_n_pairs(self, n_pairs: int) -> RelationDiscovery:
        """Raise :class:`TooFewPairsError` (naming the parameter) unless ``n_pairs`` pairs
        suffice for every clustering the method makes: ``k_high`` clusters of all pairs and
        of each subsample of ``round(rho * n_pairs)`` pairs, and ``chi2_k`` pseudo-labels
        (:func:`scarce.algorithms.relations.params.check_n_pairs`).

        Returns
        -------
        self
        """
        # (each parameter named: step_params finds what a step reads in its source)
        check_n_pairs({"k_low": self.k_low, "k_high": self.k_high, "rho": self.rho,
                       "ranking": self.ranking, "chi2_k": self.chi2_k}, n_pairs)
        return self

    def prefix_lengths(self, n_words: int) -> list[int]:
        """The prefix lengths of the ranked list the subset search tries."""
        return [int(s) for s in selection.prefix_sizes(
            n_words, prefix_step=self.prefix_step, n_prefixes=self.n_prefixes,
            min_prefix=self.min_prefix)]

    def candidate_units(self, n_words: int) -> list[tuple[int, int]]:
        """(k, prefix length) of every candidate of the subset search."""
        return [(k, s) for k in self.k_values() for s in self.prefix_lengths(n_words)]

    def reference_units(self) -> list[tuple[int, int]]:
        """(k, r) of every reference clustering."""
        return [(k, r) for k in self.k_values() for r in range(int(self.n_references))]

    def stability_units(self) -> list[tuple[int, int]]:
        """(k, mu) of every subsample score."""
        return [(k, mu) for k in self.k_values() for mu in range(int(self.n_subsamples))]

    # -- the steps --------------------------------------------------------------------------
    def rank(self, X) -> tuple[np.ndarray, np.ndarray | None]:
        """The words, most important first, and their scores (None for a given ranking)."""
        # The search's modules (the rankings here, the stability below) are imported where
        # they are used: a loaded model assigns new pairs with this class, and needs neither
        # them nor the SciPy and scikit-learn parts they import.
        from scarce.algorithms.relations.baselines import chi2_pseudo_ranking, frequency_ranking
        from scarce.algorithms.relations.entropy import entropy_ranking

        if isinstance(self.ranking, str):
            if self.ranking == "entropy":
                return entropy_ranking(X, binary=bool(self.entropy_binary),
                                       n_samples=self.entropy_samples, random_state=self._seed())
            if self.ranking == "frequency":
                return frequency_ranking(X)
            if self.ranking == "chi2":
                k = (int(self.k_low) + int(self.k_high)) // 2 if self.chi2_k is None \
                    else int(self.chi2_k)
                return chi2_pseudo_ranking(X, k, seed=self._seed(), n_init=int(self.n_init),
                                           row_norm=bool(self.row_norm))
            raise ValueError(f"ranking must be one of {RANKINGS} or an array of column "
                             f"indices, got {self.ranking!r}")
        ranking = np.asarray(self.ranking, dtype=np.intp)
        if ranking.ndim != 1 or np.unique(ranking).size != ranking.size or (
                ranking.size and (ranking.min() < 0 or ranking.max() >= X.shape[1])):
            raise ValueError(f"ranking must be distinct column indices in [0, {X.shape[1]})")
        return ranking, None

    def score_candidate(self, X, features, k: int) -> dict:
        """One (k, F) candidate: coverage, and the invariant criterion of the k-means
        partition on F when the coverage reaches ``theta`` (:func:`selection.score_candidate`)."""
        return selection.score_candidate(X, features, k, seed=self._seed(),
                                         n_init=int(self.n_init), row_norm=bool(self.row_norm),
                                         reg=float(self.reg), theta=float(self.theta))

    def choose_subsets(self, rows) -> tuple[pd.DataFrame, pd.DataFrame]:
        """F_k per k from the candidates' rows: the feasible prefix with the largest
        criterion (:func:`selection.best_subsets`).

        Returns the search (every candidate, sorted by k and prefix length) and one row per
        k, the chosen candidate's.
        """
        search = _table(rows, ["k", "n_features"])
        best = selection.best_subsets(search)
        chosen = pd.concat([search[(search["k"] == k) & (search["n_features"] == s)].head(1)
                            for k, s in sorted(best.items())])
        return search, chosen[selection.SEARCH_COLUMNS].reset_index(drop=True)

    def cluster_reference(self, X, features, k: int, index: int) -> np.ndarray:
        """Reference clustering C_{index+1} of all pairs on (F_k, k)
        (:func:`stability.reference_labels`)."""
        from scarce.algorithms.relations import stability

        return stability.reference_labels(X, features, k, seed=self._seed(),
                                          n_init=self._reference_restarts(),
                                          row_norm=bool(self.row_norm), index=int(index))

    def score_subsample(self, X, features, k: int, sample_index: int, references) -> dict:
        """Eq. 2 of subsample ``sample_index`` against the references C_1..C_R of k
        (:func:`stability.stability_one_sample`)."""
        from scarce.algorithms.relations import stability

        return stability.stability_one_sample(
            X, features, k, sample_index, references, seed=self._seed(), rho=float(self.rho),
            n_init=self._subsample_restarts(), row_norm=bool(self.row_norm))

    def choose_k(self, rows) -> tuple[pd.DataFrame, pd.DataFrame, int]:
        """Eq. 3 per k from the subsample rows, and the k with the largest M_norm.

        Returns the samples (sorted by k and subsample), the curve
        (:func:`stability.summarize_stability`) and the chosen k.
        """
        samples = _table(rows, ["k", "sample_index"])
        from scarce.algorithms.relations import stability

        curve = stability.summarize_stability(samples)
        return samples, curve, stability.choose_k(curve)

    def label(self, X, labels, feature_names) -> dict:
        """The ``n_label_words`` words of largest DCM weight per cluster, over all words
        (:func:`dcm.top_words`): cluster -> list of (word, weight)."""
        return top_words(X, labels, feature_names, int(self.n_label_words))

    def centroids(self, X, features, labels, k: int) -> np.ndarray:
        """The centroids of the clustering ``labels`` (k clusters) in the space it was made
        in: the columns ``features`` of X, rows L2-normalised when ``row_norm``
        (:func:`selection.cluster_centers`); shape (k, len(features))."""
        Z = selection.prepare_subset(X, features, row_norm=bool(self.row_norm))
        return selection.cluster_centers(Z, labels, k)

    def assign(self, X, features, centers) -> tuple[np.ndarray, np.ndarray]:
        """The nearest of ``centers`` (from :meth:`centroids` with the same ``features``) for
        every row of X, and the distance to it (:func:`selection.nearest_center`).

        A row depends on nothing but its own values, so a pair gets the same cluster
        whichever pairs it is assigned with.  On the pairs the centroids were computed from,
        this is the clustering itself wherever k-means stopped at a fixed point of its two
        steps (each pair nearest the mean of its cluster).
        """
        Z = selection.prepare_subset(X, features, row_norm=bool(self.row_norm))
        return selection.nearest_center(Z, centers)

    def predict(self, X) -> np.ndarray:
        """The cluster of each row of X (columns as in :meth:`fit`): the nearest of
        ``cluster_centers_`` in the space of ``selected_features_`` (:meth:`assign`)."""
        if not hasattr(self, "cluster_centers_"):
            raise ValueError("this RelationDiscovery is not fitted yet; call fit first")
        X = sp.csr_matrix(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} columns but the model was fitted on "
                             f"{self.n_features_in_}")
        return self.assign(X, self.selected_features_, self.cluster_centers_)[0]

    # -- the loops ---------------------------------------------------------------------------
    def select_k(self, X, subsets: dict):
        """The stability step for the subsets ``k -> F_k`` (column indices) of every k.

        Returns the subsample rows, the Eq. 3 curve, the chosen k and the references
        ``k -> [C_1, ..., C_R]``.  With every column for every k this is RLBaseline.
        """
        references = {k: [] for k in subsets}
        for k, r in self.reference_units():
            references[k].append(self.cluster_reference(X, subsets[k], k, r))
        rows = [self.score_subsample(X, subsets[k], k, mu, references[k])
                for k, mu in self.stability_units()]
        samples, curve, k = self.choose_k(rows)
        return samples, curve, k, references

    def fit(self, X, y=None, feature_names=None):
        """Run the method on the context matrix ``X`` (n_pairs, n_words); ``y`` is ignored.

        ``feature_names`` (one per column) name the DCM labels; default the column indices.
        """
        X = sp.csr_matrix(X)
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        n, m = X.shape
        self.n_features_in_ = m
        if feature_names is None:
            feature_names = np.array([str(j) for j in range(m)], dtype=object)
        feature_names = np.asarray(feature_names, dtype=object)
        if feature_names.shape != (m,):
            raise ValueError(f"feature_names has {feature_names.size} names but X has {m} columns")
        if not 0.0 <= float(self.theta) <= 1.0:
            raise ValueError(f"theta must be in [0, 1], got {self.theta}")
        self.check_n_pairs(n)
        steps = self if _is_int(self.random_state) else clone(self).set_params(
            random_state=int_seed(self.random_state))
        timings: dict[str, float] = {}

        with _timed(timings, "ranking"):
            self.ranking_, self.ranking_scores_ = steps.rank(X)
        # F is a set of words: clustered in column order, so that k-means (whose restarts
        # follow the floating-point sums over the columns) gives the same partition for the
        # same words however they were ranked -- F_k of every word is RLBaseline's space.
        with _timed(timings, "search"):
            rows = [steps.score_candidate(X, np.sort(self.ranking_[:s]), k)
                    for k, s in steps.candidate_units(self.ranking_.size)]
            self.search_, chosen = steps.choose_subsets(rows)
            self.subsets_ = dict(zip(chosen["k"].astype(int), chosen["n_features"].astype(int),
                                     strict=True))
        with _timed(timings, "stability"):
            subsets = {k: np.sort(self.ranking_[:s]) for k, s in self.subsets_.items()}
            self.stability_samples_, self.stability_, self.n_clusters_, references = \
                steps.select_k(X, subsets)
        with _timed(timings, "final"):
            self.labels_ = references[self.n_clusters_][0]
            self.selected_features_ = subsets[self.n_clusters_]
            self.cluster_centers_ = steps.centroids(X, self.selected_features_, self.labels_,
                                                    self.n_clusters_)
            self.cluster_labels_ = {c: [w for w, _ in ws] for c, ws in
                                    steps.label(X, self.labels_, feature_names).items()}
        self.timings_ = timings
        return self


@functools.cache
def _param_reads(cls: type) -> dict[str, frozenset[str]]:
    """Per method of ``cls``: the constructor parameters it reads as ``self.<name>``, in its
    own source or in the methods of ``cls`` it calls on ``self``."""
    params = set(cls._get_param_names())
    direct: dict[str, set[str]] = {}
    for klass in reversed(cls.__mro__):  # a subclass's methods override its bases'
        if klass is object or klass.__module__.startswith("sklearn."):
            continue
        tree = pyast.parse(textwrap.dedent(inspect.getsource(klass)))
        for node in tree.body[0].body:
            if isinstance(node, ast.FunctionDef):
                direct[node.name] = {
                    a.attr for a in ast.walk(node) if isinstance(a, ast.Attribute)
                    and isinstance(a.value, ast.Name) and a.value.id == "self"}

    def closure(name: str, seen: set[str]) -> set[str]:
        seen.add(name)
        out = direct[name] & params
        for other in direct[name] - params:
            if other in direct and other not in seen:
                out |= closure(other, seen)
        return out

    return {name: frozenset(closure(name, set())) for name in direct}
