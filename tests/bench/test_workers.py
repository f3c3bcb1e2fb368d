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
                            "--set", "outer_iterations=2", "--set", "cg_max_iter=5"))

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
        "--jobs", "relations", "--workers", "1", "--set", "relations:max_pairs=120",
        "--set", "relations:k_high=3", "--set", "relations:n_prefixes=2",
        "--set", "relations:n_subsamples=2", "--set", "relations:n_init=1"))

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


def test_set_gives_leml_parameters_the_others_keep_the_estimators_defaults():
    from scarce.algorithms.leml import LEML

    assert bench.sweep_params([], quick=False) == {}
    assert bench.sweep_params([], quick=True) == {"outer_iterations": 4}
    params = bench.sweep_params(["cg_max_iter=5", "loss=logistic", "relations:k_high=3"],
                                quick=True)
    assert params == {"outer_iterations": 4, "cg_max_iter": 5, "loss": "logistic"}
    assert bench.sweep_params(["outer_iterations=2"], quick=True) == {"outer_iterations": 2}
    LEML(rank=2, lam=1.0, **params).check_params()  # what fit_point builds: LEML takes it
    assert set(bench.GRID) <= set(LEML().get_params())


@pytest.mark.parametrize("text, key", [
    ("nosuchkey=1", "nosuchkey"),          # not a parameter of LEML
    ("cg_max_iter=-1", "cg_max_iter"),     # out of its bounds
    ("loss=cubic", "loss"),                # not one of its choices
    ("rank=8", "rank"),                    # the grid sets it (--ranks)
    ("lam=0.5", "lam"),                    # the grid sets it (--lams)
])
def test_a_bad_set_is_one_line_naming_its_key_before_anything_runs(text, key, monkeypatch):
    from scarce.tasks.errors import InputError

    def no_server():
        raise AssertionError("a server was started before the check")

    monkeypatch.setattr("scarce.bench.overhead.warm_up", no_server)
    with pytest.raises(InputError) as error:
        bench.run(_args("--jobs", "leml-sweep", "--set", text))
    assert "\n" not in str(error.value) and key in str(error.value)


def test_a_set_for_a_job_not_run_is_refused(monkeypatch):
    from scarce.tasks.errors import InputError

    monkeypatch.setattr("scarce.bench.overhead.warm_up", lambda: pytest.fail("started"))
    with pytest.raises(InputError, match="relations job is not run"):
        bench.run(_args("--jobs", "leml-sweep", "--set", "relations:k_high=3"))
    with pytest.raises(InputError, match="leml-sweep job is not run"):
        bench.run(_args("--jobs", "relations", "--set", "cg_max_iter=3"))
