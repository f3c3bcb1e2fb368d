"""RIPPER (Cohen, 1995) over a coverage oracle, and StRip (Stoyanov and Cardie, 2006).

RIPPER learns an ordered set of rules for the positive class ("the two NPs corefer").  StRip is the
same learner where every rule-quality computation — FOIL information gain while growing, the
pruning metric, the description length — counts as covered every labelled pair whose two NPs fall
in one cluster of the transitive closure, within each document, of the pairs that the rule set
(with the candidate) marks positive.  Pairs with an unknown label (``y == -1``) are never counted
but they are edges of the closure, so links through unlabelled NPs are rewarded indirectly
(Stoyanov and Cardie 2006, section 3 and 4).  ``closure=False`` gives plain RIPPER, the baseline.

The estimator exposes RIPPER's phases as step methods over a prepared problem, so that a pipeline
can run (and store) each phase on its own; :meth:`StRip.fit` is the plain loop over the same
steps.  A phase returns a plain rule table (a DataFrame with columns
``rule_id, antecedent_index, feature, op, value, pruned``):

* :meth:`StRip.prepare` — select the training pairs of the variant (``use_unlabeled``) and encode
  them as a :class:`RuleProblem`.
* :meth:`StRip.grow` — RIPPER's building stage (IREP*): split the training documents 2/3 grow,
  1/3 prune (documents kept whole, new seeded split for every rule); grow a rule by adding the
  antecedent of largest FOIL gain until it covers no negative or nothing improves; prune its final
  sequence of antecedents on the prune set by ``(p - n) / (p + n)``; stop when the rule's error on
  the prune set reaches 1/2, when no positive is left, or when the description length exceeds the
  smallest seen by ``dl_surplus`` bits.  The antecedents removed by pruning stay in the table
  with ``pruned=True`` (they show what was grown); the covering used the pruned rules.
* :meth:`StRip.prune` — drop the pruned antecedents and delete, from the last rule back, every
  rule whose removal lowers the total description length (Cohen's simplification of the rule
  set).
* :meth:`StRip.optimize` — ``k_optimize`` rounds: for each rule a replacement (grown from
  scratch) and a revision (the rule grown further), both pruned to minimise the error of the whole
  rule set on the prune set; keep the variant (original, replacement, revision) of least
  description length in the context of the rule set; cover the positives still uncovered with new
  rules as in :meth:`StRip.grow`; delete rules that raise the description length.

The paper's three training set-ups are settings of two parameters (:data:`VARIANTS`): ``ripper``
(plain coverage, labelled pairs), ``strip-labeled`` (closure, labelled pairs) and
``strip-partial`` (closure, all pairs: the unknown ones join the closure but are never counted).

The loss ratio ``L`` (cost of a false positive over a false negative) weights every counted
negative: FOIL gain uses ``p / (p + L n)``, the pruning metric ``(p - L n) / (p + L n)``, and the
description length (:mod:`scarce.algorithms.strip.description_length`: Cohen's, as in Weka's JRip)
weights every counted false positive by ``L``.

The encoded pairs and the pairs a rule fires on are :mod:`scarce.algorithms.strip.problem`; the rule
table (what every phase returns), what a table fires on and what it covers are
:mod:`scarce.algorithms.strip.rule_table`, whose functions are importable from here too.

References
----------
Cohen, W. W. (1995). Fast effective rule induction. ICML, 115-123.
Stoyanov, V. and Cardie, C. (2006). Partially supervised coreference resolution for opinion
summarization through structured rule learning. EMNLP, 336-344.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state

from scarce.algorithms.strip.closure import PairGraph
from scarce.algorithms.strip.description_length import description_length, ruleset_dl
from scarce.algorithms.strip.problem import (
    RuleProblem,
    as_frame,
    cond_mask,
    encode,
    rule_mask,
    ruleset_mask,
)
from scarce.algorithms.strip.rule_table import (
    RULE_COLUMNS,
    RULE_COVERAGE_COLUMNS,
    from_frame,
    rule_count,
    rule_coverage,
    rules_fire,
    rules_to_text,
    to_frame,
)

__all__ = [
    "RULE_COLUMNS", "RULE_COVERAGE_COLUMNS", "VARIANTS", "RuleProblem", "description_length",
    "rule_count", "rules_fire", "rules_to_text", "rule_coverage", "StRip",
]

# The training set-ups compared by Stoyanov and Cardie (2006), as StRip parameters.
VARIANTS = {
    "ripper": {"closure": False, "use_unlabeled": False},  # the baseline: plain RIPPER
    "strip-labeled": {"closure": True, "use_unlabeled": False},
    "strip-partial": {"closure": True, "use_unlabeled": True},  # partial supervision
}


# ------------------------------------------------------------- grow and prune one rule
def _weights(problem: RuleProblem, subset: np.ndarray):
    wp = ((problem.y == 1) & subset).astype(np.float64)
    wn = ((problem.y == 0) & subset).astype(np.float64) * problem.loss_ratio
    return wp, wn


def _info(p, n):
    return math.log2(p / (p + n))


def _grow_rule(problem: RuleProblem, base_positive, subset, start=()):
    """Grow one rule by FOIL gain on the pairs of ``subset`` (Cohen 1995, section 3.1)."""
    wp, wn = _weights(problem, subset)
    ctx = problem.graph.context(base_positive, wp, wn)
    rule = list(start)
    idx = np.flatnonzero(subset & rule_mask(problem, rule))
    p0, n0 = ctx.counts(idx)
    if p0 <= 0:
        return rule if start else []
    used_nominal = {c[0] for c in rule if c[1] == "=="}
    while n0 > 0 and idx.size:
        base_info = _info(p0, n0)
        best = (0.0, None, 0.0, 0.0)
        edges = ctx.prepare(idx)  # shared by every feature of this refinement step
        for f in range(len(problem.names)):
            col = problem.columns[f][idx]
            if problem.nominal[f]:
                if f in used_nominal:
                    continue
                p, n = ctx.counts_by_value(idx, col, problem.categories[f].size,
                                            edges=edges)
                cand = [(f, "==", v) for v in range(p.size)]
                ps, ns = p, n
            else:
                thr = problem.thresholds[f]
                lo, hi = np.nanmin(col) if col.size else 0, np.nanmax(col) if col.size else 0
                t = thr[(thr >= lo) & (thr <= hi)]
                if t.size == 0:
                    continue
                ple, nle, pge, nge = ctx.counts_by_threshold(idx, col, t, edges=edges)
                cand = [(f, "<=", float(x)) for x in t] + [(f, ">=", float(x)) for x in t]
                ps = np.concatenate([ple, pge])
                ns = np.concatenate([nle, nge])
            with np.errstate(divide="ignore", invalid="ignore"):
                gain = np.where(ps > 0, ps * (np.log2(ps / (ps + ns)) - base_info), -np.inf)
            k = int(np.argmax(gain))
            if gain[k] > best[0] + 1e-12:
                best = (float(gain[k]), cand[k], float(ps[k]), float(ns[k]))
        if best[1] is None:
            break
        cond = best[1]
        rule.append(cond)
        if cond[1] == "==":
            used_nominal.add(cond[0])
        idx = idx[cond_mask(problem, cond, idx)]
        p0, n0 = best[2], best[3]
    return rule


def _prune_rule(problem: RuleProblem, base_positive, subset, rule, metric="rule",
                keep_min=1):
    """Length of the best prefix of ``rule`` on the prune pairs ``subset``.

    ``metric="rule"``: maximise ``(p - L n) / (p + L n)`` of the newly covered prune pairs
    (Cohen 1995, IREP*); ``metric="ruleset"``: minimise the weighted error of the whole rule set
    (base + rule) on the prune pairs (the optimisation phase).  Ties keep the shorter rule.
    """
    if not rule:
        return 0
    wp, wn = _weights(problem, subset)
    ctx = problem.graph.context(base_positive, wp, wn)
    if metric == "ruleset":
        cov = ctx.covered_base
        fp0 = float(wn[cov].sum())
        fn0 = float(wp[~cov].sum())
    best_len, best_val = len(rule), -np.inf
    mask = np.ones(problem.n_pairs, dtype=bool) & subset
    prefix_masks = []
    for cond in rule:
        mask = mask & cond_mask(problem, cond)
        prefix_masks.append(mask)
    for m in range(max(keep_min, 1), len(rule) + 1):
        p, n = ctx.counts(np.flatnonzero(prefix_masks[m - 1]))
        if metric == "rule":
            val = (p - n) / (p + n) if p + n > 0 else 0.0
        else:
            val = -(fp0 + n + fn0 - p)
        if val > best_val + 1e-12:
            best_val, best_len = val, m
    return best_len


def _split(problem: RuleProblem, rng, docs_mask=None):
    """Grow / prune masks over pairs: 2/3 of the documents grow, 1/3 prune (whole documents)."""
    docs = np.arange(problem.n_docs)
    if docs_mask is not None:
        docs = docs[docs_mask]
    perm = rng.permutation(docs)
    n_grow = max(1, int(round(2 * perm.size / 3))) if perm.size > 1 else perm.size
    grow_docs = np.zeros(problem.n_docs, dtype=bool)
    grow_docs[perm[:n_grow]] = True
    g = grow_docs[problem.doc_codes]
    if perm.size > 1:
        return g, ~g
    return g, g  # one document: grow and prune on the same pairs


def _remaining(problem: RuleProblem, rules) -> np.ndarray:
    covered = problem.graph.covered(ruleset_mask(problem, rules))
    return (problem.y == 1) & ~covered


def _cover(problem: RuleProblem, rules, rng, dl_surplus, tails=None):
    """IREP* loop: add grown-and-pruned rules while the stopping criteria allow."""
    rules = list(rules)
    tails = list(tails) if tails is not None else [[] for _ in rules]
    min_dl = ruleset_dl(problem, rules)
    while True:
        rem = _remaining(problem, rules)
        if not rem.any():
            break
        docs_left = np.zeros(problem.n_docs, dtype=bool)
        docs_left[problem.doc_codes[rem]] = True
        g, pmask = _split(problem, rng)
        if not (rem & g).any():
            g, pmask = _split(problem, rng, docs_left)
            if not (rem & g).any():
                break
        base = ruleset_mask(problem, rules)
        grown = _grow_rule(problem, base, g)
        if not grown:
            break
        keep = _prune_rule(problem, base, pmask, grown, metric="rule")
        rule = grown[:keep]
        # error of the rule on the prune set (Cohen 1995; JRip stops at >= 1/2)
        wp, wn = _weights(problem, pmask)
        p, n = problem.graph.context(base, wp, wn).counts(
            np.flatnonzero(pmask & rule_mask(problem, rule)))
        if p + n > 0 and n / (p + n) >= 0.5:
            break
        rules.append(rule)
        tails.append(grown[keep:])
        dl = ruleset_dl(problem, rules)
        min_dl = min(min_dl, dl)
        if dl > min_dl + dl_surplus:
            break
    return rules, tails


def _reduce_dl(problem: RuleProblem, rules):
    """Delete, from the last rule back, every rule whose removal lowers the description length."""
    rules = list(rules)
    for i in range(len(rules) - 1, -1, -1):
        without = rules[:i] + rules[i + 1:]
        if ruleset_dl(problem, without) < ruleset_dl(problem, rules):
            rules = without
    return rules


def _optimize_round(problem: RuleProblem, rules, rng, dl_surplus):
    """One round of RIPPER's optimisation (see :meth:`StRip.optimize`)."""
    current = list(rules)
    for i in range(len(current)):
        others = current[:i] + current[i + 1:]
        base = ruleset_mask(problem, others)
        g, pmask = _split(problem, rng)
        variants = [current[i]]
        rep = _grow_rule(problem, base, g)
        if rep:
            variants.append(rep[:_prune_rule(problem, base, pmask, rep, "ruleset")])
        rev = _grow_rule(problem, base, g, start=current[i])
        if len(rev) > len(current[i]):
            variants.append(rev[:_prune_rule(problem, base, pmask, rev, "ruleset")])
        dls = [ruleset_dl(problem, current[:i] + [v] + current[i + 1:]) for v in variants]
        current = current[:i] + [variants[int(np.argmin(dls))]] + current[i + 1:]
    current, _ = _cover(problem, current, rng, dl_surplus)
    return _reduce_dl(problem, current)


# ----------------------------------------------------------------------------- estimator
class StRip(BaseEstimator):
    """StRip: RIPPER whose rule quality is measured after the transitive closure (EMNLP 2006).

    Parameters
    ----------
    closure : bool, default True
        True: StRip, every rule-quality count is taken after the transitive closure (single-link
        clustering) of the pair decisions within each document; False: plain RIPPER, the
        baseline.
    use_unlabeled : bool, default True
        True: the pairs labelled -1 (unknown) are kept; they are never counted but are edges of
        the closure (partial supervision).  False: they are dropped before training.
    loss_ratio : float, default 1.0
        Cost of a false positive over a false negative (Cohen's loss ratio; the paper varied it).
    k_optimize : int, default 2
        Rounds of the optimisation phase (RIPPER2).
    dl_surplus : float, default 64.0
        Stop adding rules when the description length exceeds the smallest seen by this many
        bits (Cohen 1995 and JRip use 64).
    max_thresholds : int, default 16
        At most this many candidate thresholds per numeric feature (quantiles of its values).
    random_state : int, RandomState or None, default None
        Seeds the grow / prune document splits of :meth:`grow` and, continuing the same
        generator, of :meth:`optimize`.

    Attributes
    ----------
    rules_ : DataFrame
        The learned rule table (``rule_id, antecedent_index, feature, op, value, pruned``).
    rules_grown_, rules_pruned_ : DataFrame
        The tables after :meth:`grow` and :meth:`prune` (before optimisation).
    feature_names_in_ : ndarray of str
    n_features_in_ : int
    n_pairs_, n_labeled_ : int
        Training pairs and labelled training pairs (after the ``use_unlabeled`` selection).

    Notes
    -----
    ``fit(X, y, groups, mention_i, mention_j)`` takes one row per candidate pair: features ``X``
    (DataFrame), labels ``y`` in {1, 0, -1 = unknown}, the document of the pair and its two mention
    ids.  It is the loop ``prepare -> grow -> prune -> optimize``; a pipeline can call those steps
    itself (and store each rule table) and gets the same rules.  :data:`VARIANTS` names the
    paper's three set-ups (:meth:`from_variant`).  ``predict`` returns the pair decisions of the
    rules, ``cluster`` the chains after single-link clustering (transitive closure) of the
    positive pairs.

    References
    ----------
    Cohen, W. W. (1995). Fast effective rule induction. ICML, 115-123.
    Stoyanov, V. and Cardie, C. (2006). Partially supervised coreference resolution for opinion
    summarization through structured rule learning. EMNLP, 336-344.
    """

    def __init__(self, closure=True, use_unlabeled=True, loss_ratio=1.0, k_optimize=2,
                 dl_surplus=64.0, max_thresholds=16, random_state=None):
        self.closure = closure
        self.use_unlabeled = use_unlabeled
        self.loss_ratio = loss_ratio
        self.k_optimize = k_optimize
        self.dl_surplus = dl_surplus
        self.max_thresholds = max_thresholds
        self.random_state = random_state

    @classmethod
    def from_variant(cls, variant: str, **params) -> StRip:
        """The estimator of one of :data:`VARIANTS` (``ripper``, ``strip-labeled``,
        ``strip-partial``), with ``params`` for the other parameters."""
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; expected one of {list(VARIANTS)}")
        return cls(**VARIANTS[variant], **params)

    # ------------------------------------------------------------------ steps
    def prepare(self, X, y, groups, mention_i, mention_j) -> RuleProblem:
        """Validate the pairs, keep the training ones and encode them for the phases.

        Parameters
        ----------
        X : DataFrame, shape (n_pairs, n_features)
            Pair features.  Bool, object, string and categorical columns are nominal (tests
            ``feature == value``); numeric columns get thresholds (``<= t``, ``>= t``).  A numpy
            array is taken as all numeric with columns ``x0, x1, ...``.
        y : array-like of int, shape (n_pairs,)
            1 coreferent, 0 not coreferent, -1 unknown.
        groups : array-like, shape (n_pairs,)
            Document of each pair (the closure never crosses documents; splits keep documents
            whole).
        mention_i, mention_j : array-like, shape (n_pairs,)
            Mention ids of the pair, unique within a document.

        Returns
        -------
        RuleProblem
            The training pairs (all of them, or the labelled ones when ``use_unlabeled`` is
            False), encoded.
        """
        X = as_frame(X)
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != len(X):
            raise ValueError(f"y must be 1-d with {len(X)} entries (one per row of X); got shape "
                             f"{y.shape}")
        if not np.isin(y, (-1, 0, 1)).all():
            raise ValueError(f"y must hold 1, 0 or -1 (unknown); got values {np.unique(y)[:10]}")
        loss_ratio = float(self.loss_ratio)
        if not (loss_ratio > 0 and math.isfinite(loss_ratio)):
            raise ValueError(f"loss_ratio must be a positive number; got {self.loss_ratio}")
        if int(self.max_thresholds) < 1:
            raise ValueError(f"max_thresholds must be >= 1; got {self.max_thresholds}")
        groups, mention_i, mention_j = (np.asarray(a) for a in (groups, mention_i, mention_j))
        if groups.shape != y.shape:
            raise ValueError(f"groups has shape {groups.shape} but y has {y.shape}")
        if not self.use_unlabeled:
            keep = y >= 0
            X = X[keep].reset_index(drop=True)
            y, groups, mention_i, mention_j = (a[keep] for a in (y, groups, mention_i, mention_j))
        return encode(X, y, groups, mention_i, mention_j, closure=bool(self.closure),
                       loss_ratio=loss_ratio, max_thresholds=int(self.max_thresholds))

    def grow(self, problem: RuleProblem) -> tuple[pd.DataFrame, np.random.RandomState]:
        """RIPPER's building stage (IREP*): grow, prune and add rules until a stopping criterion.

        Parameters
        ----------
        problem : RuleProblem
            From :meth:`prepare`.

        Returns
        -------
        rules : DataFrame
            Rule table (``RULE_COLUMNS``); antecedents removed by pruning have ``pruned=True``.
        rng : RandomState
            The generator of ``random_state`` after growing; :meth:`optimize` continues from it.
        """
        rng = check_random_state(self.random_state)
        rules, tails = _cover(problem, [], rng, float(self.dl_surplus))
        return to_frame(problem, rules, tails), rng

    def prune(self, problem: RuleProblem, rules: pd.DataFrame) -> pd.DataFrame:
        """Drop pruned antecedents, then delete rules whose removal lowers the description length.

        Returns
        -------
        DataFrame
            Rule table without pruned rows, rules renumbered from 0.
        """
        return to_frame(problem, _reduce_dl(problem, from_frame(problem, rules)))

    def optimize(self, problem: RuleProblem, rules: pd.DataFrame,
                 rng: np.random.RandomState) -> pd.DataFrame:
        """RIPPER's optimisation phase, ``k_optimize`` rounds (Cohen 1995, section 3.3).

        For each rule ``R_i`` in order: a replacement grown from an empty rule and a revision grown
        from ``R_i``, both on a fresh grow split with the other rules in place, and pruned to
        minimise the error of the whole rule set on the prune split; the variant (``R_i``,
        replacement, revision) giving the least description length of the rule set is kept.  Then
        uncovered positives are covered by new rules (as :meth:`grow`) and rules that raise the
        description length are deleted.

        Parameters
        ----------
        problem : RuleProblem
        rules : DataFrame
            The rule table of :meth:`prune`.
        rng : RandomState
            The generator returned by :meth:`grow` (advanced in place).

        Returns
        -------
        DataFrame
            The optimised rule table.
        """
        if int(self.k_optimize) < 0:
            raise ValueError(f"k_optimize must be >= 0; got {self.k_optimize}")
        current = from_frame(problem, rules)
        for _ in range(int(self.k_optimize)):
            current = _optimize_round(problem, current, rng, float(self.dl_surplus))
        return to_frame(problem, current)

    def fit(self, X, y, groups, mention_i, mention_j):
        """Learn the rule set: :meth:`prepare`, :meth:`grow`, :meth:`prune`, :meth:`optimize`.

        Returns
        -------
        self
        """
        problem = self.prepare(X, y, groups, mention_i, mention_j)
        self.rules_grown_, rng = self.grow(problem)
        self.rules_pruned_ = self.prune(problem, self.rules_grown_)
        self.rules_ = self.optimize(problem, self.rules_pruned_, rng)
        self.feature_names_in_ = np.asarray(problem.names, dtype=object)
        self.n_features_in_ = len(problem.names)
        self.n_pairs_ = problem.n_pairs
        self.n_labeled_ = problem.n_labeled
        return self

    # ------------------------------------------------------------------ fitted model
    def _check_X(self, X):
        if not hasattr(self, "rules_"):
            raise ValueError("this StRip instance is not fitted; call fit first")
        return as_frame(X)

    def predict(self, X) -> np.ndarray:
        """Pair decisions (1 coreferent, 0 not) of the rules, before any closure."""
        X = self._check_X(X)
        return rules_fire(self.rules_, X).astype(np.int64)

    def cluster(self, X, groups, mention_i, mention_j) -> pd.DataFrame:
        """Coreference chains: single-link clustering of the predicted positive pairs.

        Returns
        -------
        DataFrame
            One row per mention appearing in a pair: ``doc``, ``mention``, ``cluster`` (an
            integer, unique over all documents).
        """
        positive = self.predict(X).astype(bool)
        frame = PairGraph(groups, mention_i, mention_j, closure=True).clusters(positive)
        return frame.sort_values(["doc", "mention"]).reset_index(drop=True)

    def rules_text(self) -> str:
        """The learned rules as readable text."""
        if not hasattr(self, "rules_"):
            raise ValueError("this StRip instance is not fitted; call fit first")
        return rules_to_text(self.rules_)
