"""A step bound as a Prefect task: the refreshed task made once, its policy reading no entry,
and a finished task run's refs read from its state as ``State.result()`` gives them."""

from __future__ import annotations

import logging

import pytest
from prefect.results import ResultRecord, ResultRecordMetadata, ResultStore
from prefect.serializers import JSONSerializer
from prefect.states import Completed, Failed

from scarce.flows.runtime import RunContext, RunOptions, state_result
from scarce.tasks.step_tasks import bind
from scarce.tasks.steps import execute
from scarce.tasks.store import Store
from tests.flows import sample_flow as sample
from tests.flows.helpers import digits_project


@pytest.fixture
def stored(tmp_path):
    """The store of a project where ``digits-load`` ran as its task does (its entries, seal
    and Prefect's cache record), then one entry cut short; the store, the call, its refs."""
    from prefect.filesystems import LocalFileSystem

    project = digits_project(tmp_path / "project", n_samples=30, k=2)
    store = Store(tmp_path / "cache")
    call = {"path": str(project / "digits.csv"), "n_samples": 30, "seed": 0}
    refs = execute(sample.load, store, call, write_behind=False)
    ResultStore(result_storage=LocalFileSystem(basepath=str(store.prefect_dir)),
                serializer=JSONSerializer()).write(refs, key=sample.load.key(call))
    raw = store.path(refs["X"]).read_bytes()
    store.path(refs["X"]).write_bytes(raw[: len(raw) // 2])
    return store, call, refs


def test_the_refreshed_task_is_made_once_and_its_policy_reads_no_entry(stored, caplog):
    """``--refresh`` binds each step once more, as a task that ignores the cache; its key is
    the step's, and it neither reads the entries it will replace nor drops their record (the
    task rewrites both); the cached task's policy finds the damage, names it and drops the
    record, as before."""
    store, call, refs = stored
    key = sample.load.key(call)
    record = store.prefect_dir / key
    refreshed = bind(sample.load, store, refresh=True)
    cached = bind(sample.load, store)
    assert refreshed is bind(sample.load, store, refresh=True) and refreshed is not cached
    assert refreshed.refresh_cache is True and not cached.refresh_cache
    with caplog.at_level(logging.WARNING):
        assert refreshed.cache_policy.compute_key(None, call, {}) == key
    assert record.is_file() and "damaged" not in caplog.text
    with caplog.at_level(logging.WARNING):
        assert cached.cache_policy.compute_key(None, call, {}) == key
    assert not record.exists() and f"store entry {refs['X']} is damaged" in caplog.text


@pytest.mark.parametrize("refresh", [False, True])
def test_a_run_calls_the_task_its_refresh_option_binds(tmp_path, refresh):
    """A run's steps go through the task of its ``refresh`` option, the same task at every
    call."""
    store = Store(tmp_path / "cache")
    ctx = RunContext("digits", sample.DigitsConfig(data="digits.csv"), store,
                     tmp_path / "runs" / "r", "r", RunOptions(refresh=refresh))
    assert ctx._task(sample.load) is ctx._task(sample.load)
    assert ctx._task(sample.load) is bind(sample.load, store, refresh=refresh)


def _record(value) -> ResultRecord:
    return ResultRecord(result=value, metadata=ResultRecordMetadata(
        serializer=JSONSerializer(), storage_key="k"))


@pytest.mark.parametrize("name", ["Completed", "Cached"])
def test_a_finished_task_runs_refs_are_what_state_result_gives(name):
    refs = {"X": "digits-load/abc-X", "y": "digits-load/abc-y"}
    state = Completed(name=name, data=_record(refs))
    assert state_result(state) == state.result() == refs


def test_a_failed_task_run_raises_its_error_as_state_result_does():
    state = Failed(data=ValueError("no 'label' column"))
    for get in (state_result, lambda s: s.result()):
        with pytest.raises(ValueError, match="no 'label' column"):
            get(state)
