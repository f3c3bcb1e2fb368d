"""Running a registered flow for a command: the runner asked for, the environment checked
first, one Prefect API, and the summary printed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def choose_runner(args: argparse.Namespace, recorded: str | None = None) -> str:
    """The runner asked for: ``--runner``, else dask with ``--dask-address``, else the one a
    rerun's manifest recorded, else local."""
    if args.runner:
        return args.runner
    if args.dask_address:
        return "dask"
    return recorded or "local"


def prefect_api() -> Any:
    """One Prefect API for the command (:func:`scarce.flows.runners.prefect_api`), after every check
    the command makes before it (which import nothing of Prefect)."""
    from scarce.flows import runners
    from scarce.flows.commands.console import prefect_started

    prefect_started()
    return runners.prefect_api()


#: The least address space (``ulimit -v``, ``ulimit -d``) a command that runs flows is let
#: start with.  Its threads reserve a stack each and the C allocator an arena per busy thread,
#: virtual memory far beyond what is used; under a smaller limit a thread could not be started
#: (an exception, at best) or glibc could not allocate a new thread's local storage, which
#: ends the process at once (exit 127, its one message no Python code can catch).  The
#: command's temporary Prefect server inherits the same limit.
MIN_ADDRESS_SPACE = 2 * 2**30


def preflight(address: str | None) -> None:
    """Check the environment before anything runs: the memory cap, the process's address-space
    limit, the store and the runs folder (folders this process can write) and the Dask
    scheduler (each a one-line error naming the variable or option)."""
    from scarce.algorithms.memory import available_bytes, format_bytes
    from scarce.flows.config import default_runs_root, default_store_root
    from scarce.flows.outputs import check_writable_folder
    from scarce.tasks.errors import InputError
    from scarce.tasks.store import Store

    try:
        available_bytes()
    except ValueError as exc:
        raise InputError(str(exc), key="SCARCE_MEMORY_LIMIT_GB") from None
    for name, limit in address_space_limits().items():
        if limit < MIN_ADDRESS_SPACE:
            raise InputError(
                f"the process's {name} limit is {format_bytes(limit)}; a command that runs "
                f"flows needs at least {format_bytes(MIN_ADDRESS_SPACE)} of address space "
                "(its threads reserve far more than they use): raise the limit, or cap the "
                "memory the steps plan for with SCARCE_MEMORY_LIMIT_GB", key=name)
    try:
        store = Store(default_store_root())
    except ValueError as exc:
        raise InputError(str(exc), key="store (or $SCARCE_STORE)") from None
    check_writable_folder(store.root, "store (or $SCARCE_STORE)")
    check_writable_folder(default_runs_root(), "runs folder (or $SCARCE_RUNS)")
    if address:
        from scarce.flows.runners import check_scheduler

        check_scheduler(address)


def check_runs(configs: list[Any], runs: Path | None = None) -> None:
    """Check every run the command will start, before its Prefect server starts or a flow
    runs (:meth:`scarce.flows.config.FlowConfig.check_before_run`: a config's input paths, the
    heads of its data, an apply run's model, input and output): bad input is one ``error:``
    line, and no server is started for a run that cannot go.  ``runs``: the runs folder (a
    rerun's), else the environment's."""
    from scarce.flows.config import default_runs_root, default_store_root
    from scarce.tasks.store import Store

    store = Store(default_store_root()).root
    for config in configs:
        config.check_before_run(Path(runs or default_runs_root()), store)


def address_space_limits() -> dict[str, int]:
    """The soft address-space and data-segment limits of this process, in bytes, by the
    shell's name for each (``ulimit -v``, ``ulimit -d``); the unlimited left out."""
    import resource

    out = {}
    for name, which in (("ulimit -v", resource.RLIMIT_AS), ("ulimit -d", resource.RLIMIT_DATA)):
        soft, _ = resource.getrlimit(which)
        if soft != resource.RLIM_INFINITY and soft >= 0:
            out[name] = soft
    return out


def execute(spec: Any, config: Any, options: Any, runner: str, address: str | None) -> dict:
    """Run one registered flow with a validated config; returns its summary.  An interruption
    (Ctrl-C, SIGTERM) ends it at once, the steps still running left behind
    (:func:`scarce.flows.runners.interruptible`)."""
    from scarce.flows.runners import interruptible, with_runner
    from scarce.flows.runtime import release_leases

    flow_fn = interruptible(with_runner(spec.load_flow(), runner, address))
    try:
        return flow_fn(config=config, options=options)
    finally:
        release_leases()  # a failed run's lease: what it used is no longer in use


def print_summary(name: str, summary: dict) -> None:
    """A finished run as the commands print it: its id, metrics, who leads (a training run
    with baselines), cache hits and folder."""
    from scarce.flows.registry import FLOWS
    from scarce.flows.runtime import lead_line

    print(f"\n== {name}: run {summary['run_id']}")
    print_frame(summary["metrics"])
    spec = FLOWS.get(name)
    line = lead_line(summary["metrics"], spec) if spec is not None else None
    if line:
        print(line)
    hits = summary["manifest"].get("cache_hits") or []
    if hits:
        print(f"cache hits: {', '.join(hits)}")
    print(f"outputs: {summary['run_dir']}")


def print_frame(frame: Any) -> None:
    """A table on stdout, four decimals, no index."""
    import pandas as pd

    with pd.option_context(
        "display.max_rows", 200, "display.width", 120, "display.float_format", "{:.4f}".format
    ):
        print(frame.to_string(index=False) if len(frame) else "(empty)")

