"""The LEML flow: load -> (alternate-W -> alternate-H) x T -> evaluate -> predict.

Yu, Jain, Kar and Dhillon, "Large-scale Multi-label Learning with Missing
Labels", ICML 2014.  The flow drives the step methods of :class:`algorithms.leml.LEML`,
one task per step with the store between them (``LEML.fit`` is the same loop in one
process).  The config schema is :mod:`flows.leml_config`: the model's options and their
defaults are the estimator's (:class:`~flows.leml_config.ModelConfig`), the bundled values
are in ``configs/leml.yaml``.  With ``compute.backend: dask`` the training
data is first written as ``compute.row_blocks`` row blocks (``leml-partition``), from which each
Dask worker reads its own blocks.

Every run names its outputs (:func:`name_outputs`): ``outputs/predictions.parquet`` (the test
set's top labels) and ``outputs/model/`` (the factors, the index maps, the config and
``model.json``), which the ``apply-leml`` flow (:mod:`flows.apply_leml`) applies to new data.
"""

from __future__ import annotations

import json
import logging

import pandas as pd
from prefect import flow
from prefect.utilities.annotations import unmapped

from scarce.algorithms.leml import LEML, row_block_bounds
from scarce.flows import plots
from scarce.flows.apply import MODEL_DIR, model_document
from scarce.flows.config import check_input_paths
from scarce.flows.leml_config import (
    BACKENDS,
    DEFAULTS_CHOSEN_ON,
    MIN_TUNING_ROWS,
    ComputeConfig,
    DatasetConfig,
    LemlConfig,
    ModelConfig,
    TableConfig,
    TuneConfig,
    VectorizerConfig,
    check_data,
)
from scarce.flows.published import LEML_XC
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions, lead_line, markdown_table
from scarce.tasks.errors import InputError
from scarce.tasks.leml import (
    BASELINES,
    TOP_K,
    alternate_H,
    alternate_W,
    baseline,
    baseline_params,
    check_parts,
    check_training_rows,
    collect,
    early_split,
    early_split_mask,
    evaluate,
    initialise,
    load,
    observe,
    partition,
    partition_masked,
    predict,
    propensity,
    release_training_data,
    split,
    stack,
    task_params,
    tune,
)
from scarce.tasks.leml_dask import CLIENTS
from scarce.tasks.leml_files import MODEL_FILES, MODEL_VERSION, label_file
from scarce.tasks.leml_table import load_table, table_space
from scarce.tasks.steps import cached_file_sha256, log_both

# The config schema lives in flows.leml_config (a command checks a config without importing
# this flow); its names are read here too.
__all__ = ["BACKENDS", "DEFAULTS_CHOSEN_ON", "MIN_TUNING_ROWS", "ComputeConfig", "DatasetConfig",
           "LemlConfig", "ModelConfig", "TableConfig", "TuneConfig", "VectorizerConfig",
           "check_data", "leml_flow"]

PUBLISHED = LEML_XC


@flow(name="leml", flow_run_name=namer("leml"))
def leml_flow(config: LemlConfig, options: RunOptions | None = None) -> dict:
    """load -> (alternate-W -> alternate-H) x T -> evaluate -> predict: the steps of
    :class:`algorithms.leml.LEML` as tasks, with the optional validation split, missing-label
    mask and baselines; the model and the test set's predictions as named outputs.  The Dask
    clients the run opened and the row blocks it kept are closed when it ends, however it
    ends (:data:`tasks.leml_dask.CLIENTS`)."""
    try:
        return _leml_run(config, options)
    finally:
        CLIENTS.close()


def _leml_run(config: LemlConfig, options: RunOptions | None) -> dict:
    """The body of :func:`leml_flow`."""
    check_input_paths(config)  # a missing input refused before any step (a rerun, a grid point)
    ctx = RunContext.open("leml", config, options)
    d, m, seed, batch = config.dataset, config.model, config.seed, config.batch_size
    compute = config.compute
    model = m.estimator(random_state=seed)
    # "auto" resolved once, logged with any setting that turns off what another relies on;
    # the steps and their keys then hold the values they run with.
    model.set_params(**model.resolve_params(distributed=compute.blocked))
    cluster = compute.cluster(ctx)
    # With the dask backend the steps over the data (loading, masks, partitions) run on the
    # cluster too: the flow's process holds none of it.
    data_cluster = cluster if compute.backend == "dask" else None
    files = check_data(config)
    on_test = d.evaluate_on == "test"
    train_parts = _load_parts(ctx, d, m, files["train"], data_cluster,
                              labelled=len(files["train"]) == 1)
    # The rows to fit, counted from the heads above where they tell (XC, Parquet); an ARFF
    # file or a table tells only once read: checked here, before anything is learned.
    check_training_rows(sum(ctx.store.shape(p["X"])[0] for p in train_parts),
                        d.validation_fraction if len(train_parts) == 1 else 0.0,
                        ctx.path(d.train))
    # The test set's metrics need its labels: a test file without any is refused as it is
    # read; the parts of a folder once all are (a part alone may have none).
    test_parts = (_load_parts(ctx, d, m, files["test"], data_cluster,
                              labelled=len(files["test"]) == 1) if on_test else None)
    for which, parts in (("train", train_parts), ("test", test_parts)):
        if parts is not None and len(parts) > 1:
            check_parts([ctx.store.path(p["X"]) for p in parts],
                        [ctx.store.path(p["Y"]) for p in parts], ctx.path(getattr(d, which)),
                        key=f"dataset.{which}")
    train_file = train_parts[0]  # its index maps name the model's columns
    folder = len(train_parts) > 1 or ctx.path(d.train).is_dir()
    blocked = compute.blocked
    # The whole training set in this process is needed by the local backend and the
    # baselines; else the steps take the files of the row blocks instead and read none of
    # the data (the workers do).
    tuning = _tunes(ctx, config, files["train"], folder,
                    sum(ctx.store.shape(p["X"])[0] for p in train_parts))
    whole = not blocked or bool(config.baselines) or tuning
    data, validation, blocks = _training(ctx, config, train_parts, folder, whole, data_cluster)
    if not on_test:  # the metrics and predictions of the held-out rows; test is not read
        test_parts = [validation]
    iterations = m.outer_iterations
    if tuning:  # rank, lambda and the iterations chosen on rows held out of train
        iterations = _tune(ctx, config, model, data, data_cluster)
    elif m.early_stopping:  # the number of iterations chosen on rows held out of train
        iterations = _early_stopping(ctx, config, model, data, folder, data_cluster, cluster)
    place = _place(ctx, config, data, validation, blocks if folder else None, data_cluster)
    factors, traces, timings = _alternate(ctx, model, place, iterations, cluster)
    w_data = place["w_data"]
    if blocked:  # where the last W-step ran, for the manifest
        where = ctx.read(timings[-2]).iloc[0]
        ctx.record.note("w_step", {"scheduler": where["scheduler"],
                                   "workers": int(where["workers"])})
    # PSP@k's weights, from the training labels the model sees (the observed ones)
    weights = ctx.run(propensity, **w_data, a=d.propensity_a,
                      b=d.propensity_b, cluster=data_cluster)
    test_blocks = test = None
    if blocked:  # the test set's row blocks: the parts of a folder, else row_blocks of them
        test_blocks = ([_xy(p) for p in test_parts] if len(test_parts) > 1 else
                       _partition(ctx, {"train": _xy(test_parts[0]), "mask": None},
                                  compute.row_blocks, data_cluster))
    if not blocked or config.baselines:
        test = _stacked(ctx, test_parts)
    here = None if test_blocks else test  # the test set scored in this process
    result = ctx.run(evaluate, test=here, **factors, traces=traces, timings=timings,
                     propensity=weights, dataset=d.name,
                     method=f"leml-{model.loss}-k{model.rank}",
                     params=task_params(model, evaluate), batch_size=batch,
                     partition=test_blocks, cluster=cluster)
    tables = [result["metrics"]] + [
        ctx.run(baseline, **data, test=test, propensity=weights, method=name,
                dataset=d.name, batch_size=batch,
                params=baseline_params(name, alpha=config.baseline_alpha, rank=model.rank))
        for name in config.baselines]
    metrics = ctx.run(collect, tables=tables)
    predictions = ctx.run(predict, test=here, **factors, labels=train_file["labels"],
                          params=task_params(model, predict), top_k=TOP_K, batch_size=batch,
                          partition=test_blocks, cluster=cluster)
    name_outputs(ctx, config, model, factors, train_file, predictions, weights)
    publish(ctx, config, ctx.read(metrics), ctx.read(result["convergence"]), model, tuning)
    return ctx.finish(metrics, headline=headline(ctx.read(metrics)))


def _place(ctx: RunContext, config: LemlConfig, data: dict, validation: dict | None,
           blocks: list[dict] | None, cluster: dict | None) -> dict:
    """Where the iterations find their data: ``w_data`` (the training refs, or over row
    blocks the blocks' files in their place: ``blocks``, the parts of a folder, else the data
    cut into ``compute.row_blocks`` blocks on ``cluster``), ``row_blocks`` (their number, or
    None), and the validation refs scored in this process or, on Dask, their row blocks."""
    compute = config.compute
    if not compute.blocked:
        return {"w_data": data, "row_blocks": None, "validation": validation,
                "validation_blocks": None}
    if blocks is None:
        blocks = _partition(ctx, data, compute.row_blocks, cluster)
    validation_blocks = None
    if validation is not None:  # its P@1 on the workers too, from its row blocks
        validation_blocks = _partition(ctx, {"train": validation, "mask": None},
                                       compute.row_blocks, cluster)
    return {"w_data": {"train": None, "mask": None, "partition": blocks},
            "row_blocks": len(blocks), "validation": None, "validation_blocks": validation_blocks}


def _alternate(ctx: RunContext, model: LEML, place: dict, iterations: int,
               cluster: dict | None, stop=None, what: str = "Outer iterations",
               key: str = "iterations") -> tuple[dict, list, list]:
    """The start, then (alternate-W, alternate-H) up to ``iterations`` times: the last factors'
    refs, the iterations' trace refs and timing refs.

    After each iteration the loop ends when ``stop(traces)`` (the trace tables read so far)
    gives a reason, and when the estimator's ``tol`` rule says so (:meth:`LEML.converged`),
    as :meth:`LEML.fit` ends."""
    w_data, row_blocks = place["w_data"], place["row_blocks"]
    # The squared-loss start of a margin loss (model.squared_init_iter) runs on the W-step's
    # row blocks, as the iterations do.
    factors = ctx.run(initialise, **w_data, params=task_params(model, initialise),
                      row_blocks=row_blocks if model.squared_start() else None,
                      cluster=cluster)
    w_params, h_params = task_params(model, alternate_W), task_params(model, alternate_H)
    progress = ctx.artifacts.progress(key, iterations, f"{what} (of {iterations})")
    traces, timings, read = [], [], []
    try:
        for t in range(1, iterations + 1):
            w = ctx.run(alternate_W, **w_data, **factors, iteration=t, params=w_params,
                        row_blocks=row_blocks, cluster=cluster)
            h = ctx.run(alternate_H, **w_data, W=w["W"], H=factors["H"],
                        validation=place["validation"],
                        validation_partition=place["validation_blocks"], iteration=t,
                        params=h_params, row_blocks=row_blocks, cluster=cluster)
            factors = {"W": w["W"], "H": h["H"]}
            traces.append(h["trace"])
            timings += [w["timings"], h["timings"]]
            progress.advance()
            if model.tol or stop is not None:  # the estimator's own rules, as its fit asks
                read.append(ctx.read(h["trace"]).iloc[0])
                if model.converged([r["objective"] for r in read]) is not None or (
                        stop is not None and stop(read) is not None):
                    break
    finally:  # the training data the steps kept between them (see tasks.leml._prepared)
        release_training_data()
    return factors, traces, timings


def _tunes(ctx: RunContext, config: LemlConfig, train: list, folder: bool,
           n_rows: int) -> bool:
    """Whether the run tunes (``tune.when``), said in the log when ``auto`` decides not to;
    ``n_rows``: the training rows."""
    t = config.tune
    if t.when == "never":
        return False
    if folder:
        if t.when == "always":
            raise InputError("tuning holds out rows of one training file; a folder of parts is "
                             "read part by part: give a file, or tune.when never",
                             path=ctx.path(config.dataset.train), key="tune.when")
        return _not_tuned(ctx, "a folder of parts (tune.when auto)")
    if t.when == "auto" and cached_file_sha256(train[0]) in set(t.chosen_on):
        return _not_tuned(ctx, "the bundled defaults were chosen on this training file "
                          "(tune.chosen_on); tune.when always tunes it too")
    held = round(t.validation_fraction * n_rows)
    if t.when == "auto" and held < t.min_rows:
        return _not_tuned(ctx, f"{held:,} held-out rows of {n_rows:,} are fewer than "
                          f"tune.min_rows {t.min_rows} (tune.when always tunes anyway)")
    return True


def _not_tuned(ctx: RunContext, why: str) -> bool:
    """Say why ``tune.when auto`` keeps the config's values (the log and the manifest's
    notes); False."""
    log_both(logging.INFO, f"not tuned: {why}")
    ctx.record.note("tuning", f"not tuned: {why}")
    return False


def _tune(ctx: RunContext, config: LemlConfig, model: LEML, data: dict,
          cluster: dict | None) -> int:
    """Rank and lambda chosen on held-out training rows (``leml-tune``, each setting from a
    fresh start while the held-out score rises, :meth:`LEML.held_out_pass`), set on
    ``model``, a logged decision with the validation table as an artifact; returns the
    number of iterations the chosen setting's held-out score peaked at (the final training
    on every row runs that many)."""
    import time

    t = config.tune
    params = {k: v for k, v in model.get_params().items() if k not in ("callback", "verbose")}
    params.update(early_stopping=False, random_state=config.seed)
    split_params = {"validation_fraction": t.validation_fraction, "random_state": config.seed}
    n_rows, n_labels = ctx.store.shape(data["train"]["Y"])
    n_features = ctx.store.shape(data["train"]["X"])[1] + int(bool(model.fit_intercept))
    held = round(t.validation_fraction * n_rows)
    if held < MIN_TUNING_ROWS or n_rows - held < MIN_TUNING_ROWS:
        raise InputError(f"tune.validation_fraction {t.validation_fraction:g} of {n_rows:,} "
                         f"training rows holds out {held:,}: tuning needs at least "
                         f"{MIN_TUNING_ROWS} rows on each side (or tune.when never)",
                         key="tune.validation_fraction")
    parts = ctx.run(early_split, train=data["train"], mask=data["mask"], params=split_params,
                    cluster=cluster)
    mask = None if data["mask"] is None else ctx.run(
        early_split_mask, mask=data["mask"], params=split_params, cluster=cluster)
    grid = tuning_grid(t.rank, t.lam, min(n_features, n_labels))
    started = time.perf_counter()
    result = ctx.run(tune, train={"X": parts["X_fit"], "Y": parts["Y_fit"]}, mask=mask,
                     validation={"X": parts["X_val"], "Y": parts["Y_val"]}, params=params,
                     grid=grid, k=int(t.metric.rsplit("@", 1)[1]))
    seconds = time.perf_counter() - started
    table = ctx.read(result["table"])
    best = table.loc[table["chosen"]].iloc[0]
    chosen = {"rank": int(best["rank"]), "lam": float(best["lam"])}
    iterations = int(best["best_iteration"])
    model.set_params(**chosen, outer_iterations=iterations, early_stopping=False)
    ctx.artifacts.table("tuning", result["table"],
                         f"Each setting's {t.metric} on {held:,} held-out training rows")
    ctx.record.name_output("tuning.parquet", result["table"])
    ctx.record.decide(
        "tuned", {**chosen, "outer_iterations": iterations},
        f"the best {t.metric} of {len(grid)} settings on {held:,} held-out training rows "
        f"(tune.validation_fraction {t.validation_fraction:g}), {float(best['score']):.4f} "
        f"after {iterations} iterations, in {seconds:.1f} s; then every training row with "
        "them (tune.when never keeps the config's values)")
    return iterations


def tuning_grid(ranks: list[int], lams: list[float], most: int) -> list[dict]:
    """The settings a tuning tries: every rank (a rank beyond ``most``, the features with the
    intercept or the labels, tried at ``most``, once) with every lambda, in order."""
    seen = list(dict.fromkeys(min(int(r), int(most)) for r in ranks))
    return [{"rank": r, "lam": float(lam)} for r in seen for lam in lams]


def _early_stopping(ctx: RunContext, config: LemlConfig, model: LEML, data: dict,
                    folder: bool, data_cluster: dict | None, cluster: dict | None) -> int:
    """The held-out pass of ``model.early_stopping`` (:meth:`LEML.fit` with it): the rows
    the estimator holds out (``leml-early-split``, its own split), the alternation on the
    others while the held-out P@1 rises (:meth:`LEML.no_gain`), and the best number of
    iterations, a logged decision."""
    m = config.model
    if folder:
        raise InputError("early stopping holds out rows of one training file; a folder of "
                         "parts is read part by part: turn it off (false) or give a file",
                         path=ctx.path(config.dataset.train), key="model.early_stopping")
    params = task_params(model, early_split)
    parts = ctx.run(early_split, train=data["train"], mask=data["mask"], params=params,
                    cluster=data_cluster)
    mask = None if data["mask"] is None else ctx.run(
        early_split_mask, mask=data["mask"], params=params, cluster=data_cluster)
    fit = {"train": {"X": parts["X_fit"], "Y": parts["Y_fit"]}, "mask": mask}
    held = {"X": parts["X_val"], "Y": parts["Y_val"]}
    place = _place(ctx, config, fit, held, None, data_cluster)
    ended: list[str] = []

    def stop(read: list) -> str | None:
        reason = model.no_gain([r["validation_p_at_1"] for r in read])
        ended[:] = [reason] if reason else []
        return reason

    _, traces, _ = _alternate(ctx, model, place, m.outer_iterations, cluster, stop,
                              "Early stopping: iterations on the rows not held out",
                              key="early-stopping")
    scores = [float(ctx.read(t)["validation_p_at_1"].iloc[0]) for t in traces]
    best = model.best_iteration(scores)
    why = ended[0] if ended else (
        model.converged([float(ctx.read(t)["objective"].iloc[0]) for t in traces])
        or f"model.outer_iterations = {m.outer_iterations} reached")
    held_rows = ctx.store.shape(parts["X_val"])[0]
    ctx.record.decide("outer iterations", best,
                      f"model.early_stopping on {held_rows:,} held-out training rows "
                      f"(model.validation_fraction {m.validation_fraction:g}): {why}; then "
                      f"every training row for {best} iterations")
    ctx.record.note("early_stopping", {"validation_p_at_1": scores, "best_iteration": best})
    return best


def _training(ctx: RunContext, config: LemlConfig, parts: list[dict], folder: bool,
              whole: bool, cluster: dict | None) -> tuple[dict, dict | None, list[dict] | None]:
    """The training data (``{"train", "mask"}`` refs; ``train`` None when the whole is not
    ``whole``-ly needed), the validation refs (or None) and, for a folder of ``parts``, the
    row blocks the parts are (per part its X, Y and mask refs; None for one file).

    One file: the validation rows held out of it, then the mask drawn over the rest.  A
    folder: each part's mask drawn from (seed, part), the parts stacked only when the whole
    is needed; no validation split (refused).  ``cluster``: where the split and the masks
    are made."""
    d, seed = config.dataset, config.seed
    if not folder:
        train, validation = _hold_out(ctx, _xy(parts[0]), d.validation_fraction, seed, cluster)
        mask = None
        if config.observed_fraction < 1:
            mask = ctx.run(observe, Y=train["Y"], observed_fraction=config.observed_fraction,
                           seed=seed, cluster=cluster)
        return {"train": train, "mask": mask}, validation, None
    if d.validation_fraction > 0:
        raise InputError("a folder of parts is read part by part; hold out validation rows in "
                         "a file of their own (validation_fraction 0 here)",
                         path=ctx.path(d.train), key="dataset.validation_fraction")
    masks = [None] * len(parts)
    if config.observed_fraction < 1:
        masks = [ctx.run(observe, Y=p["Y"], observed_fraction=config.observed_fraction,
                         seed=seed, part=i, cluster=cluster) for i, p in enumerate(parts)]
    blocks = [{"X": p["X"], "Y": p["Y"], **({} if mk is None else {"mask": mk})}
              for p, mk in zip(parts, masks, strict=True)]
    train = _stacked(ctx, parts) if whole else None
    mask = None if masks[0] is None or not whole else ctx.run(stack, parts=masks, what="mask")
    return {"train": train, "mask": mask}, None, blocks


def _load_parts(ctx: RunContext, d: DatasetConfig, m: ModelConfig, files: list,
                cluster: dict | None, labelled: bool = False) -> list[dict]:
    """The ``leml-load`` refs of ``files`` (of :func:`_input_files`, already checked to
    agree on the numbers of features and labels by :func:`tasks.leml.check_inputs`), each
    read on its own (on ``cluster`` when given); ``labelled``: the one file is the training
    set, refused when no point has a label (a part of a folder may have none)."""
    if d.format == "table":
        return _load_tables(ctx, d, m, files, labelled)
    read = dict(format=d.format, dtype=m.dtype, n_labels=d.n_labels, normalize=d.normalize)
    return [ctx.run(load, path=f, labels_file=label_file(f, d.format), cluster=cluster,
                    labelled=labelled, **read) for f in files]


def _load_tables(ctx: RunContext, d: DatasetConfig, m: ModelConfig, files: list,
                 labelled: bool) -> list[dict]:
    """The ``leml-load-table`` refs of the tables ``files`` in the training table's space
    (``leml-table-space``: its labels and vectoriser, learned from the training table only),
    with the space's refs as each file's index maps, as :func:`_load_parts` gives them."""
    train = ctx.path(d.train)
    label_list = None if d.table.label_list is None else ctx.path(d.table.label_list)
    space = ctx.run(table_space, path=train, table=d.table.options(), label_list=label_list)
    maps = {part: ctx.store.path(space[part]) for part in ("features", "labels")}
    loaded = [ctx.run(load_table, path=f, table=d.table.options(), dtype=m.dtype,
                      normalize=d.normalize, labelled=labelled, **maps) for f in files]
    return [{**xy, "features": space["features"], "labels": space["labels"]}
            for xy in loaded]


def _stacked(ctx: RunContext, parts: list[dict]) -> dict:
    """The X and Y refs of the loaded ``parts`` as one data set: the one part's own, or
    their rows stacked in part order (``leml-stack``)."""
    if len(parts) == 1:
        return _xy(parts[0])
    return {name: ctx.run(stack, parts=[p[name] for p in parts], what=name)
            for name in ("X", "Y")}


def _partition(ctx: RunContext, data: dict, blocks: int, cluster: dict | None) -> list[dict]:
    """The training data as row blocks (``leml-partition``, one task and one set of store
    entries per block, run on ``cluster`` when given): per block the refs of its rows of X,
    Y and the mask."""
    n_rows = ctx.store.shape(data["train"]["X"])[0]
    count = len(row_block_bounds(n_rows, blocks))
    train = unmapped(data["train"])
    if data["mask"] is None:
        return ctx.map(partition, train=train, block=list(range(count)), blocks=blocks,
                       cluster=unmapped(cluster))
    return ctx.map(partition_masked, train=train, mask=unmapped(data["mask"]),
                   block=list(range(count)), blocks=blocks, cluster=unmapped(cluster))


def _xy(loaded: dict) -> dict:
    """The X and Y refs of a loaded file (what the learning steps take)."""
    return {"X": loaded["X"], "Y": loaded["Y"]}


def name_outputs(ctx: RunContext, config: LemlConfig, model: LEML, factors: dict,
                 train_file: dict, predictions: str, weights: str) -> None:
    """The run's named outputs: ``predictions.parquet`` and the model, ``model/`` (see
    ``docs/leml.md``, "Outputs and model format").

    The Parquet files are the store entries of the final ``W`` and ``H``, of the training
    file's index maps, of the labels' inverse propensities (apply's PSP@k) and of the
    predictions; ``model/config.json`` is the run's config and
    ``model/model.json`` (:func:`flows.apply.model_document`, version :data:`MODEL_VERSION`)
    what ``apply-leml`` needs to use them: the factors' shapes, the prediction parameters and
    how the input is read (format, dtype, row normalisation), and every parameter of the
    estimator ``model`` the run trained (``params``), so that a loaded model's estimator is
    the run's (``sklearn.base.clone`` of it trains the same).
    """
    m, d = config.model, config.dataset
    shapes = {part: list(ctx.store.shape(factors[part])) for part in ("W", "H")}
    refs = {"W": factors["W"], "H": factors["H"], "features": train_file["features"],
            "labels": train_file["labels"], "propensity": weights}
    for part, ref in refs.items():
        ctx.record.name_output(f"{MODEL_DIR}/{MODEL_FILES[part]}", ref)
    ctx.record.name_output("predictions.parquet", predictions)
    ctx.record.write_output(f"{MODEL_DIR}/{MODEL_FILES['config']}",
                     json.dumps(config.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    ctx.record.write_output(f"{MODEL_DIR}/model.json", model_document(
        "leml", MODEL_VERSION, rank=shapes["W"][1], loss=m.loss, dtype=m.dtype,
        n_features=shapes["W"][0] - int(m.fit_intercept), n_labels=shapes["H"][0],
        fit_intercept=m.fit_intercept, normalize=d.normalize, input_format=d.format,
        shapes=shapes, files=MODEL_FILES, params=estimator_params(model),
        **({"table": d.table.options()} if d.format == "table" else {})))


def estimator_params(model: LEML) -> dict:
    """The estimator's parameters as ``model.json`` records them: every one but the
    ``callback`` (code, not a setting)."""
    return {k: v for k, v in model.get_params().items() if k != "callback"}


def _hold_out(ctx: RunContext, train: dict, fraction: float, seed: int,
              cluster: dict | None = None):
    """The training refs and the validation refs held out of them (None when none are);
    the split made on ``cluster`` when given."""
    if fraction == 0:
        return train, None
    parts = ctx.run(split, train=train, validation_fraction=fraction, seed=seed,
                    cluster=cluster)
    return ({"X": parts["X_fit"], "Y": parts["Y_fit"]},
            {"X": parts["X_val"], "Y": parts["Y_val"]})


def publish(ctx: RunContext, config: LemlConfig, metrics: pd.DataFrame,
            convergence: pd.DataFrame, model: LEML | None = None, tuned: bool = False) -> None:
    """The run's artifacts: the convergence table, the objective plot and the summary.

    Parameters
    ----------
    ctx : RunContext
        The run.
    config : LemlConfig
        Its config.
    metrics : DataFrame
        The ``metrics`` table of ``leml-collect`` (LEML's rows and the baselines').
    convergence : DataFrame
        The ``convergence`` table of ``leml-evaluate``; its ``validation_p_at_1`` column, all
        NaN without a validation split, is shown only when it holds a value.
    model : LEML, optional
        The estimator the run trained (its values tuned, ``tuned``); default: the config's.
    """
    m = model if model is not None else config.model.estimator()
    convergence = shown_convergence(convergence)
    validated = VALIDATION_COLUMN in convergence.columns
    objective = convergence.sort_values("iteration")["objective"].to_numpy(dtype=float)
    if objective.size:
        change = ((objective[-2] - objective[-1]) / abs(objective[-2])
                  if objective.size > 1 and objective[-2] else float("nan"))
        seen = (f"; validation P@1 {100 * convergence[VALIDATION_COLUMN].iloc[-1]:.2f}"
                if validated else "")
        stopped = m.converged(objective)
        why = (f"model.tol: {stopped}" if stopped else
               f"model.outer_iterations = {m.outer_iterations} reached, last relative change "
               f"{change:.2e}" + (f" (tol {m.tol:g} not met)" if m.tol else " (tol 0: no "
                                  "early stopping)"))
        # else a held-out pass (early stopping, tuning) decided the count, its own line
        if not (config.model.early_stopping or tuned) or stopped:
            ctx.record.decide("outer iterations", int(objective.size),
                              f"{why}: objective {objective[0]:.6g} -> {objective[-1]:.6g}"
                              f"{seen}")
    ctx.artifacts.table("convergence", convergence,
                         "Objective, seconds and validation P@1 per outer iteration" if validated
                         else "Objective and seconds per outer iteration")
    title = f"LEML on {config.dataset.name}: k={m.rank}, lambda={m.lam:g}, {m.loss} loss"
    png = ctx.artifacts.plot(plots.leml_convergence, convergence, title=title)
    ctx.artifacts.image("objective", png,
                        "Objective and validation P@1 over outer iterations" if validated
                        else "Objective over outer iterations")
    ctx.artifacts.markdown("summary", summary_markdown(metrics, convergence, config, m),
                           "The run beside the published LEML row (Extreme Classification "
                           "Repository)")


#: The convergence table's column of validation P@1 (NaN without a validation split).
VALIDATION_COLUMN = "validation_p_at_1"


def shown_convergence(conv: pd.DataFrame) -> pd.DataFrame:
    """``conv`` without its validation P@1 column when that holds no finite value (no
    validation split): no column of blanks or ``nan`` in what the UI shows."""
    if VALIDATION_COLUMN in conv.columns:
        values = pd.to_numeric(conv[VALIDATION_COLUMN], errors="coerce")
        if values.replace([float("inf"), float("-inf")], float("nan")).isna().all():
            return conv.drop(columns=VALIDATION_COLUMN)
    return conv


def summary_markdown(metrics: pd.DataFrame, conv: pd.DataFrame, config: LemlConfig,
                     model: LEML | None = None) -> str:
    """The run against the published LEML row, and the objective over iterations.

    Parameters
    ----------
    metrics : DataFrame
        ``dataset``, ``method``, ``metric``, ``value``: LEML's rows and the baselines'.
    conv : DataFrame
        The convergence table (a validation P@1 column without values is left out).
    config : LemlConfig
        The run's config.
    model : LEML, optional
        The estimator the run trained (tuned values); default: the config's.

    Returns
    -------
    str
        Markdown: the metrics, with the published LEML figure beside LEML's own rows only (a
        baseline is not LEML) and only when every label is observed; the published rows; the
        objective as a sparkline and the convergence table.
    """
    conv = shown_convergence(conv)
    m = model if model is not None else config.model.estimator()
    lines = [
        f"# LEML on {config.dataset.name}",
        "",
        f"rank {m.rank}, lambda {m.lam}, loss {m.loss}, "
        f"observed {config.observed_fraction:.0%}, seed {config.seed}",
        "",
        "| method | metric | value | published LEML |",
        "| --- | --- | --- | --- |",
    ]
    published = PUBLISHED.get(config.dataset.name, {})
    for row in metrics.itertuples(index=False):
        own = row.method not in BASELINES  # LEML's rows; the baselines' are named by BASELINES
        ref = published.get(row.metric) if own and config.observed_fraction == 1 else None
        shown = (
            f"{100 * row.value:.2f}" if row.metric.startswith("precision@") else f"{row.value:.4f}"
        )
        lines.append(f"| {row.method} | {row.metric} | {shown} | {'' if ref is None else ref} |")
    from scarce.flows.registry import FLOWS

    leader = lead_line(metrics, FLOWS["leml"])
    lines += ([] if leader is None else ["", f"**{leader}.**"]) + [
        "",
        "Published LEML (Extreme Classification Repository, P@1 / P@3 / P@5 in %): "
        + "; ".join(
            f"{name.capitalize()} " + " / ".join(f"{v:.2f}" for v in row.values())
            for name, row in PUBLISHED.items()
        )
        + ". Comparable only on the repository's split with every label observed.",
        "",
        "Objective per outer iteration: " + sparkline(conv["objective"].tolist()),
        "",
        markdown_table(conv),
    ]
    return "\n".join(lines)


#: The metrics of a run's headline (``scarce runs``), in this order, for every method.
HEADLINE = ("precision@1", "precision@3", "precision@5", "instance_auc")


def headline(metrics) -> dict[str, float]:
    """P@1, P@3, P@5 and AUC of every method (in the table's order), in that order."""
    methods = {m: i for i, m in enumerate(dict.fromkeys(metrics["method"]))}
    rows = sorted(metrics[metrics["metric"].isin(HEADLINE)].itertuples(),
                  key=lambda r: (methods[r.method], HEADLINE.index(r.metric)))
    return {f"{r.dataset}/{r.method}/{r.metric}": float(r.value) for r in rows}


def sparkline(values: list[float]) -> str:
    bars = "▁▂▃▄▅▆▇█"
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return "".join(bars[int((v - lo) / span * (len(bars) - 1))] for v in values)
