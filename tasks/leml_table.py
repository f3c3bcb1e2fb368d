"""LEML's steps over a plain table (``dataset.format: table``): the label and feature space
learned from the training table, and every table read in that space.

``leml-table-space`` reads the training table once: the label names (sorted, or in the
order of ``label_list``) and the features (a vocabulary with its idf, fitted by the
vectoriser on the training table only, or the width of a sparse feature column).
``leml-load-table`` reads any table (training, test, or new rows for ``apply-leml``) in that
space: its text through the rebuilt vectoriser (:func:`scarce.algorithms.leml.text.vectorize`), its
labels to the space's columns.  The space is two Parquet files, the model's
``features.parquet`` and ``labels.parquet``: the training flow passes its store entries,
``apply-leml`` and :func:`scarce.load_model` the model's copies, so every route reads a text
into the same row.  The cells' forms are :mod:`scarce.tasks.readers.table`'s.

What a table must hold is checked where it is first known: the columns from the tables'
heads before anything runs (:func:`check_table_columns`); at least two rows and a feature in
the training table before its space is stored; a label and a feature in a training or test
table as it is loaded (:func:`scarce.tasks.leml_files.check_rows`, which says rows without a
feature).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scarce.algorithms.leml.text import fit_vocabulary, vectorize
from scarce.tasks.errors import InputError, excerpt
from scarce.tasks.leml_files import (
    check_index_maps,
    check_rows,
    check_training_rows,
    normalize_rows,
)
from scarce.tasks.readers import names as name_rules
from scarce.tasks.readers.table import (
    SEPARATOR_KEY,
    feature_rows,
    label_names,
    read_table,
    table_columns,
)
from scarce.tasks.readers.text import decode_text, read_bytes
from scarce.tasks.steps import content_only, log_both, step
from scarce.tasks.store.encoding import read_parquet_entry


def _feature_source(table: dict) -> tuple[str, str]:
    """``("features", column)`` for a sparse feature column, else ``("text", column)``."""
    if table.get("features_column"):
        return "features", table["features_column"]
    return "text", table["text_column"]


def read_label_list(path: Path) -> list[str]:
    """The label names of a ``label_list`` file, one per line in model order (blank lines
    skipped); a name given twice is an error naming both lines."""
    seen: dict[str, int] = {}
    for lineno, line in enumerate(decode_text(read_bytes(path), path).split("\n"), start=1):
        name = line.strip()
        if not name:
            continue
        if name in seen:
            raise InputError(f"label {name!r} is listed twice (first at line {seen[name]})",
                             path=path, line=lineno)
        seen[name] = lineno
    if not seen:
        raise InputError("no label names in the label list", path=path)
    return list(seen)


def _texts(cells: pd.Series, path: Path, column: str) -> list[str]:
    texts = []
    for i, cell in enumerate(cells):
        if cell is None or (not isinstance(cell, str) and pd.isna(cell)):
            texts.append("")
        elif isinstance(cell, str):
            texts.append(cell)
        else:
            raise InputError(f"row {i + 1}, column {column!r}: text must be a string, got "
                             f"{type(cell).__name__}", path=path)
    return texts


def _table_name(path: Path, call: dict):
    """What :func:`scarce.tasks.readers.table.read_table` takes from the table's name (its key's
    :data:`scarce.tasks.steps.NameRule`)."""
    return name_rules.table(path)


def _label_list_name(path: Path, call: dict):
    """What :func:`read_label_list` takes from the list's name: gzip."""
    return {"gzip": name_rules.gzip_by_name(path)}


def check_table_columns(files: dict[str, list[Path]], table: dict,
                        labelled: bool = True) -> None:
    """The columns of every table of ``files`` (``{"dataset.train": [...], "dataset.test":
    [...]}``, by the key that names them), checked from their heads before anything is read
    in full: each has the feature (or text) column and, when ``labelled``, the label column,
    which the metrics of a test table need as much as training does
    (:func:`scarce.tasks.readers.table.table_columns`; a JSON Lines table is checked as it is read).

    Raises
    ------
    InputError
        Naming the file, the column, the columns it has and the key.
    """
    _, column = _feature_source(table)
    wanted = (column, table["labels_column"]) if labelled else (column,)
    for key, paths in files.items():
        for path in paths:
            have = table_columns(path)
            if have is None:
                continue
            for name in wanted:
                if name not in have:
                    raise InputError(f"no column {name!r} (the file's columns: "
                                     f"{excerpt(have, 120)})", path=path, key=key)


#: The rows of a table's head whose label cells are checked before a run reads it whole.
HEAD_ROWS = 2000


def check_table_labels(path: Path, table: dict, known: Collection[str] | None = None) -> None:
    """The label cells of the first :data:`HEAD_ROWS` rows of the table ``path`` read as the
    run will read them (:func:`scarce.tasks.readers.table.label_names`, ``known``: the label names
    of
    the model or the label list, when there are some), before the run reads the whole table:
    a malformed row there, or cells joined by another separator than
    ``table["label_separator"]``.  A head that suggests another separator is confirmed on the
    whole column before it is refused, so that the verdict is the one the run would reach.
    A table without the label column passes (new rows to label).

    Raises
    ------
    InputError
        As :func:`scarce.tasks.readers.table.read_table` and ``label_names`` give it.
    """
    column, separator = table["labels_column"], table["label_separator"]
    head = read_table(path, (), optional=[column], limit=HEAD_ROWS)
    if column not in head.columns:
        return
    try:
        label_names(head[column], separator, path, column, known)
    except InputError as exc:
        if exc.key != SEPARATOR_KEY:  # a row's own error: the same in the whole table
            raise
        label_names(read_table(path, [column])[column], separator, path, column, known)


@step("leml-table-space", files={"path": _table_name, "label_list": _label_list_name},
      outputs=("features", "labels"),
      run_name="space of {path.name}")
def table_space(path: Path, table: dict, label_list: Path | None = None) -> dict:
    """The label and feature space of the training table ``path``.

    ``labels``: ``label`` (the column index) and ``name``: the names of ``label_list`` in its
    order, else every name the table uses, sorted.  ``features``: ``feature``, ``name`` (the
    term; null for a feature column) and ``idf`` (TF-IDF; NaN otherwise): the vocabulary the
    vectoriser ``table["vectorizer"]`` learns from the text column, or the
    ``table["n_features"]`` columns of a feature column (default: its largest index + 1).
    """
    source, column = _feature_source(table)
    labels_column = table["labels_column"]
    frame = read_table(path, [column, labels_column])
    check_training_rows(len(frame), 0.0, path)  # (a split is checked once loaded)
    if label_list is not None:
        names = read_label_list(label_list)
    else:
        rows = label_names(frame[labels_column], table["label_separator"], path, labels_column)
        names = sorted({name for row in rows for name in row})
        if not names:
            raise InputError(f"no row has a label in column {labels_column!r}: a training "
                             "set needs at least one", path=path)
    labels = pd.DataFrame({"label": np.arange(len(names), dtype=np.int64),
                           "name": pd.array(names, dtype="string")})
    if source == "text":
        options = dict(table["vectorizer"])
        kind = options.pop("kind")
        try:
            terms, idf = fit_vocabulary(_texts(frame[column], path, column), kind, **options)
        except ValueError as exc:
            raise InputError(f"column {column!r}: the vectoriser learns no vocabulary "
                             f"({exc})", path=path, key="dataset.table.vectorizer") from None
        idf = np.full(len(terms), np.nan) if idf is None else idf
        log_both(logging.INFO, "%s: a vocabulary of %d terms, %d labels", path.name,
                 len(terms), len(names))
    else:
        X = feature_rows(frame[column], path, column, table.get("n_features"))
        if not X.nnz:
            raise InputError(f"none of the {X.shape[0]:,} rows has a feature in column "
                             f"{column!r}: a training set needs features", path=path)
        width = X.shape[1]
        if table.get("n_features") is None:  # the width the largest index implies
            at = int(np.argmax(X.indices))
            row = int(np.searchsorted(X.indptr, at, side="right"))
            where = (f"{path}: the largest feature index, {int(X.indices[at]):,} (row {row}, "
                     f"column {column!r}), makes {width:,} features")
            advice = "check that index, or set dataset.table.n_features"
        else:
            where = f"{path}: the feature space of {width:,} features"
            advice = "check dataset.table.n_features"
        check_index_maps(path, width, len(names), what=where, advice=advice)
        terms, idf = [None] * width, np.full(width, np.nan)
    features = pd.DataFrame({"feature": np.arange(len(terms), dtype=np.int64),
                             "name": pd.array(terms, dtype="string"),
                             "idf": np.asarray(idf, dtype=np.float64)})
    return {"features": features, "labels": labels}


def _read_map(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    value = read_parquet_entry(path)
    if not isinstance(value, pd.DataFrame) or not set(columns) <= set(value.columns):
        raise InputError(f"expected a table with the columns {', '.join(columns)}", path=path)
    return value


def table_rows(frame: pd.DataFrame, path: Path, table: dict,
               features: pd.DataFrame) -> sp.csr_matrix:
    """The rows of ``frame`` (a table read by :func:`read_table`) in the feature space
    ``features``, float64: its text vectorised by the space's vocabulary, or its feature
    column at the space's width."""
    source, column = _feature_source(table)
    if source == "features":
        return feature_rows(frame[column], path, column, len(features))
    options = dict(table["vectorizer"])
    kind = options.pop("kind")
    idf = features["idf"].to_numpy(dtype=np.float64) if kind == "tfidf" else None
    return vectorize(_texts(frame[column], path, column),
                     features["name"].astype(object).tolist(), idf, kind, **options)


def table_labels(frame: pd.DataFrame, path: Path, table: dict,
                 labels: pd.DataFrame) -> tuple[sp.csr_matrix, int]:
    """The label matrix of ``frame`` over the space's ``labels`` (float32; no column: no
    labels) and how many label mentions name no label of the space (left out)."""
    column = table["labels_column"]
    n = len(frame)
    if column not in frame.columns:
        return sp.csr_matrix((n, len(labels)), dtype=np.float32), 0
    index = {name: i for i, name in enumerate(labels["name"].astype(object))}
    rows = label_names(frame[column], table["label_separator"], path, column, known=index)
    indptr, indices, unknown = [0], [], 0
    for names in rows:
        known = sorted(index[name] for name in names if name in index)
        unknown += len(names) - len(known)
        indices.extend(known)
        indptr.append(len(indices))
    Y = sp.csr_matrix((np.ones(len(indices), dtype=np.float32),
                       np.asarray(indices, dtype=np.int64), np.asarray(indptr)),
                      shape=(n, len(labels)))
    return Y, unknown


def _why_featureless(frame: pd.DataFrame, table: dict, X: sp.csr_matrix) -> str:
    """Why rows of ``X`` have no feature, for :func:`scarce.tasks.leml_files.check_rows`' warning:
    how many
    have an empty cell in the text or feature column, and how many (of text) only words
    outside the vocabulary."""
    source, column = _feature_source(table)
    empty_rows = np.flatnonzero(np.diff(X.indptr) == 0)
    if not empty_rows.size:
        return ""
    cells = frame[column].iloc[empty_rows]
    blank = int(sum(_missing_cell(c) for c in cells))
    if source == "features":
        return f"{blank:,} with an empty {column!r} cell"
    return (f"{blank:,} with an empty {column!r} cell, {empty_rows.size - blank:,} with no "
            "term of the vocabulary")


def _missing_cell(cell) -> bool:
    """A cell that holds nothing: missing, or text of white space only."""
    if cell is None or (not isinstance(cell, str | list | dict | np.ndarray) and pd.isna(cell)):
        return True
    return isinstance(cell, str) and not cell.strip()


def read_table_xy(path: Path, table: dict, features: pd.DataFrame, labels: pd.DataFrame,
                  dtype: str, normalize: str,
                  labelled: bool = False) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``X`` (in ``dtype``, rows scaled to unit norm when ``normalize`` is ``l2``) and ``Y``
    of the table ``path`` in the space (``features``, ``labels``).  The label column may be
    absent (new rows to label) unless ``labelled`` (the training table)."""
    _, column = _feature_source(table)
    required = [column] + ([table["labels_column"]] if labelled else [])
    frame = read_table(path, required, optional=[table["labels_column"]])
    return read_frame_xy(frame, table, features, labels, dtype, normalize, path, labelled)


def read_frame_xy(frame: pd.DataFrame, table: dict, features: pd.DataFrame,
                  labels: pd.DataFrame, dtype: str, normalize: str,
                  path: Path | None = None,
                  labelled: bool = False) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """:func:`read_table_xy` of a table already in memory (``path``: where it was read, for
    errors; none for a caller's DataFrame)."""
    path = Path("<DataFrame>") if path is None else path
    _, column = _feature_source(table)
    if column not in frame.columns:
        raise InputError(f"no column {column!r} (the columns: {list(frame.columns)[:10]})",
                         path=path)
    X = table_rows(frame, path, table, features)
    Y, unknown = table_labels(frame, path, table, labels)
    if unknown:
        log_both(logging.WARNING, "%s: %d label mentions name no label of the model's %d "
                 "(left out)", path.name, unknown, len(labels))
    if labelled and not Y.count_nonzero():
        raise InputError(f"none of the {Y.shape[0]:,} rows has a label of the label list",
                         path=path)
    check_rows(X, Y, path, labelled, lambda row: f"row {row + 1}",
               _why_featureless(frame, table, X))
    dt = np.dtype(dtype)
    big = np.abs(X.data) > np.finfo(dt).max
    if big.any():
        raise InputError(f"a feature value beyond {dt.name}", path=path)
    X = sp.csr_matrix(X.astype(dt))
    if normalize == "l2":
        X = normalize_rows(X)
    elif normalize != "none":
        raise InputError(f"unknown normalize {normalize!r} (none, l2)", key="dataset.normalize")
    return X, Y


@step("leml-load-table", files={"path": _table_name, "features": content_only,
                                "labels": content_only}, outputs=("X", "Y"),
      run_name="load {path.name}", runtime=("labelled",))
def load_table(path: Path, table: dict, features: Path, labels: Path, dtype: str,
               normalize: str, labelled: bool = False) -> dict:
    """A table read in the space of ``features`` and ``labels`` (the Parquet files of
    :func:`table_space`'s outputs, or a model's copies): :func:`read_table_xy`.
    ``labelled`` (a check, out of the key): the training table, which must have labels."""
    X, Y = read_table_xy(path, table, _read_map(features, ("feature", "name", "idf")),
                         _read_map(labels, ("label", "name")), dtype, normalize, labelled)
    return {"X": X, "Y": Y}
