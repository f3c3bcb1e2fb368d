"""``scarce ui``: the Prefect server and its UI on this machine, until Ctrl-C."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys


def ui(args: argparse.Namespace) -> int:
    """``prefect server start`` on ``host:port`` with analytics off; runs until Ctrl-C."""
    base = f"http://{args.host}:{args.port}"
    print(
        f"Prefect server and UI: {base}\n"
        "Point runs, deployments and `scarce serve` at it (in another shell):\n"
        f"  export PREFECT_API_URL={base}/api\n"
        "  scarce run leml        # the run shows up in the UI\n"
        "  scarce serve           # registers configs/deployments.yaml and runs its schedules\n"
        "Ctrl-C stops the server.",
        flush=True,
    )
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    # The UI asks the API at PREFECT_UI_API_URL, which Prefect derives from the API host and
    # port settings, not from `prefect server start --port`: without these the page served on
    # another port still talks to 4200 (another server's runs, or none).
    env.update(PREFECT_SERVER_API_HOST=args.host, PREFECT_SERVER_API_PORT=str(args.port),
               PREFECT_UI_API_URL=f"{base}/api")
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", args.host,
           "--port", str(args.port), "--analytics-off"]  # fmt: skip
    server = subprocess.Popen(cmd, env=env)
    # Stopping this command stops the server: forward SIGTERM; Ctrl-C reaches both.
    previous = signal.signal(signal.SIGTERM, lambda signum, _: server.send_signal(signum))
    try:
        return server.wait()
    except KeyboardInterrupt:
        server.send_signal(signal.SIGINT)
        return server.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
