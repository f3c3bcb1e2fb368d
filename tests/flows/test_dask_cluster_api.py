"""Workers of a cluster started with ``dask scheduler`` / ``dask worker``
report to the command's Prefect API and start no server of their own
(:mod:`tests.flows.cluster`)."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.flows import procs
from tests.flows.cluster import dask_cluster

pytestmark = pytest.mark.slow

FINISHED = re.compile(r"Task run '(.+?)' - Finished in state Completed\(\)")


# -- item 4: the workers report to the command's Prefect API ---------------------------------
def _start_without_api(project: Path, args: list[str], log: Path, home: Path) -> procs.Child:
    """``scarce ARGS`` without ``PREFECT_API_URL``: the command starts its own temporary
    server, whose database is ``home/prefect.db`` (``home``: a Prefect home, made)."""
    env = procs.child_env(project, PREFECT_HOME=str(home),
                          PREFECT_SERVER_DATABASE_CONNECTION_URL=(
                              f"sqlite+aiosqlite:///{home / 'prefect.db'}"))
    env.pop("PREFECT_API_URL")
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "scarce.flows.cli", *args], cwd=project,
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


def test_workers_report_to_the_commands_api_and_start_no_server(tmp_path, seeded_prefect_home):
    import psutil

    with dask_cluster(tmp_path / "cluster") as cluster:
        project = procs.make_project(tmp_path / "project", "relations")
        seen = {name: 0 for name in cluster.workers}  # how much of each worker log was read
        # Two commands on the same workers, each with a temporary server of its own.
        for i, extra in enumerate(([], ["--refresh"])):
            home = seeded_prefect_home(tmp_path / f"home{i}")
            child = _start_without_api(
                project, ["run", "relations", "--dask-address", cluster.address,
                          "--set", "n_subsamples=2", *extra],  # 6 stability units are enough
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
