"""StRip's variants and the learner's parameters a config sets: names, defaults and bounds.

In a module that imports neither scikit-learn nor numba, so that the StRip flow's config schema
(``flows/strip_config.py``) is checked before the learner is imported.  The learner
(:class:`scarce.algorithms.strip.ripper.StRip`) declares the same defaults in its signature and the
same variants in :data:`scarce.algorithms.strip.ripper.VARIANTS`: ``tests/flows/test_defaults.py``
and ``tests/algorithms/strip/test_params.py`` fail when they differ.
"""

from __future__ import annotations

from typing import Any

from scarce.algorithms.params import Param

__all__ = ["PARAMS", "VARIANTS"]

#: The variants, by what each learns from: plain RIPPER on labelled pairs (the baseline),
#: StRip on labelled pairs, StRip on all pairs (partial supervision).
VARIANTS = ("ripper", "strip-labeled", "strip-partial")

#: The parameters of :class:`scarce.algorithms.strip.ripper.StRip` a config sets, with their bounds.
PARAMS: dict[str, Param] = {
    "loss_ratio": Param(1.0, "real", gt=0),
    "k_optimize": Param(2, "count", ge=0, le=10),
    "dl_surplus": Param(64.0, "real", gt=0),
    "max_thresholds": Param(16, "count", ge=1),
}
#: Each parameter's default.
DEFAULTS: dict[str, Any] = {name: p.default for name, p in PARAMS.items()}
