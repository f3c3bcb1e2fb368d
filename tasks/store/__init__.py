"""The Parquet result store: every step output that is data, as one real Parquet file.

:class:`Store` (:mod:`scarce.tasks.store.folder`) is the object a step or a command holds; each job
it relies on has its own module:

- :mod:`scarce.tasks.store.layout`: where entries, records, seals and leases live in the folder;
- :mod:`scarce.tasks.store.encoding`: a value as a Parquet file and back, with its checksum;
- :mod:`scarce.tasks.store.atomic`: files written whole or not at all;
- :mod:`scarce.tasks.store.background`: a step's entries written while the next step computes;
- :mod:`scarce.tasks.store.seals`: the sha256 of the files a step wrote, checked at a cache hit;
- :mod:`scarce.tasks.store.leases`: what a running run uses, kept from gc;
- :mod:`scarce.tasks.store.gc`: what in the folder is scarce's, and removing what no run keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (read by the step keys' code digest, which follows import statements)
    from scarce.tasks.store.folder import Store

__all__ = ["Store"]


def __getattr__(name: str):
    # :class:`Store` is imported from its module when first used, so that a module of the
    # package (``atomic``, ``encoding``) is imported without the folder's machinery and its
    # pandas: a model loaded into Python reads its entries with those two alone.
    if name != "Store":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from scarce.tasks.store.folder import Store

    globals()["Store"] = Store
    return Store
