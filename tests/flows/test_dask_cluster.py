"""Runs on an existing Dask cluster: real ``dask scheduler`` and ``dask worker`` processes.

Issue 17: the address on the command line reaches the LEML W-step (item 2), a W-step survives a
worker killed under it (item 3), and the workers report to the command's Prefect API without
starting a server of their own (item 4).  Each test starts its own scheduler (``--port 0``)
and single-threaded workers (``--no-nanny``: a killed worker stays dead), each process in a
session of its own, without ``PREFECT_API_URL`` and with a Prefect home of their own; ``scarce``
runs as a child process (:mod:`tests.flows.procs`).  Every wait is on a state, with a generous
cap.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tasks.store import Store
from tests.flows import procs

pytestmark = pytest.mark.slow

DASK = Path(sys.executable).with_name("dask")
CAP = 300.0  # seconds: the cap of every wait on a state (a loaded 2-core machine is slow)
FINISHED = re.compile(r"Task run '(.+?)' - Finished in state Completed\(\)")


def _wait_for(predicate, what: str, timeout: float = CAP, every: float = 0.1):
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
        """The cluster processes' environment: no Prefect API, a Prefect home of their own."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PREFECT_API_", "SCARCE_"))}
        env.update(PREFECT_HOME=str(self.worker_home), PYTHONPATH=str(procs.REPO),
                   PREFECT_SERVER_ANALYTICS_ENABLED="false", OPENBLAS_NUM_THREADS="1",
                   OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
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
        _wait_for(lambda: address not in self.client.scheduler_info(n_workers=-1)["workers"],
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

        cluster.address = _wait_for(address, "the scheduler's address")
        for i in range(n_workers):
            cluster.start_worker(f"w{i}")
        cluster.client = Client(cluster.address, timeout="60s")
        cluster.client.wait_for_workers(n_workers, timeout=CAP)
        yield cluster
    finally:
        cluster.stop()


def _leml_project(root: Path) -> Path:
    return procs.make_project(root, "leml")


def _w_step_timings(project: Path, manifest: dict):
    store = Store(project / "data" / "cache")
    return [store.read(o["ref"]) for o in manifest["outputs"]
            if o["step"] == "leml-alternate-W" and o["ref"].endswith("-timings")]


# -- item 2: the address of the command line reaches the W-step ------------------------------
@pytest.mark.usefixtures("prefect_server")
def test_dask_address_reaches_the_w_step_and_where_it_runs_is_not_in_its_key(tmp_path):
    with dask_cluster(tmp_path / "cluster") as cluster:
        project = _leml_project(tmp_path / "project")
        before = cluster.computed()
        out = procs.run(project, ["run", "leml", "--dask-address", cluster.address,
                                  "--set", "w_step.runner=dask"], project / "run.log",
                        timeout=900)
        assert "Traceback" not in out and "CommClosedError" not in out
        assert f"W-step 1 on the Dask cluster at {cluster.address}" in out
        m = procs.only_manifest(project)
        assert m["task_runner"] == "DaskTaskRunner"
        assert m["options"]["dask_address"] == cluster.address
        # The scheduler at that address built the row blocks and computed the products ...
        after = cluster.computed()
        assert after.get("leml-w-block", 0) - before.get("leml-w-block", 0) == 4
        assert after.get("leml-w", 0) > before.get("leml-w", 0)
        assert after.get("leml-h", 0) > before.get("leml-h", 0)  # the H-steps' block sums
        # ... and every W-step records that it ran there, on both workers.
        timings = _w_step_timings(project, m)
        assert len(timings) == procs.LEML_ITERATIONS
        for frame in timings:
            assert frame["scheduler"].tolist() == [cluster.address]
            assert frame["workers"].tolist() == [2]
        # the manifest says where the W-step ran, not only which task runner the run had
        assert m["notes"]["w_step"] == {"scheduler": cluster.address, "workers": 2}

        # Where it ran is not part of what it computed: the same W-steps through w_step.address
        # under the local task runner are found in the store.
        procs.run(project, ["run", "leml", "--set", "w_step.runner=dask",
                            "--set", f"w_step.address={cluster.address}"],
                  project / "again.log", timeout=900)
        again = procs.manifest(project, procs.run_ids(project)[-1])
        w = [o for o in again["outputs"] if o["step"] == "leml-alternate-W"]
        assert w and all(o["cached"] for o in w)
        assert procs.stable_outputs(again) == procs.stable_outputs(m)


@pytest.mark.usefixtures("prefect_server")
def test_runner_dask_w_step_uses_the_task_runners_cluster(tmp_path, monkeypatch):
    """``--runner dask``: the W-step runs on the task runner's LocalCluster, not on a second
    cluster of its own."""
    import tasks.leml as tl
    from flows.cli import main

    project = _leml_project(tmp_path / "project")
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    monkeypatch.chdir(project)
    for var in ("SCARCE_STORE", "SCARCE_RUNS"):
        monkeypatch.delenv(var, raising=False)
    tl._close_w_clusters()
    try:
        assert main(["run", "leml", "--runner", "dask", "--set", "w_step.runner=dask",
                     "--set", "model.outer_iterations=2"]) == 0
        assert tl._W_CLUSTERS == {}  # no cluster of the W-step's own
    finally:
        tl._close_w_clusters()
    m = procs.only_manifest(project)
    assert m["task_runner"] == "DaskTaskRunner"
    places = {(f["scheduler"].iloc[0], int(f["workers"].iloc[0]))
              for f in _w_step_timings(project, m)}
    assert len(places) == 1
    ((scheduler, workers),) = places
    assert scheduler.startswith("tcp://127.0.0.1:") and workers == 2


# -- item 3: a worker killed under the W-step ------------------------------------------------
@pytest.mark.usefixtures("prefect_server")
def test_w_step_survives_a_killed_worker_with_the_outputs_of_an_uninterrupted_run(tmp_path):
    with dask_cluster(tmp_path / "cluster") as cluster:
        over = ["--set", "w_step.runner=dask", "--set", f"w_step.address={cluster.address}"]
        reference_project = _leml_project(tmp_path / "reference")
        procs.run(reference_project, ["run", "leml", *over], reference_project / "run.log",
                  timeout=900)
        reference = procs.only_manifest(reference_project)
        built = cluster.computed()["leml-w-block"]

        project = _leml_project(tmp_path / "killed")
        child = procs.start(project, ["run", "leml", *over], project / "run.log")
        victim: dict[str, str] = {}

        def inside_a_w_step() -> bool:
            """Blocks on a worker and a W-step's products alive: CG is running."""
            held = cluster.client.who_has()
            blocks = {k: w for k, w in held.items()
                      if str(k).startswith("leml-w-block-") and w}
            if not blocks or not any(str(k).startswith("leml-w-block_products-")
                                     for k in held):
                return False
            address = sorted(blocks.values())[0][0]
            victim["name"] = next(n for n in cluster.workers
                                  if cluster.address_of(n) == address)
            return True

        assert procs.wait_until(child, inside_a_w_step, timeout=CAP, every=0.02), (
            f"the run ended before a W-step was seen:\n{child.output()[-3000:]}")
        cluster.kill(victim["name"])
        code = child.wait(900)
        out = child.output()
        assert code == 0, out[-4000:]
        assert "FutureCancelledError" not in out
        m = procs.only_manifest(project)
        assert procs.stable_outputs(m) == procs.stable_outputs(reference)
        assert ({o["name"]: o["sha256"] for o in m["named_outputs"]}
                == {o["name"]: o["sha256"] for o in reference["named_outputs"]})
        # The lost worker's blocks were built again on the other one.
        assert cluster.computed()["leml-w-block"] - built > 4
        assert len(cluster.client.scheduler_info(n_workers=-1)["workers"]) == 1


# -- item 4: the workers report to the command's Prefect API ---------------------------------
def _start_without_api(project: Path, args: list[str], log: Path, home: Path) -> procs.Child:
    """``scarce ARGS`` without ``PREFECT_API_URL``: the command starts its own temporary
    server, whose database is ``home/prefect.db``."""
    env = procs.child_env(project, PREFECT_HOME=str(home),
                          PREFECT_SERVER_DATABASE_CONNECTION_URL=(
                              f"sqlite+aiosqlite:///{home / 'prefect.db'}"))
    env.pop("PREFECT_API_URL")
    home.mkdir()
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "flows.cli", *args], cwd=project,
                                env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    child = procs.Child(proc, log)
    procs._children.append(child)  # killed at exit if a failed test left it running
    return child


def _task_runs(db: Path, flow_run_id: str) -> dict[str, str]:
    """Name -> state type of the flow run's task runs, from the API's database."""
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT name, state_type FROM task_run WHERE flow_run_id = ?",
                           (flow_run_id,)).fetchall()
    return dict(rows)


def test_workers_report_to_the_commands_api_and_start_no_server(tmp_path):
    import psutil

    with dask_cluster(tmp_path / "cluster") as cluster:
        project = procs.make_project(tmp_path / "project", "relations")
        seen = {name: 0 for name in cluster.workers}  # how much of each worker log was read
        # Two commands on the same workers, each with a temporary server of its own.
        for i, extra in enumerate(([], ["--refresh"])):
            home = tmp_path / f"home{i}"
            child = _start_without_api(
                project, ["run", "relations", "--dask-address", cluster.address, *extra],
                tmp_path / f"run{i}.log", home)
            code = child.wait(900)
            out = child.output()
            assert code == 0, out[-4000:]
            assert out.count("Starting temporary server") == 1  # the command's own
            assert "Error logging to API" not in out
            m = procs.manifest(project, procs.run_ids(project)[-1])
            # Every task run the workers finished for this command is in the command's API.
            on_workers = set()
            for name in cluster.workers:
                text = cluster.worker_log(name)
                on_workers |= set(FINISHED.findall(text[seen[name]:]))
                seen[name] = len(text)
            assert len(on_workers) >= 6, on_workers  # the mapped units ran on the cluster
            runs = _task_runs(home / "prefect.db", m["prefect_flow_run_id"])
            missing = sorted(on_workers - set(runs))
            assert not missing, f"command {i}: task runs missing from its API: {missing}"
            assert {runs[n] for n in on_workers} == {"COMPLETED"}
        # No worker started a Prefect server: no process below a worker, no such log line, no
        # database in the workers' Prefect home.
        for name, proc in cluster.workers.items():
            assert psutil.Process(proc.pid).children(recursive=True) == []
            assert "Starting temporary server" not in cluster.worker_log(name)
        assert not (cluster.worker_home / "prefect.db").exists()
