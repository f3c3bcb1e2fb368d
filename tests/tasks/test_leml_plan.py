"""The run's plan of where LEML's data lives (tasks.leml_plan.LemlPlan): for every backend the
config offers, the steps over the data run where the data lives, the half-steps take the
training refs or the row blocks in their place, the keys are those of the steps' own
arguments, and what the steps keep is released however the run ends."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from prefect.utilities.annotations import unmapped

import scarce.tasks.leml as tasks_leml
from scarce.algorithms.leml import LEML, row_block_bounds
from scarce.flows.leml import BACKENDS, ComputeConfig
from scarce.tasks.leml import alternate_W, task_params
from scarce.tasks.leml_dask import CLIENTS
from scarce.tasks.leml_plan import LemlPlan
from scarce.tasks.store import Store

ROWS = 10  # the rows of every stored X of the fake run

#: The steps that read the training or test rows themselves: where the data lives.
DATA_STEPS = {"leml-load", "leml-split", "leml-mask", "leml-early-split",
              "leml-early-split-mask", "leml-partition", "leml-partition-masked",
              "leml-propensity"}
#: The steps that drive the solvers: where compute.solvers says.
SOLVER_STEPS = {"leml-init", "leml-alternate-W", "leml-alternate-H", "leml-evaluate",
                "leml-predict"}


class Run:
    """A stand-in for the run (RunContext): records every step call, returns the refs the
    step would write (keyed by the call's own key)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.notes: dict = {}
        self.store = SimpleNamespace(shape=lambda ref: (ROWS, 3))
        self.record = SimpleNamespace(note=self.notes.__setitem__)

    def run(self, st, **kwargs):
        self.calls.append((st.name, kwargs))
        bound = st.signature.bind(**kwargs)
        bound.apply_defaults()
        return st.refs(st.key(dict(bound.arguments)))

    def map(self, st, **kwargs):
        n = next(len(v) for v in kwargs.values() if isinstance(v, list))
        return [self.run(st, **{k: v.value if isinstance(v, unmapped) else
                                v[i] if isinstance(v, list) else v
                                for k, v in kwargs.items()}) for i in range(n)]

    def read(self, ref):
        return pd.DataFrame({"scheduler": ["tcp://scheduler:8786"], "workers": [2]})


#: What ComputeConfig.cluster reads of the run: its --dask-address (none).
NO_ADDRESS = SimpleNamespace(options=SimpleNamespace(dask_address=None))


def _plan(run: Run, backend: str, blocks: int = 3) -> LemlPlan:
    compute = ComputeConfig(backend=backend, row_blocks=blocks)
    return LemlPlan(run, compute.backend, compute.row_blocks, compute.cluster(NO_ADDRESS))


def _train() -> dict:
    return {"train": {"X": "leml-load/a-X", "Y": "leml-load/a-Y"}, "mask": "leml-mask/m"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_step_runs_where_the_plan_says_for_each_backend(tmp_path, backend):
    (tmp_path / "train.txt").write_text("1 2 1\n0 0:1.0\n")  # keyed by its bytes
    run = Run()
    plan = _plan(run, backend)
    model = LEML(rank=2, loss="squared", random_state=0)
    plan.load(tmp_path / "train.txt", None, True, format="xmc", dtype="float32", n_labels=None,
              normalize="l2")
    train, validation = plan.hold_out({"X": "leml-load/a-X", "Y": "leml-load/a-Y"}, 0.2, 0)
    mask = plan.observe(train["Y"], 0.5, 0)
    placed = plan.place({"train": train, "mask": mask}, validation)
    factors = plan.initialise(model, placed)
    w = plan.w_step(placed, factors, 1, task_params(model, alternate_W))
    plan.h_step(placed, w["W"], factors["H"], 1, {})
    plan.propensity(placed, 0.55, 1.5)
    test = plan.test_set([{"X": "leml-load/t-X", "Y": "leml-load/t-Y"}], whole=False)
    plan.evaluate(model, test, factors, traces=[], timings=[], propensity="p", dataset="d",
                  method="m", batch_size=8)
    plan.predict(model, test, factors, labels="l", top_k=5, batch_size=8)

    cluster = ComputeConfig(backend=backend).cluster(NO_ADDRESS)
    assert {name for name, _ in run.calls} <= DATA_STEPS | SOLVER_STEPS
    for name, kwargs in run.calls:
        if name in DATA_STEPS:  # on the cluster only when the data lives there
            assert kwargs["cluster"] == (cluster if backend == "dask" else None), name
        else:
            assert kwargs["cluster"] == cluster, name
    half_steps = [kw for name, kw in run.calls
                  if name in ("leml-init", "leml-alternate-W", "leml-alternate-H")]
    partitions = [kw for name, kw in run.calls if name.startswith("leml-partition")]
    if backend == "local":  # the whole data: its refs, no row blocks anywhere
        assert not partitions
        assert all(kw["train"] == train and kw["mask"] == mask and kw["partition"] is None
                   for kw in half_steps)
        assert test.here is not None and test.blocks is None
    else:  # row blocks of the training, the validation and the test rows, in their place
        count = len(row_block_bounds(ROWS, 3))
        assert len(partitions) == 3 * count
        assert all(kw["train"] is None and kw["mask"] is None
                   and len(kw["partition"]) == count for kw in half_steps)
        assert {len(b) for b in placed.blocks} == {3}  # X, Y and the mask of each block
        assert placed.validation is None and len(placed.validation_blocks) == count
        assert test.here is None and len(test.blocks) == count
    assert half_steps[1]["row_blocks"] == (None if backend == "local" else count)


def test_a_half_step_through_the_plan_has_the_key_of_the_steps_own_call():
    """The plan names every argument (``partition=None`` on the whole data); the key is the
    one a call that leaves the defaults out gets."""
    run = Run()
    plan = _plan(run, "local")
    model = LEML(rank=2, random_state=0)
    data = _train()
    refs = plan.w_step(plan.place(data), {"W": "w", "H": "h"}, 1, task_params(model, alternate_W))
    bound = alternate_W.signature.bind(**data, W="w", H="h", iteration=1,
                                       params=task_params(model, alternate_W), row_blocks=None,
                                       cluster=None)
    bound.apply_defaults()
    assert refs == alternate_W.refs(alternate_W.key(dict(bound.arguments)))


def test_the_parts_of_a_folder_are_the_row_blocks_as_they_are():
    run = Run()
    plan = _plan(run, "dask")
    parts = [{"X": f"p{i}-X", "Y": f"p{i}-Y"} for i in range(2)]
    placed = plan.place({"train": None, "mask": None}, None, blocks=parts)
    assert placed.blocks == parts and placed.row_blocks == 2 and not run.calls


@pytest.mark.parametrize("raises", [False, True])
def test_leaving_the_plan_releases_what_the_steps_kept(tmp_path, raises):
    """The prepared training data and the Dask clients are released when the plan is left,
    however it is left; the data also when an alternation ends."""
    store = Store(tmp_path)
    X = sp.random(12, 4, density=0.5, format="csr", dtype=np.float32, random_state=0)
    Y = sp.csr_matrix(np.eye(12, 3, dtype=np.float32))
    for name, value in (("X", X), ("Y", Y)):
        store.write(f"data/{name}", value)
    train = {name: str(store.path(f"data/{name}")) for name in ("X", "Y")}
    params = task_params(LEML(rank=2), alternate_W)
    with _plan(Run(), "local") as plan, plan.fitting():
        tasks_leml._estimator(params, train, None)
        assert tasks_leml._PREPARED
    assert not tasks_leml._PREPARED  # the alternation is over
    closed = []  # a client of the run's own (as CLIENTS.own keeps one), closed with the plan
    CLIENTS._own[(1, "tcp://nowhere:8786")] = (None, SimpleNamespace(
        close=lambda: closed.append(True)))
    assert CLIENTS.opened == 1
    with pytest.raises(RuntimeError) if raises else _nothing(), _plan(Run(), "dask"):
        tasks_leml._estimator(params, train, None)
        if raises:
            raise RuntimeError("the run fails")
    assert not tasks_leml._PREPARED and CLIENTS.opened == 0 and closed == [True]


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
