"""Leases: what a running run uses stays in the store until the run ends.

``<root>/_leases/<run_id>.lease`` is held with a shared ``flock`` for the run's life (the lock
vanishes with the process, so a killed run leaves a stale lease that the next gc removes), and
``<run_id>.refs`` lists every ref the run has noted, one per line.  gc keeps those refs and every
entry written since the lease began (:func:`scarce.tasks.store.gc.collect`).  A lease rather than a
grace period by age: a run reuses cached entries of any age (a week-old X is the input of
today's W-step), and a lock tied to the process needs no clock and no timeout.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from scarce.tasks.store.atomic import writing
from scarce.tasks.store.layout import LEASE_DIR

LEASE_SUFFIX = ".lease"
LEASE_REFS = ".refs"
GC_LOCK = "gc.lock"
MTIME_MARGIN = 1.0  # seconds; see Lease


def lease_dir(root: Path) -> Path:
    """Where running runs keep their leases (``<root>/_leases``)."""
    return root / LEASE_DIR


class Lease:
    """A running run's claim on the store entries it uses (see the module's docstring)."""

    def __init__(self, root: Path, run_id: str) -> None:
        self.root = root
        self.run_id = run_id
        self.path = lease_dir(root) / f"{run_id}{LEASE_SUFFIX}"
        self.refs_path = lease_dir(root) / f"{run_id}{LEASE_REFS}"
        self._fd: int | None = None
        self._noted: set[str] = set()
        self._lock = threading.Lock()
        # gc keeps the entries modified since then; a margin of a second for file systems
        # whose timestamps lag the clock (coarse kernel clocks, a shared mount's server).
        info = {"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(),
                "started": time.time() - MTIME_MARGIN}
        with writing(root, f"the lease of run {run_id}"):
            lease_dir(root).mkdir(parents=True, exist_ok=True)
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
            with writing(self.root, f"the lease of run {self.run_id}"), \
                    open(self.refs_path, "a", encoding="utf-8") as fh:
                fh.write("".join(f"{r}\n" for r in new))
            self._noted.update(new)

    @contextmanager
    def hold(self, refs: Iterable[str]) -> Iterator[None]:
        """Note ``refs`` and keep any gc from deleting while the caller checks them."""
        with gc_lock(self.root, shared=True):
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


@contextmanager
def gc_lock(root: Path, shared: bool) -> Iterator[None]:
    """Shared: a run noting a cache hit it is about to use; exclusive: gc deciding and
    deleting.  Either the hit is noted before gc reads the leases, or gc is done."""
    with writing(root, f"{LEASE_DIR}/{GC_LOCK}"):
        lease_dir(root).mkdir(parents=True, exist_ok=True)
        # the mode the umask gives, as every file scarce writes
        fd = os.open(lease_dir(root) / GC_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def live_leases(root: Path) -> list[dict[str, Any]]:
    """The leases of runs that are still running; stale ones (their process is gone) are
    removed.  Each: ``run_id``, ``started`` (epoch seconds), ``host``, ``pid`` and the ``refs``
    it noted."""
    out = []
    folder = lease_dir(root)
    if not folder.is_dir():
        return out
    for lock in sorted(folder.glob(f"*{LEASE_SUFFIX}")):
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
                refs_file = folder / f"{run_id}{LEASE_REFS}"
                refs = refs_file.read_text().split() if refs_file.is_file() else []
                out.append({"run_id": run_id, "started": info.get("started", 0.0),
                            "host": info.get("host"), "pid": info.get("pid"),
                            "refs": set(refs)})
            else:  # nobody holds it: the run ended without releasing it (killed)
                if is_lease(lock, run_id):  # else not scarce's: left alone
                    (folder / f"{run_id}{LEASE_REFS}").unlink(missing_ok=True)
                    lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
    return out


def _read_lease(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_lease(path: Path, run_id: str) -> bool:
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
