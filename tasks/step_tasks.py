"""A step as a Prefect task: its binding to a result store and its cache policy.

Kept apart from :mod:`scarce.tasks.steps` so that declaring a step, keying it and calling its plain
function import no Prefect: a model loaded into Python (:func:`scarce.load_model`) calls the
steps' functions of its flow, and importing Prefect costs more than the whole load and predict.
Only the flows' runtime binds steps (:meth:`scarce.flows.runtime.RunContext`).
"""

from __future__ import annotations

import logging
import shutil
from typing import Any

from prefect import Task
from prefect.cache_policies import CachePolicy
from prefect.serializers import JSONSerializer

from scarce.tasks.steps import Step, _make_runner, log_both
from scarce.tasks.store import Store


def bind(st: Step, store: Store, refresh: bool = False) -> Task:
    """The step ``st`` as a Prefect task writing to ``store`` (one task per step and store).

    ``refresh``: the task that ignores the cache and recomputes (``--refresh``), also made
    once: ``Task.with_options`` at every call built a new task each time (Prefect reads the
    function's source to build one), and its cache policy does not check the entries it is
    about to replace (:class:`StoreCachePolicy` with ``check=False``)."""
    bound = (str(store.root), refresh)
    if bound not in st._bound:
        st._bound[bound] = Task(
            fn=_make_runner(st, store),
            name=st.name,
            version=f"{st.version}+{st.code_hash[:12]}",
            cache_policy=StoreCachePolicy(step=st, store=store, check=not refresh),
            result_storage=store.prefect_dir,
            result_serializer=JSONSerializer(),
            persist_result=True,
            refresh_cache=refresh or None,
            task_run_name=st.run_name,
        )
    return st._bound[bound]


class StoreCachePolicy(CachePolicy):
    """Key a task by its step key; run it again when its entries are damaged.

    Prefect finds a cache record under the key and reports the task *Cached*.
    Before answering, the outputs are checked (exist, parse, checksum); when one
    fails the record is dropped so the task runs again and rewrites them.  ``check=False``
    (the task of ``--refresh``, which recomputes whatever the record says) skips the check:
    reading and hashing the entries it is about to replace cost every step of a refreshed
    run a read of its old outputs.
    """

    def __init__(self, step: Step, store: Store, check: bool = True) -> None:
        super().__init__()
        self.step = step
        self.store = store
        self.check = check

    def __deepcopy__(self, memo: dict[int, Any]) -> StoreCachePolicy:
        # Prefect copies policies in ``configure``; a Step holds its function and bound
        # tasks, and is immutable once declared: share it.
        new = StoreCachePolicy(self.step, self.store, self.check)
        new.key_storage, new.isolation_level, new.lock_manager = (
            self.key_storage,
            self.isolation_level,
            self.lock_manager,
        )
        return new

    def compute_key(
        self,
        task_ctx: Any,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        key = self.step.key(inputs)
        record = self.store.prefect_dir / key
        if record.is_dir() and not record.is_symlink():  # damage Prefect would fail on
            log_both(logging.WARNING, "cache record %s is a folder; recomputing", record)
            shutil.rmtree(record, ignore_errors=True)
        if not self.check or not record.exists():
            return key
        damaged = self.step.damaged(self.store, key)
        for ref, reason in damaged.items():  # every part, so each damage is named
            log_both(logging.WARNING, "store entry %s is damaged (%s); recomputing", ref, reason)
        if damaged:
            record.unlink(missing_ok=True)
        return key
