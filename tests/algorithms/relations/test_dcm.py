"""DCM label weights (Fung, Yu and Lu, 2002) on a hand-worked example."""

import numpy as np
import pytest

from scarce.algorithms.relations.dcm import dcm_weights, top_words


def _example():
    # words a, b, c; cluster 0 = pairs 0-2, cluster 1 = pair 3
    X = np.array([[1, 1, 0],
                  [1, 0, 0],
                  [2, 0, 0],   # counts: presence only matters
                  [0, 1, 0]], dtype=float)
    return X, np.array([0, 0, 0, 1])


def test_dcm_weights_by_hand():
    X, labels = _example()
    W, WC, CC, clusters = dcm_weights(X, labels)
    # WC_a0 = log2(3+1)/log2(3+1) = 1, WC_a1 = 0; WC_b0 = log2 2/log2 4 = 0.5, WC_b1 = 1
    np.testing.assert_allclose(WC, [[1.0, 0.5, 0.0], [0.0, 1.0, 0.0]])
    # CC_a = log(2*1/1)/log 2 = 1; CC_b = log(2*1/1.5)/log 2 = log2(4/3); c occurs nowhere
    np.testing.assert_allclose(CC, [1.0, 0.41503749927884376, 0.0])
    # W = sqrt2 WC^2 CC^2 / sqrt(WC^2 + CC^2), worked out on paper
    np.testing.assert_allclose(W, [[1.0, 0.09372203338828626, 0.0],
                                   [0.0, 0.22499787566752757, 0.0]], rtol=1e-12)
    np.testing.assert_array_equal(clusters, [0, 1])
    assert W.min() >= 0 and W.max() <= 1


def test_top_two_words_per_cluster_skip_zero_weights():
    X, labels = _example()
    top = top_words(X, labels, ["a", "b", "c"], n_words=2)
    assert [w for w, _ in top[0]] == ["a", "b"]
    assert [w for w, _ in top[1]] == ["b"]
    assert top[0][0][1] == pytest.approx(1.0)


def test_single_cluster_reports_most_typical_words():
    X, _ = _example()
    W, _, CC, _ = dcm_weights(X, np.zeros(4, dtype=int))
    np.testing.assert_allclose(CC, [1.0, 1.0, 0.0])
    assert W[0, 0] > W[0, 1] > W[0, 2] == 0


def test_label_length_mismatch_is_an_error():
    X, labels = _example()
    with pytest.raises(ValueError, match="labels has shape"):
        dcm_weights(X, labels[:3])
