"""Pre-mid-post contexts."""

import numpy as np
import pytest

from scarce.algorithms.relations.contexts import (
    build_contexts,
    context_words,
    fit_contexts,
    parse_window,
    transform_contexts,
)

OPTS = dict(lowercase=True, position_tags=True, drop_punctuation=True)

TOKENS = "The smoke , from the big fire in the old factory , rose up high".split()
E1 = (1, 2)   # smoke
E2 = (6, 7)   # fire


def test_window_keeps_words_before_between_and_after_without_entities():
    words = context_words(TOKENS, E1, E2, "1-10-2", **OPTS)
    assert words == ["pre:the", "mid:from", "mid:the", "mid:big", "post:in", "post:the"]


def test_long_middle_keeps_words_next_to_each_entity_and_plain_words():
    words = context_words(TOKENS, E1, (10, 11), "0-3-0", **{**OPTS, "position_tags": False})
    # between: from the big fire in the old (punctuation dropped) -> 2 after e1, 1 before e2
    assert words == ["from", "the", "old"]


def test_entity_order_does_not_matter_and_overlap_is_an_error():
    assert context_words(TOKENS, E2, E1, "0-5-0", **OPTS) == context_words(TOKENS, E1, E2,
                                                                          "0-5-0", **OPTS)
    with pytest.raises(ValueError, match="overlap"):
        context_words(TOKENS, (1, 3), (2, 4), "0-10-0", **OPTS)
    with pytest.raises(ValueError, match="pre-mid-post"):
        parse_window("0-10")


def test_binary_and_tfidf_matrices_with_min_df():
    toks = [TOKENS, "A cup of tea".split(), "A box of chocolates".split()]
    e1 = [E1, (1, 2), (1, 2)]
    e2 = [E2, (3, 4), (3, 4)]
    X, vocab = build_contexts(toks, e1, e2, "0-5-0", weighting="binary")
    assert list(vocab) == ["mid:big", "mid:from", "mid:of", "mid:the"]
    np.testing.assert_array_equal(X.toarray(), [[1, 1, 0, 1], [0, 0, 1, 0], [0, 0, 1, 0]])
    X2, vocab2 = build_contexts(toks, e1, e2, "0-5-0", weighting="binary", min_df=2)
    assert list(vocab2) == ["mid:of"]
    Xt, _ = build_contexts(toks, e1, e2, "0-5-0", weighting="tfidf", dtype=np.float32)
    _, _, docs = build_contexts(toks, e1, e2, "0-5-0", return_docs=True)
    assert docs[1:] == [["mid:of"], ["mid:of"]]
    assert docs[0] == context_words(TOKENS, E1, E2, "0-5-0", **OPTS)
    assert Xt.dtype == np.float32
    np.testing.assert_allclose(np.sqrt(Xt.multiply(Xt).sum(axis=1)).ravel(), 1.0, rtol=1e-6)


DOCS = [["mid:of", "mid:the", "mid:of"], ["mid:of"], ["mid:in", "mid:the"], []]


def test_fit_learns_scikit_learns_smoothed_idf_and_transform_weights_new_contexts_with_it():
    """Independent truth: idf = ln((1 + n) / (1 + df)) + 1, a row is tf * idf over the
    vocabulary's words, L2-normalised."""
    X, vocab, idf = fit_contexts(DOCS, weighting="tfidf", min_df=1)
    assert list(vocab) == ["mid:in", "mid:of", "mid:the"]
    df = np.array([1, 2, 2])
    np.testing.assert_allclose(idf, np.log(5 / (1 + df)) + 1, rtol=1e-15)
    new = [["mid:the", "mid:of", "mid:unseen", "mid:of"], ["mid:unseen"], ["mid:in"]]
    tf = np.array([[0, 2, 1], [0, 0, 0], [1, 0, 0]], dtype=float) * idf
    norms = np.linalg.norm(tf, axis=1, keepdims=True)
    expected = np.divide(tf, norms, out=np.zeros_like(tf), where=norms > 0)
    Y = transform_contexts(new, vocab, idf, weighting="tfidf")
    np.testing.assert_allclose(Y.toarray(), expected, rtol=1e-15, atol=0)
    assert Y.getnnz(axis=1)[1] == 0  # no known word: a zero row
    B = transform_contexts(new, vocab, None, weighting="binary")
    np.testing.assert_array_equal(B.toarray(), [[0, 1, 1], [0, 0, 0], [1, 0, 0]])
    _, _, none = fit_contexts(DOCS, weighting="binary", min_df=1)
    assert none is None


def test_transformed_rows_depend_on_their_own_context_only_and_equal_the_fitted_rows():
    rng = np.random.default_rng(0)
    words = [f"mid:w{i}" for i in range(30)]
    docs = [list(rng.choice(words, size=rng.integers(0, 9))) for _ in range(200)]
    X, vocab, idf = fit_contexts(docs, weighting="tfidf", min_df=2)
    Y = transform_contexts(docs, vocab, idf, weighting="tfidf")
    # the same rows up to the order scikit-learn sums a row's squares in when it fits
    np.testing.assert_array_max_ulp(Y.toarray(), X.toarray(), maxulp=2)
    for i in (0, 17, 199):
        one = transform_contexts(docs[i:i + 1], vocab, idf, weighting="tfidf")
        assert (one != Y[i]).nnz == 0  # exactly the batch's row


def test_transform_rejects_a_vocabulary_and_idf_that_do_not_fit():
    with pytest.raises(ValueError, match=r"one finite idf per word \(2\), got shape \(3,\)"):
        transform_contexts(DOCS, ["a", "b"], [1.0, 2.0, 3.0], weighting="tfidf")
    with pytest.raises(ValueError, match="distinct words"):
        transform_contexts(DOCS, ["a", "a"], [1.0, 2.0], weighting="tfidf")
    with pytest.raises(ValueError, match="weighting must be"):
        transform_contexts(DOCS, ["a"], [1.0], weighting="bm25")
    with pytest.raises(ValueError, match="survives window='0-1-0', min_df=9"):
        build_contexts([TOKENS], [E1], [E2], "0-1-0", min_df=9)
