"""``scarce bench leml --sections partition`` (bench.leml_partition): a block read whole and
sliced against ``read_rows``, each in a fresh process."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from scarce.algorithms.leml.data import row_block_bounds
from scarce.bench import leml as bench
from scarce.bench.leml_partition import digest, read_block, write_matrix
from scarce.tasks.store.encoding import read_parquet_entry
from tests.bench.tables import leml_table


def test_the_written_matrix_and_both_reads_of_a_block_are_its_rows(tmp_path):
    path = tmp_path / "X.parquet"
    nnz = write_matrix(path, 3_000, 500, 7, seed=3)
    X = read_parquet_entry(path)
    assert X.shape == (3_000, 500) and X.nnz == nnz and X.dtype == np.float32
    assert np.array_equal(np.diff(X.indptr) <= 7, np.ones(3_000, bool))
    start, stop = row_block_bounds(3_000, 4)[2]
    expected = X[start:stop]
    whole = read_block(str(path), start, stop, "whole", 1)
    rows = read_block(str(path), start, stop, "rows", 2)
    assert whole["digest"] == rows["digest"] == digest(expected)
    assert rows["digest"][0] == [stop - start, 500] and expected.nnz > 0
    assert read_block(str(path), start, stop + 1, "rows", 1)["digest"] != rows["digest"]
    assert rows["peak"] >= rows["before"] > 0 and rows["seconds"] > 0


@pytest.mark.slow
def test_the_section_gives_both_ways_in_fresh_processes_and_their_ratios():
    table = leml_table("--datasets", "none", "--sections", "partition",
                       "--partition-shape", "20000x4000", "--partition-row-nnz", "20",
                       "--partition-blocks", "5", "--partition-block", "4",
                       "--repeats", "1")
    assert table[("read_rows / whole", "the same block (exactly)")] == 1.0
    for way in ("read whole, then slice", "read_rows"):
        assert table[(way, "seconds")] > 0
        assert table[(way, "peak RSS GiB")] >= table[(way, "RSS GiB before the read (imports)")]
    assert table[("read_rows / whole", "peak RSS ratio")] > 0


def test_a_shape_is_rows_by_columns():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    assert parser.parse_args(["--partition-shape", "10X20"]).partition_shape == (10, 20)
    with pytest.raises(SystemExit):
        parser.parse_args(["--partition-shape", "10"])
