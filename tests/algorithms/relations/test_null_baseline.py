"""Null-data baseline of Eq. 3 (``baseline="null_permuted"``, Dudoit and Fridlyand's Clest)."""

import numpy as np
import pytest
import scipy.sparse as sp

from algorithms.relations.model import RelationDiscovery
from algorithms.relations.selection import derived_seed, kmeans_labels, prepare_subset
from algorithms.relations.stability import (
    null_dataset,
    null_references,
    reference_labels,
    stability_curve,
    stability_index_naive,
    stability_one_sample,
    subsample_indices,
)


def _data(seed=0, n=40, m=7):
    rng = np.random.default_rng(seed)
    dense = (rng.random((n, m)) < 0.35) * rng.integers(1, 4, size=(n, m))
    return sp.csr_matrix(dense.astype(np.float64))


def test_null_dataset_permutes_each_column_and_is_seeded():
    X = _data()
    feats = np.array([5, 0, 3, 6])
    N = null_dataset(X, feats, seed=2, k=3, null_index=1)
    assert N.shape == (X.shape[0], feats.size)
    dense_x, dense_n = X[:, feats].toarray(), N.toarray()
    for j in range(feats.size):  # every column keeps its multiset of values
        np.testing.assert_array_equal(np.sort(dense_n[:, j]), np.sort(dense_x[:, j]))
    assert not np.array_equal(dense_n, dense_x)
    # brute force: dense column j moved by the same seeded permutations
    rng = np.random.default_rng(np.random.SeedSequence([2, 4, 3, 1]))
    expect = np.empty_like(dense_x)
    for j in range(feats.size):
        expect[rng.permutation(X.shape[0]), j] = dense_x[:, j]
    np.testing.assert_array_equal(dense_n, expect)
    np.testing.assert_array_equal(N.toarray(), null_dataset(X, feats, 2, 3, 1).toarray())
    assert not np.array_equal(dense_n, null_dataset(X, feats, 2, 3, 2).toarray())
    assert not np.array_equal(dense_n, null_dataset(X, feats, 2, 4, 1).toarray())


def test_null_baseline_equals_brute_force_recomputation():
    X = _data(1, n=30)
    feats, k, mu, seed, n_null = np.array([0, 2, 4, 5]), 3, 1, 4, 2
    refs = np.stack([kmeans_labels(prepare_subset(X, feats), k, n_init=2,
                                   random_state=derived_seed(seed, 0, k, r)) for r in (0, 1)])
    row = stability_one_sample(X, feats, k, mu, seed=seed, n_init=2, full_labels=refs,
                               baseline="null_permuted", n_null=n_null)
    idx = subsample_indices(X.shape[0], 0.9, seed, mu)
    m_obs, m_null = [], []
    for ref in refs:
        sub = kmeans_labels(prepare_subset(X, feats)[idx], k, n_init=2,
                            random_state=derived_seed(seed, 2, k, mu))
        m_obs.append(stability_index_naive(sub, ref[idx]))
    for b in range(n_null):
        Zb = prepare_subset(null_dataset(X, feats, seed, k, b), np.arange(feats.size))
        sub = kmeans_labels(Zb[idx], k, n_init=2, random_state=derived_seed(seed, 6, k, b, mu))
        m_null.append(np.mean([
            stability_index_naive(sub, kmeans_labels(Zb, k, n_init=2, random_state=derived_seed(
                seed, 5, k, b, r))[idx]) for r in (0, 1)]))
    assert row["m"] == pytest.approx(np.mean(m_obs), rel=1e-12)
    assert row["m_random"] == pytest.approx(np.mean(m_null), rel=1e-12)
    # precomputed null references (the driver's path) give the same number
    pre = null_references(X, feats, k, n_null=n_null, n_references=2, seed=seed, n_init=2)
    again = stability_one_sample(X, feats, k, mu, seed=seed, n_init=2, full_labels=refs,
                                 baseline="null_permuted", n_null=n_null, null_labels=pre)
    assert again == row


def test_null_curve_is_deterministic_and_model_uses_it():
    X = _data(2, n=36)
    subsets = {k: np.arange(5) for k in (2, 3)}
    kw = dict(n_samples=2, seed=5, n_init=1, baseline="null_permuted", n_null=2)
    s1, c1 = stability_curve(X, subsets, **kw)
    s2, c2 = stability_curve(X, subsets, **kw)
    assert s1.equals(s2) and c1.equals(c2)
    assert not np.allclose(c1["m_random"], 1.0 / c1["k"])
    np.testing.assert_allclose(c1["m_norm"], c1["m_mean"] - c1["m_random"])
    model = RelationDiscovery(k_min=2, k_max=3, ranking="frequency", n_subsamples=2, n_init=1,
                              min_prefix=3, n_steps=2, baseline="null_permuted", n_null=2,
                              random_state=5).fit(X)
    again = RelationDiscovery(**model.get_params()).fit(X)
    assert model.stability_.equals(again.stability_)
    assert model.n_clusters_ in (2, 3)
    with pytest.raises(ValueError, match="baseline"):
        stability_one_sample(X, np.arange(3), 2, 0, baseline="permuted")
    with pytest.raises(ValueError, match="n_null"):
        stability_one_sample(X, np.arange(3), 2, 0, baseline="null_permuted", n_null=0)


def test_curve_sharing_null_data_across_subsamples_equals_units_building_their_own():
    X = _data(3, n=32)
    feats, seed = np.arange(6), 7
    samples, _ = stability_curve(X, {3: feats}, n_samples=3, seed=seed, n_init=2,
                                 n_references=2, baseline="null_permuted", n_null=2)
    refs = np.stack([reference_labels(X, feats, 3, seed=seed, index=r, n_init=2)
                     for r in (0, 1)])
    for mu in range(3):  # each unit alone builds its null datasets and their references
        row = stability_one_sample(X, feats, 3, mu, seed=seed, n_init=2, full_labels=refs,
                                   baseline="null_permuted", n_null=2)
        assert samples.iloc[mu]["m_random"] == pytest.approx(row["m_random"], rel=1e-12)
        assert samples.iloc[mu]["m"] == pytest.approx(row["m"], rel=1e-12)
