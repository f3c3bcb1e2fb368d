"""The one place this project reaches into Prefect's private API: a deployment's parameter schema.

Prefect's ``RunnerDeployment`` keeps the schema of the flow's parameters, which it sends to the
server and the UI builds its form from, in the private attribute ``_parameter_openapi_schema``
(set from the flow's signature); Prefect has no public way to send another.  The deployments
of this project send a schema whose nested sections require nothing
(:func:`scarce.flows.deploy.partial_schema`), so that a run from the UI may give part of a config.
Everything else about deployments goes through Prefect's public API.
``tests/flows/test_prefect_adapter.py`` fails on the pinned Prefect if the attribute moves or
stops being what the deployment sends.
"""

from __future__ import annotations

from typing import Any

#: Where ``RunnerDeployment`` keeps the schema it sends to the server.
SCHEMA_ATTRIBUTE = "_parameter_openapi_schema"


def deployment_schema(deployment: Any) -> Any:
    """The parameter schema ``deployment`` (a ``RunnerDeployment``) will send."""
    return getattr(deployment, SCHEMA_ATTRIBUTE)


def with_schema(deployment: Any, schema: Any) -> Any:
    """``deployment`` sending ``schema`` (a ``ParameterSchema``) in place of its own."""
    setattr(deployment, SCHEMA_ATTRIBUTE, schema)
    return deployment
