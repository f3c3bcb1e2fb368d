"""LEML's W-step on a Dask cluster, with the row blocks of ``X`` kept on the workers.

The W-step's gradient and Hessian-vector product are sums over the rows of ``X``
(Yu et al., Sec. 3), so over row blocks (:func:`algorithms.leml.data.split_rows`).
:class:`DaskWStep` cuts the prepared data into a fixed number of contiguous row
blocks (``blocks``, default :data:`N_BLOCKS`, independent of the number of
workers), one Dask future per block, placed round robin over the workers.  It is a
*backend* of the estimator's W-step, ``LEML.w_step(data, W, H, backend=DaskWStep(...))``:
the estimator's solver (:func:`algorithms.leml.w_step.solve_w_step`, the same CG / TRON
iterations) runs on the driver and asks :meth:`DaskWStep.operators` for the loss terms,
which the blocks compute where they live.  Each operator application sends its ``d' x k``
argument once and submits one task per block, placed on the worker that holds the
block; the workers return ``d' x k`` terms and the driver adds them in block order.  So:

* the blocks cross the network once; per CG iteration only the direction goes out and one
  ``d' x k`` term per block comes back;
* the reduction order is fixed (block 0 + block 1 + ... on the driver), and each
  block's term is computed by the same code on the same rows, so 1 and 2 (or any
  number of) workers give bit-identical ``W`` (with one BLAS thread in every task,
  which :class:`DaskWStep` sets with threadpoolctl unless ``pin_blas=False``);
* against the single-process W-step (no backend) only the
  summation order differs, so the products agree to rounding and ``W`` agrees as
  far as CG lets rounding through: run to convergence (``cg_tol=1e-10``) the
  relative difference ``max|dW| / max|W|`` is below 1e-10 in float64 (tested; 1e-4
  in float32 at ``cg_tol=1e-5``).  Stopped early (the flow's 10 iterations at
  ``cg_tol=1e-3``), CG's iterate amplifies a one-ulp change of its products by
  orders of magnitude; ``scarce bench leml --sections distributed`` prints that
  sensitivity of the single-process solver next to the Dask difference.

Where the blocks come from decides what a lost worker costs:

* :class:`PartitionedData` (the flow): the training data was written as row blocks, each
  block its own store entries (``leml-partition``: its rows of X, Y and the mask, files of a
  folder every worker sees); each block is a Dask *task* that reads only its own block's
  files and prepares them as the estimator prepares the whole (the whole's label layout
  imposed, :func:`~algorithms.leml.data.prepare_rows`), so a worker never reads the rest of
  the data; the arrays each operator sends are tasks too.  Dask can recompute any of
  them, so a worker that dies costs the recomputation of its blocks on the others, not the
  W-step, and ``W`` is the same bit for bit.  The block keys depend only on the files and
  the number of blocks, so a later W-step on the same data (the next outer iteration)
  finds its blocks already on the workers while some client still holds them
  (:attr:`DaskWStep.block_futures`).
* :class:`~algorithms.leml.data.LEMLData` in memory (benchmarks, tests): the blocks and
  arrays are scattered from the driver; Dask cannot recompute scattered data, so a lost
  worker fails the W-step.

The same blocks serve the squared loss's H-step, ``LEML.h_step(data, W, H, backend=...)``
(:func:`algorithms.leml.h_step.update_H_by_blocks`): :meth:`DaskWStep.each` runs one task per
block where the block lives (``A_b = X_b W``, kept there, then ``A_b^T A_b``, ``Y_b^T A_b``
and, label block by label block, the per-label Gram matrices of the observed entries) and
:meth:`DaskWStep.sum` adds the gathered terms on the driver in block order; the driver
holds ``k x k``, ``L x k`` and one label block of Gram matrices, and solves.  The objective's
loss term is summed over the blocks the same way (``LEML.objective(..., backend=...)``,
:func:`algorithms.leml.objective.objective_by_blocks`), for every loss.

Every loss is supported by the W-step: the squared loss fully observed (the paper's fast case)
or with a missing-label mask (sparse or dense entries), and the logistic and
squared-hinge losses (TRON; the decision values on each block stay on its worker
between the function value and the gradient).

Dask moves the blocks and the per-step objects with its own serialisation; nothing
here writes them anywhere.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import uuid
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scarce.algorithms.leml.data import (
    LEMLData,
    labels_layout,
    layout_of_counts,
    prepare_rows,
    row_block_bounds,
    split_rows,
)
from scarce.algorithms.leml.h_step import sum_in_order
from scarce.algorithms.leml.losses import get_loss
from scarce.algorithms.leml.w_step import WStepProducts, w_loss_value
from scarce.algorithms.metrics.multilabel import multilabel_sums, scores_from_sums

__all__ = ["DaskWStep", "InlineClient", "N_BLOCKS", "PartitionedData", "check_worker_memory",
           "check_workers_can_run", "driver_nbytes", "this_worker",
           "cluster_workers", "data_nbytes", "evaluate_on_blocks", "predict_on_blocks",
           "prepared_nbytes", "worker_peak_memory", "working_nbytes"]

#: Default number of row blocks: fixed, so the reduction order (and so ``W``, bit for
#: bit) does not depend on the number of workers.  Each block costs one task per
#: operator application (about 10 ms of Dask overhead each on a loaded 2-core
#: machine), so few blocks: 4 keep 1, 2 or 4 workers evenly busy.
N_BLOCKS = 4


@dataclass(frozen=True)
class PartitionedData:
    """Prepared training data, described by the files of its row blocks.

    The durable source of :class:`DaskWStep`'s row blocks: block ``b`` is rebuilt from its
    own files only (``blocks[b]``: its rows of ``X``, ``Y`` and the mask, written by the
    flow's ``leml-partition`` step), so a worker reads one block's share of the data, and the
    blocks survive the loss of the worker holding them.

    Parameters
    ----------
    blocks : tuple of dict
        Per row block, in row order: ``{"X", "Y", "mask"}``, store-format Parquet files
        (:mod:`tasks.store`) of its rows of the features, the labels and the observed-entries
        mask (None when every label is observed), on a file system every worker sees at the
        same path.
    fit_intercept : bool
        As the estimator's (a constant feature appended).
    dtype : str
        The working dtype, ``"float32"`` or ``"float64"``.
    layout : tuple of (str, str or None)
        ``(labels, index_dtype)`` of :func:`~algorithms.leml.data.labels_layout` of the whole
        prepared data, imposed on every block.
    n_samples, n_features, n_labels : int
        The whole prepared data's shape (``n_features`` counts the constant feature): each
        block is checked against it when it is built.
    rows : tuple of int
        The rows of each block (``row_block_bounds(n_samples, len(blocks))`` for the flow's
        own partition; any sizes for the parts of a partitioned input).
    """

    blocks: tuple
    fit_intercept: bool
    dtype: str
    layout: tuple
    n_samples: int
    n_features: int
    n_labels: int
    rows: tuple

    @classmethod
    def of(cls, data: LEMLData, blocks) -> PartitionedData:
        """The row-block files ``blocks`` (a list of ``{"X", "Y", "mask"}``) of the data that
        ``data`` is the preparation of, with its preparation parameters, layout and shape."""
        blocks = tuple({"X": str(b["X"]), "Y": str(b["Y"]),
                        "mask": None if b.get("mask") is None else str(b["mask"])}
                       for b in blocks)
        n = len(row_block_bounds(data.n_samples, len(blocks)))
        if not blocks or n != len(blocks):
            raise ValueError(f"{len(blocks)} row blocks for {data.n_samples} rows; expected "
                             f"between 1 and {data.n_samples}")
        layout = labels_layout(data)
        rows = tuple(stop - start for start, stop in row_block_bounds(data.n_samples, n))
        return cls(blocks=blocks, fit_intercept=data.fit_intercept,
                   dtype=np.dtype(data.dtype).name,
                   layout=(layout["labels"], layout["index_dtype"]),
                   n_samples=data.n_samples, n_features=data.n_features,
                   n_labels=data.n_labels, rows=rows)

    @classmethod
    def from_files(cls, blocks, *, fit_intercept: bool, dtype) -> PartitionedData:
        """The training data held in the row-block files ``blocks`` (a list of ``{"X", "Y",
        "mask"}``, the mask absent or None when every label is observed), described from
        the files' footers only: no block is read.

        The shape is the blocks' shapes added up, and the label layout the one
        :func:`~algorithms.leml.data.prepare_data` would give the whole
        (:func:`~algorithms.leml.data.layout_of_counts`, from the number of entries the
        masks store, which ``leml-mask`` writes as ones only).  Equal to
        :meth:`of` the prepared whole, without the whole ever in one process.  The blocks
        may have any numbers of rows (the parts of a partitioned input); a block whose shape
        does not fit the others is named in a ``ValueError``.
        """
        blocks = tuple({"X": str(b["X"]), "Y": str(b["Y"]),
                        "mask": None if b.get("mask") is None else str(b["mask"])}
                       for b in blocks)
        if not blocks:
            raise ValueError("no row blocks: the partition is empty")
        rows, n_features, n_labels, observed = [], None, None, 0
        for b, files in enumerate(blocks):
            x_shape = _footer(files["X"])[0]
            y_shape = _footer(files["Y"])[0]
            if x_shape[0] != y_shape[0]:
                raise ValueError(f"{files['Y']}: {y_shape[0]} rows, but X of row block {b} "
                                 f"({files['X']}) has {x_shape[0]}")
            if (blocks[0]["mask"] is None) != (files["mask"] is None):
                raise ValueError(f"row block {b}: a mask in some blocks and not in others")
            if n_features is None:
                n_features, n_labels = x_shape[1], y_shape[1]
            elif (x_shape[1], y_shape[1]) != (n_features, n_labels):
                raise ValueError(f"{files['X']}: row block {b} has {x_shape[1]} features and "
                                 f"{y_shape[1]} labels, block 0 {n_features} and {n_labels}")
            if files["mask"] is not None:
                m_shape, m_entries = _footer(files["mask"])
                if tuple(m_shape) != tuple(y_shape):
                    raise ValueError(f"{files['mask']}: mask of shape {m_shape}, Y of row "
                                     f"block {b} {y_shape}")
                observed += m_entries
            rows.append(x_shape[0])
        n = sum(rows)
        if n == 0:
            raise ValueError(f"{blocks[0]['X']}: the row blocks hold no rows")
        layout = layout_of_counts(n, n_labels, None if blocks[0]["mask"] is None else observed)
        return cls(blocks=blocks, fit_intercept=bool(fit_intercept),
                   dtype=np.dtype(dtype).name, layout=(layout["labels"], layout["index_dtype"]),
                   n_samples=n, n_features=n_features + int(bool(fit_intercept)),
                   n_labels=n_labels, rows=tuple(rows))

    @property
    def fully_observed(self) -> bool:
        """True when every label entry is observed (as :class:`LEMLData`'s)."""
        return self.layout[0] == "full"

    @property
    def bounds(self) -> list[tuple[int, int]]:
        """Row range of each block."""
        stops = np.cumsum(self.rows).tolist()
        return list(zip([0, *stops[:-1]], stops, strict=True))

    def block_nbytes(self) -> list[int]:
        """The bytes each row block takes once a worker has prepared it (:meth:`block`),
        estimated from the footers of its files (the number of stored entries), without
        reading the data: :func:`prepared_nbytes`."""
        def entries(path):
            return 0 if path is None else _footer(path)[1]

        return [prepared_nbytes(stop - start, self.n_features, self.n_labels,
                                nnz_x=entries(files["X"]), nnz_y=entries(files["Y"]),
                                nnz_mask=entries(files["mask"]), labels=self.layout[0],
                                index_dtype=self.layout[1], dtype=self.dtype,
                                fit_intercept=self.fit_intercept)
                for files, (start, stop) in zip(self.blocks, self.bounds, strict=True)]

    def block(self, b: int) -> LEMLData:
        """Row block ``b``, read from its own files only and prepared as
        :func:`~algorithms.leml.data.split_rows` cuts the prepared whole."""
        from scarce.tasks.store import read_parquet_entry

        files = self.blocks[b]
        X, Y = read_parquet_entry(files["X"]), read_parquet_entry(files["Y"])
        mask = None if files["mask"] is None else read_parquet_entry(files["mask"])
        labels, index_dtype = self.layout
        data = prepare_rows(X, Y, mask, fit_intercept=self.fit_intercept, dtype=self.dtype,
                            layout={"labels": labels, "index_dtype": index_dtype})
        start, stop = self.bounds[b]
        got = (data.n_samples, data.n_features, data.n_labels)
        if got != (stop - start, self.n_features, self.n_labels):
            raise ValueError(f"{files['X']}: row block {b} of shape {got}, expected "
                             f"{(stop - start, self.n_features, self.n_labels)} (the files "
                             "changed since the W-step started)")
        return data

    def token(self) -> str:
        """A digest of the files (path, size, modification time) and the parameters: the
        name of the blocks on the cluster, new when a file is rewritten."""
        stats = []
        for files in self.blocks:
            for name in ("X", "Y", "mask"):
                path = files[name]
                if path is not None:
                    st = os.stat(path)
                    stats.append([name, path, st.st_size, st.st_mtime_ns])
        text = json.dumps([stats, self.fit_intercept, self.dtype, list(self.layout)],
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


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
    :data:`~algorithms.memory.HEADROOM` of its memory limit, Dask's pause threshold).  A
    task sent there would wait for ever (a worker without a nanny is never restarted), so
    the data steps the flow sends to the cluster (:func:`tasks.leml.load` of a part, its
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
        "their --memory-limit or add workers (w_step.workers, or more `dask worker` "
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
    n]``, as :class:`DaskWStep` places them): a block task's key ends in ``-block<b>``, a
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


def _footer(path: str) -> tuple[tuple[int, int], int]:
    """The shape of the matrix in a store-format Parquet file and the entries it stores (the
    rows of a sparse entry, every element of a dense one), from the file's footer only."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    info = meta.metadata or {}
    if b"scarce.shape" not in info:
        raise ValueError(f"{path}: not a matrix in the store's Parquet format (no scarce.shape "
                         "in its metadata)")
    shape = tuple(json.loads(info[b"scarce.shape"]))
    if len(shape) != 2:
        raise ValueError(f"{path}: a matrix of shape {list(shape)}, expected 2 dimensions")
    kind = info.get(b"scarce.kind", b"").decode()
    return shape, meta.num_rows if kind == "sparse" else int(np.prod(shape))


class _InlineFuture:
    """The value of a task :class:`InlineClient` ran (a future already done)."""

    def __init__(self, key, value) -> None:
        self.key, self.value = key, value

    def result(self):
        return self.value

    def release(self) -> None:
        self.value = None


class InlineClient:
    """A stand-in for a Dask client that runs each task in this process when it is
    submitted: :class:`DaskWStep`, :func:`evaluate_on_blocks` and :func:`predict_on_blocks`
    on the same row blocks, by the same code, without Dask (the flow's ``w_step.runner:
    blocks``).  One "worker", no memory limit.  The tasks are the ones a cluster runs, added
    in the same block order, so the results are the same bits as on any number of Dask
    workers (tested)."""

    asynchronous = False

    #: Values this process keeps by task key: the row blocks of the last W-step
    #: (:meth:`keep`), as Dask workers keep them between the half-steps.
    _kept: dict = {}

    class _Scheduler:
        address = "inline"

    def __init__(self) -> None:
        self.scheduler = self._Scheduler()

    def scheduler_info(self, n_workers: int = -1) -> dict:
        return {"workers": {"inline": {"name": "inline", "memory_limit": 0}}}

    def submit(self, fn, *args, key=None, **_placement):
        if key is not None and key in InlineClient._kept:
            return _InlineFuture(key, InlineClient._kept[key])
        args = [a.value if isinstance(a, _InlineFuture) else a for a in args]
        return _InlineFuture(key, fn(*args))

    @staticmethod
    def keep(futures) -> None:
        """Keep the values of ``futures`` (a W-step's row blocks, named after their files) in
        place of those kept before: the next half-step on the same data asks for the same
        keys and is given them without reading its files again."""
        InlineClient._kept = {f.key: f.value for f in futures}

    @staticmethod
    def release_kept() -> None:
        InlineClient._kept = {}

    def scatter(self, data, **_placement):
        return _InlineFuture(None, data)

    def gather(self, futures):
        return [f.value for f in futures]


# --------------------------------------------------------------------------- worker side
#: Byte alignment of the arrays the block tasks compute with (see :func:`_aligned`).
ALIGNMENT = 64


def _aligned(array: np.ndarray) -> np.ndarray:
    """``array`` at an address that is a multiple of :data:`ALIGNMENT` (a copy if it is not).

    An array that arrives through Dask lies wherever its message put it, often not even at a
    multiple of its item size (offsets 13, 26 and 30 mod 64 were seen for one float32 array
    sent three ways), and numpy's and BLAS's kernels take other paths, in another summation
    order, at other alignments: the same ``d' x k`` direction scattered to a worker or sent
    inside a task gave ``W`` differing by 2e-6 after one W-step.  At one fixed alignment the
    products are the same bits however the array travelled.
    """
    if array.ctypes.data % ALIGNMENT == 0 and array.flags.c_contiguous:
        return array
    return _fresh_aligned(array)


def _fresh_aligned(array: np.ndarray) -> np.ndarray:
    """A new C-contiguous copy of ``array`` at :data:`ALIGNMENT`, never ``array`` itself."""
    raw = np.empty(array.nbytes + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def _align(value, depth: int = 0):
    """``value`` with every array it holds at :data:`ALIGNMENT` (:func:`_aligned`): an array,
    a sparse matrix, a tuple, or an object of :mod:`algorithms.leml` (a row block and its
    observed entries, a block's products) whose array attributes are replaced in place, so
    that a block fetched from another worker is aligned once for all the tasks that use it."""
    if isinstance(value, np.ndarray):
        return _aligned(value)
    if depth > 3 or value is None:
        return value
    if isinstance(value, tuple):
        return tuple(_align(v, depth + 1) for v in value)
    if sp.issparse(value):
        for name in ("data", "indices", "indptr", "row", "col"):
            part = getattr(value, name, None)
            if isinstance(part, np.ndarray):
                setattr(value, name, _aligned(part))
        return value
    if type(value).__module__.startswith("scarce.algorithms.leml.") and hasattr(value, "__dict__"):
        for name, part in vars(value).items():
            if isinstance(part, np.ndarray) or sp.issparse(part) or (
                    type(part).__module__.startswith("scarce.algorithms.leml.")):
                setattr(value, name, _align(part, depth + 1))
    return value


class _Aligned:
    """An array for the block tasks that reaches every worker aligned: pickled as the array,
    unpickled into an aligned copy (:func:`_aligned`).

    A worker that fetches ``W``, ``H`` or a CG direction from another keeps one object for
    all its tasks; unpickled this way it is aligned once, where before every block task made
    its own aligned copy and held it as long as its result (four copies of ``W`` and ``H`` at
    the peak of a one-process run at full scale).  :meth:`DaskWStep._put` wraps
    a new copy (:func:`_fresh_aligned`), never the driver's own array, which its solver may
    change in place afterwards (a cluster of threads shares objects without pickling).
    """

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self):
        return _unpickled_aligned, (self.array,)


def _unpickled_aligned(array: np.ndarray) -> _Aligned:
    return _Aligned(_aligned(array))


def _sizeof_aligned(value: _Aligned) -> int:
    return int(value.array.nbytes)


try:  # Dask's memory accounting of what a worker holds
    from dask.sizeof import sizeof as _dask_sizeof

    _dask_sizeof.register(_Aligned)(_sizeof_aligned)
except ImportError:
    pass


def _wrap_aligned(array: np.ndarray) -> _Aligned:
    """``array`` as :class:`_Aligned`: a new aligned copy where this task runs."""
    return _Aligned(_fresh_aligned(array))


class _Handed:
    """An array sent inside a task, so that the scheduler can send the task again after a
    lost worker, and handed over once by the worker that runs it (:func:`_take_aligned`).

    A worker keeps the arguments of every task it ran as long as the task's result: an array
    sent as ``submit(f, array)`` stayed in the worker's memory twice, as the received
    message and as the task's aligned copy (``W``, a CG direction and ``H``: a large share of
    a worker's peak in a memory profile at full scale).  Held in this box, the worker's copy
    of the argument is dropped once the task has made its own.
    """

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __reduce__(self):
        return _Handed, (self.array,)


def _shares_objects_with_scheduler() -> bool:
    """True outside a worker, or in a worker whose scheduler passes it objects without
    pickling them (an ``inproc://`` cluster of threads): the task's arguments are then the
    scheduler's own."""
    worker = _current_worker()
    return worker is None or str(worker.scheduler.address).startswith("inproc://")


def _take_aligned(box: _Handed) -> _Aligned:
    """The array in ``box`` as :class:`_Aligned` (a new aligned copy), and ``box`` emptied
    when this worker's copy of it is its own (see :class:`_Handed`)."""
    array = box.array
    if array is None:
        raise RuntimeError("the array of this task was handed over already; a task holding "
                           "one is run once per worker")
    aligned = _wrap_aligned(array)
    if not _shares_objects_with_scheduler():
        box.array = None
    return aligned


@contextmanager
def _arrays_in_graph(*arrays: np.ndarray):
    """Submit tasks that carry ``arrays`` without Dask's warning about a large graph: they go
    inside the task on purpose, so that the task can be computed again after a lost worker."""
    import dask

    size = sum(int(a.nbytes) for a in arrays) + (10 << 20)
    with dask.config.set({"distributed.admin.large-graph-warning-threshold": size}):
        yield


def _send_array(client, array: np.ndarray, key: str):
    """A future of ``array`` as :class:`_Aligned` on a worker, from a task that carries it
    (:class:`_Handed`): recomputable after a lost worker, held once by the worker."""
    with _arrays_in_graph(array):
        return client.submit(_take_aligned, _Handed(array), key=key, pure=False)


def _call(fn, pin_blas: bool, *args):
    """``fn(*args)`` on a worker: every array it reads at one fixed alignment (:func:`_align`;
    :class:`_Aligned` arguments are aligned already), and with one BLAS / OpenMP thread when
    ``pin_blas``, so that the arithmetic is the same bits on every worker whatever its
    environment and however the data reached it (a worker that joins later, a block
    recomputed after a lost worker or moved by Dask's work stealing)."""
    from threadpoolctl import threadpool_limits

    args = [a.array if isinstance(a, _Aligned) else _align(a) for a in args]
    with threadpool_limits(1) if pin_blas else nullcontext():
        return fn(*args)


def prepared_nbytes(n_rows: int, n_features: int, n_labels: int, *, nnz_x: int, nnz_y: int,
                    nnz_mask: int, labels: str, index_dtype: str | None, dtype,
                    fit_intercept: bool) -> int:
    """Bytes of a prepared row block (:func:`~algorithms.leml.data.prepare_rows`) from its
    shape and stored entries.

    ``n_features`` counts the constant feature of an intercept and ``nnz_x`` the stored
    entries of ``X`` without it.  ``X`` and its transpose are each CSR (values and int32
    column indices per entry, a row pointer); fully observed labels a CSR ``Y``; observed
    entries kept sparse (``labels="sparse"``) hold per entry the column, the row, the value,
    the transposed order (int64) and the transposed row index; dense ones an ``n x L``
    array of values and one of the mask.
    """
    item, idx = np.dtype(dtype).itemsize, 4
    nnz_x += n_rows if fit_intercept else 0
    size = 2 * nnz_x * (item + idx) + (n_rows + n_features + 2) * idx
    if labels == "full":
        size += nnz_y * (item + idx) + (n_rows + 1) * idx
    elif labels == "dense":
        size += 2 * n_rows * n_labels * item
    else:
        i = np.dtype(index_dtype or "int32").itemsize
        size += nnz_mask * (3 * i + item + 8) + (n_rows + n_labels + 2) * i
    return int(size)


def data_nbytes(data: LEMLData) -> int:
    """The bytes of every array a prepared :class:`LEMLData` holds (its X, X transposed, Y
    and observed entries)."""
    def arrays(value):
        if value is None:
            return
        if sp.issparse(value):
            yield from (value.data, value.indices, value.indptr)
        elif isinstance(value, np.ndarray):
            yield value
        else:
            for v in vars(value).values():
                if isinstance(v, np.ndarray):
                    yield v

    return int(sum(a.nbytes for part in (data.X, data.Xt, data.Y, data.entries)
                   for a in arrays(part)))


def working_nbytes(block_rows: list[int], *, n_features: int, n_labels: int, rank: int,
                   dtype, fully_observed: bool) -> int:
    """Bytes of the rank-``k`` working arrays a worker holding row blocks of ``block_rows``
    rows needs on top of the blocks' data, an upper estimate: per block ``A_b = X_b W`` and
    a product of its shape (``2 n_b x k``), the ``d' x k`` term and the ``L x k`` label
    product it returns, plus the factors and one more of each; with missing labels, one
    label block of the H-step's per-label Gram matrices (upper triangles, float64) per
    block and one for their sum."""
    from scarce.algorithms.leml.data import BLOCK

    item, k, held = np.dtype(dtype).itemsize, int(rank), len(block_rows)
    size = sum(2 * n * k * item for n in block_rows)
    size += (held + 2) * (n_features + n_labels) * k * item
    if not fully_observed:
        labels = min(n_labels, max(1, BLOCK // (k * k)))
        size += (held + 1) * labels * (k * (k + 1) // 2) * 8
    return int(size)


#: Arrays of ``d' x k`` (in the factors' dtype) that the process driving a W-step holds at
#: once, an upper count: the start and the gradient, CG's solution, residual, direction and
#: product, the Hessian product's sum and the term being added to it, the step and the new
#: ``W``, and for the margin losses TRON's trial point and its gradient; and arrays of
#: ``L x k`` (float64): ``H``, the H-step's right-hand side and its sums.  The traced peak of
#: a start, a W-step, an H-step and the objective driven from a test process was 10.9
#: (squared) and 14.2 (logistic) arrays of ``d' x k`` at 20,001 x 16
#: (``tests/tasks/test_leml_dask.py``).
DRIVER_W_ARRAYS, DRIVER_H_ARRAYS = 16, 4


def driver_nbytes(*, n_features: int, n_labels: int, rank: int, dtype) -> int:
    """Bytes of the solver's arrays in the process that drives a step (the flow's, or with
    ``w_step.driver: worker`` a worker's), an upper estimate: :data:`DRIVER_W_ARRAYS` of
    ``d' x k`` and :data:`DRIVER_H_ARRAYS` of ``L x k``."""
    k = int(rank)
    return int(DRIVER_W_ARRAYS * n_features * k * np.dtype(dtype).itemsize
               + DRIVER_H_ARRAYS * n_labels * k * 8)


def _current_worker():
    """The Dask worker running this code; None elsewhere."""
    try:
        from distributed import get_worker

        return get_worker()
    except (ImportError, ValueError):
        return None


def this_worker() -> str | None:
    """The address of the Dask worker running this code (a step sent whole to a worker, as
    ``w_step.driver: worker`` sends the solvers' steps); None elsewhere."""
    worker = _current_worker()
    return None if worker is None else worker.address


def check_worker_memory(client, block_workers: list[str], sizes: list[int], *,
                        blocks: int, working=None, driver: str | None = None,
                        driver_bytes: int = 0) -> None:
    """Refuse, before anything is sent, row blocks that would not fit their workers.

    Each worker holds the blocks placed on it (``block_workers``, sizes in ``sizes``) and,
    when ``working`` is given (a function of the indices of a worker's blocks, such as
    :func:`working_nbytes` of their rows), the step's rank-``k`` working arrays; when that
    exceeds :data:`~algorithms.memory.HEADROOM` of the worker's memory limit (the
    ``--memory-limit`` of ``dask worker``, the ``memory_limit`` of a LocalCluster; none set:
    no check), :class:`~algorithms.memory.MemoryBudgetError` says in one line which option
    to change.  The worker ``driver`` (the one this step runs on, :func:`this_worker`) holds
    ``driver_bytes`` more: the solver's arrays (:func:`driver_nbytes`).
    """
    from scarce.algorithms.memory import HEADROOM, MemoryBudgetError, format_bytes

    limits = {addr: info.get("memory_limit") or 0
              for addr, info in cluster_workers(client).items()}
    held: dict[str, list[int]] = {}
    for b, worker in enumerate(block_workers):
        held.setdefault(worker, []).append(b)
    if driver in limits:
        held.setdefault(driver, [])
    for worker, mine in held.items():
        limit = limits.get(worker, 0)
        data = sum(sizes[b] for b in mine)
        extra = 0 if working is None or not mine else int(working(mine))
        solver = driver_bytes if worker == driver else 0
        if limit and data + extra + solver > HEADROOM * limit:
            arrays = f", {format_bytes(extra)} of working arrays" if extra else ""
            arrays += (f", {format_bytes(solver)} of the solver's arrays (it drives the step:"
                       " w_step.driver worker)" if solver else "")
            raise MemoryBudgetError(
                f"LEML on Dask: worker {worker} would hold {len(mine)} row block(s) of the "
                f"training data, {format_bytes(data)}{arrays}, over {HEADROOM:.0%} of its "
                f"memory limit {format_bytes(limit)}: add workers (w_step.workers, or more "
                f"`dask worker` processes) or raise their --memory-limit; w_step.blocks "
                f"({blocks} over {len(limits)} workers now) spreads the blocks more evenly"
                + ("; a lower model.rank shrinks the working arrays" if extra or solver
                   else "")
                + ("; w_step.driver flow keeps the solver's arrays in the flow's process"
                   if solver else ""))


def _partition_block(source: PartitionedData, b: int) -> LEMLData:
    """Row block ``b`` of ``source``, from its own files (:meth:`PartitionedData.block`)."""
    return source.block(b)


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


def _block_value(block: LEMLData, H, W, loss):
    return w_loss_value(block, H, W, loss)


def _reduce_then(fn, n_parts: int, *parts_and_args):
    """``fn(parts[0] + ... + parts[n-1], *args)``: the sum in block order, then ``fn``."""
    parts, args = parts_and_args[:n_parts], parts_and_args[n_parts:]
    return fn(_sum_in_order(parts), *args)


def _first(pair):
    return pair[0]


def _block_products(block: LEMLData, H, W, loss, value, gram_left):
    z = None if value is None else value[1]
    return WStepProducts(block, H, W, loss, z=z, gram_left=gram_left)


def _gradient(products: WStepProducts):
    return products.gradient()


def _for_hess_vec(products: WStepProducts):
    return products.for_hess_vec()


def _hess_vec(products: WStepProducts, V):
    return products.hess_vec(V)


_sum_in_order = sum_in_order  # parts[0] + parts[1] + ... left to right

#: Terms of a block sum at most this large are gathered at once; larger ones one at a time.
GATHER_AT_ONCE_BYTES = 16 << 20


def _fetched_sum(client, futures, *, release: bool = False) -> np.ndarray:
    """The per-block terms of ``futures`` added in block order, as :func:`sum_in_order` adds
    them (the same bits).  Terms of a ``d' x k`` product at full scale (366,932 x 50 float32:
    73 MB) are fetched one at a time, so this process holds the sum and one term, not one
    term per block; small ones in one round trip.

    ``release``: release each future once its term is added (the caller gives up
    ``futures``), so that a worker frees a block's term while it computes the next block's
    instead of holding all its blocks' terms until the sum is done."""
    first = futures[0]
    total = np.array(first.result(), copy=True)
    rest = futures[1:]
    if total.nbytes <= GATHER_AT_ONCE_BYTES:
        for part in client.gather(rest):
            total += part
        if release:
            for future in futures:
                future.release()
        return total
    if release:
        first.release()
    for future in rest:
        total += future.result()
        if release:
            future.release()
    return total


# --------------------------------------------------------------------------- driver side
class _BlockProducts:
    """The loss terms summed over the blocks: futures of the blocks' gradient terms, and of
    their :class:`WStepProducts` for the Hessian only (:meth:`WStepProducts.for_hess_vec`)."""

    def __init__(self, owner: DaskWStep, gradients, futures):
        self.owner, self.gradients, self.futures = owner, gradients, futures

    def gradient(self):
        gradients, self.gradients = self.gradients, None
        if gradients is None:
            raise RuntimeError("the gradient of these products was already taken")
        return _fetched_sum(self.owner.client, gradients, release=True)

    def hess_vec(self, V):
        Vf = self.owner._put(V)
        return self.owner._reduce(_hess_vec, self.futures, Vf)


class _DaskWOperators:
    """``value`` / ``products`` of :func:`~algorithms.leml.w_step.solve_w_step`, one task per
    row block."""

    def __init__(self, owner: DaskWStep, H, loss):
        self.owner, self.loss = owner, loss
        # The squared loss, fully observed (CG: one products() per W-step) needs H on the
        # workers only for the gradient: it is sent with each products() and not kept, so
        # the workers free it once the gradient is taken.  TRON's losses send it once.
        self.fast = WStepProducts.squared_fully_observed(loss, owner.fully_observed)
        self._H = H
        self.H = None if self.fast else owner._put(H)

    def value(self, W):
        o = self.owner
        Wf = o._put(W)
        pairs = o._map(_block_value, o.block_futures, self.H, Wf, self.loss)  # (f, z) stays there
        f = 0.0
        for value in o.client.gather(o._map(_first, pairs)):
            f += value
        return f, pairs

    def products(self, W, state=None):
        """The products at ``W``: each block's gradient term is computed at once (the solver
        takes it first), and only the blocks' products for the Hessian are kept, so a
        worker's copies of ``W`` (and, squared loss fully observed, of ``H``) are freed for
        the CG iterations."""
        o = self.owner
        Wf = o._put(W)
        Hf = o._put(self._H) if self.fast else self.H
        values = state if state is not None else [None] * len(o.block_futures)
        full = [o._submit(i, _block_products, block, Hf, Wf, self.loss, value, o.gram_left)
                for i, (block, value) in enumerate(zip(o.block_futures, values, strict=True))]
        return _BlockProducts(o, o._map(_gradient, full), o._map(_for_hess_vec, full))


class DaskWStep:
    """A backend of LEML's W-step (and of the squared loss's H-step): row blocks of the
    training data held by Dask workers.

    Pass it to ``LEML.w_step(data, W, H, backend=...)`` for every W-step of a fit, and to
    ``LEML.h_step(data, W, H, backend=...)`` for the squared loss's H-step.

    Parameters
    ----------
    client : distributed.Client
        A client of a running cluster with at least one worker.
    data : PartitionedData or LEMLData
        The training data, in ``blocks`` contiguous row blocks, block ``b`` placed on
        worker ``b mod n_workers`` of the sorted worker addresses.  :class:`PartitionedData`:
        each block is a task that reads that block's files only (recomputed elsewhere if its
        worker is lost), named by the files, so that a later ``DaskWStep`` on the same files
        reuses the blocks while :attr:`block_futures` of this one (or copies) are held.
        :class:`~algorithms.leml.data.LEMLData` (from ``LEML.prepare``): the blocks are
        scattered from here, once (lost with their worker); the driver keeps only the
        shapes, ``data`` may be dropped afterwards.
    blocks : int, default=N_BLOCKS
        Number of row blocks (clipped to the number of rows).  It fixes the
        reduction order, so results do not depend on the number of workers.  A
        :class:`PartitionedData` must have this many blocks.
    workers : list of str, optional
        Addresses of the workers to hold the blocks (default: all workers of the
        cluster); the results do not depend on this choice.
    pin_blas : bool, default=True
        Run every task with one BLAS and OpenMP thread (threadpoolctl): needed for
        bit-identical results across clusters, and the fast setting on 2-core machines (two
        BLAS threads in one process were measured 3 to 100 times slower than one).
    rank : int, optional
        The rank ``k`` of the factors: the memory guard then counts the step's working
        arrays (:func:`working_nbytes`) with the blocks; None: the blocks' data only.

    Attributes
    ----------
    workers : list of str
        The workers the blocks were placed on (sorted addresses).
    block_futures : list of distributed.Future
        The row blocks, in row order.
    block_workers : list of str
        The worker each block is placed on; its tasks run there while it lives.
    bounds : list of (int, int)
        Row range of each block.
    recoverable : bool
        True for :class:`PartitionedData`: every future can be recomputed after a worker
        loss.
    fully_observed : bool
        Whether every label is observed (the H-step's sums depend on it).
    """

    def __init__(self, client, data: PartitionedData | LEMLData, blocks: int = N_BLOCKS, *,
                 workers=None, pin_blas: bool = True, rank: int | None = None):
        known = sorted(cluster_workers(client))
        if not known:
            raise ValueError("the Dask cluster has no workers; start some before DaskWStep")
        if workers is not None:
            unknown = sorted(set(workers) - set(known))
            if unknown or not workers:
                raise ValueError(f"workers {unknown or workers} are not among the cluster's "
                                 f"workers {known}")
        workers = sorted(workers) if workers is not None else known
        self.client, self.pin_blas, self.workers = client, pin_blas, workers
        self.recoverable = isinstance(data, PartitionedData)
        self.n_features, self.n_labels = data.n_features, data.n_labels
        self.n_samples, self.dtype = data.n_samples, np.dtype(data.dtype)
        self.fully_observed = data.fully_observed
        self.bounds = data.bounds if self.recoverable else row_block_bounds(data.n_samples,
                                                                            blocks)
        if self.recoverable and len(data.blocks) != blocks:
            raise ValueError(f"the partition has {len(data.blocks)} row blocks but blocks="
                             f"{blocks}")
        # Squared loss, fully observed: associate 2 H^T H as the whole-set product does.
        self.gram_left = data.n_features <= data.n_samples
        self.block_workers = [workers[b % len(workers)] for b in range(len(self.bounds))]
        split = None if self.recoverable else split_rows(data, blocks)
        sizes = data.block_nbytes() if split is None else [data_nbytes(b) for b in split]
        rows = [stop - start for start, stop in self.bounds]
        working = None if rank is None else (lambda mine: working_nbytes(
            [rows[b] for b in mine], n_features=self.n_features, n_labels=self.n_labels,
            rank=rank, dtype=self.dtype, fully_observed=self.fully_observed))
        driver = this_worker()
        solver = 0 if rank is None or driver is None else driver_nbytes(
            n_features=self.n_features, n_labels=self.n_labels, rank=rank, dtype=self.dtype)
        check_worker_memory(client, self.block_workers, sizes, blocks=len(self.bounds),
                            working=working, driver=driver, driver_bytes=solver)
        self._tag = uuid.uuid4().hex[:8]
        self._count = 0
        n = len(self.bounds)
        if self.recoverable:
            token = data.token()
            self.block_futures = [
                client.submit(_call, _partition_block, pin_blas, data, b,
                              key=f"leml-w-block-{token}-{b}of{n}", workers=[worker],
                              allow_other_workers=True, pure=False)
                for b, worker in enumerate(self.block_workers)]
        else:
            self.block_futures = [
                client.scatter(block, workers=[worker], hash=False)
                for block, worker in zip(split, self.block_workers, strict=True)]

    # -- task plumbing
    def _key(self, name: str, i: int | None = None, stage: str = "w") -> str:
        """A task key ``leml-<stage>-<name>-...``: ``leml-w`` for the W-step's tasks,
        ``leml-h`` for the block sums of the H-step and the objective (:meth:`each`; Dask's
        key prefixes, as its dashboard groups them)."""
        self._count += 1
        block = "" if i is None else f"-block{i}"
        return f"leml-{stage}-{name}-{self._tag}-{self._count}{block}"

    def _submit(self, i, fn, *args, stage: str = "w"):
        return self.client.submit(_call, fn, self.pin_blas, *args,
                                  key=self._key(fn.__name__.strip("_"), i, stage),
                                  workers=[self.block_workers[i]], allow_other_workers=True,
                                  pure=False)

    def _map(self, fn, per_block, *shared, stage: str = "w"):
        return [self._submit(i, fn, item, *shared, stage=stage)
                for i, item in enumerate(per_block)]

    def _put(self, array, stage: str = "w"):
        """One small array (``d' x k`` or ``L x k``) for the block tasks: a task holding it
        (recomputable) for :class:`PartitionedData`, else one scattered copy on every
        worker."""
        if self.recoverable:
            return _send_array(self.client, array, self._key("array", None, stage))
        return self.client.scatter(_wrap_aligned(array), broadcast=True, hash=False)

    def _reduce(self, fn, per_block, *shared):
        return _fetched_sum(self.client, self._map(fn, per_block, *shared), release=True)

    # -- the backend of LEML.h_step (squared loss: algorithms.leml.h_step.update_H_by_blocks)
    #    and LEML.objective (algorithms.leml.objective.objective_by_blocks)
    def each(self, fn, *shared, per_block=None):
        """One task ``fn(block_b, per_block[b], *shared)`` per row block, on the worker holding
        the block (``per_block``: futures of an earlier :meth:`each`, left out when None;
        ``shared`` arrays go out once): the futures of the per-block terms, in block order."""
        shared = [self._put(a, "h") if isinstance(a, np.ndarray) else a for a in shared]
        if per_block is None:
            return self._map(fn, self.block_futures, *shared, stage="h")
        return [self._submit(i, fn, block, item, *shared, stage="h")
                for i, (block, item) in enumerate(zip(self.block_futures, per_block,
                                                      strict=True))]

    def sum(self, parts) -> np.ndarray:
        """The per-block terms gathered here and added in block order: the same bits for any
        number of workers (:func:`_fetched_sum`)."""
        return _fetched_sum(self.client, parts)

    @property
    def in_flight(self) -> int:
        """Label blocks of the H-step built at once: one per worker holding blocks."""
        return len(set(self.block_workers))

    def reduce(self, fn, parts, *args):
        """A future of ``fn(sum of parts, *args)``, added in block order and computed on a
        worker (the H-step's label blocks: their Gram matrices never reach this process).
        ``args`` go with the task (small: a label block's rows of ``L x k``), so the task can
        be recomputed after a lost worker."""
        return self.client.submit(_call, _reduce_then, self.pin_blas, fn, len(parts), *parts,
                                  *args, key=self._key(fn.__name__.strip("_"), None, "h"),
                                  pure=False)

    def fetch(self, handle) -> np.ndarray:
        """The value of a :meth:`reduce` future (released once here)."""
        try:
            return handle.result()
        finally:
            handle.release()

    # -- the backend of LEML.w_step
    def operators(self, H, loss):
        """The W-step's loss terms at ``H``, summed over the blocks (``H`` goes out once);
        the operators of :func:`~algorithms.leml.w_step.solve_w_step`."""
        return _DaskWOperators(self, H, get_loss(loss))

    def close(self) -> None:
        """Release this object's block futures (the workers free the blocks that no other
        future holds)."""
        for future in self.block_futures:
            future.release()
        self.block_futures = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------- evaluation
def block_metric_sums(files: dict, W, H, params: dict, batch_size: int,
                      ks=(1, 3, 5)) -> list[dict]:
    """The :func:`~algorithms.metrics.multilabel.multilabel_sums` of one row block of the
    test set, batch by batch: the block read from its own files (``{"X", "Y"}``, written by
    the flow's ``leml-partition`` step) and scored by the factors ``W``, ``H`` as
    ``LEML(**params).set_factors(W, H)`` predicts."""
    from scarce.algorithms.leml import LEML
    from scarce.tasks.store import read_parquet_entry

    X = sp.csr_matrix(read_parquet_entry(files["X"]))
    Y = sp.csr_matrix(read_parquet_entry(files["Y"]))
    from scarce.algorithms.memory import rows_per_batch

    model = LEML(**params).set_factors(W, H)
    batch_size = rows_per_batch(batch_size, Y.shape[1])
    return [multilabel_sums(Y[s:s + batch_size], model.decision_function(X[s:s + batch_size]),
                            threshold=model.threshold_, ks=ks)
            for s in range(0, X.shape[0], batch_size)]


def _on_blocks(client, fn, files: list[dict], W, H, *args, name: str, workers=None) -> list:
    """``fn(files[b], W, H, *args)`` for every row block ``b``, each where it is read: on the
    workers of ``client`` (block ``b`` on worker ``b mod n_workers``; ``workers``: those of the
    cluster's workers to use, all by default), or in this process when ``client`` is None.
    Only the factors go out (once), and the results come back in block order."""
    if client is None:
        return [fn(f, W, H, *args) for f in files]
    workers = sorted(workers or cluster_workers(client))
    if not workers:
        raise ValueError("the Dask cluster has no workers; start some before the evaluation")
    tag = uuid.uuid4().hex[:8]
    factors = [_send_array(client, a, f"leml-e-{n}-{tag}") for n, a in (("W", W), ("H", H))]
    futures = [client.submit(_call, fn, True, f, *factors, *args,
                             key=f"leml-e-{name}-{tag}-block{b}",
                             workers=[workers[b % len(workers)]], allow_other_workers=True,
                             pure=False)
               for b, f in enumerate(files)]
    try:
        return client.gather(futures)
    finally:
        for future in [*futures, *factors]:
            future.release()


def evaluate_on_blocks(client, files: list[dict], W, H, params: dict, batch_size: int,
                       ks=(1, 3, 5), workers=None) -> dict[str, float]:
    """Test metrics from the row blocks ``files`` of the test set, each scored where it is
    read (:func:`_on_blocks`: on the workers of ``client``, or in this process when
    ``client`` is None).  Only the factors go out and only per-batch counts come
    back; they are added in block and batch order, so the metrics are the same bits on any
    number of workers, and precision@k and the Hamming loss equal the one-process metrics
    to the last bit (integer counts; the AUC to rounding)."""
    blocks = _on_blocks(client, block_metric_sums, files, W, H, params, batch_size, tuple(ks),
                        name="block_metric_sums", workers=workers)
    return scores_from_sums([p for block in blocks for p in block], ks)


def block_predictions(files: dict, W, H, params: dict, top_k: int,
                      batch_size: int) -> tuple[int, pd.DataFrame]:
    """The rows of one row block of the test set, read from its own files, and their
    predictions table (:func:`~algorithms.leml.predict.predictions_table`; its ``row``
    counts from the block's first row)."""
    from scarce.algorithms.leml import LEML
    from scarce.algorithms.leml.predict import predictions_table
    from scarce.tasks.store import read_parquet_entry

    model = LEML(**params).set_factors(W, H)
    X = sp.csr_matrix(read_parquet_entry(files["X"]))
    return X.shape[0], predictions_table(model, X, top_k, batch_size)


def predict_on_blocks(client, files: list[dict], W, H, params: dict, top_k: int,
                      batch_size: int, workers=None) -> pd.DataFrame:
    """The test set's predictions table from its row blocks ``files``, each block predicted
    where it is read (:func:`_on_blocks`) and the tables put end to end in block order, rows
    numbered from the first block's first row: the table the whole test set gives, with only
    the factors going out and only the top labels coming back."""
    tables = _on_blocks(client, block_predictions, files, W, H, params, top_k, batch_size,
                        name="block_predictions", workers=workers)
    offset, parts = 0, []
    for n_rows, table in tables:
        parts.append(table.assign(row=table["row"] + offset))
        offset += n_rows
    return pd.concat(parts, ignore_index=True)


def worker_peak_memory(client) -> dict[str, int]:
    """Peak resident set size (bytes) of each worker process since it started."""
    return client.run(_peak_rss)
