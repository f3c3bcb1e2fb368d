"""A W-step survives a ``dask worker`` process killed under it, with the
outputs of an uninterrupted run (:mod:`tests.flows.cluster`)."""

from __future__ import annotations

import pytest

from tests.flows import procs
from tests.flows.cluster import CAP, dask_cluster, leml_project

pytestmark = pytest.mark.slow


# -- item 3: a worker killed under the W-step ------------------------------------------------
@pytest.mark.usefixtures("prefect_server")
def test_w_step_survives_a_killed_worker_with_the_outputs_of_an_uninterrupted_run(tmp_path):
    with dask_cluster(tmp_path / "cluster") as cluster:
        over = ["--set", "compute.backend=dask", "--set", f"compute.address={cluster.address}"]
        reference_project = leml_project(tmp_path / "reference")
        procs.run(reference_project, ["run", "leml", *over], reference_project / "run.log",
                  timeout=900)
        reference = procs.only_manifest(reference_project)
        built = cluster.computed()["leml-w-block"]

        project = leml_project(tmp_path / "killed")
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


