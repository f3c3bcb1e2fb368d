"""Mapped accuracy (Hungarian) on hand-worked tables; ARI and V equal scikit-learn's."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score, v_measure_score

from scarce.algorithms.metrics.clustering import (
    clustering_scores,
    mapped_accuracy,
    mapped_accuracy_from_table,
)


def _labels_from_table(table):
    y_true, y_pred = [], []
    for i, row in enumerate(table):
        for j, c in enumerate(row):
            y_true += [i] * c
            y_pred += [j] * c
    return np.array(y_true), np.array(y_pred)


def test_hungarian_beats_greedy_on_hand_table():
    # greedy takes 5 then is left with 0 (5/13); the best one-to-one mapping is 4 + 4
    table = [[5, 4], [4, 0]]
    assert mapped_accuracy_from_table(table) == pytest.approx(8 / 13)
    y_true, y_pred = _labels_from_table(table)
    assert mapped_accuracy(y_true, y_pred) == pytest.approx(8 / 13)


def test_more_clusters_than_types_counts_unmapped_cluster_as_errors():
    table = [[3, 0, 2], [0, 4, 1]]
    y_true, y_pred = _labels_from_table(table)
    assert mapped_accuracy(y_true, y_pred) == pytest.approx(7 / 10)


def test_three_by_three_hand_table():
    # best: type0->c0 (5), type1->c2 (4), type2->c1 (0): 9 of 16
    assert mapped_accuracy_from_table([[5, 1, 0], [0, 2, 4], [3, 0, 1]]) == pytest.approx(9 / 16)


@settings(max_examples=50, deadline=None)
@given(st.integers(2, 60).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 4), min_size=n, max_size=n),
    st.lists(st.sampled_from("abcde"), min_size=n, max_size=n))))
def test_scores_match_sklearn_and_accuracy_is_invariant_to_renaming(pair):
    y_true, y_pred = map(np.array, pair)
    s = clustering_scores(y_true, y_pred)
    assert s["ari"] == pytest.approx(adjusted_rand_score(y_true, y_pred))
    assert s["v_measure"] == pytest.approx(v_measure_score(y_true, y_pred))
    renamed = np.char.add("x", y_pred)
    assert mapped_accuracy(y_true, renamed) == pytest.approx(s["accuracy"])
    from sklearn.metrics.cluster import contingency_matrix
    assert s["accuracy"] >= contingency_matrix(y_true, y_pred).max() / y_true.size - 1e-12
    assert 0 < s["accuracy"] <= 1


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="y_true has 3 items but y_pred has 2"):
        mapped_accuracy([0, 1, 1], [0, 1])
