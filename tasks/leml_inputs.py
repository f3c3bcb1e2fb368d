"""What LEML's input files tell before they are read in full: their declared shapes, the parts
of a folder of parts, and the checks made on them before any step runs (or, for the parts'
store entries, from their footers only).

Apart from the steps (:mod:`scarce.tasks.leml`), which import the estimator, scikit-learn and the
Dask
backends: a command checks a config's files with these before it starts anything
(:meth:`scarce.flows.leml_config.LemlConfig.check_before_run`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from scarce.tasks.errors import InputError
from scarce.tasks.leml_files import _parquet_shapes, check_training_rows
from scarce.tasks.readers.arff import read_arff_header
from scarce.tasks.readers.text import check_no_gzip_twin
from scarce.tasks.readers.xmc import read_xmc_header


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


def check_inputs(model: Any, files: dict[str, list[Path]], format: str, n_labels: int | None,
                 *, fully_observed: bool = True, validation_fraction: float = 0.0) -> None:
    """What the heads of the files tell, checked before any file is read in full (so before
    anything is stored): every file of ``files["train"]`` and ``files["test"]`` (a file, or
    the parts of a folder) declares the first training file's numbers of features and
    labels; the training rows (less a validation split) are enough to fit
    (:func:`~scarce.tasks.leml_files.check_training_rows`); and the model's factors at the training
    file's sizes fit in memory (``model.check_memory``:
    :meth:`scarce.algorithms.leml.LEML.check_memory`,
    or the config's :meth:`scarce.flows.leml_config.ModelConfig.check_memory`), checked first: an
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


def stored_nonzeros(path: Path) -> int:
    """The entries a sparse store entry holds, from its footer (one Parquet row each)."""
    return int(pq.ParquetFile(path).metadata.num_rows)


def check_parts(x_files: list[Path], y_files: list[Path], folder: Path, key: str) -> None:
    """The parts of a folder (their store entries ``x_files`` and ``y_files``: the X and Y of
    each part, as loaded), checked as :func:`~scarce.tasks.leml_files.check_rows` checks one file:
    at
    least one label and one feature among them all (a part alone may have none), from the
    footers only."""
    for files, what in ((y_files, "label"), (x_files, "feature")):
        if not sum(stored_nonzeros(f) for f in files):
            raise InputError(f"none of the {len(files)} parts has a {what}: a training or "
                             f"test set needs {what}s", path=folder, key=key)
