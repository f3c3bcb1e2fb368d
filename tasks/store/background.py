"""Writes in the background: a step's entries written while the next step computes.

One background thread per process writes a step's entries and then its side file (the seal)
(:meth:`scarce.tasks.store.Store.write_later`).  Every way to an entry's or side file's path
(:meth:`~scarce.tasks.store.Store.path`, :meth:`~scarce.tasks.store.Store.side_path`) waits for its
write
first (:func:`wait_for`) and re-raises its error there; listing and gc wait for all of a
store's (:func:`wait_for_writes`).

The last dense arrays written in this process are kept as read-only copies for the next step
that takes the entry as an input (:meth:`~scarce.tasks.store.Store.read_input`): one iteration's
factors are the next step's inputs, and reading them back (Parquet, then the checksum over the
whole table) cost a step more than its own work on a small data set.  A sparse matrix is
kept once it has been read as a step's input (:func:`remember_read`): a loop's held-out rows,
scored at every iteration, were read and checksummed again by each of its steps; it is given as
a copy each time (a sparse matrix cannot be made read-only as a whole).  The last small tables
are kept too, and given as a copy each time (a DataFrame cannot be made read-only): a loop that
reads an iteration's trace to decide whether to go on would otherwise wait for the whole
checkpoint of that iteration to be written before its next step could start.  An entry is never
rewritten with other content (its key names what it holds), so the copy is the file's value; it
is used only while the file exists or is being written.  ``Store.read``, the seals and the cache
check read the files themselves, so damage is still found there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

RECENT_ENTRIES = 8
RECENT_BYTES = 1 << 24
#: Small tables kept (a loop's trace and timings): how many, and the most memory of each.
RECENT_TABLES = 8
RECENT_TABLE_BYTES = 1 << 20
_recent: dict[tuple[str, str], np.ndarray] = {}
_recent_tables: dict[tuple[str, str], pd.DataFrame] = {}
#: Sparse inputs read from their files (a loop's held-out rows): how many are kept.
RECENT_READS = 4
_recent_reads: dict[tuple[str, str], Any] = {}
_recent_lock = threading.Lock()

_inflight: dict[tuple[str, str], Future] = {}
_inflight_lock = threading.Lock()
_writer: ThreadPoolExecutor | None = None


def remember(root: Path, ref: str, value: Any) -> Any:
    """Keep a copy of ``value`` as the entry ``ref`` of ``root``: a read-only one when it is
    a dense numeric array of at most :data:`RECENT_BYTES` (the last :data:`RECENT_ENTRIES`),
    a deep one of a small numeric table that reads back as it is (the last
    :data:`RECENT_TABLES`, see :func:`_reads_back_as_it_is`); anything else is not kept (and
    a value kept earlier under ``ref`` is dropped).  Returns the copy kept, else None."""
    key = (str(root), ref)
    kept: dict[tuple[str, str], Any] | None = None
    if (isinstance(value, np.ndarray) and value.ndim >= 1 and value.dtype.kind in "biuf"
            and value.nbytes <= RECENT_BYTES):
        copy = np.array(value, order="C", copy=True)
        copy.flags.writeable = False
        kept, most = _recent, RECENT_ENTRIES
    elif _reads_back_as_it_is(value):
        copy = value.copy(deep=True)
        kept, most = _recent_tables, RECENT_TABLES
    with _recent_lock:
        _recent.pop(key, None)
        _recent_tables.pop(key, None)
        _recent_reads.pop(key, None)
        if kept is None:
            return None
        kept[key] = copy
        while len(kept) > most:
            del kept[next(iter(kept))]
    return copy


def _reads_back_as_it_is(value: Any) -> bool:
    """True for a DataFrame of at most :data:`RECENT_TABLE_BYTES` that its entry reads back as
    it is: a range index, columns named by strings, each of a numpy bool, integer or float
    (32 or 64 bits) dtype without NaN (a NaN becomes a null in Parquet).  Any other table (text,
    lists, missing values) is read from its file, so a step gets the same input in the run
    that wrote it as in a later one that reads it."""
    if not (isinstance(value, pd.DataFrame) and isinstance(value.index, pd.RangeIndex)
            and all(isinstance(c, str) for c in value.columns)):
        return False
    for dtype in value.dtypes:  # before the size: a step's timings (text) stop here, cheaply
        if not (isinstance(dtype, np.dtype) and (dtype.kind in "biu" or dtype.kind == "f"
                                                 and dtype.itemsize >= 4)):
            return False
    # numpy columns only: their memory is rows x item sizes (``memory_usage`` took
    # milliseconds to say so, at every iteration's trace)
    if len(value) * sum(dtype.itemsize for dtype in value.dtypes) > RECENT_TABLE_BYTES:
        return False
    floats = value.select_dtypes("floating")
    return not floats.isna().to_numpy().any()


def remember_read(root: Path, ref: str, value: Any) -> None:
    """Keep a copy of ``value``, a sparse matrix just read from the file of the entry ``ref``
    of ``root`` (checked, so it is the entry's value), when it holds at most
    :data:`RECENT_BYTES` (the last :data:`RECENT_READS`); anything else is not kept."""
    if not (sp.issparse(value) and value.format in ("csr", "csc")
            and value.data.nbytes + value.indices.nbytes + value.indptr.nbytes <= RECENT_BYTES):
        return
    key, copy = (str(root), ref), value.copy()
    with _recent_lock:
        _recent_reads.pop(key, None)
        _recent_reads[key] = copy
        while len(_recent_reads) > RECENT_READS:
            del _recent_reads[next(iter(_recent_reads))]


def recalled(root: Path, ref: str) -> Any:
    """The copy :func:`remember` or :func:`remember_read` kept of the entry ``ref`` of
    ``root`` (the read-only array itself; a new copy of a table or a sparse matrix), else
    None."""
    with _recent_lock:
        array = _recent.get((str(root), ref))
        table = _recent_tables.get((str(root), ref))
        matrix = _recent_reads.get((str(root), ref))
    if table is not None:
        return table.copy(deep=True)
    if matrix is not None:
        return matrix.copy()
    return array


def submit(root: Path, names: Iterable[str], job: Callable[[], None]) -> None:
    """Run ``job`` on the background thread; until it is done, :func:`wait_for` of each of
    ``names`` (refs, or side files' paths) under ``root`` waits for it.  A job that fails
    stays registered: its waiters raise its error."""
    global _writer
    names = list(names)
    with _inflight_lock:
        if _writer is None:
            _writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scarce-store")
        future = _writer.submit(job)
        for name in names:
            _inflight[(str(root), name)] = future

    def done(f: Future) -> None:
        if f.exception() is not None:
            return  # kept: the waiters raise it
        with _inflight_lock:
            for name in names:
                if _inflight.get((str(root), name)) is f:
                    del _inflight[(str(root), name)]

    future.add_done_callback(done)


def forget(root: Path, name: str) -> None:
    """Drop the write in flight of ``name`` under ``root``: a write of it in this thread has
    replaced it (a failed one included)."""
    with _inflight_lock:
        _inflight.pop((str(root), name), None)


def wait_for(root: Path, name: str) -> None:
    """Wait until the write of ``name`` (a ref, or a side file's path) under ``root`` is done;
    raise its error.  Nothing to wait for: return at once."""
    with _inflight_lock:
        future = _inflight.get((str(root), name))
    if future is not None:
        future.result()


def in_flight(root: Path, name: str) -> bool:
    """True while a write of ``name`` under ``root`` is registered (:func:`submit`)."""
    with _inflight_lock:
        return (str(root), name) in _inflight


def wait_for_writes(root: Path | None = None) -> None:
    """Wait for every write in flight (of the store at ``root``, or of all); raise the first
    error."""
    with _inflight_lock:
        futures = [f for (r, _), f in _inflight.items() if root is None or r == str(root)]
    for future in futures:
        future.result()
