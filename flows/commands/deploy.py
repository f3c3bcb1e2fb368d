"""``scarce deploy`` and ``scarce serve``: the deployments of ``configs/deployments.yaml``
registered with the Prefect server, or served on their schedules until Ctrl-C."""

from __future__ import annotations

import argparse
from typing import Any

from scarce.flows.commands import EXIT_OK


def deploy(args: argparse.Namespace) -> int:
    """``scarce deploy``: register the deployments and show what the server holds."""
    from scarce.flows.deploy import describe, load_deployments, register, require_server, select

    deployments = select(load_deployments(args.file), args.only)  # checked before any server
    url = require_server()
    register(deployments)
    print(f"registered {len(deployments)} deployment(s) with {url}")
    _print_rows(describe(deployments))
    print("scheduled runs start only while `scarce serve` runs")
    return EXIT_OK


def serve(args: argparse.Namespace) -> int:
    """``scarce serve``: run the deployments on their schedules until Ctrl-C (which pauses
    the schedules)."""
    import asyncio

    from prefect.exceptions import TerminationSignal

    from scarce.flows.deploy import (
        load_deployments,
        log,
        next_times,
        require_server,
        select,
        serve_until_interrupted,
        serving_runner,
    )

    deployments = select(load_deployments(args.file), args.only)  # checked before any server
    url = require_server()
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
