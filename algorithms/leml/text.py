"""Text to features for LEML: a scikit-learn vectoriser fitted once and rebuilt from its parts.

A model trained on text keeps its featurisation as data, never as a pickle: the vocabulary
(its terms, in column order) and, for TF-IDF, the inverse document frequencies, beside the
vectoriser's options.  :func:`rebuild` makes the same vectoriser from those, so the training
run, ``scarce apply`` and a model loaded in Python turn a text into the same row, bit for bit.
The vectorisers are scikit-learn's; nothing of the weighting is written here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from scarce.algorithms.leml.params import VECTORIZERS

__all__ = ["VECTORIZERS", "fit_vocabulary", "rebuild", "vectorize"]

#: Options only TF-IDF takes.
_TFIDF_ONLY = ("sublinear_tf", "norm", "use_idf", "smooth_idf")


def _vectorizer(kind: str):
    """The scikit-learn class of a vectoriser kind (:data:`VECTORIZERS`), imported here: the
    checks of a table's head use this module without scikit-learn."""
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

    return {"tfidf": TfidfVectorizer, "count": CountVectorizer}[kind]


def _options(kind: str, options: dict) -> dict:
    if kind not in VECTORIZERS:
        raise ValueError(f"unknown vectoriser {kind!r} ({', '.join(VECTORIZERS)})")
    opts = dict(options)
    if "ngram_range" in opts and opts["ngram_range"] is not None:
        opts["ngram_range"] = tuple(opts["ngram_range"])
    if kind == "count":
        for key in _TFIDF_ONLY:
            opts.pop(key, None)
    return {**opts, "dtype": np.float64}


def fit_vocabulary(texts: Sequence[str], kind: str = "tfidf",
                   **options) -> tuple[list[str], np.ndarray | None]:
    """The vocabulary learned from ``texts`` (its terms in column order) and, for TF-IDF, the
    inverse document frequency of each term (None for counts).

    ``options`` are the vectoriser's (``lowercase``, ``ngram_range``, ``min_df``, ``max_df``,
    ``max_features``, ``stop_words``, ``binary``, ``sublinear_tf``, ...).

    Raises
    ------
    ValueError
        The texts give an empty vocabulary (scikit-learn's message: all stop words, or
        ``min_df`` / ``max_df`` leaves no term).
    """
    vec = _vectorizer(kind)(**_options(kind, options)).fit(list(texts))
    terms = [None] * len(vec.vocabulary_)
    for term, column in vec.vocabulary_.items():
        terms[column] = term
    idf = np.asarray(vec.idf_, dtype=np.float64) if kind == "tfidf" else None
    return terms, idf


def rebuild(terms: Sequence[str], idf: np.ndarray | None, kind: str = "tfidf", **options):
    """The fitted vectoriser of ``terms`` (column order) and ``idf``: what
    :func:`fit_vocabulary` learned, without refitting."""
    opts = _options(kind, options)
    for key in ("min_df", "max_df", "max_features"):  # they select the vocabulary, given here
        opts.pop(key, None)
    vec = _vectorizer(kind)(vocabulary={t: i for i, t in enumerate(terms)}, **opts)
    if kind == "tfidf":
        if idf is None or len(idf) != len(terms):
            raise ValueError(f"a TF-IDF vectoriser needs one idf per term ({len(terms)})")
        vec.idf_ = np.asarray(idf, dtype=np.float64)
    return vec


def vectorize(texts: Sequence[str], terms: Sequence[str], idf: np.ndarray | None,
              kind: str = "tfidf", **options) -> sp.csr_matrix:
    """``texts`` as rows over ``terms`` (float64 CSR): the vectoriser of :func:`rebuild`."""
    X = rebuild(terms, idf, kind, **options).transform(list(texts))
    X = sp.csr_matrix(X, dtype=np.float64)
    X.sort_indices()
    return X
