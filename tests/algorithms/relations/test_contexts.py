"""Pre-mid-post contexts."""

import numpy as np
import pytest

from algorithms.relations.contexts import build_contexts, context_words, parse_window

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
