"""The mention pairs of one CoNLL-U file (the ``preprocess`` step) and the parts of a pair table.

A pair table has the keys :data:`PAIR_KEYS` (``doc, mention_i, mention_j, label``) then the pair
features of :func:`scarce.algorithms.strip.features.pair_features`; every step after ``preprocess``
reads its features (:func:`features`) and its ends (:func:`pair_ends`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

import scarce.algorithms.strip.features as strip_features
import scarce.tasks.readers.conllu as conllu
from scarce.algorithms.strip.problem import is_nominal
from scarce.tasks.errors import InputError
from scarce.tasks.steps import step
from scarce.tasks.strip.documents import conllu_name

__all__ = ["PAIR_KEYS", "MENTION_KEYS", "preprocess", "features", "pair_ends", "feature_kinds"]

PAIR_KEYS = strip_features.PAIR_KEYS
MENTION_KEYS = strip_features.MENTION_KEYS


@step(
    "strip-preprocess",
    files={"path": conllu_name},
    outputs=("mentions", "pairs"),
    run_name="preprocess {path.name}",
)
def preprocess(
    path: Path,
    window: int,
    max_sentence_distance: int | None,
    source_kind: str,
    etypes: list[str],
    fraction: float | None,
    seed: int | None,
) -> dict:
    """Mentions, candidate pairs, their Ng and Cardie (2002) features and labels, for one file:
    :func:`scarce.algorithms.strip.features.pair_table` of the file's frames.

    Parameters
    ----------
    path : Path
        A CoNLL-U file with CorefUD ``Entity=`` annotations (one or more documents).
    window : int
        Pairs of mentions at most this many mentions apart.
    max_sentence_distance : int or None
        And at most this many sentences apart (None: no limit).
    source_kind : {"etype", "fraction"}
        Labelled ("source") mentions: those of entities whose type is in ``etypes``, or a seeded
        ``fraction`` of the entities of each document.
    seed : int or None
        Seeds the ``fraction`` draw (per document: seed and document id).

    Returns
    -------
    dict
        ``mentions``: ``doc, mention, entity, source, sent, position_start, position_end,
        position_head``.  ``pairs``: ``doc, mention_i, mention_j, label`` (1 / 0 for two sources,
        -1 unknown) then the features of :func:`scarce.algorithms.strip.features.pair_features`.
    """
    tokens, mentions = conllu.read_conllu(path)
    if source_kind not in strip_features.SOURCE_KINDS:
        raise InputError(f"unknown source kind {source_kind!r} (etype, fraction)",
                         key="sources.kind")
    try:
        men, table = strip_features.pair_table(
            tokens, mentions, window=window, max_sentence_distance=max_sentence_distance,
            source_kind=source_kind, etypes=etypes, fraction=fraction, seed=seed)
    except ValueError as exc:
        raise InputError(f"cannot build mention pairs: {exc}", path=path) from None
    return {"mentions": men, "pairs": table}



def features(pairs: pd.DataFrame) -> pd.DataFrame:
    """The feature columns of a pair table."""
    return pairs.drop(columns=PAIR_KEYS)


def pair_ends(pairs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Document and the two mention ids of every pair (``groups, mention_i, mention_j``)."""
    return pairs["doc"].to_numpy(), pairs["mention_i"].to_numpy(), pairs["mention_j"].to_numpy()



def feature_kinds(pairs: pd.DataFrame) -> dict[str, str]:
    """The kind of every feature of a pair table: ``nominal`` (bool, string: the rules test
    ``feature == value``) or ``numeric`` (the rules test thresholds), as
    :class:`~scarce.algorithms.strip.ripper.StRip` encodes them
    (:func:`scarce.algorithms.strip.problem.is_nominal`)."""
    X = features(pairs)
    return {str(c): "nominal" if is_nominal(X[c]) else "numeric" for c in X.columns}

