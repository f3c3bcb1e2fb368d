"""Hasegawa et al. (2004) baseline and the ranking ablations."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.spatial.distance import pdist
from sklearn.metrics import adjusted_rand_score

from scarce.algorithms.relations.baselines import (
    chi2_pseudo_ranking,
    chi2_ranking,
    cosine_distance_condensed,
    frequency_ranking,
    hasegawa_clustering,
    kmeans_baseline,
)


def test_blockwise_cosine_distances_equal_scipy_and_empty_rows_are_far():
    rng = np.random.default_rng(0)
    X = (rng.random((23, 6)) < 0.5) * rng.random((23, 6))
    X[X.sum(axis=1) == 0, 0] = 1.0
    np.testing.assert_allclose(cosine_distance_condensed(sp.csr_matrix(X), block_size=5),
                               pdist(X, "cosine"), atol=1e-12)
    Xe = np.vstack([X[:3], np.zeros((1, 6))])
    d = cosine_distance_condensed(sp.csr_matrix(Xe))
    np.testing.assert_allclose(d[[2, 4, 5]], 1.0)  # pairs (0,3), (1,3), (2,3)


def test_hasegawa_complete_linkage_recovers_word_groups():
    # three groups of pairs, each with its own between-words
    rows = [[1, 1, 0, 0, 0, 0]] * 5 + [[0, 0, 1, 1, 0, 0]] * 5 + [[0, 0, 0, 0, 1, 1]] * 5
    X = sp.csr_matrix(np.array(rows, dtype=float) + np.eye(15, 6) * 0.1)
    labels = hasegawa_clustering(X, 3)
    assert adjusted_rand_score(np.repeat([0, 1, 2], 5), labels) == 1.0
    with pytest.raises(ValueError, match="n_clusters"):
        hasegawa_clustering(X, 0)


def test_hasegawa_gives_exactly_k_clusters_when_merges_tie_at_distance_one():
    # six pairs with disjoint between-words: every distance is 1
    X = sp.csr_matrix(np.eye(6))
    assert np.unique(hasegawa_clustering(X, 3)).size == 3


def test_frequency_and_chi2_rankings_by_hand():
    X = sp.csr_matrix(np.array([[1, 1, 0], [1, 1, 0], [1, 0, 1], [1, 0, 1]], dtype=float))
    ranking, df = frequency_ranking(X)
    np.testing.assert_array_equal(ranking, [0, 1, 2])
    np.testing.assert_array_equal(df, [4, 2, 2])
    ranking, scores = chi2_ranking(X, [0, 0, 1, 1])
    assert scores[0] == 0.0  # word 0 occurs everywhere: no association
    assert ranking[-1] == 0 and set(ranking[:2]) == {1, 2}


def test_chi2_pseudo_labels_come_from_the_seeded_kmeans_baseline():
    rng = np.random.default_rng(1)
    X = sp.csr_matrix((rng.random((40, 7)) < 0.3).astype(float))
    pseudo = kmeans_baseline(X, 3, seed=4, n_init=3, row_norm=True)
    np.testing.assert_array_equal(chi2_pseudo_ranking(X, 3, seed=4, n_init=3, row_norm=True)[0],
                                  chi2_ranking(X, pseudo)[0])
