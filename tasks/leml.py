"""LEML's Prefect steps: load, split, mask, initialise, alternate-W, alternate-H, evaluate.

Thin wrappers: the mathematics is in :mod:`algorithms.leml`, the readers in
:mod:`tasks.readers`.  Each outer iteration's ``W`` and ``H`` are store entries
keyed by the previous iteration's, so a run killed at iteration ``t`` finds
iterations ``1..t-1`` cached and resumes at ``t``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.preprocessing import normalize as sk_normalize

import algorithms.leml.losses as leml_losses
import algorithms.leml.model as leml_model
import algorithms.metrics.multilabel as ml_metrics
from algorithms.leml.baselines import BinaryRelevance, ClosedFormLowRank
from algorithms.leml.model import LEMLData, objective, prepare_data, update_H, update_W
from algorithms.metrics.multilabel import multilabel_scores
from tasks.errors import InputError
from tasks.readers.arff import read_arff
from tasks.readers.xmc import read_xmc
from tasks.steps import step
from tasks.store import read_parquet_entry

DTYPES = {"float32": np.float32, "float64": np.float64}


def _read_parquet_xy(path: Path, dtype) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """``<name>.X.parquet`` and ``<name>.Y.parquet``: sparse (row, col, value) tables as
    the result store writes them (path names either file)."""
    base = str(path).removesuffix(".parquet").removesuffix(".X").removesuffix(".Y")
    X = read_parquet_entry(Path(base + ".X.parquet"))
    Y = read_parquet_entry(Path(base + ".Y.parquet"))
    if not (sp.issparse(X) or isinstance(X, np.ndarray)) or not sp.issparse(Y):
        raise InputError("expected a sparse or dense X and a sparse Y", path=path)
    return sp.csr_matrix(X, dtype=dtype), sp.csr_matrix(Y)


@step("leml-load", files=("path",), outputs=("X", "Y"), run_name="load {path.name}")
def load(
    path: Path, format: str, dtype: str, n_labels: int | None = None, normalize: str = "none"
) -> dict:
    """Read a multi-label dataset: Extreme Classification text, Mulan ARFF or Parquet.

    ``normalize="l2"`` scales every row of X to unit Euclidean norm (a per-row
    operation, so train and test are treated alike without shared statistics).
    """
    dt = DTYPES[dtype]
    if format == "xmc":
        X, Y = read_xmc(path, dtype=dt)
    elif format == "arff":
        X, Y, _, _ = read_arff(path, n_labels=n_labels, dtype=dt)
    elif format == "parquet":
        X, Y = _read_parquet_xy(path, dt)
    else:
        raise InputError(f"unknown format {format!r} (xmc, arff, parquet)", path=path)
    X = sp.csr_matrix(X, dtype=dt)
    if normalize == "l2":
        X = sk_normalize(X, norm="l2").astype(dt)
    elif normalize != "none":
        raise InputError(f"unknown normalize {normalize!r} (none, l2)", key="dataset.normalize")
    return {"X": X, "Y": sp.csr_matrix(Y, dtype=np.float32)}


@step("leml-split", inputs=("train",), outputs=("X_fit", "Y_fit", "X_val", "Y_val"))
def split(train: dict, validation_fraction: float, seed: int) -> dict:
    """Hold out a seeded random part of the training set for validation."""
    X, Y = train["X"], train["Y"]
    n = X.shape[0]
    n_val = int(round(validation_fraction * n))
    rng = np.random.default_rng(np.random.SeedSequence([seed, 101]))
    val = np.zeros(n, dtype=bool)
    val[rng.choice(n, size=n_val, replace=False)] = True
    fit_rows, val_rows = np.flatnonzero(~val), np.flatnonzero(val)
    return {"X_fit": X[fit_rows], "Y_fit": Y[fit_rows], "X_val": X[val_rows], "Y_val": Y[val_rows]}


@step("leml-mask", inputs=("Y",), run_name="mask observed={observed_fraction}")
def observe(Y: sp.csr_matrix, observed_fraction: float, seed: int) -> sp.csr_matrix:
    """The observed set Omega: each entry of the n x L label matrix kept with the given
    probability, uniformly at random (the paper's missing-label experiment)."""
    n, n_labels = Y.shape
    rng = np.random.default_rng(np.random.SeedSequence([seed, 202]))
    rows, cols = [], []
    block = max(1, (1 << 22) // max(n_labels, 1))
    for start in range(0, n, block):
        stop = min(start + block, n)
        keep = rng.random((stop - start, n_labels)) < observed_fraction
        r, c = np.nonzero(keep)
        rows.append(r + start)
        cols.append(c)
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    mask = sp.csr_matrix((np.ones(r.size, dtype=bool), (r, c)), shape=(n, n_labels))
    mask.sort_indices()
    return mask


@step("leml-init", inputs=("train",), outputs=("W", "H"))
def initialise(train: dict, rank: int, fit_intercept: bool, dtype: str, seed: int) -> dict:
    """W = 0 and H ~ N(0, 1/k), as :class:`algorithms.leml.model.LEML` starts."""
    n_features = train["X"].shape[1] + int(fit_intercept)
    W, H = leml_model.initial_factors(n_features, train["Y"].shape[1], rank, DTYPES[dtype], seed)
    return {"W": W, "H": H}


@step("leml-margin-start", inputs=("train", "mask", "H"), outputs=("W", "H"))
def margin_start(
    train: dict,
    mask,
    H: np.ndarray,
    lam: float,
    fit_intercept: bool,
    dtype: str,
    squared_init_iter: int,
    cg_max_iter: int,
    cg_tol: float,
) -> dict:
    """Starting factors of a margin loss from squared-loss iterations at rank k - 1
    (:func:`algorithms.leml.model.squared_margin_start`, as ``LEML(squared_init_iter=...)``);
    ``H`` is the rank-k initial H, of which the first k - 1 columns are used."""
    data = _data(train, mask, fit_intercept, dtype)
    W0, H0 = leml_model.squared_margin_start(data, H[:, : H.shape[1] - 1], lam,
                                             squared_init_iter, cg_max_iter=cg_max_iter,
                                             cg_tol=cg_tol)
    return {"W": W0, "H": H0}


# Dask clients of the distributed W-step, kept for the life of this process so that every
# outer iteration reuses one cluster: (workers, address) -> (cluster or None, client).
_W_CLUSTERS: dict[tuple, tuple] = {}


def _close_w_clusters() -> None:
    for cluster, client in _W_CLUSTERS.values():
        client.close()
        if cluster is not None:
            cluster.close()
    _W_CLUSTERS.clear()


def _w_step_client(workers: int, address: str | None):
    """The Dask client of the distributed W-step.

    ``address``: the cluster there.  Otherwise a ``LocalCluster`` of ``workers``
    single-threaded worker processes (one BLAS thread each), started on first use and kept
    until this process exits.
    """
    import atexit

    key = (workers, address)
    if key not in _W_CLUSTERS:
        from distributed import Client, LocalCluster

        if address:
            try:
                _W_CLUSTERS[key] = (None, Client(address, timeout="30s"))
            except OSError as exc:
                raise InputError(f"no Dask scheduler at {address} ({exc})",
                                 key="model.w_step.address") from None
        else:
            pins = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                     "MKL_NUM_THREADS")}
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None, env=pins)
            client = Client(cluster)
            client.wait_for_workers(workers)
            _W_CLUSTERS[key] = (cluster, client)
        if len(_W_CLUSTERS) == 1:
            atexit.register(_close_w_clusters)
    return _W_CLUSTERS[key][1]


def _in_dask_worker() -> bool:
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return False
    return True


def _dask_update_W(data: LEMLData, H, lam, loss, W0, w_step: dict, **solver):
    """:meth:`tasks.leml_dask.DaskWStep.update_W`: the row blocks scattered once for this
    W-step, each CG iteration sending only the direction.  Inside a task of the Dask task
    runner (no address given) the blocks go to the cluster running the flow, through
    ``worker_client`` (the task leaves its worker's thread pool while it waits)."""
    from contextlib import nullcontext

    from tasks.leml_dask import DaskWStep

    if not w_step["address"] and _in_dask_worker():
        from distributed import worker_client

        connect = worker_client()
    else:
        connect = nullcontext(_w_step_client(w_step["workers"], w_step["address"]))
    with connect as client, DaskWStep(client, data, w_step["blocks"]) as step_:
        return step_.update_W(H, lam, loss, W0=W0, return_info=True, **solver)


def _data(train: dict, mask, fit_intercept: bool, dtype: str) -> LEMLData:
    return prepare_data(
        train["X"], train["Y"], mask, fit_intercept=fit_intercept, dtype=DTYPES[dtype]
    )


@step(
    "leml-alternate-W",
    inputs=("train", "mask", "W", "H"),
    outputs=("W", "timings"),
    volatile=("timings",),
    run_name="alternate-W iter={iteration}",
)
def alternate_W(
    train: dict,
    mask,
    W: np.ndarray,
    H: np.ndarray,
    iteration: int,
    lam: float,
    loss: str,
    fit_intercept: bool,
    dtype: str,
    cg_max_iter: int,
    cg_tol: float,
    newton_max_iter: int,
    w_step: dict | None = None,
    w_solver: str = "tron",
) -> dict:
    """One W-step with H fixed (CG with the fast Hessian-vector product).

    ``w_step``: ``None`` (this process) or ``{"blocks", "workers", "address"}`` to run the
    gradient and Hessian-vector products on Dask over row blocks of X
    (:class:`tasks.leml_dask.DaskWStep`; any number of workers gives the same W bit for bit).
    ``w_solver``: ``"tron"`` or ``"bound"`` (logistic / squared hinge, this process only),
    see :func:`algorithms.leml.model.update_W`.
    """
    data = _data(train, mask, fit_intercept, dtype)
    t0 = time.perf_counter()
    solver = {"cg_max_iter": cg_max_iter, "cg_tol": cg_tol, "newton_max_iter": newton_max_iter}
    if w_step is None:
        W, info = update_W(data, H, lam, loss, W0=W, return_info=True, w_solver=w_solver,
                           **solver)
    elif w_solver != "tron":
        raise InputError(f"w_solver {w_solver!r} runs on one process only, not on Dask")
    else:
        W, info = _dask_update_W(data, H, lam, loss, W, w_step, **solver)
    seconds = time.perf_counter() - t0
    timings = pd.DataFrame(
        {
            "iteration": [iteration],
            "half": ["W"],
            "seconds": [seconds],
            "cg_iter": [int(info["cg_iter"])],
        }
    )
    return {"W": W, "timings": timings}


@step(
    "leml-alternate-H",
    inputs=("train", "mask", "W", "H", "validation"),
    outputs=("H", "trace", "timings"),
    volatile=("timings",),
    run_name="alternate-H iter={iteration}",
)
def alternate_H(
    train: dict,
    mask,
    W: np.ndarray,
    H: np.ndarray,
    validation: dict | None,
    iteration: int,
    lam: float,
    loss: str,
    fit_intercept: bool,
    dtype: str,
    newton_max_iter: int,
    h_solver: str = "direct",
    cg_max_iter: int = 25,
    cg_tol: float = 1e-3,
) -> dict:
    """One H-step with W fixed (batched k x k solves, or per-label CG for the margin
    losses with ``h_solver="cg"``), then the iteration's objective and validation P@1."""
    data = _data(train, mask, fit_intercept, dtype)
    t0 = time.perf_counter()
    H, info = update_H(data, W, lam, loss, H0=H, newton_max_iter=newton_max_iter,
                       h_solver=h_solver, cg_max_iter=cg_max_iter, cg_tol=cg_tol,
                       return_info=True)
    seconds = time.perf_counter() - t0
    obj = objective(data, W, H, lam, loss)
    val_p1 = float("nan")
    if validation is not None and validation["X"].shape[0] > 0:
        top = leml_model.top_k_linear(validation["X"], W, H, 1, fit_intercept)
        val_p1 = ml_metrics.precision_at_k(validation["Y"], top, ks=(1,))[1]
    trace = pd.DataFrame(
        {"iteration": [iteration], "objective": [obj], "validation_p_at_1": [val_p1]}
    )
    timings = pd.DataFrame(
        {"iteration": [iteration], "half": ["H"], "seconds": [seconds],
         "cg_iter": [int(info.get("cg_iter", 0))]}
    )
    return {"H": H, "trace": trace, "timings": timings}


@step(
    "leml-evaluate",
    inputs=("test", "W", "H", "traces", "timings"),
    outputs=("metrics", "convergence"),
    volatile=("convergence",),
)
def evaluate(
    test: dict,
    W: np.ndarray,
    H: np.ndarray,
    traces: list,
    timings: list,
    dataset: str,
    method: str,
    loss: str,
    fit_intercept: bool,
    batch_size: int,
) -> dict:
    """Test metrics (P@1/3/5, Hamming loss, per-instance AUC) and the convergence table."""
    threshold = leml_losses.get_loss(loss).threshold

    def score_rows(start: int, stop: int) -> np.ndarray:
        return leml_model.scores_linear(test["X"][start:stop], W, H, fit_intercept)

    scores = multilabel_scores(test["Y"], score_rows, threshold=threshold, batch_size=batch_size)
    metrics = pd.DataFrame(
        {
            "dataset": dataset,
            "method": method,
            "metric": list(scores),
            "value": list(scores.values()),
        }
    )
    conv = pd.concat(traces, ignore_index=True)
    secs = pd.concat(timings, ignore_index=True).pivot_table(
        index="iteration", columns="half", values="seconds", aggfunc="sum"
    )
    conv["seconds"] = conv["iteration"].map(secs.sum(axis=1)).to_numpy()
    return {"metrics": metrics, "convergence": conv}


@step(
    "leml-baseline",
    inputs=("train", "mask", "test"),
    run_name="baseline {method}",
)
def baseline(
    train: dict,
    mask,
    test: dict,
    method: str,
    alpha: float,
    rank: int | None,
    dataset: str,
    batch_size: int,
) -> pd.DataFrame:
    """Fit a baseline on the same observed entries and score it on the test set."""
    if method == "br-ridge":
        model = BinaryRelevance(model="ridge", alpha=alpha)
    elif method == "br-logistic":
        model = BinaryRelevance(model="logistic", alpha=alpha)
    elif method == "closed-form":
        if mask is not None:
            raise InputError(
                "the closed-form baseline needs fully observed labels", key="baselines"
            )
        model = ClosedFormLowRank(rank=rank, alpha=alpha, fit_intercept=True)
    else:
        raise InputError(f"unknown baseline {method!r}", key="baselines")
    model.fit(train["X"], train["Y"], mask)
    scores = multilabel_scores(
        test["Y"],
        lambda s, e: model.decision_function(test["X"][s:e]),
        threshold=model.threshold_,
        batch_size=batch_size,
    )
    return pd.DataFrame(
        {
            "dataset": dataset,
            "method": method,
            "metric": list(scores),
            "value": list(scores.values()),
        }
    )


@step("leml-collect", inputs=("tables",))
def collect(tables: list) -> pd.DataFrame:
    """One long metrics table from several."""
    return pd.concat(tables, ignore_index=True)
