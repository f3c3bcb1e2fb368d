"""The vectoriser rebuilt from a model's vocabulary and idf equals scikit-learn's fitted one."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.model_selection import GridSearchCV

from scarce.algorithms.leml import LEML
from scarce.algorithms.leml.text import fit_vocabulary, vectorize

TRAIN = ["Graph kernels for molecules", "kernels of graphs and trees", "parsing trees",
         "a survey of parsing", "molecules and proteins"]
NEW = ["kernels for proteins", "unknown words only", ""]


@pytest.mark.parametrize(("kind", "peer", "options"), [
    ("tfidf", TfidfVectorizer, {}),
    ("tfidf", TfidfVectorizer, {"sublinear_tf": True, "ngram_range": (1, 2), "min_df": 1}),
    ("tfidf", TfidfVectorizer, {"max_features": 4, "stop_words": "english"}),
    ("count", CountVectorizer, {"binary": True, "lowercase": False}),
])
def test_rebuilt_vectoriser_equals_the_fitted_one(kind, peer, options):
    fitted = peer(**options, dtype=np.float64).fit(TRAIN)
    terms, idf = fit_vocabulary(TRAIN, kind, **options)
    assert terms == sorted(fitted.vocabulary_, key=fitted.vocabulary_.get)
    if kind == "tfidf":
        np.testing.assert_array_equal(idf, fitted.idf_)
    else:
        assert idf is None
    for texts in (TRAIN, NEW):
        got = vectorize(texts, terms, idf, kind, **options)
        want = fitted.transform(texts)
        assert got.shape == want.shape and (got != want).nnz == 0


def test_an_empty_vocabulary_is_a_value_error():
    with pytest.raises(ValueError, match="empty vocabulary"):
        fit_vocabulary(["the and of", "a the"], "tfidf", stop_words="english")


def test_leml_score_is_precision_at_1_for_grid_search():
    rng = np.random.default_rng(0)
    X = rng.random((40, 6))
    Y = (X @ rng.random((6, 5)) > 1.2).astype(float)
    Y[Y.sum(1) == 0, 0] = 1
    model = LEML(rank=3, outer_iterations=2, random_state=0).fit(X, Y)
    top = model.predict_top_k(X, 1)[:, 0]
    assert model.score(X, Y) == pytest.approx(Y[np.arange(40), top].mean(), abs=0)
    search = GridSearchCV(LEML(outer_iterations=2, random_state=0), {"rank": [2, 3]}, cv=2)
    search.fit(X, Y)
    assert search.best_params_["rank"] in (2, 3) and 0 <= search.best_score_ <= 1
