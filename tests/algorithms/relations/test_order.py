"""Model order: restarts and several reference clusterings of the stability step."""

import numpy as np
import pytest
import scipy.sparse as sp

from scarce.algorithms.relations.model import RelationDiscovery
from scarce.algorithms.relations.selection import full_kmeans_seed, kmeans_labels, prepare_subset
from scarce.algorithms.relations.stability import reference_labels, stability_one_sample


def _data(seed=0, n=90):
    """Sparse rows with many exact duplicates (as few selected words give)."""
    rng = np.random.default_rng(seed)
    protos = (rng.random((7, 12)) < 0.25).astype(float)
    protos[0] = 0.0
    X = protos[rng.integers(0, 7, size=n)]
    noise = rng.random((n, 12)) < 0.05
    X[noise] = 1.0
    return sp.csr_matrix(X)


KW = dict(k_low=2, k_high=4, ranking="frequency", n_prefixes=3, min_prefix=4, n_subsamples=3,
          n_init=1, theta=0.5)


def test_by_default_the_first_reference_is_the_clustering_the_search_scored():
    X = _data(1)
    model = RelationDiscovery(**KW).fit(X)
    k = model.n_clusters_
    Z = prepare_subset(X, model.ranking_[:model.subsets_[k]], row_norm=True)
    np.testing.assert_array_equal(
        model.labels_, kmeans_labels(Z, k, random_state=full_kmeans_seed(0, k), n_init=1))
    same = RelationDiscovery(**KW, n_init_reference=1, n_init_subsample=1).fit(X)
    assert model.stability_.equals(same.stability_)
    np.testing.assert_array_equal(model.labels_, same.labels_)


def test_reference_and_subsample_restarts_reach_their_clusterings_only():
    X = _data(2, n=120)
    opt = RelationDiscovery(**KW, n_init_reference=6, n_init_subsample=4).fit(X)
    k = opt.n_clusters_
    feats = opt.ranking_[:opt.subsets_[k]]
    c1 = reference_labels(X, feats, k, seed=0, n_init=6, row_norm=True, index=0)
    np.testing.assert_array_equal(opt.labels_, c1)
    row = stability_one_sample(X, feats, k, 1, [c1], seed=0, rho=0.9, n_init=4, row_norm=True)
    assert row["m"] == opt.stability_samples_.query("k == @k and sample_index == 1")["m"].item()
    # the subset search keeps n_init: the same search as without the options
    assert opt.search_.equals(RelationDiscovery(**KW).fit(X).search_)
    other = RelationDiscovery(**KW, n_init_reference=6, n_init_subsample=1).fit(X)
    assert not np.allclose(other.stability_samples_["m"], opt.stability_samples_["m"])


def test_several_references_average_eq2_and_one_reference_is_the_paper():
    X = _data(3, n=90)
    feats = np.arange(X.shape[1])
    k, mu = 3, 1
    refs = np.stack([reference_labels(X, feats, k, seed=0, n_init=2, row_norm=True, index=r)
                     for r in range(3)])
    # index 0 is the search's clustering (shared seed); the others have their own seeds
    np.testing.assert_array_equal(refs[0], kmeans_labels(
        prepare_subset(X, feats, row_norm=True), k, random_state=full_kmeans_seed(0, k),
        n_init=2))
    assert not all(np.array_equal(refs[0], r) for r in refs[1:])
    kw = dict(seed=0, rho=0.9, n_init=2, row_norm=True)
    one = [stability_one_sample(X, feats, k, mu, r, **kw)["m"] for r in refs]
    row = stability_one_sample(X, feats, k, mu, refs, **kw)
    assert row["m"] == pytest.approx(np.mean(one), abs=1e-12)
    assert row["m_random"] == pytest.approx(1 / k)
    model = RelationDiscovery(k_low=3, k_high=3, n_subsamples=2, n_init=2, n_references=3)
    samples, _, _, references = model.select_k(X, {3: feats})
    assert len(references[3]) == 3
    assert samples.loc[samples["sample_index"] == mu, "m"].item() == pytest.approx(row["m"])
    with pytest.raises(ValueError, match="items"):
        stability_one_sample(X, feats, k, mu, refs[:, :-1], **kw)
