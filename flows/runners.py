"""Task runners of the flows: the thread pool by default, or Dask.

``scarce run --runner dask`` runs a flow's tasks on a local ``dask.distributed`` cluster (two
single-threaded worker processes), ``--dask-address`` on an existing one; deployments take the
same two settings (:mod:`flows.deploy`).  Nothing here is imported by the flows themselves: the
runner is chosen by whoever starts a flow.

The Dask runner is :data:`DaskTaskRunner`, prefect-dask's runner that also hands the command's
Prefect API to the workers it connects to (:data:`PrefectAPIPlugin`): the task runs executed
there report to that API, and a worker started without ``PREFECT_API_URL`` never starts a
temporary Prefect server of its own.  Both classes are made on first use (importing Prefect or
Dask costs seconds, and this module is imported by every command).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

log = logging.getLogger("scarce.run")

# On 2-core machines two BLAS or OpenMP threads in one process were measured several times
# (up to a hundred times) slower than one, so every process of ours runs one.
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
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, temporary_settings

    if PREFECT_API_URL.value():
        yield PREFECT_API_URL.value()
        return
    # Prefect creates PREFECT_HOME but not its parents; the server's SQLite database then
    # cannot be opened and the command only reports a start-up timeout.
    Path(PREFECT_HOME.value()).expanduser().mkdir(parents=True, exist_ok=True)
    server = _start_owned_server()
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            yield server.api_url
    finally:
        try:
            _drain_prefect_services(timeout=30)
        finally:
            server.stop()


def _drain_prefect_services(timeout: float) -> None:
    """Send what Prefect's log and event services of this process still hold (at most
    ``timeout`` seconds each) and stop them, as Prefect's own test harness does before it stops
    its server: stopped after the server, they retried the closed address for minutes before
    the process could exit.  The next use starts them again."""
    for service in _prefect_services():
        service.drain_all(timeout=timeout)


async def _drain_prefect_services_async(timeout: float) -> None:
    """:func:`_drain_prefect_services` in a running event loop (a Dask worker's)."""
    for service in _prefect_services():
        await service.drain_all(timeout=timeout)


def _prefect_services() -> list[Any]:
    """Prefect's log and event service classes, if Prefect was imported in this process."""
    if "prefect.logging.handlers" not in sys.modules:
        return []
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    return [APILogWorker, EventsWorker]


def _start_owned_server():
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
    its own (tens of seconds): the temporary server of this process is started first and
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


# -- Dask: the task runner, and the Prefect API on its workers --------------------------------
def __getattr__(name: str) -> Any:
    """``DaskTaskRunner`` and ``PrefectAPIPlugin``, made on first use (PEP 562), so that both
    are importable (and pickled) by their names here."""
    if name == "DaskTaskRunner":
        return _dask_task_runner_class()
    if name == "PrefectAPIPlugin":
        return _api_plugin_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _named_here(cls: type) -> type:
    cls.__module__, cls.__qualname__ = __name__, cls.__name__
    return cls


@functools.cache
def _api_plugin_class() -> type:
    from distributed.diagnostics.plugin import WorkerPlugin

    class PrefectAPIPlugin(WorkerPlugin):
        """Hands a command's Prefect API to the Dask workers it uses.

        Prefect tasks executed on a worker take the API from the settings their client sends
        with them; what else Prefect does there does not.  On a worker started without
        ``PREFECT_API_URL``, anything reading the process's settings would start a temporary
        Prefect server inside the worker (seconds, left running afterwards); and the
        worker's event service, made once per process, stays bound to the API of the first
        command it served, so the task runs of every later command on the same worker were
        missing from their own API.  So, on every worker, now and joining later:

        * ``setup`` sets ``PREFECT_API_URL`` for the worker process when it has none (read when
          Prefect is imported there, by the first Prefect task), and stops Prefect's log and
          event services left from earlier commands (with a timeout: their API may be gone),
          so that the next task starts them on its own API;
        * ``teardown`` (the runner's end, while the API still runs) sends what they hold.

        Parameters
        ----------
        url : str
            The Prefect API of the command.
        """

        def __init__(self, url: str) -> None:
            self.url = url
            self.name = "scarce-prefect-api-" + hashlib.sha256(url.encode()).hexdigest()[:12]

        async def setup(self, worker: Any) -> None:
            os.environ.setdefault("PREFECT_API_URL", self.url)
            await _drain_prefect_services_async(timeout=10)

        async def teardown(self, worker: Any) -> None:
            await _drain_prefect_services_async(timeout=30)

    return _named_here(PrefectAPIPlugin)


@functools.cache
def _dask_task_runner_class() -> type:
    import prefect_dask

    class DaskTaskRunner(prefect_dask.DaskTaskRunner):
        """prefect-dask's task runner, which also registers :data:`PrefectAPIPlugin` with the
        command's Prefect API on the cluster when it connects, and unregisters it when the
        run ends (the workers send what their Prefect services hold before the API stops).

        Recorded by its class name, ``DaskTaskRunner``, in the manifest.
        """

        _api_plugin: Any = None

        @property
        def client(self) -> Any:
            import dask

            from scarce.tasks.leml_dask import NO_WORK_STEALING

            fresh = self._client is None
            # A LocalCluster made here runs without work stealing (why: NO_WORK_STEALING);
            # the setting is read when its scheduler starts, so only here.  The other flows'
            # tasks hold no data on a worker: the scheduler gives each, when it is ready, to
            # the least busy worker (or queues it until a thread is free), so stealing only
            # rebalances guesses of their durations (not measured without it).
            with dask.config.set(NO_WORK_STEALING) if fresh else nullcontext():
                client = super().client
            if fresh:
                self._api_plugin = _register_api_plugin(client)
            return client

        def __exit__(self, *exc: Any) -> None:
            try:
                if self._client is not None and self._api_plugin is not None:
                    try:
                        self._client.unregister_worker_plugin(self._api_plugin.name)
                    except Exception as err:  # noqa: BLE001 - a run's end must not fail here
                        log.warning("could not remove the Prefect API plugin from the Dask "
                                    "workers: %s", err)
            finally:
                super().__exit__(*exc)

    return _named_here(DaskTaskRunner)


def _register_api_plugin(client: Any) -> Any:
    """Register :data:`PrefectAPIPlugin` with this process's Prefect API (none without an
    API); returns the plugin."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        return None
    plugin = _api_plugin_class()(url)
    client.register_plugin(plugin, name=plugin.name)
    return plugin


def with_runner(flow_fn: Any, runner: str, address: str | None) -> Any:
    """``flow_fn`` with the task runner of ``--runner`` / ``--dask-address``
    (:data:`DaskTaskRunner`)."""
    if runner == "local" and not address:
        return flow_fn
    DaskTaskRunner = _dask_task_runner_class()  # noqa: N806 - a class

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

    from scarce.tasks.errors import InputError

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme not in ("tcp", "tls") or not parts.hostname or not parts.port:
        raise InputError(f"not a scheduler address: {address!r} (expected tcp://HOST:PORT)",
                         key="--dask-address")
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=timeout).close()
    except OSError as exc:
        raise InputError(f"no Dask scheduler at {address} ({exc.strerror or exc})",
                         key="--dask-address") from None
