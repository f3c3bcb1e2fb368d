"""The ``scarce`` command line.

::

    scarce run FLOW [--config PATH] [--set KEY=VALUE ...] [--runner local|dask]
                    [--dask-address ADDR]
    scarce rerun RUN_ID [--use-cache]
    scarce runs
    scarce cache ls | scarce cache gc [--dry-run]
    scarce deploy [--file PATH] [--only NAME ...]
    scarce serve [--file PATH] [--only NAME ...] [--limit N]
    scarce ui [--host HOST] [--port PORT]

Bad input (a config key, a malformed file, a missing run) prints one line
naming the file, line or key and exits with code 2; ``--debug`` shows the
traceback.  Any other failure exits 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAIL, EXIT_INPUT = 0, 1, 2
EXIT_PIPE = 141  # as a shell reports a command ended by SIGPIPE


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scarce",
        description="Reproducible pipelines for learning when labels are scarce.",
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run a flow (or 'all', or 'experiment NAME')")
    r.add_argument("flow", help="flow name, 'all', or 'experiment'")
    r.add_argument("name", nargs="?", help="the experiment (configs/experiments/NAME.yaml)")
    r.add_argument("--config", help="config YAML (default: configs/<flow>.yaml)")
    r.add_argument("--dry-run", action="store_true",
                   help="experiment: count the child runs and what each would compute, and "
                        "run nothing")
    r.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config key, e.g. --set model.rank=64 (repeatable)",
    )
    _runner_args(r)
    r.add_argument("--refresh", action="store_true", help="ignore the cache; recompute every step")

    rr = sub.add_parser("rerun", help="run again from a run's manifest and compare outputs")
    rr.add_argument("run_id")
    rr.add_argument("--use-cache", action="store_true", help="allow cached results")
    _runner_args(rr)

    ap = sub.add_parser("apply", help="apply what a finished run learned to new input")
    ap.add_argument("run_id", help="a training run id, or 'latest' / 'latest:NAME' with --flow")
    ap.add_argument("--input", required=True, help="input file, or a folder of input files")
    ap.add_argument("--output", help="output file (.parquet or .csv; StRip: .conllu) or "
                    "folder; never one of the inputs, nor inside the store or the runs folder; "
                    "default: only the apply run's outputs/")
    ap.add_argument("--force", action="store_true",
                    help="replace files that already exist at --output (without it an existing "
                         "file is an error and nothing is written)")
    ap.add_argument("--flow", help="the training flow, for 'latest' / 'latest:NAME'")
    ap.add_argument("--top-k", type=int, help="LEML: labels per row (default 5)")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    metavar="KEY=VALUE", help="override a key of the apply config")
    _runner_args(ap)

    ini = sub.add_parser("init", help="start a project: configs to edit, data/ and a README")
    ini.add_argument("dir", nargs="?", default=".", help="the project folder (default: here)")
    ini.add_argument("--force", action="store_true", help="replace files that exist")

    ru = sub.add_parser("runs", help="list past runs (one line each), or show one")
    ru.add_argument("run_id", nargs="?", help="show this run in detail")
    ru.add_argument("--flow", help="only the runs of this flow")

    cl = sub.add_parser("claims", help="check the paper's claims on a relations experiment")
    cl.add_argument("run_ids", nargs="+", metavar="run_id",
                    help="the id of an experiment over the relations flow; several are read as "
                         "one table (their row axes joined)")

    b = sub.add_parser("bench", help="run a benchmark and print its table")
    b.add_argument("name", help="leml, relations or strip")
    b.add_argument("bench_args", nargs=argparse.REMAINDER, help="options of the benchmark")

    c = sub.add_parser("cache", help="inspect or clean the Parquet result store")
    csub = c.add_subparsers(dest="cache_command", required=True)
    csub.add_parser("ls", help="list store entries")
    gc = csub.add_parser("gc", help="drop entries that no run refers to")
    gc.add_argument("--dry-run", action="store_true")

    dep = sub.add_parser("deploy", help="register configs/deployments.yaml with the server")
    srv = sub.add_parser("serve", help="register the deployments and run them on schedule")
    for q in (dep, srv):
        q.add_argument("--file", help="deployments YAML (default: configs/deployments.yaml)")
        q.add_argument(
            "--only", action="append", metavar="NAME", help="only this deployment (repeatable)"
        )
    srv.add_argument("--limit", type=int, help="at most this many runs at once")
    ui = sub.add_parser("ui", help="start the Prefect server and UI on this machine")
    ui.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ui.add_argument("--port", type=int, default=4200)
    return p


def _runner_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runner", choices=["local", "dask"],
                   help="task runner: local threads (default; for rerun: the run's own) or a "
                        "local Dask cluster")
    p.add_argument("--dask-address", help="scheduler address of an existing Dask cluster "
                   "(implies --runner dask)")


def _runner(args: argparse.Namespace, recorded: str | None = None) -> str:
    """The runner asked for: ``--runner``, else dask with ``--dask-address``, else the one a
    rerun's manifest recorded, else local."""
    if args.runner:
        return args.runner
    if args.dask_address:
        return "dask"
    return recorded or "local"


def main(argv: list[str] | None = None) -> int:
    from scarce.flows.runners import pin_threads

    pin_threads()  # before numpy or scipy are imported: one BLAS thread, Prefect offline
    args = _parser().parse_args(argv)
    from scarce.algorithms.memory import MemoryBudgetError
    from scarce.tasks.errors import InputError

    _log_to_stderr()
    previous = None
    if args.command in ("run", "rerun", "apply", "bench"):
        import signal

        _terminated.clear()
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return _dispatch(args)
    except (InputError, MemoryBudgetError) as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:  # the reader of stdout went away (`scarce runs | head`)
        _stdout_to_devnull()
        return EXIT_PIPE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143
    except Exception as exc:
        if _terminated:  # SIGTERM raised inside a library that wrapped it (seen: pydantic's
            # serializer turned it into a PydanticSerializationError): still a termination
            print("terminated", file=sys.stderr)
            return 143
        if args.debug:
            raise
        from scarce.tasks.errors import one_line

        print(f"error: {type(exc).__name__}: {one_line(str(exc))} (run with --debug for the "
              "traceback)", file=sys.stderr)
        return EXIT_FAIL
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit has nowhere to
    fail once the reader of a pipe has gone (Python's documented way out of SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file (captured in tests): nothing to flush
        pass


def _log_to_stderr() -> None:
    """Show this project's INFO messages (cache hits, run folders); Prefect logs its own."""
    logger = logging.getLogger("scarce")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(
            logging.Formatter("%(asctime)s | %(levelname)-7s | %(message)s", "%H:%M:%S")
        )
        logger.addHandler(handler)
        logger.propagate = False  # shown once, by this handler (Prefect's root handler aside)
    logger.setLevel(logging.INFO)


class _InputErrorWithoutTraceback(logging.Formatter):
    """Console formatter that leaves out the traceback of an :class:`InputError`.

    Prefect logs a failed task's traceback; for bad input the one-line message says
    all (the Prefect UI still gets the traceback through Prefect's API handler).
    """

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        from scarce.algorithms.memory import MemoryBudgetError
        from scarce.tasks.errors import InputError

        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, InputError | MemoryBudgetError):
            return self.inner.format(record)
        saved = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            return self.inner.format(record)
        finally:
            record.exc_info, record.exc_text = saved


def _quiet_input_errors() -> None:
    """Wrap the formatters of Prefect's console handlers (see the class above)."""
    from prefect.logging.configuration import PROCESS_LOGGING_CONFIG, setup_logging

    if not PROCESS_LOGGING_CONFIG:  # Prefect sets its handlers up lazily; do it now
        setup_logging()
    for name in ("", "prefect", "prefect.flow_runs", "prefect.task_runs"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(
                handler.formatter, _InputErrorWithoutTraceback
            ):
                handler.setFormatter(
                    _InputErrorWithoutTraceback(handler.formatter or logging.Formatter())
                )


def _dispatch(args: argparse.Namespace) -> int:
    if not args.debug and args.command in ("run", "rerun", "apply"):
        _quiet_input_errors()
    if args.command == "run":
        return cmd_run(args)
    if args.command == "rerun":
        return cmd_rerun(args)
    if args.command == "apply":
        return cmd_apply(args)
    if args.command == "runs":
        return cmd_runs(args)
    if args.command == "init":
        return cmd_init(args)
    if args.command == "bench":
        return cmd_bench(args)
    if args.command == "claims":
        return cmd_claims(args)
    if args.command in ("deploy", "serve", "ui"):
        from scarce.flows import deploy

        return getattr(deploy, f"cmd_{args.command}")(args)
    return cmd_cache(args)


# -- run ---------------------------------------------------------------------
def _specs(name: str) -> list[Any]:
    from scarce.flows.registry import FLOWS
    from scarce.tasks.errors import InputError

    if name == "all":  # every training flow (an apply flow needs a model run and input)
        specs = [s for s in FLOWS.values() if s.kind == "train"]
        if not specs:
            raise InputError("no flows are registered")
        return specs
    if name not in FLOWS:
        known = ", ".join(sorted(FLOWS)) or "none"
        raise InputError(f"unknown flow {name!r} (known: {known}, all)")
    return [FLOWS[name]]


def prefect_api() -> Any:
    """One Prefect API for the command (:func:`flows.runners.prefect_api`)."""
    from scarce.flows import runners

    return runners.prefect_api()


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every ``finally`` runs (leases released, the
    temporary Prefect server stopped) before the command exits."""


#: Set once SIGTERM arrived: the command ends as terminated (exit 143) whatever exception the
#: signal surfaced as.
_terminated: list[int] = []


def _raise_terminated(signum: int, frame: Any) -> None:
    _terminated.append(signum)
    raise Terminated


def preflight(address: str | None) -> None:
    """Check the environment before anything runs: the memory cap, the store and the runs
    folder (folders this process can write) and the Dask scheduler (each a one-line error
    naming the variable or option)."""
    from scarce.algorithms.memory import available_bytes
    from scarce.flows.runtime import check_writable_folder, default_runs_root, default_store_root
    from scarce.tasks.errors import InputError
    from scarce.tasks.store import Store

    try:
        available_bytes()
    except ValueError as exc:
        raise InputError(str(exc), key="SCARCE_MEMORY_LIMIT_GB") from None
    try:
        store = Store(default_store_root())
    except ValueError as exc:
        raise InputError(str(exc), key="store (or $SCARCE_STORE)") from None
    check_writable_folder(store.root, "store (or $SCARCE_STORE)")
    check_writable_folder(default_runs_root(), "runs folder (or $SCARCE_RUNS)")
    if address:
        from scarce.flows.runners import check_scheduler

        check_scheduler(address)


def execute(spec: Any, config: Any, options: Any, runner: str, address: str | None) -> dict:
    """Run one registered flow with a validated config; returns its summary."""
    from scarce.flows.runners import with_runner
    from scarce.flows.runtime import release_leases

    flow_fn = with_runner(spec.load_flow(), runner, address)
    try:
        return flow_fn(config=config, options=options)
    finally:
        release_leases()  # a failed run's lease: what it used is no longer in use


def cmd_run(args: argparse.Namespace) -> int:
    from scarce.flows.config import config_path, load_config, resolve_path
    from scarce.flows.runtime import RunOptions
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
    summaries = []
    with prefect_api():  # one Prefect server for every flow of the command
        for spec, config in plans:
            runner = _runner(args)
            options = RunOptions(refresh=args.refresh, runner=runner,
                                 dask_address=args.dask_address)
            summary = execute(spec, config, options, runner, args.dask_address)
            summaries.append(summary)
            _print_summary(spec.name, summary)
    if len(summaries) > 1:
        _print_metrics_table(summaries)
    return EXIT_OK


def _experiment_config(args: argparse.Namespace) -> Any:
    from scarce.flows.experiment import experiment_file, load_experiment
    from scarce.tasks.errors import InputError

    if not (args.name or args.config):
        raise InputError("`scarce run experiment` needs the experiment's name (a file of "
                         "configs/experiments/) or --config PATH", key="experiment")
    return load_experiment(experiment_file(args.config or args.name), args.overrides)


def _dry_run(config: Any) -> int:
    from scarce.flows.experiment import plan
    from scarce.flows.runtime import default_runs_root, default_store_root
    from scarce.tasks.store import Store

    table = plan(config, default_runs_root(), Store(default_store_root()).root)
    _print_frame(table)
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
          + f", {counts.get('invalid', 0)} invalid")
    return EXIT_OK


def _print_summary(name: str, summary: dict) -> None:
    print(f"\n== {name}: run {summary['run_id']}")
    _print_frame(summary["metrics"])
    hits = summary["manifest"].get("cache_hits") or []
    if hits:
        print(f"cache hits: {', '.join(hits)}")
    print(f"outputs: {summary['run_dir']}")


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
    _print_frame(wide.fillna(""))


def _print_frame(frame: Any) -> None:
    import pandas as pd

    with pd.option_context(
        "display.max_rows", 200, "display.width", 120, "display.float_format", "{:.4f}".format
    ):
        print(frame.to_string(index=False) if len(frame) else "(empty)")


# -- rerun -------------------------------------------------------------------
def cmd_rerun(args: argparse.Namespace) -> int:
    from scarce.flows import manifest as mf
    from scarce.flows.config import SAFE_NAME, validate_config
    from scarce.flows.registry import FLOWS
    from scarce.flows.runtime import RunOptions, default_runs_root, new_run_id
    from scarce.tasks.errors import InputError

    if not re.fullmatch(SAFE_NAME, args.run_id):  # a run id never holds a path separator
        raise InputError(f"not a run id: {args.run_id!r} (see `scarce runs`)", key="run_id")
    runs = default_runs_root()
    run_dir = runs / args.run_id
    old = mf.read_manifest(run_dir)
    spec = FLOWS.get(old["flow"])
    if spec is None:
        raise InputError(f"flow {old['flow']!r} of this run is not available", path=run_dir)
    if not isinstance(old.get("config"), dict):
        raise InputError("the manifest has no config to rerun", path=run_dir / mf.MANIFEST,
                         key="config")
    data = dict(old["config"])
    if spec.kind == "apply" and data.get("output"):
        # A recorded path is a fact about the past, never a place to write: the rerun's
        # results go to its own run folder, where they are compared.
        print(f"note: run {args.run_id} also wrote {data['output']}; the rerun writes only "
              "its own run folder", file=sys.stderr)
        data["output"] = None
    config = validate_config(data, spec.load_model(), run_dir / mf.MANIFEST)
    recorded = old.get("options") or {}
    runner = _runner(args, "dask" if old.get("task_runner") == "DaskTaskRunner"
                     else recorded.get("runner"))
    if runner == "dask" and not args.dask_address and recorded.get("dask_address"):
        print(f"note: run {args.run_id} used the Dask cluster at {recorded['dask_address']}; "
              "this rerun starts a local Dask cluster (give --dask-address to use a cluster)",
              file=sys.stderr)
    preflight(args.dask_address)
    damaged = mf.damaged_outputs(run_dir, old)  # hashed on disk before the rerun writes
    # The store is the one the environment names today (``$SCARCE_STORE`` or the project's):
    # a manifest is a record, never a place to write (a copied project or an edited "store"
    # would otherwise send the rerun's writes elsewhere).
    options = RunOptions(
        runs=str(runs),
        run_id=new_run_id(old["flow"], "rerun"),
        refresh=not args.use_cache,
        rerun_of=args.run_id,
        runner=runner,
        dask_address=args.dask_address,
    )
    print(f"rerun of {args.run_id} on the {runner} runner", file=sys.stderr)
    with prefect_api():
        summary = execute(spec, config, options, runner, args.dask_address)
    diffs = mf.compare_outputs(old, summary["manifest"])
    print(f"rerun {summary['run_id']} of {args.run_id}")
    repairs = _repair(run_dir, old, Path(summary["run_dir"]), damaged)
    for line in repairs:
        print(line)
    if any(line.startswith("damaged:") for line in repairs):
        print("\n".join(diffs) if diffs else "outputs identical; run "
              f"{args.run_id} keeps damaged files")
        return EXIT_FAIL
    if not diffs:
        print("identical")
        return EXIT_OK
    print("\n".join(diffs))
    return EXIT_FAIL


def _repair(run_dir: Path, old: dict, new_dir: Path, damaged: dict[str, str | None]
            ) -> list[str]:
    """Restore each damaged file of the rerun run (bytes on disk unlike its manifest's record)
    whose bytes the rerun reproduced exactly; say what was found and done, file by file."""
    from scarce.flows import manifest as mf
    from scarce.flows.runtime import link_or_copy
    from scarce.tasks.store import file_sha256

    recorded = mf.recorded_files(old)
    lines = []
    for name, actual in sorted(damaged.items()):
        found = "missing" if actual is None else f"sha256 {actual[:12]} on disk"
        fresh = new_dir / name
        if fresh.is_file() and file_sha256(fresh) == recorded[name]:
            link_or_copy(fresh, run_dir / name)
            lines.append(f"repaired: {name} of run {run_dir.name} ({found}, recorded "
                         f"{recorded[name][:12]}; restored from the rerun's identical file)")
        else:
            lines.append(f"damaged: {name} of run {run_dir.name} ({found}, recorded "
                         f"{recorded[name][:12]}; the rerun did not reproduce it)")
    return lines


# -- apply ---------------------------------------------------------------------
def cmd_apply(args: argparse.Namespace) -> int:
    from scarce.flows import manifest as mf
    from scarce.flows.apply import resolve_model_run
    from scarce.flows.config import SAFE_NAME, apply_overrides, validate_config
    from scarce.flows.registry import FLOWS
    from scarce.flows.runtime import RunOptions, default_runs_root
    from scarce.tasks.errors import InputError

    runs = default_runs_root()
    if args.run_id == "latest" or args.run_id.startswith("latest:"):
        if not args.flow:
            raise InputError(f"{args.run_id!r} needs --flow (leml, relations or strip)",
                             key="run_id")
        flow = args.flow
        run_dir = resolve_model_run(args.run_id, flow, runs)
    else:
        if not re.fullmatch(SAFE_NAME, args.run_id):
            raise InputError(f"not a run id: {args.run_id!r} (see `scarce runs`)", key="run_id")
        flow = mf.read_manifest(runs / args.run_id)["flow"]
        run_dir = resolve_model_run(args.run_id, args.flow or flow, runs)
    spec = FLOWS.get(f"apply-{flow}")
    if spec is None:
        raise InputError(f"runs of the {flow} flow cannot be applied", key="run_id")
    model = spec.load_model()
    # Paths on the command line are the user's, relative to where the command runs (a
    # config file's paths are relative to the project root).
    data: dict[str, Any] = {"model_run": run_dir.name, "input": str(Path(args.input).absolute())}
    if args.output:
        data["output"] = str(Path(args.output).absolute())
    if args.force:
        data["force"] = True
    if args.top_k is not None:
        if "top_k" not in model.model_fields:
            raise InputError(f"--top-k is an option of LEML, not of {flow}", key="top_k")
        data["top_k"] = args.top_k
    data = apply_overrides(data, args.overrides, model) if args.overrides else data
    config = validate_config(data, model, None)
    preflight(args.dask_address)
    runner = _runner(args)
    options = RunOptions(runner=runner, dask_address=args.dask_address)
    with prefect_api():
        summary = execute(spec, config, options, runner, args.dask_address)
    _print_summary(spec.name, summary)
    for o in summary["manifest"].get("named_outputs") or []:
        print(f"  outputs/{o['name']}")
    return EXIT_OK


# -- init ----------------------------------------------------------------------
def cmd_init(args: argparse.Namespace) -> int:
    from scarce.flows.init_project import init_project

    folder = Path(args.dir)
    written = init_project(folder, force=args.force)
    print(f"project written to {folder.absolute()}:")
    for path in written:
        print(f"  {path.relative_to(folder)}")
    print("edit the data paths of configs/*.yaml, then `scarce run leml` (or relations, strip) "
          "in that folder")
    return EXIT_OK


# -- runs and cache ------------------------------------------------------------
def cmd_runs(args: argparse.Namespace) -> int:
    import pandas as pd

    from scarce.flows.config import SAFE_NAME
    from scarce.flows.manifest import describe_run, list_runs
    from scarce.flows.runtime import default_runs_root
    from scarce.tasks.errors import InputError

    runs = default_runs_root()
    if args.flow is not None:
        from scarce.flows.registry import FLOWS

        if args.flow not in FLOWS:
            raise InputError(f"unknown flow {args.flow!r} (known: {', '.join(sorted(FLOWS))})",
                             key="--flow")
    if args.run_id:
        if not re.fullmatch(SAFE_NAME, args.run_id):
            raise InputError(f"not a run id: {args.run_id!r} (see `scarce runs`)", key="run_id")
        print(describe_run(runs / args.run_id))
        return EXIT_OK
    warnings: list[str] = []
    frame = list_runs(runs, flow=args.flow, warn=warnings)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    if frame.empty:
        print("no runs yet" if not args.flow else f"no {args.flow} runs yet")
        return EXIT_OK
    frame["seconds"] = frame["seconds"].map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
    cells = [list(frame.columns)] + frame.astype(str).to_numpy().tolist()
    widths = [max(len(row[j]) for row in cells) for j in range(len(frame.columns))]
    for row in cells:  # left-aligned: a run id starts its line
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


def referenced_refs(runs: Path) -> set[str]:
    """Every store entry a run manifest in ``runs`` names: its outputs and its plots' memos.

    A manifest that cannot be read stops the collection (an error naming it): gc cannot know
    what such a run keeps, so it removes nothing.
    """
    from scarce.flows import manifest as mf

    keep: set[str] = set()
    for d in mf.run_folders(runs):
        m = mf.read_manifest(d)
        keep.update(o["ref"] for o in m["outputs"])
        keep.update(p["ref"] for p in m.get("plots") or [] if p.get("ref"))
    return keep


def cmd_cache(args: argparse.Namespace) -> int:
    from scarce.flows.runtime import default_runs_root, default_store_root
    from scarce.tasks.errors import InputError
    from scarce.tasks.store import Store

    try:
        store = Store(default_store_root())
    except ValueError as exc:
        raise InputError(str(exc), key="$SCARCE_STORE") from None
    if args.cache_command == "ls":
        frame = store.ls()
        if frame.empty:
            print(f"store {store.root} is empty")
        else:
            frame["modified"] = frame["modified"].dt.strftime("%Y-%m-%d %H:%M")
            _print_frame(frame)
            print(f"{len(frame)} entries, {frame['bytes'].sum() / 1e6:.1f} MB in {store.root}")
        return EXIT_OK
    runs = default_runs_root()
    report = store.gc(referenced_refs(runs), dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {len(report.removed)} entries ({report.bytes / 1e6:.1f} MB) from {store.root}")
    for ref in report.removed:
        print(f"  {ref}")
    from scarce.flows import manifest as mf

    for folder in mf.partial_folders(runs):  # left by a process killed while writing a run
        run_id = folder.name[1:].split(mf.PARTIAL, 1)[0]
        if run_id in report.live_runs:
            continue
        if not args.dry_run:
            shutil.rmtree(folder, ignore_errors=True)
        print(f"{verb} the half-written run folder {folder.name} from {runs}")
    if report.live_runs:
        print(f"kept {report.kept_for_live_runs} entries in use by {len(report.live_runs)} "
              f"running run(s): {', '.join(report.live_runs)}")
    return EXIT_OK


def cmd_claims(args: argparse.Namespace) -> int:
    """Chen et al.'s claims (a) to (d) on an experiment's table: see :mod:`flows.claims`."""
    from scarce.flows.claims import claims, claims_markdown, read_experiments
    from scarce.flows.config import SAFE_NAME
    from scarce.flows.runtime import default_runs_root
    from scarce.tasks.errors import InputError

    for run_id in args.run_ids:
        if not re.fullmatch(SAFE_NAME, run_id):
            raise InputError(f"not a run id: {run_id!r} (see `scarce runs`)", key="run_id")
    runs = default_runs_root()
    table, words, group = read_experiments([runs / r for r in args.run_ids], runs)
    print(claims_markdown(*claims(table, words, group), group), end="")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import datetime as dt
    import importlib

    from scarce.bench import BENCHMARKS
    from scarce.flows.config import project_root
    from scarce.flows.runtime import markdown_table
    from scarce.tasks.errors import InputError
    from scarce.tasks.store import atomic_write_parquet, encode

    if args.name not in BENCHMARKS:
        known = ", ".join(sorted(BENCHMARKS))
        raise InputError(f"unknown benchmark {args.name!r} (known: {known})")
    module = importlib.import_module(BENCHMARKS[args.name])
    parser = argparse.ArgumentParser(prog=f"scarce bench {args.name}", description=module.__doc__)
    module.add_arguments(parser)
    bench_args = parser.parse_args(args.bench_args)
    with prefect_api():
        table = module.run(bench_args)
    print(markdown_table(table))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    out = project_root() / "data" / "bench" / f"{args.name}-{stamp}.parquet"
    atomic_write_parquet(out, encode(table.reset_index(drop=True)))
    print(f"\ntable written to {out}")
    return EXIT_OK


def entrypoint(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    code = main(argv)
    if "serve" in argv[:2]:
        _exit_without_teardown(code)
    sys.exit(code)


def _exit_without_teardown(code: int) -> None:
    """Exit once the exit handlers have run, skipping the interpreter's teardown.

    After Ctrl-C, `scarce serve` has stopped its runner and paused its schedules in about a
    second even at load 4 to 8, but tearing down the interpreter (a process holding Prefect,
    numpy, pandas and their threads) then took 7 s more there, and more at higher load: the
    command looked hung.  The exit handlers (Prefect's log and event workers flush in them)
    still run; only the module teardown is skipped.
    """
    import atexit

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    atexit._run_exitfuncs()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    entrypoint()
