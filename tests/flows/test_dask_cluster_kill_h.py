"""Issue 18: an H-step survives a ``dask worker`` process killed inside it, with the outputs of
an uninterrupted run (:mod:`tests.flows.cluster`)."""

from __future__ import annotations

import pytest

from tests.flows import procs
from tests.flows.cluster import CAP, KillOnTask, dask_cluster, leml_project

pytestmark = pytest.mark.slow


@pytest.mark.usefixtures("prefect_server")
def test_h_step_label_blocks_survive_a_worker_killed_inside_one(tmp_path):
    """Missing labels: a worker dies executing an H-step task, first the first per-label Gram
    task (``leml-h-block_label_grams``), then, with a new worker started, the first sum and
    solve of a label block (``leml-h-solve_label_block``).  The lost blocks are read again from
    their files by the other worker, the label block is summed and solved there, and each
    run ends with every output of an uninterrupted run, bit for bit."""
    with dask_cluster(tmp_path / "cluster") as cluster:
        over = ["--set", "compute.backend=dask", "--set", f"compute.address={cluster.address}",
                "--set", "observed_fraction=0.5"]
        reference_project = leml_project(tmp_path / "reference")
        procs.run(reference_project, ["run", "leml", *over], reference_project / "run.log",
                  timeout=900)
        reference = procs.only_manifest(reference_project)
        for i, prefix in enumerate(["leml-h-block_label_grams", "leml-h-solve_label_block"]):
            if i:  # two workers again
                cluster.start_worker(f"w{i + 1}")
                cluster.client.wait_for_workers(2, timeout=CAP)
            built = cluster.computed()["leml-w-block"]
            marker = tmp_path / f"kill-marker-{i}"
            cluster.client.register_plugin(KillOnTask(prefix, str(marker)))
            project = leml_project(tmp_path / f"killed-{i}")
            procs.run(project, ["run", "leml", *over], project / "run.log", timeout=900)
            assert marker.exists(), prefix  # a worker died inside such a task
            assert len(cluster.client.scheduler_info(n_workers=-1)["workers"]) == 1
            m = procs.only_manifest(project)
            assert procs.stable_outputs(m) == procs.stable_outputs(reference), prefix
            assert ({o["name"]: o["sha256"] for o in m["named_outputs"]}
                    == {o["name"]: o["sha256"] for o in reference["named_outputs"]})
            # The run's blocks were built, and the lost worker's built again on the other.
            assert cluster.computed()["leml-w-block"] - built > 4
