"""The experiment's table steps on a hand-worked grid."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scarce.tasks.experiment import as_metrics, gather, summarise, wide


def _metrics(values: dict[str, float]) -> pd.DataFrame:
    return pd.DataFrame({"dataset": "d", "method": list(values), "metric": "acc",
                         "value": list(values.values())})


def test_gather_summarise_and_wide_on_a_two_by_two_grid_with_a_failed_point():
    points = [{"w": "a", "seed": 0}, {"w": "a", "seed": 1}, {"w": "b", "seed": 0},
              {"w": "b", "seed": 1}]
    errors = [None, None, None, "key 'w': bad"]
    tables = [_metrics({"m": 0.5, "n": 0.1}), _metrics({"m": 0.7, "n": 0.3}),
              _metrics({"m": 0.4, "n": 0.2})]
    table = gather(tables, name="g", axes=["w", "seed"], points=points, errors=errors)
    assert list(table.columns) == ["w", "seed", "error", "dataset", "method", "metric", "value"]
    assert len(table) == 2 + 2 + 2 + 1
    failed = table[table["error"].notna()]
    assert failed[["w", "seed"]].values.tolist() == [["b", "1"]] and math.isnan(
        failed["value"].iloc[0])

    summary = summarise(table, rows=["w"], columns=["method"], metric="acc")
    got = {(r.w, r.method): (r.mean, r.std, r.n) for r in summary.itertuples()}
    # by hand: a/m: 0.5, 0.7 -> mean 0.6, sample std 0.1414; b/m: 0.4 alone -> std 0
    assert np.allclose(got[("a", "m")], (0.6, math.sqrt(0.02), 2))
    assert np.allclose(got[("a", "n")], (0.2, math.sqrt(0.02), 2))
    assert np.allclose(got[("b", "m")], (0.4, 0.0, 1))
    assert np.allclose(got[("b", "n")], (0.2, 0.0, 1))

    shown = wide(summary, ["w"], ["method"])
    assert shown.to_dict("records") == [{"w": "a", "m": "0.600 ± 0.141", "n": "0.200 ± 0.141"},
                                        {"w": "b", "m": "0.400", "n": "0.200"}]
    metrics = as_metrics(summary, name="g", rows=["w"], columns=["method"], metric="acc")
    assert metrics[metrics["metric"] == "acc_mean"].set_index("method")["value"].to_dict() == {
        "a / m": summary["mean"].iloc[0], "a / n": summary["mean"].iloc[1],
        "b / m": 0.4, "b / n": summary["mean"].iloc[3]}


def test_a_combination_no_run_made_is_an_emptycell():
    summary = pd.DataFrame({"w": ["a", "a", "b"], "method": ["m", "n", "m"],
                            "mean": [0.5, 0.6, 0.7], "std": [0.0, 0.0, 0.0], "n": [1, 1, 1]})
    assert wide(summary, ["w"], ["method"]).to_dict("records")[1] == {
        "w": "b", "m": "0.700", "n": ""}


def test_a_method_family_makes_one_column_across_the_settings_its_names_hold():
    """LEML's names hold the loss and the rank (``leml-squared-k100``): over a loss axis the
    table's ``method`` is one column, ``leml``, beside the baseline, not one per loss with
    the other loss's cells empty."""
    from scarce.flows.registry import FLOWS

    points = [{"model.loss": "squared"}, {"model.loss": "logistic"}]
    tables = [_metrics({"leml-squared-k100": 0.5, "br-ridge": 0.6}),
              _metrics({"leml-logistic-k100": 0.4, "br-ridge": 0.6})]
    family = FLOWS["leml"].method_family
    table = gather(tables, name="g", axes=["model.loss"], points=points, errors=[None, None],
                   family=family)
    assert table["method"].tolist() == ["leml", "br-ridge", "leml", "br-ridge"]
    assert table["method_name"].tolist() == ["leml-squared-k100", "br-ridge",
                                             "leml-logistic-k100", "br-ridge"]
    shown = wide(summarise(table, rows=["model.loss"], columns=["method"], metric="acc"),
                 ["model.loss"], ["method"])
    assert shown.to_dict("records") == [
        {"model.loss": "squared", "leml": "0.500", "br-ridge": "0.600"},
        {"model.loss": "logistic", "leml": "0.400", "br-ridge": "0.600"}]
    # without it, the diagonal table the names give
    plain = gather(tables, name="g", axes=["model.loss"], points=points, errors=[None, None])
    assert wide(summarise(plain, rows=["model.loss"], columns=["method"], metric="acc"),
                ["model.loss"], ["method"]).loc[0, "leml-logistic-k100"] == ""


def _validation_table(values: dict[tuple[str, str], float | None]) -> pd.DataFrame:
    """A long table of a grid lam x condition (one seed): P@1 per point, None a failed point."""
    rows = []
    for (lam, cond), v in values.items():
        rows.append({"lam": lam, "cond": cond, "seed": "0", "method": "leml",
                     "metric": "precision@1", "value": math.nan if v is None else v,
                     "error": "boom" if v is None else None})
    return pd.DataFrame(rows)


def test_select_across_conditions_by_mean_rank_by_hand():
    """Worked by hand: in A the order is 1 > 3 > 0.3, in B 3 > 1 > 0.3, in C 3 > 0.3 > 1.
    Mean ranks: 0.3 -> (3 + 3 + 2) / 3 = 2.667, 1 -> (1 + 2 + 3) / 3 = 2, 3 -> (2 + 1 + 1) / 3
    = 1.333: lam 3, although lam 1 has the largest single P@1 and the largest mean."""
    from scarce.tasks.experiment import select_point

    table = _validation_table({
        ("0.3", "A"): 0.50, ("1", "A"): 0.90, ("3", "A"): 0.60,
        ("0.3", "B"): 0.40, ("1", "B"): 0.50, ("3", "B"): 0.55,
        ("0.3", "C"): 0.45, ("1", "C"): 0.44, ("3", "C"): 0.46})
    out = select_point.fn(table, "precision@1", "max", ["lam"], across="cond",
                          criterion="mean-rank")
    assert out["lam"].tolist() == ["0.3", "1", "3"]
    np.testing.assert_allclose(out["mean_rank"], [8 / 3, 2.0, 4 / 3])
    np.testing.assert_allclose(out["mean"], [0.45, (0.90 + 0.50 + 0.44) / 3, 1.61 / 3])
    assert out.loc[out["chosen"], "lam"].tolist() == ["3"]
    assert out["cond=B"].tolist() == [0.40, 0.50, 0.55]
    by_mean = select_point.fn(table, "precision@1", "max", ["lam"], across="cond",
                              criterion="mean")
    assert by_mean.loc[by_mean["chosen"], "lam"].tolist() == ["1"]


def test_select_across_ties_share_their_rank_and_a_point_failed_anywhere_is_not_chosen():
    from scarce.tasks.experiment import select_point

    table = _validation_table({
        ("0.3", "A"): 0.70, ("1", "A"): 0.70, ("3", "A"): 0.99,
        ("0.3", "B"): 0.60, ("1", "B"): 0.50, ("3", "B"): None})
    out = select_point.fn(table, "precision@1", "max", ["lam"], across="cond",
                          criterion="mean-rank")
    # A: 3 first, 0.3 and 1 share ranks 2 and 3 (2.5 each); B: 0.3 then 1 (3 failed there)
    np.testing.assert_allclose(out.set_index("lam").loc[["0.3", "1"], "mean_rank"],
                               [(2.5 + 1) / 2, (2.5 + 2) / 2])
    assert out.loc[out["chosen"], "lam"].tolist() == ["0.3"]  # not 3, the best in A
