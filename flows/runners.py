"""Task runners of the flows: the thread pool by default, or Dask.

``scarce run --runner dask`` runs a flow's tasks on a local ``dask.distributed`` cluster (two
single-threaded worker processes), ``--dask-address`` on an existing one; deployments take the
same two settings (:mod:`flows.deploy`).  Nothing here is imported by the flows themselves: the
runner is chosen by whoever starts a flow.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# On 2-core machines two BLAS or OpenMP threads in one process were measured 3 to 100 times
# slower than one (eigh of 500 x 500: 3.7 s against 0.03 s), so every process of ours runs one.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def pin_threads(env: dict[str, str] | os._Environ | None = None) -> None:
    """One BLAS/OpenMP thread unless the variables are already set, and Prefect offline.

    Called by the command line before numpy or scipy are imported (importing a module of this
    project changes no environment).
    """
    env = os.environ if env is None else env
    for var in THREAD_VARIABLES:
        env.setdefault(var, "1")
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")


# Run inside the temporary server's process before it becomes uvicorn: ask the kernel to send
# it SIGTERM when its parent (this command) dies, however it dies (SIGKILL, an abort), and give
# up at once if the parent is already gone.  PR_SET_PDEATHSIG (1) survives the exec.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "parent = int(sys.argv[1])\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != parent:\n"
    "    sys.exit(0)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
)


def _owned_server_class():
    import subprocess
    import sys

    import prefect.server.api.server as prefect_server

    class _Launcher:
        """Stands in for the subprocess module while Prefect launches its server: the same
        command, run through :data:`_DIE_WITH_PARENT`."""

        def __getattr__(self, name: str) -> Any:
            return getattr(subprocess, name)

        @staticmethod
        def Popen(args: list[str], **kwargs: Any) -> subprocess.Popen:  # noqa: N802
            return subprocess.Popen([sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()),
                                     *args[1:]], **kwargs)

    class OwnedServer(prefect_server.SubprocessASGIServer):
        """Prefect's temporary server, launched so that it dies with this process."""

        def _run_uvicorn_command(self) -> subprocess.Popen:
            saved, prefect_server.subprocess = prefect_server.subprocess, _Launcher()
            try:
                return super()._run_uvicorn_command()
            finally:
                prefect_server.subprocess = saved

    return OwnedServer


@contextmanager
def prefect_api() -> Iterator[str | None]:
    """The Prefect API of one command: ``PREFECT_API_URL`` when it is set; else one temporary
    server for the whole command (every flow of ``scarce run all`` reports to it), stopped when
    the command ends and, on Linux, killed by the kernel if the command is killed (a SIGTERM
    or an abort used to leave a 220 MB server listening, its parent gone)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value():
        yield PREFECT_API_URL.value()
        return
    server = _start_owned_server()
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            yield server.api_url
    finally:
        server.stop()


def _start_owned_server():
    import sys

    if not sys.platform.startswith("linux"):  # no parent-death signal: Prefect's own server
        from prefect.server.api.server import SubprocessASGIServer

        server = SubprocessASGIServer()
    else:
        server = _owned_server_class()()
    server.start()
    return server


def worker_env() -> dict[str, str]:
    """Environment of local Dask workers: one BLAS thread, and this process's Prefect API.

    Without ``PREFECT_API_URL`` each worker process would start a temporary Prefect server of
    its own (20 s or more here): the temporary server of this process is started first and
    its address handed to the workers.
    """
    from prefect.settings import PREFECT_API_URL

    env = {v: "1" for v in THREAD_VARIABLES}
    url = PREFECT_API_URL.value()
    if not url:
        from prefect.server.api.server import SubprocessASGIServer

        server = SubprocessASGIServer()
        server.start()
        url = server.api_url
    env["PREFECT_API_URL"] = url
    return env


def with_runner(flow_fn: Any, runner: str, address: str | None) -> Any:
    """``flow_fn`` with the task runner of ``--runner`` / ``--dask-address``."""
    if runner == "local" and not address:
        return flow_fn
    from prefect_dask import DaskTaskRunner

    if address:
        task_runner = DaskTaskRunner(address=address)
    else:
        task_runner = DaskTaskRunner(
            cluster_kwargs={
                "n_workers": 2,
                "threads_per_worker": 1,
                "processes": True,
                "env": worker_env(),
            }
        )
    return flow_fn.with_options(task_runner=task_runner)


def check_scheduler(address: str, timeout: float = 10.0) -> None:
    """Reach the Dask scheduler at ``address`` once, before any work: an address with nothing
    listening is an :class:`~tasks.errors.InputError` naming it (otherwise a run whose steps are
    all cached would finish without ever noticing)."""
    import socket
    from urllib.parse import urlsplit

    from tasks.errors import InputError

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme not in ("tcp", "tls") or not parts.hostname or not parts.port:
        raise InputError(f"not a scheduler address: {address!r} (expected tcp://HOST:PORT)",
                         key="--dask-address")
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=timeout).close()
    except OSError as exc:
        raise InputError(f"no Dask scheduler at {address} ({exc.strerror or exc})",
                         key="--dask-address") from None
