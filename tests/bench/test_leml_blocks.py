"""``scarce bench leml-blocks``: the H-step from row-block sums against the whole-data one."""

import argparse

import pytest

from scarce.bench import leml_blocks


@pytest.mark.slow
def test_block_h_steps_equal_update_h_and_workers_agree_bit_for_bit():
    table = leml_blocks.run(argparse.Namespace(data=None, repeats=1))
    assert len(table) == 12  # 2 problems x 2 dtypes x 2 ways, and 1 and 2 workers in float32
    f64 = table[table["dtype"] == "float64"]
    assert (f64["max_rel_diff"] < 1e-10).all()
    f32 = table[table["dtype"] == "float32"]
    assert (f32["max_rel_diff"] < 1e-4).all()
    dask = table[table["way"].str.startswith("Dask")]
    assert len(dask) == 4 and dask["same_bits_1_2_workers"].all()
    whole = table[table["way"] == "update_H (whole data)"]
    assert (whole["ratio_to_update_H"] == 1.0).all()
