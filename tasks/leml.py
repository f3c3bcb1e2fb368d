"""LEML's Prefect steps that learn and score: initial factors, alternate-W, alternate-H,
evaluate, predict, tuning, baselines; and score, the step of ``apply-leml``.

The steps over the rows (load, split, mask, partition, propensities) are in
:mod:`scarce.tasks.leml_data`, the checks of the input files before any step in
:mod:`scarce.tasks.leml_inputs`; both are re-exported here.  Where a run's data lives, and so which
arguments each step is given, is :mod:`scarce.tasks.leml_plan`'s alone.

Each LEML step builds the estimator from the parameters it is given, ``LEML(**params)``, and
calls its step methods (``prepare``, ``start``, ``w_step``, ``h_step``, ``objective``,
``set_factors``): the mathematics, its defaults and its rules live in :mod:`scarce.algorithms.leml`
only.  The estimators are imported inside the steps that use them (they import scikit-learn);
:func:`score` predicts by the factors alone
(:class:`~scarce.algorithms.leml.predict.FactorModel`, the estimator's products), so that
applying a model imports none of it.  ``params`` holds the parameters of the step methods the
task calls
(:func:`task_params`, from the estimator's own :meth:`~scarce.algorithms.leml.LEML.step_params`),
so a step's cache key holds exactly the parameters it reads; a baseline's key holds the
parameters its estimator takes (:func:`baseline_params`).  Each outer iteration's ``W`` and
``H`` are store entries keyed by the previous iteration's, so a run killed at iteration ``t``
finds iterations ``1..t-1`` cached and resumes at ``t``.  The readers are in
:mod:`scarce.tasks.readers`.

:func:`predict` (the training run's test set) and :func:`score` (a stored model on a new file,
the ``apply-leml`` flow) write the same table,
:func:`~scarce.algorithms.leml.predict.predictions_table`: the ``top_k`` labels of every row with
their decision values.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import scipy.sparse as sp

from scarce.algorithms.leml.data import validation_rows
from scarce.algorithms.leml.params import DEFAULTS, TOP_K, step_params
from scarce.algorithms.leml.predict import BATCH_SIZE, FactorModel, predictions_table
from scarce.algorithms.metrics.multilabel import (
    multilabel_scores,
    ndcg_at_k,
    precision_at_k,
    psprecision_at_k,
)
from scarce.tasks.leml_dask.clients import CLIENTS
from scarce.tasks.leml_data import (
    data_client,
    early_split,
    early_split_mask,
    load,
    observe,
    partition,
    partition_files,
    partition_masked,
    propensity,
    split,
    stack,
)
from scarce.tasks.leml_files import (
    check_training_rows,
    in_feature_space,
    named_predictions,
    read_factor,
    read_label_map,
)
from scarce.tasks.leml_inputs import (
    PART_PATTERNS,
    check_inputs,
    check_parts,
    declared_shape,
    input_parts,
    stored_nonzeros,
)
from scarce.tasks.steps import content_only, log_both, step
from scarce.tasks.store.encoding import read_parquet_entry

if TYPE_CHECKING:  # the estimators import scikit-learn: the steps that fit import them
    from scarce.algorithms.leml import LEML

# The steps and checks of the modules beside this one, imported from here by callers
__all__ = ["BASELINES", "PART_PATTERNS", "TOP_K", "alternate_H", "alternate_W", "baseline",
           "baseline_estimator", "baseline_params", "check_inputs", "check_parts",
           "check_training_rows", "collect", "declared_shape", "early_split",
           "early_split_mask", "evaluate", "initialise", "input_parts", "load",
           "model_task_params", "observe", "partition", "partition_files", "partition_masked",
           "predict", "predictions_table", "propensity",
           "release_training_data", "score", "split", "stack", "stored_nonzeros",
           "task_params", "tune", "validation_rows"]



@contextmanager
def _driver_client(cluster: dict | None):
    """Where the steps that drive the solvers run (the start, both half-steps with the
    objective and the validation P@1, the evaluation and the predictions): with
    ``compute.solvers: worker`` (``cluster["solvers"]``) whole on a worker of the W-step's
    cluster, as :func:`_data_client` sends the steps over the data, so that the flow's
    process holds neither the factors nor the solvers' ``d' x k`` vectors; else here (the
    default, ``flow``: a worker lost under a W-step then costs only its blocks, not the
    step)."""
    if not cluster or cluster.get("solvers") != "worker":
        yield None
        return
    with data_client(cluster) as client:
        yield client


@step("leml-tune", inputs=("train", "mask", "validation"), outputs=("table",),
      volatile=("timings",), run_name="tune on held-out rows")
def tune(train: dict, mask, validation: dict, params: dict, grid: list[dict],
         k: int) -> dict:
    """Each setting of ``grid`` (values over ``params``) trained on ``train`` and ``mask``
    from a fresh start, P@``k`` of the ``validation`` rows after each outer iteration, while
    it rises (:meth:`scarce.algorithms.leml.LEML.held_out_pass`): per setting its values, the
    iteration its score peaked at (``best_iteration``), that ``score``, the iterations run and
    why they stopped; ``chosen`` marks the best score (the first in grid order among equals).
    Each setting starts cold, so its score is what a run with its values gives.  ``timings``:
    each setting's seconds."""
    from scarce.algorithms.leml import LEML

    rows, seconds = [], []
    for point in grid:
        model = LEML(**{**params, **point})
        t0 = time.perf_counter()
        scores, reason = model.held_out_pass(train["X"], train["Y"], mask, validation["X"],
                                             validation["Y"], k=k)
        seconds.append(time.perf_counter() - t0)
        best = model.best_iteration(scores)
        rows.append({**point, "best_iteration": best, "score": scores[best - 1],
                     "iterations": len(scores), "stopped": reason})
    table = pd.DataFrame(rows)
    table["chosen"] = table.index == int(np.argmax(table["score"].to_numpy()))
    return {"table": table, "timings": pd.DataFrame({**{c: table[c] for c in grid[0]},
                                                     "seconds": seconds})}


# The training data as the last step prepared it, kept for the next: every W- and H-step of a
# run takes the same store entries, and reading them afresh (with their checksums) and
# preparing them again (with the Gram matrix or its eigendecomposition that the solvers build
# once per data) cost each step about as much as its mathematics.  Store entries are
# content-addressed and never rewritten, so their paths name their content.  One data set at a
# time, its arrays read-only (a step that wrote into them would change the next step's input);
# :func:`release_training_data` drops it when a run's iterations are over.
_PREPARED: dict = {}
_PREPARED_LOCK = threading.Lock()


def _read_only(M) -> None:
    for a in ((M.data, M.indices, M.indptr) if sp.issparse(M) else (M,)):
        if isinstance(a, np.ndarray):
            a.flags.writeable = False


def _prepared(model: LEML, train: dict, mask):
    """``model.prepare`` of the store files ``train["X"]``, ``train["Y"]`` and ``mask`` (a
    file or None), kept until files or preparation differ (see :data:`_PREPARED`)."""
    key = (str(train["X"]), str(train["Y"]), None if mask is None else str(mask),
           np.dtype(model.dtype).str, bool(model.fit_intercept))
    with _PREPARED_LOCK:
        if _PREPARED.get("key") != key:
            _PREPARED.clear()
            X, Y = read_parquet_entry(train["X"]), read_parquet_entry(train["Y"])
            observed = None if mask is None else read_parquet_entry(mask)
            data = model.prepare(X, Y, observed)
            for M in (data.X, data.Xt, data.Y, data.Yt):
                if M is not None:
                    _read_only(M)
            _PREPARED.update(key=key, data=data)
        return _PREPARED["data"]


def release_training_data() -> None:
    """Drop the training data the steps keep between them (:data:`_PREPARED`)."""
    with _PREPARED_LOCK:
        _PREPARED.clear()


def _estimator(params: dict, train: dict | None, mask, partition: list | None = None):
    """``LEML(**params)`` and its training data: prepared from the store files of ``train``
    (``{"X", "Y", ...}``) and ``mask`` (kept for the next step, :func:`_prepared`), or,
    when ``partition`` names the files of the data's row blocks (``{"X", "Y", "mask"}`` per
    block, written by :data:`partition`), described by
    :class:`scarce.tasks.leml_dask.PartitionedData` from their footers only: this process reads
    none of them, the Dask workers read their own blocks."""
    from scarce.algorithms.leml import LEML

    model = LEML(**params)
    if partition is not None:
        from scarce.tasks.leml_dask import PartitionedData

        return model, PartitionedData.from_files(partition, fit_intercept=model.fit_intercept,
                                                 dtype=model.dtype)
    return model, _prepared(model, train, mask)


def _timings(iteration: int, half: str, seconds: float, info: dict,
             where: dict | None = None) -> pd.DataFrame:
    """A half-step's timings row; ``where``: the columns saying where it ran (the W-step's).
    Built in one call: a text column costs each DataFrame built with one, and this runs at
    every half-step."""
    return pd.DataFrame({"iteration": [iteration], "half": [half], "seconds": [seconds],
                         "cg_iter": [int(info.get("cg_iter", 0))],
                         **{name: [value] for name, value in (where or {}).items()}})


@step("leml-init", paths=("train", "mask", "partition"), outputs=("W", "H"),
      where=("cluster", _driver_client), run_name="initial factors", write_behind=True)
def initialise(train: dict | None, mask, params: dict, partition: list | None = None,
               row_blocks: int | None = None, cluster: dict | None = None) -> dict:
    """The starting factors, :meth:`scarce.algorithms.leml.LEML.start`: W = 0 and H ~ N(0, 1/k),
    or the squared-loss start of a margin loss (``squared_init_iter`` alternating squared-loss
    iterations).  With ``partition`` (the row-block files, see :func:`_estimator`) this
    process reads only their shapes; the squared-loss start then takes its products and sums
    over the ``row_blocks`` row blocks where ``cluster`` says, as
    :func:`alternate_W` and :func:`alternate_H` do (a random start uses neither)."""
    model, data = _estimator(params, train, mask, partition)
    if not model.squared_start():
        row_blocks = None
    with CLIENTS.backend(data, row_blocks, cluster, model.rank) as backend:
        _say_where(backend, f"squared-loss start ({model.squared_init_iter} iterations)")
        W, H = model.start(data, backend=backend)
    return {"W": W, "H": H}


def _say_where(backend, what: str) -> None:
    """Log where ``what`` (a step's work on ``backend``'s row blocks) runs; nothing for None."""
    if backend is not None:
        where = _where(backend)
        log_both(logging.INFO, "%s on the Dask cluster at %s: %d row blocks on %d workers",
                 what, where["scheduler"], len(backend.bounds), where["workers"])


def _where(backend) -> dict:
    """The W-step's place, for its timings: the scheduler address and the number of workers
    (empty and 0 in this process)."""
    if backend is None:
        return {"scheduler": "", "workers": 0}
    return {"scheduler": str(backend.client.scheduler.address),
            "workers": len(backend.workers)}


@step(
    "leml-alternate-W",
    write_behind=True,
    inputs=("W", "H"),
    paths=("train", "mask", "partition"),
    outputs=("W",),
    volatile=("timings",),
    where=("cluster", _driver_client),
    run_name="alternate-W iter={iteration}",
)
def alternate_W(
    train: dict | None, mask, W: np.ndarray, H: np.ndarray, iteration: int, params: dict,
    row_blocks: int | None, cluster: dict | None = None, partition: list | None = None,
) -> dict:
    """One W-step with H fixed, :meth:`scarce.algorithms.leml.LEML.w_step`.

    ``row_blocks``: None (this process, the whole data) or the number of row blocks of X over
    which the gradient and Hessian-vector products run (any number of workers gives the same
    W bit for bit).  ``partition`` (the training data's row blocks, in place of ``train`` and
    ``mask``): the workers read them, this process reads none (:func:`_estimator`).
    ``cluster`` (a runtime parameter: not in the key) says where
    (:meth:`scarce.tasks.leml_dask.clients.DaskClients.backend`); ``timings`` records where it ran
    (``scheduler``, ``workers``).
    """
    model, data = _estimator(params, train, mask, partition)
    t0 = time.perf_counter()
    with CLIENTS.backend(data, row_blocks, cluster, model.rank) as backend:
        where = _where(backend)
        _say_where(backend, f"W-step {iteration}")
        W, info = model.w_step(data, W, H, backend=backend)
    timings = _timings(iteration, "W", time.perf_counter() - t0, info, where)
    return {"W": W, "timings": timings}


@step(
    "leml-alternate-H",
    write_behind=True,
    inputs=("W", "H", "validation"),
    paths=("train", "mask", "partition", "validation_partition"),
    outputs=("H", "trace"),
    volatile=("timings",),
    where=("cluster", _driver_client),
    run_name="alternate-H iter={iteration}",
)
def alternate_H(
    train: dict | None, mask, W: np.ndarray, H: np.ndarray, validation: dict | None,
    iteration: int, params: dict, row_blocks: int | None = None, cluster: dict | None = None,
    partition: list | None = None, validation_partition: list | None = None,
) -> dict:
    """One H-step with W fixed (:meth:`scarce.algorithms.leml.LEML.h_step`), then the iteration's
    objective and validation P@1.

    ``row_blocks``: None (this process, on the whole data) or the number of row blocks (the
    W-step's) over which the H-step's sums are taken, for every loss
    and H-step solver (:func:`scarce.algorithms.leml.h_step.update_H_by_blocks`,
    :func:`~scarce.algorithms.leml.h_step.update_H_bound_by_blocks`,
    :func:`~scarce.algorithms.leml.h_step.update_H_newton_by_blocks`; the same bits for any number
    of workers, equal to the whole-data H-step up to rounding).  ``cluster`` (runtime, not in
    the key) says where, as for :func:`alternate_W`; the objective's loss term is then summed
    over the same blocks (:func:`scarce.algorithms.leml.objective.objective_by_blocks`).  With
    ``partition`` in place of ``train`` and ``mask`` (as for :func:`alternate_W`) this
    process reads none of the training data.  The validation P@1 is computed here on the
    whole ``validation`` set or, given its row blocks' files in ``validation_partition``
    (the Dask runner), on the workers as the test metrics are
    (:func:`scarce.tasks.leml_dask.evaluate_on_blocks`: the same counts, so the same P@1).
    """
    model, data = _estimator(params, train, mask, partition)
    t0 = time.perf_counter()
    with CLIENTS.backend(data, row_blocks, cluster, model.rank) as backend:
        _say_where(backend, f"H-step {iteration}")
        H, info = model.h_step(data, W, H, backend=backend)
        seconds = time.perf_counter() - t0
        obj = model.objective(data, W, H, backend=backend)
    val_p1 = float("nan")
    if validation is not None and validation["X"].shape[0] > 0:
        top = model.set_factors(W, H).predict_top_k(validation["X"], 1)
        val_p1 = precision_at_k(validation["Y"], top, ks=(1,))[1]
    elif validation_partition:
        from scarce.tasks.leml_dask import evaluate_on_blocks

        with CLIENTS.client(cluster) as client:
            val_p1 = evaluate_on_blocks(client, validation_partition, W, H, params,
                                        BATCH_SIZE, ks=(1,))["precision@1"]
    trace = pd.DataFrame(
        {"iteration": [iteration], "objective": [obj], "validation_p_at_1": [val_p1]}
    )
    return {"H": H, "trace": trace, "timings": _timings(iteration, "H", seconds, info)}


def _metrics_table(scores: dict, dataset: str, method: str) -> pd.DataFrame:
    return pd.DataFrame({"dataset": dataset, "method": method, "metric": list(scores),
                         "value": list(scores.values())})


def _test_scores(model, test: dict, batch_size: int, inv_propensity: np.ndarray) -> dict:
    """P@1/3/5, Hamming loss, per-instance AUC, nDCG@1/3/5 and PSP@1/3/5 (by the training
    labels' ``inv_propensity``) of a fitted model on the test set."""
    return multilabel_scores(
        test["Y"],
        lambda s, e: model.decision_function(test["X"][s:e]),
        threshold=model.threshold_,
        batch_size=batch_size,
        inv_propensity=inv_propensity,
    )


@step(
    "leml-evaluate",
    version="2",
    inputs=("test", "W", "H", "traces", "timings", "propensity"),
    paths=("partition",),
    outputs=("metrics",),
    volatile=("convergence",),
    where=("cluster", _driver_client),
    run_name="evaluate",
)
def evaluate(
    test: dict | None, W: np.ndarray, H: np.ndarray, traces: list, timings: list,
    propensity: np.ndarray, dataset: str, method: str, params: dict, batch_size: int,
    partition: list | None = None, cluster: dict | None = None,
) -> dict:
    """Test metrics (P@1/3/5, Hamming loss, per-instance AUC, nDCG@1/3/5 and PSP@1/3/5 by
    the training labels' inverse propensities ``propensity``, :func:`propensity`) of the
    factors, predicted by :meth:`scarce.algorithms.leml.LEML.set_factors`, and the convergence
    table.

    ``test`` (the whole test set, scored here batch by batch) or ``partition`` (the Dask
    runner of the W-step): the files of the test set's row blocks, each read and scored on
    a worker of the W-step's cluster (``cluster``, runtime, not in the key), none read here
    (:func:`scarce.tasks.leml_dask.evaluate_on_blocks`; precision@k and the Hamming loss equal to
    the last bit, the AUC to rounding).
    """
    if partition is None:
        from scarce.algorithms.leml import LEML

        scores = _test_scores(LEML(**params).set_factors(W, H), test, batch_size, propensity)
    else:
        from scarce.tasks.leml_dask import evaluate_on_blocks

        CLIENTS.release_kept()  # the fit is over: the workers score without its blocks
        with CLIENTS.client(cluster) as client:
            scores = evaluate_on_blocks(client, partition, W, H, params, batch_size,
                                        inv_propensity=propensity)
    metrics = _metrics_table(scores, dataset, method)
    conv = pd.concat(traces, ignore_index=True)
    secs = pd.concat(timings, ignore_index=True).pivot_table(
        index="iteration", columns="half", values="seconds", aggfunc="sum"
    )
    conv["seconds"] = conv["iteration"].map(secs.sum(axis=1)).to_numpy()
    return {"metrics": metrics, "convergence": conv}


@step("leml-predict", version="2", inputs=("test", "W", "H", "labels"), paths=("partition",),
      where=("cluster", _driver_client), run_name="predict top {top_k}")
def predict(test: dict | None, W: np.ndarray, H: np.ndarray, labels: pd.DataFrame,
            params: dict, top_k: int, batch_size: int, partition: list | None = None,
            cluster: dict | None = None) -> pd.DataFrame:
    """The test set's top labels by the final factors, named by the training file's label
    map ``labels`` (:func:`predictions_table`, :func:`~scarce.tasks.leml_files.named_predictions`):
    of
    ``test``, here, or (the Dask runner) of the test set's row blocks ``partition``, each
    block predicted on a worker of ``cluster`` (runtime, not in the key) and none read here
    (:func:`scarce.tasks.leml_dask.predict_on_blocks`, the same table end to end)."""
    if partition is None:
        from scarce.algorithms.leml import LEML

        model = LEML(**params).set_factors(W, H)
        return named_predictions(predictions_table(model, test["X"], top_k, batch_size),
                                 labels)
    from scarce.tasks.leml_dask import predict_on_blocks

    CLIENTS.release_kept()  # the fit is over: the workers predict without its blocks
    with CLIENTS.client(cluster) as client:
        return named_predictions(
            predict_on_blocks(client, partition, W, H, params, top_k, batch_size), labels)


@step("leml-score", version="3", inputs=("X", "Y"),
      # X and Y are the file as load read it (its refs); the file itself is named in errors
      # only, and the model's files are store-format Parquet: their bytes are all they hold.
      files=dict.fromkeys(("path", "W", "H", "labels", "propensity"), content_only),
      outputs=("predictions", "metrics"), run_name="score {source}")
def score(X: sp.csr_matrix, Y: sp.csr_matrix, path: Path, W: Path, H: Path, labels: Path,
          format: str, shapes: dict, params: dict, top_k: int, batch_size: int, method: str,
          source: str, propensity: Path | None = None) -> dict:
    """The ``top_k`` labels of every row of a new file by a stored model (``apply-leml``).

    ``X`` and ``Y`` are the file ``path`` as :func:`load` read it; ``W`` and ``H`` the
    model's factor files, of the ``shapes`` its ``model.json`` gives, ``labels`` its label
    map (the predictions name their labels, :func:`~scarce.tasks.leml_files.named_predictions`);
    ``params`` the estimator's prediction parameters (:func:`task_params`, or
    :func:`model_task_params` of the model's ``model.json``); the rows are scored by the
    factors alone (:class:`~scarce.algorithms.leml.predict.FactorModel`).  ``X`` is put in the
    model's feature space (:func:`~scarce.tasks.leml_files.in_feature_space`).  ``metrics``: the
    rows
    scored and, when the file has labels in the model's label space, P@k and nDCG@k for k = 1,
    3, 5 (those ``k <= top_k``), and PSP@k by the training labels' inverse propensities when
    the model has them (``propensity``: a model written before them has none), named
    ``method`` on the dataset ``source`` (the file's name: the key holds the file's hash, not
    its path).
    """
    # The factors' own products and top-k (the estimator's, bit for bit), without the
    # estimator: its scikit-learn costs an apply run more than scoring a file.  Its input
    # checks are the readers' here (every reader of ``load`` refuses a value that is not
    # finite), and X is put in the factors' dtype as those checks put it.
    model = FactorModel(read_factor(W, shapes["W"]), read_factor(H, shapes["H"]),
                        params["fit_intercept"])
    X = in_feature_space(X, model.n_features_in_, path, format)
    X = sp.csr_matrix(X, dtype=model.W.dtype)
    predictions = named_predictions(predictions_table(model, X, top_k, batch_size),
                                    read_label_map(labels, model.n_labels_))
    scores = {"rows": float(X.shape[0])}
    ks = [k for k in (1, 3, 5) if k <= min(top_k, model.n_labels_)]
    if ks and Y.shape[1] == model.n_labels_ and Y.nnz:  # (so X has rows)
        top = predictions["label"].to_numpy().reshape(X.shape[0], -1)
        scores.update({f"precision@{k}": v for k, v in precision_at_k(Y, top, ks=ks).items()})
        scores.update({f"ndcg@{k}": v for k, v in ndcg_at_k(Y, top, ks=ks).items()})
        if propensity is not None:
            weights = read_factor(propensity, (model.n_labels_,))
            scores.update({f"psp@{k}": v
                           for k, v in psprecision_at_k(Y, top, weights, ks=ks).items()})
    return {"predictions": predictions, "metrics": _metrics_table(scores, source, method)}


# The estimator's step methods each LEML task calls (LEML.step_params names them), by task
# name (a served flow may hold copies of the step objects).
CALLS = {
    early_split.name: ("early_stopping_split",),
    early_split_mask.name: ("early_stopping_split",),
    initialise.name: ("start",),
    alternate_W.name: ("w_step",),
    alternate_H.name: ("h_step", "objective", "predict"),
    evaluate.name: ("predict",),
    predict.name: ("predict",),
    score.name: ("predict",),
}


def task_params(model: LEML, task) -> dict:
    """The parameters of ``model`` that ``task`` reads: those of the step methods it calls
    (what :meth:`scarce.algorithms.leml.LEML.step_params` gives for each), which are what its
    cache key holds."""
    return model_task_params(model.get_params(deep=False), task)


def model_task_params(given: Mapping, task) -> dict:
    """:func:`task_params` of ``LEML(**given)`` without building the estimator (which
    imports scikit-learn): :func:`scarce.algorithms.leml.params.step_params`, which the
    estimator's :meth:`step_params` calls, of ``given`` over the estimator's defaults.  What
    the ``apply-leml`` flow keys its score steps by, from ``model.json``."""
    params = {**DEFAULTS, **given}
    return {name: value for method in CALLS[task.name]
            for name, value in step_params(params, method).items()}


# The baselines: name -> (the name of its estimator in scarce.algorithms.leml, the parameters
# fixed for it).  Named, not imported: the estimators import scikit-learn, which only the
# steps that fit them need (:func:`baseline_estimator`).
BASELINES = {
    "br-ridge": ("BinaryRelevance", {"model": "ridge"}),
    "br-logistic": ("BinaryRelevance", {"model": "logistic"}),
    "closed-form": ("ClosedFormLowRank", {"fit_intercept": True}),
}


def baseline_estimator(method: str) -> tuple[type, dict]:
    """The estimator class of baseline ``method`` and the parameters fixed for it."""
    import scarce.algorithms.leml as methods  # (its names are imported on first use)

    name, fixed = BASELINES[method]
    return getattr(methods, name), fixed


def baseline_params(method: str, **offered) -> dict:
    """Of the ``offered`` parameters, those the estimator of baseline ``method`` takes (the
    names in its signature, less the fixed ones): what its ``leml-baseline`` step is keyed
    by, so that BR ridge is not refitted when only LEML's ``rank`` changes (the closed form
    takes a rank, Binary Relevance does not)."""
    estimator, fixed = baseline_estimator(method)
    names = set(inspect.signature(estimator).parameters) - set(fixed)
    return {name: value for name, value in offered.items() if name in names}


@step("leml-baseline", version="2", inputs=("train", "mask", "test", "propensity"),
      run_name="baseline {method}")
def baseline(
    train: dict, mask, test: dict, propensity: np.ndarray, method: str, params: dict,
    dataset: str, batch_size: int
) -> pd.DataFrame:
    """Fit a baseline (``BASELINES[method]`` with ``params``) on the same observed entries
    and score it on the test set as :func:`evaluate` scores LEML (PSP@k by the same
    ``propensity``)."""
    estimator, fixed = baseline_estimator(method)
    model = estimator(**fixed, **params).fit(train["X"], train["Y"], mask)
    return _metrics_table(_test_scores(model, test, batch_size, propensity), dataset, method)


@step("leml-collect", inputs=("tables",), run_name="collect metrics")
def collect(tables: list) -> pd.DataFrame:
    """One long metrics table from several (an empty one from none)."""
    if not tables:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in
                             (("dataset", str), ("method", str), ("metric", str),
                              ("value", float))})
    return pd.concat(tables, ignore_index=True)
