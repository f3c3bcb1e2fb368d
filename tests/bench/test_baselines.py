"""``scarce bench baselines``: BR ridge and its peers on the same matrices, a small run."""

import argparse

import numpy as np
import pytest

from scarce.bench import baselines


def _args(**changes) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    baselines.add_arguments(parser)
    args = parser.parse_args([])
    return argparse.Namespace(**{**vars(args), **changes})


@pytest.mark.slow
def test_every_method_on_both_systems_with_its_residual_and_ratio_to_the_peer():
    table = baselines.run(_args(problems=["text", "text-dual"], methods=list(baselines.METHODS),
                                repeats=2, rows=400, features=300, labels=12, dual_rows=100))
    assert sorted(table["problem"].unique()) == ["text", "text-dual"]
    assert len(table) == 2 * len(baselines.METHODS)
    shapes = table.groupby("problem")[["n", "d", "labels"]].first()
    assert tuple(shapes.loc["text"]) == (400, 300, 12)  # the n > d branch
    assert tuple(shapes.loc["text-dual"]) == (100, 300, 12)  # the n < d branch
    by = table.set_index(["problem", "method"])
    for problem in ("text", "text-dual"):
        assert by.loc[(problem, "cholesky"), "ratio_to_cholesky"] == 1.0
        assert by.loc[(problem, "cholesky"), "cpu_ratio_to_cholesky"] == 1.0
        for method in ("br-ridge", "cholesky", "closed-form"):  # direct solves: to rounding
            assert by.loc[(problem, method), "residual"] < 1e-12
        # scikit-learn's conjugate gradients stop at a tolerance
        assert 1e-12 < by.loc[(problem, "sklearn"), "residual"] < 1e-2
    assert np.isfinite(table[["median_seconds", "median_cpu_seconds"]]).all(axis=None)
    assert (table["repeats"] == 2).all()
