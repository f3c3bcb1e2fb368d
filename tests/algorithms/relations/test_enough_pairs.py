"""Whether a number of pairs suffices for the method's parameters, and which one says not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from scarce.algorithms.relations.model import RelationDiscovery, TooFewPairsError
from scarce.algorithms.relations.stability import subsample_indices


@pytest.mark.parametrize("params, n, param, message", [
    (dict(k_low=2, k_high=12), 12, "k_high", r"k_high \(12\) must be below the number of pairs"),
    (dict(k_low=2, k_high=3, rho=0.1), 12, "rho",
     r"rho \(0.1\) subsamples 2 of the 12 pairs, fewer than the k_high \(3\) clusters each "
     r"subsample is split into; use rho >= 0.25"),
    (dict(k_low=2, k_high=3, rho=0.4), 6, "rho", r"rho \(0.4\) subsamples 2 of the 6 pairs"),
    (dict(k_low=2, k_high=20), 21, "rho", r"rho \(0.9\) subsamples 19 of the 21 pairs.*>= 0.953"),
    (dict(k_low=2, k_high=3, ranking="chi2", chi2_k=13), 12, "chi2_k",
     r"chi2_k \(13\) must not exceed the number of pairs \(12\)"),
])
def test_too_few_pairs_names_the_parameter_and_what_would_work(params, n, param, message):
    with pytest.raises(TooFewPairsError, match=message) as err:
        RelationDiscovery(**params).check_n_pairs(n)
    assert err.value.param == param
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize("n", [4, 7, 12, 21, 100, 999])
@pytest.mark.parametrize("k_high", [2, 3, 5, 17])
def test_the_rho_it_proposes_draws_subsamples_of_k_high_pairs(n, k_high):
    """The check agrees with the draw itself: at the proposed rho every subsample holds at
    least k_high pairs, and below the smallest working rho the check refuses."""
    if k_high >= n:
        return
    model = RelationDiscovery(k_low=2, k_high=k_high, rho=0.01)
    try:
        model.check_n_pairs(n)
        return  # (tiny k_high: two pairs at least are always drawn)
    except TooFewPairsError as exc:
        proposed = float(str(exc).split("rho >= ")[1].split(",")[0])
    assert subsample_indices(n, proposed, seed=0, sample_index=0).size >= k_high
    model.set_params(rho=proposed).check_n_pairs(n)
    below = math.floor(1000 * (k_high - 0.5) / n) / 1000 - 0.001
    if below > 0:
        with pytest.raises(TooFewPairsError):
            model.set_params(rho=below).check_n_pairs(n)


def test_fit_refuses_too_few_pairs_as_the_flow_does():
    X = np.eye(12)
    with pytest.raises(TooFewPairsError, match="rho"):
        RelationDiscovery(k_low=2, k_high=3, rho=0.1).fit(X)
