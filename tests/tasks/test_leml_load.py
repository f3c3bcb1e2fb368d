"""The LEML load step reads a Parquet X/Y pair, and both files are in its key."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from scarce.tasks.leml import load
from scarce.tasks.leml_files import label_file, parquet_pair
from scarce.tasks.store.atomic import atomic_write_parquet
from scarce.tasks.store.encoding import encode


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


def test_a_folder_of_parts_lists_its_parts_in_name_order(tmp_path):
    """A folder input: XC parts (``.txt`` and ``.txt.gz``) or Parquet pairs (by their X file),
    in name order; a file is not a folder; ARFF parts and a folder without parts are
    refused, naming the folder and the key."""
    import pytest

    from scarce.tasks.errors import InputError
    from scarce.tasks.leml import input_parts

    xc = tmp_path / "xc"
    xc.mkdir()
    for name in ("b.txt.gz", "a.txt", "c.txt", "notes.md"):
        (xc / name).write_text("")
    assert [p.name for p in input_parts(xc, "xmc")] == ["a.txt", "b.txt.gz", "c.txt"]
    pq_dir = tmp_path / "pq"
    pq_dir.mkdir()
    for name in ("p1", "p0"):
        _write(pq_dir / f"{name}.X.parquet", sp.csr_matrix(np.eye(2, dtype=np.float32)))
        _write(pq_dir / f"{name}.Y.parquet", sp.csr_matrix(np.eye(2, dtype=np.float32)))
    parts = input_parts(pq_dir, "parquet")
    assert [p.name for p in parts] == ["p0.X.parquet", "p1.X.parquet"]
    assert [label_file(p, "parquet").name for p in parts] == ["p0.Y.parquet", "p1.Y.parquet"]
    assert input_parts(xc / "a.txt", "xmc") is None
    with pytest.raises(InputError, match="xmc or parquet format, not 'arff'") as err:
        input_parts(xc, "arff", key="dataset.train")
    assert err.value.key == "dataset.train"
    with pytest.raises(InputError, match=r"no \*\.X\.parquet files"):
        input_parts(xc, "parquet")
