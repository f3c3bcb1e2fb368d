"""A step's declaration says each fact once: a volatile part is named in ``volatile`` only, and
``where``'s parameter is a runtime parameter without being named in ``runtime``."""

from __future__ import annotations

import contextlib
import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from scarce.tasks.steps import execute, step
from scarce.tasks.store import Store
from scarce.tasks.store.seals import seal_path


def _here(cluster):
    """An opener that always runs the step in this process."""
    return contextlib.nullcontext(None)


def _timed(a: int, cluster: dict | None = None) -> dict:
    return {"value": np.arange(a), "timings": pd.DataFrame({"seconds": [0.5]})}


def test_volatile_parts_follow_the_outputs_and_are_left_out_of_the_seal(tmp_path):
    st = step("t-timed", outputs=("value",), volatile=("timings",))(_timed)
    assert st.outputs == ("value", "timings")
    store = Store(tmp_path)
    refs = execute(st, store, {"a": 3, "cluster": None})
    assert set(refs) == {"value", "timings"}
    assert store.read(refs["value"]).tolist() == [0, 1, 2]
    seal = seal_path(store, st.key({"a": 3, "cluster": None}))
    value = hashlib.sha256(store.path(refs["value"]).read_bytes()).hexdigest()
    assert json.loads(seal.read_bytes()) == {refs["value"]: value}


def test_wheres_parameter_is_runtime_and_left_out_of_the_key():
    st = step("t-where", outputs=("value",), volatile=("timings",),
              where=("cluster", _here))(_timed)
    assert st.runtime == ("cluster",)
    assert st.key({"a": 1, "cluster": None}) == st.key({"a": 1, "cluster": {"scheduler": "x"}})
    assert st.key({"a": 1, "cluster": None}) != st.key({"a": 2, "cluster": None})
    both = step("t-where", runtime=("a",), where=("cluster", _here))(_timed)
    assert set(both.runtime) == {"a", "cluster"}


@pytest.mark.parametrize("declaration, message", [
    (dict(outputs=("value", "timings"), volatile=("timings",)), "named in volatile only"),
    (dict(volatile=("timings",)), "give its other parts as outputs"),
    (dict(runtime=("cluster",), where=("cluster", _here)), "leave it out of runtime"),
])
def test_a_fact_said_twice_is_refused_with_what_to_remove(declaration, message):
    with pytest.raises(TypeError, match=message):
        step("t-twice", **declaration)(_timed)


def test_the_steps_of_one_module_share_its_code_digest_walked_once(monkeypatch):
    from scarce.tasks import steps
    from scarce.tasks.code_digest import code_digest

    calls = []
    monkeypatch.setattr(steps, "code_digest", lambda m: calls.append(m) or code_digest(m))
    monkeypatch.setattr(steps, "_MODULE_DIGESTS", {})

    def one(a: int) -> dict:
        return {"value": a}

    def two(a: int) -> dict:
        return {"value": a}

    for fn in (one, two):
        fn.__module__ = "scarce.tasks.strip.pairs"  # (a module of the project's that has steps)
    first, second = (step(f"t-{f.__name__}", outputs=("value",))(f) for f in (one, two))
    assert calls == ["scarce.tasks.strip.pairs"]
    assert first.code_hash == second.code_hash == code_digest("scarce.tasks.strip.pairs")
