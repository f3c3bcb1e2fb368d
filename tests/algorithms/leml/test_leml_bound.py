"""LEML's bound (majorise-minimise) solvers for the logistic and squared-hinge losses:
each step against the minimiser of the quadratic bound built from explicit Kronecker
features, monotone decrease, convergence to the half-step's minimiser, dtypes."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import scarce.algorithms.leml.w_step as leml_w_step
from scarce.algorithms.leml import LEML, objective
from scarce.algorithms.leml.losses import derivative_into, get_loss
from tests.algorithms.leml.test_leml import h_step, kronecker_reference, prepare_data, w_step

MARGIN_LOSSES = ["logistic", "sqhinge"]


def problem(seed, n=12, d=5, n_labels=4, k=3, masked=False):
    rng = np.random.default_rng(seed)
    Xd = rng.standard_normal((n, d))
    Xd[rng.random((n, d)) < 0.4] = 0.0
    Y = (rng.random((n, n_labels)) < 0.4).astype(float)
    mask = (rng.random((n, n_labels)) < 0.6) if masked else None
    if mask is not None:
        mask[0, 0] = False
    H = rng.standard_normal((n_labels, k))
    W = 0.5 * rng.standard_normal((d, k))
    return Xd, Y, mask, H, W


def bound_step_reference(Xd, Y, mask, H, W, lam, loss):
    """One bound step from explicit x~_ij = vec(x_i h_j^T): the gradient over Omega and
    the bound's Hessian c sum_{all (i, j)} x~ x~^T + lam I (Kronecker features)."""
    loss = get_loss(loss)
    n, n_labels = Y.shape
    omega = np.ones_like(Y, dtype=bool) if mask is None else mask
    feats = np.array([np.outer(Xd[i], H[j]).ravel()
                      for i in range(n) for j in range(n_labels)])
    obs = omega.ravel()
    w = W.ravel()
    z = feats[obs] @ w
    g = feats[obs].T @ loss.derivative(Y.ravel()[obs], z) + lam * w
    B = loss.curvature_bound * feats.T @ feats + lam * np.eye(w.size)
    return (w - np.linalg.solve(B, g)).reshape(W.shape)


@pytest.mark.parametrize("loss", MARGIN_LOSSES)
@pytest.mark.parametrize("masked", [None, "dense", "sparse"])
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("eig", [True, False])
def test_bound_w_step_equals_the_kronecker_bound_minimiser(loss, masked, sparse, eig,
                                                           monkeypatch):
    if not eig:  # the CG path used when d' is large, run to convergence
        monkeypatch.setattr(leml_w_step, "_EIG_MAX", 0)
    Xd, Y, mask, H, W = problem(1, masked=masked is not None)
    X = sp.csr_matrix(Xd) if sparse else Xd
    lam = 0.7
    data = prepare_data(X, Y, mask, dtype=np.float64, entries=masked or "auto")
    got, info = w_step(data, H, lam, loss, W0=W, newton_max_iter=1, w_solver="bound",
                       cg_max_iter=200, cg_tol=1e-14)
    want = bound_step_reference(Xd, Y, mask, H, W, lam, loss)
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)
    assert info["newton_iter"] == 1


@pytest.mark.parametrize("loss", MARGIN_LOSSES)
@pytest.mark.parametrize("masked", [None, "dense", "sparse"])
def test_bound_h_step_equals_per_label_bound_minimiser(loss, masked):
    Xd, Y, mask, _, W = problem(2, n=15, masked=masked is not None)
    lam = 0.4
    data = prepare_data(Xd, Y, mask, dtype=np.float64, entries=masked or "auto")
    H0 = np.random.default_rng(3).standard_normal((Y.shape[1], W.shape[1]))
    got, _ = h_step(data, W, lam, loss, H0=H0, newton_max_iter=1, h_solver="bound")
    f = get_loss(loss)
    A = Xd @ W
    omega = np.ones_like(Y, dtype=bool) if mask is None else mask
    for j in range(Y.shape[1]):
        Aj, yj = A[omega[:, j]], Y[omega[:, j], j]
        g = Aj.T @ f.derivative(yj, Aj @ H0[j]) + lam * H0[j]
        M = f.curvature_bound * Aj.T @ Aj + lam * np.eye(W.shape[1])
        np.testing.assert_allclose(got[j], H0[j] - np.linalg.solve(M, g), rtol=1e-9,
                                   atol=1e-11)


def test_curvature_bounds_hold():
    z = np.linspace(-30, 30, 6001)
    for name in ("squared", "logistic", "sqhinge"):
        loss = get_loss(name)
        for y in (0.0, 1.0):
            assert loss.second_derivative(np.full_like(z, y), z).max() <= loss.curvature_bound
    assert get_loss("logistic").curvature_bound == 0.25


@pytest.mark.parametrize("loss", MARGIN_LOSSES)
@pytest.mark.parametrize("masked", [False, True])
def test_bound_steps_never_increase_the_objective_and_reach_the_minimiser(loss, masked):
    Xd, Y, mask, H, W = problem(4, n=20, masked=masked)
    lam = 0.5
    data = prepare_data(sp.csr_matrix(Xd), Y, mask, dtype=np.float64)
    values = [objective(data, W, H, lam, loss)]
    Wc = W
    for _ in range(30):
        Wc, _ = w_step(data, H, lam, loss, W0=Wc, newton_max_iter=1, w_solver="bound")
        values.append(objective(data, Wc, H, lam, loss))
    assert all(b <= a + 1e-12 for a, b in zip(values, values[1:], strict=False))
    W_bound, _ = w_step(data, H, lam, loss, W0=W, newton_max_iter=3000, w_solver="bound")
    grad, _, _ = kronecker_reference(Xd, Y, mask, H, W_bound, lam, loss)
    assert np.abs(grad).max() < 1e-8  # the W-step's minimiser (its problem is convex)
    Hc, hv = H, [objective(data, W_bound, H, lam, loss)]
    for _ in range(10):
        Hc, _ = h_step(data, W_bound, lam, loss, H0=Hc, newton_max_iter=1, h_solver="bound")
        hv.append(objective(data, W_bound, Hc, lam, loss))
    assert all(b <= a + 1e-12 for a, b in zip(hv, hv[1:], strict=False))
    H_bound, _ = h_step(data, W_bound, lam, loss, H0=H, newton_max_iter=3000, h_solver="bound")
    H_newton, _ = h_step(data, W_bound, lam, loss, H0=H, newton_max_iter=60)
    np.testing.assert_allclose(H_bound, H_newton, atol=1e-6)


@pytest.mark.parametrize("loss", MARGIN_LOSSES)
def test_bound_solvers_keep_float32_and_the_estimator_runs_them(loss):
    Xd, Y, _, _, _ = problem(5, n=30, d=6, n_labels=5)
    common = dict(rank=3, lam=0.5, loss=loss, outer_iterations=4, fit_intercept=True,
                  random_state=0, newton_max_iter=2)
    model = LEML(w_solver="bound", h_solver="bound", **common).fit(sp.csr_matrix(Xd), Y)
    assert model.W_.dtype == np.float32 and model.H_.dtype == np.float32
    assert all(b <= a * (1 + 1e-5) for a, b in zip(model.objective_, model.objective_[1:],
                                                   strict=False))
    tron = LEML(w_solver="tron", h_solver="direct", **common).fit(sp.csr_matrix(Xd), Y)
    assert not np.allclose(model.W_, tron.W_)
    # The squared loss ignores both solvers.
    sq = dict(common, loss="squared")
    np.testing.assert_array_equal(LEML(w_solver="bound", h_solver="bound", **sq).fit(Xd, Y).W_,
                                  LEML(**sq).fit(Xd, Y).W_)
    with pytest.raises(ValueError, match="w_solver"):
        LEML(w_solver="lbfgs").fit(Xd, Y)
    data = prepare_data(Xd, Y, dtype=np.float32, fit_intercept=True)
    with pytest.raises(ValueError, match="w_solver"):
        w_step(data, np.ones((5, 3)), 1.0, loss, w_solver="exact")
    # The bound W-step solves through X^T X held in this process: not on a backend.
    with pytest.raises(ValueError, match="w_solver 'bound' runs on one process"):
        w_step(data, np.ones((5, 3)), 1.0, loss, w_solver="bound", backend=object())
    LEML(loss=loss, w_solver="tron").check_params(distributed=True)
    LEML(loss="squared", w_solver="bound").check_params(distributed=True)  # unused there


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_derivative_into_equals_derivative(dtype):
    rng = np.random.default_rng(6)
    z = (rng.standard_normal((300, 250)) * 30).astype(dtype)  # > one block, exp overflows
    y = (rng.random(z.shape) < 0.3).astype(dtype)
    for name in ("squared", "logistic", "sqhinge"):
        loss = get_loss(name)
        want = loss.derivative(y, z)
        work = z.copy()
        got = derivative_into(loss, y, work)
        assert got.dtype == dtype
        # expit(z) - 1 cancels near z >> 0: absolute error up to 2 ulp of 1 either way.
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-14,
                                   atol=2.5e-7 if dtype == np.float32 else 1e-15)
    assert derivative_into("logistic", y, work) is work
