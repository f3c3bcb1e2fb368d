"""Entity-pair contexts as a scikit-learn transformer: pairs in, the context matrix out.

:class:`ContextFeatures` learns the vocabulary and idf of the pairs' pre-mid-post contexts
(:func:`~scarce.algorithms.relations.contexts.pair_contexts`, then
:func:`~scarce.algorithms.relations.contexts.fit_contexts`, as the relation discovery flow's feature
step does) and weights new pairs with them
(:func:`~scarce.algorithms.relations.contexts.transform_contexts`, as a model applied to new pairs
does), so that::

    make_pipeline(ContextFeatures(), RelationDiscovery(k_low=3, k_high=8))

fits on a list of pairs and predicts the cluster of new ones.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from scarce.algorithms.relations.contexts import context_words, fit_contexts, transform_contexts

_SPAN_COLUMNS = ("e1_start", "e1_end", "e2_start", "e2_end")


def _pairs(X) -> tuple[list[list[str]], list[tuple[int, int]], list[tuple[int, int]]]:
    """Tokens, head spans and tail spans of ``X``: a sequence of dicts with ``tokens``,
    ``head`` and ``tail`` (the JSON Lines schema), or a table with the columns ``tokens`` and
    ``e1_start``, ``e1_end``, ``e2_start``, ``e2_end`` (a reader's, or the flow's mentions)."""
    columns = getattr(X, "columns", None)
    if columns is not None:
        missing = [c for c in ("tokens", *_SPAN_COLUMNS) if c not in columns]
        if missing:
            raise ValueError(f"a table of pairs needs the columns tokens, e1_start, e1_end, "
                             f"e2_start, e2_end; it lacks {', '.join(missing)}")
        spans = [np.asarray(X[c]).astype(np.int64) for c in _SPAN_COLUMNS]
        tokens = [list(t) for t in X["tokens"]]
        heads = [(int(a), int(b)) for a, b in zip(spans[0], spans[1], strict=True)]
        tails = [(int(a), int(b)) for a, b in zip(spans[2], spans[3], strict=True)]
        return tokens, heads, tails
    if isinstance(X, str | bytes | Mapping) or sp.issparse(X):
        raise ValueError(f"expected a list of pairs (dicts with tokens, head and tail), got "
                         f"{type(X).__name__}")
    tokens, heads, tails = [], [], []
    for i, pair in enumerate(X):
        if not isinstance(pair, Mapping) or not {"tokens", "head", "tail"} <= set(pair):
            raise ValueError(f"pair {i} is not a dict with the keys tokens, head and tail")
        if isinstance(pair["tokens"], str):
            raise ValueError(f"pair {i}: tokens must be a list of words, not one string")
        tokens.append([str(t) for t in pair["tokens"]])
        try:
            heads.append((int(pair["head"][0]), int(pair["head"][1])))
            tails.append((int(pair["tail"][0]), int(pair["tail"][1])))
        except (TypeError, IndexError, ValueError):
            raise ValueError(f"pair {i}: head and tail must be [start, end) token spans, got "
                             f"{pair['head']!r} and {pair['tail']!r}") from None
    if not tokens:
        raise ValueError("no pairs given")
    return tokens, heads, tails


class ContextFeatures(TransformerMixin, BaseEstimator):
    """Pre-mid-post context vectors of entity pairs (Chen et al., 2005, Sec. 3.1).

    Parameters
    ----------
    window : str or 3-tuple of int, default "0-10-0"
        ``pre-mid-post`` sizes (:func:`~scarce.algorithms.relations.contexts.context_words`).
    lowercase : bool, default True
        Lowercase the context words.
    position_tags : bool, default True
        Prefix every word with ``pre:``, ``mid:`` or ``post:``.
    weighting : {"tfidf", "binary"}, default "tfidf"
        scikit-learn's smoothed tf-idf with rows L2-normalised, or 1 where a word occurs.
    min_df : int, default 1
        Keep words occurring in at least ``min_df`` contexts.
    drop_punctuation : bool, default True
        Drop tokens made only of punctuation before windowing.
    dtype : numpy dtype, default numpy.float64

    The defaults are those of :func:`~scarce.algorithms.relations.contexts.build_contexts`.

    Attributes
    ----------
    vocabulary_ : ndarray of str
        The column names (context words), sorted.
    idf_ : ndarray of float or None
        The idf of every column (``"tfidf"``); None for ``"binary"``.
    document_frequency_ : ndarray of int
        The number of fitted pairs whose context holds each word.

    Notes
    -----
    ``X`` is a list of dicts with ``tokens`` (list of str) and ``head`` and ``tail``
    (``[start, end)`` token spans), as in the JSON Lines input of the relations flow, or a
    table with the columns ``tokens``, ``e1_start``, ``e1_end``, ``e2_start``, ``e2_end``.
    ``fit_transform`` returns the matrix the vocabulary was learned on (the flow's feature
    matrix); ``transform`` weights each pair on its own with the learned vocabulary and idf,
    equal to it up to rounding (:func:`~scarce.algorithms.relations.contexts.transform_contexts`).

    References
    ----------
    J. Chen, D. Ji, C. L. Tan and Z. Niu. Unsupervised Feature Selection for Relation
    Extraction. IJCNLP 2005.
    """

    def __init__(self, window="0-10-0", *, lowercase=True, position_tags=True,
                 weighting="tfidf", min_df=1, drop_punctuation=True, dtype=np.float64):
        self.window = window
        self.lowercase = lowercase
        self.position_tags = position_tags
        self.weighting = weighting
        self.min_df = min_df
        self.drop_punctuation = drop_punctuation
        self.dtype = dtype

    def contexts(self, X) -> list[list[str]]:
        """The context words of every pair of ``X``, in sentence order."""
        docs = []
        for i, (tokens, head, tail) in enumerate(zip(*_pairs(X), strict=True)):
            try:
                docs.append(context_words(
                    tokens, head, tail, self.window, lowercase=bool(self.lowercase),
                    position_tags=bool(self.position_tags),
                    drop_punctuation=bool(self.drop_punctuation)))
            except ValueError as exc:
                raise ValueError(f"pair {i}: {exc}") from None
        return docs

    def fit(self, X, y=None):
        """Learn the vocabulary and idf of the pairs' contexts; ``y`` is ignored."""
        self.fit_transform(X)
        return self

    def fit_transform(self, X, y=None):
        """Learn the vocabulary and idf and return the weighted contexts of ``X``
        (n_pairs, n_words), CSR."""
        Xt, vocabulary, idf = fit_contexts(self.contexts(X), weighting=self.weighting,
                                           min_df=self.min_df, dtype=self.dtype)
        self.vocabulary_, self.idf_ = vocabulary, idf
        self.document_frequency_ = np.diff(sp.csc_matrix(Xt).indptr).astype(np.int64)
        return Xt

    def transform(self, X):
        """The contexts of ``X`` weighted with the learned vocabulary and idf; words outside
        the vocabulary are ignored."""
        check_is_fitted(self, "vocabulary_")
        return transform_contexts(self.contexts(X), self.vocabulary_, self.idf_,
                                  weighting=self.weighting, dtype=self.dtype)

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        """The column names: the vocabulary."""
        check_is_fitted(self, "vocabulary_")
        return np.asarray(self.vocabulary_, dtype=object)
