"""The row-block backend of LEML's steps: training data held by Dask workers, summed in order.

:class:`RowBlockBackend` is the backend the estimator's start, W-step, H-step and objective take
(``backend=``): each operator application sends its ``d' x k`` argument once,
runs one task per block where the block lives, and adds the blocks' terms in block order on
the driver, so any number of workers gives the same bits.  How it works and its invariants:
``docs/design/leml-row-blocks.md``.
"""

from __future__ import annotations

import uuid

import numpy as np

from scarce.algorithms.leml.data import (
    LEMLData,
    row_block_bounds,
    split_rows,
)
from scarce.algorithms.leml.h_step import sum_in_order
from scarce.algorithms.leml.losses import get_loss
from scarce.algorithms.leml.params import N_BLOCKS
from scarce.algorithms.leml.w_step import WStepProducts, observed_gram_diagonal, w_loss_value
from scarce.tasks.leml_dask.cluster import cluster_workers, this_worker
from scarce.tasks.leml_dask.memory import (
    check_worker_memory,
    data_nbytes,
    driver_nbytes,
    working_nbytes,
)
from scarce.tasks.leml_dask.partition import PartitionedData, _partition_block
from scarce.tasks.leml_dask.transport import _call, _send_array, _wrap_aligned


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


def _observed_gram_diagonal(block: LEMLData):
    return observed_gram_diagonal(block)


_sum_in_order = sum_in_order  # parts[0] + parts[1] + ... left to right


#: Terms of a block sum at most this large are gathered at once; larger ones one at a time.
GATHER_AT_ONCE_BYTES = 16 << 20


def _fetched_sum(client, futures, *, release: bool = False) -> np.ndarray:
    """The per-block terms of ``futures`` added in block order, as :func:`sum_in_order` adds
    them (the same bits).  Terms larger than :data:`GATHER_AT_ONCE_BYTES` (a ``d' x k``
    product at full scale) are fetched one at a time, so this process holds the sum and one
    term, not one term per block; small ones in one round trip.

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


class _BlockProducts:
    """The loss terms summed over the blocks: futures of the blocks' gradient terms, and of
    their :class:`WStepProducts` for the Hessian only (:meth:`WStepProducts.for_hess_vec`)."""

    def __init__(self, owner: RowBlockBackend, gradients, futures):
        self.owner, self.gradients, self.futures = owner, gradients, futures

    def gradient(self):
        gradients, self.gradients = self.gradients, None
        if gradients is None:
            raise RuntimeError("the gradient of these products was already taken")
        return _fetched_sum(self.owner.client, gradients, release=True)

    def hess_vec(self, V):
        Vf = self.owner._put(V)
        return self.owner._reduce(_hess_vec, self.futures, Vf)


class _BlockWOperators:
    """``value`` / ``products`` of :func:`~scarce.algorithms.leml.w_step.solve_w_step`, one task per
    row block."""

    def __init__(self, owner: RowBlockBackend, H, loss):
        self.owner, self.loss = owner, loss
        # The squared loss, fully observed (CG: one products() per W-step) needs H on the
        # workers only for the gradient: it is sent with each products() and not kept, so
        # the workers free it once the gradient is taken.  TRON's losses send it once.
        self.fast = WStepProducts.squared_fully_observed(loss, owner.fully_observed)
        self.fully_observed = owner.fully_observed
        self._H = H
        self.H = None if self.fast else owner._put(H)

    def observed_gram_diagonal(self):
        return self.owner.observed_gram_diagonal()

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


class RowBlockBackend:
    """The backend of every LEML step over the training rows: row blocks of the training
    data held by Dask workers (or, with :class:`~scarce.tasks.leml_dask.inline.InlineClient`, by
    this
    process), each step's sums taken block by block and added in block order.

    Pass it as ``backend=`` to ``LEML.w_step``, ``LEML.h_step`` and ``LEML.objective`` (and
    to ``LEML.start`` for a squared-loss start) for every step of a fit: the W-step's
    products, the H-step's sums (every loss and H-step solver) and the objective's loss term
    then run where the blocks live.

    Parameters
    ----------
    client : distributed.Client
        A client of a running cluster with at least one worker.
    data : PartitionedData or LEMLData
        The training data, in ``blocks`` contiguous row blocks, block ``b`` placed on
        worker ``b mod n_workers`` of the sorted worker addresses.  :class:`PartitionedData`:
        each block is a task that reads that block's files only (recomputed elsewhere if its
        worker is lost), named by the files, so that a later ``RowBlockBackend`` on the same files
        reuses the blocks while :attr:`block_futures` of this one (or copies) are held.
        :class:`~scarce.algorithms.leml.data.LEMLData` (from ``LEML.prepare``): the blocks are
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
            raise ValueError("the Dask cluster has no workers; start some before RowBlockBackend")
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
        self._observed_gram_diagonal = None
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
    def observed_gram_diagonal(self) -> np.ndarray:
        """``sum_i rho_i x_i^2`` (float64; the diagonal of ``X^T X`` when every label is
        observed, see :func:`~scarce.algorithms.leml.w_step.observed_gram_diagonal`), the blocks'
        terms added in block order: computed at the first call, then kept (the W-step's
        preconditioner)."""
        if self._observed_gram_diagonal is None:
            self._observed_gram_diagonal = self._reduce(_observed_gram_diagonal,
                                                        self.block_futures)
        return self._observed_gram_diagonal

    def operators(self, H, loss):
        """The W-step's loss terms at ``H``, summed over the blocks (``H`` goes out once);
        the operators of :func:`~scarce.algorithms.leml.w_step.solve_w_step`."""
        return _BlockWOperators(self, H, get_loss(loss))

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
