"""Each method's parameters are declared once (``algorithms/<method>/params.py``): the
estimator and the flow's config schema accept the same values.

For every declared LEML parameter, values at and just beyond each of its bounds, of the
wrong kind and the declared choices are given to the estimator (``LEML.check_params``) and to
the config (``ModelConfig``): each must accept exactly what the other accepts.  The same for
the relation discovery method's config against its declared bounds (it has no check of its
own beyond ``k_values``).  The estimators' signatures, the losses and StRip's variants are
compared with the declarations.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from pydantic import ValidationError

from scarce.algorithms.leml import LEML
from scarce.algorithms.leml import params as leml_params
from scarce.algorithms.leml.losses import LOSSES
from scarce.algorithms.relations import params as relations_params
from scarce.algorithms.relations.contexts import build_contexts
from scarce.algorithms.relations.model import RelationDiscovery
from scarce.algorithms.strip import params as strip_params
from scarce.algorithms.strip.ripper import VARIANTS, StRip
from scarce.flows.leml_config import ModelConfig
from scarce.flows.relations_config import RelationsConfig


def probes(param) -> list:
    """Values at and just beyond every bound of ``param``, of the wrong kind, and its
    choices."""
    if param.kind == "choice":
        return [*param.choices, "bogus", None, 1]
    if param.kind == "bool":
        return [True, False, 1, "true", None]
    out: list = [param.default, "x", None, True]
    step = 1 if param.kind in ("count", "count_or_auto") else 1e-9
    for bound in (param.ge, param.gt, param.le, param.lt):
        if bound is not None:
            out += [bound, bound - step, bound + step]
    if param.kind in ("count", "count_or_auto"):
        out += [2.0, 10**6]
    else:
        out += [float("inf"), float("nan"), 10**6]
    if param.kind == "count_or_auto":
        out += [leml_params.AUTO, "AUTO"]
    return out


def _leml_accepts(name, value) -> bool:
    try:
        LEML(**{name: value}).check_params()
    except ValueError:
        return False
    return True


def _config_accepts(model, name, value, **base) -> bool:
    try:
        model(**{**base, name: value})
    except ValidationError:
        return False
    return True


LEML_CASES = [(name, value) for name, p in leml_params.PARAMS.items() for value in probes(p)
              if not (name == "dtype" and not isinstance(value, str))]


@pytest.mark.parametrize("name, value", LEML_CASES, ids=[f"{n}={v!r}" for n, v in LEML_CASES])
def test_the_leml_estimator_and_its_config_accept_the_same_values(name, value):
    assert _leml_accepts(name, value) == _config_accepts(ModelConfig, name, value)


def test_every_leml_parameter_is_declared_and_its_default_is_the_signatures():
    signature = inspect.signature(LEML).parameters
    declared = {n: p.default for n, p in signature.items()
                if n not in ("random_state", "verbose", "callback")}
    assert declared == leml_params.DEFAULTS
    assert set(ModelConfig.model_fields) == set(leml_params.PARAMS)


def test_the_declared_losses_are_the_loss_functions():
    assert tuple(LOSSES) == leml_params.LOSS_NAMES
    assert tuple(n for n, loss in LOSSES.items() if loss.constant_curvature) == (
        leml_params.CONSTANT_CURVATURE)


def test_a_leml_numpy_dtype_is_taken_by_the_estimator():
    assert _leml_accepts("dtype", np.float64) and not _leml_accepts("dtype", np.float16)


RELATIONS_BASE = {"data": ["x.txt"]}
RELATIONS_CASES = [(name, value) for name, p in relations_params.PARAMS.items()
                   for value in probes(p)]


@pytest.mark.parametrize("name, value", RELATIONS_CASES,
                         ids=[f"{n}={v!r}" for n, v in RELATIONS_CASES])
def test_the_relations_config_holds_the_declared_bounds(name, value):
    within = relations_params.PARAMS[name].holds(value)
    if within and name in ("k_low", "k_high"):  # and K_low <= K_high with the other default
        k = {**relations_params.DEFAULTS, name: value}
        within = k["k_low"] <= k["k_high"]
    assert _config_accepts(RelationsConfig, name, value, **RELATIONS_BASE) == within


def test_the_relations_estimators_defaults_are_the_declared_ones():
    signature = inspect.signature(RelationDiscovery).parameters
    assert {n: p.default for n, p in signature.items() if n != "random_state"} == (
        relations_params.DEFAULTS)
    contexts = inspect.signature(build_contexts).parameters
    assert {n: contexts[n].default for n in relations_params.CONTEXT_PARAMS} == (
        relations_params.CONTEXT_DEFAULTS)


def test_strips_variants_and_defaults_are_the_declared_ones():
    assert tuple(VARIANTS) == strip_params.VARIANTS
    signature = inspect.signature(StRip).parameters
    assert {n: signature[n].default for n in strip_params.PARAMS} == strip_params.DEFAULTS


@pytest.mark.parametrize("sizes", [(1000, 50, 20), (10**8, 10**7, 10**6)])
def test_the_leml_config_checks_the_factors_memory_as_the_estimator_does(sizes):
    """The checks before a run ask the config (no estimator imported) what the estimator's
    ``check_memory`` answers: the same pass, or the same one-line refusal."""
    from scarce.algorithms.memory import MemoryBudgetError

    said = []
    for model in (LEML(rank=64, fit_intercept=True), ModelConfig(rank=64, fit_intercept=True)):
        try:
            model.check_memory(*sizes, fully_observed=False, what="x: ")
            said.append(None)
        except MemoryBudgetError as exc:
            said.append(str(exc))
    assert said[0] == said[1]
    assert (said[0] is None) == (sizes[0] == 1000)
