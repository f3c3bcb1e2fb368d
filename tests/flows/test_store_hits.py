"""Cache hits resolved from the store: no task run, same outputs, damage still repaired."""

from __future__ import annotations

import numpy as np
import pytest

import tests.flows.sample_flow  # noqa: F401  (registers the 'digits' flow)
from scarce.bench.overhead import busy_seconds
from scarce.flows.cli import main
from tests.flows.helpers import digits_project, made_run, made_runs, manifest, runs


def test_busy_seconds_is_the_length_of_the_union():
    rng = np.random.default_rng(0)
    for _ in range(50):
        starts = rng.integers(0, 100, size=8)
        spans = [(float(s), float(s + rng.integers(0, 20))) for s in starts]
        covered = np.zeros(200, dtype=bool)  # unit cells [t, t+1) of integer intervals
        for s, e in spans:
            covered[int(s):int(e)] = True
        assert busy_seconds(spans) == covered.sum()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return digits_project(tmp_path_factory.mktemp("project"))


@pytest.fixture(scope="module")
def first(project, prefect_server):
    """The id of the module's first run of ``digits``, made by the first test that reads it."""
    return made_run(project, "run", "digits")


def _task_runs_of_last_flow_run():
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        (fr,) = client.read_flow_runs(sort=FlowRunSort.START_TIME_DESC, limit=1)
        return client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[fr.id])))


@pytest.mark.usefixtures("prefect_server")
def test_second_run_takes_every_step_from_the_store_without_task_runs(tmp_path, monkeypatch,
                                                                      caplog):
    # A project of its own: its first run computes every step as a task run.
    project = digits_project(tmp_path / "own")
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    monkeypatch.chdir(project)
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    assert main(["run", "digits"]) == 0
    assert len(_task_runs_of_last_flow_run()) == 3
    caplog.clear()
    with caplog.at_level("INFO"):
        assert main(["run", "digits"]) == 0
    # inside a run the message goes to Prefect's run logger (the console and the UI), once
    hits = [r for r in caplog.records if r.getMessage().startswith("cache hit: digits-")]
    assert _task_runs_of_last_flow_run() == []
    (first, second) = sorted((manifest(project, r) for r in runs(project)),
                             key=lambda m: m["started"])
    assert all(o["cached"] for o in second["outputs"])
    assert second["cache_hits"] == ["digits-cluster", "digits-evaluate", "digits-load"]
    assert [(o["ref"], o["sha256"]) for o in second["outputs"]] == [
        (o["ref"], o["sha256"]) for o in first["outputs"]]
    assert len(hits) == 3


@pytest.mark.usefixtures("prefect_server", "in_project")
def test_a_damaged_entry_goes_back_through_prefect_and_is_rewritten(project, first, caplog):
    first = manifest(project, first)
    ref = next(o["ref"] for o in first["outputs"] if o["step"] == "digits-cluster")
    path = project / "data" / "cache" / f"{ref}.parquet"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with made_runs(project) as made:
        with caplog.at_level("WARNING", logger="scarce.store"):
            assert main(["run", "digits"]) == 0
        assert f"store entry {ref} is damaged" in caplog.text
        names = sorted(tr.name.split(" ")[0] for tr in _task_runs_of_last_flow_run())
        assert len(names) >= 1  # the damaged step ran as a task again
    (last,) = (manifest(project, r) for r in made)
    assert {o["ref"]: o["sha256"] for o in last["outputs"]} == {
        o["ref"]: o["sha256"] for o in first["outputs"]}
