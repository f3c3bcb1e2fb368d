"""A relations run's model as a Python object: new pairs' clusters and their label words.

What :func:`scarce.load_model` returns for a ``relations`` run.  The model is read from the
run's ``outputs/model/`` (Parquet and ``model.json``, never a pickle; format in
docs/relations.md) and applied by the steps ``scarce apply`` runs (the parse of a file, the
nearest-centroid assignment), called here directly, so that a notebook gets the assignments
``scarce apply`` writes for the same input.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scarce.algorithms.relations.model import RelationDiscovery
from scarce.flows.manifest import read_run_keys
from scarce.flows.model_checks import kind_of, run_params
from scarce.flows.model_format import MODEL_JSON, open_model
from scarce.tasks import relations as rel
from scarce.tasks.errors import InputError
from scarce.tasks.readers.jsonl import read_records


class RelationsModel:
    """A relations run's model: its vocabulary and idf, the selected words, the centroids of
    the final clustering and each cluster's DCM label words.

    ``pairs`` is a path to a SemEval-2010 Task 8 or JSON Lines file (read as ``scarce apply``
    reads it, every pair kept), or a list of dicts in the JSON Lines schema (``tokens``,
    ``head`` and ``tail`` as ``[start, end)`` token spans, optional ``id`` and ``label``).
    A pair's cluster depends on nothing but the pair and the model.

    Attributes
    ----------
    run_id : str
    meta_ : dict
        The model's ``model.json``.
    vocabulary_, features_, centroids_, clusters_ : DataFrame
        The model's tables (docs/relations.md); ``clusters_`` has one row per cluster:
        ``cluster``, ``size``, ``label`` (its DCM words joined by ", "), ``words``,
        ``weights``.
    estimator_ : RelationDiscovery
        The run's estimator, with every parameter the run used (``get_params``: so
        ``sklearn.base.clone(estimator_)`` searches as the run searched) and the fitted
        attributes its model keeps: ``n_features_in_`` (the vocabulary), ``n_clusters_``,
        ``selected_features_``, ``cluster_centers_`` and ``cluster_labels_``, so that its
        ``predict`` of context features in the run's vocabulary is :meth:`predict`'s.
    """

    def __init__(self, run_dir: Path) -> None:
        meta, folder = open_model(Path(run_dir), "relations", rel.MODEL_VERSION, rel.MODEL_KEYS)
        self.run_id, self.meta_ = Path(run_dir).name, meta
        tables = rel.read_model.fn(**{part: folder / meta["files"][part]
                                      for part in rel.MODEL_PARTS})
        self.vocabulary_ = tables["vocabulary"]
        self.features_ = tables["features"]
        self.centroids_ = tables["centroids"]
        self.clusters_ = tables["clusters"]
        params = run_params(RelationDiscovery, meta,
                            lambda: read_run_keys(Path(run_dir))["config"] or {},
                            folder / MODEL_JSON)
        est = RelationDiscovery(**params)
        est.n_features_in_ = len(self.vocabulary_)
        est.n_clusters_ = self.n_clusters
        est.selected_features_ = self.features_["feature"].to_numpy(np.intp)
        est.cluster_centers_ = rel.centers_matrix(self.centroids_, self.n_clusters,
                                                  len(self.features_))
        est.cluster_labels_ = {int(c): list(w) for c, w in
                               zip(self.clusters_["cluster"], self.clusters_["words"],
                                   strict=True)}
        self.estimator_ = est

    def __repr__(self) -> str:
        return (f"RelationsModel(run={self.run_id!r}, clusters={self.n_clusters}, "
                f"words={len(self.features_)} of {len(self.vocabulary_)})")

    @property
    def n_clusters(self) -> int:
        return len(self.clusters_)

    def mentions(self, pairs: Any, format: str = "auto", source: str = "pairs") -> pd.DataFrame:
        """The mentions table of ``pairs`` (:func:`scarce.tasks.relations.parse`'s columns), every
        pair kept, ``gold`` the label as the training run read its labels (directed or not).

        ``format`` (``auto``, ``semeval``, ``jsonl``) is for a path; ``source`` names a list
        of dicts in the output (a file is named by its file name, as ``scarce apply`` does).
        """
        directed = bool(self.meta_["directed"])
        if pairs is None:
            raise InputError("pairs is None; expected a path or a list of dicts (one per pair)")
        if isinstance(pairs, str | os.PathLike):
            if not str(pairs):
                raise InputError("pairs is an empty path")
            path = Path(pairs)
            return rel.parse.fn(path=path, fmt=format, relation_types=None, include_other=True,
                                directed=directed, source=path.name)
        return rel.mentions_table(_records(pairs), source, relation_types=None,
                                  include_other=True, directed=directed)

    def assign(self, pairs: Any, format: str = "auto", source: str = "pairs") -> pd.DataFrame:
        """Each pair's nearest cluster with its label words: the columns and values of the
        ``assignments.parquet`` that ``scarce apply`` writes for the same input.

        Returns
        -------
        DataFrame
            ``source``, ``id``, ``sentence``, ``head``, ``tail``, ``cluster``, ``label``
            (the cluster's DCM words), ``distance`` (to its centroid), ``n_words`` (selected
            words in the pair's context; 0: nothing to go by, the centroid nearest the
            origin) and ``gold`` (the pair's label; missing when it has none).
        """
        return rel.assign_pairs.fn(
            mentions=self.mentions(pairs, format, source), vocabulary=self.vocabulary_,
            features=self.features_, centroids=self.centroids_, clusters=self.clusters_,
            contexts=self.meta_["contexts"], params=self.meta_["assign"])

    def predict(self, pairs: Any, format: str = "auto") -> Any:
        """The cluster of each pair (the ``cluster`` column of :meth:`assign`)."""
        return self.assign(pairs, format)["cluster"].to_numpy()


def _records(pairs: Any) -> pd.DataFrame:
    """The pairs table of a list of dicts (:func:`scarce.tasks.readers.jsonl.read_records`); a
    ``pairs`` that is no list of dicts, or a bad record, is one :class:`InputError` naming
    ``pairs`` and the record (``pairs[2]: ...``)."""
    if isinstance(pairs, Mapping | str | bytes) or not isinstance(pairs, Iterable):
        raise InputError(f"pairs is {kind_of(pairs)}; expected a path or a list of dicts (one "
                         "per pair)")
    items = list(pairs)
    if not items:
        raise InputError("pairs is empty: no pair to assign")
    bad = next((i for i, p in enumerate(items) if not isinstance(p, Mapping)), None)
    if bad is not None:
        raise InputError(f"pairs[{bad}] is {kind_of(items[bad])}; expected a dict with tokens, "
                         "head and tail")
    try:
        return read_records(items)
    except ValueError as exc:  # names the record: pairs[2]: ...
        raise InputError(str(exc)) from None
