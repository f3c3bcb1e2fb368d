"""LEML's files: a dataset file read into rows, and the arrays and label map of a stored model.

What the ``leml-load`` and ``leml-score`` steps (:mod:`scarce.tasks.leml`) and a LEML model loaded
into Python (:func:`scarce.load_model`) read with, so that both read a file alike.  Kept apart
from the steps, which import the estimator and its scikit-learn, the Dask backends and
Prefect's step machinery: a loaded model imports this module and none of those.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import scipy.sparse as sp

from scarce.algorithms.leml.data import held_out_rows
from scarce.algorithms.leml.normalize import normalize_rows, unit_rows  # noqa: F401 (re-exported)
from scarce.algorithms.memory import check_allocation
from scarce.tasks.errors import InputError
from scarce.tasks.logs import log_both
from scarce.tasks.readers.text import decode_text, read_bytes
from scarce.tasks.readers.xmc import read_xmc
from scarce.tasks.store.encoding import CorruptEntry, entry_shape, read_parquet_entry

#: Version of the model format (``outputs/model/``); ``apply-leml`` and a loaded model
#: read only this version.
MODEL_VERSION = 1
#: The model's files in ``outputs/model/``, by part.
MODEL_FILES = {"W": "W.parquet", "H": "H.parquet", "features": "features.parquet",
               "labels": "labels.parquet", "propensity": "propensity.parquet",
               "config": "config.json"}


def parquet_pair(path: str | Path) -> tuple[Path, Path]:
    """``<name>.X.parquet`` and ``<name>.Y.parquet`` from either name."""
    base = str(path).removesuffix(".parquet").removesuffix(".X").removesuffix(".Y")
    return Path(base + ".X.parquet"), Path(base + ".Y.parquet")


def label_file(path: str | Path, format: str, required: bool = True) -> Path | None:
    """The second file a dataset in ``format`` is read from (the Y of a Parquet pair; None for
    the one-file formats), passed to :func:`~scarce.tasks.leml.load` so that its bytes enter the
    step's key.  Not ``required`` (new rows to label): None when that file does not exist, and
    :func:`~scarce.tasks.leml.load` reads X alone."""
    if format != "parquet":
        return None
    y_path = parquet_pair(path)[1]
    return y_path if required or y_path.exists() else None


def new_rows_labels(path: str | Path, format: str) -> dict:
    """The label arguments of :func:`~scarce.tasks.leml.load` for new rows to label (``apply-leml``,
    a loaded model): the Y of a Parquet pair when it exists, else X read alone."""
    labels = label_file(path, format, required=False)
    return {"labels_file": labels, "with_labels": format != "parquet" or labels is not None}


def _parquet_shapes(path: Path) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of the X and Y of a Parquet pair, from their footers: both matrices, with
    as many rows and at least one row, feature and label."""
    x_path, y_path = parquet_pair(path)
    shapes = []
    for part in (x_path, y_path):
        if not part.is_file():
            raise InputError("file not found", path=part)
        try:
            shapes.append(entry_shape(part))
        except CorruptEntry as exc:
            raise InputError(str(exc).removeprefix(f"{part}: "), path=part) from None
    (x_shape, y_shape) = shapes
    if len(x_shape) != 2 or len(y_shape) != 2:
        raise InputError(f"expected two matrices, got shapes {list(x_shape)} and "
                         f"{list(y_shape)}", path=x_path)
    if x_shape[0] != y_shape[0]:
        raise InputError(f"X has {x_shape[0]:,} rows but {y_path.name} has {y_shape[0]:,}",
                         path=x_path)
    for count, what, where in ((x_shape[0], "rows", x_path), (x_shape[1], "features", x_path),
                               (y_shape[1], "labels", y_path)):
        if count == 0:
            raise InputError(f"0 {what}; a dataset needs at least one", path=where)
    _check_labels(_value_range(y_path), y_path)
    return tuple(x_shape), tuple(y_shape)


def _value_range(path: Path) -> tuple[float, float] | None:
    """The smallest and largest stored value of a sparse store entry, from the statistics
    in its footer (None when it has none: a dense entry, or a writer that kept none)."""
    try:
        meta = pq.ParquetFile(path).metadata
        column = meta.schema.names.index("value")
        stats = [meta.row_group(g).column(column).statistics for g in range(meta.num_row_groups)]
    except (ValueError, OSError):
        return None
    if not stats or any(s is None or not s.has_min_max for s in stats):
        return None
    return float(min(s.min for s in stats)), float(max(s.max for s in stats))


def _check_labels(extent: tuple[float, float] | None, y_path: Path) -> None:
    """A label matrix holds 0 and 1 only: values beyond (``extent``, the smallest and
    largest) are the features of a pair whose X and Y were swapped, or no labels at all."""
    if extent is not None and (extent[0] < 0 or extent[1] > 1):
        raise InputError(f"holds values from {extent[0]:g} to {extent[1]:g}, but a label "
                         "matrix holds 0 and 1 only (are X and Y swapped?)", path=y_path)


def _read_parquet_xy(path: Path, dtype,
                     with_labels: bool = True) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``<name>.X.parquet`` and ``<name>.Y.parquet``: sparse (row, col, value) tables as
    the result store writes them (path names either file), checked as
    :func:`_parquet_shapes` says and with every value of X finite in ``dtype``.  Without
    ``with_labels`` (new rows to label) only X is read and Y has no column."""
    x_path, y_path = parquet_pair(path)
    if with_labels:
        _parquet_shapes(path)
        Y = read_parquet_entry(y_path)
    else:
        if not x_path.is_file():
            raise InputError("file not found", path=x_path)
        try:
            shape = entry_shape(x_path)
        except CorruptEntry as exc:
            raise InputError(str(exc).removeprefix(f"{x_path}: "), path=x_path) from None
        if len(shape) != 2 or 0 in shape:
            raise InputError(f"expected a matrix of at least one row and one feature, got "
                             f"shape {list(shape)}", path=x_path)
        Y = sp.csr_matrix((shape[0], 0), dtype=np.float32)
    X = read_parquet_entry(x_path)
    if not (sp.issparse(X) or isinstance(X, np.ndarray)) or not sp.issparse(Y):
        raise InputError("expected a sparse or dense X and a sparse Y", path=path)
    if with_labels and Y.nnz:  # (the footer's statistics may be absent: the values)
        data = sp.csr_matrix(Y).data
        _check_labels((float(data.min()), float(data.max())), y_path)
        if not np.isin(data, (0, 1)).all():
            raise InputError("holds values other than 0 and 1, but a label matrix holds 0 "
                             "and 1 only (are X and Y swapped?)", path=y_path)
    with np.errstate(over="ignore", invalid="ignore"):
        X = sp.csr_matrix(X, dtype=dtype)
    bad = ~np.isfinite(X.data)
    if bad.any():
        at = int(np.flatnonzero(bad)[0])
        row = int(np.searchsorted(X.indptr, at, side="right")) - 1
        raise InputError(f"row {row} (0-based), column {int(X.indices[at])}: a value that is "
                         f"not finite in {np.dtype(dtype).name}", path=x_path)
    return X, sp.csr_matrix(Y)


def check_index_maps(path: Path, n_features: int, n_labels: int, what: str | None = None,
                     advice: str = "check the dimensions the file declares") -> None:
    """Stop before the index maps of a file whose declared dimensions cannot be held (an
    Extreme Classification header's ``D`` or ``L`` of 10^12, a table's feature index of
    2^62): one int64 and one name slot per column, with the copies pandas makes.  ``what``
    says where the dimensions come from (default: the file's declared ones)."""
    check_allocation((int(n_features) + int(n_labels),), np.int64, copies=3,
                     what=(what or f"{path}: the index maps of its {int(n_features):,} "
                           f"features and {int(n_labels):,} labels"),
                     advice=advice)


def index_map(column: str, n: int, names: list[str] | None = None) -> pd.DataFrame:
    """The columns of X (``column="feature"``) or Y (``"label"``): ``column`` the 0-based
    index, ``name`` the file's name for it (null where the format names none)."""
    names = [None] * n if names is None else list(names)
    return pd.DataFrame({column: np.arange(n, dtype=np.int64),
                         "name": pd.array(names, dtype="string")})


def check_rows(X: sp.csr_matrix, Y, path: Path, labelled: bool, place,
               why: str = "") -> None:
    """What the rows of a loaded file (``X``, ``Y``) must hold, or say.

    ``labelled`` (the whole training or test set): at least one row with a label and one
    with a feature, else an :class:`InputError` naming ``path``: a model learned from no
    label or no feature learns nothing, and metrics of no label or of rows scored from the
    bias alone measure nothing.  Rows without a feature among others are said, with their
    count, the first's place (``place(row)``: ``line 17``, ``row 3``) and ``why`` (what made
    them so, from the caller: ``2 with an empty 'text' cell``), as a warning of the run: they
    are kept (a new row to label may have no known word), but are scored, and learned from,
    by the bias alone."""
    n = X.shape[0]
    if labelled and not sp.csr_matrix(Y).count_nonzero():
        raise InputError(f"none of the {n:,} points has a label: a training or test set "
                         "needs labels (to learn from, to score against)", path=path)
    empty = np.flatnonzero(np.diff(sp.csr_matrix(X).indptr) == 0)
    if labelled and empty.size == n:
        raise InputError(f"none of the {n:,} points has a feature (every feature value is "
                         "missing or 0): a training or test set needs features", path=path)
    if empty.size:
        log_both(logging.WARNING, "%s: %s of the %s rows have no feature (%sthe first at %s): "
                 "their feature rows are all zero", path.name, f"{empty.size:,}", f"{n:,}",
                 f"{why}; " if why else "", place(int(empty[0])))


def _row_place(path: Path, format: str, row: int) -> str:
    """Where data row ``row`` (0-based) of a file read by :func:`~scarce.tasks.leml.load` is: its
    line (XC,
    ARFF), else its row (1-based)."""
    line = data_line(path, format, row)
    return f"line {line}" if line is not None else f"row {row + 1}"


#: The fewest rows a model is fitted on: the labels' propensities (PSP@k) take the log of
#: the number of training rows less one (:func:`inverse_propensity_from_counts`).
MIN_TRAINING_ROWS = 2


def check_training_rows(n: int, validation_fraction: float, path: Path | None) -> None:
    """An :class:`InputError` when a training set of ``n`` rows (of ``path``), less the
    validation rows ``validation_fraction`` holds out, leaves fewer than
    :data:`MIN_TRAINING_ROWS` to fit: named by ``dataset.validation_fraction`` when the split
    is what leaves too few, else by ``dataset.train``."""
    held = held_out_rows(n, validation_fraction) if validation_fraction > 0 else 0
    if n - held >= MIN_TRAINING_ROWS:
        return
    if held >= n:
        raise InputError(f"validation_fraction {validation_fraction:g} holds out all {n:,} "
                         "rows of the training set, leaving none to fit", path=path,
                         key="dataset.validation_fraction")
    if held:
        raise InputError(f"validation_fraction {validation_fraction:g} holds out {held:,} of "
                         f"the {n:,} rows of the training set, leaving {n - held} to fit (a "
                         f"model is fitted on at least {MIN_TRAINING_ROWS})", path=path,
                         key="dataset.validation_fraction")
    raise InputError(f"the training set has {n:,} row{'s' * (n != 1)}; a model is fitted on "
                     f"at least {MIN_TRAINING_ROWS}", path=path, key="dataset.train")


#: The column of a predictions table holding the label's name (null where the training data
#: names none), beside its index ``label``.
LABEL_NAME = "label_name"


def named_predictions(predictions: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """``predictions`` (:func:`predictions_table`) with the name of every label, from the
    model's label map ``labels`` (``label``, ``name``), after the ``label`` column."""
    names = labels.sort_values("label")["name"].astype("string").to_numpy()
    out = predictions.copy()
    out.insert(out.columns.get_loc("label") + 1, LABEL_NAME,
               pd.array(names[out["label"].to_numpy()], dtype="string"))
    return out


def data_line(path: Path, format: str, row: int) -> int | None:
    """The 1-based line of data row ``row`` (0-based) of a file read by
    :func:`~scarce.tasks.leml.load`: the row's own line in an Extreme Classification file (after the
    header) or in the ``@data`` section of an ARFF file (blank and ``%`` lines skipped, as the
    reader skips them); None for Parquet, which has no lines."""
    if format == "xmc":
        return row + 2
    if format != "arff":
        return None
    lines = decode_text(read_bytes(path), path).split("\n")
    data = False
    for lineno, line in enumerate(lines, start=1):
        s = line.strip()
        if not s or s.startswith("%"):
            continue
        if data:
            if row == 0:
                return lineno
            row -= 1
        elif s.lower().startswith("@data"):
            data = True
    return None


def read_dataset(path: Path, format: str, dtype: str, n_labels: int | None, normalize: str,
                 *, labelled: bool = False, with_labels: bool = True) -> dict:
    """A multi-label dataset file read into ``X``, ``Y`` and the index maps of their columns:
    what the ``leml-load`` step (:func:`scarce.tasks.leml.load`, whose docstring has the arguments)
    stores, and what a loaded model reads a file with."""
    dt = np.dtype(dtype).type
    names: tuple = (None, None)
    if format == "xmc":
        X, Y = read_xmc(path, dtype=dt)
    elif format == "arff":
        if n_labels is None:
            raise InputError("an ARFF file needs n_labels (its last n_labels attributes are "
                             "the labels)", path=path, key="dataset.n_labels")
        from scarce.tasks.readers.arff import read_arff  # (its XML reader: ARFF's alone)

        X, Y, *names = read_arff(path, n_labels=n_labels, dtype=dt)
    elif format == "parquet":
        X, Y = _read_parquet_xy(path, dt, with_labels=with_labels)
    else:
        raise InputError(f"unknown format {format!r} (xmc, arff, parquet)", path=path)
    X = sp.csr_matrix(X, dtype=dt)
    check_rows(X, Y, path, labelled, lambda row: _row_place(path, format, row))
    check_index_maps(path, X.shape[1], Y.shape[1])
    if normalize == "l2":
        X = normalize_rows(X)
    elif normalize != "none":
        raise InputError(f"unknown normalize {normalize!r} (none, l2)", key="dataset.normalize")
    return {"X": X, "Y": sp.csr_matrix(Y, dtype=np.float32),
            "features": index_map("feature", X.shape[1], names[0]),
            "labels": index_map("label", Y.shape[1], names[1])}


def in_feature_space(X: sp.csr_matrix, n_features: int, path: Path, format: str):
    """``X`` with the model's ``n_features`` columns: the columns a file does not have are
    zero; a row with a feature the model does not have is an :class:`InputError` naming the
    file and the row's line (its row, for Parquet)."""
    X = sp.csr_matrix(X)
    if X.shape[1] > n_features:
        beyond = X[:, n_features:].tocsr()
        if beyond.nnz:
            row = int(np.flatnonzero(np.diff(beyond.indptr))[0])
            index = n_features + int(beyond.indices[beyond.indptr[row]:beyond.indptr[row + 1]]
                                     .min())
            line = data_line(path, format, row)
            where = "" if line is not None else f"row {row} (0-based): "
            raise InputError(f"{where}feature index {index} is beyond the model's feature "
                             f"space (indices 0..{n_features - 1})", path=path, line=line)
        return X[:, :n_features].tocsr()
    if X.shape[1] < n_features:
        return sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], n_features))
    return X


def read_factor(path: Path, shape: tuple[int, int]) -> np.ndarray:
    """An array of a stored model (a factor, the propensities; store-format Parquet): an
    :class:`InputError` naming the file when it is damaged or its shape is not the one
    ``model.json`` gives."""
    value = read_parquet_entry(path)
    if not isinstance(value, np.ndarray) or value.shape != tuple(shape):
        got = getattr(value, "shape", type(value).__name__)
        raise InputError(f"expected a dense array of shape {tuple(shape)} (model.json), "
                         f"got {got}", path=path)
    return value


def read_label_map(path: Path, n_labels: int) -> pd.DataFrame:
    """A model's label map (``labels.parquet``: ``label``, ``name``): an :class:`InputError`
    naming the file when it is damaged or does not map the model's ``n_labels`` labels."""
    value = read_parquet_entry(path)
    if (not isinstance(value, pd.DataFrame) or not {"label", "name"} <= set(value.columns)
            or sorted(value["label"].tolist()) != list(range(n_labels))):
        raise InputError(f"expected the label map of the model's {n_labels} labels (columns "
                         "label, name)", path=path)
    return value
