"""A LEML run's model as a Python object: what :func:`scarce.load_model` returns for it.

The model is read from the run's ``outputs/model/`` (Parquet and ``model.json``, never a
pickle), with the featurisation the run used, so that a notebook gets the same numbers as
``scarce apply`` on the same input.  Reading the model and scoring rows import neither Prefect
nor scikit-learn (the factors score through :class:`~scarce.algorithms.leml.predict.FactorModel`, a
file is read by :mod:`scarce.tasks.leml_files`): the estimator, and a table's vectoriser, are
imported when they are used.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scarce.algorithms.leml.predict import BATCH_SIZE, FactorModel, predictions_table
from scarce.flows.model_checks import kind_of, read_json, run_params
from scarce.flows.model_format import open_model
from scarce.tasks.errors import InputError, excerpt
from scarce.tasks.leml_files import (
    MODEL_FILES,
    MODEL_VERSION,
    in_feature_space,
    named_predictions,
    new_rows_labels,
    normalize_rows,
    read_dataset,
    read_factor,
    read_label_map,
)
from scarce.tasks.store.encoding import read_parquet_entry

#: What ``model.json`` must hold for the model to load.
MODEL_KEYS = ("rank", "loss", "dtype", "fit_intercept", "normalize", "input_format", "shapes",
              "files", "n_labels")


class LemlModel:
    """A LEML run's model: its factors, its label names and how the run read its input.

    ``X`` is any of:

    - a path to a file in the run's input format, read as ``scarce apply`` reads it (a table
      without its label column is fine);
    - texts (a list of strings), for a model trained on a table's text column: vectorised by
      the run's own vocabulary and idf;
    - a pandas DataFrame with the run's text (or feature) column and, optionally, its label
      column;
    - a feature matrix (rows of raw features, scipy.sparse or dense) to which the run's row
      normalisation is applied.

    Predictions equal those of ``scarce apply`` on the same file, bit for bit.

    Attributes
    ----------
    run_id : str
    estimator_ : LEML
        The fitted estimator (``W_``, ``H_`` set) with every parameter the run trained with
        (``get_params``), so that ``sklearn.base.clone(estimator_)`` trains what the run
        trained.  Built when first used (it imports scikit-learn, which scoring does not
        need); a ``model.json`` whose ``params`` are not the estimator's is refused then.
    labels_ : DataFrame
        The model's labels: ``label`` (index) and ``name`` (null where the data names none).
    features_ : DataFrame
        Its features: ``feature``, ``name`` (a table's vocabulary, the ARFF attribute names,
        else null) and, for a table's text, ``idf``.
    meta_ : dict
        The model's ``model.json``.
    """

    def __init__(self, run_dir: Path) -> None:
        meta, folder = open_model(run_dir, "leml", MODEL_VERSION, MODEL_KEYS)
        self.run_id, self.meta_, self._folder = run_dir.name, meta, folder
        self._factors = FactorModel(
            read_factor(folder / meta["files"]["W"], meta["shapes"]["W"]),
            read_factor(folder / meta["files"]["H"], meta["shapes"]["H"]),
            bool(meta["fit_intercept"]))
        self._files = {part: folder / MODEL_FILES[part] for part in ("features", "labels")}
        self.labels_ = read_label_map(self._files["labels"], self.n_labels)
        self.features_ = read_parquet_entry(self._files["features"])

    def __repr__(self) -> str:
        m = self.meta_
        return (f"LemlModel(run={self.run_id!r}, loss={m['loss']!r}, rank={m['rank']}, "
                f"labels={m['n_labels']})")

    @functools.cached_property
    def estimator_(self) -> Any:
        from scarce.algorithms.leml import LEML

        folder = self._folder
        params = run_params(LEML, self.meta_, lambda: read_json(folder / MODEL_FILES["config"]),
                            folder / "model.json")
        return LEML(**params).set_factors(self._factors.W, self._factors.H)

    @property
    def n_labels(self) -> int:
        return int(self.meta_["n_labels"])

    @property
    def label_names(self) -> list:
        """The labels' names by index (None where the training data names none)."""
        return [None if pd.isna(n) else str(n) for n in
                self.labels_.sort_values("label")["name"].tolist()]

    def _table(self) -> dict:
        if "table" not in self.meta_:
            raise ValueError(f"the model of run {self.run_id} was trained on "
                             f"{self.meta_['input_format']} data, not a table's text: give "
                             "a file in that format or a feature matrix")
        return self.meta_["table"]

    def _rows(self, X: Any) -> tuple[sp.csr_matrix, sp.csr_matrix | None]:
        """X in the model's feature space, and the labels when X carries them; bad rows are
        one :class:`InputError` naming ``X`` and the row (:func:`check_rows`)."""
        m, dtype = self.meta_, np.dtype(self.meta_["dtype"]).type
        kind = check_rows(X, "X")
        if kind == "path":
            path, fmt = Path(X), m["input_format"]
            if fmt == "table":
                from scarce.tasks.leml_table import load_table

                read = load_table.fn(path=path, table=self._table(), dtype=m["dtype"],
                                     normalize=m["normalize"], **self._files)
                return read["X"], read["Y"]
            read = read_dataset(path, fmt, m["dtype"], m["n_labels"] if fmt == "arff" else None,
                                m["normalize"],
                                with_labels=new_rows_labels(path, fmt)["with_labels"])
            return in_feature_space(read["X"], self._factors.n_features_in_, path, fmt), \
                read["Y"]
        if kind in ("frame", "texts"):
            table = self._table()
            if kind == "texts":
                X = pd.DataFrame({table["features_column"] or table["text_column"]: list(X)})
            from scarce.tasks.leml_table import read_frame_xy

            return read_frame_xy(X.reset_index(drop=True), table, self.features_,
                                 self.labels_, m["dtype"], m["normalize"])
        X = sp.csr_matrix(X, dtype=dtype)
        if X.shape[1] != self._factors.n_features_in_:
            raise InputError(f"X has {X.shape[1]} features but the model of run "
                             f"{self.run_id} has {self._factors.n_features_in_}")
        if m["normalize"] == "l2":  # as a file of the run's is read
            X = normalize_rows(X)
        return X, None

    def _label_matrix(self, names: Any, n_rows: int) -> sp.csr_matrix:
        """Per row a list of label names as the model's 0/1 label matrix (a name the model
        does not have is left out, as ``scarce apply`` leaves it out); ``Y[i]`` that is no
        list of names is an :class:`InputError` naming it."""
        rows = list(names)
        if len(rows) != n_rows:
            raise InputError(f"Y has {len(rows)} rows but X has {n_rows}")
        index = {name: i for i, name in enumerate(self.label_names) if name is not None}
        indptr, indices = [0], []
        for i, row in enumerate(rows):
            if isinstance(row, str) or not isinstance(row, list | tuple | set | np.ndarray):
                raise InputError(f"Y[{i}] is {kind_of(row)}; expected a list of label names "
                                 "(['name'] for one, [] for none)")
            bad = next((j for j, n in enumerate(row) if not isinstance(n, str)), None)
            if bad is not None:
                raise InputError(f"Y[{i}][{bad}] is {kind_of(list(row)[bad])}; expected a label "
                                 "name (str)")
            indices.extend(sorted({index[n] for n in row if n in index}))
            indptr.append(len(indices))
        return sp.csr_matrix((np.ones(len(indices), dtype=np.float32), indices, indptr),
                             shape=(len(indptr) - 1, self.n_labels))

    def predict_top_k(self, X: Any, k: int = 5, batch_size: int = BATCH_SIZE) -> pd.DataFrame:
        """The ``k`` best labels of every row, with their scores: the columns of the run's
        ``predictions.parquet`` (row, rank, label, label_name, score), as ``scarce apply``
        writes them."""
        _check_count(k, "k")
        _check_count(batch_size, "batch_size")
        rows, _ = self._rows(X)
        return named_predictions(predictions_table(self._factors, rows, k, batch_size),
                                 self.labels_)

    def decision_function(self, X: Any) -> np.ndarray:
        """The score of every label for every row (n x L, dense; columns in label order,
        named by :attr:`label_names`)."""
        rows, _ = self._rows(X)
        return self._factors.decision_function(rows)

    def predict_proba(self, X: Any) -> np.ndarray:
        """For the logistic loss, the modelled probability of every label for every row,
        ``sigmoid(x^T W h_j)`` (n x L); the squared and squared-hinge losses model no
        probability (use :meth:`decision_function`)."""
        check_rows(X, "X")  # a bad X is named first, as by the other methods
        if self.meta_["loss"] != "logistic":
            raise ValueError(f"the {self.meta_['loss']} loss models no probability; "
                             "decision_function gives the scores")
        from scipy.special import expit

        return expit(self.decision_function(X))

    def score(self, X: Any, Y: Any = None) -> float:
        """P@1 of the model on ``X`` against the labels ``Y``: a 0/1 matrix, or per row a
        list of label names; when not given, the labels ``X`` carries (a file or a table
        with its label column)."""
        rows, read = self._rows(X)
        if Y is None:
            Y = read
        elif not sp.issparse(Y) and not isinstance(Y, np.ndarray):
            if isinstance(Y, str) or not isinstance(Y, list | tuple | pd.Series):
                raise InputError(f"Y is {kind_of(Y)}; expected a 0/1 label matrix or, per row, "
                                 "a list of label names")
            Y = self._label_matrix(Y, rows.shape[0])
        elif Y.shape != (rows.shape[0], self.n_labels):
            raise InputError(f"Y has shape {Y.shape} but X has {rows.shape[0]} rows and the "
                             f"model {self.n_labels} labels")
        if Y is None or not sp.csr_matrix(Y).nnz:
            raise InputError("score needs labels: Y, or a file or table of X with its labels")
        return self.estimator_.score(rows, Y)


def _check_count(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {excerpt(value)}")


def check_rows(X: Any, name: str) -> str:
    """What kind of rows ``X`` is (``path``, ``frame``, ``texts`` or ``matrix``), after
    checking it has rows and each is of its kind; else an :class:`InputError` naming ``name``
    and the first bad row (``X[1] is None; expected a text``).

    scikit-learn's own checks would stop later, inside the vectoriser or ``check_array``,
    with a message that names neither the argument nor the row.
    """
    if X is None:
        raise InputError(f"{name} is None; expected a path, texts, a DataFrame or a feature "
                         "matrix")
    if isinstance(X, str | os.PathLike):
        if not str(X):
            raise InputError(f"{name} is an empty path")
        return "path"
    if isinstance(X, pd.DataFrame):
        if not len(X):
            raise InputError(f"{name} has no rows")
        return "frame"
    if sp.issparse(X) or (isinstance(X, np.ndarray) and X.ndim != 1):
        rows = X if sp.issparse(X) else np.asarray(X)
        if rows.ndim != 2 or not rows.shape[0]:
            raise InputError(f"{name} has shape {rows.shape}; expected a matrix with rows")
        ok = _finite(rows.data if sp.issparse(rows) else rows)
        if not ok.all():
            if sp.issparse(rows):  # the row of the first bad stored value
                bad = np.searchsorted(sp.csr_matrix(rows).indptr, np.argmin(ok), side="right")
                bad -= 1
            else:
                bad = np.argmin(ok.all(axis=1))
            raise InputError(f"{name}[{int(bad)}] holds a value that is not a finite number")
        return "matrix"
    if not isinstance(X, list | tuple | pd.Series | np.ndarray):
        raise InputError(f"{name} is {kind_of(X)}; expected a path, texts (a list of str), a "
                         "DataFrame or a feature matrix")
    items = list(X)
    if not items:
        raise InputError(f"{name} is empty: no row to score")
    if any(isinstance(t, str) for t in items):
        bad = next((i for i, t in enumerate(items) if not isinstance(t, str)), None)
        if bad is not None:
            text = next(i for i, t in enumerate(items) if isinstance(t, str))
            raise InputError(f"{name}[{bad}] is {kind_of(items[bad])}; expected a text (str), "
                             f"as {name}[{text}] is")
        return "texts"
    width = None
    for i, row in enumerate(items):  # rows of numbers: a dense matrix
        if not isinstance(row, list | tuple | np.ndarray):
            raise InputError(f"{name}[{i}] is {kind_of(row)}; expected a text (str) or a row of "
                             "numbers")
        try:
            values = np.asarray(row, dtype=np.float64)
        except (TypeError, ValueError):
            values = None
        if values is None or values.ndim != 1 or not np.isfinite(values).all():
            raise InputError(f"{name}[{i}] is not a row of finite numbers")
        if width is not None and values.size != width:
            raise InputError(f"{name}[{i}] has {values.size} values but {name}[0] has {width}")
        width = values.size
    return "matrix"


def _finite(values: np.ndarray) -> np.ndarray:
    """Per value of an array: is it a finite number (text or None is not)?"""
    values = np.asarray(values)
    if values.dtype.kind in "biuf":
        return np.isfinite(values)
    return np.vectorize(lambda v: isinstance(v, int | float | np.integer | np.floating)
                        and not isinstance(v, bool) and bool(np.isfinite(v)),
                        otypes=[bool])(values)

