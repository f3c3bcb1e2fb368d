"""``scarce claims`` on LEML and StRip: verdicts worked out by hand on small tables and runs.

The rule: a comparison holds only when the mean over the seeds is ahead by more than the seeds'
spread (a published figure has none of its own), fails when behind by more, is level otherwise,
and one seed (one run) is never judged."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from scarce.flows.claims import ONE_RUN
from scarce.flows.cli import main
from scarce.flows.config import packaged_configs
from scarce.flows.paper_claims import (
    TUNED_BY,
    chosen_here,
    experiment_claims,
    published_claims,
    tuning,
)
from scarce.flows.published import LEML_XC
from scarce.tasks.errors import InputError

REPO = Path(__file__).resolve().parents[2]
LEML_BASE = {"dataset": {"name": "bibtex", "train": "train.txt", "test": "test.txt"}}
# The LEML settings chosen on validation rows of Bibtex: words that only that rule writes.
CHOSEN = f"settings chosen on validation rows of this corpus, by {TUNED_BY['leml']}"


def _experiment(runs, name: str, flow: str, rows: list[str], axes: dict, values: dict,
                base: dict | None = None, errors: dict | None = None) -> str:
    """An experiment folder over ``flow`` whose table holds ``values``:
    {group values: {method: {metric: [one value per seed]}}}; ``errors`` {(group values,
    seed): error} are failed points (one row each, no metric)."""
    table = []
    for group, methods in values.items():
        for method, metrics in methods.items():
            for metric, per_seed in metrics.items():
                for seed, v in enumerate(per_seed):
                    table.append({**dict(zip(rows, group, strict=True)), "seed": str(seed),
                                  "error": None, "dataset": "d", "method": method,
                                  "metric": metric, "value": v})
    for (group, seed), error in (errors or {}).items():
        table.append({**dict(zip(rows, group, strict=True)), "seed": str(seed),
                      "error": error, "dataset": None, "method": None, "metric": None,
                      "value": float("nan")})
    run = runs / name
    (run / "outputs").mkdir(parents=True)
    config = {"flow": flow, "base": f"configs/{flow}.yaml", "axes": axes, "name": name,
              "base_config": base if base is not None else
              (LEML_BASE if flow == "leml" else {"dev_splits": []}),
              "table": {"rows": rows, "columns": ["method"], "metric": "x"}}
    (run / "manifest.json").write_text(json.dumps({"flow": "experiment", "outputs": [],
                                                   "config": config}))
    pd.DataFrame(table).to_parquet(run / "outputs" / "table.parquet")
    return name


STRIP = {
    ("0.5",): {"strip-partial": {"b3_f": [0.70, 0.72, 0.68],        # mean 0.70, sd 0.02
                                 "pairwise_f": [0.40, 0.40, 0.40]},
               "ripper": {"b3_f": [0.60, 0.60, 0.60],               # +0.10: holds
                          "pairwise_f": [0.41, 0.39, 0.40]},        # 0.00 +- 0.01: level
               "strip-labeled": {"b3_f": [0.9] * 3, "pairwise_f": [0.9] * 3}},
    ("1.0",): {"strip-partial": {"b3_f": [0.50, 0.50, 0.50], "pairwise_f": [0.3] * 3},
               "ripper": {"b3_f": [0.60, 0.61, 0.59],               # -0.10: fails
                          "pairwise_f": [0.3] * 3}}}


def test_strip_partial_against_ripper_per_loss_ratio(tmp_path):
    name = _experiment(tmp_path, "exp-strip", "strip", ["loss_ratio"],
                       {"loss_ratio": [0.5, 1.0], "seed": [0, 1, 2]}, STRIP)
    got = experiment_claims(tmp_path / name, "strip")
    assert [(r.group, r.metric, r.verdict) for r in got.itertuples()] == [
        ("loss_ratio 0.5", "b3_f", "holds"), ("loss_ratio 0.5", "pairwise_f", "level"),
        ("loss_ratio 1.0", "b3_f", "fails"), ("loss_ratio 1.0", "pairwise_f", "level")]
    first = got.iloc[0]
    assert (first["mean"], first["other_mean"], first["n"]) == pytest.approx((0.70, 0.60, 3))
    assert first["figure"] == "0.700 vs 0.600 (difference +0.100, spread 0.020, 3 seeds)"


def test_strip_loss_ratios_chosen_on_dev_say_so_in_every_verdict(tmp_path):
    name = _experiment(tmp_path, "exp-strip-dev", "strip", ["window"],
                       {"window": [10], "seed": [0, 1, 2]}, {("10",): STRIP[("0.5",)]},
                       base={"dev_splits": ["dev"]})
    got = experiment_claims(tmp_path / name, "strip")
    assert got["figure"].tolist() == [
        "0.700 vs 0.600 (difference +0.100, spread 0.020, 3 seeds) (loss ratios chosen on dev "
        "documents of this corpus)",
        "0.400 vs 0.400 (difference +0.000, spread 0.010, 3 seeds) (loss ratios chosen on dev "
        "documents of this corpus)"]


def test_a_comparison_over_one_seed_is_one_run_never_holds(tmp_path):
    """+0.10 ahead with one seed (no seed axis; the other points failed): no spread to be
    beyond, so neither holds nor level."""
    one = _experiment(tmp_path, "exp-one", "strip", ["loss_ratio"], {"loss_ratio": [0.5]},
                      {("0.5",): {"strip-partial": {"b3_f": [0.70]},
                                  "ripper": {"b3_f": [0.60]}}})
    got = experiment_claims(tmp_path / one, "strip")
    assert got["verdict"].tolist() == [ONE_RUN]
    assert got["figure"].iloc[0] == "0.700 vs 0.600 (difference +0.100, spread 0.000, 1 seed)"


def test_the_repetitions_are_the_seeds_not_the_other_axes(tmp_path):
    """An axis that is not a row of the table (window) is a group of its own: its values are
    not pooled into the spread as if they were seeds."""
    name = _experiment(tmp_path, "exp-window", "strip", ["loss_ratio"],
                       {"loss_ratio": [0.5], "window": [10, 20], "seed": [0, 1]}, {})
    table = []
    for window, partial in (("10", [0.70, 0.70]), ("20", [0.50, 0.50])):
        for seed in (0, 1):
            for method, v in (("strip-partial", partial[seed]), ("ripper", 0.60)):
                table.append({"loss_ratio": "0.5", "window": window, "seed": str(seed),
                              "error": None, "dataset": "d", "method": method,
                              "metric": "b3_f", "value": v})
    pd.DataFrame(table).to_parquet(tmp_path / name / "outputs" / "table.parquet")
    got = experiment_claims(tmp_path / name, "strip")
    # pooled over window the partial mean 0.60 would be level with a spread of 0.115
    assert [(r.group, r.verdict) for r in got.itertuples()] == [
        ("loss_ratio 0.5, window 10", "holds"), ("loss_ratio 0.5, window 20", "fails")]


def test_leml_against_binary_relevance_with_labels_missing(tmp_path):
    """The table's method is LEML's family (``leml``) over the loss axis."""
    name = _experiment(tmp_path, "exp-leml", "leml", ["observed_fraction"],
                       {"observed_fraction": [0.2], "seed": [0, 1]}, {
        ("0.2",): {"leml": {"precision@1": [0.54, 0.55], "precision@3": [0.30, 0.30],
                            "precision@5": [0.22, 0.22]},
                   "br-ridge": {"precision@1": [0.56, 0.57], "precision@3": [0.30, 0.30],
                                "precision@5": [0.20, 0.20]}}})
    got = experiment_claims(tmp_path / name, "leml")
    assert [(r.metric, r.verdict) for r in got.itertuples()] == [
        ("precision@1", "fails"), ("precision@3", "level"), ("precision@5", "holds")]
    assert set(got["claim"]) == {"m"}


# Published Bibtex (Extreme Classification Repository): 62.54, 38.41, 28.21; Delicious: 65.67.
SPLITS = {
    # P@1 62.08, 62.58, 63.08: mean +0.04 above, sd 0.5 -> level; P@3 mean +1.0, sd 0.5 ->
    # holds; P@5 mean -1.0, sd 0.5 -> fails
    ("bibtex-mulan",): {"leml": {"precision@1": [0.6208, 0.6258, 0.6308],
                                 "precision@3": [0.3891, 0.3941, 0.3991],
                                 "precision@5": [0.2671, 0.2721, 0.2771]},
                        "br-ridge": {"precision@1": [0.9, 0.9, 0.9]}},  # not the claim's
    # one seed finished (the others failed): +3.33 above, and not judged
    ("delicious-xmlrepo",): {"leml": {"precision@1": [0.69]}}}
SPLIT_AXES = {"split": {"bibtex-mulan": {"dataset.name": "bibtex"},
                        "delicious-xmlrepo": {"dataset.name": "delicious"}},
              "seed": [0, 1, 2]}


def test_the_published_claim_on_an_experiment_holds_only_beyond_the_seeds_spread(tmp_path):
    name = _experiment(tmp_path, "exp-splits", "leml", ["split"], SPLIT_AXES, SPLITS,
                       errors={(("delicious-xmlrepo",), 1): "boom",
                               (("delicious-xmlrepo",), 2): "boom"})
    got = experiment_claims(tmp_path / name, "leml")
    assert [(r.group, r.dataset, r.metric, r.verdict) for r in got.itertuples()] == [
        ("split bibtex-mulan", "bibtex", "precision@1", "level"),
        ("split bibtex-mulan", "bibtex", "precision@3", "holds"),
        ("split bibtex-mulan", "bibtex", "precision@5", "fails"),
        ("split delicious-xmlrepo", "delicious", "precision@1", ONE_RUN)]
    assert got["figure"].tolist()[0] == (
        "62.58 vs 62.54 published (difference +0.04 points, spread 0.50, 3 seeds)")
    assert got[["mean", "other_mean", "n"]].iloc[1].tolist() == pytest.approx(
        [39.41, 38.41, 3])


@pytest.mark.parametrize("base, words", [
    ({"dataset": {**LEML_BASE["dataset"], "name": "eurlex"}}, "is on 'eurlex'"),
    ({**LEML_BASE, "observed_fraction": 0.4}, "every label observed"),
    ({"dataset": {**LEML_BASE["dataset"], "validation_fraction": 0.2,
                  "evaluate_on": "validation"}}, "scored on validation rows")])
def test_an_experiment_that_cannot_stand_beside_the_published_figures_is_refused(
        tmp_path, base, words):
    name = _experiment(tmp_path, "exp-rank", "leml", ["model.rank"],
                       {"model.rank": [8], "seed": [0]},
                       {("8",): {"leml": {"precision@1": [0.5]}}}, base=base)
    with pytest.raises(InputError, match=words):
        experiment_claims(tmp_path / name, "leml")


def _leml_run(runs, name: str, dataset: str, values: dict[str, float], evaluate_on="test",
              **config) -> str:
    run = runs / name
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({
        "flow": "leml", "outputs": [],
        "config": {"dataset": {"name": dataset, "evaluate_on": evaluate_on},
                   "observed_fraction": 1.0, **config}}))
    rows = [("bibtex", m, metric, v) for metric, v in values.items()
            for m in ("br-ridge", "leml-squared-k100")]
    pd.DataFrame(rows, columns=["dataset", "method", "metric", "value"]).to_parquet(
        run / "metrics.parquet")
    return name


def test_one_leml_run_is_shown_beside_the_published_figures_and_not_judged(
        tmp_path, monkeypatch, capsys):
    # published Bibtex: 62.54, 38.41, 28.21: +0.36, 0, +10 points; none holds on one run
    name = _leml_run(tmp_path, "leml-a", "bibtex",
                     {"precision@1": 0.6290, "precision@3": 0.3841, "precision@5": 0.3821})
    got = published_claims(tmp_path / name)
    assert got["verdict"].tolist() == [ONE_RUN] * 3
    assert got["figure"].iloc[0] == (
        "62.90 vs 62.54 published (difference +0.36 points; one run has no seed spread: "
        "`scarce run experiment leml-splits` judges it over seeds)")
    for bad, words in [(_leml_run(tmp_path, "leml-b", "eurlex", {}), "for bibtex, delicious"),
                       (_leml_run(tmp_path, "leml-c", "bibtex", {}, observed_fraction=0.4),
                        "every label observed"),
                       (_leml_run(tmp_path, "leml-d", "bibtex", {}, evaluate_on="validation"),
                        "scored on validation rows")]:
        with pytest.raises(InputError, match=words):
            published_claims(tmp_path / bad)
    monkeypatch.setenv("SCARCE_RUNS", str(tmp_path))
    assert main(["claims", name]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [f"run {name}:", "bibtex:",
                       "- (p) LEML reaches the published precision@1 of bibtex: **one run**, "
                       "62.90 vs 62.54 published (difference +0.36 points; one run has no "
                       "seed spread: `scarce run experiment leml-splits` judges it over seeds)"]


def test_the_command_prints_the_split_verdicts(tmp_path, monkeypatch, capsys):
    name = _experiment(tmp_path, "exp-splits", "leml", ["split"], SPLIT_AXES,
                       {("bibtex-mulan",): SPLITS[("bibtex-mulan",)]})
    monkeypatch.setenv("SCARCE_RUNS", str(tmp_path))
    assert main(["claims", name]) == 0
    assert capsys.readouterr().out.splitlines()[:3] == [
        f"run {name}:", "split bibtex-mulan:",
        "- (p) LEML reaches the published precision@1 of bibtex: **level**, 62.58 vs 62.54 "
        "published (difference +0.04 points, spread 0.50, 3 seeds)"]


# -- settings chosen on the corpus the claim is judged on -------------------------------

TUNE = """\
flow: leml
base: configs/leml.yaml
set: {dataset.validation_fraction: 0.2, dataset.evaluate_on: validation}
axes:
  model.rank: [7, 9]
  model.lam: [1.0, 2.0]
  corpus:
    bib: {dataset.name: bibtex}
    eur: {dataset.name: eurlex, dataset.train: e.txt, dataset.test: e.txt}
  seed: [0, 1]
table: {rows: [model.rank], metric: precision@1}
select: {metric: precision@1, across: corpus, refit: {dataset.evaluate_on: test}}
"""


@pytest.fixture
def tuned_package(tmp_path):
    """A package whose tuning experiment chose rank and lam (bundled: 7 and 2.0) on the
    validation rows of Bibtex and of Eurlex."""
    configs = tmp_path / "pkg" / "configs"
    (configs / "experiments").mkdir(parents=True)
    (configs / "leml.yaml").write_text(yaml.safe_dump({
        **LEML_BASE, "model": {"rank": 7, "lam": 2.0, "outer_iterations": 4}}))
    (configs / "experiments" / f"{TUNED_BY['leml']}.yaml").write_text(TUNE)
    return configs


def test_the_tuning_experiment_names_the_settings_and_the_corpora(tuned_package):
    assert tuning("leml", tuned_package) == ({"model.lam": 2.0, "model.rank": 7},
                                             {"bibtex", "eurlex"})
    assert tuning("strip") == ({}, set())


@pytest.mark.parametrize("change, said", [
    ({}, True),                                                  # bundled, a tuned corpus
    ({"dataset": {"name": "eurlex"}}, True),                     # the other tuned corpus
    ({"dataset": {"name": "delicious"}}, False),                 # not a tuned corpus
    ({"model": {"rank": 9, "lam": 2.0, "outer_iterations": 4}}, False),   # another rank
    ({"model": {"rank": 7, "lam": 1.0, "outer_iterations": 4}}, False),   # another lam
    ({"model": {"rank": 7, "lam": 2.0, "outer_iterations": 9}}, True)])   # not a tuned key
def test_leml_settings_are_said_chosen_here_when_tuned_values_on_a_tuned_corpus(
        tuned_package, change, said):
    config = {"dataset": {"name": "bibtex"}, "model": {"rank": 7, "lam": 2.0,
                                                       "outer_iterations": 4}, **change}
    note = chosen_here("leml", config, tuning("leml", tuned_package))
    assert note == (CHOSEN if said else None)


@pytest.mark.parametrize("flow", sorted(TUNED_BY))
def test_the_packaged_settings_are_said_chosen_on_each_tuned_corpus_until_one_changes(flow):
    """The package's own tuning experiment and config: every corpus it tuned on says so for
    the bundled values, and a change of any one tuned setting takes the words away."""
    from scarce.flows.registry import FLOWS

    bundled, corpora = tuning(flow)
    assert bundled and corpora
    assert set(bundled) <= {*_dotted_keys(yaml.safe_load(
        (packaged_configs() / "experiments" / f"{TUNED_BY[flow]}.yaml").read_text())["axes"])}
    config = FLOWS[flow].load_model().model_validate(
        yaml.safe_load((packaged_configs() / f"{flow}.yaml").read_text())).model_dump(
        mode="json")
    for corpus in corpora:
        config["dataset"]["name"] = corpus
        assert chosen_here(flow, config) is not None
    for key, value in bundled.items():
        changed = json.loads(json.dumps(config))
        *path, last = key.split(".")
        section = changed
        for part in path:
            section = section[part]
        section[last] = value * 2 if isinstance(value, int | float) else f"{value}x"
        assert chosen_here(flow, changed) is None, key


def _dotted_keys(axes: dict) -> list[str]:
    return [k for axis, values in axes.items()
            for k in (values[next(iter(values))] if isinstance(values, dict) else [axis])]


def test_strip_loss_ratios_chosen_on_dev_are_said_chosen_here():
    assert chosen_here("strip", {"dev_splits": ["dev"]}) == (
        "loss ratios chosen on dev documents of this corpus")
    assert chosen_here("strip", {"dev_splits": []}) is None


def test_a_published_claim_with_the_bundled_settings_says_where_they_were_chosen(tmp_path):
    """A run and an experiment with the package's LEML config on Bibtex (a corpus the bundled
    settings were tuned on): each verdict's figure ends with the words; with lam changed,
    none does."""
    config = yaml.safe_load((packaged_configs() / "leml.yaml").read_text())
    assert "bibtex" in tuning("leml")[1]
    run = _leml_run(tmp_path, "leml-bundled", "bibtex", {"precision@1": 0.63},
                    model=config["model"])
    assert published_claims(tmp_path / run)["figure"].iloc[0].endswith(f"seeds) ({CHOSEN})")
    other = _leml_run(tmp_path, "leml-other", "bibtex", {"precision@1": 0.63},
                      model={**config["model"], "lam": config["model"]["lam"] * 2})
    assert CHOSEN not in published_claims(tmp_path / other)["figure"].iloc[0]
    for name, model, said in (("bundled", config["model"], True),
                              ("other", {**config["model"], "lam": 99.0}, False)):
        exp = _experiment(tmp_path, f"exp-{name}", "leml", ["split"], SPLIT_AXES,
                          {("bibtex-mulan",): SPLITS[("bibtex-mulan",)]},
                          base={**config, "model": model})
        figures = experiment_claims(tmp_path / exp, "leml")["figure"].tolist()
        assert len(figures) == 3
        assert all(f.endswith(f"seeds) ({CHOSEN})") for f in figures) is said


# -- the bundled experiment ----------------------------------------------------------------

def test_leml_splits_runs_the_four_public_splits_of_the_published_sets_over_seeds():
    """``leml-splits``: each of the four splits names a data set with published figures and
    that set's shipped train and test files (``data/xmc/<set>/<set>_<split>_<part>``), over
    three seeds, with LEML's P@1, P@3 and P@5 in its tables."""
    from scarce.flows.experiment import grid, load_experiment, point_config

    config = load_experiment(REPO / "configs" / "experiments" / "leml-splits.yaml")
    assert sorted(config.axes["split"]) == ["bibtex-mulan", "bibtex-xmlrepo",
                                            "delicious-mulan", "delicious-xmlrepo"]
    assert config.axes["seed"] == [0, 1, 2]
    assert "observed_fraction" not in config.axes  # claim (p), not (m)
    assert {config.table.metric, *config.table.also} == {"precision@1", "precision@3",
                                                        "precision@5"}
    seen = set()
    for point in grid(config):
        child = point_config(config, point)
        name, split = child.dataset.name, point["split"].split("-")[1]
        assert name in LEML_XC and point["split"].startswith(name)
        assert child.observed_fraction == 1.0 and child.dataset.evaluate_on == "test"
        assert "br-ridge" in child.baselines
        for part in ("train", "test"):
            path = getattr(child.dataset, part)
            assert path == f"data/xmc/{name}/{name}_{split}_{part}.txt.gz"
            assert (REPO / path).is_file(), path
        seen.add((point["split"], point["seed"]))
    assert len(seen) == 12


def test_scarce_claims_on_a_run_of_a_splits_experiment_equals_the_childrens_metrics(
        tmp_path, prefect_server, monkeypatch, capsys):
    """Through Prefect: the bundled ``leml-splits`` on two of its splits cut to a few hundred
    rows (the Bibtex sample of ``test_leml_flow.py``, the bundled Delicious test sample), a
    tiny LEML, two seeds; then ``scarce claims`` of the experiment.  Each verdict line equals
    the one worked out here from the children's own metrics files: the mean of P@k (in %) over
    the two seeds against the published figure, beyond their standard deviation or not."""
    import gzip
    import statistics

    from tests.flows.helpers import manifest, runs
    from tests.flows.test_leml_flow import BIBTEX, CONFIG, _head

    monkeypatch.setenv("SCARCE_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for var in ("SCARCE_STORE", "SCARCE_RUNS"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "configs" / "experiments").mkdir(parents=True)
    (tmp_path / "configs" / "leml.yaml").write_text(CONFIG)
    _head(BIBTEX / "bibtex_xmlrepo_train.txt.gz", tmp_path / "bib-train.txt", 300)
    _head(BIBTEX / "bibtex_xmlrepo_test.txt.gz", tmp_path / "bib-test.txt", 60)
    delicious = REPO / "tests" / "data" / "delicious"
    for part in ("train", "test"):
        with gzip.open(tmp_path / f"del-{part}.txt.gz", "wb") as fh:
            fh.write((delicious / f"delicious.{part}.txt").read_bytes())
    bundled = yaml.safe_load((REPO / "configs" / "experiments" / "leml-splits.yaml").read_text())
    splits = bundled["axes"]["split"]
    bundled["axes"] = {"seed": [0, 1], "split": {
        "bibtex-xmlrepo": {**splits["bibtex-xmlrepo"], "dataset.train": "bib-train.txt",
                           "dataset.test": "bib-test.txt"},
        "delicious-xmlrepo": {**splits["delicious-xmlrepo"],
                              "dataset.train": "del-train.txt.gz",
                              "dataset.test": "del-test.txt.gz"}}}
    (tmp_path / "configs" / "experiments" / "splits.yaml").write_text(yaml.safe_dump(bundled))
    assert main(["run", "experiment", "splits"]) == 0
    (run,) = [r for r in runs(tmp_path) if manifest(tmp_path, r)["flow"] == "experiment"]
    capsys.readouterr()

    values: dict[tuple[str, str], list[float]] = {}
    children = json.loads((tmp_path / "data" / "runs" / run / "outputs" / "children.json")
                          .read_text())
    for child in children:
        metrics = pd.read_parquet(tmp_path / "data" / "runs" / child["run_id"] /
                                  "metrics.parquet")
        for r in metrics[metrics["method"].str.startswith("leml-")].itertuples():
            values.setdefault((child["point"]["split"], r.metric), []).append(100 * r.value)
    expected = []
    for split in ("bibtex-xmlrepo", "delicious-xmlrepo"):
        dataset = split.split("-")[0]
        expected.append(f"split {split}:")
        for metric, published in LEML_XC[dataset].items():
            seeds = values[(split, metric)]
            assert len(seeds) == 2
            mean, sd = statistics.mean(seeds), statistics.stdev(seeds)
            diff = mean - published
            word = "holds" if diff > sd else "fails" if diff < -sd else "level"
            expected.append(f"- (p) LEML reaches the published {metric} of {dataset}: "
                            f"**{word}**, {mean:.2f} vs {published:.2f} published (difference "
                            f"{diff:+.2f} points, spread {sd:.2f}, 2 seeds)")
        expected.append("")
    assert main(["claims", run]) == 0
    assert capsys.readouterr().out.splitlines() == [f"run {run}:", *expected[:-1]]
