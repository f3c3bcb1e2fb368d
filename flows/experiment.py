"""Experiments as flows: a paper's table is a grid of cached flow runs.

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

``scarce run experiment NAME`` runs the ``experiment`` flow: one child flow run per grid point
(the flow unchanged, each with its own run folder and manifest, tagged ``experiment:<name>``),
submitted to the task runner so that ``--runner dask`` / ``--dask-address`` spread the grid, every
child's steps cached in the store as always (a grid extended by one seed computes only the new
seed); then the table: ``outputs/table.parquet`` (long form: the axes, the child run, each
metric), ``outputs/summary.parquet`` and ``outputs/table.md`` (the metric's mean and spread over
the axes not in the table's rows and columns).  A grid point whose config is invalid or whose
run fails is one row with its error; the other points finish.  The experiment's manifest lists
every child's outputs, so ``scarce rerun`` of the experiment reruns every child and compares
every output, the table included.  ``--dry-run`` counts the child runs and what each would
compute, and runs nothing.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import Task, flow
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field, field_validator, model_validator

from scarce.flows import plots
from scarce.flows.config import (
    SAFE_NAME,
    FlowConfig,
    Strict,
    apply_values,
    config_path,
    input_path,
    load_config,
    read_yaml,
    resolve_path,
    validate_config,
)
from scarce.flows.runtime import RunContext, RunOptions, markdown_table
from scarce.tasks import experiment as exp
from scarce.tasks.errors import InputError, one_line

EXPERIMENTS = "configs/experiments"


class TableSpec(Strict):
    """The table an experiment builds from its children's metrics."""

    metric: str = Field(description="The metric shown (a `metric` of the flow's metrics).")
    rows: list[str] = Field(min_length=1, description="Axes (or `method`, `dataset`) of the "
                            "table's rows.")
    columns: list[str] = Field(default_factory=list, description="Axes (or `method`, "
                               "`dataset`) of its columns.")
    methods: list[str] | None = Field(None, description="Only these methods; null: all.")


class ExperimentConfig(FlowConfig):
    """``configs/experiments/<name>.yaml``: a grid of runs of one flow and its table."""

    flow: str = Field(description="The flow of every grid point (leml, relations, strip).")
    base: str = input_path("file", description="The base config file, relative to the "
                           "project root.")
    base_config: dict[str, Any] = Field(
        default_factory=dict,
        description="The base file's content, read when the experiment is loaded (so that a "
        "rerun uses the same base whatever the file says later); filled by the loader.")
    set: dict[str, Any] = Field(default_factory=dict, description="Fixed overrides of every "
                                "point, by dotted key (as --set).")
    axes: dict[str, list[Any] | dict[str, Any]] = Field(
        min_length=1, description="The grid: dotted config keys and the values each takes, or "
        "named settings (an axis name, each value a name for a mapping of dotted keys to "
        "values set together, e.g. a corpus: its data files and dataset name).")
    table: TableSpec

    @field_validator("flow")
    @classmethod
    def _training_flow(cls, v: str) -> str:
        from scarce.flows.registry import FLOWS

        if v not in FLOWS or FLOWS[v].kind != "train":
            known = sorted(n for n, s in FLOWS.items() if s.kind == "train")
            raise ValueError(f"unknown flow {v!r} (known: {', '.join(known)})")
        return v

    @field_validator("axes")
    @classmethod
    def _axes(cls, axes: dict[str, Any]) -> dict[str, Any]:
        for key, values in axes.items():
            if not values:
                raise ValueError(f"axis {key!r} has no values")
            if isinstance(values, dict):
                for name, settings in values.items():
                    if not isinstance(settings, dict) or not settings:
                        raise ValueError(f"axis {key!r}: {name!r} must map config keys to "
                                         "values")
                continue
            shown = [exp.cell(v) for v in values]
            if len(set(shown)) != len(shown):
                raise ValueError(f"axis {key!r} lists a value twice")
        return axes

    @model_validator(mode="after")
    def _table_names_known_columns(self) -> ExperimentConfig:
        known = {*self.axes, "method", "dataset"}
        for name in (*self.table.rows, *self.table.columns):
            if name not in known:
                raise ValueError(f"table: {name!r} is neither an axis nor method / dataset")
        if set(self.table.rows) & set(self.table.columns):
            raise ValueError("table: rows and columns share a name")
        return self


def experiment_file(name: str) -> Path:
    """``configs/experiments/<name>.yaml`` (an existing path is taken as it is)."""
    if Path(name).suffix in (".yaml", ".yml"):
        return resolve_path(name)
    if not re.fullmatch(SAFE_NAME, name):
        raise InputError(f"not an experiment name: {name!r}", key="experiment")
    return config_path(f"{EXPERIMENTS}/{name}.yaml")


def load_experiment(path: Path, overrides: list[str] | None = None) -> ExperimentConfig:
    """Read, override and validate an experiment file; the base config is read into it and the
    fixed overrides and every axis key are checked against the flow's config keys."""
    from scarce.flows.registry import FLOWS

    config = load_config(path, ExperimentConfig, overrides)
    if config.name is None:
        config = config.model_copy(update={"name": path.stem})
    model = FLOWS[config.flow].load_model()
    base_path = config_path(config.base)
    base = read_yaml(base_path, "base config") or {}
    if not isinstance(base, dict):
        raise InputError("a config must be a mapping of keys to values", path=base_path)
    base = apply_values(base, config.set, model, path)
    for key, values in config.axes.items():  # every key an axis sets is a key of the flow
        for settings in (values.values() if isinstance(values, dict) else [{key: values[0]}]):
            apply_values(base, settings, model, path)
    validate_config(base, model, base_path)  # the base itself must be valid
    return config.model_copy(update={"base_config": base})


def grid(config: ExperimentConfig) -> list[dict[str, Any]]:
    """Every point of the grid, the last axis varying fastest (a named axis by its names)."""
    keys = list(config.axes)
    return [dict(zip(keys, values, strict=True))
            for values in itertools.product(*(list(config.axes[k]) for k in keys))]


def settings(config: ExperimentConfig, point: dict[str, Any]) -> dict[str, Any]:
    """The dotted config keys a grid point sets (a named axis value expanded)."""
    out: dict[str, Any] = {}
    for axis, value in point.items():
        values = config.axes[axis]
        out.update(values[value] if isinstance(values, dict) else {axis: value})
    return out


def point_config(config: ExperimentConfig, point: dict[str, Any], spec: Any = None) -> Any:
    """The validated config of one grid point (an :class:`InputError` naming the point)."""
    from scarce.flows.registry import FLOWS

    model = (spec or FLOWS[config.flow]).load_model()
    data = apply_values(config.base_config, settings(config, point), model)
    where = ", ".join(f"{k}={exp.cell(v)}" for k, v in point.items())
    return validate_config(data, model, f"{config.name} [{where}]")


def run_point(spec: Any, config: ExperimentConfig, point: dict[str, Any], options: dict) -> dict:
    """Run the child flow (``spec``, a :class:`~flows.registry.FlowSpec`, which travels to a
    Dask worker by its import paths) of one grid point; its run id, metrics ref and outputs, or
    the error that stopped it (the other points go on)."""
    from prefect import tags

    try:
        child = point_config(config, point, spec)
        with tags(f"experiment:{config.name}"):
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
    return "point " + ", ".join(f"{k}={exp.cell(v)}" for k, v in point.items())


POINT = Task(fn=run_point, name="experiment-point", task_run_name=_point_name,
             cache_policy=NO_CACHE, persist_result=False)


# Locally the grid points run one at a time: each child is a whole flow run (its own steps
# are submitted to its own thread pool), and many StRip children at once in one process held
# gigabytes on 2 cores for no gain.  `--runner dask` / `--dask-address` spread them over workers.
@flow(name="experiment", flow_run_name="experiment-{config.name}",
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
                    name=config.name, axes=list(config.axes), points=points,
                    errors=[r["error"] for r in results], family=spec.method_family)
    t = config.table
    summary = ctx.run(exp.summarise, table=table, rows=t.rows, columns=t.columns,
                      metric=t.metric, methods=t.methods)
    metrics = ctx.run(exp.as_metrics, summary=summary, name=config.name, rows=t.rows,
                      columns=t.columns, metric=t.metric)
    publish(ctx, config, table, summary, results)
    return ctx.finish(metrics, headline={})


def publish(ctx: RunContext, config: ExperimentConfig, table: str, summary: str,
            results: list[dict]) -> None:
    """The table as named outputs and Prefect artifacts, and a plot of it."""
    t = config.table
    frame = ctx.read(summary)
    text = table_markdown(config, frame, results)
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
    over = [a for a in config.axes if a not in (*t.rows, *t.columns)]
    lines = [f"# {config.name}: {t.metric}", "",
             f"{config.flow} over {' x '.join(f'{k} ({len(v)})' for k, v in config.axes.items())}"
             f" = {len(results)} runs" + (f"; mean ± std over {', '.join(over)}" if over else ""),
             ""]
    table = exp.wide(summary, t.rows, t.columns)
    lines.append(markdown_table(table) if not table.empty else "(no finished point)")
    failed = [r for r in results if r["error"] is not None]
    if failed:
        lines += ["", f"{len(failed)} point(s) failed:", ""]
        lines += [f"- {', '.join(f'{k}={exp.cell(v)}' for k, v in r['point'].items())}: "
                  f"{r['error']}" for r in failed]
    return "\n".join(lines) + "\n"


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
    from scarce.tasks.store import KEY_HEX, Store

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
        where = ", ".join(f"{k}={exp.cell(v)}" for k, v in point.items())
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
