"""RIPPER / StRip rule learning on hand-made pair data sets."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from scarce.algorithms.strip.closure import covered_pairs
from scarce.algorithms.strip.ripper import (
    RULE_COLUMNS,
    VARIANTS,
    StRip,
    description_length,
    rule_count,
    rule_coverage,
    rules_fire,
    rules_to_text,
)


def conjunctive_data(n=1200, seed=0):
    """Positive iff colour == red and size <= 3; documents of 20 pairs."""
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({
        "colour": rng.choice(["red", "green", "blue"], n),
        "size": rng.integers(0, 10, n),
        "shiny": rng.random(n) < 0.5,
    })
    y = ((X["colour"] == "red") & (X["size"] <= 3)).to_numpy().astype(np.int64)
    groups = np.arange(n) // 20
    mi = np.arange(n) % 20
    mj = mi + 100  # every pair its own two mentions: the closure adds nothing
    return X, y, groups, mi, mj


def rule_set(est):
    r = est.rules_
    return {frozenset(zip(g["feature"], g["op"], g["value"], strict=True))
            for _, g in r.groupby("rule_id")}


def test_ripper_without_closure_learns_the_target_conjunction():
    X, y, g, mi, mj = conjunctive_data()
    est = StRip(closure=False, random_state=0).fit(X, y, g, mi, mj)
    assert rule_set(est) == {frozenset({("colour", "==", "red"), ("size", "<=", "3.0")})}
    np.testing.assert_array_equal(est.predict(X), y)
    assert "R0: IF" in est.rules_text() and "DEFAULT: not coreferent" in est.rules_text()


def test_ripper_learns_a_disjunction_as_two_rules():
    X, _, g, mi, mj = conjunctive_data(seed=1)
    y = ((X["colour"] == "blue") | (X["shiny"] & (X["size"] >= 8))).to_numpy().astype(int)
    est = StRip(closure=False, random_state=0).fit(X, y, g, mi, mj)
    assert rule_set(est) == {frozenset({("colour", "==", "blue")}),
                             frozenset({("shiny", "==", "True"), ("size", ">=", "8.0")})}


def test_noisy_labels_are_not_memorised():
    X, y, g, mi, mj = conjunctive_data(n=2000, seed=2)
    y = y.copy()
    flip = np.random.default_rng(3).random(y.size) < 0.03
    y[flip] = 1 - y[flip]
    est = StRip(closure=False, random_state=0).fit(X, y, g, mi, mj)
    assert rule_set(est) == {frozenset({("colour", "==", "red"), ("size", "<=", "3.0")})}


def chain_data(n_docs=30):
    """Each document: sources a (0) and b (2), unlabelled NP u (1) between them.

    a-b corefer (labelled 1), a-u and u-b are unknown, and only they have ``bridge`` = True.
    A second labelled pair per document, a-c with c (3) another source, is negative.
    """
    rows = []
    for d in range(n_docs):
        rows += [(d, 0, 1, True, -1), (d, 1, 2, True, -1), (d, 0, 2, False, 1),
                 (d, 0, 3, False, 0), (d, 2, 3, False, 0)]
    frame = pd.DataFrame(rows, columns=["doc", "i", "j", "bridge", "y"])
    return frame[["bridge"]], frame["y"].to_numpy(), frame["doc"], frame["i"], frame["j"]


def test_partial_supervision_rewards_links_through_unlabelled_nps():
    X, y, g, mi, mj = chain_data()
    strip = StRip(closure=True, random_state=0).fit(X, y, g, mi, mj)
    assert rule_set(strip) == {frozenset({("bridge", "==", "True")})}
    # the closure of the predicted links joins the two sources
    cl = strip.cluster(X, g, mi, mj).set_index(["doc", "mention"])["cluster"]
    assert all(cl[(d, 0)] == cl[(d, 2)] != cl[(d, 3)] for d in range(30))
    # plain RIPPER sees no labelled pair covered by bridge == True
    ripper = StRip(closure=False, random_state=0).fit(X, y, g, mi, mj)
    assert ("bridge", "==", "True") not in set().union(*rule_set(ripper)) if len(
        ripper.rules_) else True
    assert not ripper.predict(X)[y == -1].any()


def test_step_methods_are_pure_functions_over_rule_tables():
    X, y, g, mi, mj = conjunctive_data(seed=4)
    est = StRip(closure=True, random_state=0)
    problem = est.prepare(X, y, g, mi, mj)
    grown, rng = est.grow(problem)
    assert list(grown.columns) == RULE_COLUMNS
    pruned = est.prune(problem, grown)
    assert not pruned["pruned"].any()
    kept = grown[~grown["pruned"]]
    assert len(pruned) <= len(kept)
    final = est.optimize(problem, pruned, rng)
    assert description_length(problem, final) <= description_length(problem, pruned) + 1e-9 \
        or len(final) > 0
    # a table round-trips through the problem encoding and fires like the estimator
    np.testing.assert_array_equal(rules_fire(final, X), (y == 1))
    # same seed, same rules
    grown_again, rng_again = est.grow(problem)
    again = est.optimize(problem, est.prune(problem, grown_again), rng_again)
    pd.testing.assert_frame_equal(final, again)
    assert rules_to_text(final).count("THEN coreferent") == final["rule_id"].nunique()
    assert rule_count(final) == final["rule_id"].nunique()
    assert rule_count(grown) == grown.loc[~grown["pruned"], "rule_id"].nunique()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_fit_is_the_loop_over_the_step_methods(variant):
    """Steps driven from outside, with grow's generator handed to optimize, give fit's rules."""
    X, y, g, mi, mj = chain_data(n_docs=12)
    X = X.assign(noise=np.random.default_rng(7).integers(0, 4, len(X)))
    fitted = StRip.from_variant(variant, k_optimize=1, random_state=3).fit(X, y, g, mi, mj)
    est = StRip.from_variant(variant, k_optimize=1, random_state=3)
    problem = est.prepare(X, y, g, mi, mj)
    grown, rng = est.grow(problem)
    pruned = est.prune(problem, grown)
    pd.testing.assert_frame_equal(grown, fitted.rules_grown_)
    pd.testing.assert_frame_equal(pruned, fitted.rules_pruned_)
    pd.testing.assert_frame_equal(est.optimize(problem, pruned, rng), fitted.rules_)
    assert (fitted.n_pairs_, fitted.n_labeled_) == (problem.n_pairs, problem.n_labeled)


def test_use_unlabeled_false_is_fitting_on_the_labelled_pairs():
    X, y, g, mi, mj = chain_data(n_docs=20)
    X = X.assign(noise=np.random.default_rng(8).integers(0, 3, len(X)))
    keep = y >= 0
    by_hand = StRip(closure=True, random_state=1).fit(
        X[keep].reset_index(drop=True), y[keep], g[keep], mi[keep], mj[keep])
    dropped = StRip(closure=True, use_unlabeled=False, random_state=1).fit(X, y, g, mi, mj)
    pd.testing.assert_frame_equal(dropped.rules_, by_hand.rules_)
    assert dropped.n_pairs_ == dropped.n_labeled_ == int(keep.sum())
    assert StRip(random_state=1).fit(X, y, g, mi, mj).n_pairs_ == y.size


def test_variants_name_the_papers_three_settings():
    assert {v: (StRip.from_variant(v).closure, StRip.from_variant(v).use_unlabeled)
            for v in VARIANTS} == {"ripper": (False, False), "strip-labeled": (True, False),
                                   "strip-partial": (True, True)}
    est = StRip.from_variant("ripper", loss_ratio=2.0, random_state=5)
    assert clone(est).get_params() == est.get_params()
    assert est.get_params()["loss_ratio"] == 2.0 and est.get_params()["k_optimize"] == 2
    with pytest.raises(ValueError, match="unknown variant 'strip'; expected one of"):
        StRip.from_variant("strip")


def test_description_length_prefers_the_true_rule():
    X, y, g, mi, mj = conjunctive_data(seed=5)
    problem = StRip(closure=False).prepare(X, y, g, mi, mj)
    true = pd.DataFrame({"rule_id": [0, 0], "antecedent_index": [0, 1],
                         "feature": ["colour", "size"], "op": ["==", "<="],
                         "value": ["red", "3.0"], "pruned": [False, False]})
    too_general = true.iloc[:1]
    empty = true.iloc[:0]
    dl_true = description_length(problem, true)
    assert dl_true < description_length(problem, too_general)
    assert dl_true < description_length(problem, empty)


def test_loss_ratio_trades_false_positives_for_false_negatives():
    rng = np.random.default_rng(6)
    n = 3000
    X = pd.DataFrame({"score": rng.integers(0, 10, n)})
    # P(coreferent) rises with score: the threshold moves up when false positives cost more
    y = (rng.random(n) < X["score"].to_numpy() / 10).astype(int)
    g, mi = np.arange(n) // 30, np.arange(n) % 30
    cheap = StRip(closure=False, loss_ratio=0.5, k_optimize=0, random_state=0).fit(
        X, y, g, mi, mi + 100)
    dear = StRip(closure=False, loss_ratio=4.0, k_optimize=0, random_state=0).fit(
        X, y, g, mi, mi + 100)
    assert cheap.predict(X).sum() > dear.predict(X).sum()


@pytest.mark.parametrize("bad, match", [
    (dict(y=np.array([2, 0, 1])), "y must hold"),
    (dict(y=np.array([1, 0])), "y must be 1-d with 3"),
])
def test_invalid_labels_are_rejected(bad, match):
    X = pd.DataFrame({"f": [True, False, True]})
    args = dict(y=np.array([1, 0, -1]))
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        StRip().fit(X, args["y"], [0, 0, 0], [0, 1, 0], [1, 2, 2])


@pytest.mark.parametrize("params, match", [
    (dict(loss_ratio=0.0), "loss_ratio must be a positive number"),
    (dict(loss_ratio=float("inf")), "loss_ratio must be a positive number"),
    (dict(max_thresholds=0), "max_thresholds must be >= 1"),
    (dict(k_optimize=-1), "k_optimize must be >= 0"),
])
def test_invalid_parameters_are_rejected_by_fit_not_init(params, match):
    X, y, g, mi, mj = conjunctive_data(n=60)
    est = StRip(**params)  # __init__ stores, fit validates
    with pytest.raises(ValueError, match=match):
        est.fit(X, y, g, mi, mj)


def test_unfitted_estimator_says_so():
    with pytest.raises(ValueError, match="not fitted"):
        StRip().predict(pd.DataFrame({"f": [1]}))


def test_rule_coverage_counts_a_hand_worked_chain():
    # One document, mentions a b c d; pairs and labels (-1: unknown, a non-source NP in it).
    #   pair  (a,b) y=1  f=1 g=0      rule 0 "f == 1" fires on (a,b), (b,c)
    #   pair  (b,c) y=-1 f=1 g=0      rule 1 "g >= 1" fires on (c,d)
    #   pair  (a,c) y=1  f=0 g=0
    #   pair  (c,d) y=0  f=0 g=1
    #   pair  (a,d) y=0  f=0 g=0
    # After rule 0 the closure joins a b c: covered labelled pairs (a,b)+ (a,c)+ -> 2 pos, 0 neg;
    # (a,c) is covered only through the unknown pair (b,c).  Rule 1 adds d to the chain: (c,d)-
    # and (a,d)- become covered -> 0 new pos, 2 new neg.
    X = pd.DataFrame({"f": ["1", "1", "0", "0", "0"], "g": [0.0, 0.0, 0.0, 1.0, 0.0]})
    y = np.array([1, -1, 1, 0, 0])
    mi = np.array(["a", "b", "a", "c", "a"])
    mj = np.array(["b", "c", "c", "d", "d"])
    rules = pd.DataFrame({"rule_id": [0, 0, 1], "antecedent_index": [0, 1, 0],
                          "feature": ["f", "g", "g"], "op": ["==", "<=", ">="],
                          "value": ["1", "0.0", "1.0"], "pruned": [False, True, False]})
    cov = rule_coverage(rules, X, y, np.zeros(5, dtype=int), mi, mj)
    assert cov["rule"].tolist() == ["f == 1", "g >= 1.0"]
    assert cov[["fires", "fires_pos", "fires_neg"]].to_numpy().tolist() == [[2, 1, 0], [1, 0, 1]]
    assert cov[["new_pos", "new_neg"]].to_numpy().tolist() == [[2, 0], [0, 2]]
    assert cov[["covered_pos", "covered_neg"]].to_numpy().tolist() == [[2, 0], [2, 2]]
    # the cumulative counts after the last rule are those of the whole rule set's chains
    covered = covered_pairs(np.zeros(5, dtype=int), mi, mj, rules_fire(rules, X))
    assert cov["covered_pos"].iloc[-1] == np.count_nonzero(covered & (y == 1))
    assert cov["covered_neg"].iloc[-1] == np.count_nonzero(covered & (y == 0))
