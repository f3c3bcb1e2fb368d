"""Stability (Eqs. 2-3): contingency counts equal connectivity matrices; random baseline."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from scarce.algorithms.relations.model import RelationDiscovery
from scarce.algorithms.relations.stability import (
    choose_k,
    random_baseline,
    reference_labels,
    stability_index,
    stability_index_naive,
    stability_one_sample,
    subsample_indices,
    summarize_stability,
)

labelings = st.integers(2, 40).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 5), min_size=n, max_size=n),
    st.lists(st.integers(0, 5), min_size=n, max_size=n)))


@settings(max_examples=100, deadline=None)
@given(labelings)
def test_contingency_stability_equals_connectivity_matrix_version(pair):
    a, b = map(np.array, pair)
    fast, naive = stability_index(a, b), stability_index_naive(a, b)
    if np.isnan(naive):
        assert np.isnan(fast)
    else:
        assert fast == pytest.approx(naive, rel=1e-12)


def test_stability_by_hand():
    # reference C: {0,1,2}, {3,4}; subsample clustering: {0,1}, {2,3,4}
    ref = np.array([0, 0, 0, 1, 1])
    sub = np.array([0, 0, 1, 1, 1])
    # pairs together in C: 01 02 12 34 (4); also together in sub: 01, 34 (2)
    assert stability_index(sub, ref) == pytest.approx(0.5)


def test_random_baseline_one_over_k_is_the_exact_expectation_over_all_labelings():
    ref = np.array([0, 0, 1, 1, 1])
    k = 3
    values = [stability_index(np.array(lab), ref)
              for lab in itertools.product(range(k), repeat=ref.size)]
    assert np.mean(values) == pytest.approx(random_baseline(k), rel=1e-12)
    assert random_baseline(k) == pytest.approx(1 / 3)


def _blobs(seed=0, n_per=30, k=3, dim=6):
    rng = np.random.default_rng(seed)
    centers = np.eye(dim)[:k] * 5
    X = np.vstack([c + rng.normal(scale=0.3, size=(n_per, dim)) for c in centers])
    return sp.csr_matrix(np.abs(X))


def test_units_reproduce_the_estimator_and_clear_structure_picks_true_k():
    X = _blobs()
    feats = np.arange(X.shape[1])
    model = RelationDiscovery(k_low=2, k_high=5, n_subsamples=4, row_norm=False, random_state=7)
    samples, curve, k, refs = model.select_k(X, dict.fromkeys(range(2, 6), feats))
    c1 = reference_labels(X, feats, 3, seed=7, n_init=3, row_norm=False, index=0)
    np.testing.assert_array_equal(refs[3][0], c1)
    unit = stability_one_sample(X, feats, 3, 2, [c1], seed=7, rho=0.9, n_init=3,
                                row_norm=False)
    row = samples[(samples.k == 3) & (samples.sample_index == 2)].iloc[0]
    assert unit["m"] == row["m"]
    assert k == choose_k(curve) == 3
    np.testing.assert_allclose(curve["m_norm"], curve["m_mean"] - 1 / curve["k"])


def test_subsamples_are_seeded_and_shared_across_k():
    a = subsample_indices(100, 0.9, seed=3, sample_index=1)
    assert a.size == 90 and np.unique(a).size == 90
    np.testing.assert_array_equal(a, subsample_indices(100, 0.9, seed=3, sample_index=1))
    assert not np.array_equal(a, subsample_indices(100, 0.9, seed=3, sample_index=2))
    with pytest.raises(ValueError, match="rho"):
        subsample_indices(100, 1.5, 0, 0)


def test_choose_k_takes_largest_difference_and_smallest_k_on_ties():
    import pandas as pd
    s = pd.DataFrame({"k": [2, 2, 4, 4], "n_features": 5, "sample_index": [0, 1, 0, 1],
                      "m": [0.9, 0.9, 0.5, 1.0], "m_random": [0.5, 0.5, 0.25, 0.25]})
    curve = summarize_stability(s)
    np.testing.assert_allclose(curve["m_norm"], [0.4, 0.5])
    assert choose_k(curve) == 4
    tie = curve.assign(m_norm=[0.5, 0.5])
    assert choose_k(tie) == 2
