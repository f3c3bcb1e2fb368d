"""The description length of a rule set (Cohen, 1995), counted after StRip's closure.

Description length follows Cohen (1995) as implemented in Weka's JRip: a rule with ``k`` of the
``N`` possible conditions costs ``0.5 * (log2 k + 2 log2 log2 k + S(N, k, k/N))`` bits, and the
exceptions cost ``log2(cover + uncover + 1)`` plus the subset codes of the false positives among
the covered and the false negatives among the uncovered examples, where
``S(t, k, p) = -k log2 p - (t - k) log2(1 - p)``.  The loss ratio ``L`` (cost of a false positive
over a false negative) weights every counted false positive by ``L`` and sets the expected
share of false positives among the errors in the data code to ``1 / (1 + L)``.  A pair counts as
covered when its two mentions fall in one cluster of the closure of the rule set's decisions
(plain coverage for a problem made with ``closure=False``); unknown pairs are never counted.

References
----------
Cohen, W. W. (1995). Fast effective rule induction. ICML, 115-123.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scarce.algorithms.strip.problem import RuleProblem, ruleset_mask
from scarce.algorithms.strip.rule_table import from_frame

__all__ = ["ruleset_dl", "description_length"]


def _log2(x):
    return math.log2(x) if x > 0 else 0.0


def _subset_dl(t: float, k: float, p: float) -> float:
    p = min(max(p, 1e-12), 1 - 1e-12)
    return -k * math.log2(p) - (t - k) * math.log2(1 - p)


def _theory_dl(k: int, n_conditions: int) -> float:
    if k == 0:
        return 0.0
    tdl = _log2(k)
    if k > 1:
        tdl += 2.0 * _log2(tdl)
    tdl += _subset_dl(n_conditions, k, k / n_conditions)
    return 0.5 * tdl


def _data_dl(exp_fp_over_err, cover, uncover, fp, fn) -> float:
    bits = math.log2(cover + uncover + 1)
    if cover > uncover:
        exp_err = exp_fp_over_err * (fp + fn)
        bits += _subset_dl(cover, fp, exp_err / cover)
        bits += _subset_dl(uncover, fn, fn / uncover) if uncover > 0 else 0.0
    else:
        exp_err = (1 - exp_fp_over_err) * (fp + fn)
        bits += _subset_dl(cover, fp, fp / cover) if cover > 0 else 0.0
        bits += _subset_dl(uncover, fn, exp_err / uncover) if uncover > 0 else 0.0
    return bits


def ruleset_dl(problem: RuleProblem, rules, subset=None) -> float:
    """Description length in bits of ``rules`` (lists of conditions) on the labelled pairs
    (of ``subset`` when given)."""
    covered = problem.graph.covered(ruleset_mask(problem, rules))
    lab = problem.y >= 0
    if subset is not None:
        lab = lab & subset
    pos = problem.y == 1
    tp = float(np.count_nonzero(covered & lab & pos))
    fp = float(np.count_nonzero(covered & lab & ~pos)) * problem.loss_ratio  # weighted
    fn = float(np.count_nonzero(~covered & lab & pos))
    uncover = float(np.count_nonzero(~covered & lab))
    theory = sum(_theory_dl(len(r), problem.n_conditions) for r in rules)
    return theory + _data_dl(1.0 / (1.0 + problem.loss_ratio), tp + fp, uncover, fp, fn)


def description_length(problem: RuleProblem, rules: pd.DataFrame) -> float:
    """Total description length in bits of a rule table on the problem (Cohen 1995, JRip).

    Coverage is counted after the closure when the problem was made with ``closure=True``;
    unknown pairs are not counted.
    """
    return ruleset_dl(problem, from_frame(problem, rules))

