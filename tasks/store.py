"""The Parquet result store.

Kept as one module: the entry format, atomic writes, leases and gc all guard the same files.

Every task output that is data lives here as one real Parquet file that pandas,
pyarrow and duckdb open directly::

    <root>/<task>/<key>.parquet           single output
    <root>/<task>/<key>-<part>.parquet    one file per named part of an output

``<key>`` is a hash of the task's name, its code version, its parameters and
the keys of its inputs (see :mod:`tasks.steps`), so the path of an entry never
derives from a user string.  A *ref* is the entry's path relative to the root
without the suffix, for example ``"leml-load/3fa9c0e1d2b4a5f6a7b8c9d0-X"``.

Three kinds of value are stored, each with its kind, shape and dtype in the
Parquet key-value metadata so that a round trip is exact:

``table``
    a :class:`pandas.DataFrame`, written with pyarrow's pandas metadata.
``sparse``
    a scipy.sparse matrix as a ``(row, col, value)`` table, with the shape and
    the format (csr, csc, coo) in the metadata.
``dense``
    a numpy array; a 2-D array is one column per matrix column (``"0"``,
    ``"1"``, ...), a 1-D array the single column ``"value"``; other ranks are
    reshaped to 2-D and their shape kept in the metadata.

Writes are atomic: a temporary file in the same folder, ``fsync``, then
``os.replace``.  Each file carries a checksum (sha256 of the Arrow IPC stream
of its table) in its metadata, and Parquet page checksums; a truncated or
damaged entry, or a folder in its place, raises :class:`CorruptEntry` on read,
and the write that replaces it removes what stood there.  A write the system
refuses (a full disk, a read-only or foreign folder) raises
:class:`StoreWriteError`, naming the store and the system's reason, and leaves
no temporary file.  Every file has the mode the umask gives.  Nothing is ever
pickled.

The root may be any folder, one that holds the user's files too: listing and gc
(:meth:`Store.scan`) take as the store's only what shows scarce wrote it (an
entry's name and the ``scarce.*`` keys in its Parquet footer) and never touch
anything else.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from scarce.tasks.errors import InputError

SUFFIX = ".parquet"
META_PREFIX = b"scarce."
CHECKSUM_KEY = b"scarce.checksum"
PREFECT_DIR = "_prefect"
FORMAT_VERSION = "1"
LEASE_DIR = "_leases"
LEASE_SUFFIX = ".lease"
LEASE_REFS = ".refs"
GC_LOCK = "gc.lock"
SEAL_SUFFIX = ".sha256.json"  # <key>.sha256.json beside Prefect's record <key>
MTIME_MARGIN = 1.0  # seconds; see Lease
KEY_HEX = 32  # a key is the first 32 hex digits of a sha256 (tasks.steps.KEY_LENGTH)
#: The file name of an entry: ``<key>.parquet`` or ``<key>-<part>.parquet``.
ENTRY_NAME = re.compile(rf"(?P<key>[0-9a-f]{{{KEY_HEX}}})(?:-[A-Za-z0-9_][A-Za-z0-9_.-]*)?"
                        rf"{re.escape(SUFFIX)}")
#: Prefect's record of a step (``<key>``) and the step's seal (``<key>.sha256.json``).
RECORD_NAME = re.compile(rf"[0-9a-f]{{{KEY_HEX}}}")
SEAL_NAME = re.compile(rf"[0-9a-f]{{{KEY_HEX}}}{re.escape(SEAL_SUFFIX)}")
#: A temporary file of :func:`atomic_open` for the file ``<name>``: ``.<name>.<8 characters>.tmp``
#: (8 hex digits, or the 8 letters, digits or ``_`` of ``tempfile.mkstemp``'s names: the
#: temporaries an interrupted write of an earlier version left are scarce's too).
TEMP_NAME = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp")
#: The footer keys every entry has (see :func:`encode`): what shows that scarce wrote a file.
ENTRY_KEYS = (b"scarce.format_version", b"scarce.kind", CHECKSUM_KEY)
#: How an error names the store: the option that chose it.
STORE_KEY = "store (or $SCARCE_STORE)"


class CorruptEntry(Exception):
    """A store entry that is missing, truncated or fails its checksum."""


class StoreWriteError(InputError):
    """The system refused a write to the store (a full disk, a read-only file system, a
    folder this process may not write): an error of the environment the run was given, which
    the command line prints as one line naming the store and the reason."""


@contextmanager
def writing(root: Path, what: str) -> Iterator[None]:
    """Raise an ``OSError`` of the block as a :class:`StoreWriteError` naming the store
    ``root`` and ``what`` was being written (the ``OSError`` is its cause)."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise StoreWriteError(f"cannot write {what}: {reason}", path=root,
                              key=STORE_KEY) from exc


def clear_way(path: Path) -> None:
    """Remove what stands where the file ``path`` of a store is about to be written: a
    folder in its place, or a file in place of its folder.  Such an entry is damaged, as a
    truncated one is; ``os.replace`` cannot put a file over a folder."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    parent = path.parent
    if parent.is_file() or (parent.is_symlink() and not parent.exists()):
        parent.unlink()


def local_root(root: str | os.PathLike[str]) -> Path:
    """The folder of a store root given as a path or as an fsspec URL.

    A URL is resolved with :func:`fsspec.core.url_to_fs`; its filesystem must be a local one
    (``file://``, or a path on a shared mount such as NFS, which is how workers on several
    machines share one store).  Object stores (``s3://``, ``gs://``, ...) are refused: the
    store's atomic writes rely on a rename within one folder, which they do not offer.
    """
    text = os.fspath(root)
    if "://" not in text:
        return Path(text)
    from fsspec.core import url_to_fs
    from fsspec.implementations.local import LocalFileSystem

    try:
        fs, path = url_to_fs(text)
    except (ImportError, ValueError) as exc:
        raise ValueError(f"store root {text!r}: {exc}") from None
    if not isinstance(fs, LocalFileSystem):
        raise ValueError(
            f"store root {text!r}: {type(fs).__name__} is not a local filesystem; use a path or "
            "a file:// URL (a shared mount works across machines): atomic writes need a rename")
    return Path(path)


# The last dense arrays written in this process, kept as read-only copies for the next step
# that takes the entry as an input (Store.read_input): one iteration's factors are the next
# step's inputs, and reading them back (Parquet, then the checksum over the whole table) cost a
# step more than its own work on a small data set.  An entry is never rewritten with other
# content (its key names what it holds), so the copy is the file's value; it is used only while
# the file exists.  Store.read, the seals and the cache check read the files themselves, so
# damage is still found there.
RECENT_ENTRIES = 8
RECENT_BYTES = 1 << 24
_recent: dict[tuple[str, str], np.ndarray] = {}
_recent_lock = threading.Lock()


def _remember(root: Path, ref: str, value: Any) -> None:
    """Keep a read-only copy of ``value`` as the entry ``ref`` of ``root`` (see
    :data:`RECENT_ENTRIES`) when it is a dense numeric array of at most
    :data:`RECENT_BYTES`."""
    if not (isinstance(value, np.ndarray) and value.ndim >= 1 and value.dtype.kind in "biuf"
            and value.nbytes <= RECENT_BYTES):
        return
    copy = np.array(value, order="C", copy=True)
    copy.flags.writeable = False
    with _recent_lock:
        _recent.pop((str(root), ref), None)
        _recent[(str(root), ref)] = copy
        while len(_recent) > RECENT_ENTRIES:
            del _recent[next(iter(_recent))]


def _recalled(root: Path, ref: str) -> np.ndarray | None:
    with _recent_lock:
        return _recent.get((str(root), ref))


# Writes in flight (Store.write_later): one background thread per process writes a step's
# entries and then its side file (the seal) while the next step computes.  Every way to an
# entry's or side file's path (Store.path, Store.side_path) waits for its write first, and
# re-raises its error there; listing and gc wait for all of a store's.
_inflight: dict[tuple[str, str], Future] = {}
_inflight_lock = threading.Lock()
_writer: ThreadPoolExecutor | None = None


def _wait_for(root: Path, name: str) -> None:
    """Wait until the write of ``name`` (a ref, or a side file's path) under ``root`` is done;
    raise its error.  Nothing to wait for: return at once."""
    with _inflight_lock:
        future = _inflight.get((str(root), name))
    if future is not None:
        future.result()


def _in_flight(root: Path, name: str) -> bool:
    with _inflight_lock:
        return (str(root), name) in _inflight


def wait_for_writes(root: Path | None = None) -> None:
    """Wait for every write in flight (of the store at ``root``, or of all); raise the first
    error."""
    with _inflight_lock:
        futures = [f for (r, _), f in _inflight.items() if root is None or r == str(root)]
    for future in futures:
        future.result()


@dataclass(frozen=True)
class Store:
    """A folder of Parquet entries.

    Parameters
    ----------
    root : str, Path or URL
        The store's folder (a path or a ``file://`` URL, see :func:`local_root`); created on
        first write.
    """

    root: Path

    def __init__(self, root: str | os.PathLike[str]) -> None:
        path = local_root(root)
        if path.exists() and not path.is_dir():
            raise ValueError(f"store root {path} is not a folder")
        object.__setattr__(self, "root", path)

    # -- paths -----------------------------------------------------------
    def path(self, ref: str) -> Path:
        """File of the entry ``ref`` (``task/key`` or ``task/key-part``), once a write of it in
        flight (:meth:`write_later`) is done."""
        path = self._path(ref)
        _wait_for(self.root, ref)
        return path

    def side_path(self, path: Path) -> Path:
        """``path``, a side file of the store (a seal), once a write of it in flight is
        done."""
        _wait_for(self.root, str(path))
        return path

    def _path(self, ref: str) -> Path:
        task, _, name = ref.partition("/")
        if not task or not name or "/" in name or ".." in ref or ref.startswith("/"):
            raise ValueError(f"not a store ref: {ref!r}")
        return self.root / task / f"{name}{SUFFIX}"

    @property
    def prefect_dir(self) -> Path:
        """Where Prefect keeps its cache records for this store (small JSON files)."""
        return self.root / PREFECT_DIR

    def exists(self, ref: str) -> bool:
        return self.path(ref).is_file()

    # -- write -----------------------------------------------------------
    def write(self, ref: str, value: Any, meta: dict[str, str] | None = None) -> str:
        """Write ``value`` atomically under ``ref`` and return ``ref``.

        Raises
        ------
        StoreWriteError
            When the system refuses the write; nothing of it is left behind.
        """
        self._write_entry(ref, value, meta)
        _remember(self.root, ref, value)
        with _inflight_lock:  # a failed write of it in flight is replaced by this one
            _inflight.pop((str(self.root), ref), None)
        return ref

    def _write_entry(self, ref: str, value: Any, meta: dict[str, str] | None) -> Path:
        table = encode(value, meta)
        path = self._path(ref)
        with writing(self.root, f"entry {ref}"):
            clear_way(path)
            atomic_write_parquet(path, table)
        return path

    def _write_side(self, path: Path, data: bytes) -> None:
        with writing(self.root, str(path.relative_to(self.root))):
            clear_way(path)
            atomic_write_bytes(path, data)

    def write_later(self, entries: list[tuple[str, Any, dict[str, str] | None]],
                    side: Path, side_bytes: Callable[[dict[str, str]], bytes]) -> None:
        """Write ``entries`` (``(ref, value, meta)``), then the side file ``side`` with
        ``side_bytes(sha256 of each entry's file)``, in the background, as :meth:`write` and
        :meth:`write_file` would; returns at once.

        Until they are written, :meth:`path` of those refs and :meth:`side_path` of ``side``
        wait for them (and raise a write's :class:`StoreWriteError` there); the dense arrays
        among the values are kept for :meth:`read_input` at once.  For a step's outputs when
        the next step runs in this process: its checkpoint is written while it computes.
        """
        global _writer
        for ref, value, _ in entries:
            _remember(self.root, ref, value)

        def job() -> None:
            digests = {ref: file_sha256(self._write_entry(ref, value, meta))
                       for ref, value, meta in entries}
            self._write_side(side, side_bytes(digests))

        names = [ref for ref, _, _ in entries] + [str(side)]
        with _inflight_lock:
            if _writer is None:
                _writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scarce-store")
            future = _writer.submit(job)
            for name in names:
                _inflight[(str(self.root), name)] = future

        def done(f: Future) -> None:
            if f.exception() is not None:
                return  # kept: the waiters raise it
            with _inflight_lock:
                for name in names:
                    if _inflight.get((str(self.root), name)) is f:
                        del _inflight[(str(self.root), name)]

        future.add_done_callback(done)

    def flush(self) -> None:
        """Wait for this store's writes in flight (:meth:`write_later`); raise the first
        error."""
        wait_for_writes(self.root)

    def write_file(self, path: Path, data: bytes) -> None:
        """Write a side file of the store (a step's seal) atomically, as :meth:`write` does."""
        self._write_side(path, data)
        with _inflight_lock:  # a failed write of it in flight is replaced by this one
            _inflight.pop((str(self.root), str(path)), None)

    # -- read ------------------------------------------------------------
    def read_table(self, ref: str) -> pa.Table:
        """The entry's Arrow table after checking its checksum."""
        return read_checked_table(self.path(ref))

    def read_input(self, ref: str) -> Any:
        """:meth:`read` for a step's input: the read-only copy this process kept when it wrote
        the entry (:data:`RECENT_ENTRIES`), while the file is there or being written, else the
        file's value."""
        recent = _recalled(self.root, ref)
        if recent is not None and (_in_flight(self.root, ref) or self._path(ref).is_file()):
            return recent
        return self.read(ref)

    def read(self, ref: str) -> Any:
        """The value stored under ``ref``: DataFrame, sparse matrix or ndarray."""
        value = read_checked_value(self.path(ref))
        release_arrow_memory()
        return value

    def meta(self, ref: str) -> dict[str, str]:
        """The ``scarce.*`` metadata of an entry, read from its footer only."""
        schema = pq.read_schema(self.path(ref))
        return {
            k.decode()[len("scarce.") :]: v.decode()
            for k, v in (schema.metadata or {}).items()
            if k.startswith(META_PREFIX)
        }

    def shape(self, ref: str) -> tuple[int, ...]:
        """The shape of an entry's value, from its footer only (:func:`entry_shape`)."""
        return entry_shape(self.path(ref))

    def verify(self, ref: str) -> bool:
        """True when the entry exists and passes its checksum."""
        try:
            self.read_table(ref)
        except CorruptEntry:
            return False
        return True

    def sha256(self, ref: str) -> str:
        """sha256 of the entry's file bytes (what a run manifest records)."""
        return file_sha256(self.path(ref))

    def delete(self, ref: str) -> None:
        path = self.path(ref)
        if path.is_dir() and not path.is_symlink():  # a folder in an entry's place
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)

    # -- listing and garbage collection -----------------------------------
    def scan(self) -> Listing:
        """What the store's folder holds (after the writes in flight): its entries, the
        temporary files of interrupted writes, and everything else (:class:`Foreign`).

        An entry is a regular file with an entry's name (:data:`ENTRY_NAME`) in a task folder
        whose Parquet footer holds the keys :func:`encode` writes (:data:`ENTRY_KEYS`); a
        Prefect record or seal is a regular file of ``_prefect`` with its name whose JSON reads
        as one of the step call its name gives (:func:`_is_record`, :func:`_is_seal`); a
        temporary is a regular file named as :func:`atomic_open` names those of an entry or a
        seal.  Only footers and those small JSON files are read.

        Only the levels of the store's layout are looked at: the root's children, the files of
        each task folder, of ``_prefect`` and of ``_leases``.  Anything else at those levels
        (a file or folder of the user's, a symbolic link, a folder below a task folder) is
        foreign and named as one item, never descended into: a store root set to a data folder
        or a project costs a listing of its top two levels, not a walk of it.
        """
        self.flush()
        entries: dict[str, dict[str, str]] = {}
        side_files: dict[str, list[Path]] = {}
        temporaries: list[Path] = []
        foreign: list[Foreign] = []
        if not self.root.is_dir():
            return Listing(entries, side_files, temporaries, foreign)
        for top in _children(self.root):
            if _kind(top) != "folder":
                foreign.append(_foreign("", top, "not a task folder"))
            elif top.name == PREFECT_DIR:
                for f in _children(top.path):
                    path, key = Path(f.path), f.name[:KEY_HEX]
                    if _kind(f) != "file":
                        foreign.append(_foreign(top.name, f, ""))
                    elif RECORD_NAME.fullmatch(f.name) and _is_record(path, key) or (
                            SEAL_NAME.fullmatch(f.name) and _is_seal(path, key)):
                        side_files.setdefault(key, []).append(path)
                    elif _is_temporary(f.name, SEAL_NAME):
                        temporaries.append(path)
                    elif f.name.endswith(".tmp"):
                        foreign.append(Foreign(f"{top.name}/{f.name}", "not a temporary of "
                                               "scarce's"))
                    else:
                        foreign.append(Foreign(f"{top.name}/{f.name}", "not a record or "
                                               "seal of scarce's"))
            elif top.name == LEASE_DIR:
                for f in _children(top.path):
                    name = f.name
                    if _kind(f) == "file" and (name == GC_LOCK or (
                            name.endswith(LEASE_SUFFIX)
                            and _is_lease(Path(f.path), name[: -len(LEASE_SUFFIX)])) or (
                            name.endswith(LEASE_REFS) and os.path.isfile(
                                top.path + "/" + name[: -len(LEASE_REFS)] + LEASE_SUFFIX))):
                        continue
                    foreign.append(_foreign(top.name, f, "not a lease"))
            elif top.name.startswith(("_", ".")):
                foreign.append(Foreign(f"{top.name}/", "a folder scarce does not use"))
            else:
                for f in _children(top.path):
                    ref = f"{top.name}/{f.name[: -len(SUFFIX)]}"
                    if _kind(f) == "file" and ENTRY_NAME.fullmatch(f.name):
                        meta = _entry_meta(Path(f.path))
                        if isinstance(meta, dict):
                            entries[ref] = meta
                        elif meta is not None:  # (None: removed meanwhile)
                            foreign.append(Foreign(f"{top.name}/{f.name}", meta))
                    elif _kind(f) == "file" and _is_temporary(f.name, ENTRY_NAME):
                        temporaries.append(Path(f.path))
                    elif f.name.endswith(".tmp"):
                        foreign.append(_foreign(top.name, f, "not a temporary of scarce's"))
                    else:
                        foreign.append(_foreign(top.name, f, "not an entry's name"))
        return Listing(dict(sorted(entries.items())), side_files, temporaries, foreign)

    def refs(self) -> list[str]:
        """Every entry's ref, sorted (after the writes in flight): the files scarce wrote
        (:meth:`scan`)."""
        return list(self.scan().entries)

    def ls(self, listing: Listing | None = None) -> pd.DataFrame:
        """A table of the entries (of ``listing``, else of a new :meth:`scan`): ref, task,
        kind, shape, dtype, bytes, modified."""
        listing = self.scan() if listing is None else listing
        rows = []
        for ref, m in listing.entries.items():
            try:
                st = self._path(ref).stat()
            except FileNotFoundError:  # removed meanwhile
                continue
            rows.append(
                {
                    "ref": ref,
                    "task": ref.split("/", 1)[0],
                    "kind": m.get("kind", "?"),
                    "shape": m.get("shape", ""),
                    "dtype": m.get("dtype", ""),
                    "bytes": st.st_size,
                    "modified": pd.Timestamp(st.st_mtime, unit="s", tz="UTC"),
                }
            )
        columns = ["ref", "task", "kind", "shape", "dtype", "bytes", "modified"]
        return pd.DataFrame(rows, columns=columns)

    def size(self, ref: str) -> int:
        """Bytes of the entry's file (0 when it is gone)."""
        try:
            return self.path(ref).stat().st_size
        except FileNotFoundError:
            return 0

    # -- leases of running runs and garbage collection ----------------------
    @property
    def lease_dir(self) -> Path:
        """Where running runs keep their leases (``<root>/_leases``)."""
        return self.root / LEASE_DIR

    def lease(self, run_id: str) -> Lease:
        """A lease for the run ``run_id``: what it uses stays in the store until it ends."""
        return Lease(self, run_id)

    def live_leases(self) -> list[dict[str, Any]]:
        """The leases of runs that are still running; stale ones (their process is gone) are
        removed.  Each: ``run_id``, ``started`` (epoch seconds) and the ``refs`` it noted."""
        out = []
        if not self.lease_dir.is_dir():
            return out
        for lock in sorted(self.lease_dir.glob(f"*{LEASE_SUFFIX}")):
            run_id = lock.name[: -len(LEASE_SUFFIX)]
            try:
                fd = os.open(lock, os.O_RDWR)
            except FileNotFoundError:
                continue  # released meanwhile
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # its run holds it: live
                    info = _read_lease(lock)
                    refs_file = self.lease_dir / f"{run_id}{LEASE_REFS}"
                    refs = refs_file.read_text().split() if refs_file.is_file() else []
                    out.append({"run_id": run_id, "started": info.get("started", 0.0),
                                "host": info.get("host"), "pid": info.get("pid"),
                                "refs": set(refs)})
                else:  # nobody holds it: the run ended without releasing it (killed)
                    if _is_lease(lock, run_id):  # else not scarce's: left alone
                        (self.lease_dir / f"{run_id}{LEASE_REFS}").unlink(missing_ok=True)
                        lock.unlink(missing_ok=True)
            finally:
                os.close(fd)
        return out

    @contextmanager
    def _gc_lock(self, shared: bool) -> Iterator[None]:
        """Shared: a run noting a cache hit it is about to use; exclusive: gc deciding and
        deleting.  Either the hit is noted before gc reads the leases, or gc is done."""
        with writing(self.root, f"{LEASE_DIR}/{GC_LOCK}"):
            self.lease_dir.mkdir(parents=True, exist_ok=True)
            # the mode the umask gives, as every file scarce writes
            fd = os.open(self.lease_dir / GC_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def gc(self, keep: Iterable[str], dry_run: bool = False) -> GcReport:
        """Delete every entry not in ``keep`` and not used by a running run.

        Only what scarce wrote is ever deleted: entries as :meth:`scan` finds them (an entry's
        name in a task folder, a regular file, and the ``scarce.*`` keys of :func:`encode` in
        its Parquet footer), the Prefect records and seals of the removed steps that read as
        such (:func:`_is_record`, :func:`_is_seal`), and the temporaries of scarce's atomic
        writes.  Everything else is left alone and named in the report (``foreign``): a
        user's file, a symbolic link, a folder, and a damaged file, which scarce cannot show
        it wrote (a step whose entry is damaged writes it again when it runs).

        Kept besides ``keep``: every ref a live lease has noted, and every entry written
        since the oldest live lease began (a running step's new outputs, written on any worker
        before the run notes them).  Temporary files are removed only when no run is live.
        Prefect's cache records (and seals) of the removed steps go with them, so a removed
        step is recomputed, not reported as cached; the records of kept steps stay.
        """
        keep = set(keep)
        with self._gc_lock(shared=False):
            leases = self.live_leases()
            protected = set().union(*(lease["refs"] for lease in leases)) if leases else set()
            since = min((lease["started"] for lease in leases), default=None)
            listing = self.scan()
            removed, kept_live, freed = [], 0, 0
            for ref in listing.entries:
                if ref in keep:
                    continue
                if ref in protected or (since is not None and _mtime(self._path(ref)) >= since):
                    kept_live += 1
                    continue
                removed.append(ref)
                freed += self.size(ref)
            side_files = [path for key in sorted({ref.split("/", 1)[1][:KEY_HEX]
                                                  for ref in removed})
                          for path in listing.side_files.get(key, [])]
            temporaries = [] if leases else listing.temporaries
            if not dry_run:
                for ref in removed:
                    self._path(ref).unlink(missing_ok=True)
                for path in [*side_files, *temporaries]:
                    path.unlink(missing_ok=True)
        return GcReport(removed=removed, bytes=freed, kept_for_live_runs=kept_live,
                        live_runs=[lease["run_id"] for lease in leases],
                        temporaries=[str(p.relative_to(self.root)) for p in temporaries],
                        foreign=listing.foreign)


@dataclass(frozen=True)
class GcReport:
    """What :meth:`Store.gc` removed (or would remove, with ``dry_run``), and what it left
    alone as not scarce's (``foreign``)."""

    removed: list[str]
    bytes: int
    kept_for_live_runs: int
    live_runs: list[str]
    temporaries: list[str] = field(default_factory=list)
    foreign: list[Foreign] = field(default_factory=list)


@dataclass(frozen=True)
class Foreign:
    """A file or folder in a store that is not scarce's (:meth:`Store.scan`): its path
    relative to the root (a folder's ends in ``/``) and why it is not."""

    path: str
    why: str


@dataclass(frozen=True)
class Listing:
    """What :meth:`Store.scan` found: each entry's ref with the ``scarce.*`` metadata of its
    footer (keys without the prefix), each step call's Prefect record and seal by its key, the
    temporaries of interrupted writes, and the rest."""

    entries: dict[str, dict[str, str]]
    side_files: dict[str, list[Path]]
    temporaries: list[Path]
    foreign: list[Foreign]


def _children(folder: str | os.PathLike[str]) -> list[os.DirEntry]:
    try:
        with os.scandir(folder) as it:
            return sorted(it, key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):  # removed meanwhile
        return []


def _kind(entry: os.DirEntry) -> str:
    """``"file"`` (a regular file), ``"folder"``, or what else ``entry`` is; a symbolic link
    is never followed."""
    try:
        if entry.is_symlink():
            return "a symbolic link"
        if entry.is_dir(follow_symlinks=False):
            return "folder"
        if entry.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return "not a regular file"


def _foreign(folder: str, entry: os.DirEntry, why: str) -> Foreign:
    """``entry`` of the store's ``folder`` (``""``: the root) as foreign, ``why`` when it is a
    regular file."""
    kind = _kind(entry)
    path = f"{folder}/{entry.name}" if folder else entry.name
    if kind == "folder":
        return Foreign(f"{path}/", "a folder")
    return Foreign(path, why if kind == "file" else kind)


def _is_temporary(name: str, of: re.Pattern[str]) -> bool:
    """True when ``name`` is a temporary of :func:`atomic_open` for a file named as ``of``."""
    match = TEMP_NAME.fullmatch(name)
    return match is not None and of.fullmatch(match["name"]) is not None


def _entry_meta(path: Path) -> dict[str, str] | str | None:
    """The ``scarce.*`` metadata of the file ``path`` from its Parquet footer (keys without
    the prefix) when it has the keys every entry has (:data:`ENTRY_KEYS`); else why it is not
    an entry; None when it is gone.  Only the footer is read."""
    try:
        meta = pq.read_metadata(path).metadata or {}
    except FileNotFoundError:
        return None
    except Exception:  # pyarrow raises several types for files that are not Parquet
        return "not readable as Parquet: damaged, or not scarce's"
    if not all(k in meta for k in ENTRY_KEYS):
        return "no scarce metadata in its Parquet footer"
    try:
        return {k.decode()[len("scarce."):]: v.decode() for k, v in meta.items()
                if k.startswith(META_PREFIX)}
    except UnicodeDecodeError:
        return "damaged scarce metadata in its Parquet footer"


SIDE_FILE_MAX = 1 << 20  # bytes; a record or seal names a step's few refs


def _side_json(path: Path) -> Any:
    """The JSON in the regular file ``path`` of at most :data:`SIDE_FILE_MAX` bytes, else
    None."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > SIDE_FILE_MAX:
            return None
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def _refs_of(key: str, refs: Any) -> bool:
    """True when ``refs`` is a ref of the step call ``key``, or a non-empty mapping of part
    names to such refs (what a step returns, :meth:`tasks.steps.Step.refs`)."""
    def of_key(ref: Any) -> bool:
        if not isinstance(ref, str) or ref.count("/") != 1:
            return False
        match = ENTRY_NAME.fullmatch(ref.split("/", 1)[1] + SUFFIX)
        return match is not None and match["key"] == key

    if isinstance(refs, dict):
        return bool(refs) and all(isinstance(p, str) and of_key(r) for p, r in refs.items())
    return of_key(refs)


def _is_record(path: Path, key: str) -> bool:
    """True when ``path`` is Prefect's cache record of the step call ``key``: a JSON result
    record (``metadata`` and ``result``) whose result is that call's refs."""
    record = _side_json(path)
    if not (isinstance(record, dict) and isinstance(record.get("metadata"), dict)
            and isinstance(record.get("result"), str)):
        return False
    try:
        return _refs_of(key, json.loads(record["result"]))
    except ValueError:
        return False


def _is_seal(path: Path, key: str) -> bool:
    """True when ``path`` is the seal of the step call ``key``: a JSON object of that call's
    refs to the sha256 of their files (empty when all its parts are volatile)."""
    seal = _side_json(path)
    return isinstance(seal, dict) and all(
        _refs_of(key, ref) and isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)
        for ref, digest in seal.items())


class Lease:
    """A running run's claim on the store entries it uses.

    ``<root>/_leases/<run_id>.lease`` is held with a shared ``flock`` for the run's life (the
    lock vanishes with the process, so a killed run leaves a stale lease that the next gc
    removes), ``<run_id>.refs`` lists every ref the run has noted, one per line.  gc keeps those
    refs and every entry written since the lease began (:meth:`Store.gc`).  A lease rather
    than a grace period by age: a run reuses cached entries of any age (a week-old X is the
    input of today's W-step), and a lock tied to the process needs no clock and no timeout.
    """

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self.path = store.lease_dir / f"{run_id}{LEASE_SUFFIX}"
        self.refs_path = store.lease_dir / f"{run_id}{LEASE_REFS}"
        self._fd: int | None = None
        self._noted: set[str] = set()
        self._lock = threading.Lock()
        # gc keeps the entries modified since then; a margin of a second for file systems
        # whose timestamps lag the clock (coarse kernel clocks, a shared mount's server).
        info = {"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(),
                "started": time.time() - MTIME_MARGIN}
        with writing(store.root, f"the lease of run {run_id}"):
            store.lease_dir.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)  # umask's mode
            try:
                fcntl.flock(self._fd, fcntl.LOCK_SH)
                os.ftruncate(self._fd, 0)
                os.write(self._fd, json.dumps(info).encode())
            except OSError:  # no lease: the file goes (or, unlocked, the next gc removes it)
                fd, self._fd = self._fd, None
                os.close(fd)
                with suppress(OSError):
                    self.path.unlink(missing_ok=True)
                raise

    @property
    def active(self) -> bool:
        return self._fd is not None

    def note(self, refs: Iterable[str]) -> None:
        """Add refs the run uses (appended and flushed at once)."""
        with self._lock:
            new = [r for r in refs if r not in self._noted]
            if not new or self._fd is None:
                return
            with writing(self.store.root, f"the lease of run {self.run_id}"), \
                    open(self.refs_path, "a", encoding="utf-8") as fh:
                fh.write("".join(f"{r}\n" for r in new))
            self._noted.update(new)

    @contextmanager
    def hold(self, refs: Iterable[str]) -> Iterator[None]:
        """Note ``refs`` and keep any gc from deleting while the caller checks them."""
        with self.store._gc_lock(shared=True):
            self.note(refs)
            yield

    def release(self) -> None:
        """The run is over (its manifest, if any, now names what it keeps)."""
        with self._lock:
            if self._fd is None:
                return
            self.refs_path.unlink(missing_ok=True)
            self.path.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:  # a failed run's context, collected: let gc proceed
        try:
            self.release()
        except Exception:
            pass


def _read_lease(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _is_lease(path: Path, run_id: str) -> bool:
    """True when ``path`` is the lease of run ``run_id`` as :class:`Lease` writes it: a regular
    file holding its JSON, or empty (a run killed before it wrote it)."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        if path.stat().st_size == 0:
            return True
    except OSError:
        return False
    return _read_lease(path).get("run_id") == run_id


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


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


# -- encoding --------------------------------------------------------------
def _dtype_name(dtype: np.dtype) -> str:
    return np.dtype(dtype).str


def _check_dtype(dtype: np.dtype) -> None:
    if np.dtype(dtype).kind not in "biuf":
        raise TypeError(f"cannot store arrays of dtype {dtype}: expected bool, int or float")


def encode(value: Any, meta: dict[str, str] | None = None) -> pa.Table:
    """Arrow table for ``value`` with its metadata and checksum."""
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
            mat = arr.reshape(rows, cols)
            columns = {
                str(j): pa.array(np.ascontiguousarray(mat[:, j])) for j in range(mat.shape[1])
            }
            table = pa.table(columns)
        extra = {"kind": "dense", "shape": json.dumps(shape), "dtype": _dtype_name(arr.dtype)}
    else:
        raise TypeError(
            f"cannot store a {type(value).__name__}: expected a DataFrame, a scipy.sparse matrix "
            "or a numpy array"
        )
    metadata = dict(table.schema.metadata or {})
    metadata[b"scarce.format_version"] = FORMAT_VERSION.encode()
    for k, v in {**extra, **(meta or {})}.items():
        metadata[f"scarce.{k}".encode()] = str(v).encode()
    table = _as_parquet_reads_it(table.replace_schema_metadata(metadata))
    metadata[CHECKSUM_KEY] = table_checksum(table).encode()
    return table.replace_schema_metadata(metadata)


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


@contextmanager
def atomic_open(path: Path) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path``; on success fsync and rename it to ``path``.

    Readers never see a half-written file: they see the old entry or the new one.  The file
    has the mode the umask gives (``0o666 & ~umask``, see :func:`_new_temp`).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_temp(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):  # the error being raised says more than this one
            Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _new_temp(path: Path) -> tuple[int, Path]:
    """A new, empty temporary file beside ``path`` (:data:`TEMP_NAME`), opened for writing.

    Created as ``open(path, "w")`` creates a file: mode ``0o666``, from which the kernel takes
    the process's umask (and a folder's default ACL) at the moment of the call, so the file
    renamed to ``path`` has the mode every other program's files get there.
    ``tempfile.mkstemp`` creates mode ``0o600`` whatever the umask, and setting the mode
    afterwards would need the umask, which ``os.umask`` can only read by changing it for the
    whole process (every thread creating a file meanwhile would get the wrong one).
    ``O_EXCL`` makes the name this call's own, as ``mkstemp`` does.
    """
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))


def try_create_in(folder: Path) -> None:
    """Create and remove a temporary file in ``folder``, as an atomic write would: the system's
    refusal (a read-only file system, a folder not ours, a full table of inodes) raises its
    ``OSError`` here, before any work whose result would go there."""
    fd, tmp = _new_temp(Path(folder) / ".scarce-probe")
    os.close(fd)
    tmp.unlink()


def atomic_write_parquet(path: Path, table: pa.Table) -> None:
    """Write ``table`` to ``path`` atomically, with Parquet page checksums."""
    with atomic_open(path) as fh:
        pq.write_table(table, fh, compression="zstd", write_page_checksum=True)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (manifests, JSON side files)."""
    with atomic_open(path) as fh:
        fh.write(data)


def _fsync_dir(folder: Path) -> None:
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def file_sha256(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
