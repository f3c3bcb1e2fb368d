"""Where a command's flows run: their task runner (the thread pool by default, or Dask) and
their Prefect API (:func:`prefect_api`: ``PREFECT_API_URL``, else the shared local server, or
with ``SCARCE_SERVER=temporary`` the command's own).

``scarce run --runner dask`` runs a flow's tasks on a local ``dask.distributed`` cluster (two
single-threaded worker processes), ``--dask-address`` on an existing one; deployments take the
same two settings (:mod:`scarce.flows.deploy`).  Nothing here is imported by the flows
themselves: the runner is chosen by whoever starts a flow.

The Dask runner is :data:`DaskTaskRunner`, prefect-dask's runner that also hands the command's
Prefect API to the workers it connects to (:data:`PrefectAPIPlugin`): the task runs executed
there report to that API, and a worker started without ``PREFECT_API_URL`` never starts a
temporary Prefect server of its own.  The local runner is :data:`ThreadPoolTaskRunner`,
Prefect's, which an interruption does not hold.  The classes are made on first use (importing
Prefect or Dask costs seconds, and this module is imported by every command).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from scarce.flows.server_process import (
    RECORDED_WITHIN,
    file_size_limit,
    last_error,
    launch_server,
)
from scarce.tasks.errors import InputError

log = logging.getLogger("scarce.run")

#: The signals (SIGINT, SIGTERM) this command has received, as :func:`scarce.flows.cli.main` records
#: them: an interruption, whatever exception it surfaced as inside a library.
SIGNALS: list[int] = []

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


class ServerStartError(InputError):
    """The command's temporary Prefect server did not start (its database could not be
    written, a limit of the process, ...): one line with the server's own last error."""


@functools.cache
def _server_class() -> type:
    import atexit
    import threading
    from collections import deque

    import httpx
    import prefect.server.api.server as prefect_server
    from prefect.settings import PREFECT_HOME, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

    class _Launcher:
        """Stands in for the subprocess module while Prefect launches its server: the same
        command and environment, through :func:`launch_server`, its output read by
        :class:`_Output`."""

        def __init__(self, output: _Output) -> None:
            self.output = output

        def __getattr__(self, name: str) -> Any:
            return getattr(subprocess, name)

        def Popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen:  # noqa: N802
            proc = launch_server(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 **kwargs)
            self.output.follow(proc)
            return proc

    class _Output:
        """What the server prints: held while it starts (the last lines tell why it did not),
        then passed on to this process's stderr as before."""

        def __init__(self) -> None:
            self.lines: deque[str] = deque(maxlen=200)
            self.passing = False
            self.lock = threading.Lock()
            self.reader: threading.Thread | None = None

        def follow(self, proc: subprocess.Popen) -> None:
            self.lines.clear()
            self.reader = threading.Thread(target=self._read, args=(proc.stdout,),
                                           name="prefect-server-output", daemon=True)
            self.reader.start()

        def _read(self, stream: Any) -> None:
            for raw in stream:
                line = raw.decode(errors="replace")
                with self.lock:
                    if not self.passing:
                        self.lines.append(line)
                        continue
                _write_stderr(line)
            stream.close()

        def pass_on(self) -> None:
            with self.lock:
                self.passing = True
                held = list(self.lines)
                self.lines.clear()
            for line in held:
                _write_stderr(line)

        def ended(self) -> list[str]:
            """Its lines once the process has exited (its output closed)."""
            if self.reader is not None:
                self.reader.join(timeout=10)
            return list(self.lines)

    class Server(prefect_server.SubprocessASGIServer):
        """Prefect's temporary server, launched by :func:`launch_server`.

        Prefect's ``start`` waits out the whole start-up timeout (two minutes here) when the
        server process has exited, relaunching it on another port whenever it exits with
        uvicorn's start-up failure code, which it reads as "port taken": a server whose
        database cannot be written (``ulimit -f``, a full disk) printed pages of tracebacks
        for two minutes.  Here the start ends as soon as the process does, with its last
        error, and only a port actually taken is tried again elsewhere."""

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:  # noqa: ARG004
            # one server per call; Prefect's class hands out one instance per port
            return object.__new__(cls)

        def _run_uvicorn_command(self) -> subprocess.Popen:
            saved, prefect_server.subprocess = prefect_server.subprocess, _Launcher(self._output)
            try:
                return super()._run_uvicorn_command()
            finally:
                prefect_server.subprocess = saved

        def start(self, timeout: int | None = None) -> None:
            if self.running:
                return
            self._output = _Output()
            self.port = self.port or self.find_available_port()
            prefect_server.subprocess_server_logger.info(
                f"Starting temporary server on {self.address}")
            self.running = True
            try:
                self.server_process = self._run_uvicorn_command()
                atexit.register(self.stop)
                self._wait_until_up(timeout or PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS
                                    .value())
            except BaseException:  # an interruption too: no server left starting
                self.stop()
                raise
            self._output.pass_on()

        def _wait_until_up(self, timeout: float) -> None:
            deadline = time.monotonic() + timeout
            with httpx.Client() as client:
                while True:
                    code = self.server_process.poll()
                    if code is not None:
                        lines = self._output.ended()
                        if code == 3 and any("address already in use" in line.lower()
                                             for line in lines):
                            self.port = self.find_available_port()
                            self.server_process = self._run_uvicorn_command()
                            continue
                        raise ServerStartError(
                            f"the temporary Prefect server exited while starting (code "
                            f"{code}): {last_error(lines)}{file_size_limit()}; its database "
                            "is under PREFECT_HOME (or set PREFECT_API_URL to use a running "
                            "server)", path=PREFECT_HOME.value())
                    try:
                        if client.get(f"{self.api_url}/health").status_code == 200:
                            return
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        raise ServerStartError(
                            f"the temporary Prefect server did not answer within {timeout:g} "
                            f"s: {last_error(self._output.lines)} (the limit is "
                            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)",
                            path=PREFECT_HOME.value())
                    time.sleep(0.1)

    return Server


def _write_stderr(line: str) -> None:
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: the output is lost, the server runs on
        pass


# -- the garbage collector of a command's process ---------------------------------------------
_collector_paused = False


def pause_collector() -> None:
    """Pause the cyclic garbage collector while a command that runs flows imports: called by
    the console script (:func:`scarce.flows.cli.entrypoint`), never by ``main`` called from
    Python.

    Importing Prefect, pandas, scikit-learn and the flows makes objects that live as long as
    the process; the collections their allocations set off (each older generation traversing
    a heap that only grows) found next to nothing to free and were a sizeable part of a fresh
    command's start.  :func:`settle_collector` turns it on again."""
    global _collector_paused
    if gc.isenabled():
        gc.disable()
        _collector_paused = True


def settle_collector() -> None:
    """After :func:`pause_collector`, once the command's imports are made (its Prefect API
    chosen, its flows about to run): what exists now is moved out of the collector's reach
    (:func:`gc.freeze`: it lives as long as the process) and the collector is on again for
    the flows' own work.  Nothing when it was not paused."""
    global _collector_paused
    if _collector_paused:
        _collector_paused = False
        gc.freeze()
        gc.enable()


@contextmanager
def prefect_api() -> Iterator[str | None]:
    """The Prefect API of one command, the one place where it is chosen:

    * ``PREFECT_API_URL`` when it is set;
    * else the shared local server of the Prefect home (:mod:`scarce.flows.shared_server`): the one
      ``scarce ui`` runs, or the one a command started in the background, which outlives the
      command and stops when idle; started here when there is none, and leased while the
      command uses it (an interruption ends the command, not the server);
    * with ``SCARCE_SERVER=temporary``, one temporary server for the whole command (every flow
      of ``scarce run all`` reports to it), stopped when the command ends (an interruption
      included) and, on Linux, killed by the kernel if the command is killed (a SIGTERM or an
      abort used to leave a 220 MB server listening, its parent gone).

    What this process's Prefect services still hold is sent before the server is let go."""
    from scarce.flows import shared_server

    def local(home: Path, env: Callable[[], dict[str, str]],
              timeout: float) -> AbstractContextManager[str]:
        if shared_server.mode() == "shared":
            return shared_server.shared(home, env, timeout, log=log.info)
        return _temporary_server()

    with local_server_api(local) as url:
        settle_collector()  # the command's imports are made, its flows about to run
        yield url


@contextmanager
def local_server_api(
    local: Callable[[Path, Callable[[], dict[str, str]], float], AbstractContextManager[str]],
) -> Iterator[str]:
    """``PREFECT_API_URL`` when it is set; else the URL of the local server that
    ``local(home, env, timeout)`` holds for the block (the Prefect home, made; the environment
    a server started here gets, :func:`server_environment`, called only when one is started:
    serialising Prefect's settings takes a good part of a second; its start-up timeout), set as this
    process's API, and what this process's Prefect services still hold sent before the server
    is let go.  The start of :func:`prefect_api` and of ``scarce serve``'s API
    (:func:`scarce.flows.commands.deploy.scheduling_api`)."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_HOME,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        temporary_settings,
    )

    if PREFECT_API_URL.value():
        yield PREFECT_API_URL.value()
        return
    # Prefect creates PREFECT_HOME but not its parents; the server's SQLite database then
    # cannot be opened and the command only reports a start-up timeout.
    home = Path(PREFECT_HOME.value()).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    timeout = PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()
    with local(home, functools.partial(server_environment, home), timeout) as url:
        try:
            with temporary_settings({PREFECT_API_URL: url}):
                yield url
        finally:
            _drain_prefect_services(timeout=30)


@contextmanager
def _temporary_server() -> Iterator[str]:
    """The URL of a temporary server of this process (:func:`start_server`), stopped when the
    block ends."""
    server = start_server()
    try:
        yield server.api_url
    finally:
        server.stop()


def server_environment(home: Path) -> dict[str, str]:
    """The environment of a server of the Prefect home ``home`` started by this process (the
    shared server, ``scarce ui``'s): this one's, with its Prefect settings (a profile's
    included) as variables, as Prefect passes them to its own temporary server, so that a
    value a profile sets wins over :data:`~scarce.flows.server_process.SERVER_DEFAULTS`; no
    API URL."""
    from prefect.settings import get_current_settings

    env = {**os.environ, **get_current_settings().to_environment_variables(exclude_unset=True),
           "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    return env


def start_server() -> Any:
    """A temporary Prefect server of this process, started (see :func:`_server_class`).

    Started under an exclusive lock in the Prefect home, held until it answers: two servers
    that create or migrate one database at once collide on its schema (one exits on a column
    the other has just added), so commands starting together start their servers in turn."""
    import fcntl

    from prefect.settings import PREFECT_HOME

    home = Path(PREFECT_HOME.value()).expanduser()
    home.mkdir(parents=True, exist_ok=True)
    server = _server_class()()
    fd = os.open(home / "scarce-server-start.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel if this process dies
        server.start()
    finally:
        os.close(fd)
    return server


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


@functools.cache
def _thread_pool_class() -> type:
    from prefect.task_runners import ThreadPoolTaskRunner as PrefectThreadPool

    class ThreadPoolTaskRunner(PrefectThreadPool):
        """Prefect's thread pool, which does not wait for its running tasks when the flow run
        ends by an interruption (Ctrl-C, SIGTERM, also when the signal surfaced inside a
        library as another exception: :data:`SIGNALS`).

        A running task cannot be interrupted (a step inside NumPy, an experiment's child flow
        run in its thread), and Prefect's pool waited for each to end before the flow run was
        even marked crashed: Ctrl-C held the command for as long as a step or a whole child
        run took.  Here the tasks not started are cancelled and the running ones left to die
        with the process, which reports, stops its server and exits at once
        (:func:`scarce.flows.cli.entrypoint`), leaving the store as a killed run does: every entry
        either whole or absent.  Recorded by its class name, ``ThreadPoolTaskRunner``, in the
        manifest, as Prefect's.
        """

        def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
            if self._executor is not None and (SIGNALS or exc_type is not None and not
                                               issubclass(exc_type, Exception | GeneratorExit)):
                for event in self._cancel_events.values():
                    event.set()
                self._executor.shutdown(wait=False, cancel_futures=True)
                self._executor = None
            super().__exit__(exc_type, exc_value, traceback)

    return _named_here(ThreadPoolTaskRunner)


def interruptible(flow_fn: Any) -> Any:
    """``flow_fn`` as a command runs it: with :data:`ThreadPoolTaskRunner` where it has
    Prefect's thread pool (the local runner), so that an interruption ends its run at once,
    and :func:`crash_left_running` among its crash hooks."""
    from prefect.task_runners import ThreadPoolTaskRunner as PrefectThreadPool

    options: dict[str, Any] = {
        "on_crashed": [*flow_fn.on_crashed_hooks, crash_left_running],
        # an interruption that surfaced as another exception inside Prefect fails the run
        "on_failure": [*flow_fn.on_failure_hooks, _crash_left_running_if_signalled]}
    runner = flow_fn.task_runner
    if type(runner) is PrefectThreadPool:
        options["task_runner"] = _thread_pool_class()(max_workers=runner._max_workers)
    return flow_fn.with_options(**options)


def _crash_left_running_if_signalled(flow: Any, flow_run: Any, state: Any) -> None:
    if SIGNALS:
        crash_left_running(flow, flow_run, state)


def crash_left_running(flow: Any, flow_run: Any, state: Any) -> None:
    """Crash hook of a command's flow run: mark its task runs and child flow runs (at any
    depth: an experiment's children and their steps) that are still unfinished as crashed too.

    Prefect marks only the flow run the interruption reached; the steps and child runs left
    running in other threads or on Dask workers die with the process (or are abandoned) and
    would otherwise show as running for ever, in the UI of the same database as anywhere.
    Child flow runs are created by direct API calls and all found; a task run reaches the
    server as events, which the servers scarce starts record in batches (at most
    :data:`~scarce.flows.server_process.RECORDED_WITHIN` seconds later): the events this
    process still holds are sent first, the unfinished runs marked, and, after that time,
    those recorded meanwhile marked too.
    """
    from prefect import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterParentFlowRunId,
        FlowRunFilterState,
        FlowRunFilterStateType,
        TaskRunFilter,
        TaskRunFilterFlowRunId,
        TaskRunFilterState,
        TaskRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    unfinished = [StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING, StateType.PAUSED]
    message = state.message or "the flow run that started it crashed"
    if "prefect.events.worker" in sys.modules:
        from prefect.events.worker import EventsWorker

        EventsWorker.drain_all(timeout=5)
    with get_client(sync_client=True) as client:
        def crash(parents: list) -> list:
            """Mark the unfinished task runs of the flow runs ``parents``, and of their
            unfinished child flow runs at any depth, crashed, those child runs too; returns
            every flow run visited."""
            visited = []
            while parents:
                visited += parents
                for run in client.read_task_runs(task_run_filter=TaskRunFilter(
                        flow_run_id=TaskRunFilterFlowRunId(any_=parents),
                        state=TaskRunFilterState(type=TaskRunFilterStateType(any_=unfinished)))):
                    client.set_task_run_state(run.id, Crashed(message=message), force=True)
                children = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=parents),
                    state=FlowRunFilterState(type=FlowRunFilterStateType(any_=unfinished))))
                for run in children:
                    client.set_flow_run_state(run.id, Crashed(message=message), force=True)
                parents = [run.id for run in children]
            return visited

        visited = crash([flow_run.id])
        time.sleep(RECORDED_WITHIN)
        crash(visited)  # the task runs recorded meanwhile, in the same flow runs


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
        url = start_server().api_url
    env["PREFECT_API_URL"] = url
    return env


# -- Dask: the task runner, and the Prefect API on its workers --------------------------------
def __getattr__(name: str) -> Any:
    """``DaskTaskRunner``, ``PrefectAPIPlugin`` and ``ThreadPoolTaskRunner``, made on first
    use (PEP 562), so that each is importable (and pickled) by its name here."""
    if name == "DaskTaskRunner":
        return _dask_task_runner_class()
    if name == "PrefectAPIPlugin":
        return _api_plugin_class()
    if name == "ThreadPoolTaskRunner":
        return _thread_pool_class()
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
    listening is an :class:`~scarce.tasks.errors.InputError` naming it (otherwise a run whose
    steps are all cached would finish without ever noticing)."""
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
