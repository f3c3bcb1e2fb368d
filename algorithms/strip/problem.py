"""The training pairs encoded for the rule learner, and the pairs a condition or rule fires on.

:class:`RuleProblem` is what :meth:`StRip.prepare <algorithms.strip.ripper.StRip.prepare>`
builds and every phase of the learner reads: each feature as integer codes (nominal: bool,
string, categorical) or float64 values with candidate thresholds (numeric), the labels, the
documents and the closure's :class:`~scarce.algorithms.strip.closure.PairGraph`.  A condition is
``(feature index, op, value)`` with ``value`` a category code (``==``) or a float (``<=``,
``>=``); a rule is a list of conditions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from scarce.algorithms.strip.closure import PairGraph

__all__ = ["RuleProblem", "Rule", "as_frame", "encode", "is_nominal", "cond_mask", "rule_mask",
           "ruleset_mask"]


@dataclass
class RuleProblem:
    """Encoded training pairs for the rule learner (built by :meth:`StRip.prepare`)."""

    names: list[str]
    nominal: list[bool]
    columns: list[np.ndarray]  # int codes (nominal) or float64 values (numeric)
    categories: list[np.ndarray | None]
    thresholds: list[np.ndarray | None]
    y: np.ndarray
    groups: np.ndarray
    graph: PairGraph
    loss_ratio: float
    n_conditions: int
    doc_codes: np.ndarray = field(repr=False)
    n_docs: int = 0
    _fire_cache: dict = field(default_factory=dict, repr=False)

    @property
    def n_pairs(self) -> int:
        """Training pairs (labelled or not)."""
        return self.y.size

    @property
    def n_labeled(self) -> int:
        """Training pairs with a known label (1 or 0)."""
        return int(np.count_nonzero(self.y >= 0))

    @property
    def n_positive(self) -> int:
        """Training pairs labelled coreferent."""
        return int(np.count_nonzero(self.y == 1))


def is_nominal(col: pd.Series) -> bool:
    """Whether the rules test a feature column by value (``==``: bool, object, string and
    categorical columns) rather than by thresholds (``<=``, ``>=``: numeric columns)."""
    return pd.api.types.is_bool_dtype(col) or not pd.api.types.is_numeric_dtype(col)


def _encode_column(col: pd.Series, max_thresholds: int):
    if is_nominal(col):
        codes, cats = pd.factorize(col.astype(str), sort=True)
        return True, codes.astype(np.int64), np.asarray(cats, dtype=object), None
    vals = col.to_numpy(dtype=np.float64)
    uniq = np.unique(vals[~np.isnan(vals)])
    if uniq.size > max_thresholds:
        q = np.quantile(vals[~np.isnan(vals)], np.linspace(0, 1, max_thresholds + 2)[1:-1],
                        method="lower")
        uniq = np.unique(q)
    return False, vals, None, uniq


def as_frame(X) -> pd.DataFrame:
    """``X`` as a DataFrame; a numpy array is all numeric with columns ``x0, x1, ...``."""
    if isinstance(X, pd.DataFrame):
        return X
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"X must be 2-d; got shape {arr.shape}")
    return pd.DataFrame(arr, columns=[f"x{k}" for k in range(arr.shape[1])])


def encode(X: pd.DataFrame, y: np.ndarray, groups: np.ndarray, mention_i, mention_j, *,
           closure: bool, loss_ratio: float, max_thresholds: int) -> RuleProblem:
    """The :class:`RuleProblem` of validated pairs (see :meth:`StRip.prepare`)."""
    graph = PairGraph(groups, mention_i, mention_j, closure=closure)
    names, nominal, columns, cats, thr = [], [], [], [], []
    n_cond = 0
    for name in X.columns:
        is_nom, col, cat, t = _encode_column(X[name], max_thresholds)
        names.append(str(name))
        nominal.append(is_nom)
        columns.append(col)
        cats.append(cat)
        thr.append(t)
        n_cond += cat.size if is_nom else 2 * t.size
    _, doc_codes = np.unique(groups, return_inverse=True)
    return RuleProblem(
        names=names, nominal=nominal, columns=columns, categories=cats, thresholds=thr,
        y=y.astype(np.int64), groups=groups, graph=graph, loss_ratio=float(loss_ratio),
        n_conditions=max(n_cond, 1), doc_codes=doc_codes.astype(np.int64),
        n_docs=int(doc_codes.max()) + 1 if doc_codes.size else 0)


# A condition is (feature index, op, value) with value a category code (==) or a float.
Rule = list


def cond_mask(problem: RuleProblem, cond, idx=None) -> np.ndarray:
    """The pairs (all, or those of ``idx``) on which condition ``cond`` holds."""
    f, op, val = cond
    col = problem.columns[f] if idx is None else problem.columns[f][idx]
    if op == "==":
        return col == val
    if op == "<=":
        return col <= val
    return col >= val


def rule_mask(problem: RuleProblem, rule) -> np.ndarray:
    """The pairs a rule fires on (every condition holds), memoised on the problem: the learner
    asks for the same rules again and again while it grows, prunes and measures."""
    key = tuple(rule)
    hit = problem._fire_cache.get(key)
    if hit is not None:
        return hit
    mask = np.ones(problem.n_pairs, dtype=bool)
    for cond in rule:
        mask &= cond_mask(problem, cond)
    if len(problem._fire_cache) > 4096:
        problem._fire_cache.clear()
    problem._fire_cache[key] = mask
    return mask


def ruleset_mask(problem: RuleProblem, rules) -> np.ndarray:
    """The pairs at least one of ``rules`` fires on (before any closure)."""
    mask = np.zeros(problem.n_pairs, dtype=bool)
    for r in rules:
        mask |= rule_mask(problem, r)
    return mask
