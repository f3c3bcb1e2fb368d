"""Model-order options of the stability step: pairs of distinct points, reference restarts."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.relations.model import RelationDiscovery
from algorithms.relations.selection import (
    derived_seed,
    full_kmeans_seed,
    kmeans_labels,
    prepare_subset,
)
from algorithms.relations.stability import (
    choose_k,
    identical_groups,
    random_baseline,
    reference_labels,
    stability_curve,
    stability_index,
    stability_index_naive,
    stability_one_sample,
    subsample_indices,
)

triples = st.integers(2, 30).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 4), min_size=n, max_size=n),
    st.lists(st.integers(0, 4), min_size=n, max_size=n),
    st.lists(st.integers(0, 6), min_size=n, max_size=n)))


@settings(max_examples=100, deadline=None)
@given(triples)
def test_distinct_pair_stability_equals_connectivity_matrix_version(triple):
    a, b, g = map(np.array, triple)
    fast, naive = stability_index(a, b, g), stability_index_naive(a, b, g)
    if np.isnan(naive):
        assert np.isnan(fast)
    else:
        assert fast == pytest.approx(naive, rel=1e-12)


def test_distinct_pairs_by_hand():
    # reference C: {0,1,2}, {3,4}; subsample clustering: {0,1}, {2,3,4}
    ref = np.array([0, 0, 0, 1, 1])
    sub = np.array([0, 0, 1, 1, 1])
    # points 0 and 1 are the same vector, and so are 3 and 4
    groups = np.array([0, 0, 1, 2, 2])
    # together in C: 01 02 12 34; without the identical pairs 01 and 34: 02 12 (2)
    # of which together in sub: none -> 0 (all pairs: 2 of 4 -> 0.5)
    assert stability_index(sub, ref) == pytest.approx(0.5)
    assert stability_index(sub, ref, groups) == pytest.approx(0.0)
    # a group that k-means split is still left out: pairs 02 12 34 (3), together in sub: 34
    groups = np.array([0, 1, 2, 3, 3])
    assert stability_index(sub, ref, np.array([0, 1, 2, 3, 4])) == pytest.approx(0.5)
    assert stability_index(sub, ref, groups) == pytest.approx(1 / 3)


def test_identical_groups_by_hand():
    X = sp.csr_matrix(np.array([[1.0, 0, 2], [0, 0, 0], [1.0, 0, 2], [1.0, 0, 2.5],
                                [0, 0, 0], [0, 3.0, 0]]))
    assert identical_groups(X).tolist() == [0, 1, 0, 2, 1, 3]
    # explicit zeros and unsorted indices do not make two equal rows differ
    Y = sp.csr_matrix((np.array([2.0, 1.0, 0.0]), np.array([2, 0, 1]), np.array([0, 3])),
                      shape=(1, 3))
    assert identical_groups(sp.vstack([X[:1], Y]).tocsr()).tolist() == [0, 0]


def test_closed_form_random_baseline_is_exact_for_distinct_pairs():
    ref = np.array([0, 0, 1, 1, 1])
    groups = np.array([0, 0, 1, 2, 2])
    k = 3
    values = [stability_index(np.array(lab), ref, groups)
              for lab in itertools.product(range(k), repeat=ref.size)]
    assert np.mean(values) == pytest.approx(1 / k, rel=1e-12)
    sim = random_baseline(k, ref, method="simulated", n_draws=400, seed=2, groups=groups)
    assert sim == pytest.approx(1 / k, abs=0.05)


def _data(seed=0, n=90):
    """Sparse rows with many exact duplicates (as few selected words give)."""
    rng = np.random.default_rng(seed)
    protos = (rng.random((7, 12)) < 0.25).astype(float)
    protos[0] = 0.0
    X = protos[rng.integers(0, 7, size=n)]
    noise = rng.random((n, 12)) < 0.05
    X[noise] = 1.0
    return sp.csr_matrix(X)


def test_one_sample_distinct_equals_naive_on_duplicated_rows():
    X = _data()
    feats = np.arange(X.shape[1])
    Z = prepare_subset(X, feats)
    g = identical_groups(Z)
    assert np.unique(g).size < X.shape[0]  # the data do have repeated vectors
    k, mu = 4, 1
    full = kmeans_labels(Z, k, random_state=full_kmeans_seed(0, k), n_init=2)
    row_all = stability_one_sample(X, feats, k, mu, n_init=2, full_labels=full)
    row_dist = stability_one_sample(X, feats, k, mu, n_init=2, full_labels=full,
                                    pairs="distinct")
    idx = subsample_indices(X.shape[0], 0.9, 0, mu)
    sub = kmeans_labels(Z[idx], k, random_state=derived_seed(0, 2, k, mu), n_init=2)
    assert row_all["m"] == pytest.approx(stability_index_naive(sub, full[idx]), rel=1e-12)
    assert row_dist["m"] == pytest.approx(stability_index_naive(sub, full[idx], g[idx]),
                                          rel=1e-12)
    assert row_dist["m_random"] == row_all["m_random"] == pytest.approx(1 / k)
    with pytest.raises(ValueError, match="pairs"):
        stability_one_sample(X, feats, k, mu, pairs="unique")


def test_reference_restarts_reach_the_reference_clustering_only():
    X = _data(1)
    feats = np.arange(X.shape[1])
    subsets = {3: feats, 5: feats[:8]}
    # default: C per k is the search's clustering (shared seed, n_init restarts)
    samples, curve = stability_curve(X, subsets, n_samples=3, n_init=2)
    explicit = {k: kmeans_labels(prepare_subset(X, f), k, random_state=full_kmeans_seed(0, k),
                                 n_init=2) for k, f in subsets.items()}
    samples2, curve2 = stability_curve(X, subsets, n_samples=3, n_init=2,
                                       full_labels=explicit)
    assert samples.equals(samples2)
    # more restarts for C: the same as passing C computed with those restarts
    ref = {k: reference_labels(X, f, k, n_init=7) for k, f in subsets.items()}
    samples3, _ = stability_curve(X, subsets, n_samples=3, n_init=2, n_init_reference=7)
    samples4, _ = stability_curve(X, subsets, n_samples=3, n_init=2, full_labels=ref)
    assert samples3.equals(samples4)


def test_model_options_reach_stability_and_final_clustering():
    X = _data(2, n=120)
    base = RelationDiscovery(k_min=2, k_max=4, ranking="frequency", n_steps=3, min_prefix=4,
                             n_subsamples=3, n_init=1, theta=0.5).fit(X)
    same = RelationDiscovery(k_min=2, k_max=4, ranking="frequency", n_steps=3, min_prefix=4,
                             n_subsamples=3, n_init=1, theta=0.5, n_init_reference=1).fit(X)
    assert base.stability_.equals(same.stability_)
    np.testing.assert_array_equal(base.labels_, same.labels_)
    opt = RelationDiscovery(k_min=2, k_max=4, ranking="frequency", n_steps=3, min_prefix=4,
                            n_subsamples=3, n_init=1, theta=0.5, n_init_reference=6,
                            stability_pairs="distinct").fit(X)
    k = opt.n_clusters_
    expected = reference_labels(X, opt.ranking_[:opt.subsets_[k]], k, n_init=6)
    np.testing.assert_array_equal(opt.labels_, expected)
    # the distinct-pair curve is the mean of per-sample distinct-pair indices
    curve = stability_curve(X, {kk: opt.ranking_[:s] for kk, s in opt.subsets_.items()},
                            n_samples=3, n_init=1, pairs="distinct", n_init_reference=6)[1]
    np.testing.assert_allclose(curve["m_norm"], opt.stability_["m_norm"])


def _curve(m_norm, m_std, n=16):
    import pandas as pd

    ks = list(range(2, 2 + len(m_norm)))
    return pd.DataFrame({"k": ks, "m_norm": m_norm, "m_std": m_std, "n_samples": n})


def test_one_se_rule_takes_the_smallest_k_within_one_standard_error():
    # max 0.70 at k=6 with se = 0.08 / 4 = 0.02: k=3 (0.69) is within it, k=2 (0.60) is not
    curve = _curve([0.60, 0.69, 0.50, 0.68, 0.70, 0.65], [0.1, 0.1, 0.1, 0.1, 0.08, 0.1])
    assert choose_k(curve) == 6
    assert choose_k(curve, rule="one_se") == 3
    # a wider spread at the maximum widens the band: se = 0.48 / 4 = 0.12 reaches k=2
    curve.loc[curve["k"] == 6, "m_std"] = 0.48
    assert choose_k(curve, rule="one_se") == 2
    # no spread (one subsample or identical values): the rule is the maximum
    assert choose_k(_curve([0.6, 0.7, 0.69], [0.0, 0.0, 0.0]), rule="one_se") == 3
    with pytest.raises(ValueError, match="rule"):
        choose_k(curve, rule="elbow")


def test_subsample_restarts_and_k_rule_reach_the_model():
    X = _data(2, n=120)
    kw = dict(k_min=2, k_max=4, ranking="frequency", n_steps=3, min_prefix=4, n_subsamples=3,
              n_init=1, theta=0.5)
    opt = RelationDiscovery(**kw, n_init_subsample=4, n_init_reference=2, k_rule="one_se").fit(X)
    subsets = {kk: opt.ranking_[:s] for kk, s in opt.subsets_.items()}
    # C^mu with 4 restarts, C with 2: the same as the driver with those restarts
    samples, curve = stability_curve(X, subsets, n_samples=3, n_init=4, n_init_reference=2)
    assert samples.equals(opt.stability_samples_)
    assert opt.n_clusters_ == choose_k(curve, rule="one_se")
    other, _ = stability_curve(X, subsets, n_samples=3, n_init=1, n_init_reference=2)
    assert not np.allclose(other["m"], samples["m"])


def test_several_references_average_eq2_and_one_reference_is_the_paper():
    X = _data(3, n=90)
    feats = np.arange(X.shape[1])
    k, mu = 3, 1
    refs = np.stack([reference_labels(X, feats, k, n_init=2, index=r) for r in range(3)])
    # index 0 is the search's clustering (shared seed); the others have their own seeds
    np.testing.assert_array_equal(refs[0], kmeans_labels(
        prepare_subset(X, feats), k, random_state=full_kmeans_seed(0, k), n_init=2))
    assert not all(np.array_equal(refs[0], r) for r in refs[1:])
    one = [stability_one_sample(X, feats, k, mu, n_init=2, full_labels=r)["m"] for r in refs]
    row = stability_one_sample(X, feats, k, mu, n_init=2, full_labels=refs)
    assert row["m"] == pytest.approx(np.mean(one), abs=1e-12)
    assert row["m_random"] == pytest.approx(1 / k)
    samples, _ = stability_curve(X, {k: feats}, n_samples=2, n_init=2, n_init_reference=2,
                                 n_references=3)
    assert samples.loc[samples["sample_index"] == mu, "m"].item() == pytest.approx(row["m"])
    with pytest.raises(ValueError, match="items"):
        stability_one_sample(X, feats, k, mu, full_labels=refs[:, :-1])
