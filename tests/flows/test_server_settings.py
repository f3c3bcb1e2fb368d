"""Every Prefect server scarce starts gets the settings of
:data:`scarce.flows.server_process.SERVER_DEFAULTS` where its environment does not set them,
and a value set there wins: read back from the started process's own environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from scarce.flows.server_process import SERVER_DEFAULTS, launch_server

PRINT_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


def _environment(**kwargs) -> dict[str, str]:
    proc = launch_server([sys.executable, "-c", PRINT_ENV], stdout=subprocess.PIPE, **kwargs)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    return json.loads(out)


def test_the_defaults_fill_what_the_environment_leaves_unset(monkeypatch):
    for name in SERVER_DEFAULTS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SCARCE_TEST_MARK", "kept")
    got = _environment()  # this process's environment
    assert {name: got.get(name) for name in SERVER_DEFAULTS} == SERVER_DEFAULTS
    assert got["SCARCE_TEST_MARK"] == "kept"


def test_a_value_the_environment_sets_wins():
    name, *others = sorted(SERVER_DEFAULTS)
    env = {**os.environ, name: "7"}
    for other in others:
        env.pop(other, None)
    got = _environment(env=env)
    assert got[name] == "7"
    assert {o: got.get(o) for o in others} == {o: SERVER_DEFAULTS[o] for o in others}


def test_the_defaults_are_settings_the_installed_prefect_reads():
    """Each name is a field of Prefect's settings, and the value is valid for it (a renamed
    setting would be ignored without a word); the flush interval whole seconds, at least one
    (the recorder truncates it, and at 0 it polls without pause)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")},
           **SERVER_DEFAULTS}
    code = ("from prefect.settings import Settings\n"
            "s = Settings().server.services.task_run_recorder\n"
            "print(s.batch_size, s.read_batch_size, s.flush_interval)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout.split()
    assert [float(v) for v in out] == [
        float(SERVER_DEFAULTS[f"PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_{k}"])
        for k in ("BATCH_SIZE", "READ_BATCH_SIZE", "FLUSH_INTERVAL")]
    interval = float(SERVER_DEFAULTS["PREFECT_SERVER_SERVICES_TASK_RUN_RECORDER_FLUSH_INTERVAL"])
    assert interval >= 1 and interval.is_integer()
