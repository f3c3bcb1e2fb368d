"""``scarce bench store``: the memory of the store's writes and reads, as ratios to the entry."""

import argparse

import numpy as np
import pytest

from scarce.bench import store as bench

pytestmark = pytest.mark.slow  # starts a Python process per measurement


def test_every_entry_and_operation_has_a_row_of_ratios():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--rows", "2000", "--cols", "500", "--density", "0.02",
                              "--dense-cols", "5"])
    table = bench.run(args)
    assert list(zip(table["entry"], table["operation"], strict=True)) == [
        (kind, op) for kind in bench.KINDS for op in bench.OPERATIONS]
    sparse = bench.make_value("sparse", rows=2000, cols=500, density=0.02, dense_cols=5)
    dense = bench.make_value("dense", rows=2000, cols=500, density=0.02, dense_cols=5)
    expected = {"sparse": bench.value_nbytes(sparse) / 2**20,
                "dense": bench.value_nbytes(dense) / 2**20}
    assert np.allclose(table["entry_MiB"], table["entry"].map(expected), atol=1e-3)
    assert (table["file_MiB"] > 0).all() and (table["traced_peak"] > 0).all()
    assert table[["seconds", "arrow_peak", "rss_after"]].notna().all().all()


def test_the_sparse_entry_has_distinct_increasing_columns_in_every_row():
    value = bench.make_value("sparse", rows=50, cols=1000, density=0.01, dense_cols=1)
    assert value.dtype == np.float32 and value.indices.dtype == np.int32
    assert value.has_canonical_format and value.nnz == 50 * 10
    assert np.all(np.diff(value.indptr) == 10)
