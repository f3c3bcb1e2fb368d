"""Atomic file writes: a reader sees a file's old bytes or its new ones, never half of them;
and the sha256 by which a written file is recorded (seals, run manifests).

A write goes to a temporary file in the same folder, is ``fsync``-ed, then renamed over the
target with ``os.replace``.  Every file has the mode the umask gives.  A write the system
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


def atomic_write_parquet(path: Path, table: pa.Table) -> None:
    """Write ``table`` to ``path`` atomically, with Parquet page checksums and the options
    of its kind (:func:`scarce.tasks.store.encoding.parquet_options`)."""
    # Imported here: the encoding imports pandas and scipy, which the byte writes (manifests,
    # seals) of a light command need not load.
    from scarce.tasks.store.encoding import parquet_options

    with atomic_open(path) as fh:
        pq.write_table(table, fh, **parquet_options(table))


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
    """sha256 of a file's bytes: what a seal or a run manifest records of a file written."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
