"""``scarce bench latency``: its rows, its checks of the bad-config row, and its table on a
tiny case (one repeat, two commands)."""

from __future__ import annotations

import argparse
import json
import math

import pytest

from scarce.bench import latency


def test_the_rows_cover_every_training_flow_run_and_applied():
    from scarce.flows.registry import FLOWS

    trained = sorted(name for name, spec in FLOWS.items()  # the project's, not a test's
                     if spec.kind == "train" and spec.target.startswith("scarce."))
    assert sorted(latency.FLOWS) == trained
    for flow in trained:
        assert f"run-{flow}" in latency.ROWS and f"apply-{flow}" in latency.ROWS


def test_commands_are_kept_in_the_tables_order_and_an_unknown_one_is_refused():
    assert latency.parse_rows("runs, run-leml,runs") == ["run-leml", "runs"]
    with pytest.raises(ValueError, match=r"unknown rows \['run-lemml'\]"):
        latency.parse_rows("run-lemml,runs")
    with pytest.raises(ValueError, match="unknown rows"):
        latency.parse_rows(" , ")


def test_overrides_go_to_their_flow_after_the_quick_settings():
    from scarce.bench.overhead import QUICK

    got = latency.parse_overrides(["leml:model.rank=8", "strip:window=3"], quick=True)
    assert got["leml"] == [*QUICK["leml"], "model.rank=8"]
    assert got["strip"] == [*QUICK["strip"], "window=3"]
    assert got["relations"] == QUICK["relations"]
    for bad in ("model.rank=8", "lemml:model.rank=8", "leml:model.rank"):
        with pytest.raises(ValueError, match="expected FLOW:KEY=VALUE"):
            latency.parse_overrides([bad], quick=False)


def test_a_runs_recorded_seconds_are_its_manifests_start_to_finish(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"started": "2026-12-06T10:00:00.250000+00:00",
         "finished": "2026-12-06T10:01:02.750000+00:00"}))
    assert latency.recorded_seconds(tmp_path) == 62.5


@pytest.mark.slow  # starts a Prefect server
def test_the_table_has_the_peer_and_each_row_cold_and_warm(capsys):
    table = latency.run(argparse.Namespace(commands="bad-config,runs", repeats=1, quick=False,
                                           overrides=[]))
    assert list(table.columns) == latency.COLUMNS
    assert table["command"].tolist() == [latency.PEER, "runs", "bad-config"]
    for col in ("cold_seconds", "warm_seconds", "cold_over_peer", "warm_over_peer"):
        assert (table[col] > 0).all(), table
    # neither records a time of its own; the bad config has its goal
    assert table["work_seconds"].isna().all()
    goals = dict(zip(table["command"], table["goal_seconds"], strict=True))
    assert goals["bad-config"] == latency.GOALS["bad-config"] and math.isnan(goals["runs"])
    assert table.set_index("command").loc["runs", "code"] == "scarce runs"
    assert (table["repeats"] == 1).all()
    first = capsys.readouterr().out.splitlines()[0]
    assert "UTC, `scarce bench latency --commands runs,bad-config --repeats 1`" in first
    assert "load average" in first
