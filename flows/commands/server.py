"""``scarce server status | stop``: the shared local Prefect server that the commands use
(:mod:`scarce.flows.shared_server`)."""

from __future__ import annotations

import argparse
import time

from scarce.flows.commands import EXIT_OK


def _home() -> str:
    from pathlib import Path

    from prefect.settings import PREFECT_HOME

    return str(Path(PREFECT_HOME.value()).expanduser())


def _owner(record) -> str:
    if record.kind in ("ui", "serve"):
        return f"scarce {record.kind}, pid {record.pid}"
    return f"background, pid {record.pid}"


def _commands(pids: list[int]) -> str:
    return (f"{len(pids)} command{'s' if len(pids) != 1 else ''} (pid "
            f"{', '.join(map(str, sorted(pids)))})")


def status(args: argparse.Namespace) -> int:
    """Where the commands' Prefect API is: ``PREFECT_API_URL``, the shared server (its URL,
    owner, age, idle time and the commands using it), or none yet."""
    from prefect.settings import PREFECT_API_URL

    from scarce.flows import shared_server

    url = PREFECT_API_URL.value()
    if url:
        answers = "answers" if shared_server.health(url) else "does not answer"
        print(f"PREFECT_API_URL is set: commands use {url} ({answers})")
        return EXIT_OK
    home = _home()
    record, answers, users = shared_server.status(home)
    if shared_server.mode() == "temporary":
        print("SCARCE_SERVER=temporary: each command starts a temporary server of its own")
    if record is None:
        print(f"no shared server (its home: {home}); the next command that runs flows starts "
              "one in the background")
        return EXIT_OK
    minutes = (time.time() - record.started) / 60
    stops = (f"runs until scarce {record.kind} stops" if record.idle_minutes is None else
             f"stops after {record.idle_minutes:g} min without a command")
    use = f"in use by {_commands(users)}" if users else "not in use"
    print(f"shared server: {record.url} ({_owner(record)}, up {minutes:.0f} min, "
          f"{'answers' if answers else 'does not answer yet'}; {use}; {stops})")
    from scarce.flows import preload

    warm = preload.read(home)
    if warm is not None:
        print(f"preloaded process: pid {warm['pid']} (runs `scarce "
              f"{'/'.join(preload.COMMANDS)}` started with its environment; "
              f"{preload.VARIABLE}=off turns it off)")
    return EXIT_OK


def stop(args: argparse.Namespace) -> int:
    """Stop the shared server; refused while a command uses it, unless ``--force``."""
    from scarce.flows import shared_server
    from scarce.tasks.errors import InputError

    record, users = shared_server.stop(_home(), force=args.force)
    if record is None:
        print("no shared server running")
    elif users:
        raise InputError(f"the shared server {record.url} is in use by {_commands(users)}: "
                         "let them finish, or stop it under them with --force", key="--force")
    else:
        print(f"stopped the shared server {record.url} ({_owner(record)})")
    return EXIT_OK
