"""The whole method on synthetic contexts with three relation types."""

import numpy as np
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score

from algorithms.relations.entropy import entropy_ranking
from algorithms.relations.model import RelationDiscovery
from algorithms.relations.selection import score_candidate
from algorithms.relations.stability import stability_one_sample


def _synthetic(seed=0, n_per=40):
    rng = np.random.default_rng(seed)
    rows, y = [], []
    for t in range(3):
        for _ in range(n_per):
            row = np.abs(rng.normal(0.0, 0.25, 12)) * (rng.random(12) < 0.5)  # noise words
            row[2 * t: 2 * t + 2] += 1.0          # the type's own two words
            rows.append(row)
            y.append(t)
    return sp.csr_matrix(np.array(rows)), np.array(y)


def test_relation_discovery_finds_three_types_and_labels_them():
    X, y = _synthetic()
    names = np.array([f"w{j}" for j in range(12)], dtype=object)
    model = RelationDiscovery(k_min=2, k_max=5, n_subsamples=4, n_steps=4, min_prefix=3,
                              random_state=3).fit(X, feature_names=names)
    assert model.n_clusters_ == 3
    assert adjusted_rand_score(y, model.labels_) > 0.9
    assert set(model.stability_["k"]) == {2, 3, 4, 5}
    assert len(model.cluster_labels_) == 3
    first = {words[0] for words in model.cluster_labels_.values()}
    assert first <= {"w0", "w1", "w2", "w3", "w4", "w5"}
    # the estimator is the loop over the flow's units: same numbers unit by unit
    size = model.subsets_[3]
    ranking, _ = entropy_ranking(X, binary=True)
    np.testing.assert_array_equal(model.ranking_, ranking)
    unit = score_candidate(X, ranking[:size], 3, seed=3, return_labels=True)
    np.testing.assert_array_equal(unit["labels"], model.labels_)
    s = stability_one_sample(X, ranking[:size], 3, 1, seed=3)
    row = model.stability_samples_.query("k == 3 and sample_index == 1").iloc[0]
    assert s["m"] == row["m"]


def test_same_random_state_same_result():
    X, _ = _synthetic(seed=1, n_per=20)
    kw = dict(k_min=2, k_max=4, n_subsamples=2, n_steps=3, min_prefix=3, random_state=5)
    a = RelationDiscovery(**kw).fit(X)
    b = RelationDiscovery(**kw).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.stability_.equals(b.stability_)
