"""``scarce ui``: the Prefect server and its UI on this machine, until Ctrl-C."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from scarce.flows.commands import EXIT_FAIL

#: Seconds the server has to stop after SIGTERM before it is killed.
STOP_GRACE = 10


def ui(args: argparse.Namespace) -> int:
    """``prefect server start`` on ``host:port`` with analytics off; runs until Ctrl-C (exit
    130) or SIGTERM (143), which stop the server first."""
    from scarce.flows import shared_server
    from scarce.flows.server_process import launch_server

    check_port(args.host, args.port)
    base = f"http://{args.host}:{args.port}"
    print(
        f"Prefect server and UI: {base}\n"
        "Point runs, deployments and `scarce serve` at it (in another shell):\n"
        f"  export PREFECT_API_URL={base}/api\n"
        "  scarce run leml        # the run shows up in the UI\n"
        "  scarce serve           # registers configs/deployments.yaml and runs its schedules\n"
        "Commands of this machine without PREFECT_API_URL use it too while it runs.\n"
        "Ctrl-C stops the server.",
        flush=True,
    )
    from scarce.flows.runners import server_environment

    env = server_environment(Path(_prefect_home()))
    # The UI asks the API at PREFECT_UI_API_URL, which Prefect derives from the API host and
    # port settings, not from `prefect server start --port`: without these the page served on
    # another port still talks to 4200 (another server's runs, or none).
    env.update(PREFECT_SERVER_API_HOST=args.host, PREFECT_SERVER_API_PORT=str(args.port),
               PREFECT_UI_API_URL=f"{base}/api")
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", args.host,
           "--port", str(args.port), "--analytics-off"]  # fmt: skip
    # In a session of its own and killed with this process (launch_server): Ctrl-C and SIGTERM
    # reach this command, which stops the server (`finally`) and exits 130 or 143
    # (flows.cli.main); SIGKILL of this command leaves no server holding the port.
    server = launch_server(cmd, env=env)
    home = _prefect_home()
    try:
        # the commands of this machine (without PREFECT_API_URL) use this server while it runs
        shared_server.register_ui(home, f"{_local(base, args.host, args.port)}/api")
        code = server.wait()
    finally:
        try:
            shared_server.unregister_ui(home)  # before it stops: no command waits for it
        finally:
            stop(server)
    print(f"error: the Prefect server exited with code {code}", file=sys.stderr)
    return EXIT_FAIL


def _prefect_home() -> str:
    from prefect.settings import PREFECT_HOME

    return str(Path(PREFECT_HOME.value()).expanduser())


def _local(base: str, host: str, port: int) -> str:
    """``base`` as a command of this machine reaches it (a wildcard address: loopback)."""
    return f"http://127.0.0.1:{port}" if host in ("0.0.0.0", "::", "") else base


def check_port(host: str, port: int) -> None:
    """Refuse, in one line, a host that does not resolve and a port another process listens
    on (as the server binds it: the address reusable, so a port in TIME_WAIT is free)."""
    from scarce.tasks.errors import InputError

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, socket.AF_UNSPEC,
                                                             socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError(f"cannot bind {host!r}: {exc}", key="--host") from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            raise InputError(f"cannot listen on {host}:{port}: {exc.strerror or exc} (another "
                             "server? choose another --port)", key="--port") from None


def stop(server: subprocess.Popen) -> None:
    """Stop the server's session: SIGTERM (the server shuts down), SIGKILL after
    :data:`STOP_GRACE` seconds."""
    for signum, wait in ((signal.SIGTERM, STOP_GRACE), (signal.SIGKILL, None)):
        if server.poll() is not None:
            return
        try:
            os.killpg(server.pid, signum)
        except ProcessLookupError:
            return
        try:
            server.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
