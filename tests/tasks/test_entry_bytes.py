"""A step's entries are a function of their values: the same bytes under any key.

A step whose code digest changed (an edit that leaves its result unchanged) writes its entries
under new keys; their files must be the bytes of the same values written before, so that the
run folders publishing them (hard links) are too.  The independent truth is the encoding of the
value alone (:func:`scarce.tasks.store.encoding.encode`, given nothing but the value).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from scarce.tasks.steps import execute, step
from scarce.tasks.store import Store
from scarce.tasks.store.encoding import ENTRY_KINDS, encode

#: A value of every kind an entry holds, in each form the store keeps apart.
VALUES = {
    "table": pd.DataFrame({"doc": ["a", "b"], "score": [0.5, np.nan], "n": [1, 2]}),
    "sparse-csr": sp.csr_matrix(np.array([[0, 1.5], [2.0, 0]], dtype=np.float32)),
    "sparse-csc": sp.csc_matrix(np.array([[0, 1], [2, 0]], dtype=np.int64)),
    "sparse-coo": sp.coo_matrix(np.eye(3)),
    "dense-1d": np.arange(4, dtype=np.int32),
    "dense-2d": np.arange(6, dtype=np.float64).reshape(3, 2),
    "dense-3d": np.ones((2, 2, 2), dtype=np.float32),
}


def test_the_values_cover_every_kind_of_entry():
    kinds = {encode(v).schema.metadata[b"scarce.kind"].decode() for v in VALUES.values()}
    assert kinds == set(ENTRY_KINDS)


@pytest.mark.parametrize("write_behind", [False, True], ids=["in-place", "behind"])
@pytest.mark.parametrize("kind", VALUES)
def test_a_steps_entries_are_the_same_bytes_whatever_its_code_digest(kind, write_behind,
                                                                      tmp_path, monkeypatch):
    value = VALUES[kind]

    def make(a: int) -> dict:
        return {"value": value, "copy": value}

    st = step("t-bytes", outputs=("value", "copy"))(make)
    store = Store(tmp_path)
    first = execute(st, store, {"a": 1}, write_behind=write_behind)
    monkeypatch.setattr(st, "code_hash", st.code_hash + "-edited")
    second = execute(st, store, {"a": 1}, write_behind=write_behind)
    store.flush()
    assert first["value"] != second["value"]  # another key ...
    files = {ref: store.path(ref).read_bytes() for refs in (first, second)
             for ref in refs.values()}
    assert len(set(files.values())) == 1  # ... and every part the same bytes
    # the footer is what encodes the value, nothing of the step, its key or its part
    want = encode(value).schema.metadata
    for ref in files:
        assert pq.read_schema(store.path(ref)).metadata == want, ref
