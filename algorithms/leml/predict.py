"""Prediction from a linear multi-label model, in row batches.

Decision values of LEML are ``x^T W H^T`` (with the intercept weights as the last row of
``W``), of the baselines ``x^T coef^T + intercept``; both score ``batch_size`` rows at a time,
so no n x L matrix is allocated for the top-``k`` labels or the thresholded labels.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scarce.algorithms.leml.data import check_X
from scarce.algorithms.leml.params import BATCH_SIZE
from scarce.algorithms.memory import check_allocation, rows_per_batch

__all__ = ["BATCH_SIZE", "PREDICTION_COLUMNS", "FactorModel", "check_new_X", "embed", "embed_rows",
           "predict_top_k_in_batches", "predictions_table", "threshold_in_batches",
           "top_k_from_scores"]



def check_new_X(X, dtype, n_features: int, fitted: str):
    """``X`` to predict from, in ``dtype``: a ValueError unless it has the ``n_features``
    the model (named ``fitted``) was fitted with."""
    X = check_X(X, dtype)
    if X.shape[1] != n_features:
        raise ValueError(f"X has {X.shape[1]} features but {fitted} was fitted with "
                         f"{n_features}")
    return X


def embed(X, W, fit_intercept: bool) -> np.ndarray:
    """``A = X W + w_0`` (n x k): ``X`` embedded by stored factors ``W`` of shape
    ``(d + fit_intercept, k)``, the intercept weights ``w_0`` last; ``X`` in ``W``'s dtype."""
    return embed_rows(check_X(X, W.dtype), W, fit_intercept)


def embed_rows(X, W, fit_intercept: bool) -> np.ndarray:
    """:func:`embed` of rows already checked: CSR or a 2-D array, in ``W``'s dtype (a
    ValueError otherwise; scikit-learn's input checks are :func:`embed`'s)."""
    if not (sp.issparse(X) and X.format == "csr" or isinstance(X, np.ndarray) and X.ndim == 2):
        raise ValueError(f"X must be a CSR matrix or a 2-D array, got {type(X).__name__}")
    if X.dtype != W.dtype:
        raise ValueError(f"X is {X.dtype} but W is {W.dtype}")
    d = W.shape[0] - int(fit_intercept)
    if X.shape[1] != d:
        raise ValueError(f"X has {X.shape[1]} features but W has {W.shape[0]} rows "
                         f"(fit_intercept={fit_intercept}, so {d} features expected)")
    A = X @ W[:d]
    if fit_intercept:
        A += W[d]
    return A


def top_k_from_scores(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores of each row, best first.

    Within the selected ``k`` ties are broken by the lower label index (as a
    stable ``argsort(-scores)``); a tie at the ``k``-th place may select either.

    Parameters
    ----------
    scores : ndarray of shape (n, L)
    k : int
        ``1 <= k``; clipped to ``L``.

    Returns
    -------
    ndarray of shape (n, min(k, L)), int64
    """
    scores = np.asarray(scores)
    n, n_labels = scores.shape
    k = min(int(k), n_labels)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if k < n_labels:
        idx = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    else:
        idx = np.broadcast_to(np.arange(n_labels), (n, n_labels))
    vals = np.take_along_axis(scores, idx, axis=1)
    order = np.lexsort((idx, -vals), axis=1)
    return np.take_along_axis(idx, order, axis=1).astype(np.int64)


def predict_top_k_in_batches(score_rows: Callable, n_samples: int, k: int,
                             batch_size: int = BATCH_SIZE, *, return_scores: bool = False,
                             n_labels: int = 1):
    """Top-``k`` labels for ``n_samples`` rows, scoring ``batch_size`` rows at a time.

    ``score_rows(start, stop)`` returns the dense scores of rows ``start:stop``;
    so at most ``batch_size x L`` scores exist at once.

    Parameters
    ----------
    score_rows : callable
        ``score_rows(start, stop)`` -> ndarray of shape (stop - start, L).
    n_samples : int
    k : int
        Labels per row (see :func:`top_k_from_scores`).
    batch_size : int, default=BATCH_SIZE
    return_scores : bool, default=False
        Also return the scores of the selected labels.
    n_labels : int, default=1
        L: with ``batch_size x L`` over :data:`~scarce.algorithms.memory.SCORES_PER_BATCH`, fewer
        rows are scored at a time (:func:`~scarce.algorithms.memory.rows_per_batch`).

    Returns
    -------
    labels : ndarray of shape (n_samples, min(k, L)), int64
        Best first.
    scores : ndarray of shape (n_samples, min(k, L))
        Only with ``return_scores``: ``scores[i, r]`` is the score of ``labels[i, r]``, in the
        dtype of ``score_rows``.
    """
    batch_size = rows_per_batch(batch_size, n_labels)
    labels, scores = [], []
    for s in range(0, n_samples, batch_size):
        rows = score_rows(s, min(s + batch_size, n_samples))
        top = top_k_from_scores(rows, k)
        labels.append(top)
        if return_scores:
            scores.append(np.take_along_axis(rows, top, axis=1))
    if not labels:
        empty = np.empty((0, int(k)), dtype=np.int64)
        return (empty, np.empty((0, int(k)))) if return_scores else empty
    if return_scores:
        return np.vstack(labels), np.vstack(scores)
    return np.vstack(labels)


def threshold_in_batches(score_rows: Callable, n_samples: int, threshold: float,
                         batch_size: int = BATCH_SIZE, *, n_labels: int = 1) -> sp.csr_matrix:
    """Sparse 0/1 matrix ``scores > threshold``, scoring ``batch_size`` rows at a time (fewer
    over ``n_labels`` labels when they would exceed
    :data:`~scarce.algorithms.memory.SCORES_PER_BATCH` scores)."""
    batch_size = rows_per_batch(batch_size, n_labels)
    parts = [sp.csr_matrix(score_rows(s, min(s + batch_size, n_samples)) > threshold,
                           dtype=np.int8)
             for s in range(0, n_samples, batch_size)]
    if not parts:
        return sp.csr_matrix(score_rows(0, 0).shape, dtype=np.int8)
    return sp.vstack(parts, format="csr", dtype=np.int8)


class FactorModel:
    """A fitted LEML's predictions from its factors alone: ``x^T W H^T``, in row batches.

    The products and the top-``k`` selection of :class:`~scarce.algorithms.leml.LEML`'s
    ``predict_top_k`` and ``decision_function``, in the same order (so the same
    numbers, bit for bit), for rows already in ``W``'s dtype: without the estimator and the
    scikit-learn input checks, whose import costs more than a model loaded into Python takes
    to read its files and score a hundred rows.

    Parameters
    ----------
    W : ndarray of shape (n_features + fit_intercept, k)
    H : ndarray of shape (n_labels, k)
    fit_intercept : bool
        The last row of ``W`` is the intercept's.
    """

    def __init__(self, W: np.ndarray, H: np.ndarray, fit_intercept: bool) -> None:
        W = np.asarray(W)  # as LEML.set_factors takes them
        H = np.asarray(H, dtype=W.dtype)
        if W.ndim != 2 or H.ndim != 2 or W.shape[1] != H.shape[1]:
            raise ValueError(f"W has shape {W.shape} and H {H.shape}; expected (d', k) and "
                             "(L, k) with the same k")
        self.W, self.H = W, H
        self.fit_intercept = bool(fit_intercept)

    @property
    def n_features_in_(self) -> int:
        return self.W.shape[0] - int(self.fit_intercept)

    @property
    def n_labels_(self) -> int:
        return self.H.shape[0]

    def decision_function(self, X) -> np.ndarray:
        """Decision values ``X W H^T`` (n x L, dense)."""
        A = embed_rows(X, self.W, self.fit_intercept)
        check_allocation((A.shape[0], self.H.shape[0]), A.dtype,
                         what="LEML decision_function (n x L)",
                         advice="score row batches with predict_top_k or predict (batch_size), "
                         "or pass fewer rows at a time")
        return A @ self.H.T

    def predict_top_k(self, X, k: int = 5, batch_size: int = BATCH_SIZE, *,
                      return_scores: bool = False):
        """The ``k`` labels of highest decision value per row, best first (and their
        decision values with ``return_scores``), as ``LEML.predict_top_k`` gives them."""
        A = embed_rows(X, self.W, self.fit_intercept)
        return predict_top_k_in_batches(lambda s, e: A[s:e] @ self.H.T, A.shape[0], k,
                                        batch_size, return_scores=return_scores,
                                        n_labels=self.H.shape[0])


#: The columns of a predictions table (:func:`predictions_table`).
PREDICTION_COLUMNS = ["row", "rank", "label", "score"]


def predictions_table(model, X, top_k: int, batch_size: int) -> pd.DataFrame:
    """The ``top_k`` labels of every row of ``X`` by the fitted ``model``, best first.

    Parameters
    ----------
    model : LEML or FactorModel
        Fitted (:meth:`~scarce.algorithms.leml.LEML.set_factors`), or its factors.
    X : sparse matrix of shape (n, n_features)
    top_k : int
        Labels per row (at most the model's label count).
    batch_size : int
        Rows scored at a time.

    Returns
    -------
    pandas.DataFrame
        :data:`PREDICTION_COLUMNS`, ``min(top_k, L)`` lines per row of ``X``: ``row``
        (0-based row of ``X``), ``rank`` (1 = best), ``label`` (0-based column of Y) and
        ``score`` (the decision value ``x^T W h_label``, float64), sorted by row and rank;
        no lines for an ``X`` without rows.
    """
    if X.shape[0] == 0:  # scikit-learn's input checks refuse an empty X
        labels, scores = np.empty((0, 0), dtype=np.int64), np.empty((0, 0))
    else:
        labels, scores = model.predict_top_k(X, top_k, batch_size, return_scores=True)
    n, k = labels.shape
    return pd.DataFrame({
        "row": np.repeat(np.arange(n, dtype=np.int64), k),
        "rank": np.tile(np.arange(1, k + 1, dtype=np.int64), n),
        "label": labels.ravel(),
        "score": scores.ravel().astype(np.float64),
    })
