"""One W-step on 1 and 2 Dask workers against the single-process solver: section ``w-step``
of ``scarce bench leml``.

One W-step (squared loss, k=50, 10 CG iterations, float32; Bibtex fully observed also float64)
on a Dask LocalCluster with 1 and then 2 single-threaded worker processes (``LEML.w_step`` with
a ``tasks.leml_dask.RowBlockBackend`` backend, row blocks scattered once), on Bibtex (fully
observed and 20% observed) and on the synthetic Wikipedia-shaped problem at ``scale``: seconds,
max |W_dask - W_single| / max |W_single|, whether 2 workers give the 1-worker W bit for bit,
CG's own sensitivity (the single-process solve with its right-hand side and every product moved
by one ulp) and each worker's peak RSS.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scarce.algorithms.leml import LEML, prepare_data
from scarce.bench.leml_common import (
    _best_time,
    _load,
    _mask,
    _one_w_step,
    _preprocess,
    _say,
    _timed,
)
from scarce.bench.synthetic import WIKI, synthetic_wikipedia


def _cg_sensitivity(data, H, lam, cg_max_iter, W_single) -> float:
    """max |W - W'| / max |W| for the single-process solve with ``-grad`` and every
    Hessian-vector product moved by one ulp (the size of a change of summation order)."""
    from scarce.algorithms.leml import w_gradient
    from scarce.algorithms.leml.solvers import conjugate_gradient

    grad, hess_vec = w_gradient(data, H, np.zeros_like(W_single), lam, "squared")
    up = np.array(np.inf, dtype=grad.dtype)
    W_moved, _ = conjugate_gradient(lambda v: np.nextafter(hess_vec(v), up),
                                    np.nextafter(-grad, up), tol=1e-3, max_iter=cg_max_iter)
    return float(np.abs(W_moved - W_single).max() / np.abs(W_single).max())


def run_section(args, rows: list, scale: float) -> None:
    """One W-step on 1 and 2 Dask workers against the single-process solver."""
    from distributed import Client, LocalCluster

    from scarce.tasks.leml_dask import N_BLOCKS, RowBlockBackend, worker_peak_memory

    k, lam, cg = 50, 1.0, 10
    model = LEML(rank=k, lam=lam, cg_max_iter=cg, cg_tol=1e-3, random_state=args.seed)
    problems = []
    loaded = _load(Path(args.data), "bibtex", args.split)
    if loaded is None:
        _say("w-step: no bibtex under --data: Bibtex rows skipped")
    else:
        Xtr, Ytr, Xte, _ = loaded
        Xtr, _ = _preprocess(args.features, Xtr, Xte)
        problems += [
            ("bibtex", "fully observed", lambda: model.prepare(Xtr, Ytr)),
            ("bibtex", "fully observed",
             lambda: LEML(dtype="float64").prepare(Xtr, Ytr)),
            ("bibtex", "20% observed", lambda: prepare_data(
                Xtr, Ytr, _mask(Ytr.shape, 0.2, args.seed), fit_intercept=True,
                dtype=model.dtype, entries="sparse")),
        ]
    n, d, n_labels = (max(64, int(round(v * scale))) for v in WIKI)
    problems.append((f"synthetic Wikipedia-shaped ({scale:g}x)", "fully observed",
                     lambda: LEML(fit_intercept=False).prepare(
                         *synthetic_wikipedia(n, d, n_labels, seed=args.seed))))
    for name, case, make in problems:
        data = make()
        _, H = model.start(data)
        sec_single, (W_single, info) = _best_time(
            lambda d=data, h=H: _one_w_step(model, d, h), args.repeats)
        sens = _cg_sensitivity(data, H, lam, cg, W_single)
        setting = (f"{case}, n={data.n_samples} d'={data.n_features} L={data.n_labels} "
                   f"nnz(X)={data.X.nnz}, k={k}, {info['cg_iter']} CG, {data.dtype}, "
                   f"{N_BLOCKS} row blocks")
        rows += [("w-step", name, "LEML W-step (single process)", setting, "seconds",
                  sec_single),
                 ("w-step", name, "LEML W-step (single process)", setting,
                  "CG sensitivity to 1 ulp (x1e-6)", 1e6 * sens)]
        _say(f"RESULT w-step {name} | single process | {setting} | {sec_single:.3f}s, "
             f"1-ulp CG sensitivity {sens:.2e}")
        W_one = None
        for n_workers in (1, 2):
            with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                              memory_limit=args.dask_memory_limit,
                              dashboard_address=None) as cluster, Client(cluster) as client:
                client.wait_for_workers(n_workers)
                base = worker_peak_memory(client)
                ws, setup = _timed(lambda c=client, d=data: RowBlockBackend(c, d))
                with ws:
                    sec, (W, _) = _best_time(
                        lambda w=ws, d=data, h=H: _one_w_step(model, d, h, backend=w),
                        args.repeats)
                    peaks = worker_peak_memory(client)
            W_one = W if W_one is None else W_one
            err = float(np.abs(W - W_single).max() / np.abs(W_single).max())
            method = f"LEML W-step (Dask, {n_workers} worker{'s' * (n_workers > 1)})"
            rows += [("w-step", name, method, setting, "seconds", sec),
                     ("w-step", name, method, setting, "split + scatter seconds", setup),
                     ("w-step", name, method, setting,
                      "max|dW|/max|W| vs single (x1e-6)", 1e6 * err),
                     ("w-step", name, method, setting, "bit-identical to 1 worker",
                      float(np.array_equal(W, W_one)))]
            for i, addr in enumerate(sorted(peaks)):
                rows += [("w-step", name, method, setting, f"worker {i} RSS MiB at start",
                          base[addr] / 2**20),
                         ("w-step", name, method, setting, f"worker {i} peak RSS MiB",
                          peaks[addr] / 2**20)]
            _say(f"RESULT w-step {name} | {method} | {case} | {sec:.3f}s "
                 f"(single {sec_single:.3f}s), setup {setup:.2f}s, rel. diff {err:.2e}, "
                 f"same as 1 worker: {np.array_equal(W, W_one)}, peak RSS MiB "
                 + ", ".join(f"{peaks[a] / 2**20:.0f}" for a in sorted(peaks)))
        del data
