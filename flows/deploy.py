"""Prefect deployments of the flows, declared in ``configs/deployments.yaml``.

Kept as one module: the deployments file's schema, the served flow and the schedules change
together.

::

    deployments:
      leml-bibtex-nightly:
        flow: leml
        config: configs/leml.yaml
        parameters: {model.rank: 64}        # dotted config overrides, as with --set
        schedule: {cron: "0 2 * * *", timezone: Europe/Berlin}
        tags: [nightly]
        description: LEML on Bibtex, every night.

The file is the single source of truth: :func:`load_deployments` validates it
(errors name the file and the dotted key), :func:`build` turns each entry into a
``RunnerDeployment`` (``flow.to_deployment``) whose default parameters are the
flow's validated config, with ``enforce_parameter_schema=True`` so that the
server rejects an invalid value before a run starts; :func:`register` applies
them to the server in use and :func:`serve` serves them (``prefect.serve``).

Deployments carry the tags of :mod:`scarce.flows.tags`.

A run may change a few values and keep the deployment's others: the UI form or the API may send
``{"config": {"model": {"rank": 50}}}``.  Prefect merges a run's parameters with the
deployment's at the top level only, which would make that ``config`` the whole config; so the
deployed flow (:class:`ServedFlow`) completes every mapping it is given from the deployment's
default of the same name, key by key at every depth, before it validates them
(:func:`complete_parameters`), and the deployment's parameter schema leaves ``required`` out of
the nested sections (:func:`partial_schema`).  The server still refuses an unknown key, a wrong
type or an out-of-range value; what only the whole config can tell (a check across keys) fails
the run when it starts.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
import logging
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from prefect import Flow
from pydantic import Field, ValidationError, field_validator

from scarce.flows.config import (
    NAME_LENGTH,
    SAFE_NAME,
    FlowConfig,
    Strict,
    apply_overrides,
    check_inputs,
    config_path,
    load_config,
    read_yaml,
)
from scarce.flows.prefect_adapter import deployment_schema, with_schema
from scarce.flows.tags import run_tags, unique
from scarce.tasks.errors import InputError, excerpt

log = logging.getLogger("scarce.deploy")

DEFAULT_FILE = "configs/deployments.yaml"

# -- the file -----------------------------------------------------------------
class ScheduleSpec(Strict):
    cron: str = Field(description="Cron string: minute hour day-of-month month day-of-week.")
    timezone: str = Field(description="IANA time zone the cron string is read in.")
    active: bool = Field(True, description="False registers the schedule paused.")

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, v: str) -> str:
        return _prefect_cron(cron=v).cron

    @field_validator("timezone")
    @classmethod
    def _valid_timezone(cls, v: str) -> str:
        return _prefect_cron(cron="0 0 * * *", timezone=v).timezone


def _prefect_cron(**kwargs: Any) -> Any:
    """Prefect's own cron schedule model, so the file is checked as the server will."""
    from prefect.client.schemas.schedules import CronSchedule

    try:
        return CronSchedule(**kwargs)
    except ValidationError as exc:
        raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None


class DeploymentSpec(Strict):
    flow: str = Field(description="A flow `scarce run` knows (leml, relations, strip).")
    config: str | None = Field(
        None, description="Config file relative to the project root; default the flow's own."
    )
    parameters: dict[str, Any] = Field(
        default_factory=dict, description="Config overrides by dotted key, as with --set."
    )
    schedule: ScheduleSpec | None = None
    tags: list[str] = Field(default_factory=list, description="Extra tags.")
    description: str | None = None
    runner: Literal["local", "dask"] = Field(
        "local",
        description="Task runner of the served runs: local threads, or Dask (a LocalCluster of "
        "two single-thread worker processes per run, or the cluster at dask_address).",
    )
    dask_address: str | None = Field(
        None, description="Scheduler address of an existing Dask cluster (implies runner: dask)."
    )

    @field_validator("flow")
    @classmethod
    def _known_flow(cls, v: str) -> str:
        from scarce.flows.registry import FLOWS

        if v not in FLOWS:
            raise ValueError(f"unknown flow {v!r} (known: {', '.join(sorted(FLOWS))})")
        return v


class DeploymentsFile(Strict):
    deployments: dict[str, DeploymentSpec] = Field(min_length=1)

    @field_validator("deployments")
    @classmethod
    def _names(cls, v: dict[str, DeploymentSpec]) -> dict[str, DeploymentSpec]:
        import re

        for name in v:
            if not re.fullmatch(SAFE_NAME, name):  # in run names, tags and `latest:NAME`
                raise ValueError(f"deployment name {excerpt(name)}: use at most {NAME_LENGTH} "
                                 "letters, digits, '-', '_', '.'")
        return v


@dataclass(frozen=True)
class Deployment:
    """One validated entry: the flow, its config after overrides, schedule and tags."""

    name: str
    flow: str
    config_file: Path
    config: FlowConfig
    schedule: ScheduleSpec | None
    tags: list[str]
    description: str
    runner: str = "local"
    dask_address: str | None = None

    @property
    def full_name(self) -> str:
        return f"{self.flow}/{self.name}"

    def parameters(self) -> dict[str, Any]:
        """The deployment's default parameters (JSON), as the UI's custom-run form shows them."""
        from scarce.flows.runtime import RunOptions

        return {
            "config": self.config.model_dump(mode="json"),
            "options": RunOptions(runner=self.runner).model_dump(mode="json"),
        }


def default_file() -> Path:
    return config_path(DEFAULT_FILE)


def load_deployments(path: str | os.PathLike[str] | None = None) -> list[Deployment]:
    """Read and validate a deployments file, and every flow config it names.

    Raises
    ------
    InputError
        Missing file, bad YAML, unknown key or bad value (naming this file and
        ``deployments.<name>.<key>``), an invalid flow config (naming the
        config file, or this file for a value set under ``parameters``), or a missing
        input file or folder of a deployment's config (naming its key).
    """
    from scarce.flows.registry import FLOWS

    path = Path(path) if path is not None else default_file()
    data = read_yaml(path, "deployments")
    if not isinstance(data, dict):
        raise InputError("expected a mapping with the key 'deployments'", path=path)
    try:
        parsed = DeploymentsFile.model_validate(data)
    except ValidationError as exc:
        raise _input_error(exc, path, prefix="") from None

    out = []
    for name, spec in parsed.deployments.items():
        flow = FLOWS[spec.flow]
        model = flow.load_model()
        config_file = config_path(spec.config or flow.config_file)
        config = load_config(config_file, model, inputs=False)  # checked once overridden
        if spec.parameters:
            where = f"deployments.{name}.parameters"
            overrides = [f"{k}={json.dumps(v)}" for k, v in spec.parameters.items()]
            try:
                data = apply_overrides(config.model_dump(mode="json"), overrides, model, path)
                config = model.model_validate(data)
            except InputError as exc:
                raise InputError(
                    exc.message.removeprefix("--set: "), path=path, key=f"{where}.{exc.key}"
                ) from None
            except ValidationError as exc:
                raise _input_error(exc, path, prefix=f"{where}.") from None
        check_inputs(config, config_file)
        tags = unique([*run_tags(spec.flow, config), *spec.tags])
        description = spec.description or flow.description
        out.append(
            Deployment(name, spec.flow, config_file, config, spec.schedule, tags, description,
                       "dask" if spec.dask_address else spec.runner, spec.dask_address)
        )
    return out


def _input_error(exc: ValidationError, path: Path, prefix: str) -> InputError:
    err = exc.errors()[0]
    key = prefix + ".".join(str(p) for p in err["loc"])
    msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
    msg = msg.removeprefix("Value error, ")
    if "input" in err and err["type"] not in ("missing", "extra_forbidden"):
        shown = err["input"]
        if not isinstance(shown, dict | list):
            msg = f"{msg} (got {shown!r})"
    return InputError(msg, path=path, key=key.rstrip(".") or None)


def select(deployments: list[Deployment], only: list[str] | None) -> list[Deployment]:
    """The deployments named in ``only`` (deployment name, ``flow/name`` or flow name)."""
    if not only:
        return deployments
    chosen = [d for d in deployments if {d.name, d.full_name, d.flow} & set(only)]
    known = ", ".join(sorted(d.name for d in deployments))
    unknown = [o for o in only if not any(o in (d.name, d.full_name, d.flow) for d in deployments)]
    if unknown:
        raise InputError(f"--only: no deployment {unknown[0]!r} (known: {known})")
    return chosen


# -- Prefect ------------------------------------------------------------------------
def complete_parameters(given: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """A run's parameters with every mapping completed from the deployment's defaults.

    Parameters
    ----------
    given : dict
        The parameters of the flow run (Prefect has already added the parameters the run did
        not send at all).
    defaults : dict
        The deployment's parameters.

    Returns
    -------
    dict
        ``given``, where each mapping that has a mapping of the same name in ``defaults`` takes
        the default's keys it lacks, at every depth; every other value (a list, a number, a
        string, a config object) stands as given.
    """
    return {name: _merged(defaults.get(name), value) for name, value in given.items()}


def _merged(default: Any, value: Any) -> Any:
    if not (isinstance(default, dict) and isinstance(value, dict)):
        return value
    out = copy.deepcopy(default)
    for key, item in value.items():
        out[key] = _merged(default.get(key), item)
    return out


def partial_schema(schema: Any) -> Any:
    """A flow's parameter schema that accepts partial sections.

    Parameters
    ----------
    schema : prefect.utilities.callables.ParameterSchema
        The schema Prefect makes of the flow's signature.

    Returns
    -------
    ParameterSchema
        A copy whose nested definitions (the config and its sections) lack their ``required``
        lists, and nothing else: the UI form shows every option with its type, bounds,
        description and default, and the server still refuses an unknown key, a wrong type or
        an out-of-range value.  The top-level ``required`` (``config``) stays.
    """
    definitions = {name: {k: v for k, v in d.items() if k != "required"}
                   if isinstance(d, dict) else d for name, d in schema.definitions.items()}
    return schema.model_copy(update={"definitions": definitions})


class ServedFlow(Flow):
    """A flow as its deployment runs it: partial parameters completed from the deployment's.

    Made from a flow by :meth:`of` (a copy: the module's flow object is left as it is).  When a
    run starts, :meth:`validate_parameters` reads the deployment's parameters from the server
    (the values the UI form shows) and completes the run's with them
    (:func:`complete_parameters`) before Prefect validates them against the flow's signature,
    the config's own checks included; the run's name, tags and manifest then see the whole
    config.  Its deployments carry :func:`partial_schema` of the flow's schema.
    """

    deployment_name: str = ""

    @classmethod
    def of(cls, flow: Flow, deployment_name: str) -> ServedFlow:
        """A served copy of a flow.

        Parameters
        ----------
        flow : prefect.Flow
            The flow, with its task runner; it is not changed.
        deployment_name : str
            The deployment's full name, ``<flow>/<name>``.

        Returns
        -------
        ServedFlow
            A flow of this class made by Prefect's constructor from ``flow``'s function and
            options (``Flow.with_options`` always makes a plain ``Flow``).
        """
        served = cls(fn=flow.fn, name=flow.name, description=flow.description,
                     flow_run_name=flow.flow_run_name, version=flow.version,
                     task_runner=flow.task_runner, retries=flow.retries,
                     retry_delay_seconds=flow.retry_delay_seconds,
                     timeout_seconds=flow.timeout_seconds,
                     validate_parameters=flow.should_validate_parameters,
                     log_prints=flow.log_prints)
        served.deployment_name = deployment_name
        return served

    def deployment_parameters(self) -> dict[str, Any]:
        """The parameters of the deployment on the server (its defaults)."""
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            return client.read_deployment_by_name(self.deployment_name).parameters or {}

    def validate_parameters(self, parameters: dict[str, Any]) -> dict[str, Any]:
        """The run's parameters completed from the deployment's, then validated.

        Parameters
        ----------
        parameters : dict
            The flow run's parameters, as Prefect's engine passes them when the run starts.

        Returns
        -------
        dict
            The parameters as the flow takes them (``config`` a validated config object).

        Raises
        ------
        prefect.exceptions.ParameterTypeError
            When the completed parameters are invalid; the run fails with the reason.
        """
        if any(isinstance(v, dict) for v in parameters.values()):
            parameters = complete_parameters(parameters, self.deployment_parameters())
        return super().validate_parameters(parameters)

    def to_deployment(self, *args: Any, **kwargs: Any) -> Any:
        """``Flow.to_deployment`` (run synchronously) with :func:`partial_schema`."""
        kwargs.pop("_sync", None)
        return _with_partial_schema(super().to_deployment(*args, _sync=True, **kwargs))

    async def ato_deployment(self, *args: Any, **kwargs: Any) -> Any:
        """``Flow.ato_deployment`` (what ``Runner.add_flow`` calls) with :func:`partial_schema`."""
        return _with_partial_schema(await super().ato_deployment(*args, **kwargs))


def _with_partial_schema(deployment: Any) -> Any:
    """``deployment`` sending :func:`partial_schema` of its schema (through the one adapter
    of Prefect's private API, :mod:`scarce.flows.prefect_adapter`)."""
    return with_schema(deployment, partial_schema(deployment_schema(deployment)))


def _flow_and_options(deployment: Deployment) -> tuple[Any, dict[str, Any]]:
    """The entry's flow (with its task runner) and the keyword arguments of its deployment."""
    from prefect.schedules import Cron
    from prefect.types.entrypoint import EntrypointType

    from scarce.flows.registry import FLOWS
    from scarce.flows.runners import with_runner

    s = deployment.schedule
    schedules = [Cron(s.cron, timezone=s.timezone, active=s.active)] if s else []
    flow = with_runner(FLOWS[deployment.flow].load_flow(), deployment.runner,
                       deployment.dask_address)
    # A served run gets this flow object in a subprocess, where its function arrives by value
    # with only the globals its code names: the string annotations of `from __future__ import
    # annotations` (`config: LemlConfig`) would no longer resolve when Prefect validates the
    # parameters.  Resolved here, the annotations travel as the classes themselves.
    flow.fn.__annotations__ = typing.get_type_hints(flow.fn)
    return ServedFlow.of(flow, deployment.full_name), {
        "name": deployment.name,
        "schedules": schedules,
        "parameters": deployment.parameters(),
        "description": deployment.description,
        "tags": deployment.tags,
        "enforce_parameter_schema": True,
        "entrypoint_type": EntrypointType.MODULE_PATH,
    }


def build(deployment: Deployment) -> Any:
    """A ``RunnerDeployment`` of the entry's flow (``flow.to_deployment``)."""
    flow, options = _flow_and_options(deployment)
    return flow.to_deployment(**options)


def register(deployments: list[Deployment]) -> dict[str, Any]:
    """Create or update each deployment on the server; ``{full name: deployment id}``."""
    return {d.full_name: build(d).apply() for d in deployments}


def next_times(schedule: ScheduleSpec, n: int = 1, after: dt.datetime | None = None) -> list:
    """The next ``n`` times of a cron schedule, computed as Prefect's scheduler does."""
    from prefect.server.schemas.schedules import CronSchedule

    cron = CronSchedule(cron=schedule.cron, timezone=schedule.timezone)
    return asyncio.run(cron.get_dates(n=n, start=after))


def describe(deployments: list[Deployment]) -> list[dict[str, Any]]:
    """What the server holds for each deployment, with its next scheduled time."""
    from prefect.client.orchestration import get_client

    rows = []
    with get_client(sync_client=True) as client:
        for d in deployments:
            remote = client.read_deployment_by_name(d.full_name)
            sched = next((s for s in remote.schedules), None)
            cron = getattr(sched.schedule, "cron", None) if sched else None
            tz = getattr(sched.schedule, "timezone", None) if sched else None
            nxt = ""
            if cron and sched.active and not remote.paused:
                nxt = next_times(ScheduleSpec(cron=cron, timezone=tz))[0].isoformat()
            rows.append(
                {
                    "deployment": d.full_name,
                    "id": str(remote.id),
                    "schedule": f"{cron} ({tz})" if cron else "none",
                    "active": bool(sched and sched.active and not remote.paused),
                    "next run": nxt or "-",
                    "tags": ", ".join(remote.tags),
                }
            )
    return rows


def serving_runner(deployments: list[Deployment], limit: int | None = None) -> Any:
    """A Prefect ``Runner`` holding each deployment's flow, ready to ``start()``: at most
    ``limit`` runs at once (``None``: no limit); stopping it pauses the schedules.

    Raises
    ------
    ValueError
        When ``limit`` is below 1: Prefect takes 0 and then starts no run, for ever.
    """
    from prefect.runner import Runner

    if limit is not None and (isinstance(limit, bool) or int(limit) != limit or limit < 1):
        raise ValueError(f"limit must be a whole number of runs, at least 1, got {limit!r}")

    # `Runner.add_flow` (not `prefect.serve` of built deployments) keeps the flow object per
    # deployment, so served runs use its task runner; a deployment alone would be re-imported
    # from its entrypoint, with the flow's default (thread pool) runner.
    runner = Runner(pause_on_shutdown=True, limit=limit)
    for d in deployments:
        flow, options = _flow_and_options(d)
        runner.add_flow(flow, **options)
    return runner


#: Seconds a flow-run process still alive at Ctrl-C has to end after SIGTERM (Prefect's
#: engine then marks its run crashed) before it is killed.
FLOW_RUN_GRACE = 10.0


async def serve_until_interrupted(runner: Any, grace: float = FLOW_RUN_GRACE) -> None:
    """``runner.start()`` until Ctrl-C (SIGINT); then end the flow-run processes still alive
    and stop the runner (which pauses the schedules).

    Why not let asyncio cancel ``runner.start()`` on SIGINT, as ``asyncio.run`` does: the
    runner waits for each flow-run process in a thread (``process.join``), which no
    cancellation interrupts, and it ends the processes still alive only after that wait.  A
    process that lives on after its run finished (a Dask LocalCluster closing slowly at the
    end of a run on the Dask task runner) then held ``scarce serve`` after Ctrl-C for as
    long as it lived: the deployment test saw it exceed 180 s.  So the processes get SIGTERM
    first, as the runner's own shutdown gives them, then SIGKILL after ``grace`` seconds.
    """
    import signal

    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, interrupted.set)
    serving = asyncio.ensure_future(runner.start())
    waiting = asyncio.ensure_future(interrupted.wait())
    try:
        await asyncio.wait({serving, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            serving.result()
            return
        log.info("Ctrl-C: stopping the runner")
        await asyncio.to_thread(end_processes, grace)
        serving.cancel()
        try:
            await serving
        except asyncio.CancelledError:
            pass
    finally:
        waiting.cancel()
        loop.remove_signal_handler(signal.SIGINT)


def end_processes(grace: float) -> list[int]:
    """SIGTERM to this process's live multiprocessing children (the runner's flow-run
    processes), SIGKILL to those still alive ``grace`` seconds later; their pids."""
    import multiprocessing
    import time

    children = multiprocessing.active_children()
    for child in children:
        print(f"ending flow-run process {child.pid} (SIGTERM, SIGKILL after {grace:g} s)",
              flush=True)
        child.terminate()
    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(deadline - time.monotonic(), 0))
    for child in children:
        if child.is_alive():
            child.kill()
            child.join(10)
    return [child.pid for child in children]
