"""LEML as a driver sees it: ``fit`` is the loop over the step methods, each step reads only
the parameters ``step_params`` lists, and ``check_params`` holds every rule."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from scarce.algorithms.leml import LEML
from scarce.algorithms.leml.model import STEPS


def problem(seed=0, n=40, d=7, n_labels=6, masked=False):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.5, random_state=seed, format="csr")
    Y = (rng.random((n, n_labels)) < 0.3).astype(float)
    mask = (rng.random((n, n_labels)) < 0.6) if masked else None
    return X, Y, mask


CASES = [
    dict(loss="squared"),
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


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("base", [
    dict(loss="squared"),
    dict(loss="logistic", fit_intercept=True, squared_init_iter=1, h_solver="cg"),
    dict(loss="sqhinge", fit_intercept=True, w_solver="bound", h_solver="bound"),
])
def test_a_step_reads_no_parameter_outside_its_step_params(step, base):
    """What a stored step is keyed by: changing any other parameter gives the same result."""
    X, Y, mask = problem(3, masked=True)
    rng = np.random.default_rng(4)
    W, H = 0.3 * rng.standard_normal((8, 3)), 0.3 * rng.standard_normal((6, 3))
    model = LEML(rank=3, random_state=1, **base)
    listed = model.step_params(step)
    assert set(listed) <= set(model.get_params()) and "outer_iterations" not in listed
    want = _run(model, step, X, Y, mask, W, H)
    for name, value in OTHER.items():
        if name in listed or name in base:
            continue
        other = LEML(**{**model.get_params(), name: value})
        other.check_params()
        assert _same(_run(other, step, X, Y, mask, W, H), want), (step, name)


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
