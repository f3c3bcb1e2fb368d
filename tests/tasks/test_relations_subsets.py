"""A subset of words is a set: clustered the same whichever order the ranking gave it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import scarce.tasks.relations as rel
from scarce.flows.relations import RelationsConfig
from scarce.tasks.code_digest import PROJECT_ROOT

FEWREL = PROJECT_ROOT / "data" / "relations" / "fewrel" / "val_wiki.jsonl.gz"


@pytest.fixture(scope="module")
def fewrel():
    """800 pairs of 8 FewRel relations, featurised and ranked as the flow does."""
    labels = pd.read_json(FEWREL, lines=True)["label"].drop_duplicates().tolist()[:8]
    config = RelationsConfig(data=[str(FEWREL)], relation_types=labels, max_pairs=800,
                             dataset="fewrel-8")
    model = config.estimator()
    part = rel.parse.fn(path=str(FEWREL), fmt="auto", relation_types=labels,
                        include_other=False, directed=False, source=FEWREL.name)
    data = rel.combine.fn(parts=[part], max_pairs=800, seed=0)
    feats = rel.extract_features.fn(
        mentions=data["mentions"], window=config.window, weighting=config.weighting,
        position_tags=config.position_tags, lowercase=config.lowercase, min_df=config.min_df)
    ranking = rel.rank_features.fn(X=feats["X"], vocabulary=feats["vocabulary"],
                                   params=model.step_params("rank"))
    return model, feats["X"], ranking


def test_f_k_of_every_word_is_rlbaselines_space(fewrel):
    """With F_k every word, the method's references and subsample scores are RLBaseline's (on
    all words) to the bit.  (Taken in the ranking's order, k-means at k = 3 ended in another
    partition on these pairs: ARI 0.25 against the column order, M 0.77 against 0.70.)"""
    model, X, ranking = fewrel
    n = X.shape[1]
    assert ranking["feature"].tolist() != list(range(n))  # the ranking is another order
    ref = model.step_params("cluster_reference")
    sub = model.step_params("score_subsample")
    for k in (3, 5):
        ours = [rel.cluster_reference.fn(X, ranking, k=k, n_features=n, all_features=False,
                                         index=r, params=ref) for r in range(2)]
        theirs = [rel.cluster_reference.fn(X, None, k=k, n_features=n, all_features=True,
                                           index=r, params=ref) for r in range(2)]
        for a, b in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(a, b)
        for mu in range(3):
            a = rel.score_subsample.fn(X, ranking, ours, k=k, n_features=n, all_features=False,
                                       sample_index=mu, params=sub)
            b = rel.score_subsample.fn(X, None, theirs, k=k, n_features=n, all_features=True,
                                       sample_index=mu, params=sub)
            assert a["m"].item() == b["m"].item()


def test_a_prefix_is_clustered_in_column_order(fewrel):
    """A prefix's columns are its words in column order, the estimator's
    ``selected_features_`` order, for the units and the model's features table alike."""
    model, X, ranking = fewrel
    first = ranking["feature"].to_numpy()[:200]
    np.testing.assert_array_equal(rel._features(X, ranking, 200, False), np.sort(first))
