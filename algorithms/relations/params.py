"""The relation discovery method's parameters: names, defaults, bounds and checks.

Declared once, here, in a module that imports neither scikit-learn nor SciPy: the estimator
(:class:`scarce.algorithms.relations.model.RelationDiscovery`'s signature,
:meth:`~RelationDiscovery.
k_values`, :meth:`~RelationDiscovery.check_n_pairs`), the contexts
(:func:`scarce.algorithms.relations.contexts.build_contexts`) and the flow's config schema
(``flows/relations_config.py``) read the same table, and a config is checked before the
estimator is imported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from scarce.algorithms.params import Param

__all__ = ["CONTEXT_PARAMS", "INPUT_FORMATS", "PARAMS", "RANKINGS", "TooFewPairsError",
           "check_n_pairs", "k_values", "parse_window"]

#: The word rankings: entropy (Dash et al.), and the ablations frequency and chi2.
RANKINGS = ("entropy", "frequency", "chi2")
#: The formats the relation readers read (``tasks.relations.READERS``): SemEval-2010 Task 8
#: text, JSON Lines.
INPUT_FORMATS = ("semeval", "jsonl")

_WINDOW_RE = re.compile(r"^(\d+)-(\d+)-(\d+)$")

#: The options of :func:`scarce.algorithms.relations.contexts.build_contexts` a config may set.
CONTEXT_PARAMS: dict[str, Param] = {
    "window": Param("0-10-0", "text"),
    "weighting": Param("tfidf", "choice", choices=("tfidf", "binary")),
    "position_tags": Param(True, "bool"),
    "lowercase": Param(True, "bool"),
    "min_df": Param(1, "count", ge=1),
}

#: The parameters of :class:`scarce.algorithms.relations.model.RelationDiscovery` (less
#: ``random_state``), in its order.
PARAMS: dict[str, Param] = {
    "k_low": Param(2, "count", ge=2),
    "k_high": Param(20, "count", ge=2),
    "ranking": Param("entropy", "choice", choices=RANKINGS),
    "entropy_binary": Param(True, "bool"),
    "entropy_samples": Param(None, "count", ge=2, optional=True),
    "chi2_k": Param(None, "count", ge=2, optional=True),
    "prefix_step": Param(None, "count", ge=1, optional=True),
    "n_prefixes": Param(12, "count", ge=1),
    "min_prefix": Param(10, "count", ge=1),
    "theta": Param(0.9, "real", ge=0.0, le=1.0),
    "reg": Param(1e-3, "real", gt=0.0),
    "row_norm": Param(True, "bool"),
    "n_init": Param(3, "count", ge=1),
    "n_subsamples": Param(10, "count", ge=1),
    "rho": Param(0.9, "real", gt=0.0, le=1.0),
    "n_init_reference": Param(None, "count", ge=1, optional=True),
    "n_init_subsample": Param(None, "count", ge=1, optional=True),
    "n_references": Param(1, "count", ge=1),
    "n_label_words": Param(2, "count", ge=1),
}
#: Each parameter's default (the estimator's signature takes these).
DEFAULTS: dict[str, Any] = {name: p.default for name, p in PARAMS.items()}
#: Each context option's default (``build_contexts``'s signature takes these).
CONTEXT_DEFAULTS: dict[str, Any] = {name: p.default for name, p in CONTEXT_PARAMS.items()}


class TooFewPairsError(ValueError):
    """The data has too few pairs for a parameter; ``param`` names the parameter."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def parse_window(window: str | Sequence[int]) -> tuple[int, int, int]:
    """Parse a window setting ``"p-m-q"`` (or a 3-tuple) into ``(pre, mid, post)``."""
    if isinstance(window, str):
        m = _WINDOW_RE.match(window.strip())
        if m is None:
            raise ValueError(f"window {window!r} is not of the form 'pre-mid-post', e.g. '0-10-0'")
        values = tuple(int(g) for g in m.groups())
    else:
        values = tuple(int(v) for v in window)
        if len(values) != 3 or min(values) < 0:
            raise ValueError(f"window {window!r} must be three non-negative integers")
    if sum(values) == 0:
        raise ValueError("window '0-0-0' selects no context words")
    return values  # type: ignore[return-value]


def k_values(k_low: Any, k_high: Any, n_pairs: int | None = None) -> list[int]:
    """K_low..K_high, checked (against the number of pairs, when given)."""
    k_low, k_high = int(k_low), int(k_high)
    if k_low < 1:
        raise ValueError(f"k_low must be at least 1, got {k_low}")
    if k_low > k_high:
        raise ValueError(f"k_low ({k_low}) must not exceed k_high ({k_high})")
    if n_pairs is not None and k_high >= n_pairs:
        raise ValueError(f"k_high ({k_high}) must be below the number of pairs ({n_pairs})")
    return list(range(k_low, k_high + 1))


def check_n_pairs(params: Mapping[str, Any], n_pairs: int) -> None:
    """Raise :class:`TooFewPairsError` (naming the parameter) unless ``n_pairs`` pairs suffice
    for every clustering the method of ``params`` makes: ``k_high`` clusters of all pairs and
    of each subsample of ``round(rho * n_pairs)`` pairs, and ``chi2_k`` pseudo-labels."""
    get = {**DEFAULTS, **params}.get
    n = int(n_pairs)
    try:
        k_values(get("k_low"), get("k_high"), n)
    except ValueError as exc:
        raise TooFewPairsError(str(exc), "k_high") from None
    k_high, rho = int(get("k_high")), float(get("rho"))
    size = max(2, int(round(rho * n)))  # as stability.subsample_indices draws
    if size < k_high:
        need = math.ceil(1000 * k_high / n) / 1000
        raise TooFewPairsError(
            f"rho ({rho:g}) subsamples {size} of the {n} pairs, fewer than the k_high "
            f"({k_high}) clusters each subsample is split into; use rho >= {need:g}, a "
            "smaller k_high or more pairs", "rho")
    ranking = get("ranking")
    chi2_k = get("chi2_k") if isinstance(ranking, str) and ranking == "chi2" else None
    if chi2_k is not None and int(chi2_k) > n:
        raise TooFewPairsError(f"chi2_k ({chi2_k}) must not exceed the number of pairs "
                               f"({n})", "chi2_k")
