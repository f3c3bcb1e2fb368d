"""Listing and garbage collection: what in a store's folder is scarce's, and removing what no
run keeps.

The root may be any folder, one that holds the user's files too: listing (:func:`scan`) takes as
the store's only what shows scarce wrote it (an entry's name and the ``scarce.*`` keys in its
Parquet footer; a record's or seal's name and JSON) and gc (:func:`collect`) never touches
anything else.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from scarce.tasks.store.atomic import is_temporary
from scarce.tasks.store.background import wait_for_writes
from scarce.tasks.store.encoding import ENTRY_KEYS, META_PREFIX
from scarce.tasks.store.layout import (
    ENTRY_NAME,
    KEY_HEX,
    LEASE_DIR,
    PREFECT_DIR,
    RECORD_NAME,
    SEAL_NAME,
    SUFFIX,
    entry_path,
)
from scarce.tasks.store.leases import (
    GC_LOCK,
    LEASE_REFS,
    LEASE_SUFFIX,
    gc_lock,
    is_lease,
    live_leases,
)


def scan(root: Path) -> Listing:
    """What the store's folder ``root`` holds (after the writes in flight): its entries, the
    temporary files of interrupted writes, and everything else (:class:`Foreign`).

    An entry is a regular file with an entry's name (:data:`~scarce.tasks.store.layout.ENTRY_NAME`)
    in a task folder whose Parquet footer holds the keys
    :func:`~scarce.tasks.store.encoding.encode` writes
    (:data:`~scarce.tasks.store.encoding.ENTRY_KEYS`); a
    Prefect record or seal is a regular file of ``_prefect`` with its name whose JSON reads as
    one of the step call its name gives (:func:`_is_record`, :func:`_is_seal`); a temporary is
    a regular file named as :func:`~scarce.tasks.store.atomic.atomic_open` names those of an entry
    or
    a seal.  Only footers and those small JSON files are read.

    Only the levels of the store's layout are looked at: the root's children, the files of
    each task folder, of ``_prefect`` and of ``_leases``.  Anything else at those levels
    (a file or folder of the user's, a symbolic link, a folder below a task folder) is
    foreign and named as one item, never descended into: a store root set to a data folder
    or a project costs a listing of its top two levels, not a walk of it.
    """
    wait_for_writes(root)
    entries: dict[str, dict[str, str]] = {}
    side_files: dict[str, list[Path]] = {}
    temporaries: list[Path] = []
    foreign: list[Foreign] = []
    if not root.is_dir():
        return Listing(entries, side_files, temporaries, foreign)
    for top in _children(root):
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
                elif is_temporary(f.name, SEAL_NAME):
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
                        and is_lease(Path(f.path), name[: -len(LEASE_SUFFIX)])) or (
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
                elif _kind(f) == "file" and is_temporary(f.name, ENTRY_NAME):
                    temporaries.append(Path(f.path))
                elif f.name.endswith(".tmp"):
                    foreign.append(_foreign(top.name, f, "not a temporary of scarce's"))
                else:
                    foreign.append(_foreign(top.name, f, "not an entry's name"))
    return Listing(dict(sorted(entries.items())), side_files, temporaries, foreign)


def collect(root: Path, keep: Iterable[str], dry_run: bool = False) -> GcReport:
    """Delete every entry of the store ``root`` not in ``keep`` and not used by a running run.

    Only what scarce wrote is ever deleted: entries as :func:`scan` finds them (an entry's
    name in a task folder, a regular file, and the ``scarce.*`` keys of
    :func:`~scarce.tasks.store.encoding.encode` in its Parquet footer), the Prefect records and
    seals
    of the removed steps that read as such (:func:`_is_record`, :func:`_is_seal`), and the
    temporaries of scarce's atomic writes.  Everything else is left alone and named in the
    report (``foreign``): a user's file, a symbolic link, a folder, and a damaged file, which
    scarce cannot show it wrote (a step whose entry is damaged writes it again when it runs).

    Kept besides ``keep``: every ref a live lease has noted, and every entry written
    since the oldest live lease began (a running step's new outputs, written on any worker
    before the run notes them).  Temporary files are removed only when no run is live.
    Prefect's cache records (and seals) of the removed steps go with them, so a removed
    step is recomputed, not reported as cached; the records of kept steps stay.
    """
    keep = set(keep)
    with gc_lock(root, shared=False):
        leases = live_leases(root)
        protected = set().union(*(lease["refs"] for lease in leases)) if leases else set()
        since = min((lease["started"] for lease in leases), default=None)
        listing = scan(root)
        removed, kept_live, freed = [], 0, 0
        for ref in listing.entries:
            if ref in keep:
                continue
            if ref in protected or (since is not None
                                    and _mtime(entry_path(root, ref)) >= since):
                kept_live += 1
                continue
            removed.append(ref)
            freed += _size(entry_path(root, ref))
        side_files = [path for key in sorted({ref.split("/", 1)[1][:KEY_HEX]
                                              for ref in removed})
                      for path in listing.side_files.get(key, [])]
        temporaries = [] if leases else listing.temporaries
        if not dry_run:
            for ref in removed:
                entry_path(root, ref).unlink(missing_ok=True)
            for path in [*side_files, *temporaries]:
                path.unlink(missing_ok=True)
    return GcReport(removed=removed, bytes=freed, kept_for_live_runs=kept_live,
                    live_runs=[lease["run_id"] for lease in leases],
                    temporaries=[str(p.relative_to(root)) for p in temporaries],
                    foreign=listing.foreign)


def _size(path: Path) -> int:
    """Bytes of the file (0 when it is gone)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


@dataclass(frozen=True)
class GcReport:
    """What :func:`collect` removed (or would remove, with ``dry_run``), and what it left
    alone as not scarce's (``foreign``)."""

    removed: list[str]
    bytes: int
    kept_for_live_runs: int
    live_runs: list[str]
    temporaries: list[str] = field(default_factory=list)
    foreign: list[Foreign] = field(default_factory=list)


@dataclass(frozen=True)
class Foreign:
    """A file or folder in a store that is not scarce's (:func:`scan`): its path
    relative to the root (a folder's ends in ``/``) and why it is not."""

    path: str
    why: str


@dataclass(frozen=True)
class Listing:
    """What :func:`scan` found: each entry's ref with the ``scarce.*`` metadata of its
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


def _entry_meta(path: Path) -> dict[str, str] | str | None:
    """The ``scarce.*`` metadata of the file ``path`` from its Parquet footer (keys without
    the prefix) when it has the keys every entry has
    (:data:`~scarce.tasks.store.encoding.ENTRY_KEYS`); else why it is not an entry; None when it is
    gone.  Only the footer is read."""
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
    names to such refs (what a step returns, :meth:`scarce.tasks.steps.Step.refs`)."""
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


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0

