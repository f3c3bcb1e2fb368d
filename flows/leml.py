"""The LEML flow: load -> (alternate-W -> alternate-H) x T -> evaluate -> predict.

The flow is here; its config schema in :mod:`scarce.flows.leml_config`, its stages in
:mod:`scarce.flows.leml_training`, its report in :mod:`scarce.flows.leml_report`, and where the data
lives
in the run's plan (:class:`scarce.tasks.leml_plan.LemlPlan`), through which every step runs.

Yu, Jain, Kar and Dhillon, "Large-scale Multi-label Learning with Missing
Labels", ICML 2014.  The flow drives the step methods of :class:`scarce.algorithms.leml.LEML`,
one task per step with the store between them (``LEML.fit`` is the same loop in one
process); the model's options and their defaults are the estimator's
(:class:`~scarce.flows.leml_config.ModelConfig`), the bundled values are in ``configs/leml.yaml``.
With ``compute.backend: dask`` the training data is first written as ``compute.row_blocks``
row blocks (``leml-partition``), from which each Dask worker reads its own blocks.

Every run names its outputs (:func:`name_outputs`): ``outputs/predictions.parquet`` (the test
set's top labels) and ``outputs/model/`` (the factors, the index maps, the config and
``model.json``), which the ``apply-leml`` flow (:mod:`scarce.flows.apply_leml`) applies to new data.
"""

from __future__ import annotations

import pandas as pd
from prefect import flow

from scarce.algorithms.leml import LEML
from scarce.flows import leml_report as report
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
from scarce.flows.leml_report import headline, name_outputs
from scarce.flows.leml_training import (
    alternate,
    baselines,
    load_sets,
    stop_early,
    training_data,
    tune_on_held_out,
    tunes,
    tuning_grid,
)
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions
from scarce.tasks.leml import TOP_K, collect
from scarce.tasks.leml_plan import LemlPlan

# The config schema lives in flows.leml_config (a command checks a config without importing
# this flow); its names, the headline of `scarce runs` and the grid a tuning tries are read
# from here too.
__all__ = ["BACKENDS", "DEFAULTS_CHOSEN_ON", "MIN_TUNING_ROWS", "ComputeConfig", "DatasetConfig",
           "LemlConfig", "ModelConfig", "TableConfig", "TuneConfig", "VectorizerConfig",
           "check_data", "headline", "leml_flow", "publish", "tuning_grid"]


@flow(name="leml", flow_run_name=namer("leml"))
def leml_flow(config: LemlConfig, options: RunOptions | None = None) -> dict:
    """load -> (alternate-W -> alternate-H) x T -> evaluate -> predict: the steps of
    :class:`scarce.algorithms.leml.LEML` as tasks, with the optional validation split, missing-label
    mask and baselines; the model and the test set's predictions as named outputs.  Every
    step runs through the run's plan of where the data lives
    (:class:`scarce.tasks.leml_plan.LemlPlan`), which closes the Dask clients the run opened and
    releases the data the steps kept when the run ends, however it ends."""
    check_input_paths(config)  # a missing input refused before any step (a rerun, a grid point)
    ctx = RunContext.open("leml", config, options)
    d, m, compute, seed = config.dataset, config.model, config.compute, config.seed
    model = m.estimator(random_state=seed)
    # "auto" resolved once, logged with any setting that turns off what another relies on;
    # the steps and their keys then hold the values they run with.
    model.set_params(**model.resolve_params(distributed=compute.blocked))
    files = check_data(config)
    with LemlPlan(ctx, compute.backend, compute.row_blocks, compute.cluster(ctx)) as plan:
        loaded = load_sets(ctx, plan, d, m.dtype, files)
        tuning = tunes(ctx, config.tune, loaded)
        train = training_data(ctx, plan, loaded, d, config.observed_fraction, seed,
                              whole=plan.needs_whole(bool(config.baselines) or tuning))
        if tuning:  # rank, lambda and the iterations chosen on rows held out of train
            iterations = tune_on_held_out(ctx, plan, config.tune, seed, model, train.data,
                                          MIN_TUNING_ROWS)
        elif m.early_stopping:  # the number of iterations chosen on rows held out of train
            iterations = stop_early(ctx, plan, model, train.data, loaded)
        else:
            iterations = m.outer_iterations
        placed = plan.place(train.data, train.validation, train.blocks)
        factors, traces, timings = alternate(ctx, plan, model, placed, iterations)
        plan.note_where(timings)
        # PSP@k's weights, from the training labels the model sees (the observed ones)
        weights = plan.propensity(placed, d.propensity_a, d.propensity_b)
        # the metrics and predictions of the test set, or of the held-out rows
        test = plan.test_set(loaded.test or [train.validation], whole=bool(config.baselines))
        result = plan.evaluate(model, test, factors, traces=traces, timings=timings,
                               propensity=weights, dataset=d.name, batch_size=config.batch_size,
                               method=f"leml-{model.loss}-k{model.rank}")
        metrics = ctx.run(collect, tables=[result["metrics"]] + baselines(
            ctx, config.baselines, config.baseline_alpha, model.rank, train.data, test.whole,
            weights, d.name, config.batch_size))
        predictions = plan.predict(model, test, factors, labels=loaded.maps["labels"],
                                   top_k=TOP_K, batch_size=config.batch_size)
    name_outputs(ctx, config.model_dump(mode="json"), d, model, factors, loaded.maps,
                 predictions, weights)
    publish(ctx, config, ctx.read(metrics), ctx.read(result["convergence"]), model, tuning)
    return ctx.finish(metrics, headline=headline(ctx.read(metrics)))


def publish(ctx: RunContext, config: LemlConfig, metrics: pd.DataFrame,
            convergence: pd.DataFrame, model: LEML | None = None, tuned: bool = False) -> None:
    """The run's artifacts (:func:`scarce.flows.leml_report.publish`) from its ``config``: the
    estimator ``model`` it trained (default: the config's), ``tuned`` when a tuning chose its
    values."""
    report.publish(ctx, metrics, convergence,
                   model if model is not None else config.model.estimator(),
                   dataset=config.dataset.name, observed_fraction=config.observed_fraction,
                   seed=config.seed, held_out=config.model.early_stopping or tuned)
