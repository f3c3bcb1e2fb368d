"""The Dask clients a LEML run opens and the row blocks it keeps: one object, closed at run end.

:data:`CLIENTS` (a :class:`DaskClients`) gives the steps their client: inside a task running
on a Dask worker, that worker's cluster; in the flow's process under a Dask task runner, the
runner's own client; else a client this object opens (a scheduler's address, or a
LocalCluster of single-threaded workers) and keeps until :meth:`DaskClients.close`, which the
LEML flow calls when its run ends (and, as a safety, this process at exit).  Between the
outer iterations of a fit it keeps the row blocks of the last W-step on the workers, so the
next half-step on the same data finds them there.
"""

from __future__ import annotations

import atexit
import logging
from contextlib import contextmanager

from scarce.tasks.errors import InputError
from scarce.tasks.leml_dask.backend import RowBlockBackend
from scarce.tasks.leml_dask.cluster import (
    NO_STEALING_ENV,
    NO_WORK_STEALING,
    scheduler_steals,
    this_worker,
)
from scarce.tasks.leml_dask.inline import InlineClient
from scarce.tasks.steps import log_both

#: The environment of a worker of the LocalCluster this process starts: one BLAS / OpenMP
#: thread (two in one process were many times slower than one on small machines).
ONE_THREAD = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}


def same_scheduler(a: str, b: str) -> bool:
    """Whether two scheduler addresses are the same (``host:port`` means ``tcp://host:port``)."""
    def norm(address: str) -> str:
        return (address if "://" in address else f"tcp://{address}").rstrip("/")

    return norm(a) == norm(b)


def in_dask_worker() -> bool:
    """Whether this code runs inside a Dask worker."""
    return this_worker() is not None


def runner_client():
    """The Dask client of the flow run's task runner (``--runner dask`` or ``--dask-address``:
    a ``prefect_dask.DaskTaskRunner``, connected on first use), or None under any other
    runner or outside a flow run."""
    try:
        from prefect.context import FlowRunContext
        from prefect_dask import DaskTaskRunner
    except ImportError:
        return None
    runner = getattr(FlowRunContext.get(), "task_runner", None)
    return runner.client if isinstance(runner, DaskTaskRunner) else None


class DaskClients:
    """The clients this process opened for the row-block steps, and the blocks kept on the
    workers between half-steps; :meth:`close` releases both."""

    def __init__(self) -> None:
        # (workers, address) -> (LocalCluster or None, client)
        self._own: dict[tuple, tuple] = {}
        # Futures of the row blocks of the latest W-step, held after it ends: the next
        # W-step on the same training data (the next outer iteration) asks for the same block
        # keys and finds the blocks on the workers.  Released when a W-step on other data
        # takes their place, and when the test set is scored on the workers (the fit is
        # over), so that the workers do not hold the training data beside the test blocks.
        self._kept: list = []
        # Schedulers already asked whether they steal work: asked, and warned about, once a run.
        self._asked_stealing: set[str] = set()
        self._at_exit = False

    def release_kept(self) -> None:
        """Release the row blocks kept after the last W-step (here and on the workers)."""
        InlineClient.release_kept()
        while self._kept:
            future = self._kept.pop()
            try:
                future.release()
            except Exception:  # noqa: BLE001 - its client is closed: nothing is held any more
                pass

    def close(self) -> None:
        """Release the kept blocks and close every client (and LocalCluster) this object
        opened; the next step that needs one opens it again, and a scheduler that steals
        work is named again in the next run's log."""
        self.release_kept()
        self._asked_stealing.clear()
        while self._own:
            _, (cluster, client) = self._own.popitem()
            client.close()
            if cluster is not None:
                cluster.close()

    def own(self, workers: int, address: str | None):
        """A Dask client opened here: to the scheduler at ``address``, or else to a
        ``LocalCluster`` of ``workers`` single-threaded worker processes (one BLAS thread
        each, no work stealing); opened on first use and kept until :meth:`close`."""
        key = (workers, address)
        if key not in self._own:
            from distributed import Client, LocalCluster

            if address:
                try:
                    self._own[key] = (None, Client(address, timeout="30s"))
                except OSError as exc:
                    raise InputError(f"no Dask scheduler at {address} ({exc})",
                                     key="compute.address") from None
            else:
                import dask

                with dask.config.set(NO_WORK_STEALING):  # read when the scheduler starts
                    cluster = LocalCluster(n_workers=workers, threads_per_worker=1,
                                           processes=True, dashboard_address=None,
                                           env=ONE_THREAD)
                client = Client(cluster)
                client.wait_for_workers(workers)
                self._own[key] = (cluster, client)
            if not self._at_exit:
                atexit.register(self.close)
                self._at_exit = True
        return self._own[key][1]

    @property
    def opened(self) -> int:
        """How many clients this object holds open."""
        return len(self._own)

    @contextmanager
    def client(self, cluster: dict | None):
        """The Dask client of a row-block step, from the step's ``cluster`` argument
        (``{"address", "workers", "solvers", "in_process"}``, all optional): the scheduler
        at ``address`` or, without one, the cluster the flow run already uses; a
        LocalCluster of ``workers`` (default 2) only when it uses none.

        Inside a task running on a Dask worker: that worker's cluster through
        ``worker_client`` (the task leaves its worker's thread pool while it waits).  In the
        flow's process under a Dask task runner: the runner's own client (one connection to
        one cluster for the whole run).  Else a client of this object's own (:meth:`own`).
        ``in_process``: no Dask, :class:`~scarce.tasks.leml_dask.inline.InlineClient` (the same
        tasks, run in this process; ``compute.backend: local-blocks``).
        """
        cluster = cluster or {}
        address, workers = cluster.get("address"), cluster.get("workers", 2)
        if cluster.get("in_process"):
            yield InlineClient()
            return
        if in_dask_worker():
            from distributed import get_worker, worker_client

            if address is None or same_scheduler(address, get_worker().scheduler.address):
                with worker_client() as client:
                    yield client
                return
        runner = runner_client()
        if runner is not None and (address is None
                                   or same_scheduler(address, runner.scheduler.address)):
            yield runner
            return
        yield self.own(workers, address)

    def keep_blocks(self, client, backend) -> None:
        """Hold the blocks of ``backend`` after its W-step (see the class notes)."""
        if not backend.recoverable:
            return
        self.release_kept()  # the same keys stay held by backend's own futures meanwhile
        if isinstance(client, InlineClient):
            client.keep(backend.block_futures)
            return
        from distributed import Future

        self._kept.extend(Future(f.key, client) for f in backend.block_futures)

    @contextmanager
    def backend(self, data, row_blocks: int | None, cluster: dict | None,
                rank: int | None = None):
        """Where a step's sums over the training rows run: None (this process, the whole
        data) when ``row_blocks`` is None, else a
        :class:`~scarce.tasks.leml_dask.backend.RowBlockBackend` over that many row blocks of
        ``data``.
        ``data`` is a :class:`~scarce.tasks.leml_dask.partition.PartitionedData` (the flow: the
        files of the row blocks, from which each worker builds its own blocks, recomputed if
        a worker is lost) or a prepared :class:`~scarce.algorithms.leml.data.LEMLData` (its blocks
        scattered from this process).  ``cluster`` says where (:meth:`client`).  ``rank``:
        the factors' rank, for the memory guard of the working arrays."""
        if row_blocks is None:
            yield None
            return
        with self.client(cluster) as client, \
                RowBlockBackend(client, data, row_blocks, rank=rank) as backend:
            self.warn_if_stealing(client, backend)
            self.keep_blocks(client, backend)
            yield backend

    def warn_if_stealing(self, client, backend) -> None:
        """Warn, once per scheduler, that the cluster runs Dask's work stealing when the
        blocks are spread over more than one worker: it may move a block's tasks to a worker
        that does not hold the block, which then holds a copy too (see
        :data:`~scarce.tasks.leml_dask.cluster.NO_WORK_STEALING`).  The clusters this project starts
        run without it."""
        address = getattr(getattr(client, "scheduler", None), "address", None)
        if (address is None or address in self._asked_stealing
                or len(set(backend.block_workers)) < 2):
            return
        self._asked_stealing.add(address)
        if not scheduler_steals(client):
            return
        log_both(logging.WARNING, "the Dask scheduler at %s runs work stealing, which may "
                 "move a row block's tasks to a worker that does not hold the block (that "
                 "worker then holds a copy too); start it with %s dask scheduler", address,
                 NO_STEALING_ENV)


#: The clients and kept blocks of this process's runs.
CLIENTS = DaskClients()
