"""The LEML load step reads a Parquet X/Y pair, and both files are in its key."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from tasks.leml import label_file, load, parquet_pair
from tasks.store import atomic_write_parquet, encode


def _write(path, matrix) -> None:
    atomic_write_parquet(path, encode(matrix))


def test_a_changed_label_file_of_a_parquet_pair_changes_the_load_key(tmp_path):
    X = sp.random(6, 5, density=0.5, format="csr", random_state=0, dtype=np.float32)
    Y = sp.csr_matrix(np.eye(6, 3, dtype=np.float32))
    x_path, y_path = parquet_pair(tmp_path / "data.X.parquet")
    assert (x_path.name, y_path.name) == ("data.X.parquet", "data.Y.parquet")
    _write(x_path, X)
    _write(y_path, Y)
    call = dict(path=x_path, format="parquet", dtype="float32", n_labels=None, normalize="none",
                labels_file=label_file(x_path, "parquet"))
    assert call["labels_file"] == y_path
    got = load(**call)
    np.testing.assert_array_equal(got["X"].toarray(), X.toarray())
    np.testing.assert_array_equal(got["Y"].toarray(), Y.toarray())
    before = load.key(call)
    _write(y_path, sp.csr_matrix(np.eye(6, 3, k=1, dtype=np.float32)))  # X unchanged
    assert load.key(call) != before
    assert label_file(tmp_path / "d.txt", "xmc") is None
