"""``scarce run``: one registered flow, every training flow (``all``), or an experiment's grid
of runs (``--dry-run``: its plan, nothing run)."""

from __future__ import annotations

import argparse
from typing import Any

from scarce.flows.commands import EXIT_OK
from scarce.flows.commands.running import (
    check_runs,
    choose_runner,
    execute,
    prefect_api,
    preflight,
    print_frame,
    print_summary,
)


def _specs(name: str) -> list[Any]:
    """The registered flows ``name`` stands for (``all``: every training flow)."""
    from scarce.flows.registry import FLOWS
    from scarce.tasks.errors import InputError

    if name == "all":  # every training flow (an apply flow needs a model run and input)
        train = [s for s in FLOWS.values() if s.kind == "train"]
        if not train:
            raise InputError("no flows are registered")
        return train
    if name not in FLOWS:
        known = ", ".join(sorted(FLOWS)) or "none"
        raise InputError(f"unknown flow {name!r} (known: {known}, all)")
    return [FLOWS[name]]


def run(args: argparse.Namespace) -> int:
    """``scarce run FLOW``: every config and the environment checked, then each flow run."""
    from scarce.flows.config import config_path, load_config, resolve_path
    from scarce.tasks.errors import InputError

    specs = _specs(args.flow)
    if args.config and len(specs) > 1:
        raise InputError("--config names one flow's file; use it with a single flow")
    if (args.name or args.dry_run) and args.flow != "experiment":
        raise InputError(f"a name and --dry-run go with `scarce run experiment`, not "
                         f"{args.flow!r}")
    # Validate every config and the environment before running anything: a typo fails in a
    # second, not after the first flow.
    plans = []
    for spec in specs:
        if spec.kind == "experiment":
            plans.append((spec, _experiment_config(args)))
        else:
            path = resolve_path(args.config) if args.config else config_path(spec.config_file)
            plans.append((spec, load_config(path, spec.load_model(), args.overrides)))
    if args.dry_run:
        return _dry_run(plans[0][1])
    preflight(args.dask_address)
    check_runs([config for _, config in plans])  # before the server starts
    from scarce.flows.runtime import RunOptions  # (with Prefect: after the checks)

    summaries = []
    with prefect_api():  # one Prefect server for every flow of the command
        for spec, config in plans:
            runner = choose_runner(args)
            options = RunOptions(refresh=args.refresh, runner=runner,
                                 dask_address=args.dask_address)
            summary = execute(spec, config, options, runner, args.dask_address)
            summaries.append(summary)
            print_summary(spec.name, summary)
    if len(summaries) > 1:
        _print_metrics_table(summaries)
    return EXIT_OK


def _refits(config) -> str:
    """What a selection adds to an experiment: one refit, or one per condition."""
    across = config.select.across
    if across is None:
        return "; then one refit run with the values the selection chooses"
    return (f"; then one refit run per value of {across} ({len(config.axes[across])}) with the "
            "values the selection chooses")


def _experiment_config(args: argparse.Namespace) -> Any:
    from scarce.flows.experiment_config import experiment_file, load_experiment
    from scarce.tasks.errors import InputError

    if not (args.name or args.config):
        raise InputError("`scarce run experiment` needs the experiment's name (a file of "
                         "configs/experiments/) or --config PATH", key="experiment")
    return load_experiment(experiment_file(args.config or args.name), args.overrides)


def _dry_run(config: Any) -> int:
    from scarce.flows.environment import default_runs_root, default_store_root
    from scarce.flows.experiment import plan
    from scarce.tasks.store import Store

    table = plan(config, default_runs_root(), Store(default_store_root()).root)
    print_frame(table)
    counts = table["state"].value_counts()
    steps = table["uncached steps"]
    exact = steps[table["state"] == "partly cached"].astype(int).sum()
    guessed = [int(s[1:]) for s in steps if s.startswith("~")]
    to_run = counts.get("to run", 0)
    print(f"\n{config.name}: {len(table)} child runs of {config.flow}: "
          f"{counts.get('cached', 0)} cached (0 uncached steps), "
          f"{counts.get('partly cached', 0)} partly cached ({exact} uncached steps), "
          f"{to_run} to run"
          + (f" (at most ~{sum(guessed)} steps, counted on the nearest earlier runs)"
             if guessed else " (every step)" if to_run else "")
          + f", {counts.get('invalid', 0)} invalid"
          + (_refits(config) if config.select is not None else ""))
    return EXIT_OK


def _print_metrics_table(summaries: list[dict]) -> None:
    """The headline metrics of every run, one row per dataset and method."""
    import pandas as pd

    rows = []
    for s in summaries:
        m = s["manifest"]
        for key, value in (m.get("headline") or {}).items():
            dataset, method, metric = key.split("/", 2)
            rows.append(
                {
                    "flow": m["flow"],
                    "dataset": dataset,
                    "method": method,
                    "metric": metric,
                    "value": value,
                }
            )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return
    wide = frame.pivot_table(
        index=["flow", "dataset", "method"], columns="metric", values="value", sort=False
    ).reset_index()
    print("\n== summary (headline metrics; every metric is in each run's metrics.parquet)")
    print_frame(wide.fillna(""))

