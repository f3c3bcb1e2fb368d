"""Invariant criterion, coverage and the prefix search."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from scarce.algorithms.relations.model import RelationDiscovery
from scarce.algorithms.relations.selection import (
    best_subsets,
    cluster_centers,
    coverage,
    invariant_criterion,
    nearest_center,
    prefix_sizes,
    score_candidate,
)


def test_invariant_criterion_equals_explicit_scatter_matrices():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(40, 4))
    labels = rng.integers(0, 3, size=40)
    m = Z.mean(axis=0)
    P_W = np.zeros((4, 4))
    P_B = np.zeros((4, 4))
    for c in range(3):
        Zc = Z[labels == c]
        mc = Zc.mean(axis=0)
        P_W += (Zc - mc).T @ (Zc - mc)
        P_B += len(Zc) * np.outer(mc - m, mc - m)
    P_T = (Z - m).T @ (Z - m)
    lam = 1e-3 * np.trace(P_T) / 4
    expected = np.trace(np.linalg.solve(P_W + lam * np.eye(4), P_B))
    assert invariant_criterion(sp.csr_matrix(Z), labels, reg=1e-3) == pytest.approx(expected,
                                                                                     rel=1e-9)
    assert invariant_criterion(Z, labels, reg=1e-3) == pytest.approx(expected, rel=1e-9)


def test_invariant_criterion_is_finite_when_within_scatter_is_singular():
    # each word used by one cluster only: P_W = 0, the ridge keeps it finite
    Z = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], dtype=float)
    value = invariant_criterion(Z, np.array([0, 0, 1, 1]), reg=1e-3)
    assert np.isfinite(value) and value > 0
    with pytest.raises(ValueError, match="reg must be positive"):
        invariant_criterion(Z, np.array([0, 0, 1, 1]), reg=0.0)


def test_coverage_counts_rows_with_a_selected_word():
    X = sp.csr_matrix(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]], dtype=float))
    assert coverage(X, [0]) == 0.25
    assert coverage(X, [0, 2]) == 0.5
    assert coverage(X, [0, 1, 2]) == 0.75


def test_criterion_of_one_partition_grows_with_noise_features():
    # the bias towards more words: the same partition scores higher with 4 noise features
    rng = np.random.default_rng(0)
    centres = np.array([[0, 0], [0, 3], [3, 0], [3, 3]], dtype=float)
    y = np.repeat(np.arange(4), 15)
    X = np.hstack([centres[y] + rng.normal(0, 0.3, (60, 2)), rng.normal(0, 1.0, (60, 4))])
    assert invariant_criterion(X, y, reg=0.1) > invariant_criterion(X[:, :2], y, reg=0.1)


def test_prefix_sizes_end_with_the_whole_list():
    np.testing.assert_array_equal(
        prefix_sizes(10, prefix_step=4, n_prefixes=12, min_prefix=10), [4, 8, 10])
    s = prefix_sizes(1000, prefix_step=None, n_prefixes=5, min_prefix=10)
    assert s[0] == 10 and s[-1] == 1000 and np.all(np.diff(s) > 0)


def test_search_skips_infeasible_prefixes_and_picks_best_feasible():
    rng = np.random.default_rng(0)
    X = sp.csr_matrix((rng.random((60, 8)) < 0.4).astype(float))
    ranking = np.arange(8)
    model = RelationDiscovery(k_low=2, k_high=3, theta=0.8, random_state=1)
    rows = [model.score_candidate(X, ranking[:s], k) for k in (3, 2) for s in (8, 1, 4)]
    scores, chosen = model.choose_subsets(rows)
    assert scores[["k", "n_features"]].values.tolist() == [[2, 1], [2, 4], [2, 8], [3, 1],
                                                           [3, 4], [3, 8]]
    infeasible = scores[~scores["feasible"]]
    assert len(infeasible) and infeasible["criterion"].isna().all()
    best = best_subsets(scores)
    for k, size in best.items():
        g = scores[(scores.k == k) & scores.feasible]
        assert size == int(g.loc[g.criterion.idxmax(), "n_features"])
    assert dict(zip(chosen["k"], chosen["n_features"], strict=True)) == best
    unit = score_candidate(X, ranking[:4], 3, seed=1, n_init=3, row_norm=True, reg=1e-3,
                           theta=0.8)
    row = scores[(scores.k == 3) & (scores.n_features == 4)].iloc[0]
    assert unit["criterion"] == row["criterion"] or (np.isnan(unit["criterion"])
                                                     and np.isnan(row["criterion"]))


def test_best_subsets_falls_back_to_largest_coverage():
    scores = pd.DataFrame({"k": [2, 2], "n_features": [5, 10], "coverage": [0.5, 0.7],
                           "feasible": [False, False], "criterion": [np.nan, np.nan]})
    assert best_subsets(scores) == {2: 10}


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30), d=st.integers(1, 6),
       k=st.integers(1, 5), density=st.floats(0.0, 1.0))
def test_centers_are_cluster_means_and_the_nearest_is_the_brute_force_argmin(seed, n, d, k,
                                                                            density):
    """Independent truth: the mean of each cluster's rows by a loop, and every point's
    distance to every center written out (empty clusters are NaN and never chosen)."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, d)) * (rng.random((n, d)) < density)
    labels = rng.integers(0, k, size=n)
    centers = cluster_centers(sp.csr_matrix(Z), labels, k)
    for c in range(k):
        if (labels == c).any():
            np.testing.assert_allclose(centers[c], Z[labels == c].mean(axis=0), rtol=1e-12,
                                       atol=1e-12)
        else:
            assert np.isnan(centers[c]).all()
    new = rng.normal(size=(7, d)) * (rng.random((7, d)) < density)
    got, dist = nearest_center(sp.csr_matrix(new), centers)
    full = np.array([[np.inf if np.isnan(c).any() else np.sum((x - c) ** 2) for c in centers]
                     for x in new])
    best = full.min(axis=1)
    # the chosen center is a nearest one (up to rounding), never an empty one
    assert np.all(full[np.arange(7), got] <= best + 1e-9)
    np.testing.assert_allclose(dist, np.sqrt(best), rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(nearest_center(new, centers)[0], got)  # dense input too


def test_nearest_center_breaks_ties_by_the_lower_index_and_checks_shapes():
    centers = np.array([[1.0, 0.0], [0.0, 1.0], [np.nan, np.nan]])
    labels, dist = nearest_center(np.array([[0.0, 0.0], [0.0, 2.0]]), centers)
    np.testing.assert_array_equal(labels, [0, 1])
    np.testing.assert_allclose(dist, [1.0, 1.0])
    with pytest.raises(ValueError, match=r"centers must have shape \(k, 2\)"):
        nearest_center(np.zeros((1, 2)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="every center is empty"):
        nearest_center(np.zeros((1, 2)), np.full((2, 2), np.nan))
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 2\)"):
        cluster_centers(np.zeros((2, 2)), [0, 2], 2)
