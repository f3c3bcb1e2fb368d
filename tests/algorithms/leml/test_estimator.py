"""LEML as a driver sees it: ``fit`` is the loop over the step methods, each step reads only
the parameters ``step_params`` lists, and ``check_params`` holds every rule."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
import scipy.sparse as sp

from scarce.algorithms.leml import H_SOLVERS, LEML, W_SOLVERS
from scarce.algorithms.leml.losses import LOSSES
from scarce.algorithms.leml.model import AUTO, AUTO_SQUARED_INIT_ITER, STEPS
from scarce.algorithms.leml.w_step import PRECONDITIONERS


def problem(seed=0, n=40, d=7, n_labels=6, masked=False):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.5, random_state=seed, format="csr")
    Y = (rng.random((n, n_labels)) < 0.3).astype(float)
    mask = (rng.random((n, n_labels)) < 0.6) if masked else None
    return X, Y, mask


CASES = [
    dict(loss="squared"),
    dict(loss="logistic", cg_preconditioner="diagonal"),  # "auto": squared start, bound steps
    dict(loss="logistic", squared_init_iter=2),
    dict(loss="sqhinge", h_solver="cg", w_solver="bound"),
    dict(loss="logistic", h_solver="bound", fit_intercept=False, dtype="float64"),
]


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("params", CASES)
def test_fit_is_the_loop_over_the_step_methods(params, masked):
    X, Y, mask = problem(1, masked=masked)
    est = LEML(rank=3, lam=0.6, outer_iterations=3, random_state=2, **params).fit(X, Y, mask)
    # The driver's loop, written here as a flow runs it: one step method at a time.
    model = LEML(rank=3, lam=0.6, random_state=2, **params)
    data = model.prepare(X, Y, mask)
    W, H = model.start(data)
    objectives = []
    for _ in range(3):
        W, _ = model.w_step(data, W, H)
        H, _ = model.h_step(data, W, H)
        objectives.append(model.objective(data, W, H))
    np.testing.assert_array_equal(W, est.W_)
    np.testing.assert_array_equal(H, est.H_)
    assert objectives == est.objective_ and est.n_iter_ == 3
    assert W.dtype == np.dtype(params.get("dtype", "float32"))
    np.testing.assert_array_equal(model.set_factors(W, H).predict_top_k(X, 3),
                                  est.predict_top_k(X, 3))


# Another value for every parameter a step might read.
OTHER = dict(rank=4, lam=0.3, outer_iterations=2, cg_max_iter=2, cg_tol=0.5,
             cg_preconditioner="diagonal", newton_max_iter=1, fit_intercept=False,
             h_solver="cg", w_solver="bound", squared_init_iter=1, dtype="float64",
             random_state=9, verbose=True, callback=print, tol=0.5, early_stopping=True,
             validation_fraction=0.5, n_iter_no_change=5)


def _run(model: LEML, step: str, X, Y, mask, W, H):
    data = model.prepare(X, Y, mask)
    W = W[: data.n_features].astype(data.dtype)
    if step == "start":
        return model.start(data)
    if step == "w_step":
        return model.w_step(data, W, H)[0]
    if step == "h_step":
        return model.h_step(data, W, H)[0]
    if step == "objective":
        return model.objective(data, W, H)
    if step == "early_stopping_split":
        return model.early_stopping_split(X, Y, mask)
    model.set_factors(W, H)
    return model.predict(X), model.predict_top_k(X, 2)


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    if sp.issparse(a):
        return (a != b).nnz == 0
    return np.array_equal(a, b)


BASES = [
    dict(loss="squared"),
    dict(loss="squared", cg_preconditioner="diagonal"),
    dict(loss="logistic", fit_intercept=True, squared_init_iter=1, h_solver="cg"),
    dict(loss="sqhinge", fit_intercept=True, w_solver="bound", h_solver="bound"),
    dict(loss="logistic"),  # "auto": the paper's path
    dict(loss="sqhinge", cg_preconditioner="diagonal"),  # "auto": squared start, bound steps
]


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("base", BASES)
def test_a_step_reads_no_parameter_outside_its_step_params(step, base):
    """What a stored step is keyed by: changing any other parameter gives the same result,
    unless it changes what an "auto" in the listed ones resolves to (then the key changes)."""
    X, Y, mask = problem(3, masked=True)
    rng = np.random.default_rng(4)
    W, H = 0.3 * rng.standard_normal((8, 3)), 0.3 * rng.standard_normal((6, 3))
    model = LEML(rank=3, random_state=1, **base)
    listed = model.step_params(step)
    assert set(listed) <= set(model.get_params()) and "outer_iterations" not in listed
    assert AUTO not in listed.values()
    want = _run(model, step, X, Y, mask, W, H)
    for name, value in OTHER.items():
        if name in listed or name in base:
            continue
        other = LEML(**{**model.get_params(), name: value})
        other.check_params()
        if other.step_params(step) != listed:  # a resolved value changed: so does the key
            continue
        assert _same(_run(other, step, X, Y, mask, W, H), want), (step, name)


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("base", BASES)
def test_a_step_built_from_its_step_params_alone_gives_the_same_result(step, base):
    """What a driver does (tasks.leml): LEML(**step_params) per step, "auto" resolved."""
    X, Y, mask = problem(3, masked=True)
    rng = np.random.default_rng(4)
    W, H = 0.3 * rng.standard_normal((8, 3)), 0.3 * rng.standard_normal((6, 3))
    model = LEML(rank=3, random_state=1, **base)
    alone = LEML(**model.step_params(step))
    assert _same(_run(alone, step, X, Y, mask, W, H), _run(model, step, X, Y, mask, W, H))


def _expected_resolution(loss, preconditioner, fit_intercept, rank, distributed):
    """The rule of LEML.resolved_params, written out: a margin loss with the preconditioned
    CG gets a squared start (it needs the intercept and rank >= 2) and bound steps (TRON on
    row blocks); every other case the paper's path."""
    bound = loss != "squared" and preconditioner == "diagonal"
    start = AUTO_SQUARED_INIT_ITER if bound and fit_intercept and rank >= 2 else 0
    return {"squared_init_iter": start,
            "w_solver": "bound" if bound and not distributed else "tron",
            "h_solver": "bound" if bound else "direct"}


AUTO_PARAMS = [name for name, value in LEML().get_params().items() if value == AUTO]


def test_the_auto_parameters_are_the_solver_keys():
    assert sorted(AUTO_PARAMS) == ["h_solver", "squared_init_iter", "w_solver"]


@pytest.mark.parametrize(("loss", "preconditioner"),
                         list(itertools.product(sorted(LOSSES), PRECONDITIONERS)))
def test_auto_resolves_by_loss_and_preconditioner_and_get_params_keeps_what_was_given(
        loss, preconditioner):
    for fit_intercept, rank, distributed in itertools.product([True, False], [1, 2, 5],
                                                              [False, True]):
        model = LEML(loss=loss, cg_preconditioner=preconditioner, fit_intercept=fit_intercept,
                     rank=rank)
        got = model.resolved_params(distributed=distributed)
        assert got == _expected_resolution(loss, preconditioner, fit_intercept, rank,
                                           distributed)
        assert {name: model.get_params()[name] for name in AUTO_PARAMS} == dict.fromkeys(
            AUTO_PARAMS, AUTO)
        assert got["w_solver"] in W_SOLVERS and got["h_solver"] in H_SOLVERS
        # What the steps run with is what the listed parameters say.
        assert model.step_params("w_step", distributed=distributed).get(
            "w_solver", got["w_solver"]) == got["w_solver"]
        # A value given is kept.
        given = LEML(loss=loss, cg_preconditioner=preconditioner, squared_init_iter=0,
                     w_solver="tron", h_solver="cg")
        assert given.resolved_params(distributed=distributed) == {
            "squared_init_iter": 0, "w_solver": "tron", "h_solver": "cg"}


@pytest.mark.parametrize("masked", [False, True])
def test_fit_keeps_the_resolved_values_and_runs_with_them(masked):
    X, Y, mask = problem(5, masked=masked)
    common = dict(rank=3, lam=0.6, outer_iterations=2, random_state=0)
    auto = LEML(loss="logistic", cg_preconditioner="diagonal", **common).fit(X, Y, mask)
    assert (auto.squared_init_iter_, auto.w_solver_, auto.h_solver_) == (
        AUTO_SQUARED_INIT_ITER, "bound", "bound")
    assert auto.get_params()["w_solver"] == AUTO
    given = LEML(loss="logistic", cg_preconditioner="diagonal", w_solver="bound",
                 h_solver="bound", squared_init_iter=AUTO_SQUARED_INIT_ITER,
                 **common).fit(X, Y, mask)
    np.testing.assert_array_equal(auto.W_, given.W_)
    np.testing.assert_array_equal(auto.H_, given.H_)


# Every setting that turns off what another relies on, and its warning; then settings that
# turn off nothing.
WARNED = [
    (dict(loss="logistic", cg_preconditioner="diagonal", w_solver="tron"), False,
     "does not act on the logistic loss's TRON W-step"),
    (dict(loss="sqhinge", cg_preconditioner="diagonal"), True,
     "does not act on the sqhinge loss's TRON W-step"),
    (dict(loss="logistic", cg_preconditioner="diagonal", fit_intercept=False), False,
     "cannot start the logistic loss from the squared loss"),
    (dict(loss="sqhinge", cg_preconditioner="diagonal", rank=1), False,
     "cannot start the sqhinge loss from the squared loss"),
]
QUIET = [
    dict(loss="squared", cg_preconditioner="diagonal"),
    dict(loss="squared", cg_preconditioner="diagonal", fit_intercept=False, rank=1),
    dict(loss="logistic"),
    dict(loss="logistic", cg_preconditioner="diagonal"),
    dict(loss="sqhinge", cg_preconditioner="diagonal", w_solver="bound"),
    dict(loss="logistic", fit_intercept=False),
]


@pytest.mark.parametrize(("params", "distributed", "message"), WARNED)
def test_a_setting_that_turns_off_what_another_relies_on_is_logged(params, distributed,
                                                                   message, caplog):
    model = LEML(**params)
    assert any(message in line for line in model.interaction_warnings(distributed=distributed))
    with caplog.at_level(logging.WARNING, logger="scarce.algorithms.leml"):
        model.resolve_params(distributed=distributed)
    assert [r.levelno for r in caplog.records if message in r.getMessage()] == [
        logging.WARNING]
    assert all(r.name.startswith("scarce.algorithms.leml") for r in caplog.records)


@pytest.mark.parametrize("params", QUIET)
def test_a_setting_that_turns_off_nothing_is_not_warned(params, caplog):
    with caplog.at_level(logging.WARNING, logger="scarce.algorithms.leml"):
        LEML(**params).resolve_params()
    assert not caplog.records


def test_fit_logs_the_warning_and_what_auto_resolved_to(caplog):
    X, Y, _ = problem(6)
    with caplog.at_level(logging.INFO, logger="scarce.algorithms.leml"):
        LEML(rank=3, loss="logistic", cg_preconditioner="diagonal", fit_intercept=False,
             outer_iterations=1, random_state=0).fit(X, Y)
    said = [r.getMessage() for r in caplog.records]
    assert any("squared_init_iter auto -> 0" in line and "w_solver auto -> bound" in line
               for line in said), said
    assert any("cannot start the logistic loss" in line for line in said), said


def test_step_params_follow_the_loss_and_solvers():
    squared = LEML(loss="squared")
    assert set(squared.step_params("w_step")) == {"fit_intercept", "dtype", "loss", "lam",
                                                  "cg_max_iter", "cg_tol", "cg_preconditioner"}
    assert set(squared.step_params("h_step")) == {"fit_intercept", "dtype", "loss", "lam"}
    assert set(squared.step_params("start")) == {"fit_intercept", "dtype", "rank",
                                                 "random_state", "loss"}
    margin = LEML(loss="logistic", squared_init_iter=2, h_solver="cg")
    assert {"newton_max_iter", "w_solver"} <= set(margin.step_params("w_step"))
    assert {"h_solver", "cg_max_iter", "cg_tol"} <= set(margin.step_params("h_step"))
    assert {"squared_init_iter", "lam", "loss"} <= set(margin.step_params("start"))
    assert "rank" not in margin.step_params("w_step") | margin.step_params("h_step")
    with pytest.raises(ValueError, match="step must be one of"):
        margin.step_params("fit")


def test_check_params_holds_every_rule_and_names_the_parameter():
    LEML().check_params()
    LEML(dtype=np.float64).check_params()  # a numpy type works as well as its name
    bad = [
        (dict(rank=True), "rank must be a positive integer"),
        (dict(rank=0), "rank"),
        (dict(lam=float("inf")), "lam must be a positive finite number"),
        (dict(cg_tol=float("nan")), "cg_tol"),
        (dict(outer_iterations=-1), "outer_iterations"),
        (dict(dtype="float16"), "dtype must be 'float32' or 'float64'"),
        (dict(dtype="bogus"), "dtype"),
        (dict(h_solver="exact"), "h_solver"),
        (dict(squared_init_iter="three"), "squared_init_iter must be a non-negative integer "
                                          "or 'auto'"),
        (dict(squared_init_iter=-1), "squared_init_iter"),
        (dict(w_solver="lbfgs"), "w_solver"),
        (dict(cg_preconditioner="jacobi"), "cg_preconditioner must be one of"),
        (dict(loss="logistic", squared_init_iter=1, fit_intercept=False), "fit_intercept"),
        (dict(loss="logistic", squared_init_iter=1, rank=1), "rank >= 2"),
    ]
    for params, message in bad:
        with pytest.raises(ValueError, match=message):
            LEML(**params).check_params()
    LEML(loss="squared", squared_init_iter=1, fit_intercept=False).check_params()  # unused
    with pytest.raises(ValueError, match="one process"):
        LEML(loss="sqhinge", w_solver="bound").check_params(distributed=True)
