"""The loss terms taken a batch of rows at a time (algorithms.leml.terms): equal to the
whole-array products of a naive float64 reference, batch sizes from the memory guard, and no
``n x L`` array held while they are taken."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

import scarce.algorithms.leml.terms as terms
from scarce.algorithms.leml import LEML
from scarce.algorithms.leml.data import prepare_data
from scarce.algorithms.leml.losses import get_loss
from scarce.algorithms.memory import ENV_LIMIT, MemoryBudgetError


def problem(seed, n=23, d=6, n_labels=5, k=3, observed=None):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.5, format="csr", random_state=seed)
    Y = (rng.random((n, n_labels)) < 0.3).astype(float)
    mask = None if observed is None else rng.random((n, n_labels)) < observed
    A = rng.standard_normal((n, k))
    H = rng.standard_normal((n_labels, k))
    return X, Y, mask, A, H


def reference(Y, mask, A, H, loss):
    """The three terms from whole n x L arrays in float64, unobserved entries dropped."""
    loss = get_loss(loss)
    omega = np.ones(Y.shape) if mask is None else mask.astype(float)
    Z = A @ H.T
    D = loss.derivative(Y, Z) * omega
    return D @ H, D.T @ A, float((loss.value(Y, Z) * omega).sum())


@pytest.mark.parametrize("loss", ["logistic", "sqhinge", "squared"])
@pytest.mark.parametrize("layout", ["full", "dense", "sparse"])
@pytest.mark.parametrize("entries_per_batch", [1, 12, terms.ENTRIES_PER_BATCH])
def test_terms_equal_the_whole_array_reference(loss, layout, entries_per_batch, monkeypatch):
    monkeypatch.setattr(terms, "ENTRIES_PER_BATCH", entries_per_batch)
    X, Y, mask, A, H = problem(3, observed=None if layout == "full" else 0.6)
    data = prepare_data(X, Y, mask, fit_intercept=False, dtype=np.float64,
                        entries="auto" if layout == "full" else layout)
    got = terms.loss_terms(data, A, H, loss, rows=True, labels=True, value=True)
    want = reference(Y, mask, A, H, loss)
    np.testing.assert_allclose(got.rows, want[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.labels, want[1], rtol=1e-12, atol=1e-12)
    assert got.value == pytest.approx(want[2], rel=1e-12)
    # only what is asked for is computed
    assert terms.loss_terms(data, A, H, loss, labels=True).rows is None
    assert terms.loss_terms(data, A, H, loss, rows=True).value is None


def test_batch_rows_do_not_follow_the_memory_available(monkeypatch):
    """The batches fix the order of the sums: their size is set by the label count alone,
    never by the memory a machine has free (or ``SCARCE_MEMORY_LIMIT_GB``)."""
    n_labels = 1000
    monkeypatch.delenv(ENV_LIMIT, raising=False)
    assert terms.batch_rows(n_labels) == terms.ENTRIES_PER_BATCH // n_labels
    monkeypatch.setenv(ENV_LIMIT, str(1 / 1024))
    assert terms.batch_rows(n_labels) == terms.ENTRIES_PER_BATCH // n_labels
    assert terms.batch_rows(terms.ENTRIES_PER_BATCH * 2) == 1


def _peak_of_terms(n, n_labels=400, k=8):
    """tracemalloc's peak while the three terms of n fully observed rows are taken, the
    data, and the terms."""
    rng = np.random.default_rng(0)
    X = sp.random(n, 30, density=0.1, format="csr", random_state=0, dtype=np.float32)
    Y = sp.random(n, n_labels, density=0.02, format="csr", random_state=1)
    Y.data[:] = 1
    data = prepare_data(X, Y, fit_intercept=False, dtype=np.float32)
    A = rng.standard_normal((n, k)).astype(np.float32)
    H = rng.standard_normal((n_labels, k)).astype(np.float32)
    tracemalloc.start()
    try:
        got = terms.loss_terms(data, A, H, "logistic", rows=True, labels=True, value=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak, data, A, H, Y, got


def test_fully_observed_terms_hold_no_n_by_l_array():
    small, data, A, H, Y, got = _peak_of_terms(20_000)
    peak, large, *_ = _peak_of_terms(80_000)
    assert data.entries is None and large.entries is None  # labels never made dense whole
    # four times the rows: only the n x k result grows (4 x 60,000 x 8 bytes more), not
    # the batches; one n x L float32 array would be 128 MB
    assert peak < small + 60_000 * 8 * 4 + (1 << 20)
    assert peak < 80_000 * 400 * 4 / 4
    # the terms themselves, against the dense reference (the smaller data: batches of the
    # same size, the reference's dense n x L arrays a quarter of the larger's)
    Yd = Y.toarray()
    want = reference(Yd, None, A.astype(np.float64), H.astype(np.float64), "logistic")
    np.testing.assert_allclose(got.rows, want[0], rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(got.labels, want[1], rtol=2e-4, atol=2e-2)
    assert got.value == pytest.approx(want[2], rel=1e-5)


@pytest.mark.parametrize("loss", ["logistic", "sqhinge"])
def test_bound_solvers_give_the_same_bits_under_any_memory_limit(loss, monkeypatch):
    """The fully observed margin losses' bound steps take their n x L terms a batch of rows at
    a time; a memory limit below one n x L array but above a batch trains them to the same
    factors bit for bit, and a limit below one batch is refused in one line: batches shrunk
    to the memory free would add in another order and give other bits under the same key."""
    monkeypatch.setattr(terms, "ENTRIES_PER_BATCH", 9 * 7)  # 7 rows of 9 labels a batch
    rng = np.random.default_rng(5)
    X = sp.random(60, 12, density=0.4, format="csr", random_state=5)
    Y = sp.csr_matrix((rng.random((60, 9)) < 0.3).astype(float))
    params = dict(rank=1, loss=loss, outer_iterations=2, w_solver="bound", h_solver="bound",
                  random_state=0)
    monkeypatch.delenv(ENV_LIMIT, raising=False)
    free = LEML(**params).fit(X, Y)
    # 1,500 bytes: the 60 x 9 float32 decision values (2,160 bytes) do not fit, the four
    # 7 x 9 arrays of a batch (1,008 bytes) do
    monkeypatch.setenv(ENV_LIMIT, str(1500 / 2**30))
    limited = LEML(**params).fit(X, Y)
    assert limited.W_.tobytes() == free.W_.tobytes()
    assert limited.H_.tobytes() == free.H_.tobytes()
    monkeypatch.setenv(ENV_LIMIT, str(1200 / 2**30))  # the factors fit, a batch does not
    with pytest.raises(MemoryBudgetError, match="a batch of the loss terms"):
        LEML(**params).fit(X, Y)
