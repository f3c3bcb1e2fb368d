"""The one use of Prefect's private API (a deployment's parameter schema) still works on the
pinned Prefect, and a served flow is made through Prefect's public constructor."""

from __future__ import annotations

import inspect

from prefect import flow
from prefect.deployments.runner import RunnerDeployment
from prefect.utilities.callables import ParameterSchema

from scarce.flows.deploy import ServedFlow, partial_schema
from scarce.flows.prefect_adapter import SCHEMA_ATTRIBUTE, deployment_schema, with_schema
from scarce.flows.registry import FLOWS


@flow(name="adapter-probe")
def probe(config: dict, seed: int = 0) -> int:
    return seed


def test_the_deployment_keeps_and_sends_its_schema_where_the_adapter_reaches_it():
    deployment = probe.to_deployment(name="probe")
    schema = deployment_schema(deployment)
    assert isinstance(schema, ParameterSchema)
    assert set(schema.properties) == {"config", "seed"}
    replaced = ParameterSchema(properties={"config": {"type": "object"}}, required=["config"])
    assert deployment_schema(with_schema(deployment, replaced)) is replaced
    # what the deployment sends to the server is read from that attribute
    assert f"self.{SCHEMA_ATTRIBUTE}" in inspect.getsource(RunnerDeployment)


def test_a_served_flow_keeps_the_flows_options_and_deploys_the_partial_schema():
    leml = FLOWS["leml"].load_flow()
    served = ServedFlow.of(leml, "leml/nightly")
    assert isinstance(served, ServedFlow) and served.deployment_name == "leml/nightly"
    assert leml.__class__ is not ServedFlow  # the module's flow is left as it is
    for option in ("name", "fn", "flow_run_name", "version", "task_runner", "retries",
                   "timeout_seconds", "should_validate_parameters", "log_prints"):
        assert getattr(served, option) == getattr(leml, option), option
    deployment = served.to_deployment(name="nightly")
    want = partial_schema(deployment_schema(leml.to_deployment(name="nightly")))
    assert deployment_schema(deployment) == want
