"""LEML's squared-loss H-step from row-block sums against the whole-data H-step.

``scarce bench leml-blocks [--data DIR] [--repeats 3]``: on the Bibtex training set (rows
unit-norm, intercept, k = 100, lambda = 1), fully observed and 20% observed, the H-step at a
seeded random W by :func:`scarce.algorithms.leml.update_H` (the whole data), by
:func:`scarce.algorithms.leml.update_H_by_blocks` over 4 row blocks in this process
(:class:`scarce.algorithms.leml.LocalBlocks`; the split is not timed), and, in float32, on a Dask
LocalCluster of single-threaded worker processes with 1 and then 2 workers
(:class:`scarce.tasks.leml_dask.RowBlockBackend`, blocks scattered once, not timed).  Best of
``--repeats``, one BLAS thread everywhere; one row per problem and way: the seconds, the ratio
to ``update_H`` measured in the same run, the largest difference to ``update_H`` relative to
``max|H|``, and whether 1 and 2 workers gave the same bits.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.preprocessing import normalize
from threadpoolctl import threadpool_limits

from scarce.algorithms.leml import LEML, LocalBlocks, split_rows, update_H_by_blocks
from scarce.tasks.readers.xmc import read_xmc

RANK, LAM, BLOCKS = 100, 1.0, 4


def _best(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def _rel(H, H_whole) -> float:
    return float(np.abs(H.astype(np.float64) - H_whole).max() / np.abs(H_whole).max())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=None,
                        help="folder of the Bibtex files (default: data/xmc/bibtex)")
    from scarce.flows.commands.types import POSITIVE

    parser.add_argument("--repeats", type=POSITIVE, default=3,
                        help="best of this many (default 3)")


def _row(observed, dtype, way, seconds, whole_seconds, diff, same=None) -> dict:
    return {"observed": f"{observed:.0%}", "dtype": dtype, "way": way, "seconds": seconds,
            "ratio_to_update_H": seconds / whole_seconds, "max_rel_diff": diff,
            "same_bits_1_2_workers": same}


def run(args: argparse.Namespace) -> pd.DataFrame:
    from scarce.flows.config import project_root

    data_dir = args.data or project_root() / "data" / "xmc" / "bibtex"
    X, Y = read_xmc(Path(data_dir) / "bibtex_xmlrepo_train.txt.gz")
    X = normalize(X)
    rng = np.random.default_rng(0)
    problems = []
    for observed in (1.0, 0.2):
        mask = None if observed == 1 else sp.csr_matrix(rng.random(Y.shape) < observed)
        for dtype in ("float32", "float64"):
            model = LEML(rank=RANK, lam=LAM, dtype=dtype, fit_intercept=True)
            data = model.prepare(X, Y, mask)
            W = (0.01 * rng.standard_normal((data.n_features, RANK))).astype(dtype)
            problems.append((observed, dtype, model, data, W))

    rows, wholes = [], {}
    with threadpool_limits(1):
        for observed, dtype, model, data, W in problems:
            blocks = LocalBlocks(split_rows(data, BLOCKS))
            t_whole, (H_whole, _) = _best(
                lambda m=model, d=data, W=W: m.h_step(d, W, None), args.repeats)
            t_blocks, (H, _) = _best(
                lambda b=blocks, W=W: update_H_by_blocks(b, W, LAM, "squared"), args.repeats)
            wholes[observed, dtype] = (H_whole, t_whole)
            rows.append(_row(observed, dtype, "update_H (whole data)", t_whole, t_whole, 0.0))
            rows.append(_row(observed, dtype, f"{BLOCKS} row blocks, one process", t_blocks,
                             t_whole, _rel(H, H_whole)))

    from distributed import Client, LocalCluster

    from scarce.tasks.leml_dask import RowBlockBackend

    pins = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      env=pins) as cluster, Client(cluster) as client, threadpool_limits(1):
        client.wait_for_workers(2)
        workers = sorted(client.scheduler_info()["workers"])
        for observed, dtype, _model, data, W in problems:
            if dtype != "float32":
                continue
            out = {}
            for chosen in (workers[:1], workers):
                with RowBlockBackend(client, data, blocks=BLOCKS, workers=chosen) as ws:
                    out[len(chosen)] = _best(
                        lambda ws=ws, W=W: update_H_by_blocks(ws, W, LAM, "squared")[0],
                        args.repeats)
            same = bool(np.array_equal(out[1][1], out[2][1]))
            H_whole, t_whole = wholes[observed, dtype]
            for n in (1, 2):
                rows.append(_row(observed, dtype, f"Dask, {n} worker{'s' * (n > 1)}",
                                 out[n][0], t_whole, _rel(out[n][1], H_whole), same))
    return pd.DataFrame(rows)
