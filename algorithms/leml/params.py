"""The LEML estimator's parameters: their names, defaults, bounds and check.

Declared once, here, in a module that imports neither scikit-learn nor SciPy, so that the
estimator (:meth:`scarce.algorithms.leml.LEML.check_params`, its signature's defaults) and the LEML
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

#: The losses (:data:`scarce.algorithms.leml.losses.LOSSES` holds their functions, in this order).
LOSS_NAMES = ("squared", "logistic", "sqhinge")
#: The losses whose second derivative is constant: their W-step needs no bound or Newton step.
CONSTANT_CURVATURE = ("squared",)
#: Solvers of the H-step's Newton steps (logistic and squared hinge), see
#: :func:`scarce.algorithms.leml.h_step.update_H`.
H_SOLVERS = ("direct", "cg", "bound")
#: Solvers of the W-step of the logistic and squared-hinge losses, see
#: :func:`scarce.algorithms.leml.w_step.update_W`.
W_SOLVERS = ("tron", "bound")
#: The squared loss's CG: plain, or preconditioned (``kronecker_preconditioner``); the same
#: names are the CG of the margin losses' bound W-step above its eigendecomposition's size.
PRECONDITIONERS = ("none", "diagonal")
#: The vectoriser kinds of a table's text column: TF-IDF (scikit-learn's TfidfVectorizer) or
#: raw counts (CountVectorizer), see :mod:`scarce.algorithms.leml.text`.
VECTORIZERS = ("tfidf", "count")
#: The working floating types.
DTYPES = ("float32", "float64")


#: The parameters of :class:`scarce.algorithms.leml.LEML` with a default a config may set (the
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
#: The baselines a LEML run may fit beside it (``tasks.leml.BASELINES`` names their estimators).
BASELINES = ("br-ridge", "br-logistic", "closed-form")
#: The ridge / inverse-C strength of the Binary Relevance baselines
#: (:class:`scarce.algorithms.leml.baselines.BinaryRelevance`'s ``alpha``).
BASELINE_ALPHA = 1.0
#: Row blocks of the training data on a backend of row blocks
#: (:class:`scarce.tasks.leml_dask.RowBlockBackend`'s ``blocks``): fixed, so the reduction order
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


# -- what "auto" resolves to, and what each step reads --------------------------------------
#: The step methods whose parameters :func:`step_params` lists ("predict": the prediction
#: methods after ``LEML.set_factors``).
STEPS = ("start", "w_step", "h_step", "objective", "predict", "early_stopping_split")


def resolved_params(params: Mapping[str, Any], *, distributed: bool = False) -> dict:
    """The values the steps use for ``squared_init_iter``, ``w_solver`` and ``h_solver``:
    those given, or for ``"auto"`` the path that suits the rest of the setting, chosen on
    validation rows of Bibtex and Delicious (``docs/leml.md``).

    A margin loss (logistic, squared hinge) with ``cg_preconditioner="diagonal"`` -- CG
    counts chosen for the preconditioned squared loss, which TRON's unpreconditioned CG
    cannot use -- starts from :data:`AUTO_SQUARED_INIT_ITER` squared-loss iterations (when
    ``fit_intercept`` and ``rank >= 2``, which that start needs; else at random) and takes
    bound steps in both half-steps, each a gradient and an exact solve (by preconditioned
    CG above 4096 features).  The bound W-step runs in one process, so ``distributed`` (a
    backend of row blocks) resolves ``w_solver`` to ``"tron"``.  Without the
    preconditioner a margin loss keeps the paper's path: a random start, TRON and
    Newton steps with explicit Hessians.  The squared loss uses none of the three
    (0, ``"tron"``, ``"direct"``).  Depends only on ``loss``, ``cg_preconditioner``,
    ``fit_intercept``, ``rank`` and ``distributed``.

    Returns
    -------
    dict
        ``squared_init_iter``, ``w_solver`` and ``h_solver``, none of them ``"auto"``.
    """
    get = {**DEFAULTS, **params}.get
    bound = get("loss") != "squared" and get("cg_preconditioner") != "none"
    start, w_solver, h_solver = get("squared_init_iter"), get("w_solver"), get("h_solver")
    if start == AUTO:
        start = (AUTO_SQUARED_INIT_ITER if bound and get("fit_intercept")
                 and PARAMS["rank"].holds(get("rank")) and get("rank") >= 2 else 0)
    if w_solver == AUTO:
        w_solver = "bound" if bound and not distributed else "tron"
    if h_solver == AUTO:
        h_solver = "bound" if bound else "direct"
    return {"squared_init_iter": start, "w_solver": w_solver, "h_solver": h_solver}


def interaction_warnings(params: Mapping[str, Any], *, distributed: bool = False) -> list[str]:
    """The settings of ``params`` that turn off something another setting relies on, one
    line each (what ``LEML.fit`` and the flow log as warnings)."""
    check_params(params, distributed=distributed)
    get = {**DEFAULTS, **params}.get
    loss, preconditioner = get("loss"), get("cg_preconditioner")
    resolved = resolved_params(params, distributed=distributed)
    said = []
    if loss != "squared" and preconditioner != "none" and resolved["w_solver"] == "tron":
        said.append(f"cg_preconditioner {preconditioner!r} does not act on the {loss} loss's "
                    f"TRON W-step (its CG runs unpreconditioned), so "
                    f"cg_max_iter={get('cg_max_iter')} CG steps per Newton step may be too "
                    "few if they were chosen with the preconditioner")
    if loss != "squared" and preconditioner != "none" and \
            get("squared_init_iter") == AUTO and resolved["squared_init_iter"] == 0:
        said.append(f"squared_init_iter 'auto' cannot start the {loss} loss from the "
                    "squared loss (that start needs fit_intercept=True and rank >= 2): "
                    "it starts at random")
    return said


def squared_start(params: Mapping[str, Any]) -> bool:
    """Whether the start begins with squared-loss iterations (a margin loss with
    ``squared_init_iter > 0``, resolved) rather than a random start alone."""
    return (resolved_params(params)["squared_init_iter"] > 0
            and {**DEFAULTS, **params}["loss"] != "squared")


def step_params(params: Mapping[str, Any], step: str, *, distributed: bool = False) -> dict:
    """The parameters of ``params`` (the estimator's ``get_params()``) that step ``step``
    reads, with their values.

    Every step prepares its data (``fit_intercept``, ``dtype``); then ``"start"``
    reads ``rank``, ``random_state`` and whether to start from the squared loss (the
    loss, ``squared_init_iter``, and then what those iterations read), ``"w_step"``
    and ``"h_step"`` their loss, ``lam`` and the solver options their loss uses (not
    ``rank``: their rank is that of the factors passed in), ``"objective"`` the loss
    and ``lam``, ``"predict"`` (``LEML.set_factors`` and the prediction methods)
    ``fit_intercept`` and the loss's threshold.  A driver that stores a step's
    results keys them by exactly these (``tasks.leml``), so a change of any other
    parameter -- the number of outer iterations for every step, the H-step's solver
    for a W-step -- reuses them.  ``"auto"`` values are given resolved
    (:func:`resolved_params`), so a key holds what the step ran with.

    Parameters
    ----------
    params : mapping
        The estimator's parameters.
    step : {"start", "w_step", "h_step", "objective", "predict", "early_stopping_split"}
    distributed : bool, default=False
        The step runs on a backend (row blocks), as ``w_step(backend=...)``.

    Returns
    -------
    dict
        Parameter name -> value: a subset of ``params``, ``"auto"`` resolved.
    """
    squared = {**DEFAULTS, **params}["loss"] == "squared"
    resolved = resolved_params(params, distributed=distributed)
    prepare = ["fit_intercept", "dtype"]
    bound_w = not squared and resolved["w_solver"] == "bound"
    names = {
        "start": prepare + ["rank", "random_state", "loss"] + (
            [] if squared else ["squared_init_iter"]) + (
            ["lam", "cg_max_iter", "cg_tol", "cg_preconditioner"]
            if squared_start(params) else []),
        "w_step": prepare + ["loss", "lam", "cg_max_iter", "cg_tol"] + (
            ["cg_preconditioner"] if squared else ["newton_max_iter", "w_solver"]) + (
            ["cg_preconditioner"] if bound_w else []),
        "h_step": prepare + ["loss", "lam"] + (
            [] if squared else ["newton_max_iter", "h_solver"]) + (
            ["cg_max_iter", "cg_tol"]
            if not squared and resolved["h_solver"] == "cg" else []),
        "objective": prepare + ["loss", "lam"],
        "predict": ["fit_intercept", "loss"],
        "early_stopping_split": ["validation_fraction", "random_state"],
    }
    if step not in names:
        raise ValueError(f"step must be one of {STEPS}, got {step!r}")
    values = {**params, **resolved}
    return {name: values[name] for name in names[step]}
