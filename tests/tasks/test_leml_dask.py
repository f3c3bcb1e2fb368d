"""The Dask W-step (tasks.leml_dask) against the single-process solver, on a real cluster.

Both run through the estimator's own step method, ``LEML.w_step(data, W, H)`` without and
with ``backend=DaskWStep(...)``.  One LocalCluster with two single-threaded worker
processes for the module (a start costs 10-20 s on these machines); "one worker" places
every block on the first worker, "two workers" spreads them.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.preprocessing import normalize

from algorithms.leml import LEML, LEMLData, prepare_data

distributed = pytest.importorskip("distributed")

from tasks.leml_dask import DaskWStep, worker_peak_memory  # noqa: E402

N, D, L, K, LAM = 160, 10, 12, 3, 2.0

pytestmark = pytest.mark.slow  # starts a Dask LocalCluster


def _problem(case: str, dtype=np.float64) -> LEMLData:
    X = normalize(sp.random(N, D, density=0.4, random_state=1, format="csr"))
    Y = sp.random(N, L, density=0.15, random_state=2, format="csr")
    Y.data[:] = 1
    if case == "full":
        return prepare_data(X, Y, fit_intercept=False, dtype=dtype)
    mask = sp.random(N, L, density=0.3, random_state=3, format="csr")
    mask.data[:] = 1
    entries = case.split("-")[1]  # masked-sparse / masked-dense
    return prepare_data(X, Y, mask, fit_intercept=False, dtype=dtype, entries=entries)


def _start(data, seed=0):
    W0 = np.random.default_rng(seed).standard_normal((data.n_features, K)).astype(data.dtype)
    _, H = LEML(rank=K, random_state=seed).start(data)
    return W0, H


def _w_step(data, W0, H, loss="squared", backend=None, **params):
    """One W-step of the estimator, here or on ``backend``."""
    return LEML(lam=LAM, loss=loss, **params).w_step(data, W0, H, backend=backend)


class RecordingClient:
    """Forwards to a real Client and records what crosses to the cluster."""

    def __init__(self, client):
        self._client = client
        self.scattered: list = []
        self.submitted: list = []

    def scatter(self, data, **kwargs):
        self.scattered.append(data)
        return self._client.scatter(data, **kwargs)

    def submit(self, fn, *args, **kwargs):
        self.submitted.append(args)
        return self._client.submit(fn, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._client, name)


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, memory_limit="1GiB") as cluster, \
            Client(cluster) as c:
        c.wait_for_workers(2)
        yield c


@pytest.mark.parametrize("case", ["full", "masked-sparse"])
def test_dask_w_step_equals_single_process_solver(client, case):
    data = _problem(case)
    W0, H = _start(data)
    kwargs = dict(cg_tol=1e-10, cg_max_iter=300)
    W_single, info_single = _w_step(data, W0, H, **kwargs)
    with DaskWStep(client, data, blocks=4) as ws:
        W_dask, info_dask = _w_step(data, W0, H, backend=ws, **kwargs)
    assert W_dask.dtype == np.float64 and W_dask.shape == W_single.shape
    assert abs(info_dask["cg_iter"] - info_single["cg_iter"]) <= 1
    # Only the order of the block sums differs.  Each CG stops once its relative residual is
    # below 1e-10, so the two iterates may differ by that residual times the system's
    # condition number (1.9e-11 against max|W| 0.12 was seen): agree to 1e-8 relative.
    assert np.abs(W_dask - W_single).max() <= 1e-8 * np.abs(W_single).max()


def test_dask_w_step_float32_stays_float32_and_close(client):
    data = _problem("full", np.float32)
    W0, H = _start(data)
    kwargs = dict(cg_tol=1e-5, cg_max_iter=300)
    W_single, _ = _w_step(data, W0, H, **kwargs)
    with DaskWStep(client, data) as ws:
        W_dask, _ = _w_step(data, W0, H, backend=ws, **kwargs)
    assert W_dask.dtype == np.float32
    assert np.abs(W_dask - W_single).max() <= 1e-4 * np.abs(W_single).max()


@pytest.mark.parametrize(("case", "loss"), [("full", "squared"), ("masked-sparse", "squared"),
                                            ("masked-dense", "logistic")])
def test_one_and_two_workers_give_bit_identical_W(client, case, loss):
    data = _problem(case)
    W0, H = _start(data)
    kwargs = dict(loss=loss, cg_max_iter=8, cg_tol=1e-3, newton_max_iter=1)
    workers = sorted(client.scheduler_info()["workers"])
    results = []
    for chosen in (workers[:1], workers):
        with DaskWStep(client, data, blocks=4, workers=chosen) as ws:
            held = {w for addrs in client.who_has(ws.block_futures).values() for w in addrs}
            assert held == set(chosen)
            results.append(_w_step(data, W0, H, backend=ws, **kwargs)[0])
    assert np.array_equal(results[0], results[1])
    # Same iterations as the single-process solver, equal up to CG's rounding sensitivity.
    W_single, _ = _w_step(data, W0, H, **kwargs)
    assert np.abs(results[1] - W_single).max() <= 1e-3 * np.abs(W_single).max()


def test_blocks_are_scattered_once_and_iterations_send_only_directions(client):
    data = _problem("masked-sparse")
    W0, H = _start(data)
    rec = RecordingClient(client)
    ws = DaskWStep(rec, data, blocks=4)
    try:
        assert len(rec.scattered) == 4 and all(isinstance(b, LEMLData) for b in rec.scattered)
        assert sum(b.n_samples for b in rec.scattered) == N
        rec.scattered.clear()
        n_cg = 0
        for _ in range(2):  # two W-steps reuse the scattered blocks
            W0, info = _w_step(data, W0, H, backend=ws, cg_max_iter=6, cg_tol=0.0)
            n_cg += info["cg_iter"]
        assert n_cg == 12
        # Per W-step: H, the point W0 and one direction per CG iteration, nothing else.
        assert len(rec.scattered) == 2 * 2 + n_cg
        small = {(data.n_features, K), (data.n_labels, K)}
        assert all(isinstance(a, np.ndarray) and a.shape in small for a in rec.scattered)
        # Tasks carry only futures of blocks / products / those arrays, plus the loss.
        for args in rec.submitted:
            for a in args:
                assert not isinstance(a, np.ndarray | LEMLData | sp.spmatrix), type(a)
        assert len(rec.submitted) == 2 * (4 + 4 + 4 * 6)  # products, gradient, 6 CG
    finally:
        ws.close()
    peaks = worker_peak_memory(client)
    assert len(peaks) == 2 and all(v > 10 * 2**20 for v in peaks.values())
