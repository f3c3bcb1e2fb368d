"""The Parquet result store: exact round trips, checksums, atomic writes."""

from __future__ import annotations

import errno
import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from scarce.tasks.errors import InputError
from scarce.tasks.store import Store
from scarce.tasks.store.atomic import STORE_KEY, StoreWriteError
from scarce.tasks.store.background import RECENT_TABLE_BYTES
from scarce.tasks.store.encoding import CorruptEntry
from scarce.tasks.store.gc import Foreign

REPO = Path(__file__).resolve().parents[2]

_refs = itertools.count()


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory):
    """One store for the property tests; each example writes its own ref."""
    return Store(tmp_path_factory.mktemp("hyp"))


def _ref() -> str:
    return f"t/k{next(_refs)}"

DTYPES = st.sampled_from(["<f4", "<f8", "<i4", "<i8", "|b1", "<u2"])


def _arrays(min_dims=1, max_dims=3):
    return DTYPES.flatmap(
        lambda dt: hnp.arrays(
            dtype=dt,
            shape=hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=0, max_side=6),
            elements={"allow_nan": False} if dt[1] == "f" else None,
        )
    )


@settings(max_examples=60, deadline=None)
@given(arr=_arrays())
def test_dense_round_trip_is_exact(shared_store, arr):
    ref = shared_store.write(_ref(), arr)
    back = shared_store.read(ref)
    assert back.dtype == arr.dtype
    assert back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.tuples(st.integers(0, 8), st.integers(0, 8)),
    density=st.floats(0, 1),
    fmt=st.sampled_from(["csr", "csc", "coo"]),
    dtype=st.sampled_from([np.float32, np.float64, np.int64]),
    seed=st.integers(0, 2**16),
)
def test_sparse_round_trip_is_exact(shared_store, shape, density, fmt, dtype, seed):
    m = sp.random(*shape, density=density, format=fmt, dtype=np.float64, random_state=seed)
    m = (m * 10).astype(dtype)
    ref = shared_store.write(_ref(), m)
    back = shared_store.read(ref)
    assert back.format == fmt
    assert back.dtype == m.dtype
    assert back.shape == m.shape
    np.testing.assert_array_equal(back.toarray(), m.toarray())
    if fmt != "coo":
        assert back.indices.dtype == m.indices.dtype


def test_sparse_keeps_explicit_zeros_and_index_dtype(tmp_path):
    m = sp.csr_matrix(
        (
            np.array([0.0, 2.0], np.float32),
            np.array([0, 2], np.int32),
            np.array([0, 1, 2], np.int32),
        ),
        shape=(2, 3),
    )
    store = Store(tmp_path)
    store.write("t/k", m)
    back = store.read("t/k")
    assert back.nnz == 2
    assert back.indptr.dtype == np.int32
    assert back.data.dtype == np.float32


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 20),
    seed=st.integers(0, 2**16),
)
def test_table_round_trip_keeps_dtypes(shared_store, n, seed):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {
            "i": rng.integers(-5, 5, n).astype(np.int32),
            "f": rng.random(n).astype(np.float32),
            "s": [f"w{x}" for x in rng.integers(0, 9, n)],
            "b": rng.random(n) > 0.5,
        }
    )
    ref = shared_store.write(_ref(), frame)
    pd.testing.assert_frame_equal(shared_store.read(ref), frame)


def test_entries_open_in_pandas_pyarrow_and_duckdb(tmp_path):
    store = Store(tmp_path)
    store.write("t/m", sp.identity(3, format="csr", dtype=np.float64))
    store.write("t/d", np.arange(6, dtype=np.float32).reshape(3, 2))
    path_m, path_d = store.path("t/m"), store.path("t/d")
    rows = duckdb.sql(f"select row, col, value from '{path_m}' order by row").fetchall()
    assert rows == [(0, 0, 1.0), (1, 1, 1.0), (2, 2, 1.0)]
    meta = pq.read_schema(path_m).metadata
    assert meta[b"scarce.shape"] == b"[3, 3]"
    frame = pd.read_parquet(path_d)
    assert list(frame.columns) == ["0", "1"]
    assert frame["1"].tolist() == [1.0, 3.0, 5.0]


@pytest.mark.parametrize("damage", ["truncate", "zero", "flip", "empty"])
def test_damaged_entry_is_detected(tmp_path, damage):
    store = Store(tmp_path)
    arr = np.random.default_rng(0).random((200, 5))
    store.write("t/k", arr)
    path = store.path("t/k")
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "zero":
        data[100:400] = bytes(300)
    elif damage == "flip":
        data[len(data) // 3] ^= 0xFF
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert not store.verify("t/k")
    with pytest.raises(CorruptEntry):
        store.read("t/k")


def test_checksum_catches_a_valid_parquet_with_changed_values(tmp_path):
    store = Store(tmp_path)
    store.write("t/k", np.arange(5, dtype=np.int64))
    path = store.path("t/k")
    table = pq.read_table(path)
    # Rewrite with the old metadata (checksum included) but different values.
    import pyarrow as pa

    forged = pa.table(
        {"value": pa.array(np.arange(5, dtype=np.int64) + 1)}
    ).replace_schema_metadata(table.schema.metadata)
    pq.write_table(forged, path)
    with pytest.raises(CorruptEntry, match="checksum"):
        store.read("t/k")


def test_write_is_atomic_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    store = Store(tmp_path)
    store.write("t/k", np.zeros(3))
    before = store.path("t/k").read_bytes()

    import pyarrow as pa

    import scarce.tasks.store.atomic as mod

    real = mod.pq.write_table

    def boom(table, where, **k):  # the file fails, the encoding in memory does not
        if isinstance(where, pa.BufferOutputStream):
            return real(table, where, **k)
        raise OSError("disk full")

    monkeypatch.setattr(mod.pq, "write_table", boom)
    with pytest.raises(StoreWriteError, match="disk full"):
        store.write("t/k", np.ones(3))
    assert store.path("t/k").read_bytes() == before
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["k.parquet"]


def _refuse(code: int, under: Path, real):
    """``real`` (os.fsync, os.replace, os.open ...) failing with ``code``
    for the files under ``under`` only: the system refusing the store's writes."""

    def call(*args, **kwargs):
        target = args[1] if real is os.replace else (kwargs.get("dir") or args[0])
        if isinstance(target, int):  # a file descriptor
            target = os.readlink(f"/proc/self/fd/{target}")
        if str(target).startswith(str(under)):
            raise OSError(code, os.strerror(code), str(target))
        return real(*args, **kwargs)

    return call


REFUSALS = {  # where the system refuses a write, with which error
    "full-disk-at-fsync": (errno.ENOSPC, "fsync"),
    "quota-at-fsync": (errno.EDQUOT, "fsync"),
    "read-only-at-rename": (errno.EROFS, "replace"),
    "read-only-at-create": (errno.EROFS, "open"),
    "not-ours-at-create": (errno.EACCES, "open"),
}


def _patch(monkeypatch, name: str, code: int, under: Path) -> None:
    monkeypatch.setattr(os, name, _refuse(code, under, getattr(os, name)))


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_write_the_system_refuses_names_the_store_and_leaves_nothing(tmp_path, monkeypatch,
                                                                      case):
    code, where = REFUSALS[case]
    store = Store(tmp_path / "store")
    store.write("t/old", np.zeros(3))
    _patch(monkeypatch, where, code, store.root)
    for ref, value in [("t/old", np.ones(3)), ("t/new", np.ones(3)), ("u/new", np.ones(3))]:
        with pytest.raises(StoreWriteError) as info:
            store.write(ref, value)
        err = info.value
        assert isinstance(err, InputError) and isinstance(err.__cause__, OSError)
        assert err.path == str(store.root) and err.key == STORE_KEY
        assert f"cannot write entry {ref}: {os.strerror(code)}" in str(err)
    with pytest.raises(StoreWriteError, match=os.strerror(code)):  # a step's seal
        store.write_file(store.prefect_dir / f"{K1}.sha256.json", b"{}")
    monkeypatch.undo()
    files = sorted(str(p.relative_to(store.root)) for p in store.root.rglob("*") if p.is_file())
    assert files == ["t/old.parquet"]  # no temporary file, no new entry
    np.testing.assert_array_equal(store.read("t/old"), np.zeros(3))  # the old entry intact


@pytest.mark.parametrize("code", [errno.EROFS, errno.EACCES, errno.ENOSPC])
def test_a_lease_or_gc_lock_the_system_refuses_names_the_store(tmp_path, monkeypatch, code):
    store = Store(tmp_path / "store")
    monkeypatch.setattr(os, "open", _refuse(code, store.root, os.open))
    with pytest.raises(StoreWriteError, match=f"the lease of run r1: {os.strerror(code)}") as info:
        store.lease("r1")
    assert info.value.path == str(store.root) and info.value.key == STORE_KEY
    with pytest.raises(StoreWriteError, match=os.strerror(code)):
        store.gc(keep=set())
    monkeypatch.undo()
    lease = store.lease("r2")
    monkeypatch.setattr("builtins.open", _refuse(code, store.root, open))
    with pytest.raises(StoreWriteError, match=f"the lease of run r2: {os.strerror(code)}"):
        lease.note(["t/x"])
    monkeypatch.undo()
    lease.release()
    assert list(store.lease_dir.iterdir()) in ([], [store.lease_dir / "gc.lock"])


@pytest.mark.parametrize("damage", ["empty-folder", "folder-of-files", "nested-folders"])
def test_a_folder_in_place_of_an_entry_is_corrupt_and_replaced_by_the_next_write(tmp_path,
                                                                                  damage):
    store = Store(tmp_path)
    store.write(f"t/{K1}", np.zeros(3))
    path = store.path(f"t/{K1}")
    path.unlink()
    path.mkdir()
    if damage != "empty-folder":
        (path / "part-0.parquet").write_bytes(b"PAR1")
    if damage == "nested-folders":
        (path / "a" / "b").mkdir(parents=True)
        (path / "a" / "b" / "c.parquet").write_bytes(b"PAR1")
    assert not store.exists(f"t/{K1}") and not store.verify(f"t/{K1}")
    for read in (store.read, store.read_table):
        with pytest.raises(CorruptEntry, match="a folder, not a file"):
            read(f"t/{K1}")
    # not an entry scarce wrote: neither listed nor removed by gc, but named
    assert store.refs() == [] and store.ls().empty
    assert store.scan().foreign == [Foreign(f"t/{K1}.parquet/", "a folder")]
    report = store.gc(keep=set())
    assert report.removed == [] and report.foreign == [Foreign(f"t/{K1}.parquet/", "a folder")]
    assert path.is_dir()
    store.write(f"t/{K1}", np.ones(3))  # a step run again replaces it
    np.testing.assert_array_equal(store.read(f"t/{K1}"), np.ones(3))
    assert store.refs() == [f"t/{K1}"]


@pytest.mark.parametrize("damage", ["file", "dangling-link"])
def test_a_file_in_place_of_a_task_folder_is_replaced_by_the_next_write(tmp_path, damage):
    store = Store(tmp_path)
    folder = tmp_path / "t"
    if damage == "file":
        folder.write_bytes(b"not a folder")
    else:
        folder.symlink_to(tmp_path / "nowhere")
    with pytest.raises(CorruptEntry):
        store.read(f"t/{K1}")
    store.write(f"t/{K1}", np.arange(3))
    np.testing.assert_array_equal(store.read(f"t/{K1}"), np.arange(3))
    assert folder.is_dir() and not folder.is_symlink()


def test_refs_never_escape_the_root(tmp_path):
    store = Store(tmp_path)
    for bad in ["../x", "/etc/passwd", "t", "t/../../x", "a/b/c"]:
        with pytest.raises(ValueError):
            store.path(bad)


def test_unsupported_values_are_rejected(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(TypeError, match="complex"):
        store.write("t/k", np.zeros(2, dtype=complex))
    with pytest.raises(TypeError, match="dict"):
        store.write("t/k", {"a": 1})
    assert not os.path.exists(store.path("t/k"))


K1, K2, K3 = "1" * 32, "2" * 32, "3" * 32


def test_ls_and_gc(tmp_path):
    store = Store(tmp_path)
    store.write(f"a/{K1}", np.zeros(2))
    store.write(f"a/{K2}", np.zeros(2))
    store.write(f"b/{K3}-X", np.zeros(2))
    frame = store.ls()
    assert frame["ref"].tolist() == [f"a/{K1}", f"a/{K2}", f"b/{K3}-X"]
    assert set(frame["kind"]) == {"dense"}
    size = store.size(f"a/{K2}") + store.size(f"b/{K3}-X")
    report = store.gc(keep={f"a/{K1}"}, dry_run=True)
    assert report.removed == [f"a/{K2}", f"b/{K3}-X"] and report.bytes == size
    assert store.refs() == [f"a/{K1}", f"a/{K2}", f"b/{K3}-X"]
    assert store.gc(keep={f"a/{K1}"}).removed == [f"a/{K2}", f"b/{K3}-X"]
    assert store.refs() == [f"a/{K1}"]


def test_gc_removes_the_records_of_removed_steps_only(tmp_path):
    store = Store(tmp_path)
    for ref in (f"a/{K1}", f"b/{K2}-X", f"b/{K2}-Y"):
        store.write(ref, np.zeros(2))
    store.prefect_dir.mkdir()
    for key, refs in ((K1, f"a/{K1}"), (K2, {"X": f"b/{K2}-X", "Y": f"b/{K2}-Y"})):
        _write_record(store, key, refs)
        (store.prefect_dir / f"{key}.sha256.json").write_text(json.dumps(
            {ref: store.sha256(ref) for ref in ([refs] if isinstance(refs, str)
                                                else refs.values())}))
    report = store.gc(keep={f"a/{K1}"})
    assert report.foreign == []
    assert sorted(p.name for p in store.prefect_dir.iterdir()) == [K1, f"{K1}.sha256.json"]


def _write_record(store: Store, key: str, refs) -> None:
    """Prefect's cache record of a step call as a step's task writes it (its result store, the
    JSON serializer)."""
    from prefect.filesystems import LocalFileSystem
    from prefect.results import ResultStore
    from prefect.serializers import JSONSerializer

    ResultStore(result_storage=LocalFileSystem(basepath=str(store.prefect_dir)),
                serializer=JSONSerializer()).write(refs, key=key)


def test_gc_spares_what_a_live_lease_noted_or_wrote_until_it_is_released(tmp_path):
    store = Store(tmp_path)
    store.write(f"a/{K1}", np.zeros(2))  # an old entry the run takes from the cache
    store.write(f"a/{K2}", np.zeros(2))  # an old entry nobody uses
    for ref in (f"a/{K1}", f"a/{K2}"):
        old = store.path(ref).stat().st_mtime - 3600
        os.utime(store.path(ref), (old, old))
    lease = store.lease("run-1")
    lease.note([f"a/{K1}"])
    store.write(f"b/{K3}", np.zeros(2))  # written by the run
    tmp = store.root / "b" / f".{K3}.parquet.abcd1234.tmp"  # a write in progress
    tmp.write_bytes(b"partial")
    report = store.gc(keep=set())
    assert report.removed == [f"a/{K2}"] and report.live_runs == ["run-1"]
    assert report.kept_for_live_runs == 2 and tmp.exists()
    lease.release()
    assert store.gc(keep=set()).removed == [f"a/{K1}", f"b/{K3}"]
    assert not tmp.exists() and not list(store.lease_dir.glob("*.lease"))


@pytest.mark.slow  # starts a Python process
def test_the_lease_of_a_killed_process_is_stale(tmp_path):
    """A run killed with SIGKILL cannot release its lease; its lock goes with the process."""
    code = (
        "import os, signal, sys\n"
        "from scarce.tasks.store import Store\n"
        "lease = Store(sys.argv[1]).lease('killed')\n"
        "lease.note(['a/' + '1' * 32])\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    store = Store(tmp_path)
    store.write(f"a/{K1}", np.zeros(2))
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert (store.lease_dir / "killed.lease").exists()
    old = store.path(f"a/{K1}").stat().st_mtime - 3600
    os.utime(store.path(f"a/{K1}"), (old, old))
    report = store.gc(keep=set())
    assert report.live_runs == [] and report.removed == [f"a/{K1}"]
    assert not (store.lease_dir / "killed.lease").exists()
    assert not (store.lease_dir / "killed.refs").exists()


def test_tables_with_missing_values_and_lists_round_trip(tmp_path):
    frame = pd.DataFrame(
        {
            "f": [1.5, np.nan, 3.0],
            "n": pd.array([1, None, 3], dtype="Int64"),
            "s": ["a", None, "c"],
            "tokens": [["a", "b"], [], ["c"]],
        }
    )
    store = Store(tmp_path)
    store.write("t/k", frame)
    assert store.verify("t/k")
    back = store.read("t/k")
    assert np.isnan(back.loc[1, "f"]) and back["f"].dtype == np.float64
    assert back["n"].dtype == "Int64" and back["n"].isna().tolist() == [False, True, False]
    assert [list(t) for t in back["tokens"]] == [["a", "b"], [], ["c"]]
    pd.testing.assert_frame_equal(back.drop(columns="tokens"), frame.drop(columns="tokens"))


def _values_for_rows():
    rng = np.random.default_rng(5)
    X = sp.random(40, 9, density=0.3, random_state=1, format="csr", dtype=np.float32)
    X = sp.csr_matrix(X.toarray() * (np.arange(40) % 5 != 2)[:, None])  # some empty rows
    wide = sp.csr_matrix(X, dtype=np.float64)
    wide.indices, wide.indptr = wide.indices.astype(np.int64), wide.indptr.astype(np.int64)
    mask = sp.random(40, 9, density=0.4, random_state=2, format="csr").astype(bool)
    return {"csr-float32": X, "csr-int64-index": wide, "csr-bool": mask,
            "dense-float": rng.standard_normal((40, 3)), "dense-bool": rng.random((40, 4)) > 0.5}


def _spoil_row_groups(path: Path, groups) -> None:
    """Flip every byte of the column chunks of the row groups ``groups`` of the Parquet file
    at ``path``, its footer left intact: a read of any of those row groups fails (a page
    header that does not parse, or a page checksum that does not match)."""
    md = pq.read_metadata(path)
    raw = bytearray(path.read_bytes())
    for i in groups:
        for j in range(md.num_columns):
            chunk = md.row_group(i).column(j)
            start = (chunk.dictionary_page_offset if chunk.has_dictionary_page
                     else chunk.data_page_offset)
            stop = start + chunk.total_compressed_size
            raw[start:stop] = bytes(b ^ 0xFF for b in raw[start:stop])
    path.write_bytes(bytes(raw))


def _matrix_rows_by_group(table, group_size: int) -> list[np.ndarray]:
    """The matrix rows of the table rows of each row group of ``group_size`` table rows (a
    sparse entry's ``row`` column; a dense entry's table rows are its matrix rows)."""
    rows = (table.column("row").to_numpy() if "row" in table.column_names
            else np.arange(table.num_rows))
    return [rows[s:s + group_size] for s in range(0, table.num_rows, group_size)]


@pytest.mark.parametrize("case", sorted(_values_for_rows()))
def test_rows_of_an_entry_equal_the_slice_of_the_whole_and_read_only_their_row_groups(
        tmp_path, case):
    """``read_rows`` on a file of many row groups (7 table rows each) gives the slice of the
    whole entry with the same dtypes, and reads no row group that lies wholly before or after
    the range: with every such row group spoilt it still gives the slice, while a spoilt row
    group holding rows of the range is an error."""
    from scarce.tasks.store.encoding import decode, encode, read_rows

    value = _values_for_rows()[case]
    table = encode(value)
    groups = _matrix_rows_by_group(table, 7)
    whole = decode(table)
    for start, stop in [(0, 40), (0, 0), (3, 17), (39, 40), (20, 22), (12, 13), (15, 15)]:
        path = tmp_path / f"entry-{start}-{stop}.parquet"
        pq.write_table(table, path, row_group_size=7, write_page_checksum=True)
        outside = [i for i, rows in enumerate(groups) if rows.max() < start or rows.min() >= stop]
        inside = [i for i, rows in enumerate(groups) if ((rows >= start) & (rows < stop)).any()]
        _spoil_row_groups(path, outside)
        got = read_rows(path, start, stop)
        expected = whole[start:stop]
        assert got.shape == expected.shape == (stop - start, value.shape[1])
        assert got.dtype == expected.dtype
        if sp.issparse(value):
            assert got.format == "csr"
            assert got.indices.dtype == got.indptr.dtype == value.indices.dtype
            np.testing.assert_array_equal(got.indptr, expected.indptr)
            np.testing.assert_array_equal(got.indices, expected.indices)
            np.testing.assert_array_equal(got.data, expected.data)
        else:
            np.testing.assert_array_equal(got, expected)
        if inside:
            _spoil_row_groups(path, inside[:1])
            with pytest.raises(CorruptEntry, match="unreadable Parquet"):
                read_rows(path, start, stop)


def test_rows_are_read_only_of_csr_or_dense_entries_and_within_the_matrix(tmp_path):
    from scarce.tasks.store.encoding import read_rows

    store = Store(tmp_path)
    csc = store.path(store.write("t/csc", sp.random(5, 4, density=0.5, format="csc")))
    table = store.path(store.write("t/table", pd.DataFrame({"a": [1, 2]})))
    dense = store.path(store.write("t/dense", np.zeros((5, 2))))
    with pytest.raises(ValueError, match="csc.parquet: rows are read of a CSR or dense"):
        read_rows(csc, 0, 2)
    with pytest.raises(ValueError, match="rows are read of a CSR or dense"):
        read_rows(table, 0, 1)
    with pytest.raises(ValueError, match=r"rows 3:6 of a matrix of 5 rows"):
        read_rows(dense, 3, 6)
    with pytest.raises(CorruptEntry, match="missing.parquet: unreadable"):
        read_rows(tmp_path / "missing.parquet", 0, 1)


def test_the_checksum_is_the_sha256_of_the_tables_ipc_stream_however_it_is_chunked():
    """The streamed checksum (hashed as written) equals the digest of the whole IPC stream
    held in memory, as entries written before it were checked, for any chunking."""
    import hashlib

    import pyarrow as pa

    from scarce.tasks.store.encoding import CHECKSUM_KEY, table_checksum

    rng = np.random.default_rng(0)
    columns = {"row": np.arange(50_000, dtype=np.int32),
               "value": rng.standard_normal(50_000).astype(np.float32)}
    whole = pa.table(columns).replace_schema_metadata({b"scarce.kind": b"sparse",
                                                       CHECKSUM_KEY: b"left out"})
    chunked = pa.concat_tables([whole.slice(0, 7_000), whole.slice(7_000)])
    assert chunked.column("row").num_chunks == 2
    held = pa.BufferOutputStream()
    reference = whole.replace_schema_metadata({b"scarce.kind": b"sparse"})
    with pa.ipc.new_stream(held, reference.schema) as writer:
        writer.write_table(reference)
    expected = hashlib.sha256(held.getvalue()).hexdigest()
    assert table_checksum(whole) == table_checksum(chunked) == expected


@pytest.mark.parametrize("kind", ["csr", "dense"])
def test_every_read_gives_back_what_was_written_and_names_a_damaged_file(tmp_path, kind):
    """``Store.read``, ``read_parquet_entry`` (an input file outside a store) and ``read_rows``
    of every row give the value written, with its dtypes; a damaged file is a
    :class:`CorruptEntry` of the store, and an :class:`InputError` naming the file when it is
    an input.  (What a read holds in memory: ``scarce bench store``.)"""
    from scarce.tasks.store.encoding import read_parquet_entry, read_rows

    rng = np.random.default_rng(0)
    value = (sp.random(300, 40, density=0.2, random_state=0, format="csr", dtype=np.float32)
             if kind == "csr" else rng.standard_normal((300, 4)))
    store = Store(tmp_path / "store")
    ref = store.write("test/x", value)
    path = store.path(ref)
    for got in (store.read(ref), read_parquet_entry(path), read_rows(path, 0, 300)):
        assert type(got) is type(value) and got.dtype == value.dtype
        if kind == "csr":
            for part in ("data", "indices", "indptr"):
                np.testing.assert_array_equal(getattr(got, part), getattr(value, part))
        else:
            np.testing.assert_array_equal(got, value)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptEntry):
        store.read(ref)
    with pytest.raises(InputError) as info:
        read_parquet_entry(path)
    assert info.value.path == str(path)


def _sparse_cases() -> dict:
    """Sparse values as the store meets them, and some it should not but may."""
    rng = np.random.default_rng(3)
    X = sp.random(60, 45, density=0.2, random_state=4, format="csr", dtype=np.float32)
    wide = sp.csr_matrix(X, dtype=np.float64)
    wide.indices, wide.indptr = wide.indices.astype(np.int64), wide.indptr.astype(np.int64)
    unsorted = X.copy()
    for r in range(unsorted.shape[0]):  # each row's entries in reverse column order
        a, b = unsorted.indptr[r], unsorted.indptr[r + 1]
        unsorted.indices[a:b], unsorted.data[a:b] = (unsorted.indices[a:b][::-1].copy(),
                                                     unsorted.data[a:b][::-1].copy())
    unsorted.has_sorted_indices = False
    doubled = sp.csr_matrix((np.array([1.0, 2.0, 0.0, 4.0]), np.array([1, 1, 0, 2]),
                             np.array([0, 2, 2, 4])), shape=(3, 3))  # a duplicate, a 0
    return {"csr-float32": X, "csr-int64-index": wide, "csr-unsorted": unsorted,
            "csr-duplicates": doubled, "csc": sp.csc_matrix(X),
            "coo": sp.coo_matrix(X), "csr-bool": X.astype(bool),
            "csr-empty": sp.csr_matrix((0, 5), dtype=np.float32),
            "csr-no-entries": sp.csr_matrix((7, 5), dtype=np.float32),
            "csc-int8": sp.random(30, 80, density=0.1, random_state=5, format="csc",
                                  dtype=np.float64).astype(np.int8) + sp.csc_matrix(
                                      rng.integers(0, 2, (30, 80)).astype(np.int8))}


@pytest.mark.parametrize("case", sorted(_sparse_cases()))
def test_a_sparse_entry_read_by_row_groups_is_the_matrix_a_coo_conversion_gives(tmp_path,
                                                                                case):
    """``read_checked_value`` (and so ``Store.read``) builds a sparse entry on its columns,
    read a row group at a time: the same arrays, dtypes and order as the COO conversion of
    the whole table (done here by hand, the way :func:`decode` did it before), writable."""
    from scarce.tasks.store.encoding import decode, encode, read_checked_table, read_checked_value

    value = _sparse_cases()[case]
    path = tmp_path / "entry.parquet"
    pq.write_table(encode(value), path, row_group_size=7, write_page_checksum=True)
    table = pq.read_table(path)
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    idx = np.dtype(meta["scarce.index_dtype"])
    row, col, val = (table.column(c).to_numpy() for c in ("row", "col", "value"))
    coo = sp.coo_matrix((val, (row, col)), shape=value.shape)
    expected = {"csr": coo.tocsr, "csc": coo.tocsc, "coo": coo.copy}[value.format]()
    for got in (read_checked_value(path), decode(read_checked_table(path))):
        assert got.format == value.format and got.dtype == value.dtype
        assert got.shape == value.shape
        names = ("row", "col", "data") if value.format == "coo" else ("indptr", "indices",
                                                                       "data")
        for name in names:
            mine, theirs = getattr(got, name), getattr(expected, name)
            if name != "data":
                theirs = theirs.astype(idx)
            assert mine.dtype == theirs.dtype, name
            np.testing.assert_array_equal(mine, theirs)
            assert mine.flags.writeable, name
        np.testing.assert_array_equal(got.toarray(), value.toarray())


def test_a_sparse_entry_with_changed_values_or_a_missing_file_is_corrupt(tmp_path):
    import pyarrow as pa

    from scarce.tasks.store.encoding import read_checked_value

    store = Store(tmp_path)
    store.write("t/k", sp.random(30, 20, density=0.3, random_state=1, format="csr"))
    path = store.path("t/k")
    table = pq.read_table(path)
    forged = table.set_column(2, "value", pa.array(table.column("value").to_numpy() + 1))
    pq.write_table(forged.replace_schema_metadata(table.schema.metadata), path,
                   row_group_size=11)
    with pytest.raises(CorruptEntry, match="checksum mismatch"):
        store.read("t/k")
    with pytest.raises(CorruptEntry, match="missing"):
        read_checked_value(tmp_path / "none.parquet")


# ----------------------------------------------------------------------------- steps' inputs
def test_tables_parquet_keeps_skip_the_round_trip_and_write_the_same_bytes(tmp_path,
                                                                           monkeypatch):
    """A numeric column without nulls reads back from Parquet as it is, so its entry skips
    the in-memory round trip; the files are the bytes the round trip wrote."""
    import scarce.tasks.store.encoding as store_module

    rng = np.random.default_rng(0)
    values = {
        "f32": rng.standard_normal((40, 7)).astype(np.float32),
        "f64": rng.standard_normal(30),
        "nan": np.array([1.0, np.nan]),
        "u8": rng.integers(0, 9, (5, 3)).astype(np.uint8),
        "bool": rng.random((6, 2)) < 0.5,
        "csr": sp.random(30, 20, density=0.2, format="csr", dtype=np.float32, random_state=0),
        "numbers": pd.DataFrame({"iteration": [1, 2], "seconds": [0.5, 0.25]}),
        "text": pd.DataFrame({"half": ["W", "H"], "seconds": [0.5, 0.25]}),
        "null": pd.DataFrame({"x": [1.0, np.nan]}),
    }
    skipped = Store(tmp_path / "skipped")
    for name, value in values.items():
        skipped.write(f"t/{name}", value)
    monkeypatch.setattr(store_module, "_parquet_keeps", lambda column: False)
    both = Store(tmp_path / "round-trip")
    for name, value in values.items():
        both.write(f"t/{name}", value)
        assert skipped.path(f"t/{name}").read_bytes() == both.path(f"t/{name}").read_bytes()
    monkeypatch.undo()
    assert store_module._parquet_keeps(pq.read_table(skipped.path("t/f32")).column(0))
    assert not store_module._parquet_keeps(pq.read_table(skipped.path("t/null")).column(0))


def test_a_steps_input_is_the_copy_kept_at_the_write_while_its_file_is_there(tmp_path):
    """``read_input`` returns the read-only copy of a dense array this process wrote (the next
    step's factors); ``read`` always reads the file, so damage is found there; a deleted file
    is not served from the copy."""
    store = Store(tmp_path)
    W = np.arange(12, dtype=np.float32).reshape(4, 3)
    store.write("t/W", W)
    W[0, 0] = 99  # the writer's array changing later does not change the entry's value
    kept = store.read_input("t/W")
    assert kept is store.read_input("t/W") and not kept.flags.writeable
    np.testing.assert_array_equal(kept, np.arange(12, dtype=np.float32).reshape(4, 3))
    np.testing.assert_array_equal(store.read("t/W"), kept)
    assert store.read("t/W").flags.writeable  # read from the file, the caller's own
    raw = store.path("t/W").read_bytes()
    store.path("t/W").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CorruptEntry):
        store.read("t/W")
    store.path("t/W").unlink()
    with pytest.raises(CorruptEntry, match="missing"):
        store.read_input("t/W")
    frame = pd.DataFrame({"x": [1, 2]})  # a table is never shared: a copy each time
    store.write("t/frame", frame)
    assert store.read_input("t/frame") is not store.read_input("t/frame")


def test_writes_behind_are_the_bytes_of_the_writes_in_place_and_reads_wait_for_them(tmp_path):
    """``write_later`` writes the entries and then the side file (from the files' sha256) in
    the background: the same bytes as ``write`` and ``write_file``; ``path`` waits for them;
    the dense values are a step's inputs at once."""
    import hashlib
    import json
    import threading

    rng = np.random.default_rng(1)
    entries = [(f"t/{K1}-W", rng.standard_normal((30, 4)).astype(np.float32)),
               (f"t/{K1}-timings", pd.DataFrame({"half": ["W"], "seconds": [0.5]}))]
    release = threading.Event()

    def seal(digests):
        release.wait(timeout=60)  # held until the test has looked at the store mid-write
        return json.dumps(digests, sort_keys=True).encode()

    behind = Store(tmp_path / "behind")
    side = behind.prefect_dir / "k.sha256.json"
    behind.write_later(entries, side, seal)
    np.testing.assert_array_equal(behind.read_input(f"t/{K1}-W"), entries[0][1])  # not waited
    assert not side.exists()  # the side file comes last, after the release
    release.set()
    assert behind.side_path(side) == side and side.is_file()
    in_place = Store(tmp_path / "in-place")
    for ref, value in entries:
        in_place.write(ref, value)
    digests = {ref: hashlib.sha256(in_place.path(ref).read_bytes()).hexdigest()
               for ref, _ in entries}
    in_place.write_file(in_place.prefect_dir / "k.sha256.json",
                        json.dumps(digests, sort_keys=True).encode())
    for ref, _ in entries:
        assert behind.path(ref).read_bytes() == in_place.path(ref).read_bytes()
    assert side.read_bytes() == (in_place.prefect_dir / "k.sha256.json").read_bytes()
    assert behind.refs() == [f"t/{K1}-W", f"t/{K1}-timings"]


def test_a_write_behind_that_fails_fails_the_next_read_and_the_flush(tmp_path):
    store = Store(tmp_path)
    bad = np.array([object()], dtype=object)  # no entry holds objects
    store.write_later([("t/bad", bad)], store.prefect_dir / "bad.sha256.json",
                      lambda digests: b"{}")
    with pytest.raises(TypeError, match="cannot store arrays of dtype object"):
        store.path("t/bad")
    with pytest.raises(TypeError):
        store.flush()
    # the step run again, its entry and side file written in place: the failure is over
    store.write("t/bad", np.zeros(2))
    store.write_file(store.prefect_dir / "bad.sha256.json", b"{}")
    store.flush()
    np.testing.assert_array_equal(store.read("t/bad"), np.zeros(2))


# ----------------------------------------------------------------------------- writer options
_ONE_OF_EACH_KIND = {
    "dense": np.random.default_rng(2).standard_normal((40, 6)).astype(np.float32),
    "sparse": sp.random(30, 20, density=0.2, format="csr", dtype=np.float32, random_state=0),
    "table": pd.DataFrame({"half": ["W", "H"], "seconds": [0.5, 0.25]}),
}


def test_one_value_of_each_entry_kind_is_tested():
    from scarce.tasks.store.encoding import ENTRY_KINDS

    assert set(_ONE_OF_EACH_KIND) == set(ENTRY_KINDS)


@pytest.mark.parametrize("kind", sorted(_ONE_OF_EACH_KIND))
def test_each_kind_is_written_with_its_options_and_opens_anywhere_with_the_same_table(
        tmp_path, kind):
    """A dense entry's columns are written plain (no dictionary), uncompressed and without
    statistics; a sparse or table entry zstd-compressed with statistics (a CSR entry's ``row``
    statistics choose the row groups a range reads).  Every file keeps its page checksums,
    opens in pandas, pyarrow and duckdb, and holds the table (and checksum) that the same
    value written with the other kind's options holds."""
    value = _ONE_OF_EACH_KIND[kind]
    store = Store(tmp_path)
    path = store.path(store.write(f"t/{kind}", value))
    pf = pq.ParquetFile(path)
    assert pf.schema_arrow.metadata[b"scarce.kind"] == kind.encode()
    chunks = [pf.metadata.row_group(g).column(c) for g in range(pf.metadata.num_row_groups)
              for c in range(pf.metadata.num_columns)]
    if kind == "dense":
        assert {c.compression for c in chunks} == {"UNCOMPRESSED"}
        assert not any(c.is_stats_set for c in chunks)
        assert not any(c.has_dictionary_page for c in chunks)
    else:
        assert {c.compression for c in chunks} == {"ZSTD"}
        assert all(c.is_stats_set for c in chunks)
    # page checksums are written: a flipped byte of the first data page is caught by pyarrow
    # itself, before the entry's own checksum is looked at
    data = bytearray(path.read_bytes())
    data[chunks[0].data_page_offset + chunks[0].total_compressed_size - 1] ^= 0xFF
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(bytes(data))
    with pytest.raises(OSError):
        pq.read_table(damaged, page_checksum_verification=True)
    # the same table whatever the options: pandas, pyarrow and duckdb read it
    other = tmp_path / "other.parquet"
    table = pq.read_table(path)
    options = ({"compression": "zstd"} if kind == "dense"
               else {"compression": "none", "use_dictionary": False,
                     "write_statistics": False})
    pq.write_table(table, other, write_page_checksum=True, **options)
    assert pq.read_table(other).equals(table)
    assert pq.read_table(other).schema.metadata == table.schema.metadata
    pd.testing.assert_frame_equal(pd.read_parquet(path), pd.read_parquet(other))
    assert duckdb.sql(f"select count(*) from '{path}'").fetchall() == [(table.num_rows,)]
    assert (duckdb.sql(f"select * from '{path}'").fetchall()
            == duckdb.sql(f"select * from '{other}'").fetchall())
    back = store.read(f"t/{kind}")
    if kind == "table":
        pd.testing.assert_frame_equal(back, value)
    else:
        np.testing.assert_array_equal(back.toarray() if kind == "sparse" else back,
                                      value.toarray() if kind == "sparse" else value)


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_a_sparse_input_read_once_is_kept_and_given_as_a_copy_while_its_file_is_there(tmp_path,
                                                                                        fmt):
    """``read_input`` of a sparse entry (a loop's held-out rows, an input of every H-step)
    reads and checks its file once, then gives copies of what it read: equal to the file's
    value (format, dtypes, explicit zeros), none shared with a caller; ``read`` still reads
    the file, so damage is found there; a deleted file is not served from the copy."""
    store = Store(tmp_path)
    value = sp.random(40, 30, density=0.2, format=fmt, dtype=np.float32, random_state=5)
    value.data[0] = 0.0  # an explicit zero is part of the value
    store.write("t/X", value)
    first = store.read_input("t/X")
    raw = store.path("t/X").read_bytes()
    store.path("t/X").write_bytes(raw[: len(raw) // 2])  # the file is not read again
    second = store.read_input("t/X")
    assert second is not first and second.data is not first.data
    for got in (first, second):
        assert got.format == fmt and got.dtype == value.dtype and got.nnz == value.nnz
        assert got.indices.dtype == store.read_input("t/X").indices.dtype
        np.testing.assert_array_equal(got.toarray(), value.toarray())
    first.data[:] = 7.0  # a caller changing its copy changes no later one
    np.testing.assert_array_equal(store.read_input("t/X").toarray(), value.toarray())
    with pytest.raises(CorruptEntry):
        store.read("t/X")
    store.path("t/X").unlink()
    with pytest.raises(CorruptEntry, match="missing"):
        store.read_input("t/X")


def test_small_numeric_tables_are_kept_as_copies_and_others_read_from_their_file(tmp_path):
    """``read_input`` of a small numeric table this process wrote (an iteration's trace) is a
    new copy of the written table each time, equal to its file's value, even while its write
    is behind; a table that does not read back as it is (text, a NaN, another index) or holds
    more than ``RECENT_TABLE_BYTES`` is read from its file."""
    import threading

    store = Store(tmp_path)
    trace = pd.DataFrame({"iteration": [3], "objective": [1.5], "validation_p_at_1": [0.6]})
    release = threading.Event()

    def seal(digests):
        release.wait(timeout=60)  # the side file waits until the test has read the trace
        return b"{}"

    store.write_later([("t/trace", trace)], store.prefect_dir / "k.sha256.json", seal)
    first = store.read_input("t/trace")
    trace.loc[0, "objective"] = 99.0  # the writer's table changing later changes no copy
    first.loc[0, "iteration"] = 7  # nor does a reader's change of its copy
    second = store.read_input("t/trace")
    assert first is not second
    release.set()
    expected = pd.DataFrame({"iteration": [3], "objective": [1.5],
                             "validation_p_at_1": [0.6]})
    pd.testing.assert_frame_equal(second, expected)
    pd.testing.assert_frame_equal(store.read("t/trace"), expected)
    others = {
        "text": pd.DataFrame({"half": ["W"], "seconds": [0.5]}),
        "nan": pd.DataFrame({"objective": [np.nan]}),
        "index": pd.DataFrame({"x": [1.0, 2.0]}, index=[5, 9]),
        "f16": pd.DataFrame({"x": np.ones(2, dtype=np.float16)}),
        "large": pd.DataFrame({"x": np.ones(RECENT_TABLE_BYTES // 8 + 1)}),
    }
    for name, frame in others.items():
        store.write(f"t/{name}", frame)
        raw = store.path(f"t/{name}").read_bytes()
        store.path(f"t/{name}").write_bytes(raw[: len(raw) // 2])
        with pytest.raises(CorruptEntry):  # read from the (now damaged) file, not kept
            store.read_input(f"t/{name}")
