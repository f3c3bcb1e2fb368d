"""Arrays sent to and computed on Dask workers: one fixed alignment, one copy per worker.

A block task's arithmetic must be the same bits on every worker whatever the alignment its
arrays arrived with, and a worker must hold an argument once, not once per task: arrays are
sent as tasks (:func:`_send_array`, recomputable after a lost worker), unpickled aligned, and
called with one BLAS thread (:func:`_call`).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import numpy as np
import scipy.sparse as sp

from scarce.tasks.leml_dask.cluster import _current_worker

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
    a sparse matrix, a tuple (a named tuple stays one), or an object of
    :mod:`scarce.algorithms.leml` (a row block and its observed entries, a block's products)
    whose array attributes are replaced in place, so that a block fetched from another worker
    is aligned once for all the tasks that use it."""
    if isinstance(value, np.ndarray):
        return _aligned(value)
    if depth > 3 or value is None:
        return value
    if isinstance(value, tuple):
        items = [_align(v, depth + 1) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
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
    the peak of a one-process run at full scale).  :meth:`RowBlockBackend._put` wraps
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
