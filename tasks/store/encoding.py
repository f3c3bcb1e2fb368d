"""The entry format: a value as one Parquet file that pandas, pyarrow and duckdb open directly.

Three kinds of value are stored, each with its kind, shape and dtype in the Parquet key-value
metadata (the footer's ``scarce.*`` keys) so that a round trip is exact:

``table``
    a :class:`pandas.DataFrame`, written with pyarrow's pandas metadata.
``sparse``
    a scipy.sparse matrix as a ``(row, col, value)`` table, with the shape and
    the format (csr, csc, coo) in the metadata.
``dense``
    a numpy array; a 2-D array is one column per matrix column (``"0"``,
    ``"1"``, ...), a 1-D array the single column ``"value"``; other ranks are
    reshaped to 2-D and their shape kept in the metadata.

Each file carries a checksum (sha256 of the Arrow IPC stream of its table) in its metadata, and
Parquet page checksums; a truncated or damaged entry, or a folder in its place, raises
:class:`CorruptEntry` on read.  Nothing is ever pickled.

The footer holds what the value is and how it decodes, nothing of where it came from: the
same value gives the same bytes under any key, whatever step wrote it.  An entry's step, key
and part are its path in the store (:mod:`scarce.tasks.store.layout`), its bytes are vouched
for by its step call's seal (:mod:`scarce.tasks.store.seals`), and a run's manifest records
every entry's ref and step code digest: a run folder publishes entries as they are
(hard links), and a refactor that leaves a result unchanged leaves its bytes unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from scarce.tasks.errors import InputError

META_PREFIX = b"scarce."
CHECKSUM_KEY = b"scarce.checksum"
FORMAT_VERSION = "1"
#: The kinds of value an entry holds (``scarce.kind`` in its footer, see :func:`encode`).
ENTRY_KINDS = ("table", "sparse", "dense")
#: The footer keys every entry has (see :func:`encode`): what shows that scarce wrote a file.
ENTRY_KEYS = (b"scarce.format_version", b"scarce.kind", CHECKSUM_KEY)


class CorruptEntry(Exception):
    """A store entry that is missing, truncated or fails its checksum."""


def encode(value: Any) -> pa.Table:
    """Arrow table for ``value`` with the metadata that decodes it and its checksum: a
    function of the value alone (and of the writing libraries' versions)."""
    extra: dict[str, str]
    if isinstance(value, pd.DataFrame):
        table = pa.Table.from_pandas(value, preserve_index=None)
        extra = {"kind": "table", "shape": json.dumps(list(value.shape))}
    elif sp.issparse(value):
        fmt = value.format if value.format in ("csr", "csc", "coo") else "coo"
        _check_dtype(value.dtype)
        coo = value.tocoo()
        table = pa.table(
            {
                "row": pa.array(np.asarray(coo.row)),
                "col": pa.array(np.asarray(coo.col)),
                "value": pa.array(np.asarray(coo.data)),
            }
        )
        extra = {
            "kind": "sparse",
            "format": fmt,
            "shape": json.dumps([int(s) for s in value.shape]),
            "dtype": _dtype_name(value.dtype),
            "index_dtype": _dtype_name(getattr(value, "indices", coo.row).dtype),
            "sorted": "1" if getattr(value, "has_sorted_indices", False) else "0",
        }
    elif isinstance(value, np.ndarray | np.generic):
        arr = np.asarray(value)
        _check_dtype(arr.dtype)
        shape = list(arr.shape)
        if arr.ndim == 1:
            table = pa.table({"value": pa.array(arr)})
        else:
            rows = shape[0] if arr.ndim else 1
            cols = int(np.prod(shape[1:], dtype=np.int64)) if arr.ndim else 1
            # One transposed copy whose rows are the columns (each contiguous, taken by Arrow
            # without another copy): a copy per column cost a factor's write more than the
            # rest of its encoding.
            by_column = np.ascontiguousarray(arr.reshape(rows, cols).T)
            table = pa.table({str(j): pa.array(by_column[j]) for j in range(cols)})
        extra = {"kind": "dense", "shape": json.dumps(shape), "dtype": _dtype_name(arr.dtype)}
    else:
        raise TypeError(
            f"cannot store a {type(value).__name__}: expected a DataFrame, a scipy.sparse matrix "
            "or a numpy array"
        )
    metadata = dict(table.schema.metadata or {})
    metadata[b"scarce.format_version"] = FORMAT_VERSION.encode()
    for k, v in extra.items():
        metadata[f"scarce.{k}".encode()] = str(v).encode()
    table = _as_parquet_reads_it(table.replace_schema_metadata(metadata))
    metadata[CHECKSUM_KEY] = table_checksum(table).encode()
    return table.replace_schema_metadata(metadata)


def parquet_options(table: pa.Table) -> dict[str, Any]:
    """How :func:`scarce.tasks.store.atomic.atomic_write_parquet` writes ``table``: every file
    with Parquet page checksums; a dense entry's columns (floats of a factor, mostly) plainly,
    uncompressed and without column statistics; any other file zstd-compressed with
    dictionaries and statistics, as pyarrow writes by default.

    Dense float columns hardly compress (zstd saved a few percent of a factor's bytes) and
    have no repeated values for a dictionary, which pyarrow tries on every column before
    falling back to plain: that try, the compression and the statistics made a factor's write
    several times its encoding, on every iteration's checkpoint.  Nothing reads a dense
    entry's statistics (:func:`read_rows` counts a dense entry's rows by row group; a sparse
    entry's ``row`` statistics are kept).  The file is plain Parquet that pandas, pyarrow and
    duckdb open, its table and checksum those of the same value written with the other
    options.
    """
    if (table.schema.metadata or {}).get(b"scarce.kind") == b"dense":
        return {"compression": "none", "use_dictionary": False, "write_statistics": False,
                "write_page_checksum": True}
    return {"compression": "zstd", "write_page_checksum": True}


def _dtype_name(dtype: np.dtype) -> str:
    return np.dtype(dtype).str


def _check_dtype(dtype: np.dtype) -> None:
    if np.dtype(dtype).kind not in "biuf":
        raise TypeError(f"cannot store arrays of dtype {dtype}: expected bool, int or float")


def _as_parquet_reads_it(table: pa.Table) -> pa.Table:
    """The table as a Parquet reader will return it.

    Parquet does not keep everything Arrow holds: the bytes under a null slot
    (pandas' NaN becomes a null whose slot keeps the NaN bits, read back as 0)
    and the name of a list's child field (``item`` becomes ``element``).  The
    checksum is taken over the read-back form so that reading reproduces it.
    """
    if all(_parquet_keeps(column) for column in table.columns):
        return table
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="none")
    return pq.read_table(pa.BufferReader(sink.getvalue()))


def _parquet_keeps(column: pa.ChunkedArray) -> bool:
    """True when Parquet reads ``column`` back as it is: a boolean, integer or floating column
    without nulls (nothing under a null slot to lose, no child field to rename).  Such tables
    (every array and sparse entry, the factors of each iteration) skip the round trip."""
    t = column.type
    return ((pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t))
            and column.null_count == 0)


def _scarce_meta(metadata) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (metadata or {}).items()
            if k.startswith(META_PREFIX)}


def _sparse_value(row: np.ndarray, col: np.ndarray, val: np.ndarray, meta: dict[str, str]):
    """The sparse matrix of an entry's ``row``, ``col`` and ``value`` columns."""
    shape = tuple(json.loads(meta["scarce.shape"]))
    idx = np.dtype(meta.get("scarce.index_dtype", "<i4"))
    row, col = row.astype(idx, copy=False), col.astype(idx, copy=False)
    val = val.astype(np.dtype(meta["scarce.dtype"]), copy=False)
    fmt = meta["scarce.format"]
    if fmt == "coo":
        return sp.coo_matrix((val, (row, col)), shape=shape)
    major, minor = (row, col) if fmt == "csr" else (col, row)
    n_major, n_minor = shape if fmt == "csr" else shape[::-1]
    if major.size and not (major[0] >= 0 and major[-1] < n_major and minor.min() >= 0
                           and minor.max() < n_minor and not (major[1:] < major[:-1]).any()):
        # Not as encode writes a CSR (CSC) matrix, its entries in row (column) order:
        # scipy's COO conversion sorts them, or says which index is out of range.
        coo = sp.coo_matrix((val, (row, col)), shape=shape)
        out = coo.tocsr() if fmt == "csr" else coo.tocsc()
    else:
        # The compressed matrix built on the columns themselves, as scipy's COO conversion
        # would give it (entries in their stored order, then sum_duplicates, which leaves a
        # canonical matrix untouched), without its copy of the indices and values.
        # searchsorted, not bincount: bincount would copy the indices to int64 first.
        keys = np.arange(n_major + 1, dtype=major.dtype
                         if n_major < np.iinfo(major.dtype).max else np.int64)
        indptr = np.searchsorted(major, keys, side="left").astype(idx, copy=False)
        kind = sp.csr_matrix if fmt == "csr" else sp.csc_matrix
        out = kind((val, minor, indptr), shape=shape)
        out.sum_duplicates()
    out.indices = out.indices.astype(idx, copy=False)
    out.indptr = out.indptr.astype(idx, copy=False)
    return out


def decode(table: pa.Table) -> Any:
    """Inverse of :func:`encode`."""
    meta = _scarce_meta(table.schema.metadata)
    kind = meta.get("scarce.kind")
    if kind == "table":
        return table.to_pandas()
    shape = tuple(json.loads(meta["scarce.shape"]))
    dtype = np.dtype(meta["scarce.dtype"])
    if kind == "sparse":
        # A column of one chunk is a read-only view of Arrow's buffer: copied, so that the
        # matrix is the caller's own, as the COO conversion's arrays were.
        columns = (table.column(c).to_numpy() for c in ("row", "col", "value"))
        return _sparse_value(*(a if a.flags.writeable else a.copy() for a in columns), meta)
    if kind == "dense":
        if len(shape) == 1:
            return table.column("value").to_numpy().astype(dtype, copy=True)
        rows = shape[0] if shape else 1
        n_cols = table.num_columns
        mat = np.empty((rows, n_cols), dtype=dtype)
        for j in range(n_cols):
            mat[:, j] = table.column(str(j)).to_numpy()
        return mat.reshape(shape)
    raise CorruptEntry(f"unknown entry kind {kind!r}")


def table_checksum(table: pa.Table) -> str:
    """sha256 of the table's Arrow IPC stream, its checksum metadata left out."""
    meta = {k: v for k, v in (table.schema.metadata or {}).items() if k != CHECKSUM_KEY}
    # One chunk per column: the IPC stream would otherwise depend on how the
    # table happened to be chunked, not only on its content.
    table = table.replace_schema_metadata(meta).combine_chunks()
    # The stream is hashed as it is written, not held: a whole copy of the table less at
    # every read (the same digest).
    sink = _HashingSink()
    with pa.PythonFile(sink, mode="w") as stream, \
            pa.ipc.new_stream(stream, table.schema) as writer:
        writer.write_table(table)
    return sink.sha.hexdigest()


class _HashingSink:
    """A write-only file that keeps only the sha256 of what is written to it."""

    def __init__(self) -> None:
        self.sha, self.size, self.closed = hashlib.sha256(), 0, False

    def write(self, data) -> int:
        self.sha.update(data)
        self.size += len(data)
        return len(data)

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def release_arrow_memory() -> None:
    """Give back to the system the memory Arrow's allocator keeps after a read.

    Arrow's default pool (mimalloc) keeps what a table used once the table is freed: a
    process that had read a large CSR entry stayed several times the entry's size resident
    until this call.  A Dask worker that reads its row blocks would carry that for the rest
    of the run.
    """
    pa.default_memory_pool().release_unused()


def read_checked_table(path: Path) -> pa.Table:
    """Read a Parquet file written by :func:`encode` and check its checksum."""
    table = _opened(path, pq.read_table)
    _check_checksum(path, table)
    return table


def _opened(path: Path, open_parquet):
    """``open_parquet(path, page_checksum_verification=True)``, a missing or unreadable
    file (or a folder in its place) raised as :class:`CorruptEntry`."""
    if not path.is_file():
        raise CorruptEntry(f"{path}: {'a folder, not a file' if path.is_dir() else 'missing'}")
    try:
        return open_parquet(path, page_checksum_verification=True)
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise CorruptEntry(f"{path}: unreadable Parquet ({exc})") from exc


def _check_checksum(path: Path, table: pa.Table) -> None:
    meta = table.schema.metadata or {}
    stored = meta.get(CHECKSUM_KEY)
    if stored is None:
        raise CorruptEntry(f"{path}: no checksum in metadata")
    try:
        # A damaged footer can still parse, with names or metadata that are not
        # UTF-8 (decoding them raises UnicodeDecodeError, not a pyarrow error).
        intact = stored.decode() == table_checksum(table)
    except Exception as exc:
        raise CorruptEntry(f"{path}: unreadable Parquet metadata ({exc})") from exc
    if not intact:
        raise CorruptEntry(f"{path}: checksum mismatch")


def read_checked_value(path: str | os.PathLike[str]) -> Any:
    """The value in a store-format Parquet file, its checksum checked:
    ``decode(read_checked_table(path))``, the same value, in less memory for a sparse
    entry.

    A sparse entry's columns are read one row group at a time into one numpy array each
    and checked as a table that shares those arrays, and a CSR or CSC matrix is built on
    them (:func:`decode`): at its peak the read holds the three columns and the matrix's
    pointer array, 12 bytes an entry for float32 values and int32 indices.  Read as an
    Arrow table and decoded, a full-scale LEML row block peaked well above the block it
    left: the table (several chunks, one a row group), its columns joined by ``to_numpy``
    and the CSR arrays a COO conversion builds, held at once.  Read so, it peaks at the
    block.
    (pyarrow has no read into given buffers, hence the copy loop.)
    """
    path = Path(path)
    pf = _opened(path, pq.ParquetFile)
    schema = pf.schema_arrow
    if ((schema.metadata or {}).get(b"scarce.kind") != b"sparse"
            or schema.names != ["row", "col", "value"]
            or not all(pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
                       for f in schema)):
        return decode(read_checked_table(path))
    try:
        columns = [_column_array(pf, name) for name in schema.names]
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise CorruptEntry(f"{path}: unreadable Parquet ({exc})") from exc
    # pa.array of a numeric numpy array without nulls shares its buffer: no copy.
    _check_checksum(path, pa.Table.from_arrays([pa.array(c) for c in columns],
                                               schema=schema))
    meta = _scarce_meta(schema.metadata)
    return _sparse_value(*columns, meta)


def _column_array(pf: pq.ParquetFile, name: str) -> np.ndarray:
    """Column ``name`` of a file without nulls, as one numpy array, one row group at a
    time (so at most a row group's column beside the array)."""
    md = pf.metadata
    out = np.empty(md.num_rows, dtype=pf.schema_arrow.field(name).type.to_pandas_dtype())
    pos = 0
    for i in range(md.num_row_groups):
        for chunk in pf.read_row_group(i, columns=[name]).column(0).chunks:
            if chunk.null_count:
                raise ValueError(f"nulls in column {name!r}")
            out[pos:pos + len(chunk)] = chunk.to_numpy(zero_copy_only=True)
            pos += len(chunk)
    if pos != out.size:
        raise ValueError(f"{pos} values in column {name!r}, the footer says {out.size}")
    return out


def entry_shape(path: str | os.PathLike[str]) -> tuple[int, ...]:
    """The shape of the value in a store-format Parquet file, from its footer only."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise CorruptEntry(f"{path}: unreadable Parquet ({exc})") from exc
    if b"scarce.shape" not in meta:
        raise CorruptEntry(f"{path}: not in the store's Parquet format (no scarce.shape in its "
                           "metadata)")
    return tuple(json.loads(meta[b"scarce.shape"]))


def read_rows(path: str | os.PathLike[str], start: int, stop: int) -> Any:
    """Rows ``start:stop`` of the matrix in a store-format Parquet file (a CSR or dense
    entry), reading only the row groups that hold them: what slicing the whole entry gives,
    with the same dtypes, for a process that must not hold the whole.

    A CSR entry's ``row`` column is in row order, so the row groups to read are those whose
    ``row`` statistics overlap the range (all of them if a file has none); a dense entry's
    rows are its table's rows.  The pages read are checked by their Parquet checksums; the
    entry's own checksum covers the whole table, so only a whole read
    (:func:`read_checked_table`) checks it.
    """
    path = Path(path)
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise CorruptEntry(f"{path}: unreadable Parquet ({exc})") from exc
    schema_meta = pf.schema_arrow.metadata or {}
    meta = {k.decode(): v.decode() for k, v in schema_meta.items() if k.startswith(META_PREFIX)}
    kind, shape = meta.get("scarce.kind"), json.loads(meta.get("scarce.shape", "[]"))
    if len(shape) != 2 or not (kind == "dense" or (kind == "sparse"
                                                   and meta.get("scarce.format") == "csr")):
        raise ValueError(f"{path}: rows are read of a CSR or dense matrix entry, not of a "
                         f"{meta.get('scarce.format', '')} {kind} of shape {shape}")
    if not 0 <= start <= stop <= shape[0]:
        raise ValueError(f"{path}: rows {start}:{stop} of a matrix of {shape[0]} rows")
    md = pf.metadata
    if kind == "dense":
        first, groups, offset = 0, [], 0
        for i in range(md.num_row_groups):
            n = md.row_group(i).num_rows
            if offset < stop and offset + n > start:
                first = offset if not groups else first
                groups.append(i)
            offset += n
        table = _row_groups(pf, groups, path).slice(start - first, stop - start)
    else:
        column = pf.schema_arrow.get_field_index("row")

        def may_hold(i: int) -> bool:
            stats = md.row_group(i).column(column).statistics
            return (stats is None or not stats.has_min_max
                    or (stats.min < stop and stats.max >= start))

        table = _row_groups(pf, [i for i in range(md.num_row_groups) if may_hold(i)], path)
        rows = table.column("row").to_numpy()
        lo, hi = np.searchsorted(rows, [start, stop])
        table = table.slice(lo, hi - lo)
        table = table.set_column(column, "row", pa.array(rows[lo:hi] - rows.dtype.type(start)))
    schema_meta = {**schema_meta, b"scarce.shape": json.dumps([stop - start, shape[1]]).encode()}
    value = decode(table.replace_schema_metadata(schema_meta))
    del table
    release_arrow_memory()
    return value


def _row_groups(pf: pq.ParquetFile, groups: list[int], path: Path) -> pa.Table:
    if not groups:
        return pf.schema_arrow.empty_table()
    try:
        return pf.read_row_groups(groups)
    except Exception as exc:  # pyarrow raises several types for damaged files
        raise CorruptEntry(f"{path}: unreadable Parquet ({exc})") from exc


def read_parquet_entry(path: Path) -> Any:
    """The value in a store-format Parquet file outside a store (an input dataset)."""
    try:
        value = read_checked_value(path)
    except CorruptEntry as exc:
        raise InputError(str(exc).removeprefix(f"{path}: "), path=path) from None
    release_arrow_memory()
    return value

