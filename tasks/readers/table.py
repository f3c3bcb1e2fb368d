"""Reader for multi-label data kept as a plain table: one row per example.

The file is a CSV (``.csv``), a tab-separated file (``.tsv``), either gzipped (``.gz``), a
Parquet file as pandas or pyarrow writes it (``.parquet``) or JSON Lines (``.jsonl``, one
object per line).  Its columns are named by the caller:

- a **label column**: the example's labels by name, as a list (Parquet, JSON Lines), as the
  text of a list (``['a', 'b']``, which is what pandas writes to a CSV for a list, or JSON's
  ``["a", "b"]``), or as one string of names joined by a separator (``a,b``); an empty or
  missing cell is an example without labels;
- a **text column**, a string per row; or
- a **feature column** of sparse features: ``"index:value"`` pairs separated by spaces or
  commas (the LIBSVM / Extreme Classification form, ``"3:0.5 17:1"``), a mapping ``{index:
  value}`` (JSON Lines, a Parquet map), a list of ``[index, value]`` pairs, or a list of
  numbers (a dense row, every row the same length).

The file is read by pandas (pyarrow for Parquet), which is made for these formats; what is
added here is reading the cells of the label and feature columns in the forms researchers
write them, and errors that name the file, the column and the row.  Rows are numbered from 1
after a CSV's header (a CSV row is not a line when a quoted text spans lines).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scarce.tasks.errors import InputError, excerpt

#: The file endings (lower case) read as a table.
TABLE_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".parquet", ".jsonl", ".jsonl.gz")

_PAIR_SPLIT = re.compile(r"[\s,]+")


def table_kind(path: str | Path) -> str:
    """``csv``, ``tsv``, ``parquet`` or ``jsonl`` from the file's name; an
    :class:`InputError` for another ending."""
    name = Path(path).name.lower()
    for suffix in TABLE_SUFFIXES:
        if name.endswith(suffix):
            return suffix.removesuffix(".gz").lstrip(".")
    raise InputError(f"not a table file: a table is read from a name ending in "
                     f"{', '.join(TABLE_SUFFIXES)}", path=path)


def read_table(path: str | Path, required: Sequence[str],
               optional: Sequence[str] = ()) -> pd.DataFrame:
    """The columns ``required`` and those of ``optional`` the file has, one row per example.

    CSV and TSV cells are read as text, with an empty cell kept as an empty string (not a
    missing value): a label cell ``""`` is an example without labels.

    Raises
    ------
    InputError
        Naming the file: unreadable, not parsed (with pandas' line), or without a
        ``required`` column (the columns it has are listed).
    """
    path = Path(path)
    kind = table_kind(path)
    wanted = list(dict.fromkeys([*required, *optional]))
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            have = pq.read_schema(path).names
            frame = pd.read_parquet(path, columns=[c for c in wanted if c in have])
        elif kind == "jsonl":
            frame = pd.read_json(path, lines=True, dtype=False)
        else:
            frame = pd.read_csv(path, sep="\t" if kind == "tsv" else ",", dtype=str,
                                keep_default_na=False, na_filter=False,
                                usecols=lambda c: c in wanted, encoding="utf-8")
    except FileNotFoundError:
        raise InputError("input file not found", path=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start})", path=path) from None
    except (OSError, ValueError, ImportError) as exc:
        # pandas' ParserError and EmptyDataError are ValueErrors; pyarrow's errors are
        # OSError or ArrowInvalid (a ValueError).
        raise InputError(f"cannot read the {kind} table: {exc}", path=path) from None
    missing = [c for c in required if c not in frame.columns]
    if missing:
        if kind != "parquet" and kind != "jsonl":
            have = list(pd.read_csv(path, sep="\t" if kind == "tsv" else ",", nrows=0,
                                    dtype=str).columns)
        else:
            have = list(frame.columns) if kind == "jsonl" else have
        raise InputError(f"no column {missing[0]!r} (the file's columns: "
                         f"{excerpt(have, 120)})", path=path)
    return frame[[c for c in wanted if c in frame.columns]].reset_index(drop=True)


def _row_error(path: Path, column: str, row: int, message: str) -> InputError:
    return InputError(f"row {row + 1}, column {column!r}: {message}", path=path)


def _missing(cell) -> bool:
    if cell is None:
        return True
    try:
        return bool(np.ndim(cell) == 0 and pd.isna(cell))
    except (TypeError, ValueError):
        return False


def _literal_list(text: str):
    """The list written as JSON or as a Python literal (pandas' ``str`` of a list), or None
    when ``text`` is neither."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def label_names(cells: Iterable, separator: str, path: Path, column: str) -> list[list[str]]:
    """Every row's label names, in the order written, each once (whitespace around a name
    stripped): from a list, the text of a list, or a string joined by ``separator``."""
    rows: list[list[str]] = []
    for i, cell in enumerate(cells):
        if isinstance(cell, np.ndarray | list | tuple):
            names = list(cell)
        elif _missing(cell):
            names = []
        elif isinstance(cell, str):
            text = cell.strip()
            if text.startswith("[") and text.endswith("]"):
                names = _literal_list(text)
                if not isinstance(names, list):
                    raise _row_error(path, column, i, f"{excerpt(text)} looks like a list "
                                     "but is not one (JSON or Python)")
            else:  # the common form: names joined by the separator, all strings
                rows.append([n for n in dict.fromkeys(
                    name.strip() for name in text.split(separator)) if n] if text else [])
                continue
        elif isinstance(cell, int | np.integer) and not isinstance(cell, bool):
            names = [cell]
        else:
            raise _row_error(path, column, i, f"labels must be names (a list or a string), "
                             f"got {type(cell).__name__}")
        out = []
        for name in names:
            if isinstance(name, bool) or not isinstance(name, str | int | np.integer):
                raise _row_error(path, column, i, f"a label name must be a string, got "
                                 f"{excerpt(name)}")
            name = str(name).strip()
            if name and name not in out:
                out.append(name)
        rows.append(out)
    return rows


def _pairs(cell, path: Path, column: str, row: int) -> tuple[list[int], list[float]] | None:
    """A sparse cell's indices and values; None for a dense row (a list of numbers)."""
    if isinstance(cell, str):
        text = cell.strip()
        if text.startswith("{") or text.startswith("["):
            parsed = _literal_list(text)
            if parsed is None:
                raise _row_error(path, column, row, f"{excerpt(text)} is neither JSON nor a "
                                 "Python literal")
            return _pairs(parsed, path, column, row)
        items = [t for t in _PAIR_SPLIT.split(text) if t]
        pairs = []
        for item in items:
            index, sep, value = item.partition(":")
            if not sep:
                raise _row_error(path, column, row, f"{excerpt(item)} is not index:value")
            pairs.append((index, value))
    elif isinstance(cell, dict):
        pairs = list(cell.items())
    elif isinstance(cell, np.ndarray | list | tuple):
        seq = list(cell)
        if all(isinstance(v, int | float | np.number) and not isinstance(v, bool)
               for v in seq):
            return None
        pairs = []
        for item in seq:
            if isinstance(item, dict) and len(item) == 2:  # a struct {"key", "value"}
                item = tuple(item.values())
            if not isinstance(item, list | tuple | np.ndarray) or len(item) != 2:
                raise _row_error(path, column, row, f"{excerpt(item)} is not an [index, "
                                 "value] pair")
            pairs.append(tuple(item))
    elif _missing(cell):
        pairs = []
    else:
        raise _row_error(path, column, row, f"features must be index:value pairs, a mapping "
                         f"or a list, got {type(cell).__name__}")
    indices, values = [], []
    for index, value in pairs:
        try:
            i = int(str(index).strip())
            v = float(str(value).strip()) if isinstance(value, str) else float(value)
        except (TypeError, ValueError):
            raise _row_error(path, column, row, f"{excerpt(index)}:{excerpt(value)} is not "
                             "an integer index and a number") from None
        if i < 0:
            raise _row_error(path, column, row, f"feature index {i} is negative")
        if not np.isfinite(v):
            raise _row_error(path, column, row, f"feature {i} has the value {v}, not finite")
        indices.append(i)
        values.append(v)
    if len(set(indices)) != len(indices):
        raise _row_error(path, column, row, "a feature index is given twice")
    return indices, values


def _pair_strings(cells: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The CSR arrays of a column whose every cell is ``index:value`` text, parsed by NumPy
    over the whole column at once (a cell by cell parse in Python costs a microsecond a
    pair); None when any cell is not of that plain form, which :func:`_pairs` then reads
    (and names the row at fault)."""
    if not all(isinstance(c, str) for c in cells):
        return None
    texts = [c.replace(",", " ") for c in cells]
    counts = np.fromiter((len(t.split()) for t in texts), dtype=np.int64, count=len(texts))
    colons = np.fromiter((t.count(":") for t in texts), dtype=np.int64, count=len(texts))
    if not np.array_equal(counts, colons):
        return None
    try:
        numbers = np.array(" ".join(texts).replace(":", " ").split(), dtype=np.float64)
    except ValueError:
        return None
    index, values = numbers[0::2], numbers[1::2]
    if (index.size and (index.min() < 0 or not np.array_equal(index, np.floor(index))
                        or index.max() >= 2 ** 62)) or not np.isfinite(values).all():
        return None
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = index.astype(np.int64)
    within = np.ones(max(indices.size - 1, 0), dtype=bool)  # consecutive pairs in one row
    within[indptr[1:-1][(indptr[1:-1] > 0) & (indptr[1:-1] < indices.size)] - 1] = False
    if (np.diff(indices)[within] > 0).all():  # every row already sorted and unique
        return indptr, indices, np.ascontiguousarray(values)
    for r in range(len(texts)):  # sorted and unique within each row
        row = indices[indptr[r]:indptr[r + 1]]
        if row.size > 1 and not (np.diff(row) > 0).all():
            order = np.argsort(row, kind="stable")
            if (np.diff(row[order]) == 0).any():
                return None
            indices[indptr[r]:indptr[r + 1]] = row[order]
            values[indptr[r]:indptr[r + 1]] = values[indptr[r]:indptr[r + 1]][order]
    return indptr, indices, np.ascontiguousarray(values)


def feature_rows(cells: Sequence, path: Path, column: str,
                 n_features: int | None = None) -> sp.csr_matrix:
    """The feature column as a float64 CSR matrix (values parsed as floats, then kept in
    float64 so a reader in any dtype rounds them once).  ``n_features``: the width (a row
    with an index beyond it is an error); None: the largest index + 1, or a dense row's
    length."""
    cells = list(cells)
    fast = _pair_strings(cells)
    if fast is not None:
        return _with_width(*fast, path, column, n_features, None)
    indptr, indices, data = [0], [], []
    dense = None
    for i, cell in enumerate(cells):
        parsed = _pairs(cell, path, column, i)
        if parsed is None:
            row = np.asarray(list(cell), dtype=np.float64)
            if dense is None:
                dense = len(row)
            elif len(row) != dense:
                raise _row_error(path, column, i, f"a dense row of {len(row)} values; the "
                                 f"first has {dense}")
            if not np.isfinite(row).all():
                raise _row_error(path, column, i, "a value that is not finite")
            nz = np.flatnonzero(row)
            parsed = (nz.tolist(), row[nz].tolist())
        elif dense is not None and parsed[0]:
            raise _row_error(path, column, i, "index:value pairs after dense rows")
        order = np.argsort(parsed[0], kind="stable")
        indices.extend(np.asarray(parsed[0], dtype=np.int64)[order].tolist())
        data.extend(np.asarray(parsed[1], dtype=np.float64)[order].tolist())
        indptr.append(len(indices))
    return _with_width(np.asarray(indptr), np.asarray(indices, dtype=np.int64),
                       np.asarray(data, dtype=np.float64), path, column, n_features, dense)


def _with_width(indptr: np.ndarray, idx: np.ndarray, data: np.ndarray, path: Path, column: str,
                n_features: int | None, dense: int | None) -> sp.csr_matrix:
    """The CSR matrix of the arrays, ``n_features`` wide (an index beyond it is an error
    naming its row), else as wide as a dense row or the largest index + 1."""
    width = dense if dense is not None else (int(idx.max()) + 1 if idx.size else 0)
    if n_features is not None:
        if idx.size and int(idx.max()) >= n_features:
            at = int(np.flatnonzero(idx >= n_features)[0])
            row = int(np.searchsorted(indptr, at, side="right")) - 1
            raise _row_error(path, column, row, f"feature index {int(idx[at])} is beyond "
                             f"n_features {n_features} (indices 0..{n_features - 1})")
        width = n_features
    return sp.csr_matrix((data, idx, indptr), shape=(len(indptr) - 1, width))
