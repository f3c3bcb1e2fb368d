"""Atomic file writes: a reader sees a file's old bytes or its new ones, never half of them;
and the sha256 by which a written file is recorded (seals, run manifests).

A write goes to a temporary file in the same folder, is ``fsync``-ed, then renamed over the
target with ``os.replace``; the folder is then ``fsync``-ed, so that the rename (and a folder
the write created) lasts through a crash of the machine.  A group of writes that belong
together (a step's entries, a run folder's files) passes one :class:`FolderSyncs` to each and
fsyncs each folder they touched once, when the group ends (:func:`synced_folders`), before
anything that names the group as complete (a step's seal, the run folder's final name) is
written.  Every file has the mode the umask gives.  A write the system
refuses (a full disk, a read-only or foreign folder) raises :class:`StoreWriteError` from
inside :func:`writing`, naming the store and the system's reason, and leaves no temporary file.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from scarce.tasks.errors import InputError

#: A temporary file of :func:`atomic_open` for the file ``<name>``: ``.<name>.<8 characters>.tmp``
#: (8 hex digits, or the 8 letters, digits or ``_`` of ``tempfile.mkstemp``'s names: the
#: temporaries an interrupted write of an earlier version left are scarce's too).
TEMP_NAME = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp")
#: How an error names the store: the option that chose it.
STORE_KEY = "store (or $SCARCE_STORE)"


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


class FolderSyncs:
    """The folders a group of writes changed (a file renamed into one, a folder created in
    one), each to be ``fsync``-ed once when the group ends rather than once per write.

    A folder's fsync makes every name changed in it last, whichever write changed it: a
    step's three entries in one task folder need one, not three.  What declares the group
    complete is written only after :meth:`sync` (:func:`synced_folders` does it at the end of
    its block), so it never lasts through a crash without the files it names.
    """

    def __init__(self) -> None:
        self._folders: dict[Path, None] = {}  # ordered, each once

    def add(self, folder: str | os.PathLike[str]) -> None:
        """Owe ``folder`` an fsync: a name in it changed."""
        self._folders[Path(folder)] = None

    def sync(self) -> None:
        """fsync every folder owed one, each once; the group's names then last."""
        while self._folders:
            folder = next(iter(self._folders))
            fsync_folder(folder)
            del self._folders[folder]


@contextmanager
def synced_folders() -> Iterator[FolderSyncs]:
    """A :class:`FolderSyncs` for the writes of the block, whose folders are fsync-ed once
    when it ends (also when it raises: what was renamed stays as a single write leaves it)."""
    syncs = FolderSyncs()
    try:
        yield syncs
    finally:
        syncs.sync()


def make_folder(folder: Path, syncs: FolderSyncs | None = None) -> None:
    """Create ``folder`` and its missing parents (as ``mkdir(parents=True, exist_ok=True)``);
    the parent of each folder created is fsync-ed (at once, or owed to ``syncs``), so that
    the new folder lasts through a crash as the files renamed into it do."""
    created = []
    missing = Path(folder)
    while not os.path.lexists(missing) and missing.parent != missing:
        created.append(missing)
        missing = missing.parent
    Path(folder).mkdir(parents=True, exist_ok=True)
    for new in reversed(created):
        _owe(new.parent, syncs)


def _owe(folder: Path, syncs: FolderSyncs | None) -> None:
    """fsync ``folder`` now, or owe it to the group ``syncs``."""
    if syncs is None:
        fsync_folder(folder)
    else:
        syncs.add(folder)


@contextmanager
def atomic_open(path: Path, syncs: FolderSyncs | None = None) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path``; on success fsync and rename it to ``path``,
    then fsync its folder (at once, or once for the group ``syncs``, see
    :class:`FolderSyncs`).

    Readers never see a half-written file: they see the old entry or the new one.  The file
    has the mode the umask gives (``0o666 & ~umask``, see :func:`_new_temp`).
    """
    make_folder(path.parent, syncs)
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
    _owe(path.parent, syncs)


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


def is_temporary(name: str, of: re.Pattern[str]) -> bool:
    """True when ``name`` is a temporary of :func:`atomic_open` for a file named as ``of``."""
    match = TEMP_NAME.fullmatch(name)
    return match is not None and of.fullmatch(match["name"]) is not None


def try_create_in(folder: Path) -> None:
    """Create and remove a temporary file in ``folder``, as an atomic write would: the system's
    refusal (a read-only file system, a folder not ours, a full table of inodes) raises its
    ``OSError`` here, before any work whose result would go there."""
    fd, tmp = _new_temp(Path(folder) / ".scarce-probe")
    os.close(fd)
    tmp.unlink()


def atomic_write_parquet(path: Path, table: pa.Table, syncs: FolderSyncs | None = None) -> None:
    """Write ``table`` to ``path`` atomically (:func:`atomic_open`), with Parquet page
    checksums and the options of its kind
    (:func:`scarce.tasks.store.encoding.parquet_options`)."""
    # Imported here: the encoding imports pandas and scipy, which the byte writes (manifests,
    # seals) of a light command need not load.
    from scarce.tasks.store.encoding import parquet_options

    with atomic_open(path, syncs) as fh:
        pq.write_table(table, fh, **parquet_options(table))


def atomic_write_bytes(path: Path, data: bytes, syncs: FolderSyncs | None = None) -> None:
    """Write ``data`` to ``path`` atomically (:func:`atomic_open`: manifests, JSON side
    files)."""
    with atomic_open(path, syncs) as fh:
        fh.write(data)


def fsync_folder(folder: Path) -> None:
    """fsync ``folder``, so that the names changed in it last; a file system that cannot
    (or a folder gone meanwhile) is left as it is: the files themselves were fsync-ed."""
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
    """sha256 of a file's bytes: what a seal or a run manifest records of a file written."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
