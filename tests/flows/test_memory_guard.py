"""``scarce run`` stops with one clear line when a dense array would not fit in memory."""

from __future__ import annotations

import contextlib
import io

import pytest

from flows.cli import main
from tests.flows.test_bad_inputs import Case, make_project

pytestmark = pytest.mark.usefixtures("prefect_server")


def test_leml_logistic_over_the_memory_limit_exits_2_naming_the_option(
        tmp_path, monkeypatch):
    # the tiny project's training labels are 6 x 3 float32 = 72 bytes; cap at 64 bytes
    args = make_project(tmp_path, Case("", "leml", ""))
    monkeypatch.setenv("SCARCE_ROOT", str(tmp_path))
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    monkeypatch.setenv("SCARCE_MEMORY_LIMIT_GB", str(64 / 2**30))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([*args, "--set", "model.loss=logistic"])
    text = err.getvalue()
    lines = [line for line in text.splitlines() if line.startswith("error:")]
    assert code == 2, text[-2000:]
    assert len(lines) == 1, text[-2000:]
    assert "6 x 3 float32" in lines[0] and "use loss 'squared'" in lines[0]
    assert "Traceback" not in text
    # the run did not finish: no manifest
    assert not list((tmp_path / "data" / "runs").glob("*/manifest.json"))
