"""The whole method on synthetic contexts, and its step methods."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.metrics import adjusted_rand_score

from scarce.algorithms.relations.entropy import entropy_ranking
from scarce.algorithms.relations.model import RelationDiscovery
from scarce.algorithms.relations.selection import score_candidate
from scarce.algorithms.relations.stability import reference_labels, stability_one_sample


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
    model = RelationDiscovery(k_low=2, k_high=5, n_subsamples=4, n_prefixes=4, min_prefix=3,
                              random_state=3).fit(X, feature_names=names)
    assert model.n_clusters_ == 3
    assert adjusted_rand_score(y, model.labels_) > 0.9
    assert set(model.stability_["k"]) == {2, 3, 4, 5}
    assert len(model.cluster_labels_) == 3
    first = {words[0] for words in model.cluster_labels_.values()}
    assert first <= {"w0", "w1", "w2", "w3", "w4", "w5"}
    # the estimator's units are the module functions with its parameters
    size = model.subsets_[3]
    ranking, _ = entropy_ranking(X, binary=True)
    np.testing.assert_array_equal(model.ranking_, ranking)
    feats = ranking[:size]
    row = model.search_.query("k == 3 and n_features == @size").iloc[0]
    assert score_candidate(X, feats, 3, seed=3, n_init=3, row_norm=True, reg=1e-3,
                           theta=0.9)["criterion"] == row["criterion"]
    c1 = reference_labels(X, feats, 3, seed=3, n_init=3, row_norm=True, index=0)
    np.testing.assert_array_equal(c1, model.labels_)
    s = stability_one_sample(X, feats, 3, 1, [c1], seed=3, rho=0.9, n_init=3, row_norm=True)
    assert s["m"] == model.stability_samples_.query("k == 3 and sample_index == 1")["m"].item()


def test_fit_is_the_loop_over_the_step_methods_in_any_order():
    """An outside driver calling the steps unit by unit (here in reverse order, one fresh
    estimator per call from ``step_params`` alone, as the flow's tasks do) gets fit's numbers."""
    X, _ = _synthetic(seed=2, n_per=25)
    model = RelationDiscovery(k_low=2, k_high=4, n_subsamples=3, n_prefixes=3, min_prefix=3,
                              reg=0.1, n_init_reference=4, n_init_subsample=2, n_references=2,
                              random_state=7)
    fitted = clone(model).fit(X)

    def step(name):
        return RelationDiscovery(**model.step_params(name))

    ranking, _ = step("rank").rank(X)
    rows = [step("score_candidate").score_candidate(X, ranking[:s], k)
            for k, s in reversed(model.candidate_units(ranking.size))]
    search, chosen = step("choose_subsets").choose_subsets(rows)
    sizes = dict(zip(chosen["k"], chosen["n_features"], strict=True))
    refs = {(k, r): step("cluster_reference").cluster_reference(X, ranking[:sizes[k]], k, r)
            for k, r in reversed(model.reference_units())}
    samples = [step("score_subsample").score_subsample(
        X, ranking[:sizes[k]], k, mu, [refs[(k, r)] for r in range(2)])
        for k, mu in reversed(model.stability_units())]
    table, curve, k = step("choose_k").choose_k(samples)

    np.testing.assert_array_equal(ranking, fitted.ranking_)
    pd.testing.assert_frame_equal(search, fitted.search_)
    assert sizes == fitted.subsets_
    pd.testing.assert_frame_equal(table, fitted.stability_samples_)
    pd.testing.assert_frame_equal(curve, fitted.stability_)
    assert k == fitted.n_clusters_
    np.testing.assert_array_equal(refs[(k, 0)], fitted.labels_)


def test_step_params_name_every_parameter_a_step_reads():
    """Record the parameters each step reads while it runs: all of them are in its
    ``step_params`` (the flow keys a task by these, so a missing one would serve stale
    results), for each ranking."""
    X, _ = _synthetic(seed=1, n_per=15)
    names = np.array([f"w{j}" for j in range(12)], dtype=object)
    params = set(RelationDiscovery._get_param_names())

    class Recording(RelationDiscovery):
        def __getattribute__(self, name):
            if name in params:
                object.__getattribute__(self, "read").add(name)
            return object.__getattribute__(self, name)

    seen = {}

    def run(ranking, step, *args):
        model = Recording(k_low=2, k_high=3, ranking=ranking, n_subsamples=2, min_prefix=3)
        model.read = set()
        out = getattr(model, step)(*args)
        read = set(model.read)
        assert read <= set(model.step_params(step)), (step, read)
        seen[step] = read
        return out

    for ranking in ("entropy", "frequency", "chi2", np.arange(12)[::-1]):
        order, _ = run(ranking, "rank", X)
    rows = [run("entropy", "score_candidate", X, order[:s], k) for k, s in ((2, 4), (3, 12))]
    run("entropy", "choose_subsets", rows)
    ref = run("entropy", "cluster_reference", X, order, 2, 1)
    samples = [run("entropy", "score_subsample", X, order, 2, mu, [ref]) for mu in (0, 1)]
    run("entropy", "choose_k", samples)
    run("entropy", "label", X, ref, names)
    centers = run("entropy", "centroids", X, order[:5], ref, 2)
    run("entropy", "assign", X, order[:5], centers)
    assert seen["assign"] == seen["centroids"] == {"row_norm"}
    assert {"n_init_reference", "n_init", "random_state"} <= seen["cluster_reference"]
    assert RelationDiscovery().step_params("score_candidate") == {
        "n_init": 3, "random_state": 0, "reg": 1e-3, "row_norm": True, "theta": 0.9}
    assert "n_subsamples" not in RelationDiscovery().step_params("score_subsample")
    with pytest.raises(ValueError, match="no step method"):
        RelationDiscovery().step_params("search")


def test_same_random_state_same_result_and_random_state_objects_work():
    X, _ = _synthetic(seed=1, n_per=20)
    kw = dict(k_low=2, k_high=4, n_subsamples=2, n_prefixes=3, min_prefix=3)
    a = RelationDiscovery(random_state=5, **kw).fit(X)
    b = RelationDiscovery(random_state=5, **kw).fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert a.stability_.equals(b.stability_)
    c = RelationDiscovery(random_state=np.random.RandomState(5), **kw).fit(X)
    assert set(c.stability_["k"]) == {2, 3, 4}
    with pytest.raises(ValueError, match="int random_state"):
        RelationDiscovery(random_state=None).cluster_reference(X, np.arange(12), 2, 0)


def test_bad_settings_are_errors_that_say_what_was_expected():
    X, _ = _synthetic(n_per=5)
    with pytest.raises(ValueError, match=r"k_low \(5\) must not exceed k_high \(3\)"):
        RelationDiscovery(k_low=5, k_high=3).fit(X)
    with pytest.raises(ValueError, match=r"k_high \(15\) must be below the number of pairs"):
        RelationDiscovery(k_high=15).fit(X)
    with pytest.raises(ValueError, match="ranking must be one of"):
        RelationDiscovery(ranking="tfidf", k_high=4).fit(X)
    with pytest.raises(ValueError, match="feature_names has 2 names"):
        RelationDiscovery(k_high=4).fit(X, feature_names=["a", "b"])


def test_predict_is_the_nearest_centroid_of_the_final_clustering():
    """Independent truth: the centroids as the mean of each cluster's normalised rows on the
    selected words, and each pair's distance to each written out.  On this data k-means
    stops at a fixed point, so predicting the training pairs gives ``labels_`` back."""
    X, _ = _synthetic(seed=4)
    model = RelationDiscovery(k_low=2, k_high=4, n_subsamples=3, n_prefixes=3, min_prefix=3,
                              random_state=5).fit(X)
    Z = X.toarray()[:, model.selected_features_]
    Z /= np.maximum(np.linalg.norm(Z, axis=1, keepdims=True), 1e-300)
    means = np.array([Z[model.labels_ == c].mean(axis=0) for c in range(model.n_clusters_)])
    np.testing.assert_allclose(model.cluster_centers_, means, rtol=1e-12, atol=1e-15)
    new, _ = _synthetic(seed=9, n_per=10)
    Zn = new.toarray()[:, model.selected_features_]
    Zn /= np.linalg.norm(Zn, axis=1, keepdims=True)
    brute = ((Zn[:, None, :] - means[None, :, :]) ** 2).sum(axis=2).argmin(axis=1)
    np.testing.assert_array_equal(model.predict(new), brute)
    np.testing.assert_array_equal(model.predict(X), model.labels_)
    np.testing.assert_array_equal(model.predict(new[5:6]), model.predict(new)[5:6])
    with pytest.raises(ValueError, match="X has 3 columns but the model was fitted on 12"):
        model.predict(sp.csr_matrix(np.ones((2, 3))))
    with pytest.raises(ValueError, match="not fitted yet"):
        RelationDiscovery().predict(X)
