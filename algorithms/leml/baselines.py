"""Baselines for LEML: Binary Relevance and the closed-form squared-loss solution.

Both have LEML's interface: ``fit(X, Y, mask=None)``, ``decision_function``,
``predict`` (sparse 0/1) and ``predict_top_k`` in row batches.

* :class:`BinaryRelevance`: one independent linear model per label (one-vs-rest
  ridge regression on the ``{0, 1}`` labels, or L2-regularised logistic regression
  with scikit-learn's LIBLINEAR solver).  On fully observed labels ridge is solved in
  closed form for all labels at once; with a mask each label is trained on its
  observed entries only (scikit-learn, one fit per label), the comparison of Yu et
  al. (2014), Sec. 5.
* :class:`ClosedFormLowRank`: ``min_{rank(Z) <= k} ||Y - X Z||_F^2 + alpha ||Z||_F^2``
  in closed form.  With ``C = X^T X + alpha I = G G^T`` (Cholesky) and
  ``M = G^{-1} X^T Y``, the solution is ``Z = G^{-T} M_k`` with ``M_k`` the
  rank-``k`` truncated SVD of ``M``; so ``H`` spans the top eigenvectors of
  ``Y^T X C^{-1} X^T Y``, the label space of CPLST (Chen and Lin, 2012), which Yu et
  al. (2014, Sec. 2) show the squared-loss LEML recovers.  ``rank=None`` is
  full-rank ridge regression.

References
----------
H.-F. Yu, P. Jain, P. Kar and I. S. Dhillon, "Large-scale Multi-label Learning
with Missing Labels", ICML 2014.
Y.-N. Chen and H.-T. Lin, "Feature-aware Label Space Dimension Reduction for
Multi-label Classification", NIPS 2012.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.utils.validation import check_is_fitted

from scarce.algorithms.leml.data import add_constant_column, check_labels, check_X
from scarce.algorithms.leml.params import BASELINE_ALPHA
from scarce.algorithms.leml.predict import (
    BATCH_SIZE,
    check_new_X,
    predict_top_k_in_batches,
    threshold_in_batches,
)
from scarce.algorithms.memory import check_allocation

__all__ = ["BinaryRelevance", "ClosedFormLowRank"]


def _dense(A, order=None) -> np.ndarray:
    """``A`` as a dense array (``order=None``: the order its format fills without a copy)."""
    return A.toarray(order=order) if sp.issparse(A) else np.asarray(A, order=order)


def _dense_symmetric(A) -> np.ndarray:
    """The symmetric ``A`` as a dense array in Fortran order, which LAPACK factors in place:
    a C-ordered array read as its transpose (itself) rather than converted."""
    A = _dense(A)
    return A if A.flags.f_contiguous else A.T


def _ridge_closed_form(X, Y, alpha: float, fit_intercept: bool):
    """Ridge regression of every column of ``Y`` on ``X`` at once, in closed form (float64).

    The intercept is not penalised.  Primal (``d + 1 <= n``, ``d <= n`` without intercept):
    the normal equations of ``[X, 1]`` with ``alpha`` added to the weights of ``X`` only,
    ``[[X^T X + alpha I, X^T 1], [1^T X, n]] [coef^T; intercept^T] = [X^T Y; 1^T Y]``; the
    factorisation's last step centres the data (its Schur complement is ``Xc^T Xc + alpha I``,
    ``Xc = X - 1 m^T``, ``m`` the column means of ``X``).  Dual (fewer rows): ridge on the
    centred data, ``coef^T = Xc^T (Xc Xc^T + alpha I)^{-1} Yc`` with ``Xc Xc^T = X X^T - u 1^T
    - 1 u^T + (m^T m) 1 1^T``, ``u = X m``, ``Yc = Y - 1 c^T`` (``c``: the column means of
    ``Y``), and ``intercept = c - coef m``; ``X`` is never centred, it stays sparse.  The
    system is factored once (Cholesky, in place: it and the right-hand sides are formed in
    Fortran order) and solved for all ``L`` right-hand sides.

    scikit-learn's ``Ridge`` fits an intercept on sparse ``X`` only with its iterative solvers
    (``sparse_cg`` by default): one target at a time, each to a tolerance.  Its ``cholesky``
    solver, which solves the same system as here, needs ``X`` dense to centre it.

    Returns
    -------
    coef : ndarray of shape (L, d), intercept : ndarray of shape (L,)
    """
    n, d = X.shape
    n_labels = Y.shape[1]
    primal = d + fit_intercept <= n
    m, side = (d + fit_intercept, "d x d") if primal else (n, "n x n")
    advice = (("use fewer features (a smaller vocabulary)" if primal else
               "train on fewer rows") + " or drop br-ridge from the baselines")
    # The system as a sparse product (up to 12 bytes an entry) and as the dense array
    # factored in place; the right-hand sides, solved in place, and the coefficients.
    check_allocation((m, m), np.float64, copies=2.5, advice=advice,
                     what=f"Binary Relevance ridge (the {side} normal equations)")
    check_allocation((max(m, d), n_labels), np.float64, copies=3, advice=advice,
                     what="Binary Relevance ridge (right-hand sides and coefficients, d x L)")
    X = X.astype(np.float64, copy=False)
    Y = Y.astype(np.float64, copy=False)
    if primal:
        Xa = add_constant_column(X) if fit_intercept else X
        A = _dense_symmetric(Xa.T @ Xa)
        A[np.diag_indices(d)] += alpha  # not the intercept's
        rhs = _dense(Xa.T @ Y, order="F")
    else:
        A = _dense_symmetric(X @ X.T)
        rhs = _dense(Y, order="F")
        if fit_intercept:
            x_mean = np.asarray(X.mean(axis=0)).ravel()
            u = np.asarray(X @ x_mean).ravel()
            A -= u[:, None]
            A -= u[None, :]
            A += x_mean @ x_mean
            rhs -= np.asarray(Y.mean(axis=0)).ravel()
        A[np.diag_indices(n)] += alpha
    factor = scipy.linalg.cho_factor(A, overwrite_a=True, check_finite=False)
    sol = scipy.linalg.cho_solve(factor, rhs, overwrite_b=True, check_finite=False)
    if primal:
        coef = sol[:d].T
        intercept = sol[d] if fit_intercept else np.zeros(n_labels)
    else:
        # Xc^T S = X^T S - m (1^T S); 1^T S is zero in exact arithmetic (1^T Yc = 0)
        coef = _dense(X.T @ sol).T
        intercept = np.zeros(n_labels)
        if fit_intercept:
            coef -= np.multiply.outer(sol.sum(axis=0), x_mean)
            intercept = np.asarray(Y.mean(axis=0)).ravel() - coef @ x_mean
    return coef, intercept


class _LinearMultiLabel(BaseEstimator):
    """Shared prediction for a model ``scores = X coef_^T + intercept_``."""

    def _scores(self, X):
        check_is_fitted(self, ("coef_", "intercept_"))
        return check_new_X(X, self.coef_.dtype, self.n_features_in_, type(self).__name__)

    def decision_function(self, X) -> np.ndarray:
        """Decision values (n x L, dense)."""
        X = self._scores(X)
        check_allocation((X.shape[0], self.coef_.shape[0]), self.coef_.dtype,
                         what="Binary Relevance decision_function (n x L)",
                         advice="score row batches with predict_top_k or predict (batch_size)")
        return np.asarray(X @ self.coef_.T) + self.intercept_

    def predict(self, X, batch_size: int = BATCH_SIZE) -> sp.csr_matrix:
        """Sparse 0/1 matrix of decision values above ``threshold_``."""
        X = self._scores(X)
        return threshold_in_batches(
            lambda s, e: np.asarray(X[s:e] @ self.coef_.T) + self.intercept_,
            X.shape[0], self.threshold_, batch_size, n_labels=self.coef_.shape[0])

    def predict_top_k(self, X, k: int = 5, batch_size: int = BATCH_SIZE) -> np.ndarray:
        """Top-``k`` labels per row, best first, scoring ``batch_size`` rows at a time."""
        X = self._scores(X)
        return predict_top_k_in_batches(
            lambda s, e: np.asarray(X[s:e] @ self.coef_.T) + self.intercept_,
            X.shape[0], k, batch_size, n_labels=self.coef_.shape[0])


class BinaryRelevance(_LinearMultiLabel):
    """One-vs-rest linear models, one per label.

    Parameters
    ----------
    model : {"ridge", "logistic"}, default="ridge"
        ``"ridge"``: ridge regression on the ``{0, 1}`` labels (threshold 0.5); fully
        observed, every label at once in closed form (the ``d x d`` or the ``n x n`` normal
        equations, whichever is smaller, one Cholesky factorisation, in float64: the
        solution :class:`sklearn.linear_model.Ridge` with ``solver="cholesky"`` gives on
        dense ``X``); with missing labels one :class:`sklearn.linear_model.Ridge` per label
        on its observed rows.  ``"logistic"``:
        :class:`sklearn.linear_model.LogisticRegression` (liblinear, L2), threshold 0.
    alpha : float, default=1.0
        Ridge penalty; logistic regression uses ``C = 1 / alpha``.
    fit_intercept : bool, default=True
        An unpenalised intercept per label.
    dtype : {np.float32, np.float64}, default=np.float64
        dtype ``X`` is cast to (and passed to scikit-learn in) and of ``coef_``.
    max_iter : int, default=1000
        Passed to the scikit-learn models that take it.

    Attributes
    ----------
    coef_ : ndarray of shape (L, d)
    intercept_ : ndarray of shape (L,)
    threshold_ : float
    n_features_in_ : int

    Notes
    -----
    A label whose observed entries are all of one class (or that has no observed
    entry) cannot be fitted by logistic regression; it gets ``coef = 0`` and the
    smoothed log-odds ``log((p + 0.5) / (m + 0.5))`` of its ``p`` positives among
    ``m`` negatives as intercept.  Ridge handles such labels itself.
    """

    def __init__(self, model="ridge", alpha=BASELINE_ALPHA, fit_intercept=True, dtype=np.float64,
                 max_iter=1000):
        self.model = model
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.dtype = dtype
        self.max_iter = max_iter

    def _make(self):
        if self.model == "ridge":
            return Ridge(alpha=self.alpha, fit_intercept=self.fit_intercept)
        if self.model == "logistic":
            return LogisticRegression(C=1.0 / self.alpha, solver="liblinear",
                                      fit_intercept=self.fit_intercept, max_iter=self.max_iter)
        raise ValueError(f"model must be 'ridge' or 'logistic', got {self.model!r}")

    def fit(self, X, Y, mask=None):
        """Fit one model per label (on its observed entries when ``mask`` is given).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n, d)
        Y : {array-like, sparse matrix} of shape (n, L), values in {0, 1} (NaN missing)
        mask : {array-like, sparse matrix} of shape (n, L), optional

        Returns
        -------
        self
        """
        if not self.alpha > 0:
            raise ValueError(f"alpha must be positive, got {self.alpha!r}")
        self._make()
        dtype = np.dtype(self.dtype)
        X = check_X(X, dtype)
        n, d = X.shape
        Y_full, entries, n_labels = check_labels(Y, mask, n, np.float64, "sparse")
        self.n_features_in_ = d
        self.threshold_ = 0.5 if self.model == "ridge" else 0.0
        if self.model == "ridge" and Y_full is not None:
            coef, intercept = _ridge_closed_form(X, Y_full, self.alpha, self.fit_intercept)
            self.coef_ = np.ascontiguousarray(coef, dtype=dtype)
            self.intercept_ = np.ascontiguousarray(intercept, dtype=dtype)
            return self
        coef = np.zeros((n_labels, d), dtype=dtype)
        intercept = np.zeros(n_labels, dtype=dtype)
        if Y_full is not None:
            Yc = Y_full.tocsc()
            rows_of = [np.arange(n)] * n_labels
            y_of = [Yc[:, j].toarray().ravel() for j in range(n_labels)]
        else:
            t_indptr = entries.t_indptr
            y_t = entries.y[entries.perm]
            rows_of = [entries.t_indices[t_indptr[j]:t_indptr[j + 1]]
                       for j in range(n_labels)]
            y_of = [y_t[t_indptr[j]:t_indptr[j + 1]] for j in range(n_labels)]
        for j in range(n_labels):
            rows, y = rows_of[j], y_of[j]
            if self.model == "logistic" and (rows.size == 0 or y.min() == y.max()):
                p = float(y.sum())
                intercept[j] = np.log((p + 0.5) / (y.size - p + 0.5))
                continue
            if rows.size == 0:
                continue
            est = self._make().fit(X[rows], y)
            coef[j] = np.ravel(est.coef_)
            intercept[j] = np.ravel(est.intercept_)[0] if self.fit_intercept else 0.0
        self.coef_, self.intercept_ = coef, intercept
        return self


class ClosedFormLowRank(_LinearMultiLabel):
    """Closed-form squared-loss solution on fully observed labels (ridge / CPLST).

    Solves ``min_{rank(Z) <= k} ||Y - X Z||_F^2 + alpha ||Z||_F^2``.

    Parameters
    ----------
    rank : int or None, default=None
        ``k``; None gives the full-rank ridge solution ``Z = (X^T X + alpha I)^{-1} X^T Y``.
    alpha : float, default=1.0
    fit_intercept : bool, default=False
        Append a constant feature (regularised like the others, as in LEML).
    dtype : {np.float32, np.float64}, default=np.float64
        Working dtype of the ``d x d`` factorisation and of the result.

    Attributes
    ----------
    W_ : ndarray of shape (d + fit_intercept, k)
        ``G^{-T} U_k S_k``.
    H_ : ndarray of shape (L, k)
        ``V_k``, orthonormal columns (CPLST's label-space basis).
    coef_ : ndarray of shape (L, d)
    intercept_ : ndarray of shape (L,)
    threshold_ : float
        0.5.

    Notes
    -----
    Needs the dense ``d x d`` matrix ``X^T X``: O(d^2) memory and O(d^3) time (one Cholesky
    factorisation).
    """

    def __init__(self, rank=None, alpha=1.0, fit_intercept=False, dtype=np.float64):
        self.rank = rank
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.dtype = dtype

    def fit(self, X, Y, mask=None):
        """Fit on fully observed labels (``mask`` must be None or all observed)."""
        if not self.alpha > 0:
            raise ValueError(f"alpha must be positive, got {self.alpha!r}")
        dtype = np.dtype(self.dtype)
        X = check_X(X, dtype)
        n, d = X.shape
        Y_full, _, n_labels = check_labels(Y, mask, n, dtype)
        if Y_full is None:
            raise ValueError("ClosedFormLowRank needs fully observed labels; the mask or "
                             "NaN entries leave some unobserved")
        Xa = add_constant_column(X) if self.fit_intercept else X
        m = Xa.shape[1]
        if self.rank is not None and not 1 <= int(self.rank) <= min(m, n_labels):
            raise ValueError(f"rank must be in [1, {min(m, n_labels)}], got {self.rank!r}")
        # The system as a sparse product (up to 12 bytes an entry) and as the dense array
        # factored in place (Fortran order, as LAPACK takes it).
        check_allocation((m, m), dtype, copies=2.5,
                         what="ClosedFormLowRank (the d x d normal equations)",
                         advice="use fewer features (a smaller vocabulary) or drop "
                         "closed-form from the baselines")
        C = _dense_symmetric(Xa.T @ Xa)
        C[np.diag_indices_from(C)] += self.alpha
        XtY = _dense(Xa.T @ Y_full, order="F")
        # C = G G^T (Cholesky): any square root of C gives the same M's singular values and
        # right vectors, and a triangular one costs a factorisation, not an eigendecomposition.
        G = scipy.linalg.cholesky(C, lower=True, overwrite_a=True, check_finite=False)
        if self.rank is None:
            Z = scipy.linalg.cho_solve((G, True), XtY, check_finite=False)
            W, H = Z, np.eye(n_labels, dtype=dtype)
        else:
            k = int(self.rank)
            M = scipy.linalg.solve_triangular(G, XtY, lower=True, check_finite=False)
            U, S, Vt = np.linalg.svd(M, full_matrices=False)
            W = scipy.linalg.solve_triangular(G, U[:, :k] * S[:k], lower=True, trans="T",
                                              check_finite=False)
            H = Vt[:k].T
            Z = W @ H.T
        self.W_ = np.ascontiguousarray(W, dtype=dtype)
        self.H_ = np.ascontiguousarray(H, dtype=dtype)
        Z = np.asarray(Z, dtype=dtype)
        self.coef_ = np.ascontiguousarray(Z[:d].T)
        self.intercept_ = (Z[d].copy() if self.fit_intercept
                           else np.zeros(n_labels, dtype=dtype))
        self.n_features_in_ = d
        self.threshold_ = 0.5
        return self
