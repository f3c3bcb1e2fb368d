"""Entropy ranking: fast exact versions equal the naive O(M^2 N^2) formula."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from scarce.algorithms.relations.entropy import (
    LN2,
    data_entropy,
    entropy_ranking,
    entropy_ranking_naive,
    entropy_scores,
    pair_entropy,
)

binary_matrices = st.tuples(st.integers(2, 14), st.integers(1, 7)).flatmap(
    lambda s: arrays(np.int8, s, elements=st.integers(0, 1)))


@settings(max_examples=60, deadline=None)
@given(binary_matrices, st.integers(1, 5))
def test_histogram_entropy_equals_naive_formula_on_binary_data(Xb, block):
    X = Xb.astype(float)
    _, naive = entropy_ranking_naive(X)
    fast = entropy_scores(sp.csr_matrix(X), binary=True, block_size=block)
    np.testing.assert_allclose(fast, naive, rtol=1e-10, atol=1e-10)


@settings(max_examples=40, deadline=None)
@given(binary_matrices, st.integers(0, 2**16))
def test_real_valued_entropy_equals_naive_formula(Xb, seed):
    rng = np.random.default_rng(seed)
    X = Xb * rng.uniform(0.1, 2.0, size=Xb.shape)
    _, naive = entropy_ranking_naive(X)
    fast = entropy_scores(X, binary=False)
    np.testing.assert_allclose(fast, naive, rtol=1e-9, atol=1e-9)


def test_real_valued_chebyshev_path_equals_naive_with_many_features():
    # > 17 distinct alphas triggers the interpolated Phi(alpha)
    rng = np.random.default_rng(3)
    X = (rng.random((30, 40)) < 0.2) * rng.uniform(0.1, 1.0, (30, 40))
    _, naive = entropy_ranking_naive(X)
    fast = entropy_scores(sp.csr_matrix(X), binary=False)
    np.testing.assert_allclose(fast, naive, rtol=1e-10)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([True, False]))
def test_ranking_equals_naive_and_orders_by_absolute_entropy_change(seed, binary):
    rng = np.random.default_rng(seed)
    X = (rng.random((30, 12)) < 0.25) * (1.0 if binary else rng.uniform(0.2, 1.5, (30, 12)))
    r_fast, s_fast = entropy_ranking(sp.csr_matrix(X), binary=binary)
    r_naive, s_naive = entropy_ranking_naive(X)
    np.testing.assert_array_equal(r_fast, r_naive)
    np.testing.assert_allclose(s_fast, s_naive, rtol=1e-9)
    # |E_-w - E| with E by direct summation is non-increasing along the ranking
    change = np.abs(s_naive - data_entropy(X))[r_naive]
    assert np.all(np.diff(change) <= 1e-9 * max(1.0, change.max()))


def test_word_in_every_pair_changes_nothing_and_is_ranked_last():
    # removing a column constant over all rows leaves every distance as it is: E_-w = E
    rng = np.random.default_rng(4)
    X = (rng.random((25, 8)) < 0.3).astype(float)
    X[:, 3] = 1.0
    ranking, scores = entropy_ranking(sp.csr_matrix(X))
    assert scores[3] == pytest.approx(data_entropy(X), rel=1e-12)
    assert ranking[-1] == 3


def test_data_entropy_by_hand_for_three_points():
    # points 0, 1, 3 on a line: distances 1, 3, 2, mean 2, alpha = ln2/2
    X = np.array([[0.0], [1.0], [3.0]])
    d = np.array([1.0, 3.0, 2.0])
    s = np.exp(-LN2 / 2 * d)
    expected = -2 * np.sum(s * np.log(s) + (1 - s) * np.log(1 - s))
    assert data_entropy(X) == pytest.approx(expected, rel=1e-12)
    assert pair_entropy(np.array([0.0]))[0] == 0.0  # S = 1 contributes nothing


def test_subsample_is_seeded_and_words_absent_from_it_score_the_sample_entropy():
    rng = np.random.default_rng(1)
    X = sp.csr_matrix((rng.random((60, 12)) < 0.2).astype(float))
    a = entropy_scores(X, n_samples=20, random_state=5)
    b = entropy_scores(X, n_samples=20, random_state=5)
    np.testing.assert_array_equal(a, b)
    idx = np.sort(np.random.RandomState(5).choice(60, 20, replace=False))
    sub = X[idx]
    np.testing.assert_allclose(a, entropy_ranking_naive(sub.toarray())[1], rtol=1e-10)
    absent = np.flatnonzero(sub.getnnz(axis=0) == 0)
    for w in absent:
        assert a[w] == pytest.approx(data_entropy(sub), rel=1e-12)


def test_binary_auto_detection_and_bad_arguments():
    X = sp.csr_matrix(np.array([[1.0, 0, 1], [0, 1, 1], [1, 1, 0]]))
    np.testing.assert_allclose(entropy_scores(X), entropy_scores(X, binary=True))
    with pytest.raises(ValueError, match="binary"):
        entropy_scores(X, binary="yes")
    with pytest.raises(ValueError, match="at least 2 rows"):
        entropy_scores(X[:1])
