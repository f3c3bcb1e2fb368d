"""``ContextFeatures``: pairs in, the context matrix out, and in a pipeline with the method.

Independent truth: a tf-idf worked by hand on three pairs; the flow's own feature step
(``tasks.relations.extract_features``) on a SemEval sample; the estimator fitted on the
matrix of ``build_contexts`` for the pipeline.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline

from scarce.algorithms.relations.context_features import ContextFeatures
from scarce.algorithms.relations.contexts import (
    build_contexts,
    build_contexts_frame,
    transform_contexts,
)
from scarce.algorithms.relations.model import RelationDiscovery
from scarce.tasks import relations as rel
from scarce.tasks.readers.semeval import read_semeval

TRAIN = (Path(__file__).resolve().parents[3] / "data" / "relations" / "semeval2010_task8"
         / "TRAIN_FILE.TXT")
PAIRS = [  # mid words: "caused the", "from the", "of"
    {"tokens": ["The", "fire", "caused", "the", "smoke", "."], "head": [1, 2], "tail": [4, 5]},
    {"tokens": ["Smoke", "from", "the", "fire"], "head": [0, 1], "tail": [3, 4]},
    {"tokens": ["A", "cup", "of", "tea", "."], "head": [1, 2], "tail": [3, 4]},
]
ESTIMATOR = dict(k_low=2, k_high=4, n_prefixes=3, min_prefix=10, theta=0.5, n_init=1,
                 n_subsamples=2, random_state=1)


@pytest.fixture(scope="module")
def sample():
    """80 SemEval training pairs: the reader's table and the same pairs as dicts."""
    frame = read_semeval(TRAIN).head(80)
    pairs = [{"tokens": list(r.tokens), "head": [r.e1_start, r.e1_end],
              "tail": [r.e2_start, r.e2_end]} for r in frame.itertuples()]
    return frame, pairs


def test_the_defaults_are_build_contexts_defaults():
    ours = inspect.signature(ContextFeatures).parameters
    theirs = inspect.signature(build_contexts).parameters
    assert set(ours) == {"window", "lowercase", "position_tags", "weighting", "min_df",
                         "drop_punctuation", "dtype"}
    for name, p in ours.items():
        assert p.default == theirs[name].default, name


def test_tfidf_of_three_pairs_worked_by_hand():
    X = ContextFeatures().fit_transform(PAIRS)
    model = ContextFeatures().fit(PAIRS)
    words = ["mid:caused", "mid:from", "mid:of", "mid:the"]
    assert list(model.vocabulary_) == words
    np.testing.assert_array_equal(model.document_frequency_, [1, 1, 1, 2])
    idf1, idf2 = math.log(4 / 2) + 1, math.log(4 / 3) + 1  # smoothed: ln((1+n)/(1+df)) + 1
    np.testing.assert_allclose(model.idf_, [idf1, idf1, idf1, idf2], rtol=1e-15)
    want = np.array([[idf1, 0, 0, idf2], [0, idf1, 0, idf2], [0, 0, 1, 0]])
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert sp.isspmatrix_csr(X) and X.dtype == np.float64
    np.testing.assert_allclose(X.toarray(), want, rtol=1e-15)
    np.testing.assert_allclose(model.transform(PAIRS).toarray(), want, rtol=1e-15)
    assert list(model.get_feature_names_out()) == words


def test_window_tags_case_and_binary_weighting_by_hand():
    model = ContextFeatures("1-10-1", position_tags=False, lowercase=False,
                            weighting="binary").fit(PAIRS)
    # pre/post words: The / . (dropped); - / (none); A / . (dropped)
    assert list(model.vocabulary_) == ["A", "The", "caused", "from", "of", "the"]
    assert model.idf_ is None
    np.testing.assert_array_equal(model.transform(PAIRS).toarray(), [
        [0, 1, 1, 0, 0, 1], [0, 0, 0, 1, 0, 1], [1, 0, 0, 0, 1, 0]])


def test_unseen_words_are_ignored_and_min_df_drops_rare_words():
    model = ContextFeatures(min_df=2).fit(PAIRS)
    assert list(model.vocabulary_) == ["mid:the"]
    new = [{"tokens": ["a", "b", "c", "d"], "head": [0, 1], "tail": [3, 4]}]
    assert model.transform(new).nnz == 0 and model.transform(new).shape == (1, 1)


def test_fit_transform_is_the_flows_feature_matrix(sample):
    """The flow's feature step on the same pairs: the same matrix, vocabulary, idf and df,
    bit for bit; dicts and the reader's table give the same."""
    frame, pairs = sample
    mentions = rel.mentions_table(frame, "train", relation_types=None, include_other=True,
                                  directed=False)
    flow = rel.extract_features.fn(mentions=mentions, window="0-10-0", weighting="tfidf",
                                   position_tags=True, lowercase=True, min_df=2)
    for X_in in (pairs, frame):
        model = ContextFeatures(min_df=2)
        X = model.fit_transform(X_in)
        assert X.shape == flow["X"].shape and (X != flow["X"]).nnz == 0
        np.testing.assert_array_equal(X.indptr, flow["X"].indptr)
        np.testing.assert_array_equal(X.indices, flow["X"].indices)
        np.testing.assert_array_equal(X.data, flow["X"].data)
        assert list(model.vocabulary_) == flow["vocabulary"]["word"].tolist()
        np.testing.assert_array_equal(model.idf_, flow["vocabulary"]["idf"].to_numpy())
        np.testing.assert_array_equal(model.document_frequency_,
                                      flow["vocabulary"]["df"].to_numpy())
    # transform weights each pair alone: the same rows up to rounding
    np.testing.assert_allclose(model.transform(pairs).toarray(), flow["X"].toarray(),
                               rtol=1e-15, atol=1e-16)


def test_a_pipeline_with_the_method_fits_and_predicts_as_the_estimator_on_the_matrix(sample):
    frame, pairs = sample
    train, new = pairs[:60], pairs[60:]
    pipe = make_pipeline(ContextFeatures(), RelationDiscovery(**ESTIMATOR)).fit(train)
    # by hand: the matrix of build_contexts, the estimator, new pairs weighted alone
    X, vocab = build_contexts_frame(frame.head(60), "0-10-0")
    est = RelationDiscovery(**ESTIMATOR).fit(X, feature_names=vocab)
    np.testing.assert_array_equal(pipe[-1].labels_, est.labels_)
    np.testing.assert_array_equal(pipe[-1].selected_features_, est.selected_features_)
    assert pipe[-1].n_clusters_ == est.n_clusters_
    docs = ContextFeatures().contexts(new)
    X_new = transform_contexts(docs, vocab, pipe[0].idf_, weighting="tfidf")
    np.testing.assert_array_equal(pipe.predict(new), est.predict(X_new))
    # the DCM words, named by the column index in the pipeline
    names = {c: [pipe[0].vocabulary_[int(w)] for w in ws]
             for c, ws in pipe[-1].cluster_labels_.items()}
    assert names == est.cluster_labels_
    np.testing.assert_array_equal(pipe.fit_predict(train), est.labels_)


def test_clone_and_params_follow_the_estimator_contract():
    model = ContextFeatures("2-5-2", min_df=3)
    copy = clone(model)
    assert copy.get_params() == model.get_params()
    assert copy.get_params()["window"] == "2-5-2" and not hasattr(copy, "vocabulary_")


@pytest.mark.parametrize("X, message", [
    ([{"tokens": ["a", "b"], "head": [0, 1]}], "pair 0 is not a dict with the keys"),
    ([PAIRS[0], {"tokens": "a b c", "head": [0, 1], "tail": [2, 3]}],
     "pair 1: tokens must be a list"),
    ([PAIRS[0], {"tokens": ["a", "b", "c"], "head": [0, 2], "tail": [1, 3]}],
     "pair 1: entity spans .* overlap"),
    ([{"tokens": ["a", "b"], "head": 0, "tail": [1, 2]}], "pair 0: head and tail must be"),
    ([], "no pairs given"),
    ("a b c", "expected a list of pairs"),
])
def test_bad_pairs_are_refused_naming_the_pair(X, message):
    with pytest.raises(ValueError, match=message):
        ContextFeatures().fit(X)


def test_bad_options_and_transform_before_fit():
    with pytest.raises(ValueError, match="weighting"):
        ContextFeatures(weighting="bm25").fit(PAIRS)
    with pytest.raises(ValueError, match="pre-mid-post"):
        ContextFeatures("0-10").fit(PAIRS)
    with pytest.raises(NotFittedError):
        ContextFeatures().transform(PAIRS)
