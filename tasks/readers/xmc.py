"""Reader for the Extreme Classification Repository text format.

::

    N D L
    l1,l2,... f:v f:v ...
     f:v f:v ...            <- a point without labels starts with a space

The first line gives the number of points ``N``, features ``D`` and labels ``L``;
each of the next ``N`` lines is one point: a comma-separated list of 0-based
label indices, one space, then ``index:value`` feature pairs (0-based indices)
separated by spaces.  Blank lines after the last point are ignored.  ``.gz``
files are read transparently.

Parsing is vectorised: lines are split once, all feature pairs of a block of
lines are converted by pandas' C parser in one call, and only when that fails (or a
check fails) is the block re-read line by line to name the first bad line.  Indices and
values have the syntax of :mod:`scarce.tasks.readers.numbers` on both paths (an index is digits
only: pandas alone would read ``1e1`` as 10).

Errors are :class:`scarce.tasks.errors.InputError` with the file and 1-based line:
a bad header (a count that is not a positive integer, or beyond what an int64 index
holds), fewer or more point lines than ``N``, a label or feature index that is not digits, a
malformed ``index:value`` pair, an index out of range, a duplicated label or feature in a
point, a non-numeric, NaN or infinite value or one that is not finite in the requested
dtype (``1e39`` in float32), text that is not UTF-8, and a truncated or corrupt gzip file.
:func:`read_xmc_header` reads the header alone, so that a caller can compare or size
files before reading them.

Not :func:`sklearn.datasets.load_svmlight_file` (after the header): it took longer on the
repository's files, its errors name no line, it refuses feature indices out of order (which
this format allows), and it reads NaN and infinite values, a label twice in a point and fewer
points than the header declares without a word.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scarce.tasks.errors import InputError, excerpt
from scarce.tasks.readers.numbers import (
    MAX_INDEX_DIGITS,
    cut,
    index_list_plain,
    index_parts_plain,
    parse_index,
    parse_value,
    shown,
)
from scarce.tasks.readers.text import decode_text, iter_lines, read_bytes

__all__ = ["read_xmc", "read_xmc_header"]

_BLOCK_LINES = 100_000
#: The largest count a header may declare: indices are int64.
MAX_COUNT = np.iinfo(np.int64).max


def _parse_header(line: str, path: Path) -> tuple[int, int, int]:
    parts = line.split()
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        raise InputError(f"bad header {excerpt(line.strip())}: expected 'N D L', three "
                         "non-negative integers (points, features, labels)",
                         path=path, line=1)
    counts = []
    for text, what in zip(parts, ("points", "features", "labels"), strict=True):
        digits = text.lstrip("0") or "0"
        if len(digits) > MAX_INDEX_DIGITS or int(digits) > MAX_COUNT:
            raise InputError(f"the header declares {cut(digits, 40)} {what}; at most "
                             f"{MAX_COUNT} (2^63 - 1) can be indexed", path=path, line=1)
        if digits == "0":
            raise InputError(f"the header declares 0 {what}; a dataset needs at least one",
                             path=path, line=1)
        counts.append(int(digits))
    n, d, n_labels = counts
    return n, d, n_labels


def read_xmc_header(path: str | Path) -> tuple[int, int, int]:
    """The numbers of points, features and labels the header of ``path`` declares, reading
    the file no further than its first line.

    Raises
    ------
    tasks.errors.InputError
        As :func:`read_xmc` would for the first line (an empty file, a bad header).
    """
    path = Path(path)
    first = next(iter_lines(path), None)
    if first is None:
        raise InputError("empty file: expected a header line 'N D L'", path=path, line=1)
    return _parse_header(first, path)


def _parse_line(line: str, n_features: int, n_labels: int, dtype=np.float64):
    """Slow, exact parse of one point line; ValueError says what is wrong."""
    lab, _, feat = line.partition(" ")
    labels: list[int] = []
    if lab:
        for tok in lab.split(","):
            try:
                j = parse_index(tok)
            except ValueError as exc:
                raise ValueError(
                    f"label {exc} (labels are a comma-separated list of indices before the "
                    "first space; a point without labels starts with a space)"
                ) from None
            if not 0 <= j < n_labels:
                raise ValueError(f"label {j} is out of range [0, {n_labels})")
            labels.append(j)
    if len(set(labels)) != len(labels):
        raise ValueError(f"a label is repeated in {lab!r}")
    idx: list[int] = []
    vals: list[float] = []
    for tok in feat.split():
        i_str, sep, v_str = tok.partition(":")
        if not sep or not i_str or not v_str or ":" in v_str:
            raise ValueError(f"feature {tok!r} is not an 'index:value' pair")
        try:
            i = parse_index(i_str)
        except ValueError as exc:
            raise ValueError(f"feature index {exc}") from None
        if not 0 <= i < n_features:
            raise ValueError(f"feature index {i} is out of range [0, {n_features})")
        try:
            v = parse_value(v_str)
        except ValueError:
            raise ValueError(f"feature value {shown(v_str)} is not a number") from None
        if not math.isfinite(v):
            raise ValueError(f"feature value {v_str!r} is not finite")
        if not _finite_in(v, dtype):
            raise ValueError(f"feature value {v_str!r} is not finite in "
                             f"{np.dtype(dtype).name} (largest {np.finfo(dtype).max:.4g})")
        idx.append(i)
        vals.append(v)
    if len(set(idx)) != len(idx):
        raise ValueError("a feature index is repeated")
    return labels, idx, vals


def _finite_in(value: float, dtype) -> bool:
    """Whether ``value`` stays finite once cast to ``dtype``."""
    with np.errstate(over="ignore"):
        return bool(np.isfinite(np.asarray(value, dtype=dtype)))


def _locate_error(lines, first_line, n_features, n_labels, path, dtype):
    for offset, line in enumerate(lines):
        try:
            _parse_line(line, n_features, n_labels, dtype)
        except ValueError as exc:
            raise InputError(str(exc), path=path, line=first_line + offset) from None
    raise InputError("malformed data in lines "
                     f"{first_line}-{first_line + len(lines) - 1}", path=path, line=first_line)


def _has_repeats(indptr, indices, width) -> bool:
    if indices.size < 2:
        return False
    rows = np.repeat(np.arange(indptr.size - 1, dtype=np.int64), np.diff(indptr))
    if (indptr.size - 1) * max(width, 1) <= MAX_COUNT:  # row * width + index fits in int64
        return bool((np.diff(np.sort(rows * max(width, 1) + indices)) == 0).any())
    order = np.lexsort((indices, rows))
    return bool(((np.diff(rows[order]) == 0) & (np.diff(indices[order]) == 0)).any())


def _numbers(text: str, columns: int) -> list[np.ndarray]:
    """Parse one record per line, ``columns`` fields separated by ':' (pandas' C parser:
    many times faster than NumPy's string casts).  The first column is int64, the
    second float64.  Blank lines are skipped; anything else unexpected raises."""
    if not text.strip():
        return [np.zeros(0, dtype=np.int64), np.zeros(0)][:columns]
    dtypes = {0: np.int64, 1: np.float64}
    frame = pd.read_csv(io.StringIO(text), sep=":", header=None, engine="c",
                        quoting=csv.QUOTE_NONE, dtype={c: dtypes[c] for c in range(columns)},
                        na_filter=columns > 1)
    if frame.shape[1] != columns:
        raise ValueError("wrong number of fields")
    return [frame[c].to_numpy() for c in range(columns)]


def _parse_block(lines, n_features, n_labels, dtype):
    """Vectorised parse of point lines; raises ValueError (or a pandas error) on
    anything unexpected, after which the caller re-reads the block line by line."""
    split = [line.partition(" ") for line in lines]
    labs = [s[0] for s in split]
    feats = [s[2] for s in split]

    if not index_list_plain(",".join(labs)):
        raise ValueError("a label index that is not digits")
    lab_counts = np.fromiter((lab.count(",") + 1 if lab else 0 for lab in labs),
                             dtype=np.int64, count=len(labs))
    (lab_idx,) = _numbers(",".join(lab for lab in labs if lab).replace(",", "\n"), 1)
    if lab_idx.size != lab_counts.sum():
        raise ValueError("empty label")
    if lab_idx.size and (lab_idx.min() < 0 or lab_idx.max() >= n_labels):
        raise ValueError("label out of range")

    big = " ".join(feats)
    if not index_parts_plain(big):  # pandas' integer parse reads 1e1, +3 and 3.0
        raise ValueError("a feature index that is not digits")
    nnz = np.fromiter((f.count(":") for f in feats), dtype=np.int64, count=len(feats))
    idx, vals = _numbers(big.replace("\t", " ").replace(" ", "\n"), 2)
    # Every token yields one record; with one ':' per record, every token has one ':'.
    if idx.size != nnz.sum():
        raise ValueError("feature pairs do not line up")
    if idx.size and (idx.min() < 0 or idx.max() >= n_features):
        raise ValueError("feature out of range")
    if not np.isfinite(vals).all():
        raise ValueError("missing or non-finite value")
    with np.errstate(over="ignore"):
        vals = vals.astype(dtype)
    if not np.isfinite(vals).all():
        raise ValueError("a value beyond the range of the dtype")

    x_indptr = np.zeros(len(lines) + 1, dtype=np.int64)
    np.cumsum(nnz, out=x_indptr[1:])
    y_indptr = np.zeros(len(lines) + 1, dtype=np.int64)
    np.cumsum(lab_counts, out=y_indptr[1:])
    if _has_repeats(x_indptr, idx, n_features) or _has_repeats(y_indptr, lab_idx, n_labels):
        raise ValueError("repeated index")
    X = sp.csr_matrix((vals, idx, x_indptr), shape=(len(lines), n_features))
    Y = sp.csr_matrix((np.ones(lab_idx.size, dtype=np.int8), lab_idx, y_indptr),
                      shape=(len(lines), n_labels))
    return X, Y


def read_xmc(path: str | Path, *, dtype=np.float32) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Read an Extreme Classification Repository text file.

    Parameters
    ----------
    path : str or Path
        The file; gzip when the name ends in ``.gz``.
    dtype : {np.float32, np.float64}, default=np.float32
        dtype of the feature values.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (N, D), ``dtype``
        Features, indices sorted within each row.
    Y : scipy.sparse.csr_matrix of shape (N, L), int8
        Labels, 1 where present.

    Raises
    ------
    tasks.errors.InputError
        On any malformed input, with the file and 1-based line number.
    """
    path = Path(path)
    text = decode_text(read_bytes(path), path)
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise InputError("empty file: expected a header line 'N D L'", path=path, line=1)
    n, n_features, n_labels = _parse_header(lines[0], path)
    body = lines[1:]
    while len(body) > n and not body[-1].strip():
        body.pop()
    if len(body) > n:
        raise InputError(f"the header says {n} points but there are more lines; "
                         f"line {n + 2} is the first extra point", path=path, line=n + 2)
    if len(body) < n:
        raise InputError(f"the header says {n} points but the file has only {len(body)} "
                         f"point lines", path=path, line=1)
    Xs, Ys = [], []
    for start in range(0, n, _BLOCK_LINES):
        block = body[start:start + _BLOCK_LINES]
        try:
            X, Y = _parse_block(block, n_features, n_labels, dtype)
        except Exception:  # any failure of the fast path: re-read the block exactly
            _locate_error(block, start + 2, n_features, n_labels, path, dtype)
        Xs.append(X)
        Ys.append(Y)
    if not Xs:
        return (sp.csr_matrix((0, n_features), dtype=dtype),
                sp.csr_matrix((0, n_labels), dtype=np.int8))
    X = sp.vstack(Xs, format="csr") if len(Xs) > 1 else Xs[0]
    Y = sp.vstack(Ys, format="csr") if len(Ys) > 1 else Ys[0]
    X.sort_indices()
    Y.sort_indices()
    return X, Y
