"""What a Dask cluster offers the row blocks: its workers, whether they can run, work stealing.

Asked of the scheduler itself (never the client's cached identity); the settings under which
the clusters this project starts run (no work stealing); the worker running this code and its
peak memory.
"""

from __future__ import annotations

import resource
import sys


def cluster_workers(client) -> dict[str, dict]:
    """The scheduler's workers now, address -> their info (``memory_limit``, ``name``, ...),
    asked of the scheduler itself.

    ``client.scheduler_info()`` returns the client's cached identity after refreshing it, and
    the client's periodic refresh (every few seconds, without per-worker information) can
    replace it in between: seen in distributed 2026.8 as a cluster with a live worker
    reported with none, which failed an H-step (``tests/flows/test_dask_cluster_kill_h.py``).
    """
    if getattr(client, "asynchronous", False):
        raise TypeError("cluster_workers needs a synchronous Dask client")
    if not hasattr(client, "sync"):  # InlineClient, or a stand-in client of the tests
        return dict(client.scheduler_info(n_workers=-1)["workers"])
    return dict(client.sync(client.scheduler.identity, n_workers=-1)["workers"])


def check_workers_can_run(client) -> None:
    """Refuse, in one line naming the options, a cluster none of whose workers would start a
    task: none at all, or every one paused or about to be (its process over
    :data:`~scarce.algorithms.memory.HEADROOM` of its memory limit, Dask's pause threshold).  A
    task sent there would wait for ever (a worker without a nanny is never restarted), so
    the data steps the flow sends to the cluster (:func:`scarce.tasks.leml.load` of a part, its
    partition, its mask) ask first."""
    from scarce.algorithms.memory import HEADROOM, MemoryBudgetError, format_bytes

    workers = cluster_workers(client)
    if not workers:
        raise ValueError(f"the Dask cluster at {client.scheduler.address} has no workers; "
                         "start some (`dask worker ADDRESS`) before the run")
    def full(info: dict) -> bool:  # paused, or about to be at its next memory check
        limit = int(info.get("memory_limit") or 0)
        used = int(info.get("metrics", {}).get("memory") or 0)
        return info.get("status") == "paused" or (limit > 0 and used > HEADROOM * limit)

    if not all(full(info) for info in workers.values()):
        return
    limits = sorted({int(info.get("memory_limit") or 0) for info in workers.values()})
    raise MemoryBudgetError(
        f"LEML on Dask: every worker of the cluster at {client.scheduler.address} is paused "
        f"or over {HEADROOM:.0%} of its memory limit "
        f"({', '.join(map(format_bytes, limits))}) already, so no task would start: raise "
        "their --memory-limit or add workers (compute.workers, or more `dask worker` "
        "processes)")


#: The Dask setting under which the clusters this project starts run (the W-step's own
#: LocalCluster, ``--runner dask``'s, the benchmark's): no work stealing.  A block's tasks are
#: placed on the worker holding the block with ``allow_other_workers=True``, so that they run
#: on another worker once that one is lost; Dask's work stealing takes such loose placement as
#: leave to move them to any idle worker (distributed's ``WorkStealing._get_thief`` falls back
#: to every worker when no allowed one is free), which then fetches the block and holds a
#: second copy, which raised each worker's peak at full scale.
#: Every block's work is the same size, so stealing has nothing to balance here.  A scheduler
#: started by hand takes it from the environment: :data:`NO_STEALING_ENV`.
NO_WORK_STEALING = {"distributed.scheduler.work-stealing": False}


NO_STEALING_ENV = "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING=False"


def tasks_off_their_worker(stream: list[dict], workers: list[str]) -> list:
    """The keys of the row-block tasks in a scheduler's task stream (``get_task_stream``)
    that ran on another worker than their block's (block ``b`` on ``sorted(workers)[b mod
    n]``, as :class:`RowBlockBackend` places them): a block task's key ends in ``-block<b>``, a
    block's own in ``-<b>of<n>``.  Such a task makes its worker fetch and hold a copy of the
    block (:data:`NO_WORK_STEALING`)."""
    import re

    workers = sorted(workers)
    off = []
    for record in stream:
        key = str(record["key"])
        found = re.search(r"-block(\d+)$|-(\d+)of\d+$", key)
        if found and key.startswith("leml-") and \
                record["worker"] != workers[int(found[1] or found[2]) % len(workers)]:
            off.append(record["key"])
    return off


def scheduler_steals(client) -> bool | None:
    """Whether the client's scheduler runs Dask's work stealing; None when it will not say
    (a scheduler that refuses to run a function, ``distributed.scheduler.pickle: false``);
    False for :class:`InlineClient` (one process, nothing to move)."""
    if not hasattr(client, "run_on_scheduler"):
        return False
    try:
        # A lambda: sent by value, so the scheduler need not import this project.
        return bool(client.run_on_scheduler(
            lambda dask_scheduler: "stealing" in dask_scheduler.extensions))
    except Exception:  # noqa: BLE001 - any refusal means only that we cannot tell
        return None


def _current_worker():
    """The Dask worker running this code; None elsewhere."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def this_worker() -> str | None:
    """The address of the Dask worker running this code (a step sent whole to a worker, as
    ``compute.solvers: worker`` sends the solvers' steps); None elsewhere."""
    worker = _current_worker()
    return None if worker is None else worker.address


def _peak_rss() -> int:
    """Peak resident set size of this process in bytes.

    ``VmHWM`` of ``/proc/self/status`` where it exists (Linux): ``ru_maxrss`` is kept
    across ``exec``, so a worker spawned by a large driver would report the driver's
    size.  Elsewhere ``ru_maxrss`` (KiB on Linux, bytes on macOS).
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024


def worker_peak_memory(client) -> dict[str, int]:
    """Peak resident set size (bytes) of each worker process since it started."""
    return client.run(_peak_rss)
