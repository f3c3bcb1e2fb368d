"""``scarce deploy`` and ``scarce serve``: the deployments of ``configs/deployments.yaml``
registered with the Prefect server, or served on their schedules until Ctrl-C.

Without ``PREFECT_API_URL`` both find their server as the other commands do (the shared local
server of the Prefect home, :mod:`scarce.flows.shared_server`), but ``scarce serve`` needs one that
runs Prefect's scheduler, which a background server does not run: it uses ``scarce ui``'s
server, or runs one of its own while it serves (which the other commands then use)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from scarce.flows.commands import EXIT_OK


def deploy(args: argparse.Namespace) -> int:
    """``scarce deploy``: register the deployments and show what the server holds."""
    from scarce.flows.commands.running import prefect_api
    from scarce.flows.deploy import describe, load_deployments, register, select

    deployments = select(load_deployments(args.file), args.only)  # checked before any server
    with prefect_api() as url:
        register(deployments)
        print(f"registered {len(deployments)} deployment(s) with {url}")
        _print_rows(describe(deployments))
    print("scheduled runs start only while `scarce serve` runs")
    return EXIT_OK


@contextlib.contextmanager
def scheduling_api() -> Iterator[str]:
    """The Prefect API ``scarce serve`` serves against: ``PREFECT_API_URL`` when it is set,
    else a local server that runs the schedules (:func:`scarce.flows.shared_server.scheduling`,
    recorded as the shared server unless ``SCARCE_SERVER=temporary``), set as the API of
    this process and of the flow-run processes it starts."""
    from scarce.flows import shared_server
    from scarce.flows.deploy import log
    from scarce.flows.runners import local_server_api

    def local(home: Path, env: Callable[[], dict[str, str]],
              timeout: float) -> AbstractContextManager[str]:
        return shared_server.scheduling(home, env, timeout,
                                        record=shared_server.mode() == "shared", log=log.info)

    with local_server_api(local) as url:
        yield url


def serve(args: argparse.Namespace) -> int:
    """``scarce serve``: run the deployments on their schedules until Ctrl-C (which pauses
    the schedules)."""
    import asyncio

    from prefect.exceptions import TerminationSignal

    from scarce.flows.deploy import (
        load_deployments,
        log,
        next_times,
        select,
        serve_until_interrupted,
        serving_runner,
    )

    deployments = select(load_deployments(args.file), args.only)  # checked before any server
    with scheduling_api() as url:
        runner = serving_runner(deployments, args.limit)
        for d in deployments:
            when = "no schedule"
            if d.schedule and d.schedule.active:
                when = f"next {next_times(d.schedule)[0].isoformat()} ({d.schedule.cron})"
            print(f"serving {d.full_name}: {when}")
        print(f"against {url}; Ctrl-C stops (and pauses the schedules)", flush=True)
        try:
            asyncio.run(serve_until_interrupted(runner))
        except (KeyboardInterrupt, TerminationSignal) as exc:
            log.info("received %s, shutting down", type(exc).__name__)
    return EXIT_OK


def _print_rows(rows: list[dict[str, Any]]) -> None:
    import pandas as pd

    with pd.option_context("display.width", 200, "display.max_colwidth", 80):
        print(pd.DataFrame(rows).to_string(index=False))
