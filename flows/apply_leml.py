"""The ``apply-leml`` flow: a finished ``leml`` run's model on new data.

open the model -> load (the training flow's own step) -> score, for every input file; then the
predictions (the columns of the training run's ``predictions.parquet``, after the input table's
``keep_columns`` when asked for) as named outputs, and in ``--output`` when given.  Nothing is
learned: the model's ``W`` and ``H`` are read from the training run's ``outputs/model/``
(format in ``docs/leml.md``).  Each file's load and score are store steps keyed by the file's
hash (and, for score, the model files' hashes), so a folder applied again computes only its
new files.
"""

from __future__ import annotations

from prefect import flow

from scarce.flows.apply import export
from scarce.flows.apply_leml_config import (
    MODEL_KEYS,
    PREDICTIONS,
    SUFFIXES,
    ApplyLemlConfig,
    Prepared,
    check_format,
    prepare,
)
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions
from scarce.tasks.kept_columns import keep_columns
from scarce.tasks.leml import collect, load, model_task_params, score
from scarce.tasks.leml_files import MODEL_FILES, new_rows_labels
from scarce.tasks.leml_table import load_table

# The config schema and the checks before a run live in flows.apply_leml_config (a command
# checks an apply run without importing this flow); their names are read here too.
__all__ = ["MODEL_KEYS", "PREDICTIONS", "SUFFIXES", "ApplyLemlConfig", "Prepared",
           "apply_leml_flow", "check_format", "prepare"]

#: The estimator's parameters that ``model.json`` holds (the others had their defaults when the
#: score steps' keys were first made from them).
ESTIMATOR_KEYS = ("rank", "loss", "dtype", "fit_intercept")


@flow(name="apply-leml", flow_run_name=namer("apply-leml"))
def apply_leml_flow(config: ApplyLemlConfig, options: RunOptions | None = None) -> dict:
    """Load every input file as the training run loaded its test file, score its rows with
    the stored factors and write the ``top_k`` labels of each row with their scores."""
    ctx = RunContext.open("apply-leml", config, options)
    p = prepare(config, ctx.run_dir.parent, ctx.store.root)
    meta, folder, fmt, files, names, output = (p.meta, p.folder, p.fmt, p.files, p.names,
                                               p.output)
    loaded = ctx.gather(load_inputs(ctx, files, fmt, meta, folder))
    # the estimator's prediction parameters, from model.json without the estimator (whose
    # scikit-learn an apply run does not need)
    params = model_task_params({k: meta[k] for k in ESTIMATOR_KEYS}, score)
    scored = ctx.gather([
        ctx.submit(score, X=data["X"], Y=data["Y"], path=path, W=folder / MODEL_FILES["W"],
                   H=folder / MODEL_FILES["H"], labels=folder / MODEL_FILES["labels"],
                   propensity=(folder / MODEL_FILES["propensity"]
                               if "propensity" in meta.get("files", {}) else None),
                   format=fmt, shapes=meta["shapes"],
                   params=params, top_k=config.top_k,
                   batch_size=config.batch_size, method=f"leml-{meta['loss']}-k{meta['rank']}",
                   source=path.name)
        for path, data in zip(files, loaded, strict=True)])
    predictions = [r["predictions"] for r in scored]
    if config.keep_columns:
        predictions = ctx.gather([
            ctx.submit(keep_columns, path=path, predictions=ref, columns=config.keep_columns)
            for path, ref in zip(files, predictions, strict=True)])
    for name, ref in zip(names, predictions, strict=True):
        ctx.record.name_output(name, ref)
    summary = ctx.finish(ctx.run(collect, tables=[r["metrics"] for r in scored]))
    if output is not None:
        export(ctx.store, predictions, names, output, ctx.run_dir)
    return summary


def load_inputs(ctx: RunContext, files: list, fmt: str, meta: dict, folder) -> list:
    """The submitted load steps of the input ``files`` in ``fmt``, read as the model's
    training data was (dtype, row normalisation; a table in the model's own feature and
    label space, ``features.parquet`` and ``labels.parquet``).  Labels are optional: a
    table without its label column, a Parquet X without its Y."""
    if fmt == "table" or meta["input_format"] == "table":
        check_format(ctx.config, meta, fmt)
        return [ctx.submit(load_table, path=path, table=meta["table"], dtype=meta["dtype"],
                           normalize=meta["normalize"],
                           features=folder / MODEL_FILES["features"],
                           labels=folder / MODEL_FILES["labels"]) for path in files]
    read = dict(format=fmt, dtype=meta["dtype"], normalize=meta["normalize"],
                n_labels=meta["n_labels"] if fmt == "arff" else None)
    return [ctx.submit(load, path=path, **new_rows_labels(path, fmt), **read) for path in files]
