"""The memory guard: a dense array that would not fit is refused before it is allocated."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from scarce.algorithms.leml.baselines import BinaryRelevance
from scarce.algorithms.leml.model import LEML
from scarce.algorithms.memory import (
    ENV_LIMIT,
    HEADROOM,
    MemoryBudgetError,
    available_bytes,
    check_allocation,
    format_bytes,
)
from scarce.algorithms.relations.baselines import cosine_distance_condensed
from scarce.algorithms.relations.entropy import entropy_scores


def _problem(n=60, d=12, L=9, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=0.4, random_state=seed, format="csr", dtype=np.float64)
    Y = sp.csr_matrix((rng.random((n, L)) < 0.3).astype(np.float64))
    return X, Y


def test_limit_from_environment(monkeypatch):
    monkeypatch.setenv(ENV_LIMIT, "0.5")
    assert available_bytes() <= 0.5 * 2**30
    monkeypatch.setenv(ENV_LIMIT, "lots")
    with pytest.raises(ValueError, match=ENV_LIMIT):
        available_bytes()


def test_check_allocation_counts_bytes_and_names_the_option(monkeypatch):
    monkeypatch.setenv(ENV_LIMIT, str(1 / 1024))  # 1 MiB: 0.8 MiB usable
    assert check_allocation((100, 100), np.float64, what="w", advice="a") == 80_000
    # 1000 x 1000 float32 = 3.8 MiB: refused, message names size, room and advice
    with pytest.raises(MemoryBudgetError) as info:
        check_allocation((1000, 1000), np.float32, what="scores (n x L)",
                         advice="lower batch_size")
    msg = str(info.value)
    assert "1,000 x 1,000 float32" in msg and "3.8 MiB" in msg
    assert "1.0 MiB is available" in msg and msg.endswith("lower batch_size")
    # copies multiply the need: 300 x 300 float64 = 0.69 MiB fits once, not twice
    check_allocation((300, 300), np.float64, what="w", advice="a")
    with pytest.raises(MemoryBudgetError, match="x2 with temporaries"):
        check_allocation((300, 300), np.float64, what="w", advice="a", copies=2)
    assert format_bytes(3 * 2**30) == "3.0 GiB"


def test_no_limit_allows_ordinary_arrays(monkeypatch):
    monkeypatch.delenv(ENV_LIMIT, raising=False)
    check_allocation((1000, 1000), np.float64, what="w", advice="a")


def test_leml_decision_function_refused_but_batched_top_k_works(monkeypatch):
    X, Y = _problem()
    model = LEML(rank=3, outer_iterations=2, random_state=0).fit(X, Y)
    full = model.decision_function(X)
    # 60 x 9 float32 = 2,160 bytes: refused under a 2,000-byte cap; batched scoring works
    assert full.dtype == np.float32
    monkeypatch.setenv(ENV_LIMIT, str(2000 / 2**30))
    with pytest.raises(MemoryBudgetError, match="predict_top_k"):
        model.decision_function(X)
    top = model.predict_top_k(X, k=2, batch_size=8)
    np.testing.assert_array_equal(top[:, 0], full.argmax(axis=1))


def test_leml_logistic_fully_observed_refused_before_training(monkeypatch):
    X, Y = _problem()
    # rank 1: the factors (936 bytes with their working copies) fit under 1,500 bytes, the
    # 60 x 9 float32 decision values of the logistic loss (2,160 bytes) do not
    monkeypatch.setenv(ENV_LIMIT, str(1500 / 2**30))
    with pytest.raises(MemoryBudgetError, match="use loss 'squared'"):
        LEML(rank=1, loss="logistic", outer_iterations=1, random_state=0).fit(X, Y)
    LEML(rank=1, loss="squared", outer_iterations=1, random_state=0).fit(X, Y)  # never forms n x L


def test_binary_relevance_ridge_refused(monkeypatch):
    X, Y = _problem()
    monkeypatch.setenv(ENV_LIMIT, str(1000 / 2**30))
    with pytest.raises(MemoryBudgetError, match="Binary Relevance ridge"):
        BinaryRelevance(model="ridge").fit(X, Y)


def test_relations_real_valued_ranking_refused_subsample_allowed(monkeypatch):
    X, _ = _problem(n=200, d=15)
    # N x N float64 x3 for N=200: 0.92 MiB; a 0.5 MiB cap refuses it
    monkeypatch.setenv(ENV_LIMIT, str(0.5 / 1024))
    with pytest.raises(MemoryBudgetError, match="entropy_samples"):
        entropy_scores(X, binary=False)
    scores = entropy_scores(X, binary=False, n_samples=50, random_state=0)
    assert scores.shape == (15,) and np.all(np.isfinite(scores))
    # complete link: 600 points -> 179,700 float64 distances x2 = 2.7 MiB
    with pytest.raises(MemoryBudgetError, match="baselines: false"):
        cosine_distance_condensed(sp.vstack([X] * 3).tocsr())


def test_leml_factors_that_cannot_fit_are_refused_before_any_allocation(monkeypatch, caplog):
    from scarce.algorithms.leml.model import check_factors

    X, Y = _problem()
    model = LEML(rank=10**6, outer_iterations=1, random_state=0)
    data = model.prepare(X, Y)
    monkeypatch.setenv(ENV_LIMIT, "0.5")  # 0.5 GiB: the factors and their copies need 0.9 GiB
    with pytest.raises(MemoryBudgetError, match="LEML factors at rank 1,000,000.*lower the rank"):
        model.start(data)
    monkeypatch.delenv(ENV_LIMIT)
    small = LEML(rank=3, random_state=0)
    check_factors(data, 3)  # fits: no error, no warning
    assert not [r for r in caplog.records if "exceeds" in r.getMessage()]
    with caplog.at_level("WARNING"):
        check_factors(data, data.n_labels + 5)
    assert any("exceeds min(features + intercept, labels)" in r.getMessage()
               for r in caplog.records)
    assert small.start(data)[0].shape == (data.n_features, 3)


@pytest.mark.parametrize("value", ["-5", "0", "-0", "nan", "inf", "-inf", "1e999"])
def test_a_limit_that_is_not_a_positive_finite_number_is_refused(monkeypatch, value):
    monkeypatch.setenv(ENV_LIMIT, value)
    with pytest.raises(ValueError, match=f"{ENV_LIMIT} must be a positive, finite number of "
                                         f"GiB, got '{value}'"):
        available_bytes()
    with pytest.raises(ValueError, match=ENV_LIMIT):  # before any array is sized against it
        check_allocation((2, 2), np.float64, what="w", advice="a")


def _limits(monkeypatch, limits: dict[str, int], status: dict[str, float]) -> None:
    """The process limits ``limits`` (others unlimited) and ``/proc/self/status`` sizes."""
    import resource

    import scarce.algorithms.memory as memory

    names = {getattr(resource, name): name for name in ("RLIMIT_AS", "RLIMIT_DATA")}

    def getrlimit(which):
        soft = limits.get(names.get(which), resource.RLIM_INFINITY)
        return soft, resource.RLIM_INFINITY

    monkeypatch.setattr(memory.resource, "getrlimit", getrlimit)
    monkeypatch.setattr(memory, "_proc_status", lambda: dict(status))
    monkeypatch.delenv(ENV_LIMIT, raising=False)


@pytest.mark.parametrize("limit, used, room", [
    ("RLIMIT_AS", "VmSize", 2**30),      # ulimit -v: the address space
    ("RLIMIT_DATA", "VmData", 2**30),    # ulimit -d: the data segment
    ("RLIMIT_AS", "VmSize", 0),          # the process already holds all of it
])
def test_a_process_limit_bounds_the_room_by_what_the_process_already_uses(monkeypatch, limit,
                                                                         used, room):
    held = 3 * 2**30
    _limits(monkeypatch, {limit: held + room}, {"VmSize": held, "VmData": held})
    assert available_bytes() == room
    with pytest.raises(MemoryBudgetError, match="is available"):
        check_allocation((room // 8 + 2**20,), np.float64, what="w", advice="a")


def test_the_tighter_of_two_process_limits_counts_and_no_limit_changes_nothing(monkeypatch):
    _limits(monkeypatch, {}, {"VmSize": 2**40, "VmData": 2**40})
    unlimited = available_bytes()
    assert unlimited > 2**20  # the machine's own memory, whatever the sizes say
    _limits(monkeypatch, {"RLIMIT_AS": 5 * 2**30, "RLIMIT_DATA": 3 * 2**30},
            {"VmSize": 4 * 2**30, "VmData": 2**30})
    assert available_bytes() == min(unlimited, 2**30)  # 1 GiB left of the address space
    _limits(monkeypatch, {"RLIMIT_AS": 5 * 2**30}, {})  # no /proc: the limit alone
    assert available_bytes() == min(unlimited, 5 * 2**30)


GUARD_UNDER_ULIMIT = r"""
import resource, sys
import numpy as np
from scarce.algorithms.memory import (
    MemoryBudgetError, _proc_status, available_bytes, check_allocation)
soft, _ = resource.getrlimit(resource.RLIMIT_AS)
room = available_bytes()
assert 0 < room <= soft - _proc_status()["VmSize"] + 2**20, (room, soft)
try:  # 3 GiB: more than the limit leaves, less than the machine has (checked by the caller)
    check_allocation((3 * 2**27,), np.float64, what="probe", advice="lower it")
except MemoryBudgetError as exc:
    print("refused:", exc)
else:
    sys.exit("the guard let an allocation past the address-space limit")
try:
    np.ones(3 * 2**27)
except MemoryError:
    print("numpy: MemoryError")
"""


@pytest.mark.slow  # starts a Python process
def test_the_guard_refuses_what_a_real_address_space_limit_would_not_allow(tmp_path):
    """``ulimit -v`` in a real process: the guard refuses an array that the limit forbids (numpy
    itself then fails to allocate it) though the machine has the memory."""
    import os
    import resource
    import subprocess
    import sys
    from pathlib import Path

    if HEADROOM * available_bytes() < 3 * 2**30:
        pytest.skip("the machine itself has not the room for 3 GiB")
    limit = 2**30  # far above what python and numpy reserve, far below the array

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    env.pop(ENV_LIMIT, None)
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", GUARD_UNDER_ULIMIT], preexec_fn=cap, env=env,
                          cwd=repo, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: probe: a dense 402,653,184 float64 array needs 3.0 GiB" in done.stdout
    assert "numpy: MemoryError" in done.stdout
