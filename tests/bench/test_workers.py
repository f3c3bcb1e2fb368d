"""``scarce bench workers --quick`` on a tiny relations run and a two-point LEML sweep."""

from __future__ import annotations

import argparse
import re

import pytest

from scarce.bench import workers as bench

pytestmark = pytest.mark.usefixtures("prefect_server")


def _args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(["--quick", *extra])


def test_leml_sweep_on_one_and_two_workers_is_identical():
    table = bench.run(_args("--jobs", "leml-sweep", "--ranks", "8", "--lams", "0.3,1",
                            "--max-iter", "2", "--cg-max-iter", "5"))

    assert list(table.columns) == bench.COLUMNS
    assert list(table["job"]) == ["leml-sweep"] * 2
    assert list(table["workers"]) == [1, 2]
    assert table["identical"].dtype == bool and table["identical"].all()
    assert (table["seconds"] > 0).all() and (table["ratio"] > 0).all()
    assert table["ratio"].iloc[0] == 1  # the 1-worker run is the reference
    assert table["selection"].str.fullmatch(r"rank=8 lam=(0\.3|1) P@1=\d+\.\d\d").all()
    assert table["selection"].nunique() == 1
    p1 = float(table["selection"].iloc[0].rsplit("=", 1)[1])
    assert 5 < p1 <= 100  # far above chance (1/159) after two iterations


def test_tiny_relations_run_reports_its_choice_and_search_time():
    table = bench.run(_args(
        "--jobs", "relations", "--workers", "1", "--set", "max_pairs=120", "--set", "k_high=3",
        "--set", "n_prefixes=2", "--set", "n_subsamples=2", "--set", "n_init=1"))

    assert list(table.columns) == bench.COLUMNS
    assert list(table["job"]) == ["relations", "relations: search"]
    assert table["identical"].all() and (table["ratio"] == 1).all()
    assert (table["seconds"] > 0).all()
    assert table["seconds"].iloc[1] < table["seconds"].iloc[0]  # the search is a part
    assert re.fullmatch(r"k=[23], \d+ words", table["selection"].iloc[0])
    # 2 k x 2 prefixes candidates and 2 k x 2 subsamples stability units, read from the API
    assert table["selection"].iloc[1] == "8 task runs"


def test_relations_runs_differ_when_one_output_or_the_choice_differs():
    a = {"k": 4, "n_features": 95, "hashes": {"relations-rank/x": "aa", "metrics.parquet": "m"}}
    assert bench._same_relations(a, {**a, "hashes": dict(a["hashes"])})
    assert not bench._same_relations(a, {**a, "k": 5})
    assert not bench._same_relations(a, {**a, "n_features": 96})
    assert not bench._same_relations(a, {**a, "hashes": {**a["hashes"], "relations-rank/x": "ab"}})
    assert not bench._same_relations(a, {**a, "hashes": {"metrics.parquet": "m"}})


def test_bad_arguments_are_refused_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as exit_:  # the parser's (tests/flows/test_cli_numbers.py)
        _args("--workers", "0,2")
    assert exit_.value.code == 2 and "argument --workers" in capsys.readouterr().err
    with pytest.raises(ValueError, match="unknown"):
        bench.run(_args("--jobs", "relations,nope"))
