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


def test_commands_are_kept_in_the_tables_order_each_once():
    parser = argparse.ArgumentParser()
    latency.add_arguments(parser)
    given = parser.parse_args(["--commands", "runs, run-leml,runs"]).commands
    assert latency.table_order(given) == ["run-leml", "runs"]
    assert latency.table_order(parser.parse_args([]).commands) == list(latency.ROWS)


def test_overrides_go_to_their_flow_after_the_quick_settings():
    from scarce.bench.overhead import QUICK
    from scarce.flows.commands.types import FlowSetting
    from scarce.tasks.errors import InputError

    setting = FlowSetting(latency.FLOWS)
    got = latency.parse_overrides([setting("leml:model.rank=8"), setting("strip:window=3")],
                                  quick=True)
    assert got["leml"] == [*QUICK["leml"], "model.rank=8"]
    assert got["strip"] == [*QUICK["strip"], "window=3"]
    assert got["relations"] == QUICK["relations"]
    for bad in ("model.rank=8", "lemml:model.rank=8", "leml:model.rank", "leml:=8"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected FLOW:KEY=VALUE"):
            setting(bad)
    with pytest.raises(InputError, match="greater than or equal to 1") as err:  # the config's
        latency.parse_overrides([setting("strip:window=0")], quick=False)
    assert err.value.key == "window"


def test_a_runs_recorded_seconds_are_its_manifests_start_to_finish(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"started": "2026-12-06T10:00:00.250000+00:00",
         "finished": "2026-12-06T10:01:02.750000+00:00"}))
    assert latency.recorded_seconds(tmp_path) == 62.5


@pytest.mark.slow  # starts a Prefect server
def test_the_table_has_the_peer_and_each_row_cold_and_warm(capsys):
    table = latency.run(argparse.Namespace(commands=["bad-config", "runs"], repeats=1, quick=False,
                                           overrides=[]))
    assert list(table.columns) == latency.COLUMNS
    assert table["command"].tolist() == [latency.PEER, "runs", "bad-config"]
    for col in ("cold_seconds", "warm_seconds", "cold_over_peer", "warm_over_peer"):
        assert (table[col] > 0).all(), table
    # neither records a time of its own; the bad config has its goal
    assert table[["cold_work_seconds", "warm_work_seconds"]].isna().all().all()
    goals = dict(zip(table["command"], table["goal_seconds"], strict=True))
    assert goals["bad-config"] == latency.GOALS["bad-config"] and math.isnan(goals["runs"])
    assert table.set_index("command").loc["runs", "code"] == "scarce runs"
    assert (table["repeats"] == 1).all()
    first = capsys.readouterr().out.splitlines()[0]
    assert "UTC, `scarce bench latency --commands runs,bad-config --repeats 1`" in first
    assert "load average" in first


# -- the work of a row is the timed process's own ------------------------------------------
#: A stand-in for the ``scarce`` command line: ``run``, ``apply`` and ``rerun`` make a run
#: folder in ``$SCARCE_RUNS`` recording the seconds of its own making and print its id as
#: ``scarce`` does; the bad config is refused in one line; the rest do nothing.
FAKE_SCARCE = """
import datetime as dt, json, os, sys, time
args = sys.argv[1:]

def made(name):
    started = dt.datetime.now(dt.UTC)
    time.sleep(0.02)
    run_id = f"{name}-{time.time_ns()}"
    folder = os.path.join(os.environ["SCARCE_RUNS"], run_id)
    os.makedirs(folder)
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump({"started": started.isoformat(),
                   "finished": dt.datetime.now(dt.UTC).isoformat()}, f)
    return run_id

if args[0] == "run" and "model.rank=0" in args:
    print("error: key 'model.rank': refused", file=sys.stderr)
    sys.exit(2)
if args[0] in ("run", "apply"):
    print(f"== {args[1] if args[0] == 'run' else 'apply-x'}: run {made(args[0])}")
elif args[0] == "rerun":
    print(f"rerun {made('rerun')} of {args[1]}")
"""
#: What each row's work is, by its name: the run the timed process made, the seconds the
#: timed ``python -c`` printed, or none.
WORK_FROM = {**{f"run-{f}": "run" for f in latency.FLOWS},
             **{f"apply-{f}": "run" for f in latency.FLOWS},
             "rerun": "run", "runs": None, "claims": None, "load": "printed",
             "bad-config": None}
#: The seconds the training runs record: no timed process of the fake takes as long.
TRAINED_SECONDS = 1000.0


@pytest.fixture
def fake_bench(tmp_path, monkeypatch):
    """A bench whose ``scarce`` is :data:`FAKE_SCARCE`, whose training runs record
    :data:`TRAINED_SECONDS` and whose load row times a sleep (no server, no model)."""
    import sys

    from scarce.bench import load as bench_load

    script = tmp_path / "fake_scarce.py"
    script.write_text(FAKE_SCARCE)
    monkeypatch.setattr(latency, "scarce_command", lambda: [sys.executable, str(script)])
    real_train = latency._train

    def train(*args, **kwargs):
        run_dir = real_train(*args, **kwargs)
        (run_dir / "manifest.json").write_text(json.dumps(  # TRAINED_SECONDS apart
            {"started": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:16:40+00:00"}))
        return run_dir

    monkeypatch.setattr(latency, "_train", train)
    monkeypatch.setattr(latency, "_apply_input", lambda flow, run_dir, tmp: str(tmp / "in"))
    monkeypatch.setattr(latency.Bench, "start_server", lambda self: None)
    monkeypatch.setattr(bench_load, "_first_rows", lambda run_dir, n, tmp: tmp / "rows")
    monkeypatch.setattr(bench_load, "commands", lambda run_dir: {bench_load.LOAD: "load"})
    monkeypatch.setattr(bench_load, "_filled", lambda code, run_dir, rows: (
        "import time; t = time.perf_counter(); time.sleep(0.02); "
        "WORK = time.perf_counter() - t"))
    return latency.Bench(tmp_path / "bench")


def test_every_rows_work_is_that_of_the_process_it_timed(fake_bench):
    assert sorted(WORK_FROM) == sorted(latency.ROWS)
    fake_bench.root.mkdir()
    rows = latency.build_rows(fake_bench, list(latency.ROWS),
                              latency.parse_overrides([], quick=False))
    assert [r.name for r in rows] == list(latency.ROWS)
    # the training runs the applies and the rerun read record far more than any timed process
    trained = list(fake_bench.root.glob("trained-runs-*/*"))
    assert len(trained) == len(latency.FLOWS)
    assert all(latency.recorded_seconds(p) == TRAINED_SECONDS for p in trained)
    for row in rows:
        done = row.once(fake_bench)
        if WORK_FROM[row.name] is None:
            assert done.work is None, row.name
        else:  # the fake's own 0.02 s, inside the wall time of the process
            assert 0.02 <= done.work <= done.wall, (row.name, done)


@pytest.mark.parametrize("printed", ["the source run", "no run", "two runs"])
def test_a_run_the_timed_process_did_not_make_is_refused(tmp_path, printed):
    import datetime as dt

    runs = tmp_path / "runs"
    for name, start in (("old", "2026-01-01T00:00:00"), ("new", "2026-06-01T00:00:01")):
        (runs / name).mkdir(parents=True)
        (runs / name / "manifest.json").write_text(json.dumps(
            {"started": f"{start}+00:00", "finished": "2026-06-01T00:00:02+00:00"}))
    began, ended = (dt.datetime(2026, 6, 1, 0, 0, s, tzinfo=dt.UTC) for s in (0, 3))
    stdout = {"the source run": "rerun old of old\n", "no run": "identical\n",
              "two runs": "== leml: run new\nrerun old of old\n"}[printed]
    with pytest.raises(RuntimeError):
        latency.made_run(stdout, runs, {"old"}, began, ended)
    assert latency.made_run("rerun new of old\n", runs, {"old"}, began, ended) == runs / "new"
    late = dt.datetime(2026, 6, 1, 0, 0, 1, 500000, tzinfo=dt.UTC)  # it began after the run
    with pytest.raises(RuntimeError, match="not within the timed process"):
        latency.made_run("rerun new of old\n", runs, {"old"}, late, ended)
    with pytest.raises(RuntimeError, match="not a new run"):  # a run that was there before
        latency.made_run("== apply-leml: run new\n", runs, {"old", "new"}, began, ended)


def test_the_work_of_the_cold_and_the_warm_processes_is_given_apart(tmp_path, monkeypatch):
    """Each mode's work is the median of that mode's processes: a cold run recording more
    (its server settling) is not mixed with the warm ones."""
    monkeypatch.setattr(latency.Bench, "stop_server", lambda self: None)
    monkeypatch.setattr(latency.Bench, "start_server", lambda self: None)
    monkeypatch.setattr(latency.PythonRow, "once", lambda self, bench: latency.Timed(1.0, None))
    works = iter([40.0, 30.0, 44.0, 28.0, 42.0, 29.0])  # cold, warm, cold, warm, ...

    class Fixed(latency.Row):
        name, code = "rerun", "scarce rerun RUN"

        def once(self, bench):
            return latency.Timed(50.0, next(works))

    bench = latency.Bench(tmp_path)
    monkeypatch.setattr(bench, "server_record", lambda: tmp_path)  # (one is running)
    table = latency.measure(bench, [Fixed()], repeats=3).set_index("command")
    assert table.loc["rerun", "cold_work_seconds"] == 42.0
    assert table.loc["rerun", "warm_work_seconds"] == 29.0
    assert math.isnan(table.loc[latency.PEER, "cold_work_seconds"])
