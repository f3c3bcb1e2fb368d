"""The ``scarce`` command line: its parser, and the entry point that runs a command's handler
(:mod:`scarce.flows.commands`) and turns its outcome into an exit code.

::

    scarce run FLOW [NAME] [--config PATH] [--set KEY=VALUE ...] [--runner local|dask]
                    [--dask-address ADDR] [--refresh | --no-refresh] [--dry-run]
    scarce rerun RUN_ID [--refresh | --no-refresh] [--verbose]
    scarce diff RUN_A RUN_B [--verbose]
    scarce apply RUN_ID --input PATH [--output PATH] [--force] [--flow FLOW]
    scarce runs [RUN_ID] [--flow FLOW] [--tag TAG] [--where KEY=VALUE] [--columns C,...]
                [--all-columns] [--format table|csv|md|parquet] [--output PATH]
    scarce init [DIR] [--force]
    scarce cache ls | scarce cache gc [--dry-run]
    scarce bench NAME [options of the benchmark]
    scarce claims RUN_ID [RUN_ID ...]
    scarce deploy [--config PATH] [--only NAME ...]
    scarce serve [--config PATH] [--only NAME ...] [--limit N]
    scarce ui [--host HOST] [--port PORT]
    scarce server status | scarce server stop [--force]

``--debug`` (before or after the command) shows tracebacks; ``--version`` prints the version.
Bad input (a config key, a malformed file, a missing run) prints one line naming the file,
line or key and exits with code 2, as a malformed command line does (argparse's usage and
message); any other failure exits 1.  Ctrl-C ends a command with code 130, SIGTERM with 143.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from scarce.flows import preload
from scarce.flows.commands import (
    EXIT_FAIL,
    EXIT_INPUT,
    EXIT_PIPE,
    HelpFormatter,
    apply,
    bench,
    cache,
    claims,
    deploy,
    init,
    rerun,
    run,
    runs,
    server,
    types,
    ui,
)
from scarce.flows.commands.apply import OUTPUT_SUFFIXES as APPLY_SUFFIXES
from scarce.flows.commands.cache import referenced_refs
from scarce.flows.commands.console import (
    log_to_stderr,
    quiet_input_errors,
    stdout_to_devnull,
)
from scarce.flows.outputs import Output, add_output, check_command
from scarce.flows.runners import SIGNALS, pause_collector

__all__ = ["Terminated", "build_parser", "entrypoint", "main", "referenced_refs"]

#: The commands that run flows: Prefect's console log leaves out the traceback of their bad
#: input (unless --debug).
FLOW_COMMANDS = ("run", "rerun", "apply")
#: The commands that SIGTERM ends cleanly: every ``finally`` runs (a server they started is
#: stopped), then exit 143.
TERMINABLE = (*FLOW_COMMANDS, "bench", "ui")
#: The exit codes of a command ended by Ctrl-C and by SIGTERM, as a shell reports them.
EXIT_INTERRUPTED, EXIT_TERMINATED = 130, 143


def build_parser() -> argparse.ArgumentParser:
    """The parser of the whole command line; each command's handler is its ``func``."""
    from scarce import __version__

    # Every subparser takes --debug too, so that it may follow the command.  Without a default
    # of its own there, a subparser never resets a --debug given before the command.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks")

    p = argparse.ArgumentParser(
        prog="scarce",
        description="Reproducible pipelines for learning when labels are scarce.",
        epilog="`scarce COMMAND --help` shows a command's options.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"scarce {__version__}")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, func: Any, help: str, **kwargs: Any) -> argparse.ArgumentParser:
        q = sub.add_parser(name, help=help, description=kwargs.pop("description", help),
                           parents=[common], formatter_class=HelpFormatter, **kwargs)
        if func is not None:
            q.set_defaults(func=func)
        return q

    _add_run(add)
    _add_rerun(add)
    _add_apply(add)
    _add_runs(add)
    _add_diff(add)
    _add_init(add)
    _add_claims(add)
    _add_bench(add, common)
    _add_cache(add, common)
    _add_deploy(add)
    _add_server(add, common)
    return p


def _listing(rows: list[tuple[str, str]]) -> str:
    """Names and descriptions as two aligned columns."""
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"  {name:<{width}}  {text}".rstrip() for name, text in rows)


def _add_run(add: Any) -> None:
    from scarce.flows.registry import FLOWS

    rows = [(name, spec.description) for name, spec in FLOWS.items()]
    rows.append(("all", "every training flow, one after the other"))
    r = add("run", run.run, "run a flow (or 'all', or 'experiment NAME')",
            epilog="flows:\n" + _listing(rows))
    r.add_argument("flow", metavar="FLOW", choices=[name for name, _ in rows] + (
        [] if "experiment" in FLOWS else ["experiment"]), help="the flow (listed below)")
    r.add_argument("name", nargs="?", metavar="NAME",
                   help="experiment: its name, the file configs/experiments/NAME.yaml")
    r.add_argument("--config", metavar="PATH", help="config YAML (default: configs/<flow>.yaml)")
    r.add_argument("--dry-run", action="store_true",
                   help="experiment: count the child runs and what each would compute, and "
                        "run nothing")
    r.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key, e.g. --set model.rank=64 (repeatable)")
    _runner_args(r, "local")
    _refresh_arg(r, default=False)


def _add_rerun(add: Any) -> None:
    rr = add("rerun", rerun.rerun, "run again from a run's manifest and compare outputs")
    rr.add_argument("run_id", metavar="RUN_ID",
                    help="the run to repeat (an id `scarce runs` lists)")
    _refresh_arg(rr, default=True)
    rr.add_argument("--verbose", action="store_true",
                    help="list every store entry that differs (default: their count)")
    _runner_args(rr, "the run's own")


def _add_apply(add: Any) -> None:
    from scarce.flows.registry import FLOWS

    trained = [s.applies for s in FLOWS.values() if s.kind == "apply" and s.applies]
    ap = add("apply", apply.apply, "apply what a finished run learned to new input")
    ap.add_argument("run_id", metavar="RUN_ID",
                    help="a training run id, or 'latest' / 'latest:NAME' with --flow")
    ap.add_argument("--input", required=True, metavar="PATH",
                    help="input file, or a folder of input files")
    add_output(ap, "--output", metavar="PATH",
               output=Output("file or folder", APPLY_SUFFIXES, input="input"),
               help="output file (.parquet or .csv; StRip: .conllu) or, for a folder of inputs, "
                    "folder; never an input of this or any recorded run, nor inside the store "
                    "or the runs folder (default: only the apply run's outputs/)")
    ap.add_argument("--force", action="store_true",
                    help="replace files that already exist at --output (without it an existing "
                         "file is an error and nothing is written)")
    ap.add_argument("--flow", choices=trained, metavar="FLOW",
                    help=f"the training flow, for 'latest' / 'latest:NAME': {', '.join(trained)} "
                         "(default: the run's own)")
    ap.add_argument("--top-k", type=types.POSITIVE, metavar="K",
                    help="LEML: labels per row (default: 5)")
    ap.add_argument("--keep-column", dest="keep_columns", action="append", default=[],
                    metavar="NAME",
                    help="LEML on a table: copy this input column (an id) into the predictions "
                         "(repeatable)")
    ap.add_argument("--set", dest="overrides", action="append", default=[],
                    metavar="KEY=VALUE", help="override a key of the apply config (repeatable)")
    _runner_args(ap, "local")


def _add_runs(add: Any) -> None:
    from scarce.flows.registry import FLOWS

    ru = add("runs", runs.runs, "the table of past runs (their settings and metrics), or one run",
             epilog="The table has a row per run: its flow, data set, status, start and "
             "seconds, the config values that differ between the listed runs (dotted keys, "
             "model.rank), and the headline metrics of the flow's own method (method).  "
             "From Python: scarce.runs(...), a DataFrame.")
    ru.add_argument("run_id", nargs="?", metavar="RUN_ID",
                    help="show this run in detail (default: the table of them all)")
    ru.add_argument("--flow", choices=list(FLOWS), metavar="FLOW",
                    help=f"only the runs of this flow: {', '.join(FLOWS)} (default: every flow)")
    ru.add_argument("--tag", dest="tags", action="append", default=[], metavar="TAG",
                    help="only the runs with this tag, e.g. dataset:bibtex, experiment:NAME, "
                    "rerun-of:RUN (repeatable: every one)")
    ru.add_argument("--where", action="append", default=[], metavar="KEY=VALUE",
                    help="only the runs whose column KEY (a config key, a metric, dataset, "
                    "...) is VALUE, e.g. model.rank=8 (repeatable: every one)")
    ru.add_argument("--columns", type=types.comma_list(), metavar="C1,C2,...",
                    help="show these columns after run_id (default: the fixed ones, the "
                    "config values that differ, the method and its metrics)")
    ru.add_argument("--all-columns", action="store_true",
                    help="every config value, whether it differs between the runs or not")
    ru.add_argument("--format", choices=runs.FORMATS,
                    help="aligned text, CSV, a markdown table, or Parquet (with --output) "
                         "(default: by the --output name's suffix, else table)")
    add_output(ru, "--output", metavar="PATH", output=Output("file", runs.OUTPUT_SUFFIXES),
               help="write the table to this file (.txt, .csv, .md or .parquet; never an "
                    "input of a recorded run, nor inside the store or the runs folder) "
                    "(default: print it)")
    ru.add_argument("--force", action="store_true",
                    help="replace the --output file if it exists (without it an existing file "
                         "is an error and nothing is written)")


def _add_diff(add: Any) -> None:
    di = add("diff", rerun.diff, "why two runs differ (inputs, code, packages, config), then "
             "what differs (metrics, files)",
             epilog="Exit 0 when the outputs are identical, 1 when they differ.")
    di.add_argument("run_a", metavar="RUN_A", help="the first run (an id `scarce runs` lists)")
    di.add_argument("run_b", metavar="RUN_B", help="the second run")
    di.add_argument("--verbose", action="store_true",
                    help="list every store entry that differs (default: their count)")


def _add_init(add: Any) -> None:
    ini = add("init", init.init, "start a project: configs to edit, data/ and a README")
    add_output(ini, "dir", nargs="?", default=".", metavar="DIR", output=Output("folder"),
               help="the project folder (default: here); never inside a store or runs folder")
    ini.add_argument("--force", action="store_true", help="replace files that exist")


def _add_claims(add: Any) -> None:
    cl = add("claims", claims.claims, "check the papers' claims on experiments and LEML runs",
             epilog="Chen et al.'s (a)-(d) on relations experiments; Yu et al.'s (p) on a LEML "
             "experiment of Bibtex or Delicious (leml-splits) and (m) on one over "
             "observed_fraction; Stoyanov and Cardie's (s) on a StRip experiment.  A comparison "
             "holds when ahead by more than the seeds' spread, fails when behind by more, is "
             "level otherwise; on one seed it has no spread and is 'one run' (so a LEML run, "
             "shown beside the published figures).  A verdict whose settings were chosen on "
             "the same corpus says so.")
    cl.add_argument("run_ids", nargs="+", metavar="RUN_ID",
                    help="an experiment over relations, leml or strip, or a LEML run; several "
                         "relations experiments are read as one table (their row axes joined)")


def _add_bench(add: Any, common: argparse.ArgumentParser) -> None:
    from scarce.bench import BENCHMARKS

    b = add("bench", bench.bench, "run a benchmark and print its table",
            description="Run a benchmark: its table is printed as markdown and written to "
                        "data/bench/NAME-TIMESTAMP.parquet.",
            epilog="`scarce bench NAME --help` shows the benchmark's options.")
    b.set_defaults(bench_args=[])
    names = b.add_subparsers(dest="name", required=True, metavar="NAME", title="benchmarks")
    for benchmark in BENCHMARKS.values():
        # The benchmark's options (and its --help) are left for its own parser, built from
        # its module only when it runs (see main).
        names.add_parser(benchmark.name, help=benchmark.description,
                         description=benchmark.description, parents=[common], add_help=False,
                         allow_abbrev=False, formatter_class=HelpFormatter)


def _add_cache(add: Any, common: argparse.ArgumentParser) -> None:
    c = add("cache", None, "inspect or clean the Parquet result store")
    csub = c.add_subparsers(dest="cache_command", required=True)
    ls = csub.add_parser("ls", help="list store entries", description="List store entries.",
                         parents=[common], formatter_class=HelpFormatter)
    ls.set_defaults(func=cache.ls)
    gc = csub.add_parser("gc", help="drop entries that no run refers to",
                         description="Drop the entries no run manifest names and no running "
                                     "run uses.",
                         parents=[common], formatter_class=HelpFormatter)
    gc.add_argument("--dry-run", action="store_true",
                    help="say what would be removed, and remove nothing")
    gc.set_defaults(func=cache.gc)


def _add_deploy(add: Any) -> None:
    dep = add("deploy", deploy.deploy, "register configs/deployments.yaml with the server")
    srv = add("serve", deploy.serve, "register the deployments and run them on schedule")
    for q in (dep, srv):
        # --config names the file a command reads its settings from, as `scarce run --config`
        # does; the handler reads it as args.file.
        q.add_argument("--config", dest="file", metavar="PATH",
                       help="deployments YAML (default: configs/deployments.yaml)")
        q.add_argument("--only", action="append", metavar="NAME",
                       help="only this deployment (repeatable; default: every deployment)")
    srv.add_argument("--limit", type=types.POSITIVE, metavar="N",
                     help="at most this many runs at once (default: no limit)")
    u = add("ui", ui.ui, "start the Prefect server and UI on this machine")
    u.add_argument("--host", default="127.0.0.1", help="address to bind")
    u.add_argument("--port", type=types.PORT, default=4200, help="port of the server and the UI")


def _add_server(add: Any, common: argparse.ArgumentParser) -> None:
    s = add("server", None, "the local Prefect server the commands share: where it is, or "
            "stop it",
            epilog="Without PREFECT_API_URL the commands that run flows use one local Prefect "
            "server: the one `scarce ui` runs, else one started in the background by the first "
            "command, which stops after SCARCE_SERVER_IDLE_MINUTES without a command (default "
            "30).  SCARCE_SERVER=temporary gives each command its own.")
    ssub = s.add_subparsers(dest="server_command", required=True)
    st = ssub.add_parser("status", help="where the commands' Prefect server is",
                         description="Say where the commands' Prefect API is and who uses it.",
                         parents=[common], formatter_class=HelpFormatter)
    st.set_defaults(func=server.status)
    sp = ssub.add_parser("stop", help="stop the shared server",
                         description="Stop the shared Prefect server (refused while a command "
                                     "uses it).",
                         parents=[common], formatter_class=HelpFormatter)
    sp.add_argument("--force", action="store_true",
                    help="stop it even while commands use it (they fail)")
    sp.set_defaults(func=server.stop)


def _refresh_arg(p: argparse.ArgumentParser, default: bool) -> None:
    """``--refresh`` / ``--no-refresh``: whether the steps recompute or take the store's
    cached results (one option for one idea; ``run`` takes the cache by default, ``rerun``
    recomputes, since its point is to check that the code still gives the recorded bytes)."""
    p.add_argument("--refresh", action=argparse.BooleanOptionalAction, default=default,
                   help="ignore the cache and recompute every step; --no-refresh takes the "
                        "store's cached results (default: "
                        f"{'recompute' if default else 'cached results'})")


def _runner_args(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--runner", choices=["local", "dask"],
                   help=f"task runner: local threads or a local Dask cluster (default: "
                        f"{default}; dask with --dask-address)")
    p.add_argument("--dask-address", metavar="ADDR",
                   help="scheduler address of an existing Dask cluster (implies --runner dask; "
                        "default: none, --runner dask starts a local one)")


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that every ``finally`` runs (leases released, the
    temporary Prefect server stopped) before the command exits."""


def _raise_terminated(signum: int, frame: Any) -> None:
    SIGNALS.append(signum)
    raise Terminated


def _raise_interrupted(signum: int, frame: Any) -> None:
    SIGNALS.append(signum)
    raise KeyboardInterrupt


def _signalled() -> int:
    """Say how the command ended after a signal (the first one counts), and its exit code."""
    import signal

    interrupted = SIGNALS[0] == signal.SIGINT
    print("interrupted" if interrupted else "terminated", file=sys.stderr)
    return EXIT_INTERRUPTED if interrupted else EXIT_TERMINATED


def _memory_limits(exc: BaseException) -> str:
    """For a failed allocation (a ``MemoryError``, a thread that could not start, ``ENOMEM``)
    under an address-space or data limit, the limits, which are the likely cause."""
    import errno

    from scarce.flows.commands.running import address_space_limits

    if not (isinstance(exc, MemoryError) or "can't start new thread" in str(exc)
            or isinstance(exc, OSError) and exc.errno == errno.ENOMEM):
        return ""
    limits = address_space_limits()
    shown = ", ".join(f"{name} is {size / 2**30:.2f} GiB" for name, size in limits.items())
    return f" (out of memory under the process's limits: {shown})" if limits else ""


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the command, return its exit code."""
    from scarce.flows.runners import pin_threads

    pin_threads()  # before numpy or scipy are imported: one BLAS thread, Prefect offline
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "bench":
        args.bench_args = extra  # the benchmark's own options, for its module's parser
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command in preload.COMMANDS:
        preload.remember_environment()  # (before a check writes a variable back)
    from scarce.algorithms.memory import MemoryBudgetError
    from scarce.tasks.errors import InputError

    log_to_stderr()
    import signal

    previous = {}
    if args.command in TERMINABLE:
        SIGNALS.clear()
        previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_terminated),
                    signal.SIGINT: signal.signal(signal.SIGINT, _raise_interrupted)}
    try:
        from scarce.flows.environment import check_environment

        check_environment()  # before any config is read or any server starts
        check_command(parser, args)  # every path the command would write, before any work
        if not args.debug and args.command in FLOW_COMMANDS:
            quiet_input_errors()  # (once Prefect starts: the checks before it import none)
        return args.func(args)
    except (InputError, MemoryBudgetError) as exc:
        if SIGNALS:
            return _signalled()
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:  # the reader of stdout went away (`scarce runs | head`)
        stdout_to_devnull()
        return EXIT_PIPE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        if SIGNALS:
            return _signalled()
        print("terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except Exception as exc:
        if SIGNALS:  # the signal raised inside a library that wrapped it (seen: pydantic's
            # serializer made SIGTERM a PydanticSerializationError; Ctrl-C while Prefect starts
            # a task run, a ValueError): still an interruption or a termination
            return _signalled()
        if args.debug:
            raise
        from scarce.tasks.errors import one_line

        print(f"error: {type(exc).__name__}: {one_line(str(exc))}{_memory_limits(exc)} (run "
              "with --debug for the traceback)", file=sys.stderr)
        return EXIT_FAIL
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def entrypoint(argv: list[str] | None = None) -> None:
    """The console script ``scarce``: :func:`main`, then exit with its code."""
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in FLOW_COMMANDS:
        pause_collector()  # until its flows are about to run (runners.prefect_api)
    code = main(argv)
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED) or command == "serve":
        _exit_without_teardown(code)
    sys.exit(code)


def _exit_without_teardown(code: int) -> None:
    """Exit once the exit handlers have run, skipping the interpreter's teardown.

    After an interruption (Ctrl-C, SIGTERM) the command has reported, released its leases and
    stopped its server, but the interpreter would still wait for every thread before exiting:
    a step still computing in the flow's thread pool, or an experiment's child flow run, for
    minutes (:func:`scarce.flows.runners.interruptible` leaves them running).

    After Ctrl-C, `scarce serve` has stopped its runner and paused its schedules within about
    a second, but tearing down the interpreter (a process holding Prefect, numpy, pandas and
    their threads) then took several seconds more on a loaded machine: the command looked
    hung.  The exit handlers (Prefect's log and event workers flush in them) still run; only
    the module teardown is skipped.
    """
    import atexit

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    atexit._run_exitfuncs()
    logging.shutdown()
    os._exit(code)


if __name__ == "__main__":
    entrypoint()
