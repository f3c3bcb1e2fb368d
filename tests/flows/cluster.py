"""A Dask cluster of real processes for the tests: ``dask scheduler`` and ``dask worker``.

Each test that needs one starts its own (:func:`dask_cluster`): the scheduler on a free port
(``--port 0``), single-threaded workers (``--no-nanny``: a killed worker stays dead), each
process in a session of its own, without ``PREFECT_API_URL`` and with a Prefect home of
their own.  Every wait is on a state, with a generous cap.  The tests are in
``test_dask_cluster*.py``, one file per behaviour, so that test processes
(pytest-xdist, whole files per process) can run them at the same time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from distributed.diagnostics.plugin import WorkerPlugin

from scarce.tasks.store import Store
from tests.flows import procs

DASK = Path(sys.executable).with_name("dask")
CAP = 300.0  # seconds: the cap of every wait on a state (a loaded 2-core machine is slow)


def wait_for(predicate, what: str, timeout: float = CAP, every: float = 0.1):
    """Poll ``predicate`` until it returns a true value (returned); TimeoutError at the cap."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


@dataclass
class Cluster:
    """A scheduler and its workers, each a process of its own; ``client`` is the test's."""

    root: Path
    address: str = ""
    client: object = None
    scheduler: subprocess.Popen | None = None
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)  # name -> process

    @property
    def worker_home(self) -> Path:
        return self.root / "worker-home"

    def env(self) -> dict[str, str]:
        """The cluster processes' environment: no Prefect API, a Prefect home of their own,
        and the scheduler without work stealing, as README says to start one."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PREFECT_API_", "SCARCE_"))}
        env.update(PREFECT_HOME=str(self.worker_home), PYTHONPATH=str(procs.REPO),
                   PREFECT_SERVER_ANALYTICS_ENABLED="false", OPENBLAS_NUM_THREADS="1",
                   OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING="False")
        return env

    def spawn(self, args: list[str], log: str) -> subprocess.Popen:
        with open(self.root / log, "wb") as fh:
            return subprocess.Popen([str(DASK), *args], env=self.env(), stdout=fh,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    cwd=self.root)

    def start_worker(self, name: str) -> None:
        self.workers[name] = self.spawn(
            ["worker", self.address, "--nthreads", "1", "--no-nanny", "--no-dashboard",
             "--name", name], f"{name}.log")

    def worker_log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")

    def address_of(self, name: str) -> str:
        info = self.client.scheduler_info(n_workers=-1)["workers"]
        return next(a for a, w in info.items() if w.get("name") == name)

    def kill(self, name: str) -> None:
        """SIGKILL worker ``name``, and wait until the scheduler has removed it."""
        address = self.address_of(name)
        os.kill(self.workers[name].pid, signal.SIGKILL)
        self.workers[name].wait(60)
        wait_for(lambda: address not in self.client.scheduler_info(n_workers=-1)["workers"],
                  f"the scheduler removing worker {name}")

    def computed(self) -> dict[str, int]:
        """Per key prefix, how many tasks the scheduler has seen computed (``leml-w-block``:
        the W-step's row blocks; ``leml-w``: its products; ``leml-h``: the H-step's block
        sums)."""
        def counts(dask_scheduler):
            return {name: int(p.state_counts["memory"])
                    for name, p in dask_scheduler.task_prefixes.items()}

        return self.client.run_on_scheduler(counts)

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        for proc in [*self.workers.values(), self.scheduler]:
            if proc is None or proc.poll() is not None:
                continue
            os.killpg(proc.pid, signal.SIGTERM)  # its group: what it may have started too
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(60)


class KillOnTask(WorkerPlugin):
    """A Dask worker plugin (``client.register_plugin``): the worker process that starts
    executing the first task whose key begins with ``prefix`` kills itself with SIGKILL, once
    on the whole cluster (the first to create ``marker`` does it).  So a worker dies inside a
    chosen kind of task, whatever the machine's speed: no race with polling."""

    def __init__(self, prefix: str, marker: str) -> None:
        self.prefix, self.marker = prefix, marker
        self.name = f"kill-on-{prefix}"

    def transition(self, key, start, finish, **kwargs) -> None:
        if finish != "executing" or not str(key).startswith(self.prefix):
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        os.kill(os.getpid(), signal.SIGKILL)


@contextmanager
def dask_cluster(root: Path, n_workers: int = 2) -> Iterator[Cluster]:
    """``dask scheduler`` on a free port and ``n_workers`` ``dask worker`` processes."""
    from distributed import Client

    root.mkdir(parents=True)
    cluster = Cluster(root)
    cluster.worker_home.mkdir()
    try:
        info = root / "scheduler.json"
        cluster.scheduler = cluster.spawn(
            ["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(info)], "scheduler.log")

        def address() -> str | None:
            try:
                return json.loads(info.read_text())["address"]
            except (OSError, ValueError, KeyError):
                return None

        cluster.address = wait_for(address, "the scheduler's address")
        for i in range(n_workers):
            cluster.start_worker(f"w{i}")
        cluster.client = Client(cluster.address, timeout="60s")
        cluster.client.wait_for_workers(n_workers, timeout=CAP)
        yield cluster
    finally:
        cluster.stop()


def leml_project(root: Path) -> Path:
    return procs.make_project(root, "leml")


def w_step_timings(project: Path, manifest: dict):
    store = Store(project / "data" / "cache")
    return [store.read(o["ref"]) for o in manifest["outputs"]
            if o["step"] == "leml-alternate-W" and o["ref"].endswith("-timings")]


