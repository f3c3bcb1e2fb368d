"""LEML's row blocks on Dask workers: the backend of the half-steps and its parts.

The W-step's gradient and Hessian-vector product, the squared loss's H-step sums and the
objective's loss term are sums over the rows of ``X`` (Yu et al., Sec. 3), so over row
blocks.  The backend (:class:`~scarce.tasks.leml_dask.backend.RowBlockBackend`) cuts the training
data
into a fixed number of contiguous row blocks, each held by one worker; the estimator's solver
runs on the driver and asks the backend for the terms, which the blocks compute where they
live and the driver adds in block order, so any number of workers gives the same bits.  How
it works, and its invariants: ``docs/design/leml-row-blocks.md``.

One job per module:

- :mod:`~scarce.tasks.leml_dask.partition`: the blocks described by their files, rebuilt on a
worker;
- :mod:`~scarce.tasks.leml_dask.backend`: the backend, its block tasks and the ordered sums;
- :mod:`~scarce.tasks.leml_dask.transport`: arrays sent to workers, aligned once, one copy a worker;
- :mod:`~scarce.tasks.leml_dask.memory`: the bytes of blocks and solvers, checked against workers;
- :mod:`~scarce.tasks.leml_dask.cluster`: a cluster's workers, work stealing, this worker;
- :mod:`~scarce.tasks.leml_dask.inline`: the same tasks in this process, without Dask;
- :mod:`~scarce.tasks.leml_dask.scoring`: the test set scored block by block;
- :mod:`~scarce.tasks.leml_dask.clients`: the clients a run opens and the blocks it keeps, closed
  at the run's end.
"""

from scarce.tasks.leml_dask.backend import N_BLOCKS, RowBlockBackend
from scarce.tasks.leml_dask.clients import CLIENTS, DaskClients
from scarce.tasks.leml_dask.cluster import (
    NO_STEALING_ENV,
    NO_WORK_STEALING,
    check_workers_can_run,
    cluster_workers,
    scheduler_steals,
    tasks_off_their_worker,
    this_worker,
    worker_peak_memory,
)
from scarce.tasks.leml_dask.inline import InlineClient
from scarce.tasks.leml_dask.memory import (
    check_worker_memory,
    data_nbytes,
    driver_nbytes,
    prepared_nbytes,
    working_nbytes,
)
from scarce.tasks.leml_dask.partition import PartitionedData
from scarce.tasks.leml_dask.scoring import evaluate_on_blocks, predict_on_blocks

__all__ = ["CLIENTS", "N_BLOCKS", "NO_STEALING_ENV", "NO_WORK_STEALING", "DaskClients",
           "RowBlockBackend", "InlineClient", "PartitionedData", "check_worker_memory",
           "check_workers_can_run", "cluster_workers", "data_nbytes", "driver_nbytes",
           "evaluate_on_blocks", "predict_on_blocks", "prepared_nbytes", "scheduler_steals",
           "tasks_off_their_worker", "this_worker", "worker_peak_memory", "working_nbytes"]
