"""The baselines of ``tasks.leml`` are named, not imported (the estimators import scikit-learn,
which only the steps that fit need): each name resolves to its estimator, and the
``leml-baseline`` step fits it with the fixed parameters, as the estimator fitted directly."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import scarce.algorithms.leml as methods
from scarce.algorithms.leml.params import BASELINES as OFFERED
from scarce.tasks.leml import BASELINES, _test_scores, baseline, baseline_estimator


def test_every_offered_baseline_has_an_estimator():
    assert sorted(BASELINES) == sorted(OFFERED)


@pytest.mark.parametrize("method", sorted(BASELINES))
def test_a_baseline_step_fits_its_named_estimator(method):
    estimator, fixed = baseline_estimator(method)
    assert estimator is getattr(methods, BASELINES[method][0]) and fixed == BASELINES[method][1]
    rng = np.random.default_rng(0)
    X = sp.random(60, 12, density=0.4, format="csr", random_state=rng, dtype=np.float32)
    Y = sp.csr_matrix((rng.random((60, 5)) < 0.3).astype(np.float32))
    train, test = {"X": X[:40], "Y": Y[:40]}, {"X": X[40:], "Y": Y[40:]}
    propensity = np.ones(5)
    params = {"alpha": 1.0, **({"rank": 2} if method == "closed-form" else {})}
    got = baseline.fn(train=train, mask=None, test=test, propensity=propensity, method=method,
                      params=params, dataset="d", batch_size=8)
    model = estimator(**fixed, **params).fit(train["X"], train["Y"], None)
    want = _test_scores(model, test, 8, propensity)
    assert got["metric"].tolist() == list(want)
    np.testing.assert_array_equal(got["value"].to_numpy(), np.array(list(want.values())))
