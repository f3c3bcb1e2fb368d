"""StRip as scikit-learn pipeline steps: documents to pair features, and the learner on them.

:class:`PairFeatures` turns parsed documents into the pair table the flow's ``preprocess`` step
builds (:func:`~scarce.algorithms.strip.features.pair_table`), and :class:`StRipClassifier` is
:class:`~scarce.algorithms.strip.ripper.StRip` taking that table as ``fit(X, y=None)`` /
``predict(X)``, so that::

    from sklearn.pipeline import make_pipeline
    pipe = make_pipeline(PairFeatures(window=10), StRipClassifier(random_state=0))
    pipe.fit([read_conllu(p) for p in train_files])
    decisions = pipe.predict([read_conllu(p) for p in test_files])  # one per candidate pair

The labels come with the documents (their gold entities, on the source mentions), so ``y`` is
not needed; the pair table carries each pair's document and mention ids, which the closure uses.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils import check_random_state

from scarce.algorithms.strip.closure import PairGraph
from scarce.algorithms.strip.features import PAIR_KEYS, SOURCE_KINDS, pair_table
from scarce.algorithms.strip.ripper import StRip

__all__ = ["PairFeatures", "StRipClassifier"]


def _documents(documents) -> list[tuple[pd.DataFrame, pd.DataFrame]]:
    """A list of ``(tokens, mentions)``; one such tuple is taken as a list of one."""
    if (isinstance(documents, tuple) and len(documents) == 2
            and all(isinstance(d, pd.DataFrame) for d in documents)):
        documents = [documents]
    documents = list(documents)
    for k, d in enumerate(documents):
        if not (isinstance(d, tuple | list) and len(d) == 2
                and all(isinstance(f, pd.DataFrame) for f in d)):
            raise ValueError(f"document {k} is a {type(d).__name__}; expected a (tokens, "
                             "mentions) pair of DataFrames, as read_conllu returns")
    return documents


class PairFeatures(TransformerMixin, BaseEstimator):
    """Candidate mention pairs of parsed documents, with their features and partial labels.

    The transform of the flow's ``preprocess`` step (the same function,
    :func:`~scarce.algorithms.strip.features.pair_table`), on documents already read.

    Parameters
    ----------
    window : int, default 20
        Pairs of mentions at most this many mentions apart.
    max_sentence_distance : int or None, default None
        And at most this many sentences apart (None: no limit).
    source_kind : {"etype", "fraction"}, default "etype"
        The labelled ("source") mentions: those of entities whose type is in ``etypes``, or a
        ``fraction`` of the entities of each document.
    etypes : tuple of str, default ("person", "organization")
        Entity types whose mentions are sources (``source_kind="etype"``).
    fraction : float in (0, 1], default 0.5
        Share of each document's entities that are sources (``source_kind="fraction"``).
    random_state : int, RandomState or None, default None
        Seeds the ``fraction`` draw; an int ``s`` gives each document the sources the flow's
        ``preprocess`` gives it with ``seed: s``.

    Notes
    -----
    Nothing is learnt: ``fit`` checks the parameters.  ``transform(documents)`` takes a list of
    ``(tokens, mentions)`` (one file each, as :func:`scarce.tasks.readers.conllu.read_conllu`
    returns
    them) and returns one DataFrame of all their pairs: ``doc, mention_i, mention_j, label``
    (1 / 0 for two sources, -1 unknown) then the features of
    :func:`~scarce.algorithms.strip.features.pair_features`.
    """

    def __init__(self, window=20, max_sentence_distance=None, source_kind="etype",
                 etypes=("person", "organization"), fraction=0.5, random_state=None):
        self.window = window
        self.max_sentence_distance = max_sentence_distance
        self.source_kind = source_kind
        self.etypes = etypes
        self.fraction = fraction
        self.random_state = random_state

    def _check_params(self) -> None:
        if self.source_kind not in SOURCE_KINDS:
            raise ValueError(f"source_kind must be one of {SOURCE_KINDS}; got "
                             f"{self.source_kind!r}")
        if int(self.window) < 1:
            raise ValueError(f"window must be >= 1; got {self.window}")
        if self.source_kind == "fraction" and not 0 < float(self.fraction) <= 1:
            raise ValueError(f"fraction must be in (0, 1]; got {self.fraction}")

    def fit(self, documents, y=None):
        """Check the parameters (nothing is learnt).

        Returns
        -------
        self
        """
        self._check_params()
        self.n_documents_ = len(_documents(documents))
        return self

    def transform(self, documents) -> pd.DataFrame:
        """The pair table of ``documents`` (see the class notes), files in the order given."""
        self._check_params()
        seed = None
        if self.source_kind == "fraction":
            seed = (self.random_state if isinstance(self.random_state, int | np.integer)
                    else int(check_random_state(self.random_state).randint(2**31 - 1)))
        tables = [pair_table(tokens, mentions, window=int(self.window),
                             max_sentence_distance=self.max_sentence_distance,
                             source_kind=self.source_kind, etypes=list(self.etypes),
                             fraction=float(self.fraction) if seed is not None else None,
                             seed=seed)[1]
                  for tokens, mentions in _documents(documents)]
        if not tables:
            raise ValueError("no document to transform")
        return pd.concat(tables, ignore_index=True)


def _split(X) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The key columns and the features of a pair table."""
    if not isinstance(X, pd.DataFrame):
        raise ValueError(f"X is a {type(X).__name__}; expected the pair table of PairFeatures "
                         f"(a DataFrame with columns {PAIR_KEYS} and the features)")
    missing = [c for c in PAIR_KEYS[:3] if c not in X.columns]
    if missing:
        raise ValueError(f"the pair table lacks columns {missing}; expected those of "
                         "PairFeatures.transform")
    keys = [c for c in PAIR_KEYS if c in X.columns]
    return X[keys], X.drop(columns=keys)


class StRipClassifier(StRip):
    """:class:`~scarce.algorithms.strip.ripper.StRip` on a pair table: ``fit(X, y=None)``.

    The parameters are StRip's (the same defaults); :meth:`StRip.from_variant` gives the
    paper's set-ups.  ``X`` is the table of :class:`PairFeatures`: its ``doc``, ``mention_i``
    and ``mention_j`` say which pairs the closure joins, ``label`` holds the labels (used when
    ``y`` is None) and the other columns are the features.

    Attributes
    ----------
    rules_, rules_grown_, rules_pruned_, feature_names_in_, n_features_in_, n_pairs_, n_labeled_
        As :class:`~scarce.algorithms.strip.ripper.StRip`.
    """

    def fit(self, X, y=None):
        """Learn the rule set from a pair table (its ``label`` column when ``y`` is None).

        Returns
        -------
        self
        """
        keys, features = _split(X)
        if y is None:
            if "label" not in keys.columns:
                raise ValueError("y is None and the pair table has no 'label' column")
            y = keys["label"].to_numpy()
        return super().fit(features, np.asarray(y), keys["doc"].to_numpy(),
                           keys["mention_i"].to_numpy(), keys["mention_j"].to_numpy())

    def predict(self, X) -> np.ndarray:
        """Pair decisions (1 coreferent, 0 not) of the rules, one per row, before any closure."""
        return super().predict(_split(X)[1])

    def cluster(self, X) -> pd.DataFrame:
        """Chains: single-link clustering of the positive pairs (``doc, mention, cluster``, one
        row per mention in a pair; see :meth:`StRip.cluster`)."""
        keys, features = _split(X)
        positive = super().predict(features).astype(bool)  # StRip.cluster would call predict
        frame = PairGraph(keys["doc"].to_numpy(), keys["mention_i"].to_numpy(),
                          keys["mention_j"].to_numpy(), closure=True).clusters(positive)
        return frame.sort_values(["doc", "mention"]).reset_index(drop=True)
