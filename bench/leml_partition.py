"""A partition task's read: one row block of a stored CSR matrix, read whole then sliced
against :func:`scarce.tasks.store.encoding.read_rows`.

Section ``partition`` of ``scarce bench leml``.  A random CSR matrix of
``--partition-shape`` (rows x features, float32, ``--partition-row-nnz`` entries a row at
seeded random columns) is written as a store entry (the store's Parquet format, as
``leml-load`` writes the training X), then block ``--partition-block`` of
``--partition-blocks`` row blocks (:func:`scarce.algorithms.leml.data.row_block_bounds`, as
``leml-partition`` cuts it) is read in a fresh process each way, ``--repeats`` times:

* ``whole``: ``read_parquet_entry(path)[start:stop]``, what a partition task did at first
  (the whole entry in memory, then its rows);
* ``rows``: ``read_rows(path, start, stop)``, the row groups whose ``row`` statistics
  overlap the block.

Rows: per way, the seconds of the read (best of the repeats), the process's peak RSS
(``VmHWM``, its own) and its RSS before the read (the imports), and the ratios of
``rows`` to ``whole``; whether the two ways gave the same matrix (indices, values and
dtypes).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

WAYS = ("whole", "rows")


def _say(*parts) -> None:
    print("[bench leml partition]", *parts, file=sys.stderr, flush=True)


def _rss(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def write_matrix(path: Path, n: int, d: int, row_nnz: int, seed: int) -> int:
    """A random ``n x d`` float32 CSR matrix, ``row_nnz`` seeded random columns a row (the
    rare repeats summed), written as a store entry at ``path``; its nnz."""
    import scipy.sparse as sp

    from scarce.tasks.store.atomic import atomic_write_parquet
    from scarce.tasks.store.encoding import encode

    rng = np.random.default_rng(seed)
    cols = np.sort(rng.integers(0, d, size=(n, row_nnz), dtype=np.int32), axis=1)
    data = rng.random(n * row_nnz, dtype=np.float32)
    X = sp.csr_matrix((data, cols.ravel(), np.arange(0, n * row_nnz + 1, row_nnz)),
                      shape=(n, d))
    X.sum_duplicates()
    del cols, data
    atomic_write_parquet(path, encode(X))
    return int(X.nnz)


def read_block(path: str, start: int, stop: int, way: str, repeats: int) -> dict:
    """Run in a fresh process: block ``start:stop`` of the entry at ``path`` read ``way``,
    ``repeats`` times; the seconds of the fastest, this process's RSS before the first and
    its peak, and a digest of the block."""
    from scarce.tasks.store.encoding import read_parquet_entry, read_rows

    before = _rss("VmRSS")
    best, block = np.inf, None
    for _ in range(repeats):
        block = None
        t = time.perf_counter()
        if way == "whole":
            block = read_parquet_entry(Path(path))[start:stop]
        else:
            block = read_rows(path, start, stop)
        best = min(best, time.perf_counter() - t)
    return {"seconds": best, "before": before, "peak": _rss("VmHWM"), "digest": digest(block)}


def digest(block) -> list:
    """The shape of a CSR matrix and a SHA-256 of its arrays with their dtypes."""
    block = block.tocsr()
    sha = hashlib.sha256()
    for array in (block.indptr, block.indices, block.data):
        sha.update(str(array.dtype).encode())
        sha.update(np.ascontiguousarray(array).tobytes())
    return [list(block.shape), sha.hexdigest()]


def run_section(args, rows: list[tuple]) -> None:
    """Section ``partition`` of ``scarce bench leml``: both ways in fresh processes."""
    from scarce.algorithms.leml.data import row_block_bounds

    n, d = args.partition_shape
    blocks, b = args.partition_blocks, args.partition_block
    if not 0 <= b < blocks:
        raise ValueError(f"--partition-block {b} is not among the {blocks} blocks")
    with tempfile.TemporaryDirectory(prefix="scarce-bench-partition-") as tmp:
        path = Path(tmp) / "X.parquet"
        t = time.perf_counter()
        nnz = write_matrix(path, n, d, args.partition_row_nnz, args.seed)
        size = path.stat().st_size
        _say(f"{n} x {d}, {nnz} entries ({size / 1e6:.0f} MB) written in "
             f"{time.perf_counter() - t:.0f} s")
        start, stop = row_block_bounds(n, blocks)[b]
        setting = (f"{n}x{d} float32 CSR, nnz={nnz}, {size / 1e6:.0f} MB on disk; block {b} "
                   f"of {blocks} (rows {start}:{stop}); best of {args.repeats}")
        results = {}
        for way in WAYS:
            out = subprocess.run(
                [sys.executable, "-m", "scarce.bench.leml_partition", str(path), str(start),
                 str(stop), way, str(args.repeats)],
                check=True, capture_output=True, text=True,
                cwd=Path(__file__).resolve().parent.parent)
            results[way] = json.loads(out.stdout.strip().splitlines()[-1])
            r = results[way]
            _say(f"RESULT partition | {way} | {r['seconds']:.2f} s, peak "
                 f"{r['peak'] / 2**30:.2f} GiB (imports {r['before'] / 2**30:.2f} GiB)")

    def add(method, metric, value):
        rows.append(("partition", "random CSR", method, setting, metric, float(value)))

    names = {"whole": "read whole, then slice", "rows": "read_rows"}
    for way in WAYS:
        r = results[way]
        add(names[way], "seconds", r["seconds"])
        add(names[way], "peak RSS GiB", r["peak"] / 2**30)
        add(names[way], "RSS GiB before the read (imports)", r["before"] / 2**30)
    whole, part = results["whole"], results["rows"]
    add("read_rows / whole", "seconds ratio", part["seconds"] / whole["seconds"])
    add("read_rows / whole", "peak RSS ratio", part["peak"] / whole["peak"])
    add("read_rows / whole", "peak above the imports, ratio",
        (part["peak"] - part["before"]) / (whole["peak"] - whole["before"]))
    add("read_rows / whole", "the same block (exactly)", part["digest"] == whole["digest"])


if __name__ == "__main__":
    path, start, stop, way, repeats = sys.argv[1:6]
    print(json.dumps(read_block(path, int(start), int(stop), way, int(repeats))))
