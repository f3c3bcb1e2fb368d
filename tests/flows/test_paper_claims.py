"""``scarce claims`` on LEML and StRip: verdicts worked out by hand on small tables and runs."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from scarce.flows.cli import main
from scarce.flows.paper_claims import experiment_claims, published_claims
from scarce.tasks.errors import InputError


def _experiment(runs, name: str, flow: str, rows: list[str], axes: dict,
                values: dict) -> str:
    """An experiment folder over ``flow`` whose table holds ``values``:
    {group values: {method: {metric: [one value per seed]}}}."""
    table = []
    for group, methods in values.items():
        for method, metrics in methods.items():
            for metric, per_seed in metrics.items():
                for seed, v in enumerate(per_seed):
                    table.append({**dict(zip(rows, group, strict=True)), "seed": str(seed),
                                  "error": None, "dataset": "d", "method": method,
                                  "metric": metric, "value": v})
    run = runs / name
    (run / "outputs").mkdir(parents=True)
    config = {"flow": flow, "axes": axes, "table": {"rows": rows, "columns": ["method"]}}
    (run / "manifest.json").write_text(json.dumps({"flow": "experiment", "outputs": [],
                                                   "config": config}))
    pd.DataFrame(table).to_parquet(run / "outputs" / "table.parquet")
    return name


def test_strip_partial_against_ripper_per_loss_ratio(tmp_path):
    name = _experiment(tmp_path, "exp-strip", "strip", ["loss_ratio"],
                       {"loss_ratio": [0.5, 1.0], "seed": [0, 1, 2]}, {
        ("0.5",): {"strip-partial": {"b3_f": [0.70, 0.72, 0.68],        # mean 0.70, sd 0.02
                                     "pairwise_f": [0.40, 0.40, 0.40]},
                   "ripper": {"b3_f": [0.60, 0.60, 0.60],               # +0.10: holds
                              "pairwise_f": [0.41, 0.39, 0.40]},        # 0.00 +- 0.01: level
                   "strip-labeled": {"b3_f": [0.9] * 3, "pairwise_f": [0.9] * 3}},
        ("1.0",): {"strip-partial": {"b3_f": [0.50, 0.50, 0.50], "pairwise_f": [0.3] * 3},
                   "ripper": {"b3_f": [0.60, 0.61, 0.59],               # -0.10: fails
                              "pairwise_f": [0.3] * 3}}})
    got = experiment_claims(tmp_path / name, "strip")
    assert [(r.group, r.metric, r.verdict) for r in got.itertuples()] == [
        ("loss_ratio 0.5", "b3_f", "holds"), ("loss_ratio 0.5", "pairwise_f", "level"),
        ("loss_ratio 1.0", "b3_f", "fails"), ("loss_ratio 1.0", "pairwise_f", "level")]
    first = got.iloc[0]
    assert (first["mean"], first["other_mean"], first["n"]) == pytest.approx((0.70, 0.60, 3))
    assert first["figure"] == "0.700 vs 0.600 (difference +0.100, spread 0.020, 3 seeds)"


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
    # the missing-label claim needs an observed_fraction axis
    other = _experiment(tmp_path, "exp-rank", "leml", ["model.rank"],
                        {"model.rank": [8], "seed": [0]},
                        {("8",): {"leml": {"precision@1": [0.5]}}})
    with pytest.raises(InputError, match="observed_fraction axis"):
        experiment_claims(tmp_path / other, "leml")


def _leml_run(runs, name: str, dataset: str, values: dict[str, float], observed=1.0) -> str:
    run = runs / name
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({
        "flow": "leml", "outputs": [],
        "config": {"dataset": {"name": dataset}, "observed_fraction": observed}}))
    rows = [("bibtex", m, metric, v) for metric, v in values.items()
            for m in ("br-ridge", "leml-squared-k100")]
    pd.DataFrame(rows, columns=["dataset", "method", "metric", "value"]).to_parquet(
        run / "metrics.parquet")
    return name


def test_a_leml_run_against_the_published_figures(tmp_path, monkeypatch, capsys):
    # published (Extreme Classification Repository) Bibtex: 62.54, 38.41, 28.21
    name = _leml_run(tmp_path, "leml-a", "bibtex",
                     {"precision@1": 0.6290, "precision@3": 0.3841, "precision@5": 0.2800})
    got = published_claims(tmp_path / name)
    assert [(r.metric, r.verdict) for r in got.itertuples()] == [
        ("precision@1", "holds"), ("precision@3", "level"), ("precision@5", "fails")]
    assert got["figure"].iloc[0] == "62.90 vs 62.54 published (difference +0.36 points)"
    for bad, words in [(_leml_run(tmp_path, "leml-b", "eurlex", {}), "for bibtex, delicious"),
                       (_leml_run(tmp_path, "leml-c", "bibtex", {}, 0.4),
                        "every label observed")]:
        with pytest.raises(InputError, match=words):
            published_claims(tmp_path / bad)
    monkeypatch.setenv("SCARCE_RUNS", str(tmp_path))
    assert main(["claims", name]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [f"run {name}:", "bibtex:",
                       "- (p) LEML reaches the published precision@1 on bibtex: **holds**, "
                       "62.90 vs 62.54 published (difference +0.36 points)"]
