"""The closed-form baselines: Binary Relevance ridge on fully observed labels against
scikit-learn's exact ridge (dense ``X``, ``solver="cholesky"``), hand-worked examples, the
system it factors and the bundled Bibtex data; ClosedFormLowRank with its constant column;
the memory guard of every square system."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
from sklearn.linear_model import Ridge
from sklearn.preprocessing import normalize

from scarce.algorithms.leml import BinaryRelevance, ClosedFormLowRank
from scarce.algorithms.memory import ENV_LIMIT, MemoryBudgetError
from scarce.tasks.readers.xmc import read_xmc

BIBTEX = Path(__file__).resolve().parents[3] / "data" / "xmc" / "bibtex"
#: n x d of each branch: more rows than features (the d x d system), fewer (the n x n one),
#: as many (n x n with an intercept, d x d without).
SHAPES = {"primal": (40, 7), "dual": (7, 40), "square": (12, 12)}


def _problem(n, d, n_labels=6, seed=0):
    """Sparse X whose columns have means well away from zero (as binary and TF-IDF features
    do), 0/1 labels with one label never and one always present."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) + 2.0 * rng.random(d)
    X[rng.random((n, d)) < 0.4] = 0.0
    Y = (rng.random((n, n_labels)) < 0.4).astype(np.float64)
    Y[:, 0] = 0.0
    Y[:, 1] = 1.0
    return X, Y


@pytest.fixture
def factored_shapes(monkeypatch):
    """The shapes of the matrices Cholesky-factored during the test."""
    shapes = []

    def spy(real):
        def factor(a, *args, **kwargs):
            shapes.append(np.shape(a))
            return real(a, *args, **kwargs)
        return factor

    for name in ("cho_factor", "cholesky"):
        monkeypatch.setattr(scipy.linalg, name, spy(getattr(scipy.linalg, name)))
    return shapes


@pytest.mark.parametrize("branch", list(SHAPES))
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("sparse", [True, False])
def test_br_ridge_equals_sklearn_exact_ridge_on_dense_x(branch, fit_intercept, dtype, sparse,
                                                        factored_shapes):
    n, d = SHAPES[branch]
    X, Y = _problem(n, d, seed=n + d)
    br = BinaryRelevance(model="ridge", alpha=0.7, fit_intercept=fit_intercept,
                         dtype=dtype).fit(sp.csr_matrix(X) if sparse else X, Y)
    # The same system solved exactly by scikit-learn (it centres dense X itself), on X rounded
    # to the estimator's dtype as the estimator rounds it, in float64.
    Xr = X.astype(dtype).astype(np.float64)
    truth = Ridge(alpha=0.7, fit_intercept=fit_intercept, solver="cholesky").fit(Xr, Y)
    assert br.coef_.dtype == dtype and br.intercept_.dtype == dtype
    # float64: agreement to rounding; float32: the float64 solution rounded to float32
    rtol = 1e-12 if dtype == np.float64 else 2e-7
    scale = np.abs(truth.coef_).max()
    np.testing.assert_allclose(br.coef_, truth.coef_, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(br.intercept_, truth.intercept_ if fit_intercept else 0.0,
                               rtol=rtol, atol=rtol * max(1.0, scale))
    # A label never present gets no weight; with an intercept, one always present neither,
    # and their intercepts are 0 and 1.
    np.testing.assert_allclose(br.coef_[0], 0.0, atol=rtol * scale)
    if fit_intercept:
        np.testing.assert_allclose(br.coef_[1], 0.0, atol=rtol * scale)
        np.testing.assert_allclose(br.intercept_[:2], [0.0, 1.0], atol=rtol)
    np.testing.assert_allclose(br.decision_function(X), truth.predict(Xr),
                               rtol=rtol, atol=10 * rtol * max(1.0, scale))
    # One factorisation, of the smaller system (the intercept adds a row and a column to the
    # d x d one), for all labels.
    side = min(n, d + fit_intercept)
    assert factored_shapes == [(side, side)]


@pytest.mark.parametrize("X, y2, coef, intercept", [
    # 3 rows x 2 features (the d x d system).  Column means m = (2/3, 2/3), c = (2/3, 2/3);
    # Xc^T Xc + I = [[5, -1], [-1, 5]] / 3 and Xc^T yc = (2, -1) / 3 for the first label:
    # coef = (3/8, -1/8), intercept = 2/3 - m . coef = 1/2; the second label mirrors it.
    ([[1, 0], [0, 1], [1, 1]], [0, 1, 1],
     [[3 / 8, -1 / 8], [-1 / 8, 3 / 8]], [1 / 2, 1 / 2]),
    # 2 rows x 3 features (the n x n system).  Xc = [[1, -1, 0], [-1, 1, 0]] / 2 and
    # yc = (1, -1) / 2: the third feature is constant and gets no weight; coef = (1/4, -1/4,
    # 0), intercept = 1/2 - (1/2, 1/2, 1) . coef = 1/2; the second label is its negative.
    ([[1, 0, 1], [0, 1, 1]], [0, 1],
     [[1 / 4, -1 / 4, 0], [-1 / 4, 1 / 4, 0]], [1 / 2, 1 / 2]),
])
def test_br_ridge_hand_worked_examples(X, y2, coef, intercept):
    X = np.asarray(X, dtype=np.float64)
    y1 = X[:, 0]  # the first label is the first feature
    Y = np.column_stack([y1, y2])
    br = BinaryRelevance(model="ridge", alpha=1.0).fit(sp.csr_matrix(X), Y)
    np.testing.assert_allclose(br.coef_, coef, rtol=0, atol=1e-15)
    np.testing.assert_allclose(br.intercept_, intercept, rtol=0, atol=1e-15)


# Every estimator here that solves a dense square system, and the side it solves.
SQUARE_SYSTEMS = {
    "br-ridge, d x d": (lambda: BinaryRelevance(model="ridge"), (3000, 400),
                        "the d x d normal equations.*fewer features"),
    "br-ridge, n x n": (lambda: BinaryRelevance(model="ridge"), (400, 3000),
                        "the n x n normal equations.*fewer rows"),
    "closed-form": (lambda: ClosedFormLowRank(fit_intercept=True), (3000, 400),
                    "the d x d normal equations.*fewer features"),
}


@pytest.mark.parametrize("case", list(SQUARE_SYSTEMS))
def test_a_square_system_that_does_not_fit_is_refused_before_it_is_formed(
        case, monkeypatch, factored_shapes):
    make, (n, d), message = SQUARE_SYSTEMS[case]
    X = sp.random(n, d, density=0.01, format="csr", random_state=1)
    Y = sp.csr_matrix((np.random.default_rng(1).random((n, 3)) < 0.3).astype(float))
    # 400 x 400 float64 x 2.5 = 3.1 MiB: refused under 1 MiB; the labels' arrays fit
    monkeypatch.setenv(ENV_LIMIT, str(1 / 1024))
    with pytest.raises(MemoryBudgetError, match=message):
        make().fit(X, Y)
    assert factored_shapes == []
    monkeypatch.delenv(ENV_LIMIT)
    make().fit(X, Y)
    assert len(factored_shapes) == 1 and factored_shapes[0][0] in (400, 401)


def test_closed_form_rank_out_of_range_is_refused_before_any_factorisation(factored_shapes):
    X, Y = _problem(20, 5)
    with pytest.raises(ValueError, match=r"rank must be in \[1, 6\]"):
        ClosedFormLowRank(rank=7, fit_intercept=True).fit(X, Y)
    assert factored_shapes == []


@pytest.mark.parametrize("rank", [None, 3])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_closed_form_with_intercept_is_ridge_on_x_with_a_constant_column(rank, dtype):
    X, Y = _problem(30, 6)
    Xa = np.hstack([X, np.ones((30, 1))]).astype(dtype).astype(np.float64)
    cf = ClosedFormLowRank(rank=rank, alpha=0.5, fit_intercept=True, dtype=dtype).fit(X, Y)
    if rank is None:
        Z = Ridge(alpha=0.5, fit_intercept=False, solver="cholesky").fit(Xa, Y).coef_.T
    else:  # CPLST: ridge onto the labels projected on the top-k right singular vectors
        C = Xa.T @ Xa + 0.5 * np.eye(7)
        _, vecs = np.linalg.eigh(Y.T @ Xa @ np.linalg.solve(C, Xa.T @ Y))
        V = vecs[:, ::-1][:, :rank]
        Z = np.linalg.solve(C, Xa.T @ Y @ V @ V.T)
    rtol = 1e-10 if dtype == np.float64 else 1e-4
    scale = np.abs(Z).max()
    assert cf.coef_.dtype == dtype
    np.testing.assert_allclose(cf.coef_, Z[:6].T, atol=rtol * scale)
    np.testing.assert_allclose(cf.intercept_, Z[6], atol=rtol * scale)


def _bibtex():
    (Xtr, Ytr), (Xte, Yte) = (read_xmc(BIBTEX / f"bibtex_xmlrepo_{part}.txt.gz")
                              for part in ("train", "test"))
    # float64, as BinaryRelevance works (the files are read as float32)
    return (normalize(Xtr).astype(np.float64), Ytr.astype(np.float64),
            normalize(Xte).astype(np.float64), Yte)


def _same_top_k_up_to_ties(top, top_ref, scores_ref, gap):
    """Where the rankings differ, the labels swapped score within ``gap`` of each other in
    the reference."""
    rows = np.flatnonzero((top != top_ref).any(axis=1))
    for i in rows:
        ours = scores_ref[i, top[i]]
        ref = scores_ref[i, top_ref[i]]
        np.testing.assert_allclose(ours, ref, rtol=0, atol=gap)


def test_br_ridge_top_k_on_bibtex_equals_sklearn_exact_ridge():
    Xtr, Ytr, Xte, _ = _bibtex()
    br = BinaryRelevance(model="ridge", alpha=1.0).fit(Xtr, Ytr)
    truth = Ridge(alpha=1.0, solver="cholesky").fit(Xtr.toarray(), Ytr.toarray())
    scores = truth.predict(Xte.toarray())
    np.testing.assert_allclose(br.decision_function(Xte), scores, rtol=0, atol=1e-11)
    _same_top_k_up_to_ties(br.predict_top_k(Xte, k=5),
                           np.argsort(-scores, axis=1, kind="stable")[:, :5], scores, gap=1e-11)


@pytest.mark.slow
def test_br_ridge_top_k_on_bibtex_equals_sklearn_sparse_ridge_within_its_tolerance():
    # The previous fit: scikit-learn's Ridge on sparse X, each label by conjugate gradients
    # to a tolerance; rankings may differ only between labels whose scores are closer than
    # the largest difference between the two fits' scores.
    Xtr, Ytr, Xte, _ = _bibtex()
    br = BinaryRelevance(model="ridge", alpha=1.0).fit(Xtr, Ytr)
    old = Ridge(alpha=1.0).fit(Xtr, Ytr.toarray())
    new_scores, old_scores = br.decision_function(Xte), old.predict(Xte)
    err = np.abs(new_scores - old_scores).max()
    assert 0 < err < 1e-2
    _same_top_k_up_to_ties(br.predict_top_k(Xte, k=5),
                           np.argsort(-old_scores, axis=1, kind="stable")[:, :5],
                           new_scores, gap=2 * err)
