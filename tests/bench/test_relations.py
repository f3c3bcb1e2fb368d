"""``scarce bench relations`` in quick mode on a small sample of the bundled SemEval files."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from scarce.bench import relations as bench
from scarce.tasks.errors import InputError

DATA = Path(__file__).resolve().parents[2] / "data"


def _args(*extra: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return parser.parse_args(["--data", str(DATA), "--quick", *extra])


@pytest.fixture(scope="module")
def table():
    return bench.run(_args("--max-pairs", "400", "--k-low", "7", "--k-high", "10",
                           "--speed-pairs", "40"))


def test_table_has_every_method_of_the_main_window(table):
    assert list(table.columns) == bench.COLUMNS
    methods = set(table["method"])
    assert {"hasegawa", "kmeans-true-k", "rl-baseline", "frequency", "chi2", "entropy",
            "entropy-ranking speed-up"} <= methods
    assert set(table["window"]) == {"0-10-0"}
    # quick mode: two seeds of the entropy method on the main window
    assert sorted(table.loc[table["method"] == "entropy", "seed"]) == [0, 1]


def test_scores_and_chosen_k_are_in_range(table):
    scored = table[table["method"] != "entropy-ranking speed-up"]
    assert (scored["k_true"] == 9).all()
    for col in ("accuracy", "v_measure"):
        assert scored[col].between(0, 1).all()
    # mapped accuracy is at least the largest gold class share over k clusters: > 1/9
    assert (scored["accuracy"] > 1 / 9).all()
    searched = scored[scored["method"].isin(["rl-baseline", "frequency", "chi2", "entropy"])]
    assert searched["k"].between(7, 10).all()
    fixed = scored[scored["method"].isin(["hasegawa", "kmeans-true-k"])]
    assert (fixed["k"] == 9).all()


def test_fast_ranking_equals_naive_and_the_speed_up_is_reported(table):
    # The speed-up is a measurement for the table, not a claim a loaded machine can check.
    row = table[table["method"] == "entropy-ranking speed-up"].iloc[0]
    assert bool(row["same_ranking"])
    assert np.isfinite(row["speedup"]) and row["speedup"] > 0


def test_missing_data_is_an_input_error(tmp_path):
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    with pytest.raises(InputError, match="not found"):
        bench.run(parser.parse_args(["--data", str(tmp_path), "--quick"]))


def test_settings_keep_the_documented_pairs_and_gold_types():
    # TRAIN_TEST_DISTRIB.TXT: 10,717 pairs, 1,864 of them Other
    nine = bench.load_mentions(DATA, None, 0, "nine")
    other = bench.load_mentions(DATA, None, 0, "other")
    directed = bench.load_mentions(DATA, None, 0, "directed")
    both = bench.load_mentions(DATA, None, 0, "directed-other")
    assert (len(nine), len(other), len(directed), len(both)) == (8853, 10717, 8853, 10717)
    assert nine["gold"].nunique() == 9 and "Other" not in set(nine["gold"])
    assert other["gold"].nunique() == 10 and (other["gold"] == "Other").sum() == 1864
    assert directed["gold"].nunique() == 18 and both["gold"].nunique() == 19
    # a directed label is the undirected type plus its argument order
    assert directed["gold"].str.replace(r"\(e[12],e[12]\)$", "", regex=True).equals(nine["gold"])
    assert set(directed["gold"].str[-7:]) == {"(e1,e2)", "(e2,e1)"}


def test_true_k_outside_the_k_range_is_an_input_error():
    with pytest.raises(InputError, match="true k of setting 'directed' is 18"):
        bench.run(_args("--setting", "directed"))  # --quick: K in [2, 12]


def test_method_options_are_the_estimators_parameters_with_its_defaults():
    from scarce.algorithms.relations.model import RelationDiscovery

    args = _args()
    defaults = RelationDiscovery().get_params()
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    plain = parser.parse_args([])
    for name in bench.METHOD_OPTIONS:
        expected = bench.MIN_PREFIX if name == "min_prefix" else defaults[name]
        assert getattr(plain, name) == expected, name
    model = bench.estimator(args, 3, "chi2")
    assert model.get_params() == {**defaults, **{n: getattr(args, n) for n in
                                                 bench.METHOD_OPTIONS},
                                  "ranking": "chi2", "random_state": 3}
