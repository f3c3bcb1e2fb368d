"""The address on the command line reaches the LEML W-step, and where it
runs is not part of its key (real ``dask scheduler`` and ``dask worker`` processes,
:mod:`tests.flows.cluster`; ``scarce`` runs as a child process, :mod:`tests.flows.procs`)."""

from __future__ import annotations

import pytest

from tests.flows import procs
from tests.flows.cluster import dask_cluster, leml_project, w_step_timings

pytestmark = pytest.mark.slow


# -- item 2: the address of the command line reaches the W-step ------------------------------
@pytest.mark.usefixtures("prefect_server")
def test_dask_address_reaches_the_w_step_and_where_it_runs_is_not_in_its_key(tmp_path):
    with dask_cluster(tmp_path / "cluster") as cluster:
        project = leml_project(tmp_path / "project")
        before = cluster.computed()
        out = procs.run(project, ["run", "leml", "--dask-address", cluster.address,
                                  "--set", "compute.backend=dask"], project / "run.log",
                        timeout=900)
        assert "Traceback" not in out and "CommClosedError" not in out
        assert "work stealing" not in out  # the scheduler was started as README says
        assert f"W-step 1 on the Dask cluster at {cluster.address}" in out
        m = procs.only_manifest(project)
        assert m["task_runner"] == "DaskTaskRunner"
        assert m["options"]["dask_address"] == cluster.address
        # The scheduler at that address built the row blocks and computed the products ...
        after = cluster.computed()
        assert after.get("leml-w-block", 0) - before.get("leml-w-block", 0) == 4
        assert after.get("leml-w", 0) > before.get("leml-w", 0)
        assert after.get("leml-h", 0) > before.get("leml-h", 0)  # the H-steps' block sums
        # the test set's 4 blocks, each scored and predicted where it was read
        assert after.get("leml-e", 0) - before.get("leml-e", 0) == 8
        # ... and every W-step records that it ran there, on both workers.
        timings = w_step_timings(project, m)
        assert len(timings) == procs.LEML_ITERATIONS
        for frame in timings:
            assert frame["scheduler"].tolist() == [cluster.address]
            assert frame["workers"].tolist() == [2]
        # the manifest says where the W-step ran, not only which task runner the run had
        assert m["notes"]["w_step"] == {"scheduler": cluster.address, "workers": 2}

        # Where it ran is not part of what it computed: the same W-steps through compute.address
        # under the local task runner are found in the store.
        procs.run(project, ["run", "leml", "--set", "compute.backend=dask",
                            "--set", f"compute.address={cluster.address}"],
                  project / "again.log", timeout=900)
        again = procs.manifest(project, procs.run_ids(project)[-1])
        w = [o for o in again["outputs"] if o["step"] == "leml-alternate-W"]
        assert w and all(o["cached"] for o in w)
        assert procs.stable_outputs(again) == procs.stable_outputs(m)


@pytest.mark.usefixtures("prefect_server")
def test_runner_dask_w_step_uses_the_task_runners_cluster(tmp_path, monkeypatch):
    """``--runner dask``: the W-step runs on the task runner's LocalCluster, not on a second
    cluster of its own, and that cluster runs without work stealing."""
    import scarce.tasks.leml_dask.clients as clients
    from scarce.flows.cli import main
    from scarce.tasks.leml_dask import CLIENTS

    steals = []
    asked = clients.scheduler_steals
    monkeypatch.setattr(clients, "scheduler_steals",
                        lambda c: steals.append(asked(c)) or steals[-1])

    project = leml_project(tmp_path / "project")
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    monkeypatch.chdir(project)
    for var in ("SCARCE_STORE", "SCARCE_RUNS"):
        monkeypatch.delenv(var, raising=False)
    CLIENTS.close()
    try:
        assert main(["run", "leml", "--runner", "dask", "--set", "compute.backend=dask",
                     "--set", "model.outer_iterations=2"]) == 0
        assert CLIENTS.opened == 0  # no cluster of the W-step's own
        assert steals and not any(steals)
    finally:
        CLIENTS.close()
    m = procs.only_manifest(project)
    assert m["task_runner"] == "DaskTaskRunner"
    places = {(f["scheduler"].iloc[0], int(f["workers"].iloc[0]))
              for f in w_step_timings(project, m)}
    assert len(places) == 1
    ((scheduler, workers),) = places
    assert scheduler.startswith("tcp://127.0.0.1:") and workers == 2


