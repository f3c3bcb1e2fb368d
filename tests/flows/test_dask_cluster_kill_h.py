"""Issue 18: an H-step survives a ``dask worker`` process killed inside it, with the outputs of
an uninterrupted run (:mod:`tests.flows.cluster`)."""

from __future__ import annotations

import pytest

from tests.flows import procs
from tests.flows.cluster import KillOnTask, dask_cluster, leml_project

pytestmark = pytest.mark.slow


@pytest.mark.usefixtures("prefect_server")
def test_h_step_label_blocks_survive_a_worker_killed_inside_one(tmp_path):
    """Missing labels: a worker dies executing the first per-label Gram task of an H-step
    (``leml-h-block_label_grams``; the label block's sum and solve wait on it).  The lost
    blocks are read again from their files by the other worker, the label block is summed
    and solved there, and the run ends with every output of an uninterrupted run, bit for
    bit."""
    with dask_cluster(tmp_path / "cluster") as cluster:
        over = ["--set", "w_step.runner=dask", "--set", f"w_step.address={cluster.address}",
                "--set", "observed_fraction=0.5"]
        reference_project = leml_project(tmp_path / "reference")
        procs.run(reference_project, ["run", "leml", *over], reference_project / "run.log",
                  timeout=900)
        reference = procs.only_manifest(reference_project)
        built = cluster.computed()["leml-w-block"]

        marker = tmp_path / "kill-marker"
        cluster.client.register_plugin(KillOnTask("leml-h-block_label_grams", str(marker)))
        project = leml_project(tmp_path / "killed")
        procs.run(project, ["run", "leml", *over], project / "run.log", timeout=900)
        assert marker.exists()  # a worker died inside a label block's Gram task
        assert len(cluster.client.scheduler_info(n_workers=-1)["workers"]) == 1
        m = procs.only_manifest(project)
        assert procs.stable_outputs(m) == procs.stable_outputs(reference)
        assert ({o["name"]: o["sha256"] for o in m["named_outputs"]}
                == {o["name"]: o["sha256"] for o in reference["named_outputs"]})
        # The lost worker's blocks were built again on the other one.
        assert cluster.computed()["leml-w-block"] - built > 4
