"""``scarce cache gc`` keeps what runs use: the plots their manifests show, the Prefect records
of the entries it keeps, and everything a running run has used or written."""

from __future__ import annotations

import os
import signal

import pandas as pd
import pytest
from prefect import flow

import tests.flows.sample_flow as sample
from scarce.flows.cli import main, referenced_refs
from scarce.flows.runtime import RunContext, RunOptions
from scarce.tasks.store import Store
from tests.flows import procs
from tests.flows.helpers import digits_project, manifest, runs

pytestmark = pytest.mark.usefixtures("prefect_server")


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = digits_project(tmp_path / "project", n_samples=200, k=6)
    monkeypatch.setenv("SCARCE_ROOT", str(root))
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    return root


def cli(capsys, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_gc_keeps_the_plots_of_existing_runs_and_says_what_it_frees(project, capsys):
    cli(capsys, "run", "digits")
    (run_id,) = runs(project)
    plot = manifest(project, run_id)["plots"][0]
    assert plot["ref"].startswith("plots/")
    store = Store(project / "data" / "cache")
    assert store.exists(plot["ref"])

    out = cli(capsys, "cache", "gc", "--dry-run")
    assert "would remove 0 entries (0.0 MB)" in out

    # Without the run folder nothing refers to the entries: all of them would go, the plot too.
    (project / "data" / "runs" / run_id / "manifest.json").unlink()
    out = cli(capsys, "cache", "gc", "--dry-run")
    total = sum(store.size(r) for r in store.refs())
    assert f"would remove {len(store.refs())} entries ({total / 1e6:.1f} MB)" in out
    assert plot["ref"] in out


def test_gc_leaves_the_records_of_the_entries_it_keeps(project, capsys):
    cli(capsys, "run", "digits")
    store = Store(project / "data" / "cache")
    orphan = "plots/" + "0" * 32
    store.write(orphan, pd.DataFrame({"png": [b"not a plot"]}))
    out = cli(capsys, "cache", "gc")
    assert "removed 1 entries" in out and orphan in out
    assert not store.exists(orphan)

    before = set(runs(project))
    cli(capsys, "run", "digits")
    (second,) = (manifest(project, r) for r in set(runs(project)) - before)
    assert second["cache_hits"] == ["digits-cluster", "digits-evaluate", "digits-load"]
    assert all(o["cached"] for o in second["outputs"])


def test_gc_in_the_middle_of_a_run_keeps_what_the_run_uses(project, tmp_path):
    """gc between two steps: the first step's entries (written by the run, or taken from the
    cache of an earlier run that no manifest names any more) survive, and the run finishes."""
    config = sample.DigitsConfig(data=str(project / "digits.csv"), n_samples=200, k=6)
    store_root, runs_root = project / "data" / "cache", project / "data" / "runs"
    reports = []

    @flow(name="digits-gc")
    def with_gc_midway(run_id: str) -> dict:
        ctx = RunContext.open("digits", config,
                              RunOptions(store=str(store_root), runs=str(runs_root),
                                         run_id=run_id))
        data = ctx.run(sample.load, path=config.data, n_samples=config.n_samples,
                       seed=config.seed)
        # what `scarce cache gc` does, while this run is live
        reports.append(Store(store_root).gc(referenced_refs(runs_root)))
        labels = ctx.run(sample.cluster, data=data, k=config.k, n_init=config.n_init,
                         seed=config.seed)
        return ctx.finish(ctx.run(sample.evaluate, data=data, labels=labels))

    first = with_gc_midway("first")
    assert reports[0].live_runs == ["first"] and reports[0].removed == []
    assert reports[0].kept_for_live_runs == 2  # the X and y just written

    # An earlier run's entries that no manifest names: the second run takes `load` from
    # them; gc keeps those and removes the rest (cluster, evaluate), which the run recomputes.
    (runs_root / "first" / "manifest.json").unlink()
    for path in store_root.rglob("*.parquet"):  # written an hour ago
        st = path.stat()
        os.utime(path, (st.st_atime - 3600, st.st_mtime - 3600))
    second = with_gc_midway("second")
    load_refs = {o["ref"] for o in first["manifest"]["outputs"] if o["step"] == "digits-load"}
    assert set(reports[1].removed) == {
        o["ref"] for o in first["manifest"]["outputs"] if o["step"] != "digits-load"}
    hits = {o["ref"] for o in second["manifest"]["outputs"] if o["cached"]}
    assert hits == load_refs
    assert procs.stable_outputs(second["manifest"]) == procs.stable_outputs(first["manifest"])
    assert not list((store_root / "_leases").glob("*.lease"))  # released at the end


def test_gc_beside_a_running_scarce_run_spares_it(tmp_path_factory):
    """The issue's reproduction, frozen in place: `scarce run leml` stopped (SIGSTOP) after
    its second alternating iteration, `scarce cache gc` run to the end beside it, then the
    run continued: it finishes with the uninterrupted run's outputs."""
    project = procs.make_project(tmp_path_factory.mktemp("leml-gc"), "leml")
    store_root = project / "data" / "cache"
    child = procs.start(project, ["run", "leml"], project / "run.log")

    def midway() -> bool:
        done_w = [p for p in procs.entries(store_root, "leml-alternate-W") if p.stem.endswith("-W")]
        return len(done_w) >= 2 and not procs.entries(store_root, "leml-evaluate")

    reached = procs.wait_until(child, midway)
    assert reached, child.output()[-3000:]
    os.killpg(child.proc.pid, signal.SIGSTOP)
    try:
        before = set(Store(store_root).refs())
        out = procs.run(project, ["cache", "gc"], project / "gc.log")
    finally:
        os.killpg(child.proc.pid, signal.SIGCONT)
    assert "running run(s)" in out, out
    assert child.wait(600) == 0, child.output()[-4000:]
    assert before <= set(Store(store_root).refs())  # nothing the run had was removed
    _, reference = procs.reference(tmp_path_factory, "leml")
    assert procs.stable_outputs(procs.only_manifest(project)) == procs.stable_outputs(reference)
