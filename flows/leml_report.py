"""The LEML flow's report: the run's named outputs (the model and the predictions) and its
artifacts (the convergence table, the objective plot, the summary beside the published
figures), and the headline of ``scarce runs``.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from scarce.algorithms.leml import LEML
from scarce.flows import plots
from scarce.flows.apply import MODEL_DIR, model_document
from scarce.flows.published import LEML_XC
from scarce.flows.runtime import RunContext, lead_line, markdown_table
from scarce.tasks.leml import BASELINES
from scarce.tasks.leml_files import MODEL_FILES, MODEL_VERSION

PUBLISHED = LEML_XC


def name_outputs(ctx: RunContext, config: dict, d: Any, model: LEML, factors: dict,
                 train_file: dict, predictions: str, weights: str) -> None:
    """The run's named outputs: ``predictions.parquet`` and the model, ``model/`` (see
    ``docs/leml.md``, "Outputs and model format").

    The Parquet files are the store entries of the final ``W`` and ``H``, of the training
    file's index maps, of the labels' inverse propensities (apply's PSP@k) and of the
    predictions; ``model/config.json`` is the run's config and
    ``model/model.json`` (:func:`scarce.flows.apply.model_document`, version :data:`MODEL_VERSION`)
    what ``apply-leml`` needs to use them: the factors' shapes, the prediction parameters and
    how the input is read (format, dtype, row normalisation), and every parameter of the
    estimator ``model`` the run trained (``params``), so that a loaded model's estimator is
    the run's (``sklearn.base.clone`` of it trains the same).  ``config``: the run's config
    as JSON; ``d``: its dataset config.
    """
    shapes = {part: list(ctx.store.shape(factors[part])) for part in ("W", "H")}
    refs = {"W": factors["W"], "H": factors["H"], "features": train_file["features"],
            "labels": train_file["labels"], "propensity": weights}
    for part, ref in refs.items():
        ctx.record.name_output(f"{MODEL_DIR}/{MODEL_FILES[part]}", ref)
    ctx.record.name_output("predictions.parquet", predictions)
    ctx.record.write_output(f"{MODEL_DIR}/{MODEL_FILES['config']}",
                     json.dumps(config, indent=2, sort_keys=True) + "\n")
    ctx.record.write_output(f"{MODEL_DIR}/model.json", model_document(
        "leml", MODEL_VERSION, rank=shapes["W"][1], loss=model.loss, dtype=model.dtype,
        n_features=shapes["W"][0] - int(model.fit_intercept), n_labels=shapes["H"][0],
        fit_intercept=model.fit_intercept, normalize=d.normalize, input_format=d.format,
        shapes=shapes, files=MODEL_FILES, params=estimator_params(model),
        **({"table": d.table.options()} if d.format == "table" else {})))


def estimator_params(model: LEML) -> dict:
    """The estimator's parameters as ``model.json`` records them: every one but the
    ``callback`` (code, not a setting)."""
    return {k: v for k, v in model.get_params().items() if k != "callback"}


def publish(ctx: RunContext, metrics: pd.DataFrame, convergence: pd.DataFrame, model: LEML,
            *, dataset: str, observed_fraction: float, seed: int, held_out: bool) -> None:
    """The run's artifacts: the convergence table, the objective plot and the summary.

    Parameters
    ----------
    ctx : RunContext
        The run.
    metrics : DataFrame
        The ``metrics`` table of ``leml-collect`` (LEML's rows and the baselines').
    convergence : DataFrame
        The ``convergence`` table of ``leml-evaluate``; its ``validation_p_at_1`` column, all
        NaN without a validation split, is shown only when it holds a value.
    model : LEML
        The estimator the run trained (its values tuned, if it tuned).
    dataset, observed_fraction, seed : the run's (``dataset.name`` and the others).
    held_out : bool
        A held-out pass (early stopping, tuning) chose the number of iterations, a decision
        of its own: the one here is made only when the objective's rule stopped earlier.
    """
    m = model
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
        if not held_out or stopped:
            ctx.record.decide("outer iterations", int(objective.size),
                              f"{why}: objective {objective[0]:.6g} -> {objective[-1]:.6g}"
                              f"{seen}")
    ctx.artifacts.table("convergence", convergence,
                         "Objective, seconds and validation P@1 per outer iteration" if validated
                         else "Objective and seconds per outer iteration")
    title = f"LEML on {dataset}: k={m.rank}, lambda={m.lam:g}, {m.loss} loss"
    png = ctx.artifacts.plot(plots.leml_convergence, convergence, title=title)
    ctx.artifacts.image("objective", png,
                        "Objective and validation P@1 over outer iterations" if validated
                        else "Objective over outer iterations")
    summary = summary_markdown(metrics, convergence, m, dataset=dataset,
                               observed_fraction=observed_fraction, seed=seed)
    ctx.artifacts.markdown("summary", summary,
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


def summary_markdown(metrics: pd.DataFrame, conv: pd.DataFrame, model: LEML, *, dataset: str,
                     observed_fraction: float, seed: int) -> str:
    """The run against the published LEML row, and the objective over iterations.

    Parameters
    ----------
    metrics : DataFrame
        ``dataset``, ``method``, ``metric``, ``value``: LEML's rows and the baselines'.
    conv : DataFrame
        The convergence table (a validation P@1 column without values is left out).
    model : LEML
        The estimator the run trained (tuned values).
    dataset, observed_fraction, seed
        The run's (``dataset.name`` and the others).

    Returns
    -------
    str
        Markdown: the metrics, with the published LEML figure beside LEML's own rows only (a
        baseline is not LEML) and only when every label is observed; the published rows; the
        objective as a sparkline and the convergence table.
    """
    conv = shown_convergence(conv)
    m = model
    lines = [
        f"# LEML on {dataset}",
        "",
        f"rank {m.rank}, lambda {m.lam}, loss {m.loss}, "
        f"observed {observed_fraction:.0%}, seed {seed}",
        "",
        "| method | metric | value | published LEML |",
        "| --- | --- | --- | --- |",
    ]
    published = PUBLISHED.get(dataset, {})
    for row in metrics.itertuples(index=False):
        own = row.method not in BASELINES  # LEML's rows; the baselines' are named by BASELINES
        ref = published.get(row.metric) if own and observed_fraction == 1 else None
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
