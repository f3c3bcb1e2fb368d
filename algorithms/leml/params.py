"""The LEML estimator's parameters: their names, defaults, bounds and check.

Declared once, here, in a module that imports neither scikit-learn nor SciPy, so that the
estimator (:meth:`algorithms.leml.LEML.check_params`, its signature's defaults) and the LEML
config schema (``flows/leml_config.py``: each field's default and pydantic bounds) read the
same table, and a config is checked before the estimator is imported.

The bounds are what the estimator can run, and no more:

- ``outer_iterations``, ``cg_max_iter`` and ``newton_max_iter`` are at least 1: with 0 a fit
  (or a CG, or a Newton loop) changes nothing; the start alone is :meth:`LEML.start`.  None
  has an upper bound: ``tol`` and ``cg_tol`` stop them early.
- ``tol`` and ``cg_tol`` are in ``[0, 1)``: 0 runs every iteration; a relative decrease (or
  residual) is below 1 from the first iteration, so 1 or more would stop at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scarce.algorithms.params import AUTO, Param

# AUTO: the value of ``squared_init_iter``, ``w_solver`` and ``h_solver`` that leaves the choice
# to the estimator, by the loss and the CG it is given (:meth:`LEML.resolved_params`).
#: Squared-loss iterations of a margin loss's start under ``squared_init_iter="auto"`` (with the
#: preconditioned CG, whose squared loss levels off within a few iterations; more did not
#: change the margin loss's validation P@1 on Bibtex or Delicious, docs/leml.md).
AUTO_SQUARED_INIT_ITER = 3

#: The losses (:data:`algorithms.leml.losses.LOSSES` holds their functions, in this order).
LOSS_NAMES = ("squared", "logistic", "sqhinge")
#: The losses whose second derivative is constant: their W-step needs no bound or Newton step.
CONSTANT_CURVATURE = ("squared",)
#: Solvers of the H-step's Newton steps (logistic and squared hinge), see
#: :func:`algorithms.leml.h_step.update_H`.
H_SOLVERS = ("direct", "cg", "bound")
#: Solvers of the W-step of the logistic and squared-hinge losses, see
#: :func:`algorithms.leml.w_step.update_W`.
W_SOLVERS = ("tron", "bound")
#: The squared loss's CG: plain, or preconditioned (``kronecker_preconditioner``); the same
#: names are the CG of the margin losses' bound W-step above its eigendecomposition's size.
PRECONDITIONERS = ("none", "diagonal")
#: The vectoriser kinds of a table's text column: TF-IDF (scikit-learn's TfidfVectorizer) or
#: raw counts (CountVectorizer), see :mod:`algorithms.leml.text`.
VECTORIZERS = ("tfidf", "count")
#: The working floating types.
DTYPES = ("float32", "float64")


#: The parameters of :class:`algorithms.leml.LEML` with a default a config may set (the
#: others, ``random_state``, ``verbose`` and ``callback``, belong to the caller), in the
#: estimator's order.
PARAMS: dict[str, Param] = {
    "rank": Param(50, "count", ge=1),
    "lam": Param(1.0, "real", gt=0),
    "loss": Param("squared", "choice", choices=LOSS_NAMES),
    "outer_iterations": Param(10, "count", ge=1),
    "tol": Param(0.0, "real", ge=0, lt=1),
    "early_stopping": Param(False, "bool"),
    "validation_fraction": Param(0.2, "real", gt=0, lt=1),
    "n_iter_no_change": Param(2, "count", ge=1),
    "cg_max_iter": Param(10, "count", ge=1),
    "cg_tol": Param(1e-3, "real", ge=0, lt=1),
    "cg_preconditioner": Param("none", "choice", choices=PRECONDITIONERS),
    "newton_max_iter": Param(3, "count", ge=1),
    "fit_intercept": Param(True, "bool"),
    "h_solver": Param(AUTO, "choice", choices=(AUTO, *H_SOLVERS)),
    "w_solver": Param(AUTO, "choice", choices=(AUTO, *W_SOLVERS)),
    "squared_init_iter": Param(AUTO, "count_or_auto", ge=0),
    "dtype": Param("float32", "choice", choices=DTYPES),
}
#: Rows scored at a time by default: at most ``BATCH_SIZE x L`` decision values exist at once.
BATCH_SIZE = 2048
#: Labels per row in the predictions of a training run, and ``apply-leml``'s ``top_k``.
TOP_K = 5
#: The baselines a LEML run may fit beside it (``tasks.leml.BASELINES`` holds their estimators).
BASELINES = ("br-ridge", "br-logistic", "closed-form")
#: The ridge / inverse-C strength of the Binary Relevance baselines
#: (:class:`algorithms.leml.baselines.BinaryRelevance`'s ``alpha``).
BASELINE_ALPHA = 1.0
#: Row blocks of the training data on a backend of row blocks
#: (:class:`tasks.leml_dask.RowBlockBackend`'s ``blocks``): fixed, so the reduction order
#: (and so ``W``, bit for bit) does not depend on the number of workers.  Each block costs one
#: task per operator application, each paying Dask's per-task overhead, so few blocks: 4 keep
#: 1, 2 or 4 workers evenly busy.
N_BLOCKS = 4
#: Each parameter's default (the estimator's signature takes these).
DEFAULTS: dict[str, Any] = {name: p.default for name, p in PARAMS.items()}


def dtype_name(dtype: Any) -> str | None:
    """``"float32"`` or ``"float64"`` for a name or numpy type of either, else None."""
    try:
        name = np.dtype(dtype).name
    except TypeError:
        return None
    return name if name in DTYPES and dtype is not None else None


def check_w_solver(w_solver: str, loss: str, *, distributed: bool = False) -> None:
    """Raise a ValueError unless ``w_solver`` can run the W-step of ``loss``: one of
    :data:`W_SOLVERS`; ``"bound"`` (for a loss of varying curvature) solves through ``X^T X``
    held in this process, so not with a ``distributed`` backend."""
    if w_solver not in W_SOLVERS:
        raise ValueError(f"w_solver must be one of {W_SOLVERS}, got {w_solver!r}")
    if distributed and w_solver == "bound" and loss not in CONSTANT_CURVATURE:
        raise ValueError("w_solver 'bound' runs on one process (it solves through X^T X "
                         "held there); use w_solver 'tron' for a distributed W-step")


def check_params(params: Mapping[str, Any], *, distributed: bool = False) -> None:
    """Raise a ValueError naming the first parameter of ``params`` (names of :data:`PARAMS`;
    any other is left alone) that is not of its kind and bounds, or a combination the
    estimator cannot run; ``distributed``: the W-step runs on a backend of row blocks."""
    for name, param in PARAMS.items():
        if name not in params:
            continue
        value = params[name]
        if name == "dtype":
            if dtype_name(value) is None:
                raise ValueError(f"dtype must be 'float32' or 'float64', got {value!r}")
        elif name == "loss":
            if not param.holds(value):
                raise ValueError(f"unknown loss {value!r}; expected one of "
                                 f"{sorted(LOSS_NAMES)}")
        elif not param.holds(value):
            raise ValueError(f"{name} must be {param.expected()}, got {value!r}")
    get = {**DEFAULTS, **params}.get
    if get("w_solver") != AUTO:
        check_w_solver(get("w_solver"), get("loss"), distributed=distributed)
    if get("squared_init_iter") not in (0, AUTO) and get("loss") != "squared":
        if not get("fit_intercept"):
            raise ValueError("squared_init_iter > 0 needs fit_intercept=True (the margin "
                             "offset -1 is carried by the intercept row)")
        if get("rank") < 2:
            raise ValueError("squared_init_iter > 0 needs rank >= 2")
