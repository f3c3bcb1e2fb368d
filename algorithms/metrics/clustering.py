"""Clustering metrics against gold classes.

``mapped_accuracy`` is the measure of Chen et al. (2005, Sec. 3.3) and Hasegawa et
al. (2004): find the one-to-one mapping ``Omega`` of gold types to clusters that
maximises ``sum_j t_{Omega(j), j}`` over the contingency table ``t`` (Hungarian
algorithm, ``scipy.optimize.linear_sum_assignment``), then

    Accuracy = sum_j t_{Omega(j), j} / sum_{i, j} t_{i, j}.

With more clusters than types the extra clusters are mapped to nothing and their
items count as errors (and vice versa).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, v_measure_score
from sklearn.metrics.cluster import contingency_matrix


def _check_pair(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    y_true = np.asarray(y_true)
    y_pred = np.asarray(y_pred)
    if y_true.ndim != 1 or y_pred.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shapes {y_true.shape} and {y_pred.shape}")
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true has {y_true.size} items but y_pred has {y_pred.size}")
    if y_true.size == 0:
        raise ValueError("no items to score")
    return y_true, y_pred


def best_mapping(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the one-to-one mapping maximising the mapped total of ``table``."""
    table = np.asarray(table)
    return linear_sum_assignment(table, maximize=True)


def mapped_accuracy_from_table(table: np.ndarray) -> float:
    """Chen et al.'s accuracy from a contingency table (any orientation)."""
    table = np.asarray(table, dtype=np.float64)
    total = table.sum()
    if total <= 0:
        raise ValueError("the contingency table is empty")
    rows, cols = best_mapping(table)
    return float(table[rows, cols].sum() / total)


def mapped_accuracy(y_true, y_pred) -> float:
    """Accuracy under the best one-to-one mapping of clusters to gold types.

    Parameters
    ----------
    y_true, y_pred : array-like of shape (n,)
        Gold types and cluster labels (any hashable values).

    Returns
    -------
    float in [0, 1]
    """
    y_true, y_pred = _check_pair(y_true, y_pred)
    return mapped_accuracy_from_table(contingency_matrix(y_true, y_pred))


def clustering_scores(y_true, y_pred) -> dict[str, float]:
    """Mapped accuracy, adjusted Rand index and V-measure in one dict.

    Returns
    -------
    dict
        ``accuracy``, ``ari``, ``v_measure``, ``n_clusters`` (distinct predicted labels)
        and ``n_classes`` (distinct gold labels).
    """
    y_true, y_pred = _check_pair(y_true, y_pred)
    return {
        "accuracy": mapped_accuracy(y_true, y_pred),
        "ari": float(adjusted_rand_score(y_true, y_pred)),
        "v_measure": float(v_measure_score(y_true, y_pred)),
        "n_clusters": int(np.unique(y_pred).size),
        "n_classes": int(np.unique(y_true).size),
    }
