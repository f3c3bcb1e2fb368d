"""The training data LEML's W- and H-steps keep between them (tasks.leml._prepared): read and
prepared once for a run's steps, read-only, the same steps' results as data prepared afresh,
and dropped when the files, the preparation or the run change."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import scarce.tasks.leml as tasks_leml
from scarce.algorithms.leml import LEML
from scarce.tasks.leml import (
    alternate_H,
    alternate_W,
    initialise,
    release_training_data,
    task_params,
)
from scarce.tasks.store import Store


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    X = sp.random(40, 12, density=0.3, format="csr", dtype=np.float32, random_state=0)
    Y = sp.csr_matrix((rng.random((40, 6)) < 0.3).astype(np.float32))
    mask = sp.csr_matrix((rng.random((40, 6)) < 0.7).astype(np.float32))
    store = Store(tmp_path)
    for name, value in (("X", X), ("Y", Y), ("mask", mask)):
        store.write(f"data/{name}", value)
    paths = {name: str(store.path(f"data/{name}")) for name in ("X", "Y", "mask")}
    yield X, Y, mask, paths
    release_training_data()


def test_the_steps_share_one_prepared_data_set_until_it_is_released(files):
    X, Y, mask, paths = files
    train = {"X": paths["X"], "Y": paths["Y"]}
    model = LEML(rank=3, random_state=0)
    params = task_params(model, alternate_W)
    _, first = tasks_leml._estimator(params, train, None)
    _, again = tasks_leml._estimator(task_params(model, alternate_H), train, None)
    assert again is first
    assert not first.X.data.flags.writeable and not first.Y.indices.flags.writeable
    _, masked = tasks_leml._estimator(params, train, paths["mask"])  # other files: anew
    assert masked is not first and not masked.fully_observed
    _, float64 = tasks_leml._estimator({**params, "dtype": "float64"}, train, paths["mask"])
    assert float64 is not masked and float64.dtype == np.float64
    release_training_data()
    _, after = tasks_leml._estimator(params, train, None)
    assert after is not first


@pytest.mark.parametrize("loss", ["squared", "logistic"])
def test_steps_on_the_kept_data_give_the_estimators_half_steps(files, loss):
    """Two iterations of the steps (the second on the kept data) against the estimator's own
    half-steps on data it prepared itself: the same factors bit for bit."""
    X, Y, mask, paths = files
    model = LEML(rank=3, loss=loss, w_solver="bound", h_solver="bound", random_state=0)
    train = {"X": paths["X"], "Y": paths["Y"]}
    data = model.prepare(X, Y, mask)
    W, H = model.start(data)
    W_ref, H_ref = W, H
    for t in (1, 2):
        w = alternate_W.fn(train=train, mask=paths["mask"], W=W, H=H, iteration=t,
                           params=task_params(model, alternate_W), row_blocks=None)
        h = alternate_H.fn(train=train, mask=paths["mask"], W=w["W"], H=H, validation=None,
                           iteration=t, params=task_params(model, alternate_H))
        W, H = w["W"], h["H"]
        W_ref, _ = model.w_step(data, W_ref, H_ref)
        H_ref, _ = model.h_step(data, W_ref, H_ref)
        np.testing.assert_array_equal(W, W_ref)
        np.testing.assert_array_equal(H, H_ref)
        assert h["trace"]["objective"].iloc[0] == model.objective(data, W_ref, H_ref)


def test_a_step_written_behind_leaves_the_bytes_of_one_written_in_place(tmp_path):
    """LEML's loop writes the start's and the half-steps' checkpoints behind
    (``write_behind``): run through :func:`tasks.steps.execute` both ways, every entry and
    seal has the same bytes, the volatile timings aside (their seconds differ from run to
    run); every step of the module that writes behind is among those run."""
    from scarce.tasks.steps import Step, execute

    rng = np.random.default_rng(3)
    X = sp.random(30, 8, density=0.4, format="csr", dtype=np.float32, random_state=3)
    Y = sp.csr_matrix((rng.random((30, 5)) < 0.3).astype(np.float32))
    model = LEML(rank=2, random_state=0)
    behind = {v.name for v in vars(tasks_leml).values() if isinstance(v, Step) and v.write_behind}
    assert behind == {initialise.name, alternate_W.name, alternate_H.name}
    for how in ("behind", "in-place"):
        store = Store(tmp_path / how)
        for ref, value in (("d/t-X", X), ("d/t-Y", Y)):
            store.write(ref, value)
        train = {"X": "d/t-X", "Y": "d/t-Y"}
        start = execute(initialise, store, dict(
            train=train, mask=None, params=task_params(model, initialise), partition=None,
            row_blocks=None, cluster=None), write_behind=how == "behind")
        w = execute(alternate_W, store, dict(
            train=train, mask=None, W=start["W"], H=start["H"], iteration=1,
            params=task_params(model, alternate_W), row_blocks=None, cluster=None,
            partition=None), write_behind=how == "behind")
        execute(alternate_H, store, dict(
            train=train, mask=None, W=w["W"], H=start["H"], validation=None, iteration=1,
            params=task_params(model, alternate_H), row_blocks=None, cluster=None,
            partition=None, validation_partition=None), write_behind=how == "behind")
        store.flush()
        release_training_data()
    files = sorted(p.relative_to(tmp_path / "behind") for p in (tmp_path / "behind").rglob("*")
                   if p.is_file() and "timings" not in p.name)
    assert {p.parts[0] for p in files} >= behind
    assert any(p.name.endswith(".sha256.json") for p in files)
    assert len(files) == len([p for p in (tmp_path / "in-place").rglob("*")
                              if p.is_file() and "timings" not in p.name])
    for path in files:
        assert (tmp_path / "behind" / path).read_bytes() == \
            (tmp_path / "in-place" / path).read_bytes(), path
    # the timings: one row per half-step, where a W-step ran beside its numbers
    store = Store(tmp_path / "behind")
    for name, half, where in ((alternate_W.name, "W", ["scheduler", "workers"]),
                              (alternate_H.name, "H", [])):
        (ref,) = [f"{name}/{p.stem}"
                  for p in (tmp_path / "behind" / name).glob("*-timings.parquet")]
        timings = store.read(ref)
        assert list(timings.columns) == ["iteration", "half", "seconds", "cg_iter", *where]
        assert timings.loc[0, "iteration"] == 1 and timings.loc[0, "half"] == half
        assert timings["cg_iter"].dtype == np.int64 and timings.loc[0, "seconds"] > 0
        if where:
            assert timings.loc[0, "scheduler"] == "" and timings.loc[0, "workers"] == 0
