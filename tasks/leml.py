"""LEML's Prefect steps: load, split, mask, partition (row blocks for Dask), initial factors,
alternate-W, alternate-H, evaluate, predict, baselines; and score, the step of ``apply-leml``.

Kept as one module: LEML's steps and the helpers that say where each runs and which row
blocks it reads change together.

Each LEML step builds the estimator from the parameters it is given, ``LEML(**params)``, and
calls its step methods (``prepare``, ``start``, ``w_step``, ``h_step``, ``objective``,
``set_factors``): the mathematics, its defaults and its rules live in :mod:`algorithms.leml`
only.  ``params`` holds the parameters of the step methods the task calls
(:func:`task_params`, from the estimator's own :meth:`~algorithms.leml.LEML.step_params`),
so a step's cache key holds exactly the parameters it reads; a baseline's key holds the
parameters its estimator takes (:func:`baseline_params`).  Each outer iteration's ``W`` and
``H`` are store entries keyed by the previous iteration's, so a run killed at iteration ``t``
finds iterations ``1..t-1`` cached and resumes at ``t``.  The readers are in
:mod:`tasks.readers`.

:func:`predict` (the training run's test set) and :func:`score` (a stored model on a new file,
the ``apply-leml`` flow) write the same table,
:func:`~algorithms.leml.predict.predictions_table`: the ``top_k`` labels of every row with
their decision values.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import scipy.sparse as sp
from sklearn.preprocessing import normalize as sk_normalize

from scarce.algorithms.leml import LEML, BinaryRelevance, ClosedFormLowRank, row_block_bounds
from scarce.algorithms.leml.data import held_out_rows, validation_rows
from scarce.algorithms.leml.predict import BATCH_SIZE, predictions_table
from scarce.algorithms.memory import check_allocation
from scarce.algorithms.metrics.multilabel import (
    inverse_propensity_from_counts,
    multilabel_scores,
    ndcg_at_k,
    precision_at_k,
    psprecision_at_k,
)
from scarce.tasks.errors import InputError
from scarce.tasks.leml_dask.clients import CLIENTS, in_dask_worker
from scarce.tasks.readers import names as name_rules
from scarce.tasks.readers.arff import read_arff, read_arff_header
from scarce.tasks.readers.text import check_no_gzip_twin, decode_text, read_bytes
from scarce.tasks.readers.xmc import read_xmc, read_xmc_header
from scarce.tasks.steps import cached_file_sha256, content_only, log_both, step
from scarce.tasks.store import CorruptEntry, entry_shape, read_parquet_entry, read_rows

#: Labels per row in the predictions of a training run, and ``apply-leml``'s ``top_k``.
TOP_K = 5


def parquet_pair(path: str | Path) -> tuple[Path, Path]:
    """``<name>.X.parquet`` and ``<name>.Y.parquet`` from either name."""
    base = str(path).removesuffix(".parquet").removesuffix(".X").removesuffix(".Y")
    return Path(base + ".X.parquet"), Path(base + ".Y.parquet")


def label_file(path: str | Path, format: str, required: bool = True) -> Path | None:
    """The second file a dataset in ``format`` is read from (the Y of a Parquet pair; None for
    the one-file formats), passed to :func:`load` so that its bytes enter the step's key.
    Not ``required`` (new rows to label): None when that file does not exist, and
    :func:`load` reads X alone."""
    if format != "parquet":
        return None
    y_path = parquet_pair(path)[1]
    return y_path if required or y_path.exists() else None


def new_rows_labels(path: str | Path, format: str) -> dict:
    """The label arguments of :func:`load` for new rows to label (``apply-leml``, a loaded
    model): the Y of a Parquet pair when it exists, else X read alone."""
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


def declared_shape(path: str | Path, format: str,
                   n_labels: int | None = None) -> tuple[int | None, int, int]:
    """The numbers of rows, features and labels a dataset file declares, read from its head
    only: the Extreme Classification header, the ARFF attributes up to ``@data`` (the rows
    are not counted: None), the footers of a Parquet pair.  Errors are the readers'."""
    path = Path(path)
    if format == "xmc":
        return read_xmc_header(path)
    if format == "arff":
        if n_labels is None:
            raise InputError("an ARFF file needs n_labels (its last n_labels attributes are "
                             "the labels)", path=path, key="dataset.n_labels")
        features, labels = read_arff_header(path, n_labels=n_labels)
        return None, len(features), len(labels)
    if format == "parquet":
        x_shape, y_shape = _parquet_shapes(path)
        return x_shape[0], x_shape[1], y_shape[1]
    raise InputError(f"unknown format {format!r} (xmc, arff, parquet)", path=path)


def check_inputs(model: LEML, files: dict[str, list[Path]], format: str, n_labels: int | None,
                 *, fully_observed: bool = True, validation_fraction: float = 0.0) -> None:
    """What the heads of the files tell, checked before any file is read in full (so before
    anything is stored): every file of ``files["train"]`` and ``files["test"]`` (a file, or
    the parts of a folder) declares the first training file's numbers of features and
    labels; the training rows (less a validation split) are enough to fit
    (:func:`check_training_rows`); and the model's factors at the training
    file's sizes fit in memory (:meth:`algorithms.leml.LEML.check_memory`), checked first: an
    absurd header is named for what it declares.

    Raises
    ------
    tasks.errors.InputError
        Naming the file that disagrees, the training file and both counts (or the key).
    algorithms.memory.MemoryBudgetError
        Naming the training file and what its header declares.
    """
    shapes = {role: [declared_shape(f, format, n_labels) for f in paths]
              for role, paths in files.items()}
    first, (_, d, n_lab) = files["train"][0], shapes["train"][0]
    rows = [r for r, _, _ in shapes["train"]]
    n = None if None in rows else sum(rows)
    points = "" if n is None else f"{n:,} points, "
    if len(files["train"]) > 1:
        where = f"{first.parent}: the parts"
    else:
        where = f"{first}:1: the header" if format == "xmc" else f"{first}: the file"
    model.check_memory(n or 0, d, n_lab, fully_observed=fully_observed,
                       what=f"{where} declares {points}{d:,} features and {n_lab:,} labels: ")
    at = 1 if format == "xmc" else None
    for role, paths in files.items():
        for f, (_, d_f, n_lab_f) in zip(paths, shapes[role], strict=True):
            if (d_f, n_lab_f) != (d, n_lab):
                raise InputError(f"{d_f:,} features and {n_lab_f:,} labels, but the training "
                                 f"file {first} has {d:,} and {n_lab:,}: the training and test "
                                 "files share one feature and one label space",
                                 path=f, line=at, key=f"dataset.{role}")
    if n is not None:
        check_training_rows(n, validation_fraction, first)


#: The part files of a folder of parts (a partitioned input), by format.
PART_PATTERNS = {"xmc": ("*.txt", "*.txt.gz"), "parquet": ("*.X.parquet",)}


def input_parts(path: Path, format: str, key: str | None = None) -> list[Path] | None:
    """The part files of ``path`` when it is a folder (a partitioned input: each part a file
    of ``format``, :data:`PART_PATTERNS`, all in one feature and label space), sorted by
    name; None when ``path`` is a file.  ``key`` names the config key in errors.  A part both
    plain and gzipped (``a.txt``, ``a.txt.gz``) is an error naming both."""
    path = Path(path)
    if not path.is_dir():
        return None
    if format not in PART_PATTERNS:
        raise InputError(f"a folder of parts is read in the xmc or parquet format, not "
                         f"{format!r}", path=path, key=key)
    parts = sorted({p for pattern in PART_PATTERNS[format] for p in path.glob(pattern)})
    check_no_gzip_twin(parts, key=key)
    if not parts:
        raise InputError(f"a folder without parts: no {' or '.join(PART_PATTERNS[format])} "
                         "files in it", path=path, key=key)
    return parts


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


@contextmanager
def _data_client(cluster: dict | None):
    """Where a step over the training or test data runs (``where`` of :func:`load`,
    :func:`observe` and the partition steps): on the W-step's Dask cluster when the flow
    names one (``compute.backend: dask``), so that the flow's process never holds the data,
    once a worker there can start it (:func:`tasks.leml_dask.check_workers_can_run`); here
    (a client of None) for the other runners, and inside a Dask worker (where a
    ``--runner dask`` task already runs)."""
    if not cluster or cluster.get("in_process") or in_dask_worker():
        yield None
        return
    from scarce.tasks.leml_dask import check_workers_can_run

    with CLIENTS.client(cluster) as client:
        check_workers_can_run(client)
        yield client


@contextmanager
def _driver_client(cluster: dict | None):
    """Where the steps that drive the solvers run (the start, both half-steps with the
    objective and the validation P@1, the evaluation and the predictions): with
    ``compute.solvers: worker`` (``cluster["solvers"]``) whole on a worker of the W-step's
    cluster, as :func:`_data_client` sends the steps over the data, so that the flow's
    process holds neither the factors nor the solvers' ``d' x k`` vectors; else here (the
    default, ``flow``: a worker lost under a W-step then costs only its blocks, not the
    step)."""
    if not cluster or cluster.get("solvers") != "worker":
        yield None
        return
    with _data_client(cluster) as client:
        yield client


def _name_read(path: Path, call: dict):
    """What :func:`load` takes from the name of ``path`` (its key's :data:`tasks.steps.NameRule`):
    gzip for the text formats; for a Parquet pair, the files the name sends it to (X, and Y
    unless ``with_labels`` is off: ``<name>.X.parquet`` and ``<name>.Y.parquet`` whichever
    of the two ``path`` names), each by its bytes when it is not ``path`` itself.  The whole
    name for any other format."""
    fmt = call.get("format")
    if fmt in ("xmc", "arff"):
        return {"gzip": name_rules.gzip_by_name(path)}
    if fmt != "parquet":
        return Path(path).name

    def read(sibling: Path) -> str | None:  # path itself is keyed by its bytes already
        if sibling == Path(path):
            return None
        return cached_file_sha256(sibling) if sibling.is_file() else "missing"

    x_path, y_path = parquet_pair(path)
    return {"X": read(x_path), "Y": read(y_path) if call.get("with_labels", True) else None}


@step("leml-load", files={"path": _name_read, "labels_file": content_only},
      outputs=("X", "Y", "features", "labels"),
      run_name="load {path.name}", runtime=("cluster", "labelled"),
      where=("cluster", _data_client))
def load(path: Path, format: str, dtype: str, n_labels: int | None, normalize: str,
         labels_file: Path | None = None, cluster: dict | None = None,
         labelled: bool = False, with_labels: bool = True) -> dict:
    """Read a multi-label dataset: Extreme Classification text, Mulan ARFF or Parquet.

    ``cluster``: where the step runs (:func:`_data_client`), not what it computes.
    ``labelled``: the file is the whole training or test set, refused (before anything is
    stored) when none of its points has a label or none a feature (:func:`check_rows`).  A
    check, not part of what the step computes: left out of its key.

    ``labels_file`` is :func:`label_file` of ``path`` (the Y of a Parquet pair): a declared
    input file, so a changed Y recomputes the step even when X is unchanged.  Without
    ``with_labels`` a Parquet X is read alone (new rows to label: Y has no column).

    ``normalize="l2"`` scales every row of X to unit Euclidean norm (a per-row
    operation, so train and test are treated alike without shared statistics).
    ``features`` and ``labels`` are the index maps of X's and Y's columns
    (:func:`index_map`; names from an ARFF header, none for the other formats).
    """
    dt = np.dtype(dtype).type
    names: tuple = (None, None)
    if format == "xmc":
        X, Y = read_xmc(path, dtype=dt)
    elif format == "arff":
        if n_labels is None:
            raise InputError("an ARFF file needs n_labels (its last n_labels attributes are "
                             "the labels)", path=path, key="dataset.n_labels")
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


def stored_nonzeros(path: Path) -> int:
    """The entries a sparse store entry holds, from its footer (one Parquet row each)."""
    return int(pq.ParquetFile(path).metadata.num_rows)


def check_parts(x_files: list[Path], y_files: list[Path], folder: Path, key: str) -> None:
    """The parts of a folder (their store entries ``x_files`` and ``y_files``: the X and Y of
    each part, as loaded), checked as :func:`check_rows` checks one file: at least one label
    and one feature among them all (a part alone may have none), from the footers only."""
    for files, what in ((y_files, "label"), (x_files, "feature")):
        if not sum(stored_nonzeros(f) for f in files):
            raise InputError(f"none of the {len(files)} parts has a {what}: a training or "
                             f"test set needs {what}s", path=folder, key=key)


def _row_place(path: Path, format: str, row: int) -> str:
    """Where data row ``row`` (0-based) of a file read by :func:`load` is: its line (XC,
    ARFF), else its row (1-based)."""
    line = data_line(path, format, row)
    return f"line {line}" if line is not None else f"row {row + 1}"


def normalize_rows(X: sp.csr_matrix) -> sp.csr_matrix:
    """Every row of ``X`` scaled to unit L2 norm, in ``X``'s dtype.  Rows whose sum of
    squares would overflow that dtype (float32 values above about 1e19) are scaled in
    float64, where it cannot: in float32 their norm would be infinite and the row zero."""
    dt = X.dtype
    large = float(np.sqrt(np.finfo(dt).max / max(1, int(np.diff(X.indptr).max(initial=0)))))
    if X.nnz and float(np.abs(X.data).max()) >= large:
        return sk_normalize(X.astype(np.float64), norm="l2").astype(dt)
    return sk_normalize(X, norm="l2").astype(dt)


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


@step("leml-split", inputs=("train",), outputs=("X_fit", "Y_fit", "X_val", "Y_val"),
      run_name="split validation={validation_fraction}", runtime=("cluster",),
      where=("cluster", _data_client))
def split(train: dict, validation_fraction: float, seed: int,
          cluster: dict | None = None) -> dict:
    """Hold out a seeded random part of the training set for validation.  ``cluster``:
    where the step runs (:func:`_data_client`)."""
    X, Y = train["X"], train["Y"]
    check_training_rows(X.shape[0], validation_fraction, None)
    fit_rows, val_rows = validation_rows(X.shape[0], validation_fraction, seed)
    return {"X_fit": X[fit_rows], "Y_fit": Y[fit_rows], "X_val": X[val_rows], "Y_val": Y[val_rows]}


@step("leml-early-split", inputs=("train", "mask"),
      outputs=("X_fit", "Y_fit", "X_val", "Y_val"), run_name="hold out for early stopping",
      runtime=("cluster",), where=("cluster", _data_client))
def early_split(train: dict, mask, params: dict, cluster: dict | None = None) -> dict:
    """The rows :class:`~algorithms.leml.LEML`'s ``early_stopping`` fits on and those it holds
    out, as its own :meth:`~algorithms.leml.LEML.early_stopping_split` draws them (``Y_val``:
    the held-out rows' observed labels).  ``cluster``: where the step runs."""
    try:
        X_fit, Y_fit, _, X_val, Y_val = LEML(**params).early_stopping_split(
            train["X"], train["Y"], mask)
    except ValueError as exc:
        raise InputError(str(exc), key="model.validation_fraction") from None
    return {"X_fit": X_fit, "Y_fit": Y_fit, "X_val": X_val,
            "Y_val": sp.csr_matrix(Y_val, dtype=np.float32)}


@step("leml-early-split-mask", inputs=("mask",), run_name="hold out the mask's rows",
      runtime=("cluster",), where=("cluster", _data_client))
def early_split_mask(mask: sp.csr_matrix, params: dict,
                     cluster: dict | None = None) -> sp.csr_matrix:
    """The mask's rows that :func:`early_split` keeps for fitting."""
    fit_rows, _ = LEML(**params).early_stopping_rows(mask.shape[0])
    return sp.csr_matrix(mask)[fit_rows]


@step("leml-tune", inputs=("train", "mask", "validation"), outputs=("table", "timings"),
      volatile=("timings",), run_name="tune on held-out rows")
def tune(train: dict, mask, validation: dict, params: dict, grid: list[dict],
         k: int) -> dict:
    """Each setting of ``grid`` (values over ``params``) trained on ``train`` and ``mask``
    from a fresh start, P@``k`` of the ``validation`` rows after each outer iteration, while
    it rises (:meth:`algorithms.leml.LEML.held_out_pass`): per setting its values, the
    iteration its score peaked at (``best_iteration``), that ``score``, the iterations run and
    why they stopped; ``chosen`` marks the best score (the first in grid order among equals).
    Each setting starts cold, so its score is what a run with its values gives.  ``timings``:
    each setting's seconds."""
    rows, seconds = [], []
    for point in grid:
        model = LEML(**{**params, **point})
        t0 = time.perf_counter()
        scores, reason = model.held_out_pass(train["X"], train["Y"], mask, validation["X"],
                                             validation["Y"], k=k)
        seconds.append(time.perf_counter() - t0)
        best = model.best_iteration(scores)
        rows.append({**point, "best_iteration": best, "score": scores[best - 1],
                     "iterations": len(scores), "stopped": reason})
    table = pd.DataFrame(rows)
    table["chosen"] = table.index == int(np.argmax(table["score"].to_numpy()))
    return {"table": table, "timings": pd.DataFrame({**{c: table[c] for c in grid[0]},
                                                     "seconds": seconds})}


@step("leml-mask", inputs=("Y",), run_name="mask observed={observed_fraction}",
      runtime=("cluster",), where=("cluster", _data_client))
def observe(Y: sp.csr_matrix, observed_fraction: float, seed: int,
            part: int | None = None, cluster: dict | None = None) -> sp.csr_matrix:
    """The observed set Omega: each entry of the n x L label matrix kept with the given
    probability, uniformly at random (the paper's missing-label experiment).  ``part``: the
    index of ``Y``'s part in a folder of parts, drawn from its own stream (``seed``,
    ``part``), so each part's mask is made without the others.  ``cluster``: where the step
    runs (:func:`_data_client`).

    For a whole training set (``part`` None), a mask that observes no entry, or none of the
    labels ``Y`` holds, is an :class:`InputError` naming ``observed_fraction``: the model
    would learn from nothing (a part of a folder may observe none of its own labels)."""
    n, n_labels = Y.shape
    rng = np.random.default_rng(np.random.SeedSequence(
        [seed, 202] if part is None else [seed, 202, part]))
    rows, cols = [], []
    block = max(1, (1 << 22) // max(n_labels, 1))
    check_allocation((min(block, n), n_labels), np.float64, copies=2,
                     what="the uniform draws of a row block of the mask",
                     advice="check the number of labels the training file declares")
    for start in range(0, n, block):
        stop = min(start + block, n)
        keep = rng.random((stop - start, n_labels)) < observed_fraction
        r, c = np.nonzero(keep)
        rows.append(r + start)
        cols.append(c)
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    mask = sp.csr_matrix((np.ones(r.size, dtype=bool), (r, c)), shape=(n, n_labels))
    mask.sort_indices()
    if part is None:
        _check_observed(mask, Y, observed_fraction)
    return mask


def _check_observed(mask: sp.csr_matrix, Y: sp.csr_matrix, observed_fraction: float) -> None:
    """An :class:`InputError` naming ``observed_fraction`` when ``mask`` observes no entry of
    the training labels ``Y``, or none of its positive labels, with the fraction at which
    one label would be observed on average."""
    n, n_labels = Y.shape
    positives = int(sp.csr_matrix(Y).count_nonzero())
    if mask.nnz == 0:
        raise InputError(f"{observed_fraction:g} observes none of the {n:,} x {n_labels:,} "
                         "entries of the training labels, so there is nothing to learn from "
                         f"(at 1/{n * n_labels:,} one entry is observed on average)",
                         key="observed_fraction")
    if positives and not mask.multiply(sp.csr_matrix(Y)).count_nonzero():
        raise InputError(f"{observed_fraction:g} observes {mask.nnz:,} of the {n:,} x "
                         f"{n_labels:,} entries of the training labels but none of its "
                         f"{positives:,} positive labels, so there is nothing to learn from "
                         f"(at 1/{positives:,} one positive label is observed on average)",
                         key="observed_fraction")


@step("leml-stack", inputs=("parts",), run_name="stack {what} of the parts")
def stack(parts: list, what: str):
    """The rows of the ``parts`` (sparse matrices of one width: the X, Y or masks of the
    parts of a folder) stacked in part order, for the steps that need the whole."""
    return sp.vstack(parts, format="csr")


def partition_files(train: dict, block: int, blocks: int, mask=None,
                    cluster: dict | None = None) -> dict:
    """Row block ``block`` of ``blocks`` of the training data: its rows of ``X`` and ``Y``
    (and of the observed-entries ``mask``), the rows
    :func:`~algorithms.leml.data.row_block_bounds` gives it, read from the store files
    (``train``: ``{"X", "Y"}`` paths; ``mask``: a path or None) by
    :func:`tasks.store.read_rows`, which reads only the row groups that hold the block: no
    partition task holds the whole training set.

    Each block is its own store entries, read by the worker that builds that block of the
    distributed W-step (:class:`tasks.leml_dask.PartitionedData`).  The number of blocks is
    fixed by the config, not by the number of workers, so sums in block order are the same
    bits for any number of workers.  ``cluster``: where the step runs (:func:`_data_client`).
    """
    n_rows = entry_shape(train["X"])[0]
    bounds = row_block_bounds(n_rows, blocks)
    if not 0 <= block < len(bounds):
        raise ValueError(f"block {block} of {blocks}: {n_rows} rows make {len(bounds)} blocks")
    start, stop = bounds[block]
    out = {"X": read_rows(train["X"], start, stop), "Y": read_rows(train["Y"], start, stop)}
    if mask is not None:
        out["mask"] = read_rows(mask, start, stop)
    return out


#: :func:`partition_files` of fully observed training data, and with a mask.
partition = step("leml-partition", paths=("train",), outputs=("X", "Y"),
                 run_name="partition block {block} of {blocks}", runtime=("cluster",),
                 where=("cluster", _data_client))(partition_files)
partition_masked = step("leml-partition-masked", paths=("train", "mask"),
                        outputs=("X", "Y", "mask"),
                        run_name="partition block {block} of {blocks}", runtime=("cluster",),
                        where=("cluster", _data_client))(partition_files)


@step("leml-propensity", paths=("train", "mask", "partition"), runtime=("cluster",),
      where=("cluster", _data_client), run_name="label propensities A={a} B={b}")
def propensity(a: float, b: float, train: dict | None = None, mask=None,
               partition: list | None = None, cluster: dict | None = None) -> np.ndarray:
    """The labels' inverse propensities for PSP@k
    (:func:`~algorithms.metrics.multilabel.inverse_propensity_from_counts`, ``A = a``,
    ``B = b``) from the training labels the model sees: the entries of ``Y`` that ``mask``
    observes (all of ``Y`` without one).  Read from the store files of ``train`` (``{"X",
    "Y"}``) and ``mask``, or of the row blocks ``partition`` (their counts added), only their
    label matrices; on the data's cluster when ``cluster`` names one (:func:`_data_client`).
    """
    blocks = partition if partition is not None else [{"Y": train["Y"], "mask": mask}]
    counts, rows = None, 0
    for files in blocks:
        Y = sp.csr_matrix(read_parquet_entry(files["Y"]))
        if files.get("mask") is not None:
            Y = Y.multiply(sp.csr_matrix(read_parquet_entry(files["mask"]))).tocsr()
        Y.eliminate_zeros()
        here = np.bincount(Y.indices, minlength=Y.shape[1])
        counts = here if counts is None else counts + here
        rows += Y.shape[0]
    return inverse_propensity_from_counts(counts, rows, a, b)


# The training data as the last step prepared it, kept for the next: every W- and H-step of a
# run takes the same store entries, and reading them afresh (with their checksums) and
# preparing them again (with the Gram matrix or its eigendecomposition that the solvers build
# once per data) cost each step about as much as its mathematics.  Store entries are
# content-addressed and never rewritten, so their paths name their content.  One data set at a
# time, its arrays read-only (a step that wrote into them would change the next step's input);
# :func:`release_training_data` drops it when a run's iterations are over.
_PREPARED: dict = {}
_PREPARED_LOCK = threading.Lock()


def _read_only(M) -> None:
    for a in ((M.data, M.indices, M.indptr) if sp.issparse(M) else (M,)):
        if isinstance(a, np.ndarray):
            a.flags.writeable = False


def _prepared(model: LEML, train: dict, mask):
    """``model.prepare`` of the store files ``train["X"]``, ``train["Y"]`` and ``mask`` (a
    file or None), kept until files or preparation differ (see :data:`_PREPARED`)."""
    key = (str(train["X"]), str(train["Y"]), None if mask is None else str(mask),
           np.dtype(model.dtype).str, bool(model.fit_intercept))
    with _PREPARED_LOCK:
        if _PREPARED.get("key") != key:
            _PREPARED.clear()
            X, Y = read_parquet_entry(train["X"]), read_parquet_entry(train["Y"])
            observed = None if mask is None else read_parquet_entry(mask)
            data = model.prepare(X, Y, observed)
            for M in (data.X, data.Xt, data.Y, data.Yt):
                if M is not None:
                    _read_only(M)
            _PREPARED.update(key=key, data=data)
        return _PREPARED["data"]


def release_training_data() -> None:
    """Drop the training data the steps keep between them (:data:`_PREPARED`)."""
    with _PREPARED_LOCK:
        _PREPARED.clear()


def _estimator(params: dict, train: dict | None, mask, partition: list | None = None):
    """``LEML(**params)`` and its training data: prepared from the store files of ``train``
    (``{"X", "Y", ...}``) and ``mask`` (kept for the next step, :func:`_prepared`), or,
    when ``partition`` names the files of the data's row blocks (``{"X", "Y", "mask"}`` per
    block, written by :data:`partition`), described by
    :class:`tasks.leml_dask.PartitionedData` from their footers only: this process reads
    none of them, the Dask workers read their own blocks."""
    model = LEML(**params)
    if partition is not None:
        from scarce.tasks.leml_dask import PartitionedData

        return model, PartitionedData.from_files(partition, fit_intercept=model.fit_intercept,
                                                 dtype=model.dtype)
    return model, _prepared(model, train, mask)


def _timings(iteration: int, half: str, seconds: float, info: dict) -> pd.DataFrame:
    return pd.DataFrame({"iteration": [iteration], "half": [half], "seconds": [seconds],
                         "cg_iter": [int(info.get("cg_iter", 0))]})


@step("leml-init", paths=("train", "mask", "partition"), outputs=("W", "H"),
      runtime=("cluster",), where=("cluster", _driver_client), run_name="initial factors")
def initialise(train: dict | None, mask, params: dict, partition: list | None = None,
               row_blocks: int | None = None, cluster: dict | None = None) -> dict:
    """The starting factors, :meth:`algorithms.leml.LEML.start`: W = 0 and H ~ N(0, 1/k),
    or the squared-loss start of a margin loss (``squared_init_iter`` alternating squared-loss
    iterations).  With ``partition`` (the row-block files, see :func:`_estimator`) this
    process reads only their shapes; the squared-loss start then takes its products and sums
    over the ``row_blocks`` row blocks where ``cluster`` says, as
    :func:`alternate_W` and :func:`alternate_H` do (a random start uses neither)."""
    model, data = _estimator(params, train, mask, partition)
    if not model.squared_start():
        row_blocks = None
    with CLIENTS.backend(data, row_blocks, cluster, model.rank) as backend:
        _say_where(backend, f"squared-loss start ({model.squared_init_iter} iterations)")
        W, H = model.start(data, backend=backend)
    return {"W": W, "H": H}


def _say_where(backend, what: str) -> None:
    """Log where ``what`` (a step's work on ``backend``'s row blocks) runs; nothing for None."""
    if backend is not None:
        where = _where(backend)
        log_both(logging.INFO, "%s on the Dask cluster at %s: %d row blocks on %d workers",
                 what, where["scheduler"], len(backend.bounds), where["workers"])


def _where(backend) -> dict:
    """The W-step's place, for its timings: the scheduler address and the number of workers
    (empty and 0 in this process)."""
    if backend is None:
        return {"scheduler": "", "workers": 0}
    return {"scheduler": str(backend.client.scheduler.address),
            "workers": len(backend.workers)}


@step(
    "leml-alternate-W",
    write_behind=True,
    inputs=("W", "H"),
    paths=("train", "mask", "partition"),
    outputs=("W", "timings"),
    volatile=("timings",),
    runtime=("cluster",),
    where=("cluster", _driver_client),
    run_name="alternate-W iter={iteration}",
)
def alternate_W(
    train: dict | None, mask, W: np.ndarray, H: np.ndarray, iteration: int, params: dict,
    row_blocks: int | None, cluster: dict | None = None, partition: list | None = None,
) -> dict:
    """One W-step with H fixed, :meth:`algorithms.leml.LEML.w_step`.

    ``row_blocks``: None (this process, the whole data) or the number of row blocks of X over
    which the gradient and Hessian-vector products run (any number of workers gives the same
    W bit for bit).  ``partition`` (the training data's row blocks, in place of ``train`` and
    ``mask``): the workers read them, this process reads none (:func:`_estimator`).
    ``cluster`` (a runtime parameter: not in the key) says where
    (:meth:`tasks.leml_dask.clients.DaskClients.backend`); ``timings`` records where it ran
    (``scheduler``, ``workers``).
    """
    model, data = _estimator(params, train, mask, partition)
    t0 = time.perf_counter()
    with CLIENTS.backend(data, row_blocks, cluster, model.rank) as backend:
        where = _where(backend)
        _say_where(backend, f"W-step {iteration}")
        W, info = model.w_step(data, W, H, backend=backend)
    timings = _timings(iteration, "W", time.perf_counter() - t0, info).assign(**where)
    return {"W": W, "timings": timings}


@step(
    "leml-alternate-H",
    write_behind=True,
    inputs=("W", "H", "validation"),
    paths=("train", "mask", "partition", "validation_partition"),
    outputs=("H", "trace", "timings"),
    volatile=("timings",),
    runtime=("cluster",),
    where=("cluster", _driver_client),
    run_name="alternate-H iter={iteration}",
)
def alternate_H(
    train: dict | None, mask, W: np.ndarray, H: np.ndarray, validation: dict | None,
    iteration: int, params: dict, row_blocks: int | None = None, cluster: dict | None = None,
    partition: list | None = None, validation_partition: list | None = None,
) -> dict:
    """One H-step with W fixed (:meth:`algorithms.leml.LEML.h_step`), then the iteration's
    objective and validation P@1.

    ``row_blocks``: None (this process, on the whole data) or the number of row blocks (the
    W-step's) over which the H-step's sums are taken, for every loss
    and H-step solver (:func:`algorithms.leml.h_step.update_H_by_blocks`,
    :func:`~algorithms.leml.h_step.update_H_bound_by_blocks`,
    :func:`~algorithms.leml.h_step.update_H_newton_by_blocks`; the same bits for any number
    of workers, equal to the whole-data H-step up to rounding).  ``cluster`` (runtime, not in
    the key) says where, as for :func:`alternate_W`; the objective's loss term is then summed
    over the same blocks (:func:`algorithms.leml.objective.objective_by_blocks`).  With
    ``partition`` in place of ``train`` and ``mask`` (as for :func:`alternate_W`) this
    process reads none of the training data.  The validation P@1 is computed here on the
    whole ``validation`` set or, given its row blocks' files in ``validation_partition``
    (the Dask runner), on the workers as the test metrics are
    (:func:`tasks.leml_dask.evaluate_on_blocks`: the same counts, so the same P@1).
    """
    model, data = _estimator(params, train, mask, partition)
    t0 = time.perf_counter()
    with CLIENTS.backend(data, row_blocks, cluster, model.rank) as backend:
        _say_where(backend, f"H-step {iteration}")
        H, info = model.h_step(data, W, H, backend=backend)
        seconds = time.perf_counter() - t0
        obj = model.objective(data, W, H, backend=backend)
    val_p1 = float("nan")
    if validation is not None and validation["X"].shape[0] > 0:
        top = model.set_factors(W, H).predict_top_k(validation["X"], 1)
        val_p1 = precision_at_k(validation["Y"], top, ks=(1,))[1]
    elif validation_partition:
        from scarce.tasks.leml_dask import evaluate_on_blocks

        with CLIENTS.client(cluster) as client:
            val_p1 = evaluate_on_blocks(client, validation_partition, W, H, params,
                                        BATCH_SIZE, ks=(1,))["precision@1"]
    trace = pd.DataFrame(
        {"iteration": [iteration], "objective": [obj], "validation_p_at_1": [val_p1]}
    )
    return {"H": H, "trace": trace, "timings": _timings(iteration, "H", seconds, info)}


def _metrics_table(scores: dict, dataset: str, method: str) -> pd.DataFrame:
    return pd.DataFrame({"dataset": dataset, "method": method, "metric": list(scores),
                         "value": list(scores.values())})


def _test_scores(model, test: dict, batch_size: int, inv_propensity: np.ndarray) -> dict:
    """P@1/3/5, Hamming loss, per-instance AUC, nDCG@1/3/5 and PSP@1/3/5 (by the training
    labels' ``inv_propensity``) of a fitted model on the test set."""
    return multilabel_scores(
        test["Y"],
        lambda s, e: model.decision_function(test["X"][s:e]),
        threshold=model.threshold_,
        batch_size=batch_size,
        inv_propensity=inv_propensity,
    )


@step(
    "leml-evaluate",
    version="2",
    inputs=("test", "W", "H", "traces", "timings", "propensity"),
    paths=("partition",),
    outputs=("metrics", "convergence"),
    volatile=("convergence",),
    runtime=("cluster",),
    where=("cluster", _driver_client),
    run_name="evaluate",
)
def evaluate(
    test: dict | None, W: np.ndarray, H: np.ndarray, traces: list, timings: list,
    propensity: np.ndarray, dataset: str, method: str, params: dict, batch_size: int,
    partition: list | None = None, cluster: dict | None = None,
) -> dict:
    """Test metrics (P@1/3/5, Hamming loss, per-instance AUC, nDCG@1/3/5 and PSP@1/3/5 by
    the training labels' inverse propensities ``propensity``, :func:`propensity`) of the
    factors, predicted by :meth:`algorithms.leml.LEML.set_factors`, and the convergence table.

    ``test`` (the whole test set, scored here batch by batch) or ``partition`` (the Dask
    runner of the W-step): the files of the test set's row blocks, each read and scored on
    a worker of the W-step's cluster (``cluster``, runtime, not in the key), none read here
    (:func:`tasks.leml_dask.evaluate_on_blocks`; precision@k and the Hamming loss equal to
    the last bit, the AUC to rounding).
    """
    if partition is None:
        scores = _test_scores(LEML(**params).set_factors(W, H), test, batch_size, propensity)
    else:
        from scarce.tasks.leml_dask import evaluate_on_blocks

        CLIENTS.release_kept()  # the fit is over: the workers score without its blocks
        with CLIENTS.client(cluster) as client:
            scores = evaluate_on_blocks(client, partition, W, H, params, batch_size,
                                        inv_propensity=propensity)
    metrics = _metrics_table(scores, dataset, method)
    conv = pd.concat(traces, ignore_index=True)
    secs = pd.concat(timings, ignore_index=True).pivot_table(
        index="iteration", columns="half", values="seconds", aggfunc="sum"
    )
    conv["seconds"] = conv["iteration"].map(secs.sum(axis=1)).to_numpy()
    return {"metrics": metrics, "convergence": conv}


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


@step("leml-predict", version="2", inputs=("test", "W", "H", "labels"), paths=("partition",),
      runtime=("cluster",), where=("cluster", _driver_client), run_name="predict top {top_k}")
def predict(test: dict | None, W: np.ndarray, H: np.ndarray, labels: pd.DataFrame,
            params: dict, top_k: int, batch_size: int, partition: list | None = None,
            cluster: dict | None = None) -> pd.DataFrame:
    """The test set's top labels by the final factors, named by the training file's label
    map ``labels`` (:func:`predictions_table`, :func:`named_predictions`): of ``test``, here,
    or (the Dask runner) of the test set's row blocks ``partition``, each block predicted on
    a worker of ``cluster`` (runtime, not in the key) and none read here
    (:func:`tasks.leml_dask.predict_on_blocks`, the same table end to end)."""
    if partition is None:
        model = LEML(**params).set_factors(W, H)
        return named_predictions(predictions_table(model, test["X"], top_k, batch_size),
                                 labels)
    from scarce.tasks.leml_dask import predict_on_blocks

    CLIENTS.release_kept()  # the fit is over: the workers predict without its blocks
    with CLIENTS.client(cluster) as client:
        return named_predictions(
            predict_on_blocks(client, partition, W, H, params, top_k, batch_size), labels)


def data_line(path: Path, format: str, row: int) -> int | None:
    """The 1-based line of data row ``row`` (0-based) of a file read by :func:`load`: the
    row's own line in an Extreme Classification file (after the header) or in the ``@data``
    section of an ARFF file (blank and ``%`` lines skipped, as the reader skips them); None
    for Parquet, which has no lines."""
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


def _read_factor(path: Path, shape: tuple[int, int]) -> np.ndarray:
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


@step("leml-score", version="3", inputs=("X", "Y"),
      # X and Y are the file as load read it (its refs); the file itself is named in errors
      # only, and the model's files are store-format Parquet: their bytes are all they hold.
      files=dict.fromkeys(("path", "W", "H", "labels", "propensity"), content_only),
      outputs=("predictions", "metrics"), run_name="score {source}")
def score(X: sp.csr_matrix, Y: sp.csr_matrix, path: Path, W: Path, H: Path, labels: Path,
          format: str, shapes: dict, params: dict, top_k: int, batch_size: int, method: str,
          source: str, propensity: Path | None = None) -> dict:
    """The ``top_k`` labels of every row of a new file by a stored model (``apply-leml``).

    ``X`` and ``Y`` are the file ``path`` as :func:`load` read it; ``W`` and ``H`` the
    model's factor files, of the ``shapes`` its ``model.json`` gives, ``labels`` its label
    map (the predictions name their labels, :func:`named_predictions`); ``params`` the
    estimator's prediction parameters (:func:`task_params`).  ``X`` is put in the model's
    feature space (:func:`in_feature_space`).  ``metrics``: the rows scored and, when the file
    has labels in the model's label space, P@k and nDCG@k for k = 1, 3, 5 (those ``k <=
    top_k``), and PSP@k by the training labels' inverse propensities when the model has them
    (``propensity``: a model written before them has none), named ``method`` on the dataset
    ``source`` (the file's name: the key holds the file's hash, not its path).
    """
    model = LEML(**params).set_factors(_read_factor(W, shapes["W"]), _read_factor(H, shapes["H"]))
    X = in_feature_space(X, model.n_features_in_, path, format)
    predictions = named_predictions(predictions_table(model, X, top_k, batch_size),
                                    read_label_map(labels, model.n_labels_))
    scores = {"rows": float(X.shape[0])}
    ks = [k for k in (1, 3, 5) if k <= min(top_k, model.n_labels_)]
    if ks and Y.shape[1] == model.n_labels_ and Y.nnz:  # (so X has rows)
        top = predictions["label"].to_numpy().reshape(X.shape[0], -1)
        scores.update({f"precision@{k}": v for k, v in precision_at_k(Y, top, ks=ks).items()})
        scores.update({f"ndcg@{k}": v for k, v in ndcg_at_k(Y, top, ks=ks).items()})
        if propensity is not None:
            weights = _read_factor(propensity, (model.n_labels_,))
            scores.update({f"psp@{k}": v
                           for k, v in psprecision_at_k(Y, top, weights, ks=ks).items()})
    return {"predictions": predictions, "metrics": _metrics_table(scores, source, method)}


# The estimator's step methods each LEML task calls (LEML.step_params names them), by task
# name (a served flow may hold copies of the step objects).
CALLS = {
    early_split.name: ("early_stopping_split",),
    early_split_mask.name: ("early_stopping_split",),
    initialise.name: ("start",),
    alternate_W.name: ("w_step",),
    alternate_H.name: ("h_step", "objective", "predict"),
    evaluate.name: ("predict",),
    predict.name: ("predict",),
    score.name: ("predict",),
}


def task_params(model: LEML, task) -> dict:
    """The parameters of ``model`` that ``task`` reads: those of the step methods it calls
    (:meth:`algorithms.leml.LEML.step_params`), which are what its cache key holds."""
    return {name: value for method in CALLS[task.name]
            for name, value in model.step_params(method).items()}


# The baselines: name -> (estimator, the parameters fixed for it).
BASELINES = {
    "br-ridge": (BinaryRelevance, {"model": "ridge"}),
    "br-logistic": (BinaryRelevance, {"model": "logistic"}),
    "closed-form": (ClosedFormLowRank, {"fit_intercept": True}),
}


def baseline_params(method: str, **offered) -> dict:
    """Of the ``offered`` parameters, those the estimator of baseline ``method`` takes (the
    names in its signature, less the fixed ones): what its ``leml-baseline`` step is keyed
    by, so that BR ridge is not refitted when only LEML's ``rank`` changes (the closed form
    takes a rank, Binary Relevance does not)."""
    estimator, fixed = BASELINES[method]
    names = set(inspect.signature(estimator).parameters) - set(fixed)
    return {name: value for name, value in offered.items() if name in names}


@step("leml-baseline", version="2", inputs=("train", "mask", "test", "propensity"),
      run_name="baseline {method}")
def baseline(
    train: dict, mask, test: dict, propensity: np.ndarray, method: str, params: dict,
    dataset: str, batch_size: int
) -> pd.DataFrame:
    """Fit a baseline (``BASELINES[method]`` with ``params``) on the same observed entries
    and score it on the test set as :func:`evaluate` scores LEML (PSP@k by the same
    ``propensity``)."""
    estimator, fixed = BASELINES[method]
    model = estimator(**fixed, **params).fit(train["X"], train["Y"], mask)
    return _metrics_table(_test_scores(model, test, batch_size, propensity), dataset, method)


@step("leml-collect", inputs=("tables",), run_name="collect metrics")
def collect(tables: list) -> pd.DataFrame:
    """One long metrics table from several (an empty one from none)."""
    if not tables:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in
                             (("dataset", str), ("method", str), ("metric", str),
                              ("value", float))})
    return pd.concat(tables, ignore_index=True)
