"""Where things live in a store's folder: the names of its entries, records, seals and leases.

::

    <root>/<task>/<key>.parquet              an entry: a step's single output
    <root>/<task>/<key>-<part>.parquet       an entry: one named part of a step's outputs
    <root>/_prefect/<key>                    Prefect's cache record of the step call <key>
    <root>/_prefect/<key>.sha256.json        the call's seal (the sha256 of its files)
    <root>/_leases/<run_id>.lease, .refs     a running run's lease and the refs it uses

``<key>`` is a hash of the step's name, its code, its parameters and the keys of its inputs
(:meth:`scarce.tasks.steps.Step.key`), so no path derives from a user string.  A *ref* is an entry's
path relative to the root without the suffix (``"leml-load/3fa9c0e1d2b4a5f6a7b8c9d0-X"``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SUFFIX = ".parquet"
PREFECT_DIR = "_prefect"
LEASE_DIR = "_leases"
SEAL_SUFFIX = ".sha256.json"  # <key>.sha256.json beside Prefect's record <key>
KEY_HEX = 32  # a key is the first 32 hex digits of a sha256 (tasks.steps.KEY_LENGTH)
#: The file name of an entry: ``<key>.parquet`` or ``<key>-<part>.parquet``.
ENTRY_NAME = re.compile(rf"(?P<key>[0-9a-f]{{{KEY_HEX}}})(?:-[A-Za-z0-9_][A-Za-z0-9_.-]*)?"
                        rf"{re.escape(SUFFIX)}")
#: Prefect's record of a step (``<key>``) and the step's seal (``<key>.sha256.json``).
RECORD_NAME = re.compile(rf"[0-9a-f]{{{KEY_HEX}}}")
SEAL_NAME = re.compile(rf"[0-9a-f]{{{KEY_HEX}}}{re.escape(SEAL_SUFFIX)}")


def entry_path(root: Path, ref: str) -> Path:
    """The file of the entry ``ref`` (``task/key`` or ``task/key-part``) below ``root``;
    anything else (a path that would leave a task folder) is refused."""
    task, _, name = ref.partition("/")
    if not task or not name or "/" in name or ".." in ref or ref.startswith("/"):
        raise ValueError(f"not a store ref: {ref!r}")
    return root / task / f"{name}{SUFFIX}"


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
