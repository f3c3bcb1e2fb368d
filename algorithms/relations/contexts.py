"""Pre-mid-post context vectors of entity-pair mentions (Chen et al., 2005, Sec. 3.1).

The context of a pair is the words before the first entity mention (``pre``),
between the two mentions (``mid``) and after the second one (``post``); the
entity words themselves are excluded.  A window setting ``"p-m-q"`` keeps at
most ``p`` words before, ``m`` between and ``q`` after (the paper compared
0-5-0, 2-5-2, 0-10-0, 2-10-2 and 5-10-5).  When more than ``m`` words lie
between the mentions we keep the ``ceil(m/2)`` words right after the first
mention and the ``floor(m/2)`` words right before the second one (the words next
to each entity carry the relation: "cause *of*", "*in the*"), so every pair is kept.
Function words are kept; punctuation tokens are dropped by default (before the
window is applied).

References
----------
J. Chen, D. Ji, C. L. Tan and Z. Niu. Unsupervised Feature Selection for Relation
Extraction. IJCNLP 2005 (companion volume), I05-2045.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

from scarce.algorithms.relations.params import CONTEXT_DEFAULTS as _D
from scarce.algorithms.relations.params import parse_window  # (re-exported)

_PUNCT_RE = re.compile(r"^[^\w]+$")


def context_words(
    tokens: Sequence[str],
    e1: tuple[int, int],
    e2: tuple[int, int],
    window: str | Sequence[int],
    *,
    lowercase: bool,
    position_tags: bool,
    drop_punctuation: bool,
) -> list[str]:
    """Context words of one mention, in sentence order.

    Parameters
    ----------
    tokens : sequence of str
        The sentence.
    e1, e2 : tuple of int
        Token spans ``[start, end)`` of the two mentions, in any order; they must not overlap.
    window : str or 3-sequence of int
        ``pre-mid-post`` sizes.
    lowercase : bool
    position_tags : bool
        Prefix every word with ``pre:``, ``mid:`` or ``post:``.
    drop_punctuation : bool
        Drop tokens made only of punctuation before windowing.

    The defaults of these options are :func:`build_contexts`'.

    Returns
    -------
    list of str
    """
    pre, mid, post = parse_window(window)
    (a0, a1), (b0, b1) = sorted([tuple(e1), tuple(e2)])
    n = len(tokens)
    if not (0 <= a0 < a1 <= b0 < b1 <= n):
        raise ValueError(f"entity spans {tuple(e1)} and {tuple(e2)} overlap, are empty or lie "
                         f"outside the {n} tokens")

    def clean(seq):
        out = [t.lower() if lowercase else t for t in seq]
        if drop_punctuation:
            out = [t for t in out if not _PUNCT_RE.match(t)]
        return out

    before = clean(tokens[:a0])
    between = clean(tokens[a1:b0])
    after = clean(tokens[b1:])
    before = before[len(before) - pre:] if pre else []
    if len(between) > mid:
        head = (mid + 1) // 2
        tail = mid - head
        between = between[:head] + (between[len(between) - tail:] if tail else [])
    after = after[:post]
    if not position_tags:
        return before + between + after
    return ([f"pre:{t}" for t in before] + [f"mid:{t}" for t in between]
            + [f"post:{t}" for t in after])


def _identity(doc):
    return doc


def pair_contexts(
    tokens: Sequence[Sequence[str]],
    e1_spans: Sequence[tuple[int, int]],
    e2_spans: Sequence[tuple[int, int]],
    window: str | Sequence[int],
    *,
    lowercase: bool,
    position_tags: bool,
    drop_punctuation: bool,
) -> list[list[str]]:
    """The context words (:func:`context_words`) of every mention.

    The defaults of the options are :func:`build_contexts`'.
    """
    n = len(tokens)
    if not (len(e1_spans) == n and len(e2_spans) == n):
        raise ValueError(f"got {n} token lists but {len(e1_spans)} e1 spans and "
                         f"{len(e2_spans)} e2 spans; expected one span of each per mention")
    if n == 0:
        raise ValueError("no mentions given")
    return [context_words(t, a, b, window, lowercase=lowercase, position_tags=position_tags,
                          drop_punctuation=drop_punctuation)
            for t, a, b in zip(tokens, e1_spans, e2_spans, strict=True)]


def _vectorizer(weighting: str, min_df: int, dtype, vocabulary=None):
    """scikit-learn's vectorizer of the weighting (over given word lists, no analysis)."""
    if weighting == "tfidf":
        return TfidfVectorizer(analyzer=_identity, min_df=int(min_df), lowercase=False,
                               dtype=dtype, vocabulary=vocabulary)
    if weighting == "binary":
        return CountVectorizer(analyzer=_identity, min_df=int(min_df), lowercase=False,
                               binary=True, dtype=dtype, vocabulary=vocabulary)
    raise ValueError(f"weighting must be 'tfidf' or 'binary', got {weighting!r}")


def fit_contexts(docs: Sequence[Sequence[str]], *, weighting: str, min_df: int,
                 dtype=np.float64) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray | None]:
    """Learn the vocabulary (and the idf) of the contexts ``docs`` and weight them.

    Parameters
    ----------
    docs : sequence of sequences of str
        The context words of each mention (:func:`pair_contexts`).
    weighting : {"tfidf", "binary"}
        See :func:`build_contexts`.
    min_df : int
        Keep words occurring in at least ``min_df`` contexts.
    dtype : numpy dtype, default float64

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_mentions, n_words)
    vocabulary : ndarray of str
        Column names, sorted.
    idf : ndarray of shape (n_words,) or None
        scikit-learn's smoothed idf of every column (``"tfidf"``); None for ``"binary"``.
        With the vocabulary it is all :func:`transform_contexts` needs.
    """
    if int(min_df) < 1:
        raise ValueError(f"min_df must be a positive integer, got {min_df}")
    vec = _vectorizer(weighting, min_df, dtype)
    try:
        X = vec.fit_transform(docs)
    except ValueError as exc:  # empty vocabulary
        raise ValueError(f"no context word survives min_df={min_df}: {exc}") from None
    X = sp.csr_matrix(X, dtype=dtype)
    X.sort_indices()
    vocabulary = np.asarray(vec.get_feature_names_out(), dtype=object)
    idf = np.asarray(vec.idf_).copy() if weighting == "tfidf" else None
    return X, vocabulary, idf


def transform_contexts(docs: Sequence[Sequence[str]], vocabulary, idf, *, weighting: str,
                       dtype=np.float64) -> sp.csr_matrix:
    """Weight new contexts with a learned vocabulary and idf (:func:`fit_contexts`).

    Words outside ``vocabulary`` are ignored; a context with none of its words is a zero
    row.  Each row depends on its own context only, so a mention gets the same row
    whichever other mentions are transformed with it.  The rows equal those of
    :func:`fit_contexts` on the same contexts up to rounding (scikit-learn sums the squares
    of a row in another order when it learns the vocabulary: at most one unit in the last
    place).

    Parameters
    ----------
    docs : sequence of sequences of str
    vocabulary : sequence of str
        The column names, in column order (unique).
    idf : array of float, shape (n_words,)
        The idf of every column for ``"tfidf"``; ignored for ``"binary"``.
    weighting : {"tfidf", "binary"}
    dtype : numpy dtype, default float64

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n_mentions, len(vocabulary))
    """
    vocabulary = [str(w) for w in vocabulary]
    if len(set(vocabulary)) != len(vocabulary) or not vocabulary:
        raise ValueError("the vocabulary must be a non-empty list of distinct words")
    vec = _vectorizer(weighting, 1, dtype, vocabulary=vocabulary)
    if weighting == "tfidf":
        idf = None if idf is None else np.asarray(idf, dtype=np.float64)
        if idf is None or idf.shape != (len(vocabulary),) or not np.isfinite(idf).all():
            got = "none" if idf is None else f"shape {idf.shape}"
            raise ValueError(f"tf-idf needs one finite idf per word ({len(vocabulary)}), "
                             f"got {got}")
        vec.idf_ = idf
    X = sp.csr_matrix(vec.transform(docs), dtype=dtype)
    X.sort_indices()
    return X


def build_contexts(
    tokens: Sequence[Sequence[str]],
    e1_spans: Sequence[tuple[int, int]],
    e2_spans: Sequence[tuple[int, int]],
    window: str | Sequence[int] = _D["window"],
    *,
    lowercase: bool = _D["lowercase"],
    position_tags: bool = _D["position_tags"],
    weighting: str = _D["weighting"],
    min_df: int = _D["min_df"],
    drop_punctuation: bool = True,
    dtype=np.float64,
    return_docs: bool = False,
) -> tuple[sp.csr_matrix, np.ndarray] | tuple[sp.csr_matrix, np.ndarray, list[list[str]]]:
    """Context matrix of entity-pair mentions: :func:`pair_contexts`, then :func:`fit_contexts`.

    Parameters
    ----------
    tokens : sequence of sequences of str
        One tokenised sentence per mention.
    e1_spans, e2_spans : sequences of (int, int)
        Entity spans ``[start, end)`` per mention.
    window : str or 3-sequence of int, default "0-10-0"
        ``pre-mid-post`` sizes (:func:`context_words`; the paper found 0-10-0 best).
    lowercase : bool, default True
    position_tags : bool, default True
        Prefix every word with ``pre:``, ``mid:`` or ``post:``.
    drop_punctuation : bool, default True
        Drop tokens made only of punctuation before windowing.
    weighting : {"tfidf", "binary"}, default "tfidf"
        ``"tfidf"``: scikit-learn's ``TfidfVectorizer`` (smoothed idf, rows L2-normalised);
        ``"binary"``: ``CountVectorizer(binary=True)``, 1 if the word occurs in the context.
    min_df : int, default 1
        Keep words occurring in at least ``min_df`` contexts.
    dtype : numpy dtype, default float64
    return_docs : bool, default False
        Also return the context words of every mention (:func:`context_words`).

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_mentions, n_words)
        Rows with no context word are all zero.
    vocabulary : ndarray of str
        Column names, sorted.
    docs : list of list of str
        Only with ``return_docs``.
    """
    docs = pair_contexts(tokens, e1_spans, e2_spans, window, lowercase=lowercase,
                         position_tags=position_tags, drop_punctuation=drop_punctuation)
    try:
        X, vocabulary, _ = fit_contexts(docs, weighting=weighting, min_df=min_df, dtype=dtype)
    except ValueError as exc:  # name the window too when no word survives
        raise ValueError(str(exc).replace("survives ", f"survives window={window!r}, ", 1)
                         ) from None
    return (X, vocabulary, docs) if return_docs else (X, vocabulary)


def spans(frame) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The ``e1`` and ``e2`` spans of a reader DataFrame (columns ``e1_*``, ``e2_*``)."""
    e1 = list(zip(frame["e1_start"].to_numpy(), frame["e1_end"].to_numpy(), strict=True))
    e2 = list(zip(frame["e2_start"].to_numpy(), frame["e2_end"].to_numpy(), strict=True))
    return e1, e2


def build_contexts_frame(frame, window, **kwargs):
    """:func:`build_contexts` on a reader DataFrame (columns ``tokens``, ``e1_*``, ``e2_*``)."""
    e1, e2 = spans(frame)
    return build_contexts(list(frame["tokens"]), e1, e2, window, **kwargs)
