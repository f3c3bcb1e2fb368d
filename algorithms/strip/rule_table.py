"""StRip's rule tables: the DataFrame a rule set is stored as, read, fired on pairs and described.

A rule table has one row per antecedent, ``rule_id, antecedent_index, feature, op, value,
pruned`` (:data:`RULE_COLUMNS`): the rules in order, each the conjunction of its rows that are
not ``pruned`` (antecedents that pruning removed are kept to show what was grown).  The learner
(:mod:`scarce.algorithms.strip.ripper`) writes one after every phase; a pipeline stores it, and
applying a model needs only the table and the pairs' features (:func:`rules_fire`), never the
learner.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from scarce.algorithms.strip.closure import PairGraph
from scarce.algorithms.strip.problem import RuleProblem

__all__ = [
    "RULE_COLUMNS", "RULE_COVERAGE_COLUMNS", "OPS", "check_table", "kept", "to_frame",
    "from_frame", "rules_fire", "rule_coverage", "rule_count", "rules_to_text",
]

RULE_COLUMNS = ["rule_id", "antecedent_index", "feature", "op", "value", "pruned"]
RULE_COVERAGE_COLUMNS = ["rule_id", "rule", "fires", "fires_pos", "fires_neg", "new_pos",
                         "new_neg", "covered_pos", "covered_neg"]
OPS = ("==", "<=", ">=")


def _cond_text(problem, cond) -> tuple[str, str, str]:
    f, op, val = cond
    if op == "==":
        return problem.names[f], op, str(problem.categories[f][val])
    return problem.names[f], op, repr(float(val))


def to_frame(problem: RuleProblem, rules, pruned_tails=None) -> pd.DataFrame:
    """The rule table of ``rules`` (lists of conditions of ``problem``), each rule followed by
    its pruned tail (``pruned_tails[k]`` for rule ``k``, marked ``pruned``) when given."""
    rows = []
    for rid, rule in enumerate(rules):
        tail = [] if pruned_tails is None else pruned_tails[rid]
        for a, cond in enumerate(list(rule) + list(tail)):
            feat, op, val = _cond_text(problem, cond)
            rows.append((rid, a, feat, op, val, a >= len(rule)))
    frame = pd.DataFrame(rows, columns=RULE_COLUMNS)
    return frame.astype({"rule_id": np.int64, "antecedent_index": np.int64, "feature": object,
                         "op": object, "value": object, "pruned": bool})


def check_table(rules: pd.DataFrame) -> pd.DataFrame:
    """``rules`` unchanged when it is a rule table (its columns and operators), else
    ``ValueError``."""
    if not isinstance(rules, pd.DataFrame):
        raise ValueError(f"rules must be a DataFrame with columns {RULE_COLUMNS}; got "
                         f"{type(rules).__name__}")
    missing = [c for c in RULE_COLUMNS[:5] if c not in rules.columns]
    if missing:
        raise ValueError(f"rule table lacks columns {missing}; expected {RULE_COLUMNS}")
    bad = set(rules["op"]) - set(OPS)
    if bad:
        raise ValueError(f"unknown ops {sorted(bad)} in rule table; expected one of {OPS}")
    return rules


def kept(rules: pd.DataFrame) -> pd.DataFrame:
    """The rows of a (checked) rule table that the rules use: ``pruned`` rows left out."""
    rules = check_table(rules)
    if "pruned" in rules.columns:
        rules = rules[~rules["pruned"].astype(bool)]
    return rules


def from_frame(problem: RuleProblem, rules: pd.DataFrame):
    """The rules of a table as lists of conditions of ``problem`` (pruned rows left out); a
    category the problem does not hold becomes code -1, which no pair has."""
    rules = kept(rules)
    index = {n: k for k, n in enumerate(problem.names)}
    out = []
    for _, grp in rules.sort_values(["rule_id", "antecedent_index"]).groupby("rule_id",
                                                                             sort=True):
        rule = []
        for feat, op, val in zip(grp["feature"], grp["op"], grp["value"], strict=True):
            if feat not in index:
                raise ValueError(f"rule uses feature '{feat}' absent from X (features: "
                                 f"{problem.names[:8]}...)")
            f = index[feat]
            if op == "==":
                if not problem.nominal[f]:
                    raise ValueError(f"'{feat} == {val}' on a numeric feature")
                hits = np.flatnonzero(problem.categories[f] == str(val))
                rule.append((f, op, int(hits[0]) if hits.size else -1))
            else:
                if problem.nominal[f]:
                    raise ValueError(f"'{feat} {op} {val}' on a nominal feature")
                rule.append((f, op, float(val)))
        if rule:
            out.append(rule)
    return out


def rules_fire(rules: pd.DataFrame, X: pd.DataFrame) -> np.ndarray:
    """Pairs (rows of ``X``) on which at least one rule of the table fires (no closure).

    Parameters
    ----------
    rules : DataFrame
        Rule table (rows with ``pruned=True`` are ignored).
    X : DataFrame
        Pair features with the columns the rules name.

    Returns
    -------
    ndarray of bool, shape (len(X),)
    """
    out = np.zeros(len(X), dtype=bool)
    for _, _, fired in _rule_masks(rules, X):
        out |= fired
    return out


def _antecedents(grp: pd.DataFrame) -> str:
    """One rule's antecedents (its rows of a rule table) as ``a AND b``."""
    return " AND ".join(f"{f} {o} {v}" for f, o, v in
                        zip(grp["feature"], grp["op"], grp["value"], strict=True))


def _rule_masks(rules: pd.DataFrame, X: pd.DataFrame) -> list[tuple[int, str, np.ndarray]]:
    """(rule id, text, mask of the rows of ``X`` the rule fires on) per rule, in rule order."""
    rules = kept(rules)
    out = []
    for rid, grp in rules.sort_values(["rule_id", "antecedent_index"]).groupby("rule_id",
                                                                             sort=True):
        m = np.ones(len(X), dtype=bool)
        for feat, op, val in zip(grp["feature"], grp["op"], grp["value"], strict=True):
            if feat not in X.columns:
                raise ValueError(f"rule uses feature '{feat}' absent from X")
            col = X[feat]
            if op == "==":
                m &= (col.astype(str) == str(val)).to_numpy()
            elif op == "<=":
                m &= (col.to_numpy(dtype=np.float64) <= float(val))
            else:
                m &= (col.to_numpy(dtype=np.float64) >= float(val))
        out.append((int(rid), _antecedents(grp), m))
    return out


def rule_coverage(rules: pd.DataFrame, X: pd.DataFrame, y, groups, mention_i,
                  mention_j) -> pd.DataFrame:
    """What each rule of an ordered rule set covers on labelled pairs, alone and after closure.

    For rule ``r`` (in order), with ``y`` in {1, 0, -1 = unknown}:

    * ``fires``: pairs the rule fires on (any label); ``fires_pos`` / ``fires_neg``: the
      labelled coreferent / non-coreferent ones among them;
    * ``new_pos`` / ``new_neg``: labelled pairs covered by rules ``0..r`` after the transitive
      closure within each document (the clustering of the rule set's decisions) and not by rules
      ``0..r-1``: what adding the rule brings to the chains, links through unknown pairs included;
    * ``covered_pos`` / ``covered_neg``: the cumulative counts after rule ``r``.

    Returns
    -------
    DataFrame
        One row per rule: ``rule_id, rule, fires, fires_pos, fires_neg, new_pos, new_neg,
        covered_pos, covered_neg``; the text of a rule is its antecedents joined by ``AND``.
    """
    y = np.asarray(y)
    if y.shape != (len(X),):
        raise ValueError(f"y must have one label per row of X ({len(X)}); got shape {y.shape}")
    graph = PairGraph(groups, mention_i, mention_j, closure=True)
    pos, neg = y == 1, y == 0
    positive = np.zeros(len(X), dtype=bool)
    before = np.zeros(len(X), dtype=bool)
    rows = []
    for rid, text, fired in _rule_masks(rules, X):
        positive |= fired
        covered = graph.covered(positive)
        new = covered & ~before
        rows.append({
            "rule_id": rid, "rule": text, "fires": int(fired.sum()),
            "fires_pos": int((fired & pos).sum()), "fires_neg": int((fired & neg).sum()),
            "new_pos": int((new & pos).sum()), "new_neg": int((new & neg).sum()),
            "covered_pos": int((covered & pos).sum()), "covered_neg": int((covered & neg).sum()),
        })
        before = covered
    return pd.DataFrame(rows, columns=RULE_COVERAGE_COLUMNS).astype(
        {c: np.int64 for c in RULE_COVERAGE_COLUMNS if c != "rule"})


def rule_count(rules: pd.DataFrame) -> int:
    """Rules in a rule table (rows with ``pruned=True`` are ignored)."""
    return int(kept(rules)["rule_id"].nunique())


def rules_to_text(rules: pd.DataFrame) -> str:
    """Readable rules, one per line: ``IF a AND b THEN coreferent``."""
    rules = kept(rules)
    lines = []
    for rid, grp in rules.sort_values(["rule_id", "antecedent_index"]).groupby("rule_id"):
        lines.append(f"R{rid}: IF {_antecedents(grp)} THEN coreferent")
    lines.append("DEFAULT: not coreferent")
    return "\n".join(lines)

