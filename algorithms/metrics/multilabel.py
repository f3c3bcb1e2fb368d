"""Multi-label metrics: those of Yu et al. (2014), precision@k, Hamming loss, instance AUC;
and the extreme-classification ranking metrics for missing labels, nDCG@k and
propensity-scored precision@k (Jain, Prabhu and Varma, 2016).

All functions take the true labels ``Y_true`` as a scipy.sparse matrix or a dense
0/1 array of shape (n, L) and work row-wise, so they can be applied to row
batches: with ``average=False`` they return one value per row, which the caller
concatenates (or sums) across batches.  Precision@k needs only the ranked top-k
label indices (``predict_top_k``), never an n x L score matrix.

Conventions
-----------
* precision@k: ``|top_k(i) ∩ Y_i| / k``, averaged over all rows, including rows
  with fewer than ``k`` (or no) true labels, as in the Extreme Classification
  Repository ("top-K accuracy" in Yu et al., Sec. 5).
* Hamming loss: fraction of the n x L entries where the 0/1 prediction differs
  from the truth; predictions are decision values thresholded by the estimator
  (``predict``), 0.5 for the squared loss and 0 for the margin losses.
* Instance AUC (Bucak, Jin and Jain, 2011): for each row the fraction of
  (positive, negative) label pairs ordered correctly by the scores, ties counting
  1/2 (equal to ``sklearn.metrics.roc_auc_score`` on that row).  Rows whose
  labels are all positive or all negative have no such pair; they are skipped
  (NaN per row, left out of the average).
* nDCG@k: ``DCG_i@k / IDCG(min(|Y_i|, k))`` with ``DCG_i@k = sum_{r<=k} y(top_r) /
  log2(r + 1)``, averaged over all rows; a row with no true label counts 0.
* Propensity-scored precision@k (PSP@k): each true label ``l`` weighs its inverse
  propensity ``w_l`` (:func:`inverse_propensity`, from the training labels' frequencies), so
  that a rare label found counts more than a frequent one.  PSP@k is the weighted hits of the
  ranking summed over all rows, divided by the best that any ranking could get (the ``k``
  largest weighted true labels of each row), so 1 is a perfect ranking.  Both follow the
  Extreme Classification Repository's evaluation code (pyxclib), with its defaults
  ``A = 0.55``, ``B = 1.5``.

References
----------
H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
with Missing Labels", ICML 2014, Sec. 5.
S. S. Bucak, R. Jin and A. K. Jain, "Multi-label learning with incomplete class
assignments", CVPR 2011.
H. Jain, Y. Prabhu and M. Varma, "Extreme Multi-label Loss Functions for Recommendation,
Tagging, Ranking & Other Missing Label Applications", KDD 2016.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import scipy.sparse as sp

from scarce.algorithms.memory import rows_per_batch

__all__ = [
    "precision_at_k",
    "ndcg_at_k",
    "inverse_propensity",
    "inverse_propensity_from_counts",
    "psprecision_at_k",
    "hamming_loss",
    "instance_auc",
    "average_instance_auc",
    "multilabel_scores",
    "multilabel_sums",
    "scores_from_sums",
]


def _as_csr(Y, name="Y_true") -> sp.csr_matrix:
    if sp.issparse(Y):
        Y = sp.csr_matrix(Y, copy=True)
    else:
        Y = np.asarray(Y)
        if Y.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n_samples, n_labels), got shape {Y.shape}")
        Y = sp.csr_matrix(Y)
    Y.sum_duplicates()
    Y.eliminate_zeros()
    return Y


def precision_at_k(Y_true, top_k, ks: Iterable[int] = (1, 3, 5), *, average: bool = True):
    """Precision at ``k`` for each ``k`` in ``ks``.

    Parameters
    ----------
    Y_true : {sparse matrix, array-like} of shape (n, L)
        True 0/1 labels (non-zero = relevant).
    top_k : array-like of shape (n, K) of int
        Label indices ranked best first (``predict_top_k``), ``K >= max(ks)``.
    ks : iterable of int, default=(1, 3, 5)
    average : bool, default=True
        Return the mean over rows; False returns per-row precisions.

    Returns
    -------
    dict
        ``{k: float}`` (or ``{k: ndarray of shape (n,)}`` when ``average=False``).
    """
    Y = _as_csr(Y_true)
    top_k = np.asarray(top_k)
    ks = [int(k) for k in ks]
    _check_ranking(Y, top_k, ks)
    n = Y.shape[0]
    hits = _hit_counts(Y, top_k, ks)
    out = {}
    for k in ks:
        per_row = hits[k] / k
        if average:
            out[k] = float(per_row.mean()) if n else 0.0
        else:
            out[k] = per_row
    return out


def _check_ranking(Y: sp.csr_matrix, top_k: np.ndarray, ks: list[int]) -> None:
    if top_k.ndim != 2 or top_k.shape[0] != Y.shape[0]:
        raise ValueError(f"top_k must have shape ({Y.shape[0]}, K), got {top_k.shape}")
    if not ks or min(ks) < 1 or max(ks) > top_k.shape[1]:
        raise ValueError(f"each k must be in [1, {top_k.shape[1]}] (columns of top_k), "
                         f"got {ks}")
    if top_k.size and (top_k.min() < 0 or top_k.max() >= Y.shape[1]):
        raise ValueError(f"top_k holds label indices outside [0, {Y.shape[1]})")


def _relevance(Y: sp.csr_matrix, top_k: np.ndarray) -> np.ndarray:
    """``rel[i, r]`` = 1 where the label ranked ``r``-th for row ``i`` is true (float64)."""
    return _hits(Y, top_k).astype(np.float64)


def ndcg_at_k(Y_true, top_k, ks: Iterable[int] = (1, 3, 5), *, average: bool = True):
    """nDCG at ``k`` for each ``k`` in ``ks`` (binary relevance).

    Parameters
    ----------
    Y_true : {sparse matrix, array-like} of shape (n, L)
        True 0/1 labels.
    top_k : array-like of shape (n, K) of int
        Label indices ranked best first, ``K >= max(ks)``.
    ks : iterable of int, default=(1, 3, 5)
    average : bool, default=True
        Return the mean over rows; False returns one value per row.

    Returns
    -------
    dict
        ``{k: float}`` (or ``{k: ndarray of shape (n,)}``); rows with no true label are 0.
    """
    Y = _as_csr(Y_true)
    top_k = np.asarray(top_k)
    ks = [int(k) for k in ks]
    _check_ranking(Y, top_k, ks)
    K = max(ks)
    discount = 1.0 / np.log2(np.arange(2, K + 2))
    dcg = np.cumsum(_relevance(Y, top_k[:, :K]) * discount, axis=1)
    ideal = np.concatenate([[0.0], np.cumsum(discount)])  # ideal[m]: m true labels on top
    n_true = np.diff(Y.indptr)
    out = {}
    for k in ks:
        best = ideal[np.minimum(n_true, k)]
        per_row = np.divide(dcg[:, k - 1], best, out=np.zeros(Y.shape[0]), where=best > 0)
        out[k] = (float(per_row.mean()) if Y.shape[0] else 0.0) if average else per_row
    return out


def inverse_propensity(Y_train, A: float = 0.55, B: float = 1.5) -> np.ndarray:
    """Inverse propensities ``w_l = 1 + C (N_l + B)^-A`` of the labels (Jain et al., 2016),
    with ``C = (ln N - 1)(B + 1)^A``, ``N`` the training rows and ``N_l`` the rows that
    carry label ``l``: a label seen rarely was likely missed often, and weighs more.

    Parameters
    ----------
    Y_train : {sparse matrix, array-like} of shape (N, L)
        The training labels (the observed ones, where labels are missing).
    A, B : float, default=0.55, 1.5
        The propensity model's parameters; the defaults are the paper's for data sets other
        than Wikipedia (0.5, 0.4) and Amazon (0.6, 2.6).

    Returns
    -------
    ndarray of shape (L,), float64
    """
    Y = _as_csr(Y_train, "Y_train")
    return inverse_propensity_from_counts(np.bincount(Y.indices, minlength=Y.shape[1]),
                                          Y.shape[0], A, B)


def inverse_propensity_from_counts(counts, n_rows: int, A: float = 0.55, B: float = 1.5
                                   ) -> np.ndarray:
    """:func:`inverse_propensity` from the labels' row counts ``N_l`` (``counts``, shape
    (L,)) over ``n_rows`` training rows: for training labels held in row blocks, whose
    counts add."""
    N = int(n_rows)
    if N < 2:
        raise ValueError(f"inverse propensities need at least 2 training rows, got {N}")
    counts = np.asarray(counts, dtype=np.float64).ravel()
    C = (np.log(N) - 1.0) * (B + 1.0) ** A
    return 1.0 + C * np.power(counts + B, -A)


def psprecision_at_k(Y_true, top_k, inv_propensity, ks: Iterable[int] = (1, 3, 5)
                     ) -> dict[int, float]:
    """Propensity-scored precision at ``k`` for each ``k`` in ``ks``.

    Parameters
    ----------
    Y_true : {sparse matrix, array-like} of shape (n, L)
        True 0/1 labels.
    top_k : array-like of shape (n, K) of int
        Label indices ranked best first, ``K >= max(ks)``.
    inv_propensity : array-like of shape (L,)
        :func:`inverse_propensity` of the training labels.
    ks : iterable of int, default=(1, 3, 5)

    Returns
    -------
    dict
        ``{k: float}``: the weighted hits of the ranking over all rows divided by those of
        the best ranking (0 when no row has a true label).
    """
    Y = _as_csr(Y_true)
    top_k = np.asarray(top_k)
    ks = [int(k) for k in ks]
    _check_ranking(Y, top_k, ks)
    gain, best = _psp_parts(Y, top_k, inv_propensity, ks)
    return {k: gain[k] / best[k] if best[k] > 0 else 0.0 for k in ks}


def _psp_parts(Y: sp.csr_matrix, top_k: np.ndarray, inv_propensity, ks: list[int]
               ) -> tuple[dict[int, float], dict[int, float]]:
    """PSP@k's numerator (the ranking's weighted hits over all rows) and denominator (the
    best ranking's) for each ``k`` in ``ks``, ``top_k`` checked by the caller."""
    w = np.asarray(inv_propensity, dtype=np.float64).ravel()
    if w.shape != (Y.shape[1],):
        raise ValueError(f"inv_propensity must have shape ({Y.shape[1]},), got {w.shape}")
    K = max(ks)
    gain = np.cumsum(_relevance(Y, top_k[:, :K]) * w[top_k[:, :K]], axis=1)
    # the best ranking puts each row's true labels first, the largest weights first
    rows = np.repeat(np.arange(Y.shape[0]), np.diff(Y.indptr))
    weights = w[Y.indices]
    order = np.lexsort((-weights, rows))  # by row, then the largest weight first
    rank = np.arange(order.size) - Y.indptr[rows[order]]
    keep = rank < K
    best = np.zeros((Y.shape[0], K))
    best[rows[order][keep], rank[keep]] = weights[order][keep]
    best = np.cumsum(best, axis=1)
    return ({k: float(gain[:, k - 1].sum()) for k in ks},
            {k: float(best[:, k - 1].sum()) for k in ks})


def _hit_counts(Y: sp.csr_matrix, top_k: np.ndarray, ks) -> dict[int, np.ndarray]:
    """Per row, ``|top_k(i)[:k] ∩ Y_i|`` for each ``k`` in ``ks`` (int64)."""
    cum = np.cumsum(_hits(Y, top_k[:, :max(ks)]), axis=1, dtype=np.int64)
    return {k: cum[:, k - 1] for k in ks}


def _hits(Y: sp.csr_matrix, top_k: np.ndarray) -> np.ndarray:
    """``hit[i, r]``: whether the label ranked ``r``-th for row ``i`` is relevant (a sorted-key
    lookup, no n x L matrix)."""
    n, n_labels = Y.shape
    ykey = np.repeat(np.arange(n, dtype=np.int64), np.diff(Y.indptr)) * n_labels + Y.indices
    ykey.sort()
    qkey = np.arange(n, dtype=np.int64)[:, None] * n_labels + top_k.astype(np.int64)
    pos = np.searchsorted(ykey, qkey)
    hit = pos < ykey.size
    hit[hit] = ykey[pos[hit]] == qkey[hit]
    return hit


def hamming_loss(Y_true, Y_pred, *, average: bool = True):
    """Fraction of label entries where the 0/1 prediction is wrong.

    Computed from non-zeros only: ``|Y xor P| = nnz(Y) + nnz(P) - 2 nnz(Y * P)``.

    Parameters
    ----------
    Y_true, Y_pred : {sparse matrix, array-like} of shape (n, L)
        0/1 matrices (non-zero = present); ``Y_pred`` from ``predict``.
    average : bool, default=True
        False returns the per-row fraction (length n).

    Returns
    -------
    float or ndarray
    """
    Y = _as_csr(Y_true)
    P = _as_csr(Y_pred, "Y_pred")
    if Y.shape != P.shape:
        raise ValueError(f"Y_true has shape {Y.shape} but Y_pred has {P.shape}")
    wrong = _wrong_counts(Y, P)
    n, n_labels = Y.shape
    if average:
        return float(wrong.sum() / (n * n_labels)) if n * n_labels else 0.0
    return wrong / n_labels


def _wrong_counts(Y: sp.csr_matrix, P: sp.csr_matrix) -> np.ndarray:
    """Per row, the label entries where the 0/1 prediction ``P`` differs from ``Y`` (int64)."""
    Yb = (Y != 0).astype(np.int64)
    Pb = (P != 0).astype(np.int64)
    both = np.asarray(Yb.multiply(Pb).sum(axis=1)).ravel()
    return np.diff(Yb.indptr) + np.diff(Pb.indptr) - 2 * both


def instance_auc(Y_true, scores) -> np.ndarray:
    """Per-instance AUC over labels (Bucak et al., 2011); NaN where undefined.

    Uses the rank-sum (Mann-Whitney) form with average ranks for ties:
    ``AUC_i = (sum of ranks of positives - P (P + 1) / 2) / (P N)``.

    Parameters
    ----------
    Y_true : {sparse matrix, array-like} of shape (n, L)
    scores : array-like of shape (n, L)
        Decision values (e.g. a row batch of ``decision_function``).

    Returns
    -------
    ndarray of shape (n,), float64
        NaN for rows with no positive or no negative label.
    """
    Y = _as_csr(Y_true)
    scores = np.asarray(scores)
    if scores.shape != Y.shape:
        raise ValueError(f"scores has shape {scores.shape} but Y_true has {Y.shape}")
    n, n_labels = Y.shape
    if n == 0:
        return np.zeros(0)
    # imported here: scipy.stats weighs on the start-up of every importer of the
    # metrics (an apply run's score step among them), and only the AUC ranks
    from scipy.stats import rankdata

    ranks = rankdata(scores, axis=1, method="average")
    Yb = (Y != 0).astype(np.float64)
    pos = np.diff(Yb.indptr).astype(np.float64)
    neg = n_labels - pos
    rank_sum = np.asarray(Yb.multiply(ranks).sum(axis=1)).ravel()
    with np.errstate(invalid="ignore", divide="ignore"):
        auc = (rank_sum - pos * (pos + 1) / 2) / (pos * neg)
    auc[(pos == 0) | (neg == 0)] = np.nan
    return auc


def average_instance_auc(Y_true, scores) -> float:
    """Mean of :func:`instance_auc` over the rows where it is defined (NaN if none)."""
    auc = instance_auc(Y_true, scores)
    valid = ~np.isnan(auc)
    return float(auc[valid].mean()) if valid.any() else float("nan")


def multilabel_sums(Y_true, scores, *, threshold: float, ks: Iterable[int] = (1, 3, 5),
                    inv_propensity=None) -> dict[str, float]:
    """The additive parts of :func:`multilabel_scores` over one batch of rows.

    Counts are integers, so that the sums of any split of the rows into batches (or row
    blocks on several workers) give precision@k and the Hamming loss to the last bit;
    only the AUC's sum is a float (equal to rounding).

    Parameters
    ----------
    Y_true : {sparse matrix, array-like} of shape (n, L)
    scores : ndarray of shape (n, L)
        Decision values of these rows.
    threshold : float
        Decision values above it are predicted labels (Hamming loss).
    ks : iterable of int, default=(1, 3, 5)
    inv_propensity : array-like of shape (L,), optional
        :func:`inverse_propensity` of the training labels; given, the sums of PSP@k too.

    Returns
    -------
    dict
        ``rows`` and ``labels`` (n and L), ``hits@k`` (``sum_i |top_k(i) ∩ Y_i|``, with
        ``top_k`` cut to L labels when ``k > L``), ``wrong`` (label entries predicted
        wrongly), ``auc_sum`` and ``auc_rows`` (the rows where the AUC is defined),
        ``ndcg_sum@k`` (the rows' nDCG@k added) and, with ``inv_propensity``,
        ``psp_gain@k`` and ``psp_best@k`` (the numerator and denominator of PSP@k).
    """
    Y = _as_csr(Y_true)
    scores = np.asarray(scores)
    n, n_labels = Y.shape
    if scores.shape != (n, n_labels):
        raise ValueError(f"scores has shape {scores.shape}, expected {(n, n_labels)}")
    ks = [int(k) for k in ks]
    K = min(max(ks), n_labels)
    out: dict[str, float] = {"rows": n, "labels": n_labels}
    if n:
        top = np.argpartition(-scores, K - 1, axis=1)[:, :K] if K < n_labels else \
            np.broadcast_to(np.arange(n_labels), (n, n_labels))
        vals = np.take_along_axis(scores, top, axis=1)
        top = np.take_along_axis(top, np.lexsort((top, -vals), axis=1), axis=1)
        hits = _hit_counts(Y, top, sorted({min(k, K) for k in ks}))
    for k in ks:  # with k > L only L labels can be ranked; the divisor stays k
        out[f"hits@{k}"] = int(hits[min(k, K)].sum()) if n else 0
    # nDCG@k and PSP@k of a ranking cut to K labels: the same as ndcg_at_k's and
    # psprecision_at_k's on top (their k capped at K, as the hits are)
    cut = {k: min(k, K) for k in ks}
    ndcg = ndcg_at_k(Y, top, sorted(set(cut.values())), average=False) if n else {}
    for k in ks:
        out[f"ndcg_sum@{k}"] = float(ndcg[cut[k]].sum()) if n else 0.0
    if inv_propensity is not None:
        gain, best = _psp_parts(Y, top, inv_propensity, sorted(set(cut.values()))) if n \
            else ({}, {})
        for k in ks:
            out[f"psp_gain@{k}"] = float(gain[cut[k]]) if n else 0.0
            out[f"psp_best@{k}"] = float(best[cut[k]]) if n else 0.0
    out["wrong"] = int(_wrong_counts(Y, _as_csr(scores > threshold, "Y_pred")).sum()) \
        if n else 0
    auc = instance_auc(Y, scores)
    valid = ~np.isnan(auc)
    out["auc_sum"] = float(auc[valid].sum())
    out["auc_rows"] = int(valid.sum())
    return out


def scores_from_sums(parts: Iterable[dict], ks: Iterable[int] = (1, 3, 5)) -> dict[str, float]:
    """The metrics of :func:`multilabel_scores` from the :func:`multilabel_sums` of the
    batches (or row blocks) of a set, added in the order given."""
    parts = list(parts)
    ks = [int(k) for k in ks]
    n = sum(int(p["rows"]) for p in parts)
    n_labels = int(parts[0]["labels"]) if parts else 0
    hits = {k: sum(int(p[f"hits@{k}"]) for p in parts) for k in ks}
    wrong = sum(int(p["wrong"]) for p in parts)
    auc_sum = _added(parts, "auc_sum")
    auc_rows = sum(int(p["auc_rows"]) for p in parts)
    out = {f"precision@{k}": (hits[k] / (k * n) if n else 0.0) for k in ks}
    out["hamming_loss"] = wrong / (n * n_labels) if n * n_labels else 0.0
    out["instance_auc"] = auc_sum / auc_rows if auc_rows else float("nan")
    for k in ks:
        out[f"ndcg@{k}"] = _added(parts, f"ndcg_sum@{k}") / n if n else 0.0
    if parts and ks and f"psp_gain@{ks[0]}" in parts[0]:
        for k in ks:
            best = _added(parts, f"psp_best@{k}")
            out[f"psp@{k}"] = _added(parts, f"psp_gain@{k}") / best if best > 0 else 0.0
    return out


def _added(parts: list[dict], key: str) -> float:
    """``key``'s values of the ``parts`` added in the order given."""
    total = 0.0
    for p in parts:
        total += float(p[key])
    return total


def multilabel_scores(Y_true, score_rows: Callable[[int, int], np.ndarray], *,
                      threshold: float, batch_size: int = 2048,
                      ks: Iterable[int] = (1, 3, 5), inv_propensity=None
                      ) -> dict[str, float]:
    """All metrics of the paper in one pass over row batches of decision values.

    Parameters
    ----------
    Y_true : {sparse matrix, array-like} of shape (n, L)
    score_rows : callable
        ``score_rows(start, stop)`` returns the dense decision values of rows
        ``start:stop`` (so at most ``batch_size x L`` scores exist at once; fewer rows
        when that exceeds :data:`~scarce.algorithms.memory.SCORES_PER_BATCH`).
    threshold : float
        Decision values above it are predicted labels (Hamming loss).
    batch_size : int, default=2048
    ks : iterable of int, default=(1, 3, 5)
    inv_propensity : array-like of shape (L,), optional
        :func:`inverse_propensity` of the training labels; given, PSP@k too.

    Returns
    -------
    dict
        ``{"precision@1": ..., "precision@3": ..., "precision@5": ...,
        "hamming_loss": ..., "instance_auc": ..., "ndcg@1": ..., ...}`` and, with
        ``inv_propensity``, ``"psp@1"``, ... (fractions in [0, 1]);
        ``instance_auc`` averages the rows where it is defined (NaN if none).
        Precision@k and the Hamming loss are exact ratios of integer counts
        (:func:`multilabel_sums`), the same for any batching; the others are sums of
        floats, the same to rounding.
    """
    Y = _as_csr(Y_true)
    n, n_labels = Y.shape
    ks = [int(k) for k in ks]
    batch_size = rows_per_batch(batch_size, n_labels)
    parts = []
    for s in range(0, n, batch_size):
        e = min(s + batch_size, n)
        scores = np.asarray(score_rows(s, e))
        if scores.shape != (e - s, n_labels):
            raise ValueError(f"score_rows({s}, {e}) returned shape {scores.shape}, "
                             f"expected {(e - s, n_labels)}")
        parts.append(multilabel_sums(Y[s:e], scores, threshold=threshold, ks=ks,
                                     inv_propensity=inv_propensity))
    if not parts:
        parts = [multilabel_sums(Y, np.zeros((0, n_labels)), threshold=threshold, ks=ks,
                                 inv_propensity=inv_propensity)]
    return scores_from_sums(parts, ks)
