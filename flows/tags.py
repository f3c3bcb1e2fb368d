"""Tags of a flow run, so that runs can be told apart and filtered in the Prefect UI.

``flow:<flow>``, ``dataset:<name>``, one ``method:<m>`` per method the run applies,
``model-run:<id or latest:NAME>`` for an apply flow, ``runner:<local|dask>``, and
``rerun-of:<run id>`` for a ``scarce rerun``.  Deployments carry
the same tags (:mod:`scarce.flows.deploy`), and :func:`tag_flow_run` adds them to the flow run in
progress however it was started, and gives it a name no other run has (:func:`run_title`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("scarce.run")

# The method(s) a run of each flow applies, for its ``method:`` tags.
METHODS: dict[str, Callable[[Any], list[str]]] = {
    "leml": lambda c: [f"leml-{c.model.loss}"],
    "relations": lambda c: [f"relations-{c.ranking}"],
    "strip": lambda c: list(c.variants),
}


def dataset_name(config: Any) -> str | None:
    """The name of the data set a config runs on (``dataset`` or ``dataset.name``), if any."""
    dataset = getattr(config, "dataset", None)
    dataset = getattr(dataset, "name", dataset)
    return dataset if isinstance(dataset, str) and dataset else None


def run_tags(flow: str, config: Any, options: Any = None) -> list[str]:
    """The tags of a run of ``flow`` with ``config`` (and its :class:`RunOptions`, if any)."""
    tags = [f"flow:{flow}"]
    dataset = dataset_name(config)
    if dataset:
        tags.append(f"dataset:{dataset}")
    methods = METHODS.get(flow)
    if methods is not None:
        tags += [f"method:{m}" for m in methods(config)]
    model_run = getattr(config, "model_run", None)  # an apply flow: whose model it applies
    if isinstance(model_run, str):
        tags.append(f"model-run:{model_run}")
    if options is not None:
        tags.append(f"runner:{options.runner}")
        if options.rerun_of:
            tags.append(f"rerun-of:{options.rerun_of}")
    return tags


def unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def run_title(name: str, run_id: str | None, tags: list[str], options: Any = None,
              deployment: str | None = None) -> str:
    """The flow run's name in the UI: its flow's name (data set and settings) and, in
    brackets, what sets it apart from runs with the same settings: the run it reruns, the
    experiment it is a point of, the deployment that started it, and its run id (its folder
    under ``data/runs``), so that no two runs carry one name."""
    what = []
    if options is not None and getattr(options, "rerun_of", None):
        what.append(f"rerun of {options.rerun_of}")
    what += [f"experiment {t.split(':', 1)[1]}" for t in tags if t.startswith("experiment:")]
    if deployment:
        what.append(f"deployment {deployment}")
    if run_id:
        what.append(run_id)
    return f"{name} ({', '.join(what)})" if what else name


def tag_flow_run(flow: str, config: Any, options: Any = None, run_id: str | None = None) -> None:
    """Add :func:`run_tags` to the flow run in progress and name it :func:`run_title`
    (no-op outside a flow run)."""
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    run = getattr(ctx, "flow_run", None)
    if run is None:
        return
    tags = unique([*run.tags, *run_tags(flow, config, options)])
    name = run.name
    if run_id and run_id not in run.name:
        name = run_title(run.name, run_id, tags, options, _deployment_name(run))
    if tags == list(run.tags) and name == run.name:
        return
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(run.id, tags=tags, name=name)
        run.tags, run.name = tags, name
    except Exception as exc:  # tags and names are for the UI; never fail a computation
        log.warning("could not tag flow run %s: %s", run.id, exc)


def _deployment_name(run: Any) -> str | None:
    """``<flow>/<deployment>`` of the deployment that started ``run``, if one did."""
    if getattr(run, "deployment_id", None) is None:
        return None
    from prefect.runtime import deployment, flow_run

    try:
        return f"{flow_run.flow_name}/{deployment.name}"
    except Exception:  # no API to ask: the deployment's id is all there is
        return str(run.deployment_id)
