"""Check that a large dense array fits in memory before allocating it.

Several steps of the methods need one dense array whose size grows with the data as a
product: ``n x L`` decision values or label copies (LEML's logistic and squared-hinge
losses, Binary Relevance), ``N x N`` distances (the entropy ranking with real-valued
weights, the complete-link baseline).  On a large input NumPy would ask the kernel for the
memory, and the process would be killed part way (by the OOM killer) rather than fail.
:func:`check_allocation` compares the bytes the array needs with the memory available and
raises :class:`MemoryBudgetError` first, with a message that names the option to change.

The available memory is the smallest of the physical memory the kernel reports as available
(``os.sysconf``), the room a cgroup v2 limit leaves, and the room the process's own limits leave
(``ulimit -v``, the address space, and ``ulimit -d``, the data segment: past them an allocation
fails inside whatever library makes it, OpenBLAS's buffers included, with no message of ours);
the environment variable ``SCARCE_MEMORY_LIMIT_GB`` sets a lower ceiling (useful on shared
machines and in tests).
"""

from __future__ import annotations

import math
import os
import resource

import numpy as np

__all__ = ["SCORES_PER_BATCH", "MemoryBudgetError", "available_bytes", "check_allocation",
           "format_bytes", "memory_cap", "rows_per_batch"]

ENV_LIMIT = "SCARCE_MEMORY_LIMIT_GB"
# Leave room for the arrays already alive and for temporaries of the same size.
HEADROOM = 0.8
#: Most decision values (rows x labels) a batch of the batched predictions and metrics
#: scores at once.  A fixed number of rows per batch grows with the label count: over a
#: Wikipedia-sized label set a batch of thousands of rows, with its sorts and comparisons,
#: was many times the data's memory.  The metrics of a batch hold about six arrays of its
#: size at once (the scores, their top-k partition and order, the AUC's ranks, the
#: predictions), so 2^19 values keep each at 4 MiB of float64 or int64; batches this size
#: score as fast as larger ones, the per-batch work being vectorised over the rows.
SCORES_PER_BATCH = 1 << 19


def rows_per_batch(batch_size: int, n_labels: int) -> int:
    """Rows scored at a time: ``batch_size``, fewer when ``batch_size x n_labels`` would
    exceed :data:`SCORES_PER_BATCH` (at least one)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    return max(1, min(int(batch_size), SCORES_PER_BATCH // max(int(n_labels), 1)))


class MemoryBudgetError(MemoryError):
    """A dense array would not fit in the memory available; the message says what to change."""


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError("unreachable")


def _cgroup_room() -> float:
    # cgroup v2: the container's limit minus what it uses (a plain system file, not data I/O).
    try:
        with open("/sys/fs/cgroup/memory.max") as fh:
            limit = fh.read().strip()
        if limit == "max":
            return math.inf
        with open("/sys/fs/cgroup/memory.current") as fh:
            used = int(fh.read().strip())
        return max(0.0, float(int(limit) - used))
    except (OSError, ValueError):
        return math.inf


#: The process limits that bound its allocations, each with the line of ``/proc/self/status``
#: that says how much of it the process already uses (``VmSize``: its virtual size; ``VmData``:
#: its private writable mappings, which the kernel counts against the data limit).
RLIMITS = (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData"))


def _proc_status() -> dict[str, float]:
    """The ``Vm*`` sizes of ``/proc/self/status``, in bytes (empty where there is none)."""
    out = {}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name.startswith("Vm") and value.strip().endswith("kB"):
                    out[name] = float(value.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def _rlimit_room() -> float:
    """The room the process's soft address-space and data limits leave: each limit minus what
    the process already uses of it (no limit: infinite)."""
    room, status = math.inf, None
    for limit, used in RLIMITS:
        soft, _ = resource.getrlimit(getattr(resource, limit))
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        status = _proc_status() if status is None else status
        room = min(room, max(0.0, float(soft) - status.get(used, 0.0)))
    return room


def memory_cap() -> float:
    """``SCARCE_MEMORY_LIMIT_GB`` in bytes (infinite when unset).

    Raises
    ------
    ValueError
        Naming the variable, when its value is not a positive, finite number of GiB (a cap of
        0, a negative, NaN or infinite one would be taken and fail later, far from its cause;
        an empty one is no number either: unset it for no cap).
    """
    cap = os.environ.get(ENV_LIMIT)
    if cap is None:
        return math.inf
    try:
        gib = float(cap)
    except ValueError:
        raise ValueError(f"{ENV_LIMIT} must be a number of GiB, got {cap!r}") from None
    if not (math.isfinite(gib) and gib > 0):
        raise ValueError(f"{ENV_LIMIT} must be a positive, finite number of GiB, got {cap!r}")
    return gib * 2**30


def available_bytes() -> float:
    """Bytes this process may still allocate: min(kernel's available, cgroup room, room under
    the process's address-space and data limits, ``SCARCE_MEMORY_LIMIT_GB``)."""
    cap = memory_cap()  # first: a bad value is refused whatever the machine
    room = math.inf
    try:
        room = float(os.sysconf("SC_AVPHYS_PAGES")) * float(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):  # not Linux: no estimate
        pass
    return min(room, _cgroup_room(), _rlimit_room(), cap)


def check_allocation(shape: tuple[int, ...], dtype, *, what: str, advice: str,
                     copies: float = 1.0) -> int:
    """Raise :class:`MemoryBudgetError` unless ``copies`` arrays of ``shape`` fit.

    Parameters
    ----------
    shape, dtype :
        The dense array about to be allocated.
    what : str
        What the array is, for the message (``"decision values (n x L)"``).
    advice : str
        Which option to change, for the message (``"lower batch_size"``).
    copies : float, default=1
        How many arrays of this size the operation holds at once (temporaries).

    Returns
    -------
    int
        The bytes one array needs.
    """
    need = int(np.prod([int(s) for s in shape], dtype=np.float64)) * np.dtype(dtype).itemsize
    room = available_bytes()
    if need * copies > HEADROOM * room:
        dims = " x ".join(f"{int(s):,}" for s in shape)
        raise MemoryBudgetError(
            f"{what}: a dense {dims} {np.dtype(dtype).name} array"
            f"{f' (x{copies:g} with temporaries)' if copies != 1 else ''} needs "
            f"{format_bytes(need * copies)}, but only {format_bytes(room)} is available; "
            f"{advice}")
    return need
