"""LEML: fast products against explicit Kronecker features, the half-steps (the estimator's
step methods) against direct solves, the alternating loop, dtypes, prediction and the
baselines."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.multiclass import OneVsRestClassifier

from scarce.algorithms.leml import (
    LEML,
    BinaryRelevance,
    ClosedFormLowRank,
    WStepProducts,
    objective,
    w_gradient,
)
from scarce.algorithms.leml import prepare_data as _prepare_data
from scarce.algorithms.leml.losses import LOSSES, get_loss
from scarce.algorithms.leml.predict import top_k_from_scores
from scarce.algorithms.leml.solvers import conjugate_gradient, trust_region_newton
from scarce.algorithms.leml.w_step import (
    W_SOLVERS,
    kronecker_preconditioner,
    observed_gram_diagonal,
    observed_shares,
)

LOSS_NAMES = sorted(LOSSES)
STRATEGIES = ["dense", "sparse"]


def prepare_data(X, Y, mask=None, *, dtype, fit_intercept=False, entries="auto"):
    """The data of the half-step tests: no intercept unless asked."""
    return _prepare_data(X, Y, mask, fit_intercept=fit_intercept, dtype=dtype, entries=entries)


def w_step(data, H, lam, loss, W0=None, backend=None, **params):
    """One W-step of ``LEML(lam, loss, **params)`` from ``W0`` (default zeros)."""
    W0 = np.zeros((data.n_features, np.shape(H)[1])) if W0 is None else W0
    return LEML(lam=lam, loss=loss, **params).w_step(data, W0, H, backend=backend)


def h_step(data, W, lam, loss, H0=None, **params):
    """One H-step of ``LEML(lam, loss, **params)`` from ``H0`` (default zeros)."""
    H0 = np.zeros((data.n_labels, np.shape(W)[1])) if H0 is None else H0
    return LEML(lam=lam, loss=loss, **params).h_step(data, W, H0)


def make_problem(seed, n=9, d=5, n_labels=4, k=3, sparse=True, mask_density=0.5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X[rng.random((n, d)) < 0.4] = 0.0
    Y = (rng.random((n, n_labels)) < 0.4).astype(float)
    mask = None
    if mask_density is not None:
        mask = rng.random((n, n_labels)) < mask_density
        mask[0, 0] = False  # at least one missing entry
    H = rng.standard_normal((n_labels, k))
    W = 0.5 * rng.standard_normal((d, k))
    return (sp.csr_matrix(X) if sparse else X), X, Y, mask, H, W


def kronecker_reference(Xd, Y, mask, H, W, lam, loss):
    """Gradient and Hessian of J(., H) built from explicit x~_ij = vec(x_i h_j^T)."""
    loss = get_loss(loss)
    n, n_labels = Y.shape
    omega = np.ones_like(Y, dtype=bool) if mask is None else mask
    rows, cols = np.nonzero(omega)
    feats = np.array([np.outer(Xd[i], H[j]).ravel() for i, j in zip(rows, cols, strict=True)])
    feats = feats.reshape(rows.size, W.size)  # also when Omega is empty
    w = W.ravel()
    z = feats @ w
    y = Y[rows, cols]
    grad = feats.T @ loss.derivative(y, z) + lam * w
    hess = feats.T @ (loss.second_derivative(y, z)[:, None] * feats) + lam * np.eye(w.size)
    value = loss.value(y, z).sum() + 0.5 * lam * (w @ w + np.sum(H * H))
    return grad.reshape(W.shape), hess, value


# ----------------------------------------------------------------------------- losses
@pytest.mark.parametrize("name", LOSS_NAMES)
def test_loss_derivatives_match_finite_differences(name):
    loss = get_loss(name)
    z = np.linspace(-3, 3, 61) + 0.013  # avoid the hinge kink at exactly +-1
    eps = 1e-6
    for y in (0.0, 1.0):
        yy = np.full_like(z, y)
        num1 = (loss.value(yy, z + eps) - loss.value(yy, z - eps)) / (2 * eps)
        num2 = (loss.derivative(yy, z + eps) - loss.derivative(yy, z - eps)) / (2 * eps)
        np.testing.assert_allclose(loss.derivative(yy, z), num1, atol=1e-6)
        np.testing.assert_allclose(loss.second_derivative(yy, z), num2, atol=1e-5)


def test_loss_values_by_hand():
    assert get_loss("squared").value(np.array([1.0]), np.array([0.25]))[0] == 0.5625
    assert np.isclose(get_loss("logistic").value(np.array([1.0]), np.array([0.0]))[0],
                      np.log(2))
    # y = 0 means margin label -1: loss log(1 + e^{z}).
    assert np.isclose(get_loss("logistic").value(np.array([0.0]), np.array([2.0]))[0],
                      np.log1p(np.exp(2.0)))
    sq = get_loss("sqhinge")
    assert sq.value(np.array([1.0]), np.array([0.5]))[0] == 0.25
    assert sq.value(np.array([1.0]), np.array([1.5]))[0] == 0.0
    assert sq.value(np.array([0.0]), np.array([0.5]))[0] == 2.25
    with pytest.raises(ValueError, match="unknown loss"):
        get_loss("hinge")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fast_loss_formulas_equal_the_textbook_ones(dtype):
    """The in-place forms (softplus(z) - y z, expit(z) - y, ...) against the margin
    forms of the definitions, over z from -60 to 60 and both labels, and broadcast."""
    z = np.concatenate([np.linspace(-60, 60, 241), [-1e-3, 0.0, 1e-3]])
    y = np.tile([0.0, 1.0], (z.size, 1)).T.ravel()
    z = np.tile(z, 2)
    s = 2 * y - 1
    ref = {
        "logistic": (np.logaddexp(0, -s * z), -s / (1 + np.exp(s * z)),
                     np.exp(-np.abs(z)) / (1 + np.exp(-np.abs(z))) ** 2),
        "sqhinge": (np.maximum(1 - s * z, 0) ** 2, -2 * s * np.maximum(1 - s * z, 0),
                    2.0 * (1 - s * z > 0)),
    }
    # expit(z) - y cancels where expit(z) is within rounding of y: absolute error
    # ~ eps against derivatives of size up to 1 (and 2 for the squared hinge).
    tol = dict(rtol=1e-9, atol=1e-15) if dtype == np.float64 else dict(rtol=2e-6, atol=1e-7)
    zc = z.astype(dtype)
    for name, (value, d1, d2) in ref.items():
        f = get_loss(name)
        for got, want in ((f.value(y, zc), value), (f.derivative(y, zc), d1),
                          (f.second_derivative(y, zc), d2)):
            assert got.dtype == dtype and got.shape == z.shape
            np.testing.assert_allclose(got, want, **tol)
        # y broadcast against a column of z, and a scalar z against a vector y.
        np.testing.assert_allclose(f.value(np.array([0.0, 1.0]), zc[:3, None]),
                                   np.stack([f.value(np.zeros(3), zc[:3]),
                                             f.value(np.ones(3), zc[:3])], axis=1))
        assert f.derivative(np.array([0.0, 1.0]), np.asarray(2.0, dtype=dtype)).shape == (2,)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_losses_keep_float32(name):
    loss = get_loss(name)
    z = np.linspace(-2, 2, 7, dtype=np.float32)
    y = (z > 0).astype(np.float32)
    for f in (loss.value, loss.derivative, loss.second_derivative):
        assert f(y, z).dtype == np.float32


# ----------------------------------------------------------------------------- products
@pytest.mark.parametrize("loss", LOSS_NAMES)
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("masked", STRATEGIES + [None])
def test_gradient_and_hessian_vector_equal_kronecker_features(loss, sparse, masked):
    X, Xd, Y, mask, H, W = make_problem(3, sparse=sparse,
                                        mask_density=0.5 if masked else None)
    lam = 0.7
    data = prepare_data(X, Y, mask, dtype=np.float64, entries=masked or "auto")
    grad, hess_vec = w_gradient(data, H, W, lam, loss)
    g_ref, hess_ref, value_ref = kronecker_reference(Xd, Y, mask, H, W, lam, loss)
    np.testing.assert_allclose(grad, g_ref, rtol=1e-10, atol=1e-10)
    V = np.random.default_rng(1).standard_normal(W.shape)
    np.testing.assert_allclose(hess_vec(V), (hess_ref @ V.ravel()).reshape(W.shape),
                               rtol=1e-10, atol=1e-10)
    assert np.isclose(objective(data, W, H, lam, loss), value_ref, rtol=1e-12)


def test_the_squared_losss_hessian_product_multiplied_by_the_gram_in_row_chunks(monkeypatch):
    """The fully observed squared loss's Hessian product applies ``2 H^T H`` to ``X^T X V``
    a chunk of rows at a time, in place: against the Kronecker reference and the product
    taken at once, with chunks of 2 rows (one short at the end)."""
    import scarce.algorithms.leml.w_step as ws

    X, Xd, Y, _, H, W = make_problem(3, sparse=True)
    data = prepare_data(X, Y, dtype=np.float64)
    products = WStepProducts(data, H, W, "squared", gram_left=True)
    V = np.random.default_rng(1).standard_normal(W.shape)
    assert W.shape[0] % 2 == 1
    whole = data.xt_matmul(data.X @ V) @ products.G2
    monkeypatch.setattr(ws, "GRAM_ROWS", 2)
    got = products.hess_vec(V)
    np.testing.assert_allclose(got, whole, rtol=1e-13, atol=1e-13)
    _, hess_ref, _ = kronecker_reference(Xd, Y, None, H, W, 0.0, "squared")
    np.testing.assert_allclose(got, (hess_ref @ V.ravel()).reshape(W.shape), rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize("gram_left", [True, False])
@pytest.mark.parametrize("sparse", [True, False])
def test_the_squared_losss_hessian_product_through_the_dense_gram_or_x_twice(
        gram_left, sparse, monkeypatch):
    """``X^T X V`` is taken through the dense Gram matrix when it has at most
    ``GRAM_ENTRIES_PER_NNZ`` entries per stored entry of ``X``, else as ``X^T (X V)``: both
    routes give the Kronecker reference, and the rule picks by the counts."""
    import scarce.algorithms.leml.data as leml_data

    X, Xd, Y, _, H, W = make_problem(4, sparse=sparse)
    d, stored = Xd.shape[1], (X.nnz if sparse else Xd.size)
    V = np.random.default_rng(2).standard_normal(W.shape)
    _, hess_ref, _ = kronecker_reference(Xd, Y, None, H, W, 0.0, "squared")
    want = (hess_ref @ V.ravel()).reshape(W.shape)
    for per_nnz, uses_gram in ((d * d / stored, True), (0.99 * d * d / stored, False)):
        monkeypatch.setattr(leml_data, "GRAM_ENTRIES_PER_NNZ", per_nnz)
        data = prepare_data(X, Y, dtype=np.float64)
        products = WStepProducts(data, H, W, "squared", gram_left=gram_left)
        assert (products.XtX is not None) == uses_gram
        if uses_gram:
            np.testing.assert_allclose(products.XtX, Xd.T @ Xd, rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(products.hess_vec(V), want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("loss", LOSS_NAMES)
@pytest.mark.parametrize("masked", [STRATEGIES[0], None])
def test_products_for_the_hessian_only_drop_the_point_and_give_the_kronecker_product(
        loss, masked):
    """``for_hess_vec``: the Hessian-vector product of the Kronecker reference without
    ``W`` (nor, squared loss fully observed, ``H``: its Hessian uses only ``2 H^T H``)."""
    X, Xd, Y, mask, H, W = make_problem(3, sparse=True, mask_density=0.5 if masked else None)
    data = prepare_data(X, Y, mask, dtype=np.float64, entries=masked or "auto")
    products = WStepProducts(data, H, W, loss)
    grad = products.gradient()
    hess = products.for_hess_vec()
    assert hess.W is None and hess.z is None
    assert (hess.H is None) == (loss == "squared" and masked is None)
    assert products.W is W and products.H is H  # the original keeps its point
    _, hess_ref, _ = kronecker_reference(Xd, Y, mask, H, W, 0.0, loss)
    V = np.random.default_rng(1).standard_normal(W.shape)
    np.testing.assert_allclose(hess.hess_vec(V), (hess_ref @ V.ravel()).reshape(W.shape),
                               rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(hess.hess_vec(V), products.hess_vec(V))
    np.testing.assert_array_equal(products.gradient(), grad)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 8), d=st.integers(1, 5),
       n_labels=st.integers(1, 5), k=st.integers(1, 4),
       density=st.sampled_from([None, 0.2, 0.7]), loss=st.sampled_from(LOSS_NAMES),
       strategy=st.sampled_from(STRATEGIES))
def test_products_equal_kronecker_on_random_shapes(seed, n, d, n_labels, k, density, loss,
                                                    strategy):
    X, Xd, Y, mask, H, W = make_problem(seed, n, d, n_labels, k, mask_density=density)
    data = prepare_data(X, Y, mask, dtype=np.float64, entries=strategy)
    grad, hess_vec = w_gradient(data, H, W, 0.3, loss)
    g_ref, hess_ref, _ = kronecker_reference(Xd, Y, mask, H, W, 0.3, loss)
    np.testing.assert_allclose(grad, g_ref, rtol=1e-9, atol=1e-9)
    V = np.random.default_rng(seed).standard_normal(W.shape)
    np.testing.assert_allclose(hess_vec(V), (hess_ref @ V.ravel()).reshape(W.shape),
                               rtol=1e-9, atol=1e-9)


# ----------------------------------------------------------------------------- solvers
def test_conjugate_gradient_solves_spd_system_and_counts_iterations():
    rng = np.random.default_rng(0)
    B = rng.standard_normal((12, 12))
    A = B @ B.T / 12 + np.eye(12)
    b = rng.standard_normal((4, 3))  # any shape: A acts on the flattened vector
    x, n_iter = conjugate_gradient(lambda v: (A @ v.ravel()).reshape(v.shape), b,
                                   tol=1e-12, max_iter=100)
    np.testing.assert_allclose(x.ravel(), np.linalg.solve(A, b.ravel()), rtol=1e-8)
    assert 1 <= n_iter <= 14  # exact arithmetic: at most 12
    x2, n2 = conjugate_gradient(lambda v: (A @ v.ravel()).reshape(v.shape), b,
                                x0=x, tol=1e-6, max_iter=100)
    assert n2 == 0 and np.allclose(x2, x)
    _, capped = conjugate_gradient(lambda v: (A @ v.ravel()).reshape(v.shape), b,
                                   tol=1e-12, max_iter=3)
    assert capped == 3


def test_preconditioned_cg_solves_the_system_and_with_the_identity_is_plain_cg():
    rng = np.random.default_rng(1)
    B = rng.standard_normal((30, 30)) * np.logspace(-2, 2, 30)  # columns 4 decades apart
    A = B.T @ B + 0.1 * np.eye(30)
    b = rng.standard_normal((5, 6))
    product = lambda v: (A @ v.ravel()).reshape(v.shape)  # noqa: E731
    jacobi = lambda r: (r.ravel() / np.diag(A)).reshape(r.shape)  # noqa: E731
    x, n_pre = conjugate_gradient(product, b, tol=1e-10, max_iter=500, precondition=jacobi)
    np.testing.assert_allclose(x.ravel(), np.linalg.solve(A, b.ravel()), rtol=1e-6)
    _, n_plain = conjugate_gradient(product, b, tol=1e-10, max_iter=500)
    assert n_pre < n_plain / 2  # Jacobi undoes the columns' scales
    # M = I: the same iterates as plain CG, bit for bit, from zero and from a warm start.
    for x0 in (None, 0.1 * b):
        got = conjugate_gradient(product, b, x0, tol=1e-4, max_iter=7, precondition=np.copy)
        want = conjugate_gradient(product, b, x0, tol=1e-4, max_iter=7)
        assert got[1] == want[1]
        np.testing.assert_array_equal(got[0], want[0])


def test_the_kronecker_preconditioner_inverts_the_hessian_with_the_grams_diagonal():
    rng = np.random.default_rng(4)
    d, k, lam, c = 6, 3, 0.3, 2.0
    g = rng.random(d) * 10
    H = rng.standard_normal((5, k))
    R = rng.standard_normal((d, k))
    # Row-major vec(V) of V -> c diag(g) V H^T H + lam V is (diag(g) (x) c H^T H) + lam I.
    M = np.kron(np.diag(g), c * H.T @ H) + lam * np.eye(d * k)
    got = kronecker_preconditioner(g, H, lam, c, np.float64)(R)
    np.testing.assert_allclose(got.ravel(), np.linalg.solve(M, R.ravel()), rtol=1e-10)


@pytest.mark.parametrize("sparse", [True, False])
def test_preconditioned_squared_w_step_equals_the_direct_solve_in_fewer_products(sparse):
    X, Xd, Y, _, H, _ = make_problem(7, n=40, d=12, n_labels=5, k=3, sparse=sparse,
                                     mask_density=None)
    scale = np.logspace(-2, 1, 12)  # features of very different norms, as word counts are
    X, Xd = X @ sp.diags(scale) if sparse else X * scale, Xd * scale
    lam = 0.05
    data = prepare_data(X, Y, dtype=np.float64)
    W, info = w_step(data, H, lam, "squared", cg_tol=1e-10, cg_max_iter=500,
                     cg_preconditioner="diagonal")
    g0, hess, _ = kronecker_reference(Xd, Y, None, H, np.zeros_like(W), lam, "squared")
    np.testing.assert_allclose(W.ravel(), np.linalg.solve(hess, -g0.ravel()), rtol=1e-6,
                               atol=1e-9)
    _, plain = w_step(data, H, lam, "squared", cg_tol=1e-10, cg_max_iter=500)
    assert info["cg_iter"] < plain["cg_iter"] / 2


def _observed_shares_naive(mask, shape):
    n, n_labels = shape
    return np.ones(n) if mask is None else np.asarray(mask, dtype=float).sum(1) / n_labels


@pytest.mark.parametrize("entries", ["dense", "sparse"])
@pytest.mark.parametrize("sparse", [True, False])
def test_the_observed_grams_diagonal_weighs_each_rows_squares_by_its_observed_share(
        entries, sparse, monkeypatch):
    import scarce.algorithms.leml.data as leml_data

    X, Xd, Y, mask, _, _ = make_problem(11, n=30, d=7, n_labels=6, sparse=sparse)
    data = prepare_data(X, Y, mask, dtype=np.float32, fit_intercept=True, entries=entries)
    Xi = np.hstack([Xd, np.ones((30, 1))]).astype(np.float32).astype(np.float64)
    rho = _observed_shares_naive(mask, Y.shape)
    np.testing.assert_allclose(observed_shares(data), rho, rtol=1e-15)
    monkeypatch.setattr(leml_data, "DIAGONAL_CHUNK", 5)  # several chunks of values or rows
    got = observed_gram_diagonal(data)
    np.testing.assert_allclose(got, (rho[:, None] * Xi ** 2).sum(0), rtol=1e-12)
    assert got.dtype == np.float64
    full = prepare_data(X, Y, dtype=np.float32, fit_intercept=True)
    assert observed_shares(full) is None
    assert observed_gram_diagonal(full) is full.gram_diagonal()  # the kept diagonal
    # Rows without a stored value (no intercept) take no weight from their neighbours.
    Xd[[0, 3, 4, 29]] = 0
    X0 = sp.csr_matrix(Xd) if sparse else Xd
    data = prepare_data(X0, Y, mask, dtype=np.float64, entries=entries)
    np.testing.assert_allclose(observed_gram_diagonal(data), (rho[:, None] * Xd ** 2).sum(0),
                               rtol=1e-12)


@pytest.mark.parametrize("layout", ["dense", "sparse"])
@pytest.mark.parametrize("sparse", [True, False])
def test_a_full_mask_gives_the_fully_observed_preconditioner_bit_for_bit(layout, sparse,
                                                                         monkeypatch):
    """Every entry observed but stored as entries (a row block of partially observed data
    is): every share is 1, so the diagonal and the preconditioner are the fully observed
    ones to the bit."""
    import scarce.algorithms.leml.data as leml_data

    X, _, Y, _, H, _ = make_problem(12, n=25, d=6, n_labels=5, k=3, sparse=sparse,
                                    mask_density=None)
    monkeypatch.setattr(leml_data, "DIAGONAL_CHUNK", 7)
    full = prepare_data(X, Y, dtype=np.float32, fit_intercept=True)
    kept = leml_data.prepare_rows(X, Y, np.ones(Y.shape, dtype=bool), fit_intercept=True,
                                  dtype=np.float32,
                                  layout={"labels": layout, "index_dtype": "int32"})
    assert not kept.fully_observed and kept.n_observed == Y.size
    np.testing.assert_array_equal(observed_shares(kept), np.ones(25))
    np.testing.assert_array_equal(observed_gram_diagonal(kept), full.gram_diagonal())
    R = np.random.default_rng(0).standard_normal((full.n_features, 3)).astype(np.float32)
    got = kronecker_preconditioner(observed_gram_diagonal(kept), H, 0.5, 2.0, np.float32)(R)
    want = kronecker_preconditioner(full.gram_diagonal(), H, 0.5, 2.0, np.float32)(R)
    np.testing.assert_array_equal(got, want)


def test_the_masked_preconditioner_is_the_kronecker_matrix_with_the_observed_diagonal():
    """M = c H^T H (x) diag(sum_i rho_i x_i^2) + lam I, built explicitly, against the
    preconditioner; and M is the Hessian's expectation over uniform masks of each row's
    observed count: sum_i x_i x_i^T (x) rho_i H^T H."""
    X, Xd, Y, mask, H, _ = make_problem(13, n=12, d=4, n_labels=5, k=3)
    lam, c = 0.3, 2.0
    data = prepare_data(X, Y, mask, dtype=np.float64)
    rho = _observed_shares_naive(mask, Y.shape)
    g = (rho[:, None] * Xd ** 2).sum(0)
    M = np.kron(np.diag(g), c * H.T @ H) + lam * np.eye(4 * 3)
    R = np.random.default_rng(1).standard_normal((4, 3))
    got = kronecker_preconditioner(observed_gram_diagonal(data), H, lam, c, np.float64)(R)
    np.testing.assert_allclose(got.ravel(), np.linalg.solve(M, R.ravel()), rtol=1e-10)
    # The diagonal blocks of sum_i rho_i (x_i x_i^T (x) H^T H): M with lam I, c = 2.
    expected = sum(rho[i] * np.kron(np.outer(Xd[i], Xd[i]), H.T @ H) for i in range(12))
    blocks = [slice(f * 3, f * 3 + 3) for f in range(4)]
    for b in blocks:
        np.testing.assert_allclose(c * expected[b, b] + lam * np.eye(3), M[b, b], rtol=1e-12)


@pytest.mark.parametrize("entries", ["dense", "sparse"])
@pytest.mark.parametrize("sparse", [True, False])
def test_preconditioned_masked_squared_w_step_equals_the_direct_solve_in_fewer_products(
        entries, sparse):
    X, Xd, Y, mask, H, _ = make_problem(14, n=40, d=12, n_labels=5, k=3, sparse=sparse,
                                        mask_density=0.4)
    scale = np.logspace(-2, 1, 12)  # features of very different norms, as word counts are
    X, Xd = X @ sp.diags(scale) if sparse else X * scale, Xd * scale
    lam = 0.05
    data = prepare_data(X, Y, mask, dtype=np.float64, entries=entries)
    W, info = w_step(data, H, lam, "squared", cg_tol=1e-10, cg_max_iter=500,
                     cg_preconditioner="diagonal")
    g0, hess, _ = kronecker_reference(Xd, Y, mask, H, np.zeros_like(W), lam, "squared")
    np.testing.assert_allclose(W.ravel(), np.linalg.solve(hess, -g0.ravel()), rtol=1e-6,
                               atol=1e-9)
    _, plain = w_step(data, H, lam, "squared", cg_tol=1e-10, cg_max_iter=500)
    assert info["cg_iter"] < plain["cg_iter"] / 2


@pytest.mark.parametrize("loss", ["logistic", "sqhinge"])
def test_the_preconditioner_leaves_tron_to_plain_cg(loss):
    X, _, Y, mask, H, _ = make_problem(8, n=15, d=5, n_labels=4, k=2)
    for data in (prepare_data(X, Y, mask, dtype=np.float64), prepare_data(X, Y, dtype=np.float64)):
        got = w_step(data, H, 0.5, loss, cg_preconditioner="diagonal", cg_max_iter=4,
                     w_solver="tron")
        want = w_step(data, H, 0.5, loss, cg_max_iter=4, w_solver="tron")
        np.testing.assert_array_equal(got[0], want[0])
    full = prepare_data(X, Y, dtype=np.float64)
    with pytest.raises(ValueError, match="cg_preconditioner must be one of"):
        w_step(full, H, 0.5, "squared", cg_preconditioner="jacobi")


@pytest.mark.parametrize("loss", ["logistic", "sqhinge"])
def test_the_bound_w_steps_cg_above_the_eigendecomposition_limit_is_preconditioned(
        loss, monkeypatch):
    """Above _EIG_MAX features the bound W-step solves c X^T X S H^T H + lam S = R by CG:
    preconditioned, it reaches the exact solve (the eigendecomposition's, below the limit) in
    fewer CG iterations."""
    import scarce.algorithms.leml.w_step as ws

    X, _, Y, mask, H, W0 = make_problem(15, n=40, d=12, n_labels=5, k=3, mask_density=0.5)
    X = X @ sp.diags(np.logspace(-2, 1, 12))
    data = prepare_data(X, Y, mask, dtype=np.float64)
    params = dict(w_solver="bound", newton_max_iter=2, cg_tol=1e-12, cg_max_iter=1000)
    exact, _ = w_step(data, H, 0.05, loss, W0=W0, **params)
    counts = {}
    cg = ws.conjugate_gradient

    def counting(*args, **kwargs):
        x, n_iter = cg(*args, **kwargs)
        key = "diagonal" if kwargs.get("precondition") is not None else "none"
        counts[key] = counts.get(key, 0) + n_iter
        return x, n_iter

    monkeypatch.setattr(ws, "_EIG_MAX", 4)
    monkeypatch.setattr(ws, "conjugate_gradient", counting)
    for preconditioner in ("none", "diagonal"):
        W, _ = w_step(data, H, 0.05, loss, W0=W0, cg_preconditioner=preconditioner, **params)
        np.testing.assert_allclose(W, exact, rtol=1e-6, atol=1e-9)
    assert counts["diagonal"] < counts["none"] / 2


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("w_solver", ["auto", *W_SOLVERS])
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_the_preconditioner_acts_or_the_estimator_says_why_not(loss, w_solver, masked, exact,
                                                               monkeypatch):
    """Every W-step path, with and without missing labels: cg_preconditioner="diagonal"
    changes the W-step, or the estimator warns that it does not act, or the path solves
    exactly (the bound W-step through the eigendecomposition of X^T X)."""
    import scarce.algorithms.leml.w_step as ws

    if not exact:  # the bound W-step by CG, as above _EIG_MAX features
        monkeypatch.setattr(ws, "_EIG_MAX", 2)
    X, _, Y, mask, H, W0 = make_problem(16, n=30, d=8, n_labels=5, k=3,
                                        mask_density=0.5 if masked else None)
    X = X @ sp.diags(np.logspace(-2, 1, 8))
    data = prepare_data(X, Y, mask, dtype=np.float64)
    params = dict(w_solver=w_solver, cg_max_iter=3, newton_max_iter=2)
    plain, _ = w_step(data, H, 0.1, loss, W0=W0, **params)
    model = LEML(lam=0.1, loss=loss, cg_preconditioner="diagonal", **params)
    preconditioned, _ = model.w_step(data, W0, H)
    if np.array_equal(plain, preconditioned):
        solver = model.resolved_params()["w_solver"]
        exact_solve = loss != "squared" and solver == "bound" and exact
        assert exact_solve or model.interaction_warnings(), (loss, solver, masked)


def test_tron_minimises_logistic_regression_like_scipy():
    rng = np.random.default_rng(2)
    Xd = rng.standard_normal((60, 6))
    s = np.where(Xd @ rng.standard_normal(6) + 0.3 * rng.standard_normal(60) > 0, 1.0, -1.0)
    lam = 0.5

    def value(w):
        return np.logaddexp(0, -s * (Xd @ w)).sum() + 0.5 * lam * w @ w

    def fun(w):
        return value(w), Xd @ w

    def grad(w, z):
        p = 1 / (1 + np.exp(s * z))
        D = p * (1 - p)
        return Xd.T @ (-s * p) + lam * w, lambda v: Xd.T @ (D * (Xd @ v)) + lam * v

    res = trust_region_newton(fun, grad, np.zeros(6), tol=1e-10, max_iter=50, cg_tol=0.1)
    ref = minimize(value, np.zeros(6), method="BFGS", options={"gtol": 1e-10})
    np.testing.assert_allclose(res.x, ref.x, atol=1e-6)
    assert res.n_iter >= 1 and res.n_cg >= res.n_iter


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("masked", STRATEGIES + [None])
def test_squared_loss_cg_w_step_equals_direct_solve(sparse, masked):
    X, Xd, Y, mask, H, _ = make_problem(5, n=11, d=4, n_labels=5, k=3, sparse=sparse,
                                        mask_density=0.6 if masked else None)
    lam = 0.4
    data = prepare_data(X, Y, mask, dtype=np.float64, entries=masked or "auto")
    W, _ = w_step(data, H, lam, "squared", cg_tol=1e-13, cg_max_iter=200)
    # Normal equations of sum_Omega (y - x~.w)^2 + lam/2 |w|^2 from explicit features.
    _, hess, _ = kronecker_reference(Xd, Y, mask, H, np.zeros_like(W), lam, "squared")
    g0, _, _ = kronecker_reference(Xd, Y, mask, H, np.zeros_like(W), lam, "squared")
    w_direct = np.linalg.solve(hess, -g0.ravel())
    np.testing.assert_allclose(W.ravel(), w_direct, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("loss", ["logistic", "sqhinge"])
def test_tron_w_step_reaches_the_minimiser(loss):
    X, Xd, Y, mask, H, _ = make_problem(6, n=12, d=4, n_labels=3, k=2)
    lam = 0.8
    data = prepare_data(X, Y, mask, dtype=np.float64)
    W, _ = w_step(data, H, lam, loss, newton_max_iter=60, cg_tol=1e-3, cg_max_iter=50,
                  w_solver="tron")

    def value(w):
        return objective(data, w.reshape(W.shape), H, lam, loss)

    ref = minimize(value, np.zeros(W.size), method="BFGS", options={"gtol": 1e-9})
    assert value(W.ravel()) <= ref.fun + 1e-7
    np.testing.assert_allclose(W.ravel(), ref.x, atol=1e-4)


# ----------------------------------------------------------------------------- H-step
@pytest.mark.parametrize("masked", STRATEGIES + [None])
def test_squared_h_step_equals_per_label_solve(masked):
    X, Xd, Y, mask, _, W = make_problem(7, n=10, d=4, n_labels=6, k=3,
                                        mask_density=0.5 if masked else None)
    lam = 0.3
    data = prepare_data(X, Y, mask, dtype=np.float64, entries=masked or "auto")
    H, _ = h_step(data, W, lam, "squared")
    A = Xd @ W
    omega = np.ones_like(Y, dtype=bool) if mask is None else mask
    for j in range(Y.shape[1]):
        Aj = A[omega[:, j]]
        h = np.linalg.solve(2 * Aj.T @ Aj + lam * np.eye(3), 2 * Aj.T @ Y[omega[:, j], j])
        np.testing.assert_allclose(H[j], h, rtol=1e-10, atol=1e-12)


def label_objectives(Xd, W, Y, mask, loss, lam):
    """(j, h -> objective of label j's H-step problem over its observed rows), per label."""
    A = Xd @ W
    omega = np.ones_like(Y, dtype=bool) if mask is None else mask
    f = get_loss(loss)
    for j in range(Y.shape[1]):
        Aj, yj = A[omega[:, j]], Y[omega[:, j], j]

        def value(h, Aj=Aj, yj=yj):
            return f.value(yj, Aj @ h).sum() + 0.5 * lam * h @ h

        yield j, value


@pytest.mark.parametrize("loss", ["logistic", "sqhinge"])
@pytest.mark.parametrize("masked", STRATEGIES + [None])
def test_newton_h_step_equals_per_label_minimiser(loss, masked):
    X, Xd, Y, mask, _, W = make_problem(8, n=14, d=4, n_labels=5, k=2,
                                        mask_density=0.6 if masked else None)
    lam = 0.5
    data = prepare_data(X, Y, mask, dtype=np.float64, entries=masked or "auto")
    H, _ = h_step(data, W, lam, loss, newton_max_iter=40)
    for j, value in label_objectives(Xd, W, Y, mask, loss, lam):
        ref = minimize(value, np.zeros(2), method="BFGS", options={"gtol": 1e-10})
        assert value(H[j]) <= ref.fun + 1e-9
        np.testing.assert_allclose(H[j], ref.x, atol=1e-4)


@pytest.mark.parametrize("loss", ["logistic", "sqhinge"])
@pytest.mark.parametrize("masked", STRATEGIES + [None])
def test_cg_h_step_equals_per_label_minimiser_and_direct_newton(loss, masked):
    X, Xd, Y, mask, _, W = make_problem(9, n=16, d=6, n_labels=5, k=4,
                                        mask_density=0.6 if masked else None)
    lam = 0.5
    data = prepare_data(X, Y, mask, dtype=np.float64, entries=masked or "auto")
    H0 = np.random.default_rng(1).standard_normal((5, 4))
    # One Newton step: CG run to convergence (k = 4 iterations in exact arithmetic,
    # 8 allowed) gives the direct solve's direction, so the same line search result.
    one_cg, info = h_step(data, W, lam, loss, H0=H0, newton_max_iter=1, h_solver="cg",
                          cg_max_iter=8, cg_tol=1e-12)
    one_direct, _ = h_step(data, W, lam, loss, H0=H0, newton_max_iter=1, h_solver="direct")
    np.testing.assert_allclose(one_cg, one_direct, rtol=1e-8, atol=1e-10)
    assert 1 <= info["cg_iter"] <= 8 and info["newton_iter"] == 1
    # Truncated CG (2 of 4 iterations) is a different, still decreasing, step.
    trunc, _ = h_step(data, W, lam, loss, H0=H0, newton_max_iter=1, h_solver="cg",
                      cg_max_iter=2)
    assert not np.allclose(trunc, one_direct)
    H, _ = h_step(data, W, lam, loss, H0=H0, newton_max_iter=40, h_solver="cg",
                  cg_max_iter=3)
    for j, value in label_objectives(Xd, W, Y, mask, loss, lam):
        assert value(trunc[j]) <= value(H0[j]) + 1e-12
        ref = minimize(value, np.zeros(4), method="BFGS", options={"gtol": 1e-10})
        assert value(H[j]) <= ref.fun + 1e-9
        np.testing.assert_allclose(H[j], ref.x, atol=1e-4)


def test_h_solver_is_validated_and_unused_by_the_squared_loss():
    X, _, Y, _, _, W = make_problem(10, n=12, d=4, n_labels=5, k=3, mask_density=None)
    data = prepare_data(X, Y, dtype=np.float64)
    np.testing.assert_array_equal(h_step(data, W, 0.5, "squared", h_solver="cg")[0],
                                  h_step(data, W, 0.5, "squared")[0])
    with pytest.raises(ValueError, match="h_solver"):
        h_step(data, W, 0.5, "logistic", h_solver="bfgs")
    with pytest.raises(ValueError, match="h_solver"):
        LEML(h_solver="exact").fit(X, Y)


# ----------------------------------------------------------------------------- margin start
def test_squared_margin_start_maps_the_squared_fit_to_margins_exactly():
    X, _, Y, _, _, _ = make_problem(27, n=30, d=6, n_labels=7, mask_density=None)
    k, n_init = 4, 3
    start = LEML(rank=k, loss="logistic", fit_intercept=True, squared_init_iter=n_init,
                 dtype=np.float64, random_state=3)
    start.set_factors(*start.start(start.prepare(X, Y)))
    # Independently: the squared-loss estimator at rank k - 1 from the same initial H.
    H_init = np.random.RandomState(3).standard_normal((7, k)) / np.sqrt(k)
    sq = LEML(rank=k - 1, loss="squared", outer_iterations=n_init, fit_intercept=True,
              dtype=np.float64).fit(X, Y, H_init=H_init[:, :k - 1])
    Z = sq.decision_function(X)
    np.testing.assert_allclose(start.decision_function(X), 2 * Z - 1, rtol=1e-12, atol=1e-12)
    assert start.W_.shape == (7, k) and start.H_.shape == (7, k)
    # The extra column's two factors have equal norms (c = L^(1/4)).
    assert np.isclose(np.linalg.norm(start.W_[:, -1]), np.linalg.norm(start.H_[:, -1]))


@pytest.mark.parametrize("loss", ["logistic", "sqhinge"])
def test_squared_margin_start_continues_to_a_cold_starts_objective(loss):
    X, _, Y, _, _, _ = make_problem(28, n=60, d=8, n_labels=6, mask_density=None)
    common = dict(rank=6, lam=0.5, loss=loss, cg_max_iter=20, newton_max_iter=5,
                  fit_intercept=True, dtype=np.float64, random_state=0, w_solver="tron",
                  h_solver="direct")
    cold = LEML(outer_iterations=40, squared_init_iter=0, **common).fit(X, Y)
    warm = LEML(outer_iterations=40, squared_init_iter=3, **common).fit(X, Y)
    short = LEML(outer_iterations=1, squared_init_iter=3, **common).fit(X, Y)
    # Full rank (k = L): the factored problem has no spurious local minima of
    # note here, so both starts end at the same objective.
    assert warm.objective_[-1] == pytest.approx(cold.objective_[-1], rel=1e-3)
    # The warm start is already better after one iteration than the cold one.
    assert short.objective_[0] < cold.objective_[0]
    assert np.all(np.diff(warm.objective_) <= 1e-9 * abs(warm.objective_[0]))


def test_squared_init_changes_nothing_when_off_or_for_the_squared_loss():
    X, _, Y, _, _, _ = make_problem(29, n=30, d=6, n_labels=5, mask_density=None)
    common = dict(rank=3, lam=0.5, outer_iterations=3, fit_intercept=True, random_state=0)
    # Without the preconditioner "auto" is the paper's path: no start, TRON, direct Newton.
    base = LEML(loss="logistic", **common).fit(X, Y)
    off = LEML(loss="logistic", squared_init_iter=0, w_solver="tron", h_solver="direct",
               **common).fit(X, Y)
    np.testing.assert_array_equal(base.W_, off.W_)
    assert (base.squared_init_iter_, base.w_solver_, base.h_solver_) == (0, "tron", "direct")
    sq = LEML(loss="squared", **common).fit(X, Y)
    sq_init = LEML(loss="squared", squared_init_iter=4, h_solver="cg", **common).fit(X, Y)
    np.testing.assert_array_equal(sq.W_, sq_init.W_)
    np.testing.assert_array_equal(sq.H_, sq_init.H_)
    # An explicit warm start wins over the squared-loss start.
    rng = np.random.default_rng(1)
    W0, H0 = rng.standard_normal((7, 3)), rng.standard_normal((5, 3))
    a = LEML(loss="logistic", squared_init_iter=2, **common).fit(X, Y, W_init=W0, H_init=H0)
    b = LEML(loss="logistic", **common).fit(X, Y, W_init=W0, H_init=H0)
    np.testing.assert_array_equal(a.W_, b.W_)
    with pytest.raises(ValueError, match="fit_intercept"):
        LEML(loss="logistic", squared_init_iter=1, rank=3, fit_intercept=False).fit(X, Y)
    with pytest.raises(ValueError, match="rank"):
        LEML(loss="sqhinge", squared_init_iter=1, rank=1, fit_intercept=True).fit(X, Y)
    with pytest.raises(ValueError, match="squared_init_iter"):
        LEML(loss="sqhinge", squared_init_iter=-1, fit_intercept=True).fit(X, Y)


# ----------------------------------------------------------------------------- estimator
@pytest.mark.parametrize("loss", LOSS_NAMES)
@pytest.mark.parametrize("masked", [True, False])
def test_objective_decreases_every_outer_iteration(loss, masked):
    X, _, Y, mask, _, _ = make_problem(11, n=40, d=8, n_labels=7, k=3,
                                       mask_density=0.4 if masked else None)
    seen = []
    est = LEML(rank=3, lam=0.5, loss=loss, outer_iterations=6, cg_max_iter=3, dtype=np.float64,
               random_state=0, callback=lambda t, s, o: seen.append((t, s, o))).fit(X, Y, mask)
    obj = np.array(est.objective_)
    assert len(obj) == 6 and est.n_iter_ == 6
    assert np.all(np.diff(obj) <= 1e-10 * np.abs(obj[:-1]))
    assert [t for t, _, _ in seen] == [1, 2, 3, 4, 5, 6]
    assert all(s >= 0 for _, s, _ in seen)
    np.testing.assert_allclose([o for _, _, o in seen], obj)
    assert np.isclose(est.objective(est.prepare(X, Y, mask), est.W_, est.H_), obj[-1],
                      rtol=1e-12)


def test_the_tol_rule_by_hand():
    model = LEML(tol=0.01)
    assert model.converged([]) is None and model.converged([10.0]) is None
    assert model.converged([10.0, 9.0]) is None          # 10% lower
    assert model.converged([10.0, 9.95]) is not None     # 0.5% lower
    assert model.converged([10.0, 9.89]) is None         # 1.1% lower
    assert model.converged([10.0, 10.5]) is not None     # a rise is no progress
    assert "0.005" in model.converged([10.0, 9.95])
    assert LEML(tol=0.0).converged([10.0, 10.0]) is None  # 0: never
    with pytest.raises(ValueError, match="tol"):
        LEML(tol=-1.0).check_params()


@pytest.mark.parametrize("masked", [True, False])
def test_tol_stops_where_the_objective_stops_falling_with_the_same_factors(masked):
    """The first t whose relative decrease is below tol, found here from a run of every
    iteration; the stopped fit ends with that run's factors after t iterations."""
    X, _, Y, mask, _, _ = make_problem(21, n=60, d=9, n_labels=7, k=3,
                                       mask_density=0.5 if masked else None)
    kw = dict(rank=3, lam=0.3, cg_max_iter=3, dtype=np.float64, random_state=2)
    every = LEML(outer_iterations=25, **kw).fit(X, Y, mask).objective_
    change = -np.diff(every) / np.abs(every[:-1])
    tol = float(np.quantile(change, 0.5))  # stops somewhere inside the run
    t = next(i + 2 for i, c in enumerate(change) if c < tol)
    stopped = LEML(outer_iterations=25, tol=tol, **kw).fit(X, Y, mask)
    assert stopped.n_iter_ == len(stopped.objective_) == t < 25
    plain = LEML(outer_iterations=t, **kw).fit(X, Y, mask)
    np.testing.assert_array_equal(stopped.W_, plain.W_)
    np.testing.assert_array_equal(stopped.H_, plain.H_)


def test_the_no_gain_rule_by_hand():
    model = LEML(n_iter_no_change=2)
    assert model.no_gain([]) is None and model.no_gain([0.5]) is None
    assert model.no_gain([0.5, 0.6, 0.6]) is None            # one iteration without a gain
    assert model.no_gain([0.5, 0.6, 0.6, 0.55]) is not None  # two: a tie is no gain
    assert model.no_gain([0.5, 0.6, 0.59, 0.61]) is None     # a new best restarts the count
    assert "after iteration 2" in model.no_gain([0.5, 0.6, 0.6, 0.55])
    assert LEML.best_iteration([0.5, 0.6, 0.6, 0.55]) == 2   # the first of equal best
    assert LEML(n_iter_no_change=1).no_gain([0.5, 0.4]) is not None
    for bad in (dict(validation_fraction=0.0), dict(validation_fraction=1.0),
                dict(n_iter_no_change=0), dict(early_stopping="yes")):
        with pytest.raises(ValueError, match=next(iter(bad))):
            LEML(**bad).check_params()


def _naive_early_stopping(X, Y, mask, kw, fraction, patience, T):
    """Early stopping written out: the rows drawn as the documented stream draws them, a fit
    of the rest per number of iterations, P@1 of the held-out rows' observed labels by
    argmax, the patience rule, then all rows for the best count."""
    n = X.shape[0]
    rng = np.random.default_rng(np.random.SeedSequence([kw["random_state"], 303]))
    held = np.zeros(n, dtype=bool)
    held[rng.choice(n, size=int(round(fraction * n)), replace=False)] = True
    fit, val = np.flatnonzero(~held), np.flatnonzero(held)
    Xc = sp.csr_matrix(X)
    observed = np.asarray(Y)[val] * (1 if mask is None else np.asarray(mask)[val])
    scores = []
    for t in range(1, T + 1):
        m = LEML(outer_iterations=t, **kw).fit(Xc[fit], np.asarray(Y)[fit],
                                               None if mask is None else np.asarray(mask)[fit])
        top = np.argmax(m.decision_function(Xc[val]), axis=1)
        scores.append(float(np.mean(observed[np.arange(val.size), top] > 0)))
        best = int(np.argmax(scores))
        if t - 1 - best >= patience:
            break
    best = int(np.argmax(scores)) + 1
    return best, scores, LEML(outer_iterations=best, **kw).fit(Xc, Y, mask)


def _low_rank_problem(seed, masked, n=200, d=20, n_labels=8):
    """Labels from a rank-2 linear model with noise, so held-out P@1 rises for a few
    iterations (one CG step each) and then levels."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X[rng.random((n, d)) < 0.5] = 0
    Z = (X @ rng.standard_normal((d, 2)) @ rng.standard_normal((2, n_labels))
         + 1.5 * rng.standard_normal((n, n_labels)))
    Y = (Z > np.quantile(Z, 0.7)).astype(float)
    return X, Y, (rng.random((n, n_labels)) < 0.6) if masked else None


@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("lam", [0.01, 1.0])
def test_early_stopping_equals_the_rule_written_out(masked, lam):
    X, Y, mask = _low_rank_problem(5, masked)
    kw = dict(rank=3, lam=lam, cg_max_iter=1, dtype=np.float64, random_state=4)
    best, scores, want = _naive_early_stopping(X, Y, mask, kw, 0.25, 2, 15)
    assert 2 <= best < len(scores) < 15  # the rule chose, and ended the pass early
    got = LEML(outer_iterations=15, early_stopping=True, validation_fraction=0.25,
               n_iter_no_change=2, **kw).fit(sp.csr_matrix(X), Y, mask)
    assert got.best_iteration_ == best == got.n_iter_
    np.testing.assert_allclose(got.validation_scores_, scores, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got.W_, want.W_)
    np.testing.assert_array_equal(got.H_, want.H_)
    assert got.get_params()["outer_iterations"] == 15  # the parameters as given


def test_early_stopping_refuses_a_warm_start_and_a_split_with_an_empty_side():
    X, _, Y, _, _, _ = make_problem(32, n=10, mask_density=None)
    model = LEML(rank=2, early_stopping=True, random_state=0)
    with pytest.raises(ValueError, match="warm start"):
        model.fit(X, Y, H_init=np.zeros((4, 2)))
    with pytest.raises(ValueError, match="rows on both sides"):
        LEML(rank=2, early_stopping=True, validation_fraction=0.01, random_state=0).fit(X, Y)


def test_fully_observed_squared_objective_equals_explicit_residual():
    X, Xd, Y, _, H, W = make_problem(12, n=15, d=6, n_labels=5, k=3, mask_density=None)
    data = prepare_data(X, sp.csr_matrix(Y), dtype=np.float64)
    explicit = np.sum((Y - Xd @ W @ H.T) ** 2) + 0.35 * (np.sum(W**2) + np.sum(H**2))
    assert np.isclose(objective(data, W, H, 0.7, "squared"), explicit, rtol=1e-12)


@pytest.mark.parametrize("dense", [False, True])
def test_the_squared_loss_taken_a_few_rows_at_a_time_is_the_explicit_residual(monkeypatch,
                                                                               dense):
    import importlib

    # the module, not the function of the same name that algorithms.leml exports
    objective_module = importlib.import_module("scarce.algorithms.leml.objective")
    X, Xd, Y, _, H, W = make_problem(13, n=23, d=6, n_labels=5, k=3, mask_density=None)
    data = prepare_data(Xd if dense else X, sp.csr_matrix(Y), dtype=np.float64)
    explicit = np.sum((Y - Xd @ W @ H.T) ** 2)
    for rows in (1, 5, 23, 64):  # one row, a last chunk of 3, exactly one, more than n
        monkeypatch.setattr(objective_module, "LOSS_ROWS", rows)
        assert np.isclose(objective_module.loss_term(data, W, H, "squared"), explicit,
                          rtol=1e-12), rows


@pytest.mark.parametrize("loss", LOSS_NAMES)
@pytest.mark.parametrize("masked", [True, False])
def test_float32_stays_float32(loss, masked):
    X, _, Y, mask, H, W = make_problem(13, n=30, d=6, n_labels=5, k=3,
                                       mask_density=0.5 if masked else None)
    data = prepare_data(X, Y, mask, dtype=np.float32)
    assert data.X.dtype == np.float32 and data.Xt.dtype == np.float32
    H32, W32 = H.astype(np.float32), W.astype(np.float32)
    grad, hess_vec = w_gradient(data, H32, W32, 0.5, loss)
    assert grad.dtype == np.float32 and hess_vec(W32).dtype == np.float32
    W_new, info = w_step(data, H32, 0.5, loss, W0=W32, w_solver="tron")
    assert W_new.dtype == np.float32 and info["cg_iter"] >= 1
    assert h_step(data, W_new, 0.5, loss, H0=H32)[0].dtype == np.float32
    for strategy in STRATEGIES:
        data = prepare_data(X, Y, mask, dtype=np.float32, entries=strategy)
        assert h_step(data, W32, 0.5, loss, H0=H32)[0].dtype == np.float32
        assert w_gradient(data, H32, W32, 0.5, loss)[1](W32).dtype == np.float32
    est = LEML(rank=3, lam=0.5, loss=loss, outer_iterations=2, random_state=0).fit(X, Y, mask)
    assert est.W_.dtype == np.float32 and est.H_.dtype == np.float32
    assert est.decision_function(X).dtype == np.float32


def test_missing_as_nan_equals_mask():
    X, _, Y, mask, _, _ = make_problem(14, n=30, d=6, n_labels=5, mask_density=0.5)
    Y_nan = np.where(mask, Y, np.nan)
    a = LEML(rank=2, lam=0.5, outer_iterations=3, dtype=np.float64, random_state=1).fit(X, Y_nan)
    b = LEML(rank=2, lam=0.5, outer_iterations=3, dtype=np.float64, random_state=1).fit(
        X, sp.csr_matrix(Y), sp.csr_matrix(mask))
    np.testing.assert_allclose(a.W_, b.W_, rtol=1e-12)
    np.testing.assert_allclose(a.objective_, b.objective_, rtol=1e-12)


def test_all_true_mask_is_the_fully_observed_problem():
    X, _, Y, _, _, _ = make_problem(15, n=20, d=5, n_labels=4, mask_density=None)
    a = LEML(rank=2, lam=0.5, outer_iterations=3, dtype=np.float64, random_state=1).fit(X, Y)
    b = LEML(rank=2, lam=0.5, outer_iterations=3, dtype=np.float64, random_state=1).fit(
        X, Y, np.ones_like(Y, dtype=bool))
    np.testing.assert_allclose(a.W_, b.W_, rtol=1e-10, atol=1e-12)


def test_warm_start_continues_where_the_run_stopped():
    X, _, Y, mask, _, _ = make_problem(16, n=40, d=6, n_labels=5, mask_density=0.5)
    kw = dict(rank=3, lam=0.5, cg_max_iter=4, dtype=np.float64, random_state=3)
    full = LEML(outer_iterations=5, **kw).fit(X, Y, mask)
    part = LEML(outer_iterations=2, **kw).fit(X, Y, mask)
    resumed = LEML(outer_iterations=5, **kw).fit(X, Y, mask, W_init=part.W_, H_init=part.H_,
                                         start_iter=2)
    np.testing.assert_allclose(resumed.W_, full.W_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(resumed.H_, full.H_, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(resumed.objective_, full.objective_[2:], rtol=1e-12)
    assert resumed.n_iter_ == 5
    with pytest.raises(ValueError, match="start_iter"):
        LEML(outer_iterations=5, **kw).fit(X, Y, mask, start_iter=2)


def test_same_seed_same_model_and_intercept_is_last_row_of_W():
    X, Xd, Y, _, _, _ = make_problem(17, n=30, d=6, n_labels=5, mask_density=None)
    kw = dict(rank=2, lam=0.5, outer_iterations=3, fit_intercept=True, random_state=4)
    a, b = LEML(**kw).fit(X, Y), LEML(**kw).fit(X, Y)
    np.testing.assert_array_equal(a.W_, b.W_)
    assert a.W_.shape == (7, 2)
    expected = np.hstack([Xd, np.ones((30, 1))]).astype(np.float32) @ a.W_ @ a.H_.T
    np.testing.assert_allclose(a.decision_function(X), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_predict_top_k_equals_argsort_and_predict_uses_threshold(loss):
    X, _, Y, _, _, _ = make_problem(18, n=23, d=6, n_labels=9, mask_density=None)
    est = LEML(rank=3, lam=0.3, loss=loss, outer_iterations=3, random_state=0,
               dtype=np.float64).fit(X, Y)
    scores = est.decision_function(X)
    top = est.predict_top_k(X, k=4, batch_size=5)
    np.testing.assert_array_equal(top, np.argsort(-scores, axis=1, kind="stable")[:, :4])
    pred = est.predict(X, batch_size=7)
    assert sp.issparse(pred)
    threshold = 0.5 if loss == "squared" else 0.0
    np.testing.assert_array_equal(pred.toarray(), (scores > threshold).astype(np.int8))


def test_top_k_scores_are_the_decision_values_of_the_chosen_labels():
    X, Xd, Y, _, _, _ = make_problem(21, n=23, d=6, n_labels=9, mask_density=None)
    est = LEML(rank=3, lam=0.3, outer_iterations=3, random_state=0).fit(X, Y)
    top, scores = est.predict_top_k(X, k=4, batch_size=5, return_scores=True)
    np.testing.assert_array_equal(top, est.predict_top_k(X, k=4, batch_size=7))
    # the decision values computed here, in float64, from the factors
    full = (np.hstack([Xd, np.ones((23, 1))]) @ est.W_.astype(np.float64)) @ est.H_.T
    assert scores.dtype == est.W_.dtype
    np.testing.assert_allclose(scores, np.take_along_axis(full, top, axis=1), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(scores, -np.sort(-full, axis=1)[:, :4], rtol=1e-5, atol=1e-6)


def test_top_k_breaks_ties_by_label_index():
    scores = np.array([[1.0, 3.0, 3.0, 0.0, 3.0]])
    np.testing.assert_array_equal(top_k_from_scores(scores, 3), [[1, 2, 4]])
    np.testing.assert_array_equal(top_k_from_scores(scores, 9), [[1, 2, 4, 0, 3]])


def test_invalid_input_raises_value_error():
    X, _, Y, mask, _, _ = make_problem(19)
    with pytest.raises(ValueError, match="only 0 and 1"):
        LEML(rank=2).fit(X, Y * 2)
    with pytest.raises(ValueError, match="mask has shape"):
        LEML(rank=2).fit(X, Y, mask[:, :2])
    with pytest.raises(ValueError, match="rows"):
        LEML(rank=2).fit(X, Y[:3])
    with pytest.raises(ValueError, match="lam"):
        LEML(rank=2, lam=0).fit(X, Y)
    with pytest.raises(ValueError, match="unknown loss"):
        LEML(rank=2, loss="hinge").fit(X, Y)
    with pytest.raises(ValueError, match="features"):
        LEML(rank=2, outer_iterations=1).fit(X, Y).predict_top_k(np.ones((2, 3)))


# ----------------------------------------------------------------------------- baselines
def test_closed_form_full_rank_is_ridge():
    X, Xd, Y, _, _, _ = make_problem(20, n=30, d=6, n_labels=5, mask_density=None)
    cf = ClosedFormLowRank(alpha=0.7).fit(X, Y)
    ridge = Ridge(alpha=0.7, fit_intercept=False).fit(Xd, Y)
    np.testing.assert_allclose(cf.coef_, ridge.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(cf.decision_function(X), ridge.predict(Xd), atol=1e-10)


def test_closed_form_low_rank_is_cplst():
    X, Xd, Y, _, _, _ = make_problem(21, n=40, d=7, n_labels=6, mask_density=None)
    alpha, k = 0.5, 2
    cf = ClosedFormLowRank(rank=k, alpha=alpha).fit(X, Y)
    # CPLST (Chen and Lin 2012): V = top-k eigenvectors of Y^T X C^{-1} X^T Y, then ridge
    # regression onto the projected labels Y V V^T.
    C = Xd.T @ Xd + alpha * np.eye(7)
    M = Y.T @ Xd @ np.linalg.solve(C, Xd.T @ Y)
    _, vecs = np.linalg.eigh(M)
    V = vecs[:, ::-1][:, :k]
    Z = np.linalg.solve(C, Xd.T @ Y @ V @ V.T)
    np.testing.assert_allclose(cf.coef_, Z.T, atol=1e-9)
    np.testing.assert_allclose(cf.H_ @ cf.H_.T, V @ V.T, atol=1e-9)
    with pytest.raises(ValueError, match="fully observed"):
        ClosedFormLowRank(rank=2).fit(X, np.where(Y > 0, 1.0, np.nan))


def test_binary_relevance_logistic_equals_one_vs_rest():
    X, Xd, Y, _, _, _ = make_problem(22, n=50, d=5, n_labels=4, mask_density=None)
    Y[:3, :] = 1  # every label has both classes
    Y[3:6, :] = 0
    br = BinaryRelevance(model="logistic", alpha=2.0).fit(X, Y)
    ovr = OneVsRestClassifier(LogisticRegression(C=0.5, solver="liblinear")).fit(Xd, Y)
    np.testing.assert_allclose(br.decision_function(X), ovr.decision_function(Xd),
                               rtol=1e-6, atol=1e-6)
    assert br.threshold_ == 0.0


def test_binary_relevance_ridge_uses_only_observed_entries():
    X, Xd, Y, mask, _, _ = make_problem(23, n=40, d=4, n_labels=3, mask_density=0.5)
    br = BinaryRelevance(model="ridge", alpha=0.9).fit(X, Y, mask)
    # Changing unobserved labels changes nothing.
    br2 = BinaryRelevance(model="ridge", alpha=0.9).fit(X, np.where(mask, Y, 1 - Y), mask)
    np.testing.assert_allclose(br.coef_, br2.coef_)
    for j in range(3):
        rows = mask[:, j]
        # Ridge with unpenalised intercept: centre, solve, recover the intercept.
        Xc = Xd[rows] - Xd[rows].mean(0)
        yc = Y[rows, j] - Y[rows, j].mean()
        w = np.linalg.solve(Xc.T @ Xc + 0.9 * np.eye(4), Xc.T @ yc)
        np.testing.assert_allclose(br.coef_[j], w, atol=1e-10)
        assert np.isclose(br.intercept_[j], Y[rows, j].mean() - Xd[rows].mean(0) @ w)
    top = br.predict_top_k(X, k=2, batch_size=7)
    np.testing.assert_array_equal(
        top, np.argsort(-br.decision_function(X), axis=1, kind="stable")[:, :2])


def test_explicit_transpose_copy_and_both_product_paths_agree():
    rng = np.random.default_rng(24)
    X = sp.random(20, 300, density=0.05, format="csr", random_state=24)
    data = prepare_data(X, np.zeros((20, 2)), dtype=np.float64)
    assert sp.isspmatrix_csr(data.Xt)
    np.testing.assert_array_equal(data.Xt.toarray(), X.T.toarray())
    for k in (3, 500):  # result of 2.4 KB (CSC view) and of 1.2 MB (CSR copy)
        U = rng.standard_normal((20, k))
        np.testing.assert_allclose(data.xt_matmul(U), X.T @ U, rtol=1e-12, atol=1e-12)


def test_verbose_progress_bar_and_callback_sees_current_factors(capsys):
    X, _, Y, _, _, _ = make_problem(25, n=20, d=5, n_labels=4, mask_density=None)
    est = LEML(rank=2, lam=0.5, outer_iterations=3, verbose=True, random_state=0)
    snapshots = []
    est.callback = lambda t, s, o: snapshots.append(est.W_.copy())
    est.fit(X, Y)
    assert "LEML" in capsys.readouterr().err  # tqdm writes to stderr
    assert len(snapshots) == 3 and not np.array_equal(snapshots[0], snapshots[1])
    np.testing.assert_array_equal(snapshots[-1], est.W_)


def test_set_factors_predicts_as_the_fitted_estimator_and_start_is_zero_and_normal():
    X, _, Y, _, _, _ = make_problem(26, n=25, d=6, n_labels=7, mask_density=None)
    est = LEML(rank=3, lam=0.5, outer_iterations=2, random_state=5).fit(X, Y)
    again = LEML(rank=3).set_factors(est.W_, est.H_)
    np.testing.assert_array_equal(again.decision_function(X), est.decision_function(X))
    np.testing.assert_array_equal(again.predict_top_k(X, 4, batch_size=4),
                                  est.predict_top_k(X, 4))
    assert again.threshold_ == est.threshold_ == 0.5 and again.n_features_in_ == 6
    # W = 0 and H ~ N(0, 1/k) from the seed: numpy's RandomState, drawn independently here.
    start = LEML(rank=3, random_state=5)
    start.set_factors(*start.start(start.prepare(X, Y)))
    H0 = (np.random.RandomState(5).standard_normal((7, 3)) / np.sqrt(3)).astype(np.float32)
    np.testing.assert_array_equal(start.W_, np.zeros((7, 3), dtype=np.float32))
    np.testing.assert_array_equal(start.H_, H0)
    with pytest.raises(ValueError, match="features"):
        LEML(fit_intercept=False).set_factors(est.W_, est.H_).predict_top_k(X, 2)
    with pytest.raises(ValueError, match="same k"):
        LEML().set_factors(est.W_, est.H_[:, :2])


@pytest.mark.parametrize("sparse", [True, False])
def test_the_grams_diagonal_is_the_columns_sums_of_squares_in_chunks(sparse, monkeypatch):
    import scarce.algorithms.leml.data as leml_data

    X, Xd, Y, _, _, _ = make_problem(9, n=30, d=7, sparse=sparse, mask_density=None)
    data = prepare_data(X, Y, dtype=np.float32, fit_intercept=True)
    want = (np.hstack([Xd, np.ones((30, 1))]).astype(np.float32).astype(np.float64) ** 2).sum(0)
    monkeypatch.setattr(leml_data, "DIAGONAL_CHUNK", 5)  # several chunks of values or rows
    np.testing.assert_allclose(data.gram_diagonal(), want, rtol=1e-12)
    assert data.gram_diagonal().dtype == np.float64
