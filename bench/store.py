"""What the result store holds in memory to write and read an entry: ``scarce bench store``.

A CSR matrix (float32 values, int32 indices, like a LEML row block) and a dense float64 array
are written to a temporary store and read back, each operation in a fresh Python process so
that its high-water marks are its own.  Every figure is a ratio to the entry's own bytes in
memory (a CSR entry's values, indices and row pointers; a dense entry's array):

* ``traced_peak``: the peak of the allocations ``tracemalloc`` sees (numpy's and Python's, not
  Arrow's pool) during the operation.  A sparse read builds the matrix on its three columns
  (:func:`scarce.tasks.store.encoding.read_checked_value`), so it holds the columns (12 bytes an
  entry here, 1.5 times the CSR matrix's 8) and the row pointers, and no conversion's copy of
  the indices and values beside them (a COO conversion would add 8 bytes an entry, an int64
  copy of the row indices 8 more);
* ``arrow_peak``: the peak of Arrow's memory pool in that process (the table, or the row
  group being read);
* ``rss_peak``: how far the process's peak resident memory rose above what it held before;
* ``rss_after``: what the process holds once the operation returned, above what it held
  before (a read holds the value it returns: near 1 when Arrow's pool gave back what it no
  longer uses, :func:`scarce.tasks.store.encoding.release_arrow_memory`).

The read is also measured with ``release_arrow_memory`` left out (``read, pool kept``): the
peer that shows what giving the pool back saves.  ``--rows``, ``--cols`` and ``--density``
size the sparse entry; the dense one has ``--rows`` rows and ``--dense-cols`` columns.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

KINDS = ("sparse", "dense")
OPERATIONS = ("write", "read", "read, pool kept")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from scarce.flows.commands.types import POSITIVE, comma_list, number

    parser.add_argument("--rows", type=POSITIVE, default=200_000, help="rows of both entries")
    parser.add_argument("--cols", type=POSITIVE, default=50_000,
                        help="columns of the sparse entry")
    parser.add_argument("--density", type=number(0, 1, low_open=True), default=0.001,
                        help="share of the sparse entry's elements stored")
    parser.add_argument("--dense-cols", type=POSITIVE, default=50,
                        help="columns of the dense entry")
    parser.add_argument("--kinds", type=comma_list(KINDS), default=list(KINDS),
                        help="comma-separated entries to measure: sparse, dense")


def make_value(kind: str, rows: int, cols: int, density: float, dense_cols: int, seed: int = 0):
    """The entry measured: a CSR matrix of float32 values and int32 indices, the same number
    of stored elements in every row (distinct, increasing columns), or a dense float64
    array."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    if kind == "dense":
        return rng.standard_normal((rows, dense_cols))
    per_row = max(1, min(cols, round(density * cols)))
    stride = cols // per_row
    indices = (np.arange(per_row, dtype=np.int32) * stride
               + rng.integers(0, stride, (rows, per_row), dtype=np.int32)).ravel()
    indptr = np.arange(0, rows * per_row + 1, per_row, dtype=np.int32)
    data = rng.random(rows * per_row, dtype=np.float32)
    return sp.csr_matrix((data, indices, indptr), shape=(rows, cols))


def value_nbytes(value) -> int:
    """The bytes of the arrays a value holds (a sparse matrix's data, indices and pointers)."""
    if hasattr(value, "indptr"):
        return int(value.data.nbytes + value.indices.nbytes + value.indptr.nbytes)
    return int(value.nbytes)


def _resident() -> tuple[int, int]:
    """(resident, peak resident) bytes of this process, from ``/proc/self/status``."""
    found = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(rest.split()[0]) * 1024
    return found["VmRSS"], found["VmHWM"]


def _reset_peak() -> bool:
    """Reset this process's peak resident memory to its current one (Linux: writing 5 to
    ``/proc/self/clear_refs``); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def measure(root: str, kind: str, operation: str, sizes: dict) -> dict:
    """One operation on the entry ``kind`` in the store at ``root``, in this process: its
    seconds and memory (bytes). ``write`` makes the value and writes it; the reads read what
    ``write`` left."""
    import tracemalloc

    import pyarrow as pa

    import scarce.tasks.store.folder as store_module
    from scarce.tasks.store import Store

    store, ref = Store(root), f"bench/{kind}"
    value = make_value(kind, **sizes) if operation == "write" else None
    if operation == "read, pool kept":
        store_module.release_arrow_memory = lambda: None
    pool = pa.default_memory_pool()
    pool.release_unused()
    before, _ = _resident()
    peak_reset = _reset_peak()
    tracemalloc.start()
    t0 = time.perf_counter()
    if operation == "write":
        store.write(ref, value)
    else:
        value = store.read(ref)
    seconds = time.perf_counter() - t0
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    after, peak = _resident()
    return {"entry_bytes": value_nbytes(value), "file_bytes": store.size(ref),
            "seconds": seconds, "traced_peak": traced, "arrow_peak": pool.max_memory(),
            "rss_peak": peak - before if peak_reset else None, "rss_after": after - before}


def _measure_in_child(root: Path, kind: str, operation: str, sizes: dict) -> dict:
    """:func:`measure` in a fresh Python process (its own peaks)."""
    out = subprocess.run(
        [sys.executable, "-m", "scarce.bench.store", str(root), kind, operation,
         json.dumps(sizes)], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"bench store: {kind} {operation} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def run(args: argparse.Namespace) -> pd.DataFrame:
    sizes = {"rows": args.rows, "cols": args.cols, "density": args.density,
             "dense_cols": args.dense_cols}
    kinds = list(args.kinds)  # each one of KINDS (checked by the parser)
    rows = []
    root = Path(tempfile.mkdtemp(prefix="scarce-bench-store-"))
    try:
        for kind in kinds:
            for operation in OPERATIONS:
                m = _measure_in_child(root, kind, operation, sizes)
                entry = m["entry_bytes"]
                rows.append({
                    "entry": kind, "operation": operation,
                    "entry_MiB": entry / 2**20, "file_MiB": m["file_bytes"] / 2**20,
                    "seconds": m["seconds"],
                    "traced_peak": m["traced_peak"] / entry,
                    "arrow_peak": m["arrow_peak"] / entry,
                    "rss_peak": None if m["rss_peak"] is None else m["rss_peak"] / entry,
                    "rss_after": m["rss_after"] / entry})
                print(f"[bench store] {kind} {operation}: traced peak "
                      f"{rows[-1]['traced_peak']:.2f}, Arrow's {rows[-1]['arrow_peak']:.2f}, "
                      f"resident after {rows[-1]['rss_after']:.2f} times the entry",
                      file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    table = pd.DataFrame(rows)
    numeric = table.columns.drop(["entry", "operation"])
    table[numeric] = table[numeric].astype(float).round(3)
    return table


if __name__ == "__main__":  # one measurement, in the process `_measure_in_child` starts
    root_, kind_, operation_, sizes_ = sys.argv[1:5]
    print(json.dumps(measure(root_, kind_, operation_, json.loads(sizes_))))
