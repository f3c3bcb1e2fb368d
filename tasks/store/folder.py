"""The store: a folder of Parquet entries, each written and read by its ref.

What is in the folder and where (:mod:`scarce.tasks.store.layout`), how a value becomes a file
(:mod:`scarce.tasks.store.encoding`), how a file is written (:mod:`scarce.tasks.store.atomic`, and
in the
background, :mod:`scarce.tasks.store.background`), which runs use it
(:mod:`scarce.tasks.store.leases`) and
what gc may remove (:mod:`scarce.tasks.store.gc`) each have their module; :class:`Store` is the one
object a step or a command holds.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from scarce.tasks.store import background, gc, leases
from scarce.tasks.store.atomic import (
    FolderSyncs,
    atomic_write_bytes,
    atomic_write_parquet,
    clear_way,
    file_sha256,
    synced_folders,
    writing,
)
from scarce.tasks.store.encoding import (
    META_PREFIX,
    CorruptEntry,
    encode,
    entry_shape,
    read_checked_table,
    read_checked_value,
    release_arrow_memory,
)
from scarce.tasks.store.layout import PREFECT_DIR, entry_path, local_root


@dataclass(frozen=True)
class Store:
    """A folder of Parquet entries.

    Parameters
    ----------
    root : str, Path or URL
        The store's folder (a path or a ``file://`` URL, see
        :func:`~scarce.tasks.store.layout.local_root`); created on first write.
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
        background.wait_for(self.root, ref)
        return path

    def side_path(self, path: Path) -> Path:
        """``path``, a side file of the store (a seal), once a write of it in flight is
        done."""
        background.wait_for(self.root, str(path))
        return path

    def _path(self, ref: str) -> Path:
        return entry_path(self.root, ref)

    @property
    def prefect_dir(self) -> Path:
        """Where Prefect keeps its cache records for this store (small JSON files)."""
        return self.root / PREFECT_DIR

    def exists(self, ref: str) -> bool:
        return self.path(ref).is_file()

    # -- write -----------------------------------------------------------
    def write(self, ref: str, value: Any) -> str:
        """Write ``value`` atomically under ``ref`` and return ``ref``.  The file's bytes are
        the value's (:func:`~scarce.tasks.store.encoding.encode`), the same under any ref.

        Raises
        ------
        StoreWriteError
            When the system refuses the write; nothing of it is left behind.
        """
        self._write_entry(ref, value)
        background.remember(self.root, ref, value)
        background.forget(self.root, ref)  # a failed write of it in flight is replaced
        return ref

    def write_all(self, entries: list[tuple[str, Any]]) -> list[str]:
        """Write ``entries`` (``(ref, value)``) as :meth:`write` does, each folder they are
        in fsync-ed once after the last (:class:`~scarce.tasks.store.atomic.FolderSyncs`)
        rather than once per entry; returns their refs.

        For a step's outputs: when this returns they last through a crash, so the seal
        written next never names an entry that did not.
        """
        self._write_entries(entries)
        for ref, value in entries:
            background.remember(self.root, ref, value)
            background.forget(self.root, ref)
        return [ref for ref, _ in entries]

    def _write_entries(self, entries: list[tuple[str, Any]]) -> list[Path]:
        """Each entry's file, written; their folders fsync-ed once, when the last is."""
        with synced_folders() as syncs:
            return [self._write_entry(ref, value, syncs) for ref, value in entries]

    def _write_entry(self, ref: str, value: Any, syncs: FolderSyncs | None = None) -> Path:
        table = encode(value)
        path = self._path(ref)
        with writing(self.root, f"entry {ref}"):
            clear_way(path)
            atomic_write_parquet(path, table, syncs)
        return path

    def _write_side(self, path: Path, data: bytes) -> None:
        with writing(self.root, str(path.relative_to(self.root))):
            clear_way(path)
            atomic_write_bytes(path, data)

    def write_later(self, entries: list[tuple[str, Any]],
                    side: Path, side_bytes: Callable[[dict[str, str]], bytes]) -> None:
        """Write ``entries`` (``(ref, value)``), then the side file ``side`` with
        ``side_bytes(sha256 of each entry's file)``, in the background, as :meth:`write_all`
        and :meth:`write_file` would; returns at once.

        Until they are written, :meth:`path` of those refs and :meth:`side_path` of ``side``
        wait for them (and raise a write's :class:`~scarce.tasks.store.atomic.StoreWriteError`
        there); the dense arrays among the values are kept for :meth:`read_input` at once.
        For a step's outputs when the next step runs in this process: its checkpoint is
        written while it computes (:mod:`scarce.tasks.store.background`).
        """
        # What is kept is what is written: a caller changing a value after this call
        # changes neither the copy the next step reads nor the file.
        entries = [(ref, kept if (kept := background.remember(self.root, ref, value))
                    is not None else value) for ref, value in entries]

        def job() -> None:
            paths = self._write_entries(entries)  # lasting before the side file is written
            digests = {ref: file_sha256(path)
                       for (ref, _), path in zip(entries, paths, strict=True)}
            self._write_side(side, side_bytes(digests))

        background.submit(self.root, [ref for ref, _ in entries] + [str(side)], job)

    def flush(self) -> None:
        """Wait for this store's writes in flight (:meth:`write_later`); raise the first
        error."""
        background.wait_for_writes(self.root)

    def write_file(self, path: Path, data: bytes) -> None:
        """Write a side file of the store (a step's seal) atomically, as :meth:`write` does."""
        self._write_side(path, data)
        background.forget(self.root, str(path))  # a failed write of it in flight is replaced

    # -- read ------------------------------------------------------------
    def read_table(self, ref: str) -> pa.Table:
        """The entry's Arrow table after checking its checksum."""
        return read_checked_table(self.path(ref))

    def read_input(self, ref: str) -> Any:
        """:meth:`read` for a step's input: the copy this process kept when it wrote the entry
        (:mod:`scarce.tasks.store.background`: a dense array, read-only; a small table, a copy
        each time) or when it last read a sparse one (a copy each time), while the file is
        there or being written, else the file's value."""
        recent = background.recalled(self.root, ref)
        if recent is not None and (background.in_flight(self.root, ref)
                                   or self._path(ref).is_file()):
            return recent
        value = self.read(ref)
        background.remember_read(self.root, ref, value)
        return value

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
        """The shape of an entry's value, from its footer only
        (:func:`~scarce.tasks.store.encoding.entry_shape`)."""
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
    def scan(self) -> gc.Listing:
        """What the store's folder holds, after the writes in flight
        (:func:`scarce.tasks.store.gc.scan`)."""
        return gc.scan(self.root)

    def refs(self) -> list[str]:
        """Every entry's ref, sorted (after the writes in flight): the files scarce wrote
        (:meth:`scan`)."""
        return list(self.scan().entries)

    def ls(self, listing: gc.Listing | None = None) -> pd.DataFrame:
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

    @property
    def lease_dir(self) -> Path:
        """Where running runs keep their leases (``<root>/_leases``)."""
        return leases.lease_dir(self.root)

    def lease(self, run_id: str) -> leases.Lease:
        """A lease for the run ``run_id``: what it uses stays in the store until it ends
        (:class:`scarce.tasks.store.leases.Lease`)."""
        return leases.Lease(self.root, run_id)

    def live_leases(self) -> list[dict[str, Any]]:
        """The leases of runs that are still running (:func:`scarce.tasks.store.leases.live_leases`;
        stale ones are removed)."""
        return leases.live_leases(self.root)

    def gc(self, keep: Iterable[str], dry_run: bool = False) -> gc.GcReport:
        """Delete every entry not in ``keep`` and not used by a running run; only what
        scarce wrote (:func:`scarce.tasks.store.gc.collect`)."""
        return gc.collect(self.root, keep, dry_run)
