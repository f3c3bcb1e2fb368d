"""Cross-projection comparison of feature subsets (Dy and Brodley, 2004, Sec. 4.2)."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.preprocessing import normalize

from algorithms.relations.model import RelationDiscovery
from algorithms.relations.selection import (
    best_subsets_cross_projection,
    cross_projection_values,
    invariant_criterion,
    search_subsets,
)


def _explicit_criterion(Z, labels, reg):
    """trace((P_W + lambda I)^-1 P_B) from explicit scatter matrices (loops over clusters)."""
    Z = np.asarray(Z, dtype=float)
    d = Z.shape[1]
    m = Z.mean(axis=0)
    P_W = np.zeros((d, d))
    P_B = np.zeros((d, d))
    for c in np.unique(labels):
        Zc = Z[labels == c]
        mc = Zc.mean(axis=0)
        P_W += (Zc - mc).T @ (Zc - mc)
        P_B += len(Zc) * np.outer(mc - m, mc - m)
    lam = reg * np.trace((Z - m).T @ (Z - m)) / d
    return np.trace(np.linalg.solve(P_W + lam * np.eye(d), P_B))


def test_values_are_each_clustering_scored_in_both_spaces():
    rng = np.random.default_rng(0)
    X = rng.random((30, 5)) * (rng.random((30, 5)) < 0.7)
    Zi = normalize(X[:, :2])
    Zj = normalize(X[:, :5])
    li = rng.integers(0, 3, size=30)
    lj = rng.integers(0, 3, size=30)
    vi, vj = cross_projection_values(sp.csr_matrix(Zi), li, sp.csr_matrix(Zj), lj, reg=0.1)
    assert vi == pytest.approx(_explicit_criterion(Zi, li, 0.1) * _explicit_criterion(Zj, li, 0.1),
                               rel=1e-9)
    assert vj == pytest.approx(_explicit_criterion(Zj, lj, 0.1) * _explicit_criterion(Zi, lj, 0.1),
                               rel=1e-9)


def _blobs(seed=0):
    # 4 blobs on a 2 x 2 grid in features 0-1, then 4 pure-noise features
    rng = np.random.default_rng(seed)
    centres = np.array([[0, 0], [0, 3], [3, 0], [3, 3]], dtype=float)
    y = np.repeat(np.arange(4), 15)
    X = np.hstack([centres[y] + rng.normal(0, 0.3, (60, 2)), rng.normal(0, 1.0, (60, 4))])
    return X, y


def _scores(k, sizes, crits):
    return pd.DataFrame({"k": k, "n_features": sizes, "coverage": 1.0, "feasible": True,
                         "criterion": crits})


def test_same_partition_ties_and_keeps_the_smaller_subset_where_max_takes_the_larger():
    # the dimension bias: one partition scored on more (noise) features scores higher
    X, y = _blobs()
    ranking = np.arange(6)
    crits = [invariant_criterion(X[:, :s], y, reg=0.1) for s in (2, 6)]
    assert crits[1] > crits[0]  # so the paper's rule would take all 6 features
    scores = _scores(4, [2, 6], crits)
    chosen, comp = best_subsets_cross_projection(X, ranking, scores, {(4, 2): y, (4, 6): y},
                                                 reg=0.1, row_norm=False)
    # both products are crit(S2, y) * crit(S6, y): a tie, the smaller prefix stays
    row = comp.iloc[0]
    assert row["value_best"] == pytest.approx(row["value_candidate"], rel=1e-12)
    assert row["value_best"] == pytest.approx(crits[0] * crits[1], rel=1e-9)
    assert chosen == {4: 2}


def test_a_better_partition_in_the_larger_subset_wins():
    # hand-worked: feature 0 alone sees two groups; k = 4 needs features 0 and 1.  C_1 (found
    # on feature 0) splits each x-group by the noise; C_2 is the true grid.
    X, y = _blobs(1)
    ranking = np.array([0, 1, 2, 3, 4, 5])
    x_group = (X[:, 0] > 1.5).astype(int)
    c1 = 2 * x_group + (X[:, 0] > np.where(x_group, 3.0, 0.0)).astype(int)
    sizes = [1, 2]
    crits = [invariant_criterion(X[:, :1], c1, reg=0.1), invariant_criterion(X[:, :2], y, reg=0.1)]
    chosen, comp = best_subsets_cross_projection(X, ranking, _scores(4, sizes, crits),
                                                 {(4, 1): c1, (4, 2): y}, reg=0.1,
                                                 row_norm=False)
    v1 = _explicit_criterion(X[:, :1], c1, 0.1) * _explicit_criterion(X[:, :2], c1, 0.1)
    v2 = _explicit_criterion(X[:, :2], y, 0.1) * _explicit_criterion(X[:, :1], y, 0.1)
    assert v2 > v1
    assert comp.iloc[0]["value_best"] == pytest.approx(v1, rel=1e-9)
    assert comp.iloc[0]["value_candidate"] == pytest.approx(v2, rel=1e-9)
    assert chosen == {4: 2}


def test_sequential_scan_skips_infeasible_prefixes_and_falls_back():
    X, y = _blobs(2)
    ranking = np.arange(6)
    scores = pd.DataFrame({"k": [4, 4, 4, 3], "n_features": [1, 2, 6, 2],
                           "coverage": [0.5, 1.0, 1.0, 0.5], "feasible": [False, True, True, False],
                           "criterion": [np.nan, invariant_criterion(X[:, :2], y, reg=0.1),
                                         invariant_criterion(X, y, reg=0.1), np.nan]})
    chosen, comp = best_subsets_cross_projection(X, ranking, scores, {(4, 2): y, (4, 6): y},
                                                 reg=0.1, row_norm=False)
    assert chosen == {3: 2, 4: 2}  # k=3: no feasible prefix, the fallback's choice
    assert comp[["k", "best", "candidate"]].values.tolist() == [[4, 2, 6]]


def test_search_labels_and_model_option():
    X, _ = _blobs(3)
    X = sp.csr_matrix(np.abs(X))
    frame, labels = search_subsets(X, np.arange(6), [2, 3], sizes=[2, 6], theta=0.5, seed=1,
                                   reg=0.1, return_labels=True)
    assert set(labels) == {(2, 2), (2, 6), (3, 2), (3, 6)}
    assert frame.equals(search_subsets(X, np.arange(6), [2, 3], sizes=[2, 6], theta=0.5,
                                       seed=1, reg=0.1))
    kw = dict(k_min=2, k_max=4, n_subsamples=2, n_steps=3, min_prefix=2, reg=0.1,
              random_state=2)
    model = RelationDiscovery(subset_rule="cross_projection", **kw).fit(X)
    last = model.subset_comparisons_.groupby("k")["winner"].last().to_dict()
    assert {k: v for k, v in model.subsets_.items() if k in last} == last
    assert RelationDiscovery(**kw).fit(X).subset_comparisons_ is None
    with pytest.raises(ValueError, match="subset_rule"):
        RelationDiscovery(subset_rule="ratio", **kw).fit(X)
