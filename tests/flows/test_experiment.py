"""Experiments as flows: a 2 x 2 grid of the digits flow through Prefect."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import scarce
import tests.flows.sample_flow  # noqa: F401  (registers the 'digits' flow)
from scarce.flows.cli import main
from scarce.flows.experiment import experiment_file, load_experiment, plan
from scarce.tasks.store import Store
from tests.flows.helpers import digits_grid, digits_project, made_runs, manifest, runs

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")

GRID = digits_grid(k="[4, 6]", seed="[0, 1]")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = digits_project(tmp_path_factory.mktemp("experiment"), n_samples=150, k=5)
    (root / "configs" / "experiments").mkdir()
    (root / "configs" / "experiments" / "grid.yaml").write_text(GRID)
    return root


@pytest.fixture(scope="module")
def grid(project, prefect_server) -> tuple[str, str]:
    """The module's first run of the experiment ``grid``, made here whichever test asks first
    (the tests read it, rerun it and count on its children), and what ``--dry-run`` printed
    before it, when none of its points had run: (run id, output)."""
    import contextlib
    import io

    with pytest.MonkeyPatch.context() as env, contextlib.redirect_stdout(io.StringIO()) as out:
        env.chdir(project)
        env.setenv("SCARCE_ROOT", str(project))
        env.delenv("SCARCE_STORE", raising=False)
        env.delenv("SCARCE_RUNS", raising=False)
        assert main(["run", "experiment", "grid", "--dry-run"]) == 0
        dry = out.getvalue()
        before = set(_experiment_runs(project))
        assert main(["run", "experiment", "grid"]) == 0
    (exp_run,) = set(_experiment_runs(project)) - before
    return exp_run, dry


def _experiment_runs(project) -> list[str]:
    return [r for r in runs(project) if manifest(project, r)["flow"] == "experiment"]


def _outputs(project, run_id: str) -> dict[str, str]:
    return {o["name"]: o["sha256"] for o in manifest(project, run_id)["named_outputs"]}


def test_the_table_is_the_childrens_metrics(project, grid):
    exp_run, dry = grid
    assert "4 to run (every step), 0 invalid" in dry  # nothing ran before
    out = project / "data" / "runs" / exp_run / "outputs"
    table = pd.read_parquet(out / "table.parquet")
    children = json.loads((out / "children.json").read_text())
    assert [c["point"] for c in children] == [
        {"k": 4, "seed": 0}, {"k": 4, "seed": 1}, {"k": 6, "seed": 0}, {"k": 6, "seed": 1}]
    for c in children:  # each child is a digits run with the point's config
        m = manifest(project, c["run_id"])
        assert m["flow"] == "digits" and c["error"] is None
        assert (m["config"]["k"], m["seed"], m["config"]["n_init"]) == (
            c["point"]["k"], c["point"]["seed"], 1)
        metrics = pd.read_parquet(project / "data" / "runs" / c["run_id"] / "metrics.parquet")
        mine = table[(table["k"] == str(c["point"]["k"]))
                     & (table["seed"] == str(c["point"]["seed"]))]
        assert mine[["dataset", "method", "metric", "value"]].reset_index(drop=True).equals(
            metrics)
    summary = pd.read_parquet(out / "summary.parquet")
    aris = table[table["metric"] == "ari"]
    for k in ("4", "6"):
        values = aris[aris["k"] == k]["value"]
        row = summary[summary["k"] == k].iloc[0]
        assert row["mean"] == pytest.approx(values.mean()) and row["n"] == 2
        assert row["std"] == pytest.approx(values.std(ddof=1))
    assert "| k | value |" in (out / "table.md").read_text()
    # the experiment's record lists every child's outputs (rerun compares them all)
    refs = {o["ref"] for o in manifest(project, exp_run)["outputs"]}
    for c in children:
        assert {o["ref"] for o in manifest(project, c["run_id"])["outputs"]} <= refs
    # the children carry the experiment's tag: `scarce runs --tag experiment:grid` is their
    # table, with the axes (the settings that differ) and each child's own metrics
    # (other tests here run the grid again: their children are listed too)
    listed = scarce.runs(tags=["experiment:grid"], root=project / "data" / "runs")
    assert (listed["flow"] == "digits").all()
    mine = listed.set_index("run_id").loc[[c["run_id"] for c in children]]
    assert mine["k"].tolist() == [4, 4, 6, 6] and mine["seed"].tolist() == [0, 1, 0, 1]
    assert mine["ari"].tolist() == aris["value"].tolist()
    assert not scarce.runs(tags=["experiment:named"], root=project / "data" / "runs")[
        "run_id"].isin(mine.index).any()


def test_one_more_seed_computes_only_the_new_children(project, grid, capsys):
    assert main(["run", "experiment", "grid", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert ("4 child runs of digits: 4 cached (0 uncached steps), 0 partly cached (0 uncached "
            "steps), 0 to run, 0 invalid") in out
    assert main(["run", "experiment", "grid", "--set", "axes.seed=[0, 1, 2]", "--dry-run"]) == 0
    # a new seed: the three steps of a digits run, counted on the earlier run nearest to it
    out = capsys.readouterr().out
    assert "6 child runs of digits: 4 cached (0 uncached steps), 0 partly cached" in out
    assert "2 to run (at most ~6 steps, counted on the nearest earlier runs)" in out
    with made_runs(project) as made:
        assert main(["run", "experiment", "grid", "--set", "axes.seed=[0, 1, 2]"]) == 0
    new_children = [r for r in made
                    if manifest(project, r)["flow"] == "digits"]
    assert len(new_children) == 6
    every_step = {"digits-load", "digits-cluster", "digits-evaluate"}
    cached = [r for r in new_children if set(manifest(project, r)["cache_hits"]) == every_step]
    assert sorted(manifest(project, r)["seed"] for r in cached) == [0, 0, 1, 1]
    computed = [r for r in new_children if r not in cached]
    assert sorted(manifest(project, r)["seed"] for r in computed) == [2, 2]
    assert all("digits-cluster" not in manifest(project, r)["cache_hits"] for r in computed)


def test_rerun_of_the_experiment_is_identical_and_dask_gives_the_same_table(project, grid, capsys):
    first = grid[0]
    capsys.readouterr()
    assert main(["rerun", first]) == 0
    assert "identical" in capsys.readouterr().out.splitlines()
    before = set(_experiment_runs(project))
    assert main(["run", "experiment", "grid", "--runner", "dask", "--refresh"]) == 0
    (dask_run,) = set(_experiment_runs(project)) - before
    assert manifest(project, dask_run)["task_runner"] == "DaskTaskRunner"
    ours, theirs = _outputs(project, first), _outputs(project, dask_run)
    for name in ("table.parquet", "summary.parquet", "table.md"):
        assert ours[name] == theirs[name], name


def test_the_grid_order_is_canonical_so_a_rerun_of_unsorted_axes_is_identical(project, grid,
                                                                              capsys):
    """Axes, and the names of a named axis, listed out of name order (``size`` before
    ``seed``, ``six`` before ``four``): the grid is taken in name order, the order a run's
    record keeps, so ``scarce rerun`` builds the same grid and is identical."""
    (project / "configs" / "experiments" / "unsorted.yaml").write_text(
        "flow: digits\nbase: configs/digits.yaml\nset: {n_init: 1}\naxes:\n"
        "  size: {six: {k: 6}, four: {k: 4}}\n  seed: [0, 1]\n"
        "table: {rows: [size], metric: ari}\n")
    before = set(_experiment_runs(project))
    assert main(["run", "experiment", "unsorted"]) == 0
    (run_id,) = set(_experiment_runs(project)) - before
    out = project / "data" / "runs" / run_id / "outputs"
    children = json.loads((out / "children.json").read_text())
    assert [c["point"] for c in children] == [
        {"seed": 0, "size": "four"}, {"seed": 0, "size": "six"},
        {"seed": 1, "size": "four"}, {"seed": 1, "size": "six"}]
    assert list(pd.read_parquet(out / "table.parquet").columns[:2]) == ["seed", "size"]
    capsys.readouterr()
    assert main(["rerun", run_id]) == 0
    assert "identical" in capsys.readouterr().out.splitlines()


def test_a_bad_grid_value_fails_its_point_and_the_others_finish(project, grid, capsys):
    before = set(_experiment_runs(project))
    assert main(["run", "experiment", "grid", "--set", "axes.k=[1, 4]"]) == 0
    (exp_run,) = set(_experiment_runs(project)) - before
    out = project / "data" / "runs" / exp_run / "outputs"
    table = pd.read_parquet(out / "table.parquet")
    failed = table[table["error"].notna()]
    assert sorted(failed["seed"]) == ["0", "1"] and set(failed["k"]) == {"1"}
    assert failed["error"].str.contains("key 'k': Input should be greater than or equal to 2"
                                        ).all()
    assert set(table[table["error"].isna()]["k"]) == {"4"}
    text = (out / "table.md").read_text()
    assert "2 point(s) failed:" in text and "k=1, seed=0" in text


def test_a_named_axis_sets_its_keys_together(project, grid, capsys):
    """``size: {four: {k: 4}, six: {k: 6, n_init: 1}}``: the same children as the k axis."""
    first = grid[0]
    (project / "configs" / "experiments" / "named.yaml").write_text(GRID.replace(
        "  k: [4, 6]\n", "  size: {four: {k: 4}, six: {k: 6, n_init: 1}}\n").replace(
        "rows: [k]", "rows: [size]"))
    assert main(["run", "experiment", "named", "--dry-run"]) == 0
    assert "4 cached (0 uncached steps)" in capsys.readouterr().out
    before = set(_experiment_runs(project))
    assert main(["run", "experiment", "named"]) == 0
    (named,) = set(_experiment_runs(project)) - before
    ours = pd.read_parquet(project / "data" / "runs" / first / "outputs" / "table.parquet")
    theirs = pd.read_parquet(project / "data" / "runs" / named / "outputs" / "table.parquet")
    assert list(theirs["size"].unique()) == ["four", "six"]
    # the axes in name order: seed, then size (the grid's k, then seed)
    theirs = theirs.sort_values(["size", "seed"], kind="stable").reset_index(drop=True)
    assert theirs.drop(columns="size").equals(ours.drop(columns="k"))
    children = json.loads((project / "data" / "runs" / named / "outputs" / "children.json"
                           ).read_text())
    assert [manifest(project, c["run_id"])["config"]["k"] for c in children] == [4, 6, 4, 6]


def test_select_across_conditions_chooses_by_mean_rank_and_refits_in_each(project, grid):
    """``select.across`` (here the seeds stand for conditions): the k whose ARI ranks best on
    average within each seed, recomputed here from the children's own metrics files; one
    refit run per condition, each with its condition's value."""
    (project / "configs" / "experiments" / "across.yaml").write_text(
        GRID + "select: {metric: ari, across: seed, criterion: mean-rank, "
        "refit: {n_init: 2}}\n")
    before = set(runs(project))
    assert main(["run", "experiment", "across"]) == 0
    (run,) = set(_experiment_runs(project)) - before
    out = project / "data" / "runs" / run / "outputs"
    ari = {}
    for c in json.loads((out / "children.json").read_text()):
        m = pd.read_parquet(project / "data" / "runs" / c["run_id"] / "metrics.parquet")
        ari[(c["point"]["k"], c["point"]["seed"])] = float(
            m.loc[m["metric"] == "ari", "value"].iloc[0])
    rank = {}
    for seed in (0, 1):
        order = sorted((4, 6), key=lambda k: -ari[(k, seed)])
        for k in (4, 6):  # two points: ties share 1.5
            rank.setdefault(k, []).append(1.5 if ari[(4, seed)] == ari[(6, seed)]
                                          else order.index(k) + 1)
    mean_rank = {k: sum(v) / 2 for k, v in rank.items()}
    mean = {k: (ari[(k, 0)] + ari[(k, 1)]) / 2 for k in (4, 6)}
    best = min((4, 6), key=lambda k: (mean_rank[k], -mean[k]))
    selection = pd.read_parquet(out / "selection.parquet")
    assert selection["mean_rank"].tolist() == pytest.approx([mean_rank[4], mean_rank[6]])
    assert selection.loc[selection["chosen"], "k"].tolist() == [str(best)]
    (decision,) = manifest(project, run)["notes"]["decisions"]
    assert decision["value"] == {"k": best} and "mean rank" in decision["why"]
    refits = [r for r in runs(project) if "refit" in (manifest(project, r).get("tags") or [])
              and r not in before]
    assert sorted((manifest(project, r)["config"]["k"], manifest(project, r)["seed"])
                  for r in refits) == [(best, 0), (best, 1)]


def test_select_chooses_on_the_points_metric_and_refits_once(project, grid, capsys):
    """``select``: the k of the best mean ARI over the seeds (computed here from the children's
    own metrics files), one more run with it and ``refit`` (n_init 2, the base seed), its
    metrics in the experiment's, the validation table and the decision recorded."""
    (project / "configs" / "experiments" / "tune.yaml").write_text(
        GRID.replace("metric: ari}", "metric: ari, also: [v_measure]}")
        + "select: {metric: ari, refit: {n_init: 2}}\n")
    assert main(["run", "experiment", "tune", "--dry-run"]) == 0
    assert "then one refit run with the values the selection chooses" in \
        capsys.readouterr().out
    before = set(_experiment_runs(project))
    every = set(runs(project))
    assert main(["run", "experiment", "tune"]) == 0
    (tune,) = set(_experiment_runs(project)) - before
    out = project / "data" / "runs" / tune / "outputs"
    means = {}
    for c in json.loads((out / "children.json").read_text()):
        m = pd.read_parquet(project / "data" / "runs" / c["run_id"] / "metrics.parquet")
        means.setdefault(c["point"]["k"], []).append(
            float(m.loc[m["metric"] == "ari", "value"].iloc[0]))
    best = max(means, key=lambda k: sum(means[k]) / len(means[k]))
    selection = pd.read_parquet(out / "selection.parquet")
    assert selection["k"].tolist() == ["4", "6"] and selection["n"].tolist() == [2, 2]
    assert selection["mean"].tolist() == pytest.approx(
        [sum(means[k]) / 2 for k in (4, 6)], abs=1e-12)
    assert selection.loc[selection["chosen"], "k"].tolist() == [str(best)]
    m = manifest(project, tune)
    (decision,) = m["notes"]["decisions"]
    assert decision["value"] == {"k": best} and "largest mean ari" in decision["why"]
    refits = [r for r in runs(project) if "refit" in (manifest(project, r).get("tags") or [])
              and r not in every]
    (refit,) = refits
    rm = manifest(project, refit)
    assert (rm["config"]["k"], rm["config"]["n_init"], rm["seed"]) == (best, 2, 0)
    metrics = pd.read_parquet(project / "data" / "runs" / tune / "metrics.parquet")
    own = pd.read_parquet(project / "data" / "runs" / refit / "metrics.parquet")
    rows = metrics[metrics["method"].str.startswith("refit ")]
    assert rows["value"].tolist() == own["value"].tolist()
    assert rows["method"].tolist() == [f"refit k={best} / {x}" for x in own["method"]]
    text = (out / "table.md").read_text()
    assert "## Selection: ari on validation (max)" in text and f"run {refit}" in text
    # table.also: v_measure's own summary, its table in table.md and its rows in the metrics
    also = pd.read_parquet(out / "summary-v_measure.parquet")
    assert also["k"].tolist() == ["4", "6"] and also["n"].tolist() == [2, 2]
    assert "## v_measure" in text
    assert {"v_measure_mean", "ari_mean"} <= set(metrics["metric"])
    assert refit in {o.get("child") for o in m["outputs"]}  # rerun compares the refit too


@pytest.mark.parametrize("args, words", [
    (["run", "experiment"], "needs the experiment's name"),
    (["run", "experiment", "nope"], "nope.yaml: config file not found"),
    (["run", "experiment", "grid", "--set", "axes.rank=[1]"], "key 'rank': --set: unknown key"),
    (["run", "experiment", "grid", "--set", "table.rows=[size]"], "neither an axis"),
    (["run", "experiment", "grid", "--set", "axes.k={four: 4}"], "'four' must map config keys"),
    (["run", "experiment", "grid", "--set", "axes.k={four: {rank: 4}}"], "key 'rank'"),
    (["run", "digits", "grid"], "go with `scarce run experiment`"),
    (["run", "experiment", "grid", "--set", "select={metric: ari, refit: {rank: 2}}"],
     "key 'rank'"),
    (["run", "experiment", "grid", "--set", "select={metric: ari, over: [size], "
      "refit: {k: 3}}"], "select.over: size is not an axis"),
])
def test_bad_experiments_exit_2_with_one_line(project, capsys, args, words):
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and words in lines[0], err[-2000:]


def test_dry_run_says_to_run_when_a_steps_code_changed(project, grid, capsys, monkeypatch):
    from tests.flows import sample_flow

    assert main(["run", "experiment", "grid", "--dry-run"]) == 0
    assert "4 cached (0 uncached steps)" in capsys.readouterr().out
    # an edit of the clustering code changes its key: no earlier run's record holds
    monkeypatch.setattr(sample_flow.cluster, "code_hash", "edited")
    assert main(["run", "experiment", "grid", "--dry-run"]) == 0
    assert "0 cached (0 uncached steps), 0 partly cached (0 uncached steps), 4 to run (every " \
        "step)" in capsys.readouterr().out


def test_dry_run_counts_the_steps_whose_entries_are_gone(project, grid, capsys):
    out = project / "data" / "runs" / grid[0] / "outputs"
    child = json.loads((out / "children.json").read_text())[0]  # k=4, seed=0
    outputs = manifest(project, child["run_id"])["outputs"]
    (cluster,) = [o["ref"] for o in outputs if o["step"] == "digits-cluster"]
    entry = Store(project / "data" / "cache").path(cluster)
    kept = entry.read_bytes()
    entry.unlink()  # as `scarce cache gc` would
    try:
        assert main(["run", "experiment", "grid", "--set", "axes.k=[1, 4]", "--dry-run"]) == 0
        assert ("1 cached (0 uncached steps), 1 partly cached (1 uncached steps), 0 to run, "
                "2 invalid") in capsys.readouterr().out
        config = load_experiment(experiment_file("grid"), ["axes.k=[1, 4]"])
        rows = plan(config, project / "data" / "runs",
                    project / "data" / "cache").set_index("point")
    finally:  # the entry back, for the tests that count on the grid being cached
        entry.write_bytes(kept)
    assert rows.loc["k=4, seed=0", ["state", "uncached steps"]].tolist() == ["partly cached", "1"]
    assert rows.loc["k=4, seed=1", ["state", "uncached steps"]].tolist() == ["cached", "0"]
    assert rows.loc["k=1, seed=0", "state"] == "invalid"
    assert "greater than or equal to 2" in rows.loc["k=1, seed=0", "error"]


def test_the_summary_of_a_metric_with_an_at_sign_is_a_plain_output_name():
    from scarce.flows.experiment import summary_file
    from scarce.flows.run_record import check_output_name

    for metric, name in (("psp@5", "summary-psp-at-5.parquet"),
                         ("v_measure", "summary-v_measure.parquet"),
                         ("a b/c", "summary-a_b_c.parquet")):
        assert summary_file(metric) == name
        check_output_name(name)
