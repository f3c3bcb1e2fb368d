"""A fitted LEML's predictions from its factors alone (``FactorModel``, what a loaded model
scores with) are the estimator's to the last bit; and the package's names are imported from
their modules on first use, each from the module its static import names."""

from __future__ import annotations

import ast
import importlib
import inspect

import numpy as np
import pytest
import scipy.sparse as sp

import scarce.algorithms.leml as leml_package
from scarce.algorithms.leml import LEML
from scarce.algorithms.leml.predict import FactorModel, predictions_table


def _fitted(seed: int, fit_intercept: bool, dtype) -> tuple[LEML, sp.csr_matrix]:
    rng = np.random.default_rng(seed)
    X = sp.random(60, 12, density=0.4, format="csr", random_state=seed, dtype=np.float64)
    Y = (rng.random((60, 9)) < 0.3).astype(float)
    est = LEML(rank=4, outer_iterations=2, fit_intercept=fit_intercept, dtype=dtype,
               random_state=seed).fit(X, Y)
    return est, sp.csr_matrix(X, dtype=est.W_.dtype)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("dense", [False, True], ids=["csr", "dense"])
def test_the_factors_predict_as_the_fitted_estimator_bit_for_bit(fit_intercept, dtype, dense):
    est, X = _fitted(3, fit_intercept, dtype)
    rows = X.toarray() if dense else X
    factors = FactorModel(est.W_, est.H_, fit_intercept)
    assert (factors.n_features_in_, factors.n_labels_) == (est.n_features_in_, est.n_labels_)
    np.testing.assert_array_equal(factors.decision_function(rows), est.decision_function(rows))
    for k, batch in ((1, 7), (5, 2048), (9, 13)):
        got = factors.predict_top_k(rows, k, batch, return_scores=True)
        want = est.predict_top_k(rows, k, batch, return_scores=True)
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)
    assert predictions_table(factors, rows, 3, 16).equals(predictions_table(est, rows, 3, 16))


def test_rows_not_in_the_factors_dtype_or_width_are_refused():
    est, X = _fitted(4, True, "float32")
    factors = FactorModel(est.W_, est.H_, True)
    with pytest.raises(ValueError, match="float64 but W is float32"):
        factors.predict_top_k(X.astype(np.float64), 2)
    with pytest.raises(ValueError, match="features"):
        factors.predict_top_k(X[:, :5], 2)
    with pytest.raises(ValueError, match="CSR matrix or a 2-D array"):
        factors.decision_function(X.tocoo())
    with pytest.raises(ValueError, match="same k"):
        FactorModel(est.W_, est.H_[:, :2], True)


def _static_imports() -> dict[str, str]:
    """name -> module of the package's own ``from ... import`` statements (its TYPE_CHECKING
    block, which the step keys' code digest reads)."""
    tree = ast.parse(inspect.getsource(leml_package))
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module.startswith(leml_package.__name__):
            out.update({alias.name: node.module for alias in node.names})
    return out


def test_each_name_of_the_package_is_its_modules_and_statically_imported_from_it():
    names = {name: f"{leml_package.__name__}.{module}"
             for module, group in leml_package.SUBMODULE_NAMES.items() for name in group}
    assert names == _static_imports()
    assert sorted(names) == sorted(leml_package.__all__)
    for name, module in names.items():
        assert getattr(leml_package, name) is getattr(importlib.import_module(module), name)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        leml_package.nothing  # noqa: B018
