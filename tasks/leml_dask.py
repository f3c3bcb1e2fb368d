"""LEML's W-step on a Dask cluster, with the row blocks of ``X`` kept on the workers.

The W-step's gradient and Hessian-vector product are sums over the rows of ``X``
(Yu et al., Sec. 3), so over row blocks (:func:`algorithms.leml.data.split_rows`).
:class:`DaskWStep` splits the prepared data into a fixed number of contiguous row
blocks (``blocks``, default :data:`N_BLOCKS`, independent of the number of
workers) and scatters each block once to one worker (round robin over the workers,
one future per block).  It is a *backend* of the estimator's W-step,
``LEML.w_step(data, W, H, backend=DaskWStep(...))``: the estimator's solver
(:func:`algorithms.leml.w_step.solve_w_step`, the same CG / TRON iterations) runs on the
driver and asks :meth:`DaskWStep.operators` for the loss terms, which the blocks compute
where they live.  Each operator application scatters its ``d' x k`` argument once
(broadcast to the workers) and submits one task per block, pinned to the worker
that holds the block; the workers return ``d' x k`` terms and the driver adds them
in block order.  So:

* the blocks cross the network once, when the object is built; per CG iteration
  only the direction goes out and one ``d' x k`` term per block comes back;
* the reduction order is fixed (block 0 + block 1 + ... on the driver), and each
  block's term is computed by the same code on the same rows, so 1 and 2 (or any
  number of) workers give bit-identical ``W`` (with one BLAS thread per worker,
  which :class:`DaskWStep` sets with threadpoolctl unless ``pin_blas=False``);
* against the single-process W-step (no backend) only the
  summation order differs, so the products agree to rounding and ``W`` agrees as
  far as CG lets rounding through: run to convergence (``cg_tol=1e-10``) the
  relative difference ``max|dW| / max|W|`` is below 1e-10 in float64 (tested; 1e-4
  in float32 at ``cg_tol=1e-5``).  Stopped early (the flow's 10 iterations at
  ``cg_tol=1e-3``), CG's iterate amplifies a one-ulp change of its products by
  orders of magnitude; ``scarce bench leml --sections distributed`` prints that
  sensitivity of the single-process solver next to the Dask difference.

Every loss is supported: the squared loss fully observed (the paper's fast case)
or with a missing-label mask (sparse or dense entries), and the logistic and
squared-hinge losses (TRON; the decision values on each block stay on its worker
between the function value and the gradient).

Dask moves the blocks and the per-step objects with its own serialisation; nothing
here writes them anywhere.
"""

from __future__ import annotations

import resource
import sys
import uuid

import numpy as np

from algorithms.leml.data import LEMLData, row_block_bounds, split_rows
from algorithms.leml.losses import get_loss
from algorithms.leml.w_step import WStepProducts, w_loss_value

__all__ = ["DaskWStep", "N_BLOCKS", "worker_peak_memory"]

#: Default number of row blocks: fixed, so the reduction order (and so ``W``, bit for
#: bit) does not depend on the number of workers.  Each block costs one task per
#: operator application (about 10 ms of Dask overhead each on a loaded 2-core
#: machine), so few blocks: 4 keep 1, 2 or 4 workers evenly busy.
N_BLOCKS = 4


# --------------------------------------------------------------------------- worker side
def _pin_blas() -> None:
    """Limit BLAS / OpenMP pools of this worker process to one thread."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)


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


def _first(pair):
    return pair[0]


def _block_products(block: LEMLData, H, W, loss, value, gram_left):
    z = None if value is None else value[1]
    return WStepProducts(block, H, W, loss, z=z, gram_left=gram_left)


def _gradient(products: WStepProducts):
    return products.gradient()


def _hess_vec(products: WStepProducts, V):
    return products.hess_vec(V)


def _sum_in_order(parts) -> np.ndarray:
    """``parts[0] + parts[1] + ...`` left to right: the fixed reduction order."""
    total = np.array(parts[0], copy=True)
    for part in parts[1:]:
        total += part
    return total


# --------------------------------------------------------------------------- driver side
class _BlockProducts:
    """The loss terms summed over the blocks: futures of WStepProducts on the workers."""

    def __init__(self, owner: DaskWStep, futures):
        self.owner, self.futures = owner, futures

    def gradient(self):
        return self.owner._reduce(_gradient, self.futures)

    def hess_vec(self, V):
        Vf = self.owner._broadcast(V)
        return self.owner._reduce(_hess_vec, self.futures, Vf)


class _DaskWOperators:
    """``value`` / ``products`` of :func:`~algorithms.leml.w_step.solve_w_step`, one task per
    row block."""

    def __init__(self, owner: DaskWStep, H, loss):
        self.owner, self.loss = owner, loss
        self.H = owner._broadcast(H)

    def value(self, W):
        o = self.owner
        Wf = o._broadcast(W)
        pairs = o._map(_block_value, o.block_futures, self.H, Wf, self.loss)  # (f, z) stays there
        f = 0.0
        for value in o.client.gather(o._map(_first, pairs)):
            f += value
        return f, pairs

    def products(self, W, state=None):
        o = self.owner
        Wf = o._broadcast(W)
        values = state if state is not None else [None] * len(o.block_futures)
        futures = [o._submit(i, _block_products, block, self.H, Wf, self.loss, value,
                             o.gram_left)
                   for i, (block, value) in enumerate(zip(o.block_futures, values, strict=True))]
        return _BlockProducts(o, futures)


class DaskWStep:
    """A backend of LEML's W-step: row blocks of the training data held by Dask workers.

    Pass it to ``LEML.w_step(data, W, H, backend=...)`` for every W-step of a fit; the
    blocks are scattered once, when it is built.

    Parameters
    ----------
    client : distributed.Client
        A client of a running cluster with at least one worker.
    data : LEMLData
        From ``LEML.prepare``; split into ``blocks``
        contiguous row blocks, which are scattered once (one future per block,
        block ``b`` to worker ``b mod n_workers`` in the sorted worker addresses).
        The driver keeps only the shapes; ``data`` may be dropped afterwards.
    blocks : int, default=N_BLOCKS
        Number of row blocks (clipped to the number of rows).  It fixes the
        reduction order, so results do not depend on the number of workers.
    workers : list of str, optional
        Addresses of the workers to hold the blocks (default: all workers of the
        cluster); the results do not depend on this choice.
    pin_blas : bool, default=True
        Limit each worker process's BLAS and OpenMP pools to one thread
        (threadpoolctl, once per worker): needed for bit-identical results across
        clusters, and the fast setting on 2-core machines (two BLAS threads in one
        process were measured 3 to 100 times slower than one).

    Attributes
    ----------
    block_futures : list of distributed.Future
        The scattered row blocks, in row order.
    block_workers : list of str
        The worker holding each block; its tasks run there only.
    bounds : list of (int, int)
        Row range of each block.

    Notes
    -----
    A worker that dies loses its blocks (they are not replicated): build a new
    ``DaskWStep``.
    """

    def __init__(self, client, data: LEMLData, blocks: int = N_BLOCKS, *,
                 workers=None, pin_blas: bool = True):
        known = sorted(client.scheduler_info(n_workers=-1)["workers"])
        if not known:
            raise ValueError("the Dask cluster has no workers; start some before DaskWStep")
        if workers is not None:
            unknown = sorted(set(workers) - set(known))
            if unknown or not workers:
                raise ValueError(f"workers {unknown or workers} are not among the cluster's "
                                 f"workers {known}")
        workers = sorted(workers) if workers is not None else known
        self.client = client
        if pin_blas:
            client.run(_pin_blas, workers=workers)
        self.bounds = row_block_bounds(data.n_samples, blocks)
        self.n_features, self.n_labels = data.n_features, data.n_labels
        self.n_samples, self.dtype = data.n_samples, data.dtype
        # Squared loss, fully observed: associate 2 H^T H as the whole-set product does.
        self.gram_left = data.n_features <= data.n_samples
        self.block_workers = [workers[b % len(workers)] for b in range(len(self.bounds))]
        self.block_futures = [
            client.scatter(block, workers=[worker], hash=False)
            for block, worker in zip(split_rows(data, blocks), self.block_workers, strict=True)]
        self._tag = uuid.uuid4().hex[:8]
        self._count = 0

    # -- task plumbing
    def _key(self, name: str, i: int) -> str:
        self._count += 1
        return f"leml-w-{name}-{self._tag}-{self._count}-block{i}"

    def _submit(self, i, fn, *args):
        return self.client.submit(fn, *args, key=self._key(fn.__name__.strip("_"), i),
                                  workers=[self.block_workers[i]], allow_other_workers=False,
                                  pure=False)

    def _map(self, fn, per_block, *shared):
        return [self._submit(i, fn, item, *shared) for i, item in enumerate(per_block)]

    def _broadcast(self, array):
        """One copy of a small array (``d' x k`` or ``L x k``) on every worker."""
        return self.client.scatter(np.ascontiguousarray(array), broadcast=True, hash=False)

    def _reduce(self, fn, per_block, *shared):
        return _sum_in_order(self.client.gather(self._map(fn, per_block, *shared)))

    # -- the backend of LEML.w_step
    def operators(self, H, loss):
        """The W-step's loss terms at ``H``, summed over the blocks (``H`` goes to every
        worker once); the operators of :func:`~algorithms.leml.w_step.solve_w_step`."""
        return _DaskWOperators(self, H, get_loss(loss))

    def close(self) -> None:
        """Release the scattered blocks (the workers free them)."""
        for future in self.block_futures:
            future.release()
        self.block_futures = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def worker_peak_memory(client) -> dict[str, int]:
    """Peak resident set size (bytes) of each worker process since it started."""
    return client.run(_peak_rss)
