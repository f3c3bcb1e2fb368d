"""A finished run's model as a Python object: what :func:`scarce.load_model` returns.

The model is read from the run's ``outputs/model/`` (Parquet and ``model.json``, never a
pickle), with the featurisation the run used, so that a notebook gets the same numbers as
``scarce apply`` on the same input.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.preprocessing import normalize as sk_normalize

from scarce.algorithms.leml import LEML
from scarce.algorithms.leml.predict import BATCH_SIZE, predictions_table
from scarce.algorithms.metrics.multilabel import precision_at_k
from scarce.flows import manifest as mf
from scarce.flows.apply import open_model, resolve_model_run
from scarce.flows.model_relations import RelationsModel
from scarce.flows.runtime import default_runs_root
from scarce.tasks.errors import InputError
from scarce.tasks.leml import _read_factor, in_feature_space, label_file, load

#: The flows whose models load into Python, by the flow name a manifest records.
LOADERS: dict[str, Any] = {}


def load_model(run: str | os.PathLike[str] = "latest", flow: str | None = None) -> Any:
    """The model of a finished run.

    Parameters
    ----------
    run : str or path, default="latest"
        A run id, ``latest`` / ``latest:<name>`` (the newest finished run of ``flow``, by
        default of any flow that has a model), or a run folder's path.
    flow : str, optional
        The training flow, to choose among ``latest`` runs.

    Returns
    -------
    LemlModel
        For a LEML run (the flows whose models load here are the keys of :data:`LOADERS`).

    Raises
    ------
    InputError
        No such run, a run of a flow whose model does not load into Python, a model written in
        a format version this code does not read.
    """
    runs = default_runs_root()
    text = str(run)
    if text == "latest" or text.startswith("latest:"):
        flows = [flow] if flow else list(LOADERS)
        found = []
        for name in flows:
            try:
                found.append(resolve_model_run(text, name, runs))
            except InputError:
                continue
        if not found:
            raise InputError(f"no finished run of {' or '.join(flows)} in {runs}", key="run")
        run_dir = max(found, key=lambda d: (mf.read_manifest(d).get("finished", ""), d.name))
    else:
        path = Path(run)
        run_dir = path if (path / mf.MANIFEST).is_file() else runs / text
        if not (run_dir / mf.MANIFEST).is_file():
            raise InputError(f"no run {text!r} in {runs} (see `scarce runs`)", key="run")
    recorded = mf.read_manifest(run_dir)["flow"]
    if recorded not in LOADERS:
        raise InputError(f"run {run_dir.name} is a {recorded} run; models of "
                         f"{', '.join(sorted(LOADERS))} runs load into Python (the others "
                         f"through `scarce apply`)", key="run")
    return LOADERS[recorded](run_dir)


class LemlModel:
    """A LEML run's model: its factors and how the run read its input.

    ``X`` is a path to a file in the run's input format (read as ``scarce apply`` reads it),
    or a feature matrix (rows of raw features, scipy.sparse or dense) to which the run's row
    normalisation is applied.  Predictions equal those of ``scarce apply`` on the same file.

    Attributes
    ----------
    run_id : str
    estimator_ : LEML
        The fitted estimator (``W_``, ``H_`` set).
    meta_ : dict
        The model's ``model.json``.
    """

    def __init__(self, run_dir: Path) -> None:
        from scarce.flows.leml import MODEL_VERSION

        meta, folder = open_model(run_dir, "leml", MODEL_VERSION,
                                  ("rank", "loss", "dtype", "fit_intercept", "normalize",
                                   "input_format", "shapes", "files", "n_labels"))
        self.run_id, self.meta_ = run_dir.name, meta
        params = {k: meta[k] for k in ("rank", "loss", "dtype", "fit_intercept")}
        self.estimator_ = LEML(**params).set_factors(
            _read_factor(folder / meta["files"]["W"], meta["shapes"]["W"]),
            _read_factor(folder / meta["files"]["H"], meta["shapes"]["H"]))

    def __repr__(self) -> str:
        m = self.meta_
        return (f"LemlModel(run={self.run_id!r}, loss={m['loss']!r}, rank={m['rank']}, "
                f"labels={m['n_labels']})")

    @property
    def n_labels(self) -> int:
        return int(self.meta_["n_labels"])

    def _rows(self, X: Any) -> tuple[sp.csr_matrix, sp.csr_matrix | None]:
        """X in the model's feature space, and the labels when read from a file."""
        m, dtype = self.meta_, np.dtype(self.meta_["dtype"]).type
        if isinstance(X, str | os.PathLike):
            path, fmt = Path(X), m["input_format"]
            read = load.fn(path=path, format=fmt, dtype=m["dtype"], normalize=m["normalize"],
                           n_labels=m["n_labels"] if fmt == "arff" else None,
                           labels_file=label_file(path, fmt))
            return in_feature_space(read["X"], self.estimator_.n_features_in_, path, fmt), \
                read["Y"]
        X = sp.csr_matrix(X, dtype=dtype)
        if X.shape[1] != self.estimator_.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features but the model of run {self.run_id} "
                             f"has {self.estimator_.n_features_in_}")
        if m["normalize"] == "l2":
            X = sk_normalize(X, norm="l2").astype(dtype)
        return X, None

    def predict_top_k(self, X: Any, k: int = 5, batch_size: int = BATCH_SIZE) -> pd.DataFrame:
        """The ``k`` best labels of every row, with their scores: the columns of the run's
        ``predictions.parquet`` (row, rank, label, score), as ``scarce apply`` writes them."""
        rows, _ = self._rows(X)
        return predictions_table(self.estimator_, rows, k, batch_size)

    def decision_function(self, X: Any) -> np.ndarray:
        """The score of every label for every row (n x L, dense)."""
        rows, _ = self._rows(X)
        return self.estimator_.decision_function(rows)

    def score(self, X: Any, Y: Any = None) -> float:
        """P@1 of the model on ``X`` against the labels ``Y`` (read from the file when ``X``
        is a path and ``Y`` is not given): the score ``GridSearchCV`` would maximise."""
        rows, read = self._rows(X)
        Y = read if Y is None else sp.csr_matrix(Y)
        if Y is None:
            raise ValueError("score needs labels: Y, or a file of X with its labels")
        top = self.estimator_.predict_top_k(rows, 1)
        return float(precision_at_k(Y, top, ks=[1])[1])


LOADERS["leml"] = LemlModel
LOADERS["relations"] = RelationsModel
