"""The parameters each LEML task is keyed by (:func:`scarce.tasks.leml.task_params`) are those
the estimator's own step methods read (:meth:`scarce.algorithms.leml.LEML.step_params`), with the
estimator's values, for every task and over the losses, solvers and start settings that change
which parameters a step reads.  The score step's from a stored model
(:func:`~scarce.tasks.leml.model_task_params`): ``tests/flows/test_apply_needs.py``."""

from __future__ import annotations

import itertools

import pytest

from scarce.algorithms.leml import LEML
from scarce.tasks import leml as tasks_leml
from scarce.tasks.leml import CALLS, task_params

#: The tasks that read the estimator's parameters, by their step objects.
TASKS = [obj for obj in vars(tasks_leml).values() if getattr(obj, "name", None) in CALLS]
#: Settings that change what the steps read: the loss (squared or not), the solvers ("auto"
#: resolved by the loss), the squared-loss start, the intercept, the dtype.
GRID = [dict(loss=loss, w_solver=w, h_solver=h, squared_init_iter=start, fit_intercept=fit,
             dtype=dtype, random_state=7, rank=3)
        for loss, w, h, start, fit, dtype in itertools.product(
            ("squared", "logistic", "sqhinge"), ("auto", "bound"), ("auto", "cg"), ("auto", 0, 2),
            (True, False), ("float32", "float64"))]


def test_every_task_that_reads_the_estimators_parameters_is_found():
    assert sorted(t.name for t in TASKS) == sorted(CALLS)


@pytest.mark.parametrize("given", GRID, ids=str)
def test_each_tasks_parameters_are_what_the_estimators_step_methods_read(given):
    model = LEML(**given)
    own = model.get_params(deep=False)
    for task in TASKS:
        expected = {}
        for method in CALLS[task.name]:
            expected.update(model.step_params(method))
        got = task_params(model, task)
        assert got == expected, task.name
        # each value is the estimator's own, "auto" resolved
        assert all(own[k] in (v, "auto") for k, v in got.items()), task.name
