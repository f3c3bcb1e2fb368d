"""Seals: the sha256 of the files a step call wrote, so that a cache hit returns their bytes.

The checksum inside each entry (:mod:`scarce.tasks.store.encoding`) covers the data and metadata it
decodes to, not the Parquet statistics, page headers and magic bytes, which a flipped byte can
alter without changing what is read; the seal (``<store>/_prefect/<key>.sha256.json``) catches
those too, so that a cache hit always returns the bytes a run manifest recorded.  Volatile parts
(wall-clock tables) differ between two concurrent writers and are left out of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from scarce.tasks.store.encoding import CorruptEntry
from scarce.tasks.store.layout import SEAL_SUFFIX

if TYPE_CHECKING:  # a store is given; importing its module would import steps' callers'
    # pandas with it (:mod:`scarce.tasks.steps` imports this module)
    from scarce.tasks.store.folder import Store


def seal_path(store: Store, key: str) -> Path:
    """``<store>/_prefect/<key>.sha256.json``: the sha256 of the files a step wrote."""
    return store.prefect_dir / f"{key}{SEAL_SUFFIX}"


def seal_bytes(digests: dict[str, str]) -> bytes:
    """The seal's content: ref -> sha256 of its file."""
    return json.dumps(digests, sort_keys=True).encode()


def write_seal(store: Store, key: str, refs: Iterable[str]) -> None:
    """Record the sha256 of the files of ``refs`` (the call's parts, volatile ones aside) as
    the seal of the call ``key``."""
    digests = {ref: store.sha256(ref) for ref in refs}
    store.write_file(seal_path(store, key), seal_bytes(digests))


def _seal_mismatches(store: Store, key: str) -> tuple[set[str], dict[str, str]]:
    """The sealed refs, and ref -> reason for every sealed file whose bytes changed
    (no refs and no reasons without a seal)."""
    path = store.side_path(seal_path(store, key))
    if path.is_dir():
        return set(), {str(path): "a folder in place of the seal"}
    if not path.is_file():  # entries written before seals existed
        return set(), {}
    try:
        digests = json.loads(path.read_bytes())
        if not isinstance(digests, dict):
            raise ValueError("not a JSON object")
    except ValueError as exc:
        return set(), {str(path): f"unreadable seal ({exc})"}
    out = {}
    for ref, expected in digests.items():
        try:
            actual = store.sha256(ref)
        except OSError as exc:  # gone, or a folder in its place
            out[ref] = f"unreadable: {exc.strerror or exc}"
            continue
        if actual != expected:
            out[ref] = "file sha256 differs from the one recorded when it was written"
    return set(digests), out


def damaged_entries(store: Store, key: str, refs: Iterable[str]) -> dict[str, str]:
    """ref -> reason for every damaged file of the call ``key`` whose parts are ``refs``
    (empty when all are intact).

    A file whose sha256 equals its seal is intact without being read; every other part
    (volatile parts, entries written before seals, files that fail their seal) is read in full,
    so a damaged file is named with the reader's reason when it has one.
    """
    sealed, problems = _seal_mismatches(store, key)
    for ref in refs:
        if ref in sealed and ref not in problems:
            continue
        try:
            store.read_table(ref)
        except CorruptEntry as exc:
            problems[ref] = str(exc)
    return problems
