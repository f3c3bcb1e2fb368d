"""Deployments against a real Prefect server: schedules, a served run, parameter checks.

One ``prefect server start`` subprocess on a free loopback port (analytics off, a
temporary PREFECT_HOME) serves the whole module; it is not the in-process
``prefect_server`` harness, because ``scarce serve`` runs in its own process and
the server's scheduler has to create the scheduled runs.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest
import yaml

from scarce.flows.cli import main
from scarce.flows.config import load_config
from scarce.flows.deploy import load_deployments, next_times, register
from scarce.flows.manifest import compare_outputs
from scarce.tasks.errors import InputError
from scarce.tasks.store import Store
from tests.flows.helpers import manifest, runs

pytestmark = pytest.mark.slow  # starts `prefect server start` for the module

REPO = Path(__file__).resolve().parents[2]
BIBTEX = REPO / "data" / "xmc" / "bibtex"
STARTUP_SECONDS = 150

TINY = """
seed: 0
name: tiny
dataset:
  name: bibtex-tiny
  train: train.txt
  test: test.txt
model:
  rank: 4
  lam: 4.0
  outer_iterations: 2
  cg_max_iter: 5
baselines: []
"""

# Served by `scarce serve` below and run on demand.  The schedules are registered but not
# active: one that came due while a test ran (the */15 one did, at a quarter hour) started one
# more run than the test counts.  Active schedules are tested on the repository's deployments.
TINY_DEPLOYMENTS = """
deployments:
  tiny:
    flow: leml
    config: configs/leml.yaml
    parameters: {model.rank: 5, model.cg_max_iter: 4}
    schedule: {cron: "15 6 1 * *", timezone: America/New_York, active: false}
    tags: [test]
    description: tiny LEML
  tiny-dask:
    flow: leml
    config: configs/leml.yaml
    parameters: {model.rank: 5, model.cg_max_iter: 4}
    tags: [test]
    description: tiny LEML on a local Dask cluster
    runner: dask
  tiny-inbox:
    flow: apply-leml
    config: configs/apply-leml.yaml
    parameters: {model_run: "latest:tiny", input: inbox, output: outbox, force: true,
                 allow_empty: true}
    schedule: {cron: "*/15 * * * *", timezone: Europe/Berlin, active: false}
    tags: [test]
    description: the latest tiny LEML model on every new file of inbox/
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "SCARCE_"))}
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", **extra)
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    return env


def _stop(proc: subprocess.Popen, sig: int = signal.SIGINT, seconds: float = 180) -> None:
    """Signal and wait for the exit, with a generous cap: on an unloaded machine `scarce serve`
    exits 0.7 s after the signal (pausing takes 0.3 s), but at load 15 to 20 the interpreter's
    own teardown alone took several times that (30 s was once not enough)."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(seconds)
        except subprocess.TimeoutExpired:
            import psutil

            # What held it, for the failure's output; its descendants are not left behind.
            left = psutil.Process(proc.pid).children(recursive=True)

            def described(child) -> str:
                try:
                    return f"{child.pid} {' '.join(child.cmdline())[:200]}"
                except psutil.Error:
                    return f"{child.pid} (gone)"

            print(f"still running {seconds} s after signal {sig}: pid {proc.pid}, with "
                  + "; ".join(map(described, left)), file=sys.stderr)
            proc.kill()
            proc.wait(10)
            for child in left:
                try:
                    child.kill()
                except psutil.Error:
                    pass


@pytest.fixture(scope="module", autouse=True)
def server_process(tmp_path_factory, seeded_prefect_home):
    """``prefect server start`` in a subprocess, launched first so it boots during the
    tests that need no server; yields (process, API URL, log file)."""
    home = seeded_prefect_home(tmp_path_factory.mktemp("prefect-home"))
    port = _free_port()
    env = _clean_env(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_UI_ENABLED="false",
        PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS="1",
        PREFECT_SERVER_SERVICES_SCHEDULER_RECENT_DEPLOYMENTS_LOOP_SECONDS="1",
        # A nightly schedule would get 100 runs (100 days ahead): keep the inserts few.
        PREFECT_SERVER_SERVICES_SCHEDULER_MAX_RUNS="2",
        PREFECT_SERVER_SERVICES_SCHEDULER_MAX_SCHEDULED_TIME="P9D",
        PREFECT_SERVER_SERVICES_SCHEDULER_MIN_RUNS="1",
        PREFECT_SERVER_LOGGING_LEVEL="WARNING",
    )
    log = home / "server.log"
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
           "--port", str(port), "--analytics-off"]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc, f"http://127.0.0.1:{port}/api", log
    finally:
        _stop(proc, signal.SIGTERM)


@pytest.fixture(scope="module")
def server(server_process):
    """The server's API URL once it is healthy, set as PREFECT_API_URL for the module."""
    from prefect.logging.handlers import APILogHandler
    from prefect.settings import PREFECT_API_URL, temporary_settings

    proc, url, log = server_process
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        if proc.poll() is not None:
            pytest.fail(f"prefect server exited ({proc.returncode}):\n{log.read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"prefect server not healthy after {STARTUP_SECONDS} s")
        time.sleep(0.5)
    with temporary_settings({PREFECT_API_URL: url}):
        yield url
        APILogHandler().flush()  # send this process's run logs while the server is up


@pytest.fixture(scope="module")
def project(make_project):
    """A project with 300 training and 150 test rows of Bibtex and the tiny deployment."""
    root = make_project("deploy-project", {
        "leml.yaml": TINY, "apply-leml.yaml": "model_run: latest\ninput: test.txt\n",
        "deployments.yaml": TINY_DEPLOYMENTS})
    for name, rows in (("train", 300), ("test", 150)):
        with gzip.open(BIBTEX / f"bibtex_xmlrepo_{name}.txt.gz", "rt") as fh:
            lines = fh.read().splitlines()
        _, d, labels = lines[0].split()
        (root / f"{name}.txt").write_text("\n".join([f"{rows} {d} {labels}", *lines[1 : rows + 1]]))
    (root / "inbox").mkdir()
    return root


@pytest.fixture(scope="module")
def serving(server, project, tmp_path_factory):
    """``scarce serve`` of both tiny deployments in a subprocess of the temporary project."""
    home = tmp_path_factory.mktemp("serve-home")
    env = _clean_env(
        PREFECT_API_URL=server,
        PREFECT_HOME=str(home),
        PREFECT_RUNNER_POLL_FREQUENCY="1",
        SCARCE_ROOT=str(project),
    )
    log = home / "serve.log"
    cmd = [sys.executable, "-m", "scarce.flows.cli", "serve", "--only", "tiny", "--only",
           "tiny-dask", "--only", "tiny-inbox"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=project, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc, log
    finally:
        _stop(proc)


def _client():
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


def _wait_for(predicate, seconds: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + seconds
    while True:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: the serving process exited with {proc.returncode}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {seconds} s")
        time.sleep(0.5)


def _deployment(client, name):
    from prefect.exceptions import ObjectNotFound

    try:
        return client.read_deployment_by_name(name)
    except ObjectNotFound:
        return None


def _scheduled_runs(client, deployment_id):
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterId,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.client.schemas.sorting import FlowRunSort

    return client.read_flow_runs(
        deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id])),
        flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType.SCHEDULED]))
        ),
        sort=FlowRunSort.EXPECTED_START_TIME_ASC,
    )


# -- the deployments file ------------------------------------------------------------
@pytest.mark.parametrize(
    "text, key, words",
    [
        ("deployments:\n  a:\n    flow: lemml\n", "deployments.a.flow", "unknown flow"),
        ("deployments:\n  a:\n    flow: leml\n    crn: x\n", "deployments.a.crn", "unknown key"),
        (
            "deployments:\n  a:\n    flow: leml\n    schedule: {cron: '0 2 * *', timezone: UTC}\n",
            "deployments.a.schedule.cron",
            "cron",
        ),
        (
            "deployments:\n  a:\n    flow: leml\n"
            "    schedule: {cron: '0 2 * * *', timezone: Mars/Base}\n",
            "deployments.a.schedule.timezone",
            "Invalid timezone",
        ),
        (
            "deployments:\n  a:\n    flow: leml\n    parameters: {model.rnak: 3}\n",
            "deployments.a.parameters.model.rnak",
            "unknown key",
        ),
        (
            "deployments:\n  a:\n    flow: leml\n    parameters: {model.rank: -1}\n",
            "deployments.a.parameters.model.rank",
            "greater than or equal to 1",
        ),
    ],
)
def test_bad_deployments_file_names_file_and_key(tmp_path, monkeypatch, text, key, words):
    monkeypatch.setenv("SCARCE_ROOT", str(REPO))
    path = tmp_path / "deployments.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_deployments(path)
    assert err.value.path == str(path) and err.value.key == key
    assert words in str(err.value)


# -- against the server ------------------------------------------------------------------
def test_repository_deployments_register_with_schedules_tags_and_typed_parameters(
    server, serving, monkeypatch, capsys
):
    # (`serving` only starts `scarce serve` early: its start-up overlaps this test.)
    monkeypatch.setenv("SCARCE_ROOT", str(REPO))
    path = REPO / "configs" / "deployments.yaml"
    declared = yaml.safe_load(path.read_text())["deployments"]
    assert {d["flow"] for d in declared.values()} == {"leml", "relations", "strip", "apply-leml"}

    assert main(["deploy", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert server in out

    with _client() as client:
        for name, spec in declared.items():
            remote = client.read_deployment_by_name(f"{spec['flow']}/{name}")
            (sched,) = remote.schedules
            assert sched.active and not remote.paused
            assert (sched.schedule.cron, sched.schedule.timezone) == (
                spec["schedule"]["cron"],
                spec["schedule"]["timezone"],
            )
            assert set(spec["tags"]) | {f"flow:{spec['flow']}"} <= set(remote.tags)
            if spec["flow"].startswith("apply-"):  # tagged with the run whose model it applies
                assert f"model-run:{spec['parameters']['model_run']}" in remote.tags
            else:
                assert any(t.startswith("dataset:") for t in remote.tags)
                assert any(t.startswith("method:") for t in remote.tags)
            assert remote.enforce_parameter_schema
            from scarce.flows.registry import FLOWS

            assert remote.entrypoint == FLOWS[spec["flow"]].target.replace(":", ".")
            # The defaults are the validated config file after the deployment's overrides;
            # the schema types every option.
            model = FLOWS[spec["flow"]].load_model()
            expected = load_config(REPO / spec["config"], model, [
                f"{k}={v}" for k, v in (spec.get("parameters") or {}).items()])
            assert remote.parameters["config"] == expected.model_dump(mode="json")
            schema = remote.parameter_openapi_schema
            assert schema["required"] == ["config"]
            config_def = schema["definitions"][model.__name__]
            assert set(config_def["properties"]) == set(model.model_fields)
            assert config_def["properties"]["seed"] == {
                "default": 0,
                "description": model.model_fields["seed"].description,
                "minimum": 0,
                "maximum": 2**32 - 1,
                "title": "Seed",
                "type": "integer",
            }
            assert "RunOptions" in schema["definitions"]
            # `scarce deploy` printed the next time, and the server's scheduler agrees.
            first = next_times(_spec_schedule(spec))[0]
            assert first.isoformat() in out
            scheduled = _wait_for(
                lambda rid=remote.id: _scheduled_runs(client, rid), 60, f"runs of {name}"
            )
            assert scheduled[0].expected_start_time.timestamp() == first.timestamp()
            assert set(remote.tags) <= set(scheduled[0].tags)

        leml = client.read_deployment_by_name("leml/leml-bibtex-nightly")
        model_def = leml.parameter_openapi_schema["definitions"]["ModelConfig"]["properties"]
        assert model_def["rank"]["type"] == "integer" and model_def["rank"]["minimum"] == 1
        assert model_def["loss"]["enum"] == ["squared", "logistic", "sqhinge"]
        assert {"flow:leml", "dataset:bibtex", "method:leml-squared"} <= set(leml.tags)


def _spec_schedule(spec):
    from scarce.flows.deploy import ScheduleSpec

    return ScheduleSpec(**spec["schedule"])


def test_invalid_parameter_is_rejected_by_the_server_before_a_run(server, project, monkeypatch):
    from prefect.deployments import run_deployment
    from prefect.exceptions import PrefectHTTPStatusError

    monkeypatch.setenv("SCARCE_ROOT", str(project))
    dep, dask_dep, _ = load_deployments(project / "configs" / "deployments.yaml")
    assert (dep.name, dep.runner, dask_dep.name, dask_dep.runner) == (
        "tiny", "local", "tiny-dask", "dask")
    (dep_id,) = register([dep]).values()
    before = runs(project)
    with _client() as client:
        params = client.read_deployment(dep_id).parameters
        assert params["config"]["model"]["rank"] == 5  # the override in the YAML
        params["config"]["model"]["rank"] = -1
        with pytest.raises(PrefectHTTPStatusError) as err:
            run_deployment("leml/tiny", parameters=params, timeout=0)
        assert err.value.response.status_code == 409
        assert "-1 is less than the minimum of 1" in err.value.response.text
        params["config"]["model"]["rank"] = 5
        params["config"]["model"]["optimiser"] = "adam"
        with pytest.raises(PrefectHTTPStatusError) as err:
            run_deployment("leml/tiny", parameters=params, timeout=0)
        assert "optimiser" in err.value.response.text

        from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

        made = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[dep_id]))
        )
    bad = [r for r in made if r.parameters.get("config", {}).get("model", {}).get("rank") == -1]
    assert bad == [] and all(r.state_type.value == "SCHEDULED" for r in made)
    assert runs(project) == before


def test_partial_override_changes_one_value_and_keeps_the_deployments_others(
    server, project, serving, monkeypatch
):
    """A run of ``{"config": {"model": {"rank": 50}}}`` (the UI form or the API with one value
    changed): Prefect merges a run's parameters with the deployment's at the top level only, so
    the flow completes the partial config from the deployment's; the server still rejects what
    the schema can tell is wrong, and the config's own checks run when the run starts."""
    from prefect.client.schemas.objects import StateType
    from prefect.deployments import run_deployment
    from prefect.exceptions import PrefectHTTPStatusError

    from scarce.flows.leml import ModelConfig

    FINAL = (StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED)
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    proc, log = serving
    before = set(runs(project))
    with _client() as client:
        tiny = _wait_for(lambda: _deployment(client, "leml/tiny"), 120, "leml/tiny", proc)
        def finished(flow_run_id):
            fr = client.read_flow_run(flow_run_id)
            return fr if fr.state_type in FINAL else None

        def run_to_the_end(parameters):
            flow_run = run_deployment("leml/tiny", parameters=parameters, timeout=0)
            try:
                return _wait_for(lambda: finished(flow_run.id), 240, "the partial run", proc)
            except BaseException:
                print(log.read_text()[-5000:], file=sys.stderr)
                raise

        fr = run_to_the_end({"config": {"model": {"rank": 50}}})
        assert fr.state_type == StateType.COMPLETED, log.read_text()[-3000:]
        assert fr.name.startswith("leml-bibtex-tiny-k50-seed0 (deployment leml/tiny, leml-")
        assert fr.parameters["config"] == {"model": {"rank": 50}}  # what was sent

        # The form still shows every option with its default; only `required` is gone from the
        # nested sections, so that a partial section passes the server's check.
        schema = tiny.parameter_openapi_schema
        assert schema["required"] == ["config"]
        assert not [name for name, d in schema["definitions"].items() if d.get("required")]
        rank = schema["definitions"]["ModelConfig"]["properties"]["rank"]
        assert rank["default"] == ModelConfig.model_fields["rank"].default
        assert set(schema["definitions"]["DatasetConfig"]["properties"]) >= {"train", "test"}
        assert tiny.parameters["config"]["dataset"]["train"] == "train.txt"

        # What the schema can tell is wrong is still refused before a run exists.
        for partial, words in [
            ({"model": {"rank": -1}}, "-1 is less than the minimum of 1"),
            ({"model": {"optimiser": "adam"}}, "optimiser"),
            ({"dataset": {"format": "csv"}}, "csv"),
            ({"model": {"rank": "fifty"}}, "fifty"),
        ]:
            with pytest.raises(PrefectHTTPStatusError) as err:
                run_deployment("leml/tiny", parameters={"config": partial}, timeout=0)
            assert err.value.response.status_code == 409 and words in err.value.response.text
        # What only the whole config can tell fails when the run starts, saying why.
        bad = run_to_the_end({"config": {"observed_fraction": 0.5, "baselines": ["closed-form"]}})
        assert bad.state_type == StateType.FAILED
        assert "closed-form needs observed_fraction = 1" in client.read_flow_run(
            bad.id).state.message, bad.state.message

    (run_id,) = set(runs(project)) - before  # the failed run wrote nothing
    m = manifest(project, run_id)
    deployed = tiny.parameters["config"]
    assert m["config"] == {**deployed, "model": {**deployed["model"], "rank": 50}}
    assert m["config"]["model"]["cg_max_iter"] == 4  # the deployment's own override
    assert m["options"]["runner"] == "local" and m["deployment"] == "tiny"


def test_served_deployment_run_completes_with_outputs_manifest_and_tags(
    server, project, serving, monkeypatch, capsys
):
    from prefect.client.schemas.objects import StateType
    from prefect.deployments import run_deployment

    FINAL = (StateType.COMPLETED, StateType.FAILED, StateType.CRASHED, StateType.CANCELLED)
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    proc, log = serving
    try:
        before = set(runs(project))
        with _client() as client:
            # `scarce serve` registers the deployment when it starts.
            tiny = _wait_for(lambda: _deployment(client, "leml/tiny"), 120, "leml/tiny", proc)
            assert [s.active for s in tiny.schedules] == [False]  # registered, never due
            params = tiny.parameters
            # A custom run as the UI form sends it: the defaults with two values changed.
            params["config"]["model"]["rank"] = 3
            params["config"]["dataset"]["name"] = "bibtex-mini"

            def run_to_completion(name, parameters, seconds):
                flow_run = run_deployment(name, parameters=parameters, timeout=0)

                def finished():
                    fr = client.read_flow_run(flow_run.id)
                    return fr if fr.state_type in FINAL else None

                try:
                    fr = _wait_for(finished, seconds, f"the run of {name}", proc)
                except BaseException:
                    print(log.read_text(), file=sys.stderr)
                    raise
                assert fr.state_type == StateType.COMPLETED, log.read_text()[-3000:]
                return fr

            fr = run_to_completion("leml/tiny", params, 240)
            assert fr.name.startswith("leml-bibtex-mini-k3-seed0 (deployment leml/tiny, leml-")
            # Deployment tags plus the run's own (from its parameters, added by RunContext).
            assert {"flow:leml", "dataset:bibtex-tiny", "method:leml-squared", "test"} <= set(
                fr.tags
            )
            assert "dataset:bibtex-mini" in fr.tags

            # The inbox deployment: the latest tiny model on every new file of inbox/, an
            # empty inbox being no error; files applied before are store hits.
            run_to_completion("apply-leml/tiny-inbox", None, 240)
            shutil.copy(project / "test.txt", project / "inbox" / "a.txt")
            run_to_completion("apply-leml/tiny-inbox", None, 240)
            rows = (project / "train.txt").read_text().splitlines()
            _, d, labels = rows[0].split()
            (project / "inbox" / "b.txt").write_text("\n".join([f"20 {d} {labels}", *rows[1:21]]))
            inbox = run_to_completion("apply-leml/tiny-inbox", None, 240)
            assert "model-run:latest:tiny" in inbox.tags

            # The same run through the Dask deployment, every step recomputed (not cache
            # hits of the run above): its task runs execute on a local Dask cluster.
            dask_dep = _deployment(client, "leml/tiny-dask")
            assert dask_dep is not None and dask_dep.parameters["options"]["runner"] == "dask"
            dask_params = {"config": params["config"],
                           "options": {**dask_dep.parameters["options"], "refresh": True}}
            dask_fr = run_to_completion("leml/tiny-dask", dask_params, 300)
            assert dask_fr.name.startswith("leml-bibtex-mini-k3-seed0 (deployment leml/tiny-dask")
            assert dask_fr.name != fr.name  # one name per run
    finally:
        _stop(proc)  # also checks that Ctrl-C stops `scarce serve`
    assert proc.returncode == 0, log.read_text()[-3000:]
    with _client() as client:  # stopping `scarce serve` pauses what it served
        assert client.read_deployment_by_name("leml/tiny").paused

    new_runs = set(runs(project)) - before
    applied = sorted((r for r in new_runs if manifest(project, r)["flow"] == "apply-leml"),
                     key=lambda r: manifest(project, r)["started"])
    by_runner = {manifest(project, r)["options"]["runner"]: r for r in new_runs
                 if manifest(project, r)["flow"] == "leml"}
    assert set(by_runner) == {"local", "dask"}
    run_id = by_runner["local"]
    m = manifest(project, run_id)
    # The inbox runs: none, then a.txt, then only b.txt computed; a.txt's predictions are the
    # served training run's own on the same test file.
    assert len(applied) == 3
    first, second, third = (manifest(project, r) for r in applied)
    assert [o["name"] for o in first["named_outputs"]] == []
    assert [o["name"] for o in second["named_outputs"]] == ["predictions/a.parquet"]
    assert [o["name"] for o in third["named_outputs"]] == ["predictions/a.parquet",
                                                           "predictions/b.parquet"]
    scored = {o["ref"]: o["cached"] for o in third["outputs"] if o["step"] == "leml-score"}
    a_ref = next(o["ref"] for o in third["named_outputs"] if o["name"].endswith("/a.parquet"))
    b_ref = next(o["ref"] for o in third["named_outputs"] if o["name"].endswith("/b.parquet"))
    assert scored[a_ref] and not scored[b_ref]
    own = pd.read_parquet(project / "data" / "runs" / run_id / "outputs" / "predictions.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(project / "outbox" / "a.parquet"), own)
    assert len(pd.read_parquet(project / "outbox" / "b.parquet")) == 20 * 5
    # the Dask run recomputed every step on the cluster and gave the same bytes
    md = manifest(project, by_runner["dask"])
    assert not any(o["cached"] for o in md["outputs"])
    assert [o["ref"] for o in md["outputs"]] == [o["ref"] for o in m["outputs"]]
    assert compare_outputs(m, md) == []  # every output but the wall-clock timings
    assert (m["task_runner"], md["task_runner"]) == ("ThreadPoolTaskRunner", "DaskTaskRunner")
    assert m["flow"] == "leml"
    assert m["config"]["model"]["rank"] == 3 and m["config"]["model"]["cg_max_iter"] == 4
    assert m["config"]["dataset"]["name"] == "bibtex-mini"
    metrics = pd.read_parquet(project / "data" / "runs" / run_id / "metrics.parquet")
    assert set(metrics["method"]) == {"leml-squared-k3"}
    p1 = metrics.set_index("metric").loc["precision@1", "value"]
    assert 0.0 < p1 <= 1.0
    store = Store(project / "data" / "cache")
    # the store holds what the last (Dask) run wrote: its entries, timings included
    assert md["outputs"] and all(store.sha256(o["ref"]) == o["sha256"] for o in md["outputs"])

    # The same tags on a run started by `scarce run` (in this process, same server).
    assert main(["run", "leml", "--set", "model.rank=3", "--set", "model.cg_max_iter=4"]) == 0
    (cli_run,) = set(runs(project)) - before - new_runs
    capsys.readouterr()
    with _client() as client:
        from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

        # named by its settings and, in brackets, its run folder's id
        (fr,) = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                name=FlowRunFilterName(any_=[f"leml-bibtex-tiny-k3-seed0 ({cli_run})"])
            )
        )
    assert {"flow:leml", "dataset:bibtex-tiny", "method:leml-squared"} <= set(fr.tags)
    assert (
        json.loads((project / "data" / "runs" / cli_run / "manifest.json").read_text())["config"][
            "model"
        ]["rank"]
        == 3
    )


def test_ui_on_another_port_points_the_ui_at_that_port(tmp_path, seeded_prefect_home):
    """`scarce ui --port P`: the page served on P must ask the API on P, not on 4200."""
    port = _free_port()
    env = _clean_env(PREFECT_HOME=str(seeded_prefect_home(tmp_path / "home")),
                     PREFECT_SERVER_LOGGING_LEVEL="WARNING")
    log = tmp_path / "ui.log"
    with open(log, "wb") as out:
        cmd = [sys.executable, "-m", "scarce.flows.cli", "ui", "--port", str(port)]
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)

    def settings():
        try:
            response = httpx.get(f"http://127.0.0.1:{port}/ui-settings", timeout=5)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None

    try:
        served = _wait_for(settings, STARTUP_SECONDS, "the UI server", proc)
    finally:
        _stop(proc)
    assert served["api_url"] == f"http://127.0.0.1:{port}/api", log.read_text()[-2000:]
