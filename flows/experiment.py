"""Experiments as flows: a paper's table is a grid of cached flow runs.

Kept as one module: the experiment file's schema, its grid and the flow that reads them
change together.

``configs/experiments/<name>.yaml`` names a flow, its base config, fixed overrides, the axes of
the grid (dotted config keys and their values) and the table to build::

    flow: relations
    base: configs/relations.yaml
    set: {n_subsamples: 5}
    axes:
      window: [0-5-0, 2-5-2, 0-10-0, 2-10-2, 5-10-5]
      seed: [0, 1, 2]
    table: {rows: [window], columns: [method], metric: accuracy}

An axis may also name groups of settings that vary together (``corpus: {semeval: {data: [...],
dataset: semeval-9}, fewrel: {...}}``): its values in the table are the group names.

The grid's axes are taken in name order (named settings by name too; :func:`axis_names`), not
in the file's order, which no record of a mapping keeps.

``scarce run experiment NAME`` runs the ``experiment`` flow: one child flow run per grid point
(the flow unchanged, each with its own run folder and manifest, tagged ``experiment:<name>``),
submitted to the task runner so that ``--runner dask`` / ``--dask-address`` spread the grid, every
child's steps cached in the store as always (a grid extended by one seed computes only the new
seed); then the table: ``outputs/table.parquet`` (long form: the axes, the child run, each
metric), ``outputs/summary.parquet`` and ``outputs/table.md`` (the metric's mean and spread over
the axes not in the table's rows and columns; ``table.also`` adds further metrics, each its own
table in ``table.md`` and ``outputs/summary-<metric>.parquet``, :func:`summary_file`).  A grid
point whose config is invalid or whose run fails is one row with its error; the other points
finish.  The experiment's manifest lists every child's outputs, so ``scarce rerun`` of the
experiment reruns every child and compares every output, the table included.  ``--dry-run``
counts the child runs and what each would compute, and runs nothing.

``select`` chooses settings inside the run: every point evaluated on a validation split, the
best by a metric (``experiment-select``, a logged decision), then one refit run with the chosen
values (tagged ``refit``); ``outputs/selection.parquet`` is the validation table.  With
``select.across`` the setting is chosen to hold on several conditions (an axis: data sets,
splits): the metric is compared within each and combined by ``select.criterion`` (the mean, or
the mean rank), and the refit runs once per condition.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import Task, flow
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner

from scarce.flows import plots
from scarce.flows.experiment_config import (
    EXPERIMENTS,
    ExperimentConfig,
    SelectSpec,
    TableSpec,
    axis_names,
    axis_values,
    experiment_file,
    grid,
    load_experiment,
    point_config,
    settings,
    shown_point,
)
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions, markdown_table
from scarce.tasks import experiment as exp
from scarce.tasks.errors import InputError, one_line

# The config schema, the grid and the points' configs live in flows.experiment_config (a
# command checks an experiment without importing this flow); their names are read here too.
__all__ = ["EXPERIMENTS", "ExperimentConfig", "SelectSpec", "TableSpec", "axis_names",
           "axis_values", "experiment_file", "experiment_flow", "grid", "load_experiment", "plan",
           "point_config", "settings", "shown_point"]

def run_point(spec: Any, config: ExperimentConfig, point: dict[str, Any], options: dict,
              refit: bool = False) -> dict:
    """Run the child flow (``spec``, a :class:`~scarce.flows.registry.FlowSpec`, which travels to a
    Dask worker by its import paths) of one grid point (with ``refit``, the selection's final
    run); its run id, metrics ref and outputs, or the error that stopped it (the other points
    go on)."""
    from prefect import tags
    from prefect.transactions import CommitMode, transaction

    try:
        child = point_config(config, point, spec, refit)
        marks = [f"experiment:{config.name}", *(["refit"] if refit else [])]
        # Each step of the child commits its cache record when it ends (EAGER), as in a run
        # of its own: nested in this task's transaction, Prefect held them all until the whole
        # child run ended, so an interrupted or killed experiment lost every step of the
        # child in progress.
        with tags(*marks), transaction(commit_mode=CommitMode.EAGER):
            summary = spec.load_flow()(config=child, options=RunOptions(**options))
    except Exception as exc:  # the point fails, not the experiment
        text = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
        return {"point": point, "run_id": None, "metrics": None, "outputs": [],
                "error": one_line(text)}
    manifest = summary["manifest"]
    return {"point": point, "run_id": summary["run_id"], "metrics": summary["metrics_ref"],
            "outputs": manifest["outputs"], "error": None}


def _point_name(parameters: dict) -> str:
    point = parameters.get("point") or {}
    return (("refit " if parameters.get("refit") else "point ")
            + shown_point(point))


POINT = Task(fn=run_point, name="experiment-point", task_run_name=_point_name,
             cache_policy=NO_CACHE, persist_result=False)


# Locally the grid points run one at a time: each child is a whole flow run (its own steps
# are submitted to its own thread pool), and many StRip children at once in one process held
# gigabytes on 2 cores for no gain.  `--runner dask` / `--dask-address` spread them over workers.
@flow(name="experiment", flow_run_name=namer("experiment"),
      task_runner=ThreadPoolTaskRunner(max_workers=1))
def experiment_flow(config: ExperimentConfig, options: RunOptions | None = None) -> dict:
    """One child run per grid point (through the task runner), then the table."""
    from scarce.flows.registry import FLOWS

    ctx = RunContext.open("experiment", config, options)
    points = grid(config)
    child = {"store": str(ctx.store.root), "runs": str(ctx.run_dir.parent),
             "refresh": ctx.options.refresh}
    progress = ctx.artifacts.progress("points", len(points), f"{len(points)} child runs")
    results = []
    spec = FLOWS[config.flow]
    for future in [POINT.submit(spec=spec, config=config, point=p, options=child)
                   for p in points]:
        results.append(future.result())
        progress.advance()
    for r in results:  # the experiment's record holds every child's outputs
        ctx.record.adopt(r["outputs"], child=r["run_id"])
    table = ctx.run(exp.gather, metrics=[r["metrics"] for r in results if r["error"] is None],
                    name=config.name, axes=axis_names(config), points=points,
                    errors=[r["error"] for r in results], family=spec.method_family)
    t = config.table
    summaries, tables = {}, []
    for metric in [t.metric, *t.also]:
        summaries[metric] = ctx.run(exp.summarise, table=table, rows=t.rows,
                                    columns=t.columns, metric=metric, methods=t.methods)
        tables.append(ctx.run(exp.as_metrics, summary=summaries[metric], name=config.name,
                              rows=t.rows, columns=t.columns, metric=metric))
    selection = None
    if config.select is not None:
        selection = _select_and_refit(ctx, config, spec, table, child)
        tables.append(selection["metrics"])
    metrics = tables[0] if len(tables) == 1 else ctx.run(exp.stack_metrics, tables=tables)
    publish(ctx, config, table, summaries, results, selection)
    return ctx.finish(metrics, headline={})


def _select_and_refit(ctx: RunContext, config: ExperimentConfig, spec: Any, table: str,
                      child: dict) -> dict:
    """The selection (``experiment-select``: the validation table, the chosen values) and the
    refit run with them (an error when it fails: the selection then has no result): its
    validation table ref, chosen point, run id and metrics ref (``experiment-refit-metrics``)."""
    s = config.select
    over = config.selected_axes()
    method = s.method or (config.flow if spec.method_family else None)
    ref = ctx.run(exp.select_point, table=table, metric=s.metric, direction=s.direction,
                  over=over, method=method, across=s.across, criterion=s.criterion)
    frame = ctx.read(ref)
    best = frame[frame["chosen"]].iloc[0]
    point = {axis: _axis_value(config, axis, best[axis]) for axis in over}
    best_of = "largest" if s.direction == "max" else "smallest"
    why = (f"the {best_of} mean {s.metric} on validation, {best['mean']:.6g} over "
           f"{best['n']} run(s)")
    if s.across is not None:
        conditions = len(config.axes[s.across])
        why = (f"the smallest mean rank of {s.metric} on validation within each of the "
               f"{conditions} values of {s.across}, {best['mean_rank']:.4g} (mean "
               f"{best['mean']:.6g})" if s.criterion == "mean-rank" else
               f"the {best_of} mean over the {conditions} values of {s.across} of {s.metric} "
               f"on validation, {best['mean']:.6g}")
    ctx.record.decide("selected " + ", ".join(over), point, why)
    conditions = [{}] if s.across is None else [
        {s.across: v} for v in axis_values(config, s.across)]
    futures = [POINT.submit(spec=spec, config=config, point={**point, **c}, options=child,
                            refit=True) for c in conditions]
    runs, tables = [], []
    for c, future in zip(conditions, futures, strict=True):
        result = future.result()
        where = shown_point({**point, **c})
        if result["error"] is not None:
            raise InputError(f"the refit with {where} failed: {result['error']}", key="select")
        ctx.record.adopt(result["outputs"], child=result["run_id"])
        runs.append(result["run_id"])
        tables.append(ctx.run(exp.refit_metrics, metrics=result["metrics"], name=config.name,
                              chosen=where))
    metrics = tables[0] if len(tables) == 1 else ctx.run(exp.stack_metrics_step, tables=tables)
    return {"table": ref, "point": point, "run_id": ", ".join(runs), "metrics": metrics}


def _axis_value(config: ExperimentConfig, axis: str, shown: str) -> Any:
    """The value of ``axis`` that the tables show as ``shown``
    (:func:`scarce.tasks.experiment.cell`; a named axis by its name)."""
    values = config.axes[axis]
    return next(v for v in values if exp.cell(v) == shown)


def publish(ctx: RunContext, config: ExperimentConfig, table: str, summaries: dict[str, str],
            results: list[dict], selection: dict | None = None) -> None:
    """The tables as named outputs and Prefect artifacts, and a plot of the first; with a
    selection, its validation table (``selection.parquet``) and the refit's test metrics."""
    t = config.table
    summary = summaries[t.metric]
    frame = ctx.read(summary)
    text = table_markdown(config, frame, results)
    if selection is not None:
        text += selection_markdown(config, ctx.read(selection["table"]), selection,
                                   ctx.read(selection["metrics"]))
        ctx.record.name_output("selection.parquet", selection["table"])
    for metric in t.also:
        text += (f"\n## {metric}\n\n"
                 + _markdown_or_none(exp.wide(ctx.read(summaries[metric]), t.rows, t.columns))
                 + "\n")
        ctx.record.name_output(summary_file(metric), summaries[metric])
    ctx.record.name_output("table.parquet", table)
    ctx.record.name_output("summary.parquet", summary)
    ctx.record.write_output("table.md", text)
    ctx.record.write_output("children.json", json.dumps(
        [{"point": r["point"], "run_id": r["run_id"], "error": r["error"]} for r in results],
        indent=1, sort_keys=True) + "\n", volatile=True)
    ctx.artifacts.markdown("table", text, f"{t.metric} of {config.flow} over the grid")
    if not frame.empty:
        png = ctx.artifacts.plot(summary_plot, frame, rows=t.rows, columns=t.columns,
                                 metric=t.metric, title=f"{config.name}: {t.metric}")
        ctx.artifacts.image("plot", png,
                            f"{t.metric}: mean and standard deviation over the other axes")


def table_markdown(config: ExperimentConfig, summary: pd.DataFrame, results: list[dict]) -> str:
    """The experiment's table as markdown, with its grid and the failed points."""
    t = config.table
    over = [a for a in axis_names(config) if a not in (*t.rows, *t.columns)]
    lines = [f"# {config.name}: {t.metric}", "",
             f"{config.flow} over "
             f"{' x '.join(f'{k} ({len(config.axes[k])})' for k in axis_names(config))}"
             f" = {len(results)} runs" + (f"; mean ± std over {', '.join(over)}" if over else ""),
             ""]
    lines.append(_markdown_or_none(exp.wide(summary, t.rows, t.columns)))
    failed = [r for r in results if r["error"] is not None]
    if failed:
        lines += ["", f"{len(failed)} point(s) failed:", ""]
        lines += [f"- {', '.join(f'{k}={exp.cell(v)}' for k, v in r['point'].items())}: "
                  f"{r['error']}" for r in failed]
    return "\n".join(lines) + "\n"


def selection_markdown(config: ExperimentConfig, validation: pd.DataFrame, selection: dict,
                       refit: pd.DataFrame) -> str:
    """The selection as markdown: the validation table, the chosen values, the refit's run
    and its metrics (on test)."""
    s = config.select
    chosen = shown_point(selection["point"])
    shown = validation.assign(chosen=validation["chosen"].map({True: "←", False: ""}))
    refit_with = shown_point(s.refit)
    lines = ["", f"## Selection: {s.metric} on validation ({s.direction})", "",
             markdown_table(shown), "",
             f"Chosen: {chosen}. Refit ({refit_with}): run {selection['run_id']}", "",
             markdown_table(refit[["method", "metric", "value"]]), ""]
    return "\n".join(lines)


def summary_file(metric: str) -> str:
    """The output name of a ``table.also`` metric's summary: ``summary-<metric>.parquet``
    with ``@`` as ``-at-`` and any other character outside letters, digits, ``.``, ``_``
    and ``-`` as ``_`` (``psp@5``: ``summary-psp-at-5.parquet``)."""
    return "summary-" + re.sub(r"[^A-Za-z0-9._-]", "_", metric.replace("@", "-at-")) + ".parquet"


def _markdown_or_none(table: pd.DataFrame) -> str:
    return markdown_table(table) if not table.empty else "(no finished point)"


def plan(config: ExperimentConfig, runs_root: Path, store_root: Path) -> pd.DataFrame:
    """What ``--dry-run`` prints: per grid point, whether its config is valid and how many steps
    a run would compute.

    Step keys chain the keys of their inputs, so they are known only by running the flow; what
    the records of earlier runs of the flow whose steps' code is today's (each output's step
    code digest, in the manifest) do tell:

    * a point whose config an earlier run finished: the steps whose entries are gone from the
      store (``0``: *cached*; more: *partly cached*, e.g. after ``scarce cache gc``), exact;
    * a new point: the step count of the earlier run whose config is nearest (fewest differing
      keys), as ``~N``, an upper bound where steps are shared with other points (a parse of the
      same data is found cached); ``?`` when no earlier run of the flow exists.
    """
    from scarce.flows import manifest as mf
    from scarce.flows.registry import FLOWS
    from scarce.tasks.store import Store
    from scarce.tasks.store.layout import KEY_HEX

    FLOWS[config.flow].load_flow()  # imports every step of the flow
    current = step_code()
    source = mf.code_version()["source_sha256"]

    def same_code(m: dict) -> bool:
        """Its step keys are today's: each step's code digest as now (a manifest from before
        digests were recorded: the same project source)."""
        if all(o.get("code") for o in m["outputs"]):
            return all(current.get(o["step"]) == o["code"] for o in m["outputs"])
        return (m.get("code") or {}).get("source_sha256") == source

    store = Store(store_root)
    done: dict[str, tuple[dict, list[dict]]] = {}  # config key -> (config, outputs)
    if runs_root.is_dir():
        for d in sorted(runs_root.iterdir()):
            try:
                m = mf.read_manifest(d)
            except InputError:
                continue
            if m["flow"] == config.flow and m["outputs"] and same_code(m):
                done.setdefault(_config_key(m["config"]), (m["config"], m["outputs"]))

    def steps(outputs: list[dict]) -> dict[tuple[str, str], list[str]]:
        calls: dict[tuple[str, str], list[str]] = {}
        for o in outputs:  # a ref is <step>/<key>[-<part>]
            calls.setdefault((o["step"], o["ref"].split("/", 1)[1][:KEY_HEX]), []).append(o["ref"])
        return calls

    rows = []
    for point in grid(config):
        where = shown_point(point)
        try:
            child = point_config(config, point).model_dump(mode="json")
        except InputError as exc:
            rows.append((where, "invalid", "", str(exc)))
            continue
        key = _config_key(child)
        if key in done:
            outputs = done[key][1]
            missing = sum(not all(store.exists(r) for r in refs)
                          for refs in steps(outputs).values())
            rows.append((where, "partly cached" if missing else "cached", str(missing), ""))
        elif done:
            nearest = min(done, key=lambda k: (_distance(done[k][0], child), k))
            rows.append((where, "to run", f"~{len(steps(done[nearest][1]))}", ""))
        else:
            rows.append((where, "to run", "?", ""))
    return pd.DataFrame(rows, columns=["point", "state", "uncached steps", "error"])


def step_code() -> dict[str, str]:
    """The code digest of every step imported so far, by step name."""
    import sys

    from scarce.tasks.steps import Step

    return {v.name: v.code_hash for m in list(sys.modules.values())
            for v in list(getattr(m, "__dict__", {}).values()) if isinstance(v, Step)}


def _config_key(config: dict) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def _distance(a: Any, b: Any) -> int:
    """The number of leaf values in which two configs differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return sum(_distance(a.get(k), b.get(k)) for k in set(a) | set(b))
    return int(a != b)


def summary_plot(summary: pd.DataFrame, rows: list[str], columns: list[str], metric: str,
                 title: str) -> bytes:
    """The summary as a figure: one point per row value (with its standard deviation as an
    error bar), one series per column value."""
    fig, (ax,) = plots._figure(6.4, 3.6)
    labels = [" / ".join(str(v) for v in r) for r in summary[rows].itertuples(index=False)]
    order = list(dict.fromkeys(labels))
    x = {label: i for i, label in enumerate(order)}
    series = ([" / ".join(str(v) for v in r) for r in summary[columns].itertuples(index=False)]
              if columns else [metric] * len(summary))
    for k, name in enumerate(dict.fromkeys(series)):
        idx = [i for i, s in enumerate(series) if s == name]
        ax.errorbar([x[labels[i]] + 0.06 * k for i in idx],
                    summary["mean"].to_numpy()[idx], yerr=summary["std"].to_numpy()[idx],
                    fmt="o-", capsize=3, color=plots.COLOURS[k % len(plots.COLOURS)],
                    label=name, linewidth=1)
    ax.set_xticks(range(len(order)), order, rotation=30 if len(order) > 6 else 0,
                  fontsize=8)
    ax.set_xlabel(" / ".join(rows))
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=9)
    if columns:
        ax.legend(fontsize=7, frameon=False)
    return plots._png(fig)
