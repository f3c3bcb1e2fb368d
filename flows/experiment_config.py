"""The experiment's config schema (``configs/experiments/<name>.yaml``), its grid and the
configs of its points.

Apart from the flow (:mod:`scarce.flows.experiment`), and importing neither Prefect, scikit-learn
nor
Dask, so that ``scarce run experiment`` validates the experiment and checks its grid points
(each by its flow's own checks) before it imports the flow or starts a server.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from scarce.flows.config import (
    NAME_LENGTH,
    SAFE_NAME,
    FlowConfig,
    Strict,
    apply_values,
    check_inputs,
    config_path,
    input_path,
    load_config,
    read_yaml,
    resolve_path,
    shipped_default,
    validate_config,
)
from scarce.tasks import experiment as exp
from scarce.tasks.errors import InputError, excerpt

EXPERIMENTS = "configs/experiments"


class TableSpec(Strict):
    """The table an experiment builds from its children's metrics."""

    metric: str = Field(description="The metric shown (a `metric` of the flow's metrics).")
    also: list[str] = Field(
        default_factory=list, description="Further metrics, each summarised over the same "
        "rows and columns: its own table in table.md and summary-<metric>.parquet (@ written "
        "-at-: summary-psp-at-5.parquet), its mean and spread in the experiment's metrics.")
    rows: list[str] = Field(min_length=1, description="Axes (or `method`, `dataset`) of the "
                            "table's rows.")
    columns: list[str] = Field(default_factory=list, description="Axes (or `method`, "
                               "`dataset`) of its columns.")
    methods: list[str] | None = Field(None, description="Only these methods; null: all.")

    @field_validator("also")
    @classmethod
    def _also_names_files(cls, also: list[str]) -> list[str]:
        for metric in also:  # each names an output file (summary_file), found at the end
            if not 0 < len(metric) <= NAME_LENGTH:
                raise ValueError(f"{excerpt(metric)} names a file, summary-<metric>.parquet: "
                                 f"give 1 to {NAME_LENGTH} characters")
        return also


class SelectSpec(Strict):
    """Hyperparameters chosen inside the experiment: every grid point is run as ``set`` says
    (on a validation split: for LEML ``dataset.evaluate_on: validation``), the best point by
    ``metric`` is chosen, and the flow is run once more with the chosen values and ``refit``
    (on the whole training set, evaluated on test)."""

    metric: str = Field(description="The metric the points are compared by (a `metric` of "
                        "the flow's metrics, computed on the validation split).")
    direction: Literal["max", "min"] = Field("max", description="Whether the largest or the "
                                             "smallest mean is best.")
    over: list[str] | None = Field(
        None, description="The axes chosen; the metric is averaged over the others (null: "
        "every axis but seed).")
    method: str | None = Field(
        None, description="The method whose metric counts (null: the flow's own, e.g. leml "
        "and not its baselines).")
    refit: dict[str, Any] = Field(
        min_length=1, description="Overrides of the final run, by dotted key (as --set): "
        "back to the whole training set and the test file.")
    across: str | None = Field(
        None, description="An axis whose values are conditions (data sets, splits, label "
        "rates) that one setting must hold on: the metric is compared within each, "
        "`criterion` combines them, a point that failed on one is not chosen, and the refit "
        "runs once per condition (null: one condition).")
    criterion: Literal["mean", "mean-rank"] = Field(
        "mean", description="How the conditions of `across` are combined: the mean of the "
        "metric, or the mean of each point's rank within each condition (1 = best, ties "
        "averaged; the larger mean breaks a tie). Written before the search runs.")


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
    select: SelectSpec | None = Field(
        None, description="Choose hyperparameters on validation and refit (null: a table "
        "only).")

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
        if self.select is not None:
            unknown = [a for a in self.select.over or [] if a not in self.axes]
            if unknown:
                raise ValueError(f"select.over: {', '.join(unknown)} is not an axis")
            across = self.select.across
            if across is not None and across not in self.axes:
                raise ValueError(f"select.across: {across!r} is not an axis")
            if across is not None and across in (self.select.over or []):
                raise ValueError(f"select: {across!r} is both chosen (over) and a condition "
                                 "(across)")
            if self.select.criterion != "mean" and across is None:
                raise ValueError(f"select.criterion {self.select.criterion} compares "
                                 "conditions: name their axis in select.across")
            if not self.selected_axes():
                raise ValueError("select: no axis to choose (select.over)")
        return self

    def check_before_run(self, runs: Path, store: Path) -> None:
        """The grid points as their flow checks them before it starts
        (:meth:`scarce.flows.config.FlowConfig.check_before_run`): refused when no point could run,
        naming the first point's error.  A point that cannot run while others can is a row
        of the table with its error, as when its run fails; so the points are checked only
        until one passes.  (The base file is not looked for: its content was read with the
        experiment, and a rerun uses what its manifest recorded.)"""
        from scarce.algorithms.memory import MemoryBudgetError

        points = grid(self)
        first: tuple[dict[str, Any], InputError] | None = None
        for point in points:
            try:
                point_config(self, point).check_before_run(runs, store)
            except (InputError, MemoryBudgetError) as exc:
                error = exc if isinstance(exc, InputError) else InputError(str(exc))
                first = first or (point, error)
                continue
            return
        if first is not None:
            point, error = first
            raise InputError(f"none of the {len(points)} grid points can run; the first "
                             f"({shown_point(point)}): {error.message}", path=error.path,
                             line=error.line, key=error.key)

    def selected_axes(self) -> list[str]:
        """The axes a selection chooses: ``select.over``, else every axis but ``seed`` and the
        conditions (``select.across``)."""
        if self.select is None:
            return []
        return list(self.select.over or [a for a in sorted(self.axes)
                                         if a not in ("seed", self.select.across)])


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
    if config.name is None:  # the file's name names the runs: it must be a name as `name:` is
        if not re.fullmatch(SAFE_NAME, path.stem):
            raise InputError(f"the file's name {excerpt(path.stem)} cannot name the runs: give "
                             f"the experiment a name: (at most {NAME_LENGTH} letters, digits, "
                             "'.', '_', '-')", path=path, key="name")
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
    if config.select is not None:  # the refit's keys are the flow's, its config valid
        validate_config(apply_values(base, config.select.refit, model, path), model,
                        f"{path} (select.refit)")
    config = config.model_copy(update={"base_config": base})
    if shipped_default(base_path) is not None:  # no project here: are the shipped data?
        for point in grid(config):
            try:
                child = point_config(config, point)
            except InputError:  # an invalid point is a row of the table, as in a project
                continue
            check_inputs(child, base_path)
    return config


def axis_names(config: ExperimentConfig) -> list[str]:
    """The grid's axes in their canonical order: by name.

    Not in the order the file lists them: a run's manifest records its config as JSON with
    sorted keys (and a mapping's order is no part of YAML or JSON), so ``scarce rerun`` would
    build the grid in another order, with other points in the table's step key, and a rerun of
    an experiment whose axes are not in name order would never be identical."""
    return sorted(config.axes)


def axis_values(config: ExperimentConfig, axis: str) -> list[Any]:
    """The values of ``axis`` in grid order: a list as written, a named axis by its names
    (sorted, as :func:`axis_names`)."""
    values = config.axes[axis]
    return sorted(values) if isinstance(values, dict) else list(values)


def grid(config: ExperimentConfig) -> list[dict[str, Any]]:
    """Every point of the grid, the axes by name (:func:`axis_names`), the last varying
    fastest (a named axis by its names)."""
    keys = axis_names(config)
    return [dict(zip(keys, values, strict=True))
            for values in itertools.product(*(axis_values(config, k) for k in keys))]


def settings(config: ExperimentConfig, point: dict[str, Any]) -> dict[str, Any]:
    """The dotted config keys a grid point sets (a named axis value expanded)."""
    out: dict[str, Any] = {}
    for axis, value in point.items():
        values = config.axes[axis]
        out.update(values[value] if isinstance(values, dict) else {axis: value})
    return out


def shown_point(values: dict[str, Any]) -> str:
    """Settings as the logs and tables show them: ``key=value, ...`` (values by
    :func:`scarce.tasks.experiment.cell`)."""
    return ", ".join(f"{k}={exp.cell(v)}" for k, v in values.items())


def point_config(config: ExperimentConfig, point: dict[str, Any], spec: Any = None,
                 refit: bool = False) -> Any:
    """The validated config of one grid point (an :class:`InputError` naming the point); with
    ``refit``, of the selection's final run (``select.refit`` over the point's values)."""
    from scarce.flows.registry import FLOWS

    model = (spec or FLOWS[config.flow]).load_model()
    data = apply_values(config.base_config, settings(config, point), model)
    if refit:
        data = apply_values(data, config.select.refit, model)
    where = shown_point(point)
    return validate_config(data, model, f"{config.name} [{where}{', refit' if refit else ''}]")
