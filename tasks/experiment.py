"""Steps of the experiment flow: a grid of child runs gathered into one table.

``experiment-table`` stacks the metrics of every grid point's child run (long form, one column
per axis) with the failed points' errors; ``experiment-summary`` aggregates it into the table a
paper shows: one row per value of the row axes, one column per value of the column axes, the
metric's mean and spread over the remaining axes (the seeds).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from scarce.tasks.steps import step

METRIC_COLUMNS = ["dataset", "method", "metric", "value"]


def cell(value) -> str:
    """An axis value as the table shows it (lists and mappings as compact JSON)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@step("experiment-table", inputs=("metrics",), run_name="gather {name}")
def gather(metrics: list[pd.DataFrame], name: str, axes: list[str], points: list[dict],
           errors: list[str | None], family: str | None = None) -> pd.DataFrame:
    """The long table: for each grid point (in grid order) its axis values and each metric of
    its run (``dataset``, ``method``, ``metric``, ``value``); a failed point is one row with its
    ``error`` and no metric.  (The child run ids, which differ between equal runs, are in the
    experiment's ``children.json``.)

    ``metrics`` holds the metrics tables of the points that finished, in grid order.
    ``family``, a flow whose method names hold settings (LEML's ``leml-squared-k100``): a
    pattern whose first group is the method (``leml``), so that the table's ``method`` is one
    column across the grid's losses and ranks, not one per point; the full name is kept in
    ``method_name``.
    """
    tables = iter(metrics)
    rows = []
    for point, error in zip(points, errors, strict=True):
        fixed = {a: cell(point[a]) for a in axes}  # a column per axis, named by its key
        if error is not None:
            rows.append(pd.DataFrame([{**fixed, "error": error, "dataset": None,
                                       "method": None, "metric": None, "value": np.nan}]))
            continue
        table = next(tables)[METRIC_COLUMNS].copy()
        for column, value in reversed(list(fixed.items())):
            table.insert(0, column, value)
        table["error"] = None
        rows.append(table)
    columns = [*axes, "error", *METRIC_COLUMNS]
    out = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=columns)
    out = out[columns]
    out["value"] = out["value"].astype(float)
    if family is not None:
        pattern = re.compile(family)

        def method(name):
            match = pattern.match(name) if isinstance(name, str) else None
            return match.group(1) if match else name

        out["method_name"] = out["method"]
        out["method"] = out["method"].map(method)
    return out.reset_index(drop=True)


@step("experiment-summary", inputs=("table",), run_name="summarise {metric}")
def summarise(table: pd.DataFrame, rows: list[str], columns: list[str], metric: str,
              methods: list[str] | None = None) -> pd.DataFrame:
    """The paper's table in long form: for each combination of the ``rows`` and ``columns``
    (axes, or ``method`` / ``dataset`` of the metrics) the ``metric``'s mean, standard
    deviation (ddof 1; 0 for one value) and count over the other axes; failed points left out.
    """
    keep = table[(table["metric"] == metric) & table["error"].isna()]
    if methods is not None:
        keep = keep[keep["method"].isin(methods)]
    keys = [*rows, *columns]
    if keep.empty:
        return pd.DataFrame(columns=[*keys, "mean", "std", "n"])
    grouped = keep.groupby(keys, sort=False, dropna=False)["value"]
    out = grouped.agg(mean="mean", n="count").reset_index()
    std = grouped.std(ddof=1).reset_index(drop=True).fillna(0.0)
    out.insert(len(keys) + 1, "std", std.to_numpy())
    out["n"] = out["n"].astype(np.int64)
    return out.reset_index(drop=True)


def wide(summary: pd.DataFrame, rows: list[str], columns: list[str], digits: int = 3
         ) -> pd.DataFrame:
    """The summary as the paper prints it: one row per ``rows`` value, one column per
    ``columns`` value, cells ``mean ± std`` (``mean`` alone over a single value)."""
    if summary.empty:
        return pd.DataFrame()

    def shown(r) -> str:
        return (f"{r['mean']:.{digits}f}" if r["n"] <= 1
                else f"{r['mean']:.{digits}f} ± {r['std']:.{digits}f}")

    frame = summary.assign(cell=summary.apply(shown, axis=1))
    if not columns:
        return frame[[*rows, "cell"]].rename(columns={"cell": "value"})
    table = frame.pivot_table(index=rows, columns=columns, values="cell", aggfunc="first",
                              sort=False)
    table.columns = [" / ".join(map(str, c)) if isinstance(c, tuple) else str(c)
                     for c in table.columns]
    return table.fillna("").reset_index()  # a combination no run made is an empty cell


@step("experiment-metrics", inputs=("summary",), run_name="metrics of {name}")
def as_metrics(summary: pd.DataFrame, name: str, rows: list[str], columns: list[str],
               metric: str) -> pd.DataFrame:
    """The summary in the metrics' long form (the experiment run's ``metrics.parquet``):
    ``dataset`` the experiment, ``method`` the cell (``row / column`` values), ``metric``
    ``<metric>_mean``, ``<metric>_std`` and ``n``."""
    out = []
    for r in summary.to_dict("records"):
        cell = " / ".join(str(r[k]) for k in [*rows, *columns])
        out += [(name, cell, f"{metric}_mean", float(r["mean"])),
                (name, cell, f"{metric}_std", float(r["std"])),
                (name, cell, "n", float(r["n"]))]
    return pd.DataFrame(out, columns=METRIC_COLUMNS)


@step("experiment-metrics-stack", inputs=("tables",), run_name="stack the metrics")
def stack_metrics(tables: list[pd.DataFrame]) -> pd.DataFrame:
    """The metrics of several summaries (:func:`as_metrics`), one after the other."""
    return pd.concat(tables, ignore_index=True)


@step("experiment-stack-metrics", inputs=("tables",), run_name="stack metrics")
def stack_metrics_step(tables: list) -> pd.DataFrame:
    """:func:`stack_metrics` as a step (the refits' metrics of a selection across
    conditions)."""
    return stack_metrics(tables)


@step("experiment-select", version="2", inputs=("table",), run_name="select by {metric}")
def select_point(table: pd.DataFrame, metric: str, direction: str, over: list[str],
                 method: str | None = None, across: str | None = None,
                 criterion: str = "mean") -> pd.DataFrame:
    """The validation table of a selection: for each combination of the ``over`` axes (in grid
    order) the ``metric``'s mean over the other axes (the seeds) and its count, for the rows of
    ``method`` (all when None, which must then be one method); ``chosen`` marks the best mean
    (the largest with ``direction`` ``max``, the smallest with ``min``; the first in grid order
    among equals).  Failed points and points without the metric are left out.

    With ``across`` (an axis of conditions): the mean over the other axes within each
    condition (a column per condition, named ``<across>=<value>``), then per point ``mean``
    (over the conditions) and ``mean_rank`` (its rank within each condition, 1 the best, ties
    averaged, then the mean over the conditions); a point missing from a condition (failed
    there) is not chosen.  ``criterion`` ``mean-rank`` chooses the smallest mean rank (the
    better mean among equals), ``mean`` the best mean."""
    keep = table[(table["metric"] == metric) & table["error"].isna()]
    if method is not None:
        keep = keep[keep["method"] == method]
    methods = sorted(keep["method"].dropna().unique())
    if method is None and len(methods) > 1:
        raise ValueError(f"select: the points have {metric} for several methods "
                         f"({', '.join(methods)}); name one in select.method")
    keep = keep[keep["value"].notna()]
    if keep.empty:
        raise ValueError(f"select: no finished point has {metric}"
                         + (f" for method {method}" if method else ""))
    if across is not None:
        return _select_across(keep, metric, direction, over, across, criterion)
    grouped = keep.groupby(over, sort=False)["value"]
    out = grouped.agg(mean="mean", n="count").reset_index()
    out["n"] = out["n"].astype(np.int64)
    best = out["mean"].idxmax() if direction == "max" else out["mean"].idxmin()
    out["chosen"] = out.index == best
    return out


def _select_across(keep: pd.DataFrame, metric: str, direction: str, over: list[str],
                   across: str, criterion: str) -> pd.DataFrame:
    """:func:`select_point` over conditions (see there)."""
    per = keep.groupby([*over, across], sort=False)["value"].agg(["mean", "count"])
    per = per.reset_index()
    conditions = list(dict.fromkeys(per[across]))
    per["rank"] = per.groupby(across, sort=False)["mean"].rank(
        ascending=direction == "min", method="average")
    out = per.groupby(over, sort=False).agg(
        mean=("mean", "mean"), mean_rank=("rank", "mean"), worst_rank=("rank", "max"),
        conditions=(across, "nunique"), n=("count", "sum")).reset_index()
    wide = per.pivot_table(index=over, columns=across, values="mean", sort=False)
    wide.columns = [f"{across}={c}" for c in wide.columns]
    out = out.merge(wide.reset_index(), on=over, how="left")
    out["n"] = out["n"].astype(np.int64)
    complete = out["conditions"] == len(conditions)
    if not complete.any():
        raise ValueError(f"select: no point finished in every value of {across}")
    sign = -1 if direction == "max" else 1
    if criterion == "mean-rank":
        order = np.lexsort((sign * out["mean"].to_numpy(), out["mean_rank"].to_numpy()))
    else:
        order = np.argsort(sign * out["mean"].to_numpy(), kind="stable")
    best = next(i for i in order if complete.iloc[i])
    out["chosen"] = out.index == best
    return out


@step("experiment-refit-metrics", inputs=("metrics",), run_name="metrics of the refit")
def refit_metrics(metrics: pd.DataFrame, name: str, chosen: str) -> pd.DataFrame:
    """The refit run's metrics in the experiment's metrics: ``dataset`` the experiment,
    ``method`` ``refit <chosen values> / <the run's method>``."""
    out = metrics[METRIC_COLUMNS].copy()
    out["method"] = [f"refit {chosen} / {m}" for m in out["method"]]
    out["dataset"] = name
    return out.reset_index(drop=True)
