"""The Dask W-step (tasks.leml_dask) against the single-process solver, on a real cluster.

Both run through the estimator's own step method, ``LEML.w_step(data, W, H)`` without and
with ``backend=RowBlockBackend(...)``.  One LocalCluster with two single-threaded worker
processes for the module (a start costs 10-20 s on these machines; the tests that use one
are marked slow); "one worker" places every block on the first worker, "two workers" spreads
them.  The blocks come from memory (scattered) or from the store files of the training
data's row blocks (:class:`PartitionedData`, tasks that each read their own block's files and
that Dask can recompute after a lost worker).
"""

import logging
import os
import pickle
import signal
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.preprocessing import normalize

from scarce.algorithms.leml import LEML, LEMLData, LocalBlocks, prepare_data, update_H_by_blocks
from scarce.algorithms.leml.data import split_rows

distributed = pytest.importorskip("distributed")

from scarce.tasks.leml import partition_files  # noqa: E402
from scarce.tasks.leml_dask import (  # noqa: E402
    CLIENTS,
    N_BLOCKS,
    PartitionedData,
    RowBlockBackend,
    cluster_workers,
    data_nbytes,
    worker_peak_memory,
)
from scarce.tasks.leml_dask.transport import _Aligned  # noqa: E402
from scarce.tasks.steps import digest, step  # noqa: E402
from scarce.tasks.store import Store  # noqa: E402

N, D, L, K, LAM = 160, 10, 12, 3, 2.0

slow = pytest.mark.slow  # starts a Dask LocalCluster


def _problem(case: str, dtype=np.float64, n_samples: int = N) -> LEMLData:
    X = normalize(sp.random(n_samples, D, density=0.4, random_state=1, format="csr"))
    Y = sp.random(n_samples, L, density=0.15, random_state=2, format="csr")
    Y.data[:] = 1
    if case == "full":
        return prepare_data(X, Y, fit_intercept=False, dtype=dtype)
    mask = sp.random(n_samples, L, density=0.3, random_state=3, format="csr")
    mask.data[:] = 1
    entries = case.split("-")[1]  # masked-sparse / masked-dense
    return prepare_data(X, Y, mask, fit_intercept=False, dtype=dtype, entries=entries)


BIBTEX = Path(__file__).resolve().parents[2] / "data" / "xmc" / "bibtex"


def _bibtex(rows: int = 400):
    """The first ``rows`` rows of the bundled Bibtex training set (1,836 features, 159
    labels)."""
    from scarce.tasks.readers.xmc import read_xmc

    X, Y = read_xmc(BIBTEX / "bibtex_xmlrepo_train.txt.gz")
    return X[:rows], Y[:rows]


def _stored(tmp_path, case: str, dtype=np.float64, fit_intercept=False, bibtex=False,
            blocks=N_BLOCKS):
    """The problem of ``case`` (or of Bibtex's first rows) as store entries, partitioned
    into ``blocks`` row blocks as the flow's ``leml-partition`` writes them: their
    :class:`PartitionedData` and the data ``LEML.prepare`` makes of the whole entries as
    read back."""
    if bibtex:
        X, Y = _bibtex()
    else:
        X = normalize(sp.random(N, D, density=0.4, random_state=1, format="csr"))
        Y = sp.random(N, L, density=0.15, random_state=2, format="csr")
        Y.data[:] = 1
    store = Store(tmp_path / "store")
    store.write("t/X", X)
    store.write("t/Y", Y)
    mask = None
    if case != "full":
        density = 0.3 if case == "masked-dense" else 0.05  # "auto" picks dense / sparse
        mask = sp.random(*Y.shape, density=density, random_state=3, format="csr").astype(bool)
        store.write("t/mask", mask)
        mask = store.read("t/mask")
    train = {"X": store.read("t/X"), "Y": store.read("t/Y")}
    model = LEML(fit_intercept=fit_intercept, dtype=np.dtype(dtype).name)
    data = model.prepare(train["X"], train["Y"], mask)
    parts = []
    files = {"X": store.path("t/X"), "Y": store.path("t/Y")}
    for b in range(blocks):
        rows = partition_files(files, b, blocks, None if mask is None else store.path("t/mask"))
        for part, value in rows.items():
            store.write(f"p/{b}-{part}", value)
        parts.append({part: store.path(f"p/{b}-{part}") for part in rows})
    return PartitionedData.of(data, parts), data


def _start(data, seed=0):
    W0 = np.random.default_rng(seed).standard_normal((data.n_features, K)).astype(data.dtype)
    _, H = LEML(rank=K, random_state=seed).start(data)
    return W0, H


def _w_step(data, W0, H, loss="squared", backend=None, **params):
    """One W-step of the estimator, here or on ``backend``."""
    return LEML(lam=LAM, loss=loss, **params).w_step(data, W0, H, backend=backend)


def _nbytes_sent(value) -> int:
    """The bytes of ``value`` pickled as Dask sends it (protocol 5, buffers out of band; a
    future pickles as its key)."""
    buffers: list = []
    head = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return len(head) + sum(b.raw().nbytes for b in buffers)


class SizingClient:
    """Forwards to a real Client and adds up the bytes of what it sends to the cluster: each
    scattered value and each task's arguments."""

    def __init__(self, client):
        self._client = client
        self.sent = 0

    def scatter(self, data, **kwargs):
        self.sent += _nbytes_sent(data)
        return self._client.scatter(data, **kwargs)

    def submit(self, fn, *args, **kwargs):
        self.sent += _nbytes_sent(args)
        return self._client.submit(fn, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of 2 single-threaded worker processes, without work stealing as the
    flow starts its own (:data:`tasks.leml_dask.NO_WORK_STEALING`): with it, Dask may move
    the reading of a block to the other worker, and the placement tests fail."""
    import dask
    from distributed import Client, LocalCluster

    from scarce.tasks.leml_dask import NO_WORK_STEALING

    with dask.config.set(NO_WORK_STEALING):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None, memory_limit="1GiB")
    with cluster, Client(cluster) as c:
        c.wait_for_workers(2)
        yield c


@slow
@pytest.mark.parametrize("case", ["full", "masked-sparse"])
def test_dask_w_step_equals_single_process_solver(client, case):
    data = _problem(case)
    W0, H = _start(data)
    kwargs = dict(cg_tol=1e-10, cg_max_iter=300)
    W_single, info_single = _w_step(data, W0, H, **kwargs)
    with RowBlockBackend(client, data, blocks=4) as ws:
        W_dask, info_dask = _w_step(data, W0, H, backend=ws, **kwargs)
    assert W_dask.dtype == np.float64 and W_dask.shape == W_single.shape
    assert abs(info_dask["cg_iter"] - info_single["cg_iter"]) <= 1
    # Only the order of the block sums differs.  Each CG stops once its relative residual is
    # below 1e-10, so the two iterates may differ by that residual times the system's
    # condition number (1.9e-11 against max|W| 0.12 was seen): agree to 1e-8 relative.
    assert np.abs(W_dask - W_single).max() <= 1e-8 * np.abs(W_single).max()


@pytest.mark.parametrize("case", ["full", "masked-dense", "masked-sparse"])
def test_the_preconditioned_w_step_on_row_blocks_equals_the_whole_datas(case):
    """The row blocks give the preconditioner the same diagonal (of X^T X, or with missing
    labels of X^T diag(rho) X; summed block by block): the blocks' preconditioned W-step
    agrees with the one on the whole data, and takes fewer iterations than the plain one."""
    from scarce.algorithms.leml.w_step import observed_gram_diagonal
    from scarce.tasks.leml_dask import InlineClient

    data = _problem(case)
    W0, H = _start(data)
    kwargs = dict(cg_tol=1e-10, cg_max_iter=300, cg_preconditioner="diagonal")
    W_single, info_single = _w_step(data, W0, H, **kwargs)
    with RowBlockBackend(InlineClient(), data, blocks=4) as blocks:
        np.testing.assert_allclose(blocks.observed_gram_diagonal(),
                                   observed_gram_diagonal(data), rtol=1e-14)
        W_blocks, info_blocks = _w_step(data, W0, H, backend=blocks, **kwargs)
    assert abs(info_blocks["cg_iter"] - info_single["cg_iter"]) <= 1
    assert np.abs(W_blocks - W_single).max() <= 1e-8 * np.abs(W_single).max()
    _, plain = _w_step(data, W0, H, cg_tol=1e-10, cg_max_iter=300)
    assert info_single["cg_iter"] < plain["cg_iter"]


@slow
def test_dask_w_step_float32_stays_float32_and_close(client):
    data = _problem("full", np.float32)
    W0, H = _start(data)
    kwargs = dict(cg_tol=1e-5, cg_max_iter=300)
    W_single, _ = _w_step(data, W0, H, **kwargs)
    with RowBlockBackend(client, data) as ws:
        W_dask, _ = _w_step(data, W0, H, backend=ws, **kwargs)
    assert W_dask.dtype == np.float32
    assert np.abs(W_dask - W_single).max() <= 1e-4 * np.abs(W_single).max()


@slow
@pytest.mark.parametrize(("case", "loss"), [("full", "squared"), ("masked-sparse", "squared"),
                                            ("masked-dense", "logistic")])
def test_one_and_two_workers_give_bit_identical_W(client, case, loss):
    data = _problem(case)
    W0, H = _start(data)
    kwargs = dict(loss=loss, cg_max_iter=8, cg_tol=1e-3, newton_max_iter=1)
    workers = sorted(client.scheduler_info()["workers"])
    results = []
    for chosen in (workers[:1], workers):
        with RowBlockBackend(client, data, blocks=4, workers=chosen) as ws:
            held = {w for addrs in client.who_has(ws.block_futures).values() for w in addrs}
            assert held == set(chosen)
            results.append(_w_step(data, W0, H, backend=ws, **kwargs)[0])
    assert np.array_equal(results[0], results[1])
    # Same iterations as the single-process solver, equal up to CG's rounding sensitivity.
    W_single, _ = _w_step(data, W0, H, **kwargs)
    assert np.abs(results[1] - W_single).max() <= 1e-3 * np.abs(W_single).max()


def _holders(client, futures) -> dict:
    """Key -> the sorted workers holding it."""
    return {k: sorted(w) for k, w in client.who_has(futures).items()}


def _fetched_from_other_workers(keys, dask_worker):  # run on a worker
    """Those of ``keys`` this worker received from another worker."""
    return sorted({str(k) for entry in dask_worker.transfer_incoming_log
                   for k in entry["keys"] if str(k) in set(keys)})


@slow
@pytest.mark.parametrize("case", ["full", "masked-sparse"])
def test_blocks_stay_on_their_workers_and_w_steps_send_the_same_bytes_for_any_rows(client,
                                                                                    case):
    """The row blocks cross to the cluster once: through two W-steps each block is held by
    the one worker it was placed on and no worker fetches a copy of one.  What the W-steps
    send does not grow with the data: with 4 times the rows (blocks 4 times the bytes), two
    W-steps of the same iterations send the same bytes (the point, ``H`` and the CG
    directions, each ``d' x k`` or ``L x k``).  And ``W`` is the single-process W-steps'."""
    kwargs = dict(cg_max_iter=6, cg_tol=0.0)  # the same iterations at every size
    sent, block_bytes = {}, {}
    for n in (N, 4 * N):
        data = _problem(case, n_samples=n)
        W0, H = _start(data)
        sizing = SizingClient(client)
        with RowBlockBackend(sizing, data, blocks=4) as ws:
            distributed.wait(ws.block_futures)
            keys = [f.key for f in ws.block_futures]
            placed = {k: [w] for k, w in zip(keys, ws.block_workers, strict=True)}
            assert _holders(client, ws.block_futures) == placed
            block_bytes[n] = sum(data_nbytes(b) for b in split_rows(data, 4))
            sizing.sent = 0
            W = W0
            for _ in range(2):
                W, _ = _w_step(data, W, H, backend=ws, **kwargs)
            sent[n] = sizing.sent
            assert _holders(client, ws.block_futures) == placed
            assert not any(client.run(_fetched_from_other_workers, keys).values())
        W_single = W0
        for _ in range(2):
            W_single, _ = _w_step(data, W_single, H, **kwargs)
        assert W.dtype == W_single.dtype and W.shape == W_single.shape
        assert np.abs(W - W_single).max() <= 1e-8 * np.abs(W_single).max()
    assert block_bytes[4 * N] > 3 * block_bytes[N]
    assert sent[4 * N] == sent[N]


@slow
def test_worker_peak_memory_is_each_workers_high_water_mark_in_bytes(client):
    """One value a worker, in bytes: at least the worker's resident memory now."""
    def rss():
        import psutil

        return psutil.Process().memory_info().rss

    now = client.run(rss)
    peaks = worker_peak_memory(client)
    assert peaks.keys() == now.keys() == cluster_workers(client).keys()
    assert all(peaks[w] >= now[w] for w in now), (peaks, now)


# -- runtime parameters of a step: where it runs, not in its key ----------------------------
def _where(a, address=None):
    return a


def test_step_key_leaves_out_runtime_parameters_and_keeps_every_other_key():
    runtime = step("t-where", runtime=("address",))(_where)
    plain = step("t-where")(lambda a: a)
    assert runtime.key({"a": 1, "address": "tcp://h:1"}) == runtime.key({"a": 1, "address": None})
    assert runtime.key({"a": 1, "address": "x"}) != runtime.key({"a": 2, "address": "x"})
    # A step without runtime parameters is keyed exactly as before they existed.
    expected = digest({"step": "t-where", "version": "1", "code": plain.code_hash,
                       "params": {"a": 1}, "inputs": {}, "files": {}})[:len(plain.key({"a": 1}))]
    assert plain.key({"a": 1}) == expected
    assert runtime.key({"a": 1, "address": "x"}) == expected  # the same module and name
    with pytest.raises(TypeError, match="'where' is not a parameter"):
        step("t-bad", runtime=("where",))(_where)
    with pytest.raises(TypeError, match="cannot also be an input"):
        step("t-bad", inputs=("a",), runtime=("a",))(_where)


def _files_of(blocks, tag):
    return {"blocks": blocks, "tag": tag}


def test_paths_parameters_are_keyed_by_their_refs_and_passed_as_the_files(tmp_path):
    """A ``paths`` parameter is keyed as an input (by its refs) and reaches the function
    as the store files' absolute paths, never read."""
    from scarce.tasks.steps import _make_runner

    store = Store(tmp_path / "store")
    refs = [{"X": store.write("p/0-X", np.eye(2)), "Y": store.write("p/0-Y", np.ones(2))},
            {"X": store.write("p/1-X", np.eye(3)), "Y": None}]
    st = step("t-paths", paths=("blocks",), outputs=("blocks", "tag"))(_files_of)
    keyed_as_input = step("t-paths", inputs=("blocks",), outputs=("blocks", "tag"))(_files_of)
    assert st.key({"blocks": refs, "tag": 1}) == keyed_as_input.key({"blocks": refs, "tag": 1})
    assert st.key({"blocks": refs, "tag": 1}) != st.key({"blocks": refs[:1], "tag": 1})
    seen = {}

    def spy(blocks, tag):
        seen.update(blocks=blocks)
        return {"blocks": pd.DataFrame({"n": [len(blocks)]}), "tag": pd.DataFrame({"t": [tag]})}

    spied = step("t-paths", paths=("blocks",), outputs=("blocks", "tag"))(spy)
    _make_runner(spied, store)(refs, 7)
    assert seen["blocks"] == [
        {"X": str(store.path(refs[0]["X"]).absolute()),
         "Y": str(store.path(refs[0]["Y"]).absolute())},
        {"X": str(store.path(refs[1]["X"]).absolute()), "Y": None}]
    assert all(Path(p).is_file() for b in seen["blocks"] for p in b.values() if p)
    with pytest.raises(TypeError, match="a paths parameter cannot also be an input"):
        step("t-bad", inputs=("blocks",), paths=("blocks",))(_files_of)


# -- blocks built from the partition's store files ------------------------------------------
def _assert_same_block(got: LEMLData, expected: LEMLData) -> None:
    """The same arrays (values, indices, index order and dtypes): the same products."""
    for name in ("X", "Xt", "Y"):
        want, have = getattr(expected, name), getattr(got, name)
        assert (want is None) == (have is None)
        if want is not None:
            assert have.shape == want.shape
            for part in ("data", "indices", "indptr"):
                a, b = getattr(have, part), getattr(want, part)
                assert a.dtype == b.dtype, (name, part)
                np.testing.assert_array_equal(a, b)
    assert type(got.entries) is type(expected.entries)
    if expected.entries is not None:
        for name in ("y", "mask", "indptr", "cols", "rows", "perm", "t_indices", "t_indptr"):
            want = getattr(expected.entries, name, None)
            if want is not None:
                have = getattr(got.entries, name)
                assert have.dtype == want.dtype, name
                np.testing.assert_array_equal(have, want)
    assert got.fit_intercept == expected.fit_intercept
    assert got.n_labels == expected.n_labels


@pytest.mark.parametrize(("case", "dtype", "fit_intercept"), [
    ("full", np.float64, False), ("masked-sparse", np.float32, True),
    ("masked-dense", np.float64, True)])
def test_partition_blocks_equal_the_split_of_the_prepared_data(tmp_path, case, dtype,
                                                               fit_intercept):
    source, data = _stored(tmp_path, case, dtype, fit_intercept, blocks=3)
    assert (source.n_samples, source.n_features) == (N, D + int(fit_intercept))
    assert source.bounds == [(0, 53), (53, 106), (106, 160)]
    for b, expected in enumerate(split_rows(data, 3)):
        _assert_same_block(source.block(b), expected)


def test_partition_blocks_keep_the_whole_datas_label_layout(tmp_path):
    """A block whose own share of observed entries would make ``prepare_data`` choose
    another layout (here: every entry of block 0 observed, so a plain Y; and a dense layout
    for the whole) is stored as the whole is."""
    X = normalize(sp.random(N, D, density=0.4, random_state=1, format="csr"))
    Y = sp.random(N, L, density=0.15, random_state=2, format="csr")
    Y.data[:] = 1
    mask = sp.random(N, L, density=0.3, random_state=3, format="csr").astype(bool).tolil()
    mask[:53] = True  # block 0 (of 3) fully observed
    mask = mask.tocsr()
    for entries in ("dense", "sparse"):
        data = prepare_data(X, Y, mask, fit_intercept=True, dtype=np.float64, entries=entries)
        store, parts = Store(tmp_path / entries), []
        files = {part: store.path(store.write(f"t/{part}", value))
                 for part, value in (("X", X), ("Y", Y), ("mask", mask))}
        for b in range(3):
            rows = partition_files(files, b, 3, files["mask"])
            parts.append({part: store.path(store.write(f"p/{b}-{part}", value))
                          for part, value in rows.items()})
        source = PartitionedData.of(data, parts)
        assert source.layout[0] == entries
        for b, expected in enumerate(split_rows(data, 3)):
            _assert_same_block(source.block(b), expected)


@pytest.mark.parametrize(("case", "dtype", "fit_intercept"), [
    ("full", np.float64, False), ("masked-sparse", np.float32, True),
    ("masked-dense", np.float64, False)])
def test_partition_described_from_the_footers_equals_the_prepared_whole(
        tmp_path, monkeypatch, case, dtype, fit_intercept):
    """``PartitionedData.from_files`` reads no block, yet gives the shape and label layout
    of ``of(prepare(whole))``: the same description, and so the same blocks."""
    expected, _ = _stored(tmp_path, case, dtype, fit_intercept, blocks=3)
    read = _record_reads(monkeypatch)
    got = PartitionedData.from_files(expected.blocks, fit_intercept=fit_intercept, dtype=dtype)
    assert read == []
    assert got == expected
    assert got.fully_observed == (case == "full")


def test_layout_of_counts_is_the_layout_prepare_data_picks():
    """The counts alone decide the layout (naive check: prepare the data and look)."""
    from scarce.algorithms.leml.data import labels_layout, layout_of_counts

    X = sp.random(N, D, density=0.4, random_state=1, format="csr")
    Y = sp.random(N, L, density=0.15, random_state=2, format="csr")
    Y.data[:] = 1
    for density in (0.01, 0.05, 1 / 16, 0.07, 0.3, 1.0):
        mask = sp.random(N, L, density=density, random_state=3, format="csr").astype(bool)
        data = prepare_data(X, Y, mask, fit_intercept=False, dtype=np.float64)
        assert layout_of_counts(N, L, mask.nnz) == labels_layout(data), density
    data = prepare_data(X, Y, fit_intercept=False, dtype=np.float64)
    assert layout_of_counts(N, L, None) == labels_layout(data) == {"labels": "full",
                                                                   "index_dtype": None}


def test_a_partition_that_does_not_fit_together_is_named(tmp_path):
    source, _ = _stored(tmp_path, "masked-sparse", blocks=3)
    blocks = [dict(b) for b in source.blocks]
    swapped = [blocks[0], {**blocks[1], "Y": blocks[2]["Y"]}, blocks[2]]
    with pytest.raises(ValueError, match=r"54 rows, but X of row block 1"):
        PartitionedData.from_files(swapped, fit_intercept=False, dtype="float64")
    with pytest.raises(ValueError, match="a mask in some blocks and not in others"):
        PartitionedData.from_files([blocks[0], {**blocks[1], "mask": None}, blocks[2]],
                                   fit_intercept=False, dtype="float64")


def test_blocks_of_any_sizes_keep_their_rows(tmp_path):
    """The parts of a partitioned input need not have the sizes of ``row_block_bounds``:
    blocks 2 and 0 of a 3-block partition (54 and 53 rows), in that order, are the rows of
    the data they make, block for block."""
    source, data = _stored(tmp_path, "masked-sparse", blocks=3)
    parts = PartitionedData.from_files([source.blocks[2], source.blocks[0]],
                                       fit_intercept=False, dtype="float64")
    assert parts.rows == (54, 53) and parts.bounds == [(0, 54), (54, 107)]
    assert parts.n_samples == 107
    split = split_rows(data, 3)
    _assert_same_block(parts.block(0), split[2])
    _assert_same_block(parts.block(1), split[0])


def _record_reads(monkeypatch) -> list[str]:
    """The paths ``tasks.store.encoding.read_parquet_entry`` is called with, from now on."""
    import scarce.tasks.store.encoding as store_module

    read: list[str] = []
    real = store_module.read_parquet_entry

    def recording(path):
        read.append(str(path))
        return real(path)

    monkeypatch.setattr(store_module, "read_parquet_entry", recording)
    return read


def test_a_block_reads_only_its_own_files(tmp_path, monkeypatch):
    source, _ = _stored(tmp_path, "masked-sparse", blocks=3)
    read = _record_reads(monkeypatch)
    for b in range(3):
        read.clear()
        source.block(b)
        assert sorted(read) == sorted(str(p) for p in source.blocks[b].values())
    # ... and needs no other file: the other blocks' files and the whole entries removed
    keep = set(source.blocks[1].values())
    for path in (tmp_path / "store").rglob("*.parquet"):
        if str(path) not in keep:
            path.unlink()
    assert source.block(1).n_samples == 53


def test_partition_must_match_the_number_of_blocks(tmp_path):
    source, data = _stored(tmp_path, "full", blocks=3)
    with pytest.raises(ValueError, match="400 row blocks for 160 rows"):
        PartitionedData.of(data, source.blocks[:2] * 200)

    class NoCluster:
        def scheduler_info(self, n_workers):
            return {"workers": {"tcp://w:1": {}}}

    with pytest.raises(ValueError, match="the partition has 3 row blocks but blocks=4$"):
        RowBlockBackend(NoCluster(), source, blocks=4)


def test_partitioned_data_names_its_blocks_by_the_files(tmp_path):
    source, _ = _stored(tmp_path, "full")
    first = source.token()
    assert source.token() == first
    os.utime(source.blocks[2]["X"], ns=(time.time_ns(), time.time_ns() + 10**9))  # rewritten
    assert source.token() != first


@slow
@pytest.mark.parametrize(("case", "dtype"), [("full", np.float32), ("masked-sparse", np.float64),
                                             ("masked-dense", np.float32)])
def test_partition_blocks_give_the_scattered_W_bit_for_bit(client, tmp_path, case, dtype):
    """Blocks built by the workers from their partition files, and arrays sent inside
    tasks, give the W of the whole data's blocks and arrays scattered from here (the
    W-step before the partition existed): the same bits, however the data travelled and on
    one worker or two (Bibtex rows at rank 8: arrays left where their messages put them gave
    W 2e-6 apart)."""
    source, data = _stored(tmp_path, case, dtype, fit_intercept=True, bibtex=True, blocks=3)
    W0 = np.zeros((data.n_features, 8), dtype=data.dtype)
    _, H = LEML(rank=8, random_state=0).start(data)
    kwargs = dict(cg_max_iter=8, cg_tol=1e-3, loss="logistic" if case == "masked-dense"
                  else "squared", newton_max_iter=1)
    with RowBlockBackend(client, data, blocks=3) as ws:
        W_scattered, _ = _w_step(data, W0, H, backend=ws, **kwargs)
    workers = sorted(client.scheduler_info()["workers"])
    for chosen in (workers, workers[:1]):
        with RowBlockBackend(client, source, blocks=3, workers=chosen) as ws:
            assert ws.recoverable
            distributed.wait(ws.block_futures)
            held = {w for addrs in client.who_has(ws.block_futures).values() for w in addrs}
            assert held == set(chosen)
            W_stored, _ = _w_step(data, W0, H, backend=ws, **kwargs)
        np.testing.assert_array_equal(W_stored, W_scattered)


@slow
def test_block_tasks_on_a_cluster_read_only_their_own_files(tmp_path, monkeypatch):
    """On a cluster of in-process workers (so that the reads can be recorded): every
    partition file is read once, by its block's task, and the whole X, Y and mask never."""
    from distributed import Client, LocalCluster

    source, data = _stored(tmp_path, "masked-dense", blocks=3)
    read = _record_reads(monkeypatch)
    W0, H = _start(data)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        with RowBlockBackend(c, source, blocks=3) as ws:
            W, _ = _w_step(data, W0, H, backend=ws, cg_max_iter=4)
            H_blocks, _ = LEML(lam=LAM).h_step(data, W, H, backend=ws)  # the same blocks
        with RowBlockBackend(c, data, blocks=3) as ws:
            W_scattered, _ = _w_step(data, W0, H, backend=ws, cg_max_iter=4)
    expected = [str(p) for block in source.blocks for p in block.values()]
    assert sorted(read) == sorted(expected)
    np.testing.assert_array_equal(W, W_scattered)
    H_whole, _ = LEML(lam=LAM).h_step(data, W, H)
    assert np.abs(H_blocks - H_whole).max() <= 1e-10 * np.abs(H_whole).max()


# -- the squared loss's H-step from block sums on the workers ---------------------------------
@slow
@pytest.mark.parametrize("case", ["full", "masked-sparse", "masked-dense"])
def test_dask_h_step_and_objective_equal_the_whole_data_ones_bit_for_bit_on_any_workers(
        client, tmp_path, case):
    source, data = _stored(tmp_path, case, fit_intercept=True, blocks=3)
    W = np.random.default_rng(0).standard_normal((data.n_features, K))
    H_whole, _ = LEML(lam=LAM).h_step(data, W, None)
    H_local, _ = update_H_by_blocks(LocalBlocks(split_rows(data, 3)), W, LAM, "squared",
                                    label_block=5)
    workers = sorted(client.scheduler_info()["workers"])
    results, objectives = [], []
    for source_or_data, chosen in ((source, workers[:1]), (source, workers), (data, workers)):
        with RowBlockBackend(client, source_or_data, blocks=3, workers=chosen) as ws:
            assert ws.fully_observed == (case == "full")
            H, info = update_H_by_blocks(ws, W, LAM, "squared", label_block=5)
            objectives.append(LEML(lam=LAM, loss="logistic").objective(data, W, H, backend=ws))
        assert H.dtype == np.float64 and info == {"newton_iter": 0}
        results.append(H)
    # 1 and 2 workers, blocks from the partition or scattered: the same bits
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[1], results[2])
    assert objectives[0] == objectives[1] == objectives[2]
    whole = LEML(lam=LAM, loss="logistic").objective(data, W, results[1])
    assert objectives[1] == pytest.approx(whole, rel=1e-12)
    # the whole-data H-step and the same blocks in one process: equal to rounding
    assert np.abs(results[1] - H_whole).max() <= 1e-10 * np.abs(H_whole).max()
    assert np.abs(results[1] - H_local).max() <= 1e-12 * np.abs(H_local).max()


@slow
@pytest.mark.parametrize("case", ["full", "masked-dense"])
def test_dask_bound_h_step_of_a_margin_loss_is_bit_identical_on_any_workers(
        client, tmp_path, case):
    """The logistic loss's bound H-step (``h_solver="bound"``) from block sums on the workers:
    the same bits on 1 and 2 workers and from scattered blocks, and the whole-data bound
    H-step to rounding."""
    from scarce.algorithms.leml import update_H, update_H_bound_by_blocks

    source, data = _stored(tmp_path, case, fit_intercept=True, blocks=3)
    W = np.random.default_rng(0).standard_normal((data.n_features, K))
    H0 = np.random.default_rng(1).standard_normal((data.n_labels, K)) * 0.3
    whole, _ = update_H(data, W, LAM, "logistic", H0=H0, newton_max_iter=3, h_solver="bound",
                        cg_max_iter=1, cg_tol=0.1)
    workers = sorted(client.scheduler_info()["workers"])
    results = []
    for source_or_data, chosen in ((source, workers[:1]), (source, workers), (data, workers)):
        with RowBlockBackend(client, source_or_data, blocks=3, workers=chosen) as ws:
            H, info = update_H_bound_by_blocks(ws, W, H0, LAM, "logistic", n_steps=3,
                                               label_block=5)
        assert H.dtype == np.float64 and info == {"newton_iter": 3}
        results.append(H)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[1], results[2])
    assert np.abs(results[1] - whole).max() <= 1e-10 * np.abs(whole).max()


@slow
@pytest.mark.parametrize("case", ["full", "masked-sparse"])
def test_dask_newton_h_step_of_a_margin_loss_is_bit_identical_on_any_workers(
        client, tmp_path, case):
    """The logistic loss's Newton H-steps (``h_solver`` direct and cg) from block sums on
    the workers: the same bits on 1 and 2 workers and from scattered blocks, and the
    whole-data Newton H-step to rounding."""
    from scarce.algorithms.leml import update_H, update_H_newton_by_blocks

    source, data = _stored(tmp_path, case, fit_intercept=True, blocks=3)
    W = np.random.default_rng(0).standard_normal((data.n_features, K))
    H0 = np.random.default_rng(1).standard_normal((data.n_labels, K)) * 0.3
    workers = sorted(client.scheduler_info()["workers"])
    for h_solver in ("direct", "cg"):
        whole, info_whole = update_H(data, W, LAM, "logistic", H0=H0, newton_max_iter=2,
                                     h_solver=h_solver, cg_max_iter=3, cg_tol=1e-3)
        results = []
        for source_or_data, chosen in ((source, workers[:1]), (source, workers),
                                       (data, workers)):
            with RowBlockBackend(client, source_or_data, blocks=3, workers=chosen) as ws:
                H, info = update_H_newton_by_blocks(ws, W, H0, LAM, "logistic", n_steps=2,
                                                    h_solver=h_solver, cg_max_iter=3,
                                                    cg_tol=1e-3, label_block=5)
            assert H.dtype == np.float64 and info == info_whole
            results.append(H)
        np.testing.assert_array_equal(results[0], results[1])
        np.testing.assert_array_equal(results[1], results[2])
        assert np.abs(results[1] - whole).max() <= 1e-10 * np.abs(whole).max()


@slow
@pytest.mark.parametrize("case", ["full", "masked-sparse"])
def test_squared_start_of_a_margin_loss_on_blocks_is_bit_identical_on_any_workers(
        client, tmp_path, case):
    """``LEML.start`` of a margin loss with ``squared_init_iter`` (squared-loss W- and
    H-steps at rank k - 1, then mapped to margins) on the row blocks: the same bits on 1 and 2
    workers, and the whole-data start to rounding."""
    source, data = _stored(tmp_path, case, fit_intercept=True, blocks=3)
    model = LEML(rank=K, lam=LAM, loss="logistic", squared_init_iter=2, cg_max_iter=5,
                 fit_intercept=True, dtype="float64", random_state=4)
    W_whole, H_whole = model.start(data)
    workers = sorted(client.scheduler_info()["workers"])
    results = []
    for chosen in (workers[:1], workers):
        with RowBlockBackend(client, source, blocks=3, workers=chosen) as ws:
            results.append(model.start(source, backend=ws))
    for (W1, H1), (W2, H2) in [results]:
        np.testing.assert_array_equal(W1, W2)
        np.testing.assert_array_equal(H1, H2)
    W, H = results[1]
    assert W.shape == W_whole.shape and H.shape == H_whole.shape
    assert np.abs(W - W_whole).max() <= 1e-10 * np.abs(W_whole).max()
    assert np.abs(H - H_whole).max() <= 1e-10 * np.abs(H_whole).max()
    # not the random start: the squared-loss iterations moved W from 0
    assert np.abs(W).max() > 0


def _misaligned(array: np.ndarray) -> np.ndarray:
    """A copy of ``array`` 3 bytes past an allocation (as a message may leave it)."""
    raw = np.zeros(array.nbytes + 3, dtype=np.uint8)
    out = raw[3:].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def test_arrays_are_realigned_wherever_they_land():
    from scarce.tasks.leml_dask.transport import ALIGNMENT, _align, _aligned

    odd = _misaligned(np.arange(40.0).reshape(20, 2))
    assert odd.ctypes.data % 8 != 0
    out = _aligned(odd)
    assert out.ctypes.data % ALIGNMENT == 0 and out.flags.c_contiguous
    np.testing.assert_array_equal(out, odd)
    assert _aligned(out) is out  # no copy once aligned
    block = prepare_data(sp.csr_matrix(odd), sp.csr_matrix(np.ones((20, 2))),
                         fit_intercept=False, dtype=np.float64)
    block.X.data, block.Xt.data = _misaligned(block.X.data), _misaligned(block.Xt.data)
    pair = _align((block, _misaligned(np.ones(3))))
    assert pair[0] is block
    for array in (block.X.data, block.X.indices, block.Xt.data, block.Y.indptr, pair[1]):
        assert array.ctypes.data % ALIGNMENT == 0


@pytest.mark.parametrize("kind", ["Trial", "Curvature"])
def test_a_named_tuple_a_block_task_returns_stays_one_when_realigned(kind):
    """The H-step's per-block results that later tasks read by field name (a trial point's
    decision values, a Newton step's curvature) keep their type through the realignment of a
    task's arguments, their arrays aligned."""
    from scarce.algorithms.leml import h_step
    from scarce.tasks.leml_dask.transport import ALIGNMENT, _align

    cls = getattr(h_step, kind)
    value = cls(*(_misaligned(np.arange(6.0) + i) for i in range(len(cls._fields))))
    out = _align(value)
    assert type(out) is cls
    for name in cls._fields:
        assert getattr(out, name).ctypes.data % ALIGNMENT == 0
        np.testing.assert_array_equal(getattr(out, name), getattr(value, name))


def test_an_array_for_the_block_tasks_is_unpickled_aligned_and_is_never_the_callers():
    """``RowBlockBackend._put``'s wrapper: unpickled from a message buffer at an odd offset it is
    aligned once, for every task of that worker; made here, it is a new copy (the driver
    changes its own arrays in place), and Dask counts its bytes."""
    import pickle

    from dask.sizeof import sizeof

    from scarce.tasks.leml_dask.transport import ALIGNMENT, _Aligned, _wrap_aligned

    a = np.arange(1000, dtype=np.float32).reshape(100, 10)
    buffers: list = []
    message = pickle.dumps(_Aligned(a), protocol=5, buffer_callback=buffers.append)
    raw = bytearray(a.nbytes + 13)
    raw[13:] = buffers[0].raw()
    back = pickle.loads(message, buffers=[memoryview(raw)[13:]])
    assert isinstance(back, _Aligned) and back.array.ctypes.data % ALIGNMENT == 0
    np.testing.assert_array_equal(back.array, a)
    wrapped = _wrap_aligned(a)
    assert not np.shares_memory(wrapped.array, a)
    assert wrapped.array.ctypes.data % ALIGNMENT == 0
    np.testing.assert_array_equal(wrapped.array, a)
    assert sizeof(wrapped) >= a.nbytes


def _handed_array(task_state):
    """The array in the ``_Handed`` box among a task's arguments (None once handed over)."""
    from scarce.tasks.leml_dask.transport import _Handed

    boxes = [a for a in task_state.run_spec.args if isinstance(a, _Handed)]
    assert len(boxes) == 1
    return boxes[0].array


def _worker_holds(key, dask_worker):  # run on a worker
    ts = dask_worker.state.tasks.get(key)
    return None if ts is None else _handed_array(ts) is not None


def _scheduler_holds(key, dask_scheduler):  # run on the scheduler
    return _handed_array(dask_scheduler.tasks[key]) is not None


@slow
def test_an_array_sent_in_a_task_is_held_once_by_the_worker_and_kept_by_the_scheduler(client):
    """``RowBlockBackend._put``'s task: the worker that ran it keeps its aligned copy only, not
    also the received argument (it held both before); the scheduler keeps the argument, so
    the task can be sent again after a lost worker.  On an ``inproc://`` cluster, where the
    worker's argument is the scheduler's own object, nothing is emptied."""
    import warnings

    from distributed import Client, LocalCluster

    from scarce.tasks.leml_dask.transport import (
        ALIGNMENT,
        _arrays_in_graph,
        _Handed,
        _take_aligned,
    )

    a = np.arange(3_200_000, dtype=np.float32).reshape(-1, 50)  # 12.8 MB: above Dask's
    with warnings.catch_warnings():                              # 10 MB graph warning
        warnings.simplefilter("error")
        with _arrays_in_graph(a):
            future = client.submit(_take_aligned, _Handed(a), pure=False)
        value = future.result()
    assert value.array.ctypes.data % ALIGNMENT == 0
    np.testing.assert_array_equal(value.array, a)
    held = [h for h in client.run(_worker_holds, future.key).values() if h is not None]
    assert held == [False]
    assert client.run_on_scheduler(_scheduler_holds, future.key)
    with pytest.warns(UserWarning, match="large graph"):  # what _arrays_in_graph quiets
        client.submit(_take_aligned, _Handed(a), pure=False).result()

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                      dashboard_address=None) as cluster, Client(cluster) as c:
        with _arrays_in_graph(a):
            future = c.submit(_take_aligned, _Handed(a), pure=False)
        np.testing.assert_array_equal(future.result().array, a)
        assert list(c.run(_worker_holds, future.key).values()) == [True]
        assert c.run_on_scheduler(_scheduler_holds, future.key)


def _spoil_keeping_size_and_time(path) -> None:
    """Zero the data of the Parquet file at ``path`` (between its leading magic bytes and its
    footer), keeping its footer, size and modification time (so its blocks keep their names
    and their shapes can still be read): a read of its values now fails."""
    st = os.stat(path)
    raw = bytearray(Path(path).read_bytes())
    footer = int.from_bytes(raw[-8:-4], "little") + 8
    raw[4:len(raw) - footer] = bytes(len(raw) - footer - 4)
    Path(path).write_bytes(bytes(raw))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@slow
def test_a_later_w_step_on_the_same_files_reuses_the_blocks(client, tmp_path):
    """The second outer iteration's W-step finds its blocks on the workers: with the values
    in every block's files spoilt in between (names and footers unchanged), it builds no
    block again and gives the first W-step's ``W``."""
    from scarce.tasks.errors import InputError
    from scarce.tasks.store.encoding import read_parquet_entry

    source, data = _stored(tmp_path, "masked-sparse")
    W0, H = _start(data)
    cluster = {"address": client.scheduler.address}
    token = source.token()
    try:
        results = []
        for iteration in range(2):  # two outer iterations' W-steps
            with CLIENTS.backend(source, 4, cluster) as backend:
                assert backend.recoverable and backend.client is not client
                results.append(_w_step(data, W0, H, backend=backend, cg_max_iter=4)[0])
            if iteration == 0:
                for path in (p for files in source.blocks for p in files.values() if p):
                    _spoil_keeping_size_and_time(path)
                assert source.token() == token
                with pytest.raises(InputError, match="unreadable"):
                    read_parquet_entry(source.blocks[0]["X"])
        np.testing.assert_array_equal(results[0], results[1])
    finally:
        CLIENTS.close()


def _training_blocks(token, dask_worker):  # run on a worker
    """The keys of the row blocks of the files of ``token`` this worker holds."""
    return sorted(str(k) for k in dask_worker.data
                  if str(k).startswith(f"leml-w-block-{token}-"))


@slow
def test_the_evaluation_releases_the_training_blocks_the_w_steps_kept(client, tmp_path):
    """After a W-step the workers keep its row blocks for the next one (the next outer
    iteration); the evaluation of the test set on the workers releases them first (the fit
    is over), and its metrics are those of the test blocks scored in this process."""
    import scarce.tasks.leml as tl
    from scarce.tasks.leml_dask import evaluate_on_blocks

    source, data = _stored(tmp_path, "full")
    token = source.token()
    W0, H = _start(data)
    cluster = {"address": client.scheduler.address}
    files = [{"X": b["X"], "Y": b["Y"]} for b in source.blocks]
    params = {"rank": K, "fit_intercept": False, "dtype": "float64"}
    try:
        with CLIENTS.backend(source, 4, cluster) as backend:
            W, _ = _w_step(data, W0, H, backend=backend, cg_max_iter=2)
        assert sum(map(len, client.run(_training_blocks, token).values())) == 4  # kept
        weights = np.linspace(1.0, 3.0, H.shape[0])  # PSP@k's, as the flow's propensity
        out = tl.evaluate.fn(None, W, H, traces=[pd.DataFrame({"iteration": [1]})],
                             timings=[pd.DataFrame({"iteration": [1], "half": ["W"],
                                                    "seconds": [1.0]})],
                             propensity=weights, dataset="t", method="m", params=params,
                             batch_size=4, partition=files, cluster=cluster)
        for _ in range(300):  # Dask frees released keys asynchronously: a generous 30 s
            if not any(client.run(_training_blocks, token).values()):
                break
            time.sleep(0.1)
        assert not any(client.run(_training_blocks, token).values())
        expected = tl._metrics_table(evaluate_on_blocks(None, files, W, H, params, 4,
                                                        inv_propensity=weights), "t", "m")
        assert {"psp@1", "ndcg@5"} <= set(expected["metric"])
        pd.testing.assert_frame_equal(out["metrics"], expected)
    finally:
        CLIENTS.close()


@slow
def test_a_step_with_where_runs_whole_on_the_cluster_and_writes_what_it_writes_here(
        client, tmp_path, monkeypatch):
    """``leml-load`` given a cluster: read, computed and written by a worker process (this
    process parses nothing), the same refs and the same bytes as the step run here; a
    worker that keys the call otherwise (other code) is refused."""
    import scarce.tasks.leml as tl
    import scarce.tasks.leml_files as files
    from scarce.tasks.steps import _make_runner, execute_by_name
    from scarce.tasks.store.seals import seal_path

    path = tmp_path / "data.txt"
    path.write_text("3 4 2\n0 0:1 2:0.5\n1 1:2\n0,1 3:1\n")
    args = dict(path=path, format="xmc", dtype="float32", n_labels=None, normalize="l2")
    here = Store(tmp_path / "here")
    refs_here = _make_runner(tl.load, here)(**args)
    there = Store(tmp_path / "there")

    def refuse(*_args, **_kwargs):
        raise AssertionError("parsed in the flow's process")

    try:
        with monkeypatch.context() as patch:
            patch.setattr(files, "read_xmc", refuse)  # where the load step's body reads
            refs = _make_runner(tl.load, there)(
                **args, cluster={"address": client.scheduler.address})
    finally:
        CLIENTS.close()
    assert refs == refs_here
    for ref in refs.values():
        assert there.sha256(ref) == here.sha256(ref)
    params = {**args, "labels_file": None, "cluster": None, "with_labels": True}
    key = tl.load.key(params)
    assert seal_path(there, key).is_file() and seal_path(here, key).is_file()
    with pytest.raises(RuntimeError, match="other code than the flow"):
        execute_by_name("scarce.tasks.leml", "leml-load", str(there.root), params,
                        "0" * len(key))


def _kill(client, address):
    """SIGKILL the worker process at ``address`` (its nanny starts a new one) and wait until
    the scheduler has removed it."""
    pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)
    for _ in range(1200):  # a generous cap: 120 s
        if address not in client.scheduler_info(n_workers=-1)["workers"]:
            return
        time.sleep(0.1)
    raise TimeoutError(f"worker {address} still listed 120 s after it was killed")


@contextmanager
def _killable_cluster():
    """A client of a LocalCluster of 2 single-threaded worker processes with nannies (a
    killed worker is replaced), both workers up, without work stealing as the flow's own;
    its own, as the tests kill its workers."""
    import dask
    from distributed import Client, LocalCluster

    from scarce.tasks.leml_dask import NO_WORK_STEALING

    with dask.config.set(NO_WORK_STEALING):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                               dashboard_address=None, memory_limit="1GiB")
    with cluster, Client(cluster) as c:
        c.wait_for_workers(2)
        yield c


@slow
def test_stored_blocks_survive_a_lost_worker_scattered_ones_do_not(tmp_path):
    source, data = _stored(tmp_path, "masked-sparse")
    W0, H = _start(data)
    kwargs = dict(cg_max_iter=6, cg_tol=1e-3)
    with _killable_cluster() as c:
        with RowBlockBackend(c, source) as ws:
            reference, _ = _w_step(data, W0, H, backend=ws, **kwargs)
        with RowBlockBackend(c, source) as ws:
            distributed.wait(ws.block_futures)
            _kill(c, ws.block_workers[0])  # blocks 0 and 2 are lost
            W, _ = _w_step(data, W0, H, backend=ws, **kwargs)  # ... and built again
        np.testing.assert_array_equal(W, reference)
        c.wait_for_workers(2)  # the nanny's new worker
        with RowBlockBackend(c, data) as ws:
            distributed.wait(ws.block_futures)
            _kill(c, ws.block_workers[0])
            with pytest.raises(Exception, match="cancel|lost|forgotten"):  # noqa: PT011
                _w_step(data, W0, H, backend=ws, **kwargs)


class _DuringCG:
    """Wraps a :class:`RowBlockBackend`'s operators: ``hook(step)`` runs before the Hessian-vector
    product number ``at`` of each W-step's CG (the gradient is taken by then).  The wrappers
    hold what they wrap and nothing holds them back: no reference cycle keeps a W-step's
    futures (and so the workers' arrays) alive after it returns."""

    def __init__(self, step, at, hook):
        self.step, self.at, self.hook = step, at, hook

    def operators(self, H, loss):
        return _HookedOperators(self.step.operators(H, loss), self)


class _HookedOperators:
    def __init__(self, operators, during: _DuringCG):
        self.operators, self.during = operators, during

    def value(self, W):
        return self.operators.value(W)

    def products(self, W, state=None):
        return _HookedProducts(self.operators.products(W, state), self.during)


class _HookedProducts:
    def __init__(self, products, during: _DuringCG):
        self.products, self.during, self.calls = products, during, 0

    def gradient(self):
        return self.products.gradient()

    def hess_vec(self, V):
        self.calls += 1
        if self.calls == self.during.at:
            self.during.hook(self.during.step)
        return self.products.hess_vec(V)


def _step_arrays(dask_worker):  # run on a worker
    """Shapes of the W-step's arrays this worker holds, each array once: those sent to it
    (``_put``) and the ``W`` and ``H`` of its blocks' products."""
    from scarce.algorithms.leml.w_step import WStepProducts

    held = {}
    for value in dask_worker.data.values():
        arrays = ([value.array] if isinstance(value, _Aligned) else
                  [value.W, value.H] if isinstance(value, WStepProducts) else [])
        held.update((id(a), a.shape) for a in arrays if a is not None)
    return sorted(held.values())


@slow
@pytest.mark.parametrize("case", ["full", "masked-sparse"])
def test_workers_free_W_and_the_squared_losss_H_once_the_gradient_is_taken(client, case):
    """Through the CG iterations a worker holds no copy of ``W``, and for the squared loss
    fully observed (whose Hessian uses only ``2 H^T H``) none of ``H`` either; the other
    cases keep ``H`` (their Hessian uses it), one copy a worker.  The CG direction of the
    product being computed is not yet sent when the hook runs."""
    import gc

    gc.collect()  # futures an earlier test left in reference cycles: released, not counted here
    data = _problem(case)
    W0, H = _start(data)
    expected = [] if case == "full" else [(data.n_labels, K)]
    seen = []

    def observe(step):
        for _ in range(300):  # Dask frees released keys asynchronously: a generous 30 s
            held = step.client.run(_step_arrays)
            if all(h == expected for h in held.values()):
                break
            time.sleep(0.1)
        seen.append(held)

    with RowBlockBackend(client, data, blocks=4) as ws:
        W, _ = _w_step(data, W0, H, backend=_DuringCG(ws, 2, observe), cg_max_iter=4,
                       cg_tol=0.0)
        reference, _ = _w_step(data, W0, H, backend=ws, cg_max_iter=4, cg_tol=0.0)
    assert len(seen) == 1 and len(seen[0]) == 2
    assert all(h == expected for h in seen[0].values()), seen
    np.testing.assert_array_equal(W, reference)


@slow
@pytest.mark.parametrize("case", ["full", "masked-sparse"])
def test_a_worker_lost_in_the_middle_of_cg_costs_its_blocks_and_gives_the_same_W(
        tmp_path, case):
    """SIGKILL a worker after the gradient is taken, in the middle of the CG iterations: the
    blocks and products it held are built again on the other worker (their tasks, and those
    of the arrays they read, stay recomputable), and ``W`` is the same bits."""
    source, data = _stored(tmp_path, case)
    W0, H = _start(data)
    kwargs = dict(cg_max_iter=6, cg_tol=0.0)
    killed = []

    def kill(step):
        killed.append(step.block_workers[0])
        _kill(step.client, step.block_workers[0])

    with _killable_cluster() as c:
        with RowBlockBackend(c, source) as ws:
            reference, _ = _w_step(data, W0, H, backend=ws, **kwargs)
        with RowBlockBackend(c, source) as ws:
            W, _ = _w_step(data, W0, H, backend=_DuringCG(ws, 3, kill), **kwargs)
        assert len(killed) == 1
        assert killed[0] not in c.scheduler_info(n_workers=-1)["workers"]
        np.testing.assert_array_equal(W, reference)


# -- the memory guard --------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["full", "masked-sparse", "masked-dense"])
@pytest.mark.parametrize("dtype,fit_intercept", [(np.float64, False), (np.float32, True)])
def test_block_sizes_from_the_footers_are_the_prepared_blocks_bytes(tmp_path, case, dtype,
                                                                    fit_intercept):
    """The estimate read from the partition files' footers, against the bytes of the arrays of
    each block as a worker prepares it (within 1%: only the row pointers' dtypes may differ)."""
    source, _ = _stored(tmp_path, case, dtype=dtype, fit_intercept=fit_intercept, blocks=3)
    estimated = source.block_nbytes()
    actual = [data_nbytes(source.block(b)) for b in range(3)]
    assert estimated == pytest.approx(actual, rel=0.01)


def test_workers_too_small_for_their_blocks_are_refused_before_anything_is_sent(tmp_path):
    from distributed import Client, LocalCluster

    from scarce.algorithms.memory import MemoryBudgetError

    source, data = _stored(tmp_path, "masked-sparse", blocks=3)
    per_block = max(source.block_nbytes())
    # Two workers whose limit is under the 2 blocks the first one gets (blocks 0 and 2).
    limit = int(1.5 * per_block / 0.8)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None, memory_limit=limit) as cluster, \
            Client(cluster) as client:
        with pytest.raises(MemoryBudgetError) as exc:
            RowBlockBackend(client, source, 3)
        message = str(exc.value)
        assert "2 row block(s)" in message and "compute.workers" in message
        assert "compute.row_blocks (3 over 2 workers now)" in message
        assert client.run_on_scheduler(
            lambda dask_scheduler: len(dask_scheduler.tasks)) == 0  # nothing was sent
        # The same data as 4 blocks puts 2 smaller blocks on each worker: it fits.
        source4, _ = _stored(tmp_path / "four", "masked-sparse", blocks=4)
        assert sum(sorted(source4.block_nbytes())[-2:]) < 0.8 * limit
        with RowBlockBackend(client, source4, 4) as backend:
            assert len(backend.block_futures) == 4
        # Scattered blocks (data in memory) are checked alike.
        with pytest.raises(MemoryBudgetError):
            RowBlockBackend(client, data, 3)


def test_working_arrays_count_by_hand():
    from scarce.tasks.leml_dask import working_nbytes

    common = dict(n_features=10, n_labels=12, rank=3, dtype="float64")
    # A_b and a product (2 x 110 rows x 3 x 8 bytes) + 4 of (10 + 12) x 3 x 8 bytes
    assert working_nbytes([50, 60], **common, fully_observed=True) == 5280 + 2112
    # + one label block of all 12 labels: 4 arrays of 12 x 6 Gram triangle entries (one per
    # row block, the product being added, their sum), the rows of the right-hand side and
    # the solution (2 x 12 x 3), the pair products of the 60 rows of the larger block
    # (60 x 6) and the full 3 x 3 matrices (12 x 9), 8 bytes an element
    label_block = 4 * 12 * 6 + 2 * 12 * 3 + 60 * 6 + 12 * 9
    assert working_nbytes([50, 60], **common, fully_observed=False) == (
        5280 + 2112 + 8 * label_block)
    # float32 halves every term, and adds the float64 copy of the full matrices that
    # np.linalg.solve works on
    half = dict(common, dtype="float32")
    assert working_nbytes([50, 60], **half, fully_observed=False) == (
        (5280 + 2112) // 2 + 4 * label_block + 8 * 12 * 9)


@pytest.mark.parametrize("entries", ["sparse", "dense"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_workers_traced_h_step_is_within_its_working_estimate(entries, dtype):
    """The squared loss's H-step with missing labels over 3 row blocks in one process, as a
    worker holding all three builds, sums and solves its label blocks (two here, one at a
    time), traced: the peak of what it allocates is under :func:`working_nbytes` of those
    blocks and not far under (within 2x)."""
    import tracemalloc

    from scarce.tasks.leml_dask import working_nbytes

    n, n_labels, rank = 300, 1000, 100
    X = normalize(sp.random(n, 30, density=0.3, random_state=1, format="csr"))
    Y = sp.random(n, n_labels, density=0.05, random_state=2, format="csr")
    Y.data[:] = 1
    mask = sp.random(n, n_labels, density=0.3 if entries == "dense" else 0.03,
                     random_state=3, format="csr").astype(bool)
    data = prepare_data(X, Y, mask, fit_intercept=True, dtype=dtype, entries=entries)
    blocks = split_rows(data, 3)
    W = np.random.default_rng(0).standard_normal((data.n_features, rank)).astype(dtype)
    backend = LocalBlocks(blocks)
    tracemalloc.start()
    try:
        update_H_by_blocks(backend, W, LAM, "squared")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    estimate = working_nbytes([b.n_samples for b in blocks], n_features=data.n_features,
                              n_labels=n_labels, rank=rank, dtype=dtype,
                              fully_observed=False)
    assert estimate / 2 < peak <= estimate, (peak, estimate)


@slow
def test_workers_too_small_for_the_working_arrays_of_the_rank_are_refused(tmp_path):
    """Blocks that fit are still refused when the rank's working arrays would not, with the
    rank named; without a rank only the blocks are counted."""
    from distributed import Client, LocalCluster

    from scarce.algorithms.memory import MemoryBudgetError

    source, _ = _stored(tmp_path, "masked-sparse", blocks=3)
    # the 2 blocks of worker 0 and their working arrays at rank K fit
    limit = int(6 * max(source.block_nbytes()) / 0.8)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=None, memory_limit=limit) as cluster, \
            Client(cluster) as client:
        with RowBlockBackend(client, source, 3, rank=K) as backend:
            assert len(backend.block_futures) == 3
        with pytest.raises(MemoryBudgetError, match="a lower model.rank") as exc:
            RowBlockBackend(client, source, 3, rank=2000)
        assert "of working arrays" in str(exc.value)


# -- the evaluation on the test set's row blocks ----------------------------------------------
@slow
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_evaluation_on_row_blocks_equals_the_one_pass_metrics_on_any_workers(
        client, tmp_path, fit_intercept):
    """The test set's row blocks scored on the workers (or in this process): the same bits on
    1 and 2 workers and here; P@k and the Hamming loss those of one pass over the whole test
    set to the last bit, the AUC to rounding."""
    from scarce.algorithms.metrics.multilabel import multilabel_scores
    from scarce.tasks.leml_dask import evaluate_on_blocks

    source, data = _stored(tmp_path, "full", fit_intercept=fit_intercept, blocks=3)
    rng = np.random.default_rng(5)
    W = rng.standard_normal((data.n_features, K))
    H = rng.standard_normal((data.n_labels, K))
    params = {"rank": K, "fit_intercept": fit_intercept, "dtype": "float64"}
    store = Store(tmp_path / "store")
    X, Y = store.read("t/X"), store.read("t/Y")
    files = [{"X": b["X"], "Y": b["Y"]} for b in source.blocks]
    fitted = LEML(**params).set_factors(W, H)
    whole = multilabel_scores(Y, lambda s, e: fitted.decision_function(X[s:e]),
                              threshold=fitted.threshold_, batch_size=4)
    here = evaluate_on_blocks(None, files, W, H, params, batch_size=4)
    workers = sorted(client.scheduler_info()["workers"])
    on_one = evaluate_on_blocks(client, files, W, H, params, batch_size=4,
                                workers=workers[:1])
    on_two = evaluate_on_blocks(client, files, W, H, params, batch_size=4)
    assert here == on_one == on_two
    for name in ("precision@1", "precision@3", "precision@5", "hamming_loss"):
        assert here[name] == whole[name], name
    assert here["instance_auc"] == pytest.approx(whole["instance_auc"], rel=1e-12)
    assert 0 < here["precision@1"] < 1


@slow
@pytest.mark.parametrize("fit_intercept", [False, True])
def test_predictions_on_row_blocks_are_the_whole_test_sets_table_on_any_workers(
        client, tmp_path, fit_intercept):
    """The test set's row blocks predicted on the workers (or in this process) and put end
    to end: the same table on 1 and 2 workers and here, and the labels and rows of the
    whole test set's table (scores to rounding: the batches differ)."""
    from scarce.tasks.leml import predictions_table
    from scarce.tasks.leml_dask import predict_on_blocks

    source, data = _stored(tmp_path, "full", fit_intercept=fit_intercept, blocks=3)
    rng = np.random.default_rng(6)
    W = rng.standard_normal((data.n_features, K))
    H = rng.standard_normal((data.n_labels, K))
    params = {"rank": K, "fit_intercept": fit_intercept, "dtype": "float64"}
    X = Store(tmp_path / "store").read("t/X")
    files = [{"X": b["X"], "Y": b["Y"]} for b in source.blocks]
    whole = predictions_table(LEML(**params).set_factors(W, H), X, top_k=5, batch_size=7)
    here = predict_on_blocks(None, files, W, H, params, top_k=5, batch_size=7)
    workers = sorted(client.scheduler_info()["workers"])
    on_one = predict_on_blocks(client, files, W, H, params, 5, 7, workers=workers[:1])
    on_two = predict_on_blocks(client, files, W, H, params, 5, 7)
    pd.testing.assert_frame_equal(here, on_one)
    pd.testing.assert_frame_equal(here, on_two)
    assert len(here) == N * 5 and here["row"].is_monotonic_increasing
    pd.testing.assert_frame_equal(here[["row", "rank", "label"]], whole[["row", "rank", "label"]])
    np.testing.assert_allclose(here["score"], whole["score"], rtol=1e-12, atol=1e-12)


def test_large_terms_are_fetched_one_at_a_time_and_add_to_the_same_bits(monkeypatch):
    """Block sums fetch a large term at a time (never one per block at once) and a small
    sum in one gather; either way the same bits as ``sum_in_order``."""
    import scarce.tasks.leml_dask.backend as ld
    from scarce.algorithms.leml.h_step import sum_in_order
    from scarce.tasks.leml_dask import InlineClient

    class Recording(InlineClient):
        gathered: list = []

        def gather(self, futures):
            self.gathered.append(len(futures))
            return super().gather(futures)

    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((50, 4)).astype(np.float32) for _ in range(5)]
    first = parts[0].copy()
    client = Recording()
    futures = [client.submit(lambda p: p, p) for p in parts]
    small = ld._fetched_sum(client, futures)
    assert client.gathered == [4]
    monkeypatch.setattr(ld, "GATHER_AT_ONCE_BYTES", 100)
    large = ld._fetched_sum(client, futures)
    assert client.gathered == [4]  # no gather: one term at a time
    np.testing.assert_array_equal(small, sum_in_order(parts))
    np.testing.assert_array_equal(large, sum_in_order(parts))
    np.testing.assert_array_equal(parts[0], first)  # the first term is not added into


# -- the memory of the process that drives the solvers -----------------------------------------
@slow
@pytest.mark.parametrize(("loss", "preconditioner"), [("squared", "none"),
                                                     ("squared", "diagonal"),
                                                     ("logistic", "none")])
def test_the_solvers_arrays_in_the_driving_process_are_within_their_estimate(client, loss,
                                                                              preconditioner):
    """The traced peak of a start, a W-step, an H-step and the objective driven from this
    process, the blocks on the workers, is under :func:`driver_nbytes` (what the guard counts
    on a worker that drives them) and not far under it (within 2x)."""
    import tracemalloc

    from scarce.tasks.leml_dask import driver_nbytes

    X = normalize(sp.random(300, 20_000, density=0.003, random_state=4, format="csr"))
    Y = sp.random(300, 1_500, density=0.01, random_state=5, format="csr")
    Y.data[:] = 1
    data = prepare_data(X, Y, fit_intercept=True, dtype=np.float32)
    k = 16
    model = LEML(rank=k, lam=1.0, loss=loss, cg_max_iter=8, dtype="float32", random_state=0,
                 squared_init_iter=1 if loss != "squared" else 0,
                 cg_preconditioner=preconditioner)
    with RowBlockBackend(client, data, 3, rank=k) as backend:
        tracemalloc.start()
        try:
            W, H = model.start(data, backend=backend)
            W, _ = model.w_step(data, W, H, backend=backend)
            H, _ = model.h_step(data, W, H, backend=backend)
            model.objective(data, W, H, backend=backend)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    estimate = driver_nbytes(n_features=data.n_features, n_labels=data.n_labels, rank=k,
                             dtype=np.float32)
    assert estimate / 2 < peak <= estimate, (peak, estimate)


@slow
def test_the_worker_that_drives_a_step_counts_the_solvers_arrays(client):
    """Run on a worker (as ``compute.solvers: worker`` runs the solvers' steps), the guard adds
    the solver's arrays to that worker's blocks and names the option; driven from here, the
    same step fits.  Nothing of the size is allocated: the guard refuses first."""
    from scarce.algorithms.memory import MemoryBudgetError
    from scarce.tasks.leml_dask import driver_nbytes, this_worker, working_nbytes

    X = normalize(sp.random(40, 20_000, density=0.01, random_state=6, format="csr"))
    Y = sp.random(40, 12, density=0.2, random_state=7, format="csr")
    Y.data[:] = 1
    data = prepare_data(X, Y, fit_intercept=False, dtype=np.float64)
    limit = min(info["memory_limit"] for info in client.scheduler_info()["workers"].values())
    # the rank at which the solver's arrays alone take 90% of what a worker may hold
    rank = int(0.9 * 0.8 * limit / driver_nbytes(n_features=data.n_features,
                                                n_labels=data.n_labels, rank=1,
                                                dtype=data.dtype))
    working = working_nbytes([20], n_features=data.n_features, n_labels=data.n_labels,
                             rank=rank, dtype=data.dtype, fully_observed=True)
    assert working < 0.3 * 0.8 * limit  # the blocks' own working arrays fit
    assert this_worker() is None

    def build(rank):
        from distributed import worker_client

        with worker_client() as here, RowBlockBackend(here, data, 2, rank=rank) as backend:
            return len(backend.block_futures), this_worker()

    with RowBlockBackend(client, data, 2, rank=rank) as backend:  # driven from here: it fits
        assert len(backend.block_futures) == 2
    with pytest.raises(MemoryBudgetError, match="compute.solvers flow") as exc:
        client.submit(build, rank, pure=False).result()
    assert "of the solver's arrays (it drives the step" in str(exc.value)
    n, where = client.submit(build, 2, pure=False).result()  # a small rank fits there too
    assert n == 2 and where in client.scheduler_info()["workers"]


def _slow_block_tasks(seconds: float = 0.3) -> None:
    """Run on each worker: the W-step's block tasks (the products and the Hessian products)
    take ``seconds`` longer, so that a queue of them on one worker while the other is idle
    is worth moving to Dask's work stealing (tasks of a few milliseconds are never moved).
    The tasks name their function by reference, so the worker runs the patched one."""
    import functools
    import time

    import scarce.tasks.leml_dask.backend as module

    for name in ("_block_products", "_hess_vec"):
        original = getattr(module, name)

        @functools.wraps(original)
        def slower(*args, _original=original):
            time.sleep(seconds)
            return _original(*args)

        setattr(module, name, slower)


def _tasks_off_their_worker(client, backend, run) -> list:
    """The keys of ``backend``'s block tasks that ran on another worker than their block's,
    while ``run()`` ran (from the scheduler's task stream)."""
    from distributed import get_task_stream

    from scarce.tasks.leml_dask import tasks_off_their_worker

    with get_task_stream(client) as stream:
        run()
    return tasks_off_their_worker(stream.data, backend.workers)


@slow
def test_the_flows_own_cluster_keeps_a_blocks_tasks_on_its_worker(tmp_path):
    """The LocalCluster the flow starts runs without work stealing: every block on one of
    its two workers, block tasks slowed to 0.3 s, the other worker idle, and still every
    task of a block runs where the block is.  With stealing on (Dask's default) the same
    W-step moved 5 of its 12 slowed block tasks to the idle worker."""
    from scarce.tasks.leml_dask import scheduler_steals

    parted, data = _stored(tmp_path, "full", bibtex=True)
    W0, H = _start(data)
    client = CLIENTS.own(2, None)
    try:
        assert scheduler_steals(client) is False
        client.run(_slow_block_tasks)
        first = sorted(cluster_workers(client))[0]
        with RowBlockBackend(client, parted, workers=[first]) as backend:
            off = _tasks_off_their_worker(client, backend, lambda: _w_step(
                data, W0, H, backend=backend, cg_max_iter=3, cg_tol=1e-12))
            assert set(backend.block_workers) == {first}
    finally:
        CLIENTS.close()
    assert off == []


@slow
def test_a_cluster_that_steals_work_is_named_once_with_the_setting_to_change(caplog):
    """A cluster with Dask's default, work stealing: spreading blocks over its two workers
    warns once, naming the scheduler and the environment setting; blocks all on one worker
    (nothing to move between the block's workers) do not warn."""
    import dask
    from distributed import Client, LocalCluster

    from scarce.tasks.leml_dask import NO_STEALING_ENV, scheduler_steals

    # Dask's default said outright: the setting is global to this process, and in a full run
    # of the file this cluster once started without stealing after the earlier tests; what
    # left it off there was not found.
    with dask.config.set({"distributed.scheduler.work-stealing": True}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                               dashboard_address=None)
    with cluster, Client(cluster) as client:
        assert scheduler_steals(client) is True
        data = _problem("full")
        CLIENTS._asked_stealing.discard(client.scheduler.address)
        caplog.set_level(logging.WARNING, logger="scarce.store")
        one = sorted(cluster_workers(client))[:1]

        def warnings():
            return [r for r in caplog.records
                    if r.name == "scarce.store" and r.levelno == logging.WARNING]

        with RowBlockBackend(client, data, workers=one) as backend:
            CLIENTS.warn_if_stealing(client, backend)
        assert not warnings()
        for _ in range(2):
            with RowBlockBackend(client, data) as backend:
                CLIENTS.warn_if_stealing(client, backend)
        [record] = warnings()
        message = record.getMessage()
        assert client.scheduler.address in message and NO_STEALING_ENV in message
