"""Deployment runs with partial parameters: completed from the deployment's, schema permissive.

Without a server: the merge, the schema and the served flow's validation.  The same path
against a real ``prefect server start`` and ``scarce serve`` is in ``test_deployments.py``
(``test_partial_override_changes_one_value_and_keeps_the_deployments_others``).
"""

from __future__ import annotations

import cloudpickle
import pytest
from prefect import Flow
from prefect.exceptions import ParameterTypeError
from prefect.utilities.callables import parameter_schema

from scarce.flows.deploy import ServedFlow, complete_parameters, partial_schema
from scarce.flows.leml import LemlConfig, leml_flow
from scarce.flows.runtime import RunOptions

DEFAULTS = {
    "config": {
        "seed": 0,
        "name": "tiny",
        "dataset": {"name": "bibtex-tiny", "train": "train.txt", "test": "test.txt"},
        "model": {"rank": 5, "cg_max_iter": 4, "outer_iterations": 2},
        "baselines": ["br-ridge"],
    },
    "options": RunOptions(runner="dask").model_dump(mode="json"),
}


def test_a_partial_mapping_takes_the_defaults_it_lacks_at_every_depth():
    given = {"config": {"model": {"rank": 50}, "baselines": []}, "options": {"refresh": True}}
    done = complete_parameters(given, DEFAULTS)
    assert done["config"] == {**DEFAULTS["config"], "model": {**DEFAULTS["config"]["model"],
                                                              "rank": 50}, "baselines": []}
    assert done["options"] == {**DEFAULTS["options"], "refresh": True}  # still on Dask
    assert given == {"config": {"model": {"rank": 50}, "baselines": []},
                     "options": {"refresh": True}}  # neither input is changed
    assert DEFAULTS["config"]["model"]["rank"] == 5
    # a whole config is left as it is; unknown keys stay for the validation to refuse
    assert complete_parameters(DEFAULTS, DEFAULTS) == DEFAULTS
    odd = complete_parameters({"config": {"model": {"optimiser": "adam"}}}, DEFAULTS)
    assert odd["config"]["model"]["optimiser"] == "adam"
    # no default of that name, or not a mapping on both sides: the value as given
    assert complete_parameters({"extra": {"a": 1}}, DEFAULTS) == {"extra": {"a": 1}}
    assert complete_parameters({"config": None}, DEFAULTS) == {"config": None}


def test_the_partial_schema_drops_only_the_nested_required_lists():
    schema = parameter_schema(leml_flow)
    assert schema.definitions["LemlConfig"]["required"] == ["dataset"]  # what made 409s
    loose = partial_schema(schema)
    assert loose.required == schema.required == ["config"]
    assert loose.properties == schema.properties
    assert set(loose.definitions) == set(schema.definitions)
    for name, definition in schema.definitions.items():
        assert "required" not in loose.definitions[name]
        assert loose.definitions[name] == {k: v for k, v in definition.items() if k != "required"}
    assert "required" in schema.definitions["DatasetConfig"]  # the flow's own is untouched


def test_the_served_flow_completes_then_validates_and_leaves_the_module_flow_alone(monkeypatch):
    served = ServedFlow.of(leml_flow, "leml/tiny")
    assert type(leml_flow) is Flow and type(served) is ServedFlow
    assert (served.name, served.fn, served.flow_run_name) == (
        leml_flow.name, leml_flow.fn, leml_flow.flow_run_name)
    asked = []
    monkeypatch.setattr(ServedFlow, "deployment_parameters",
                        lambda self: asked.append(self.deployment_name) or DEFAULTS)

    params = served.validate_parameters({"config": {"model": {"rank": 50}}, "options": None})
    assert asked == ["leml/tiny"]
    config = params["config"]
    assert isinstance(config, LemlConfig)
    assert (config.model.rank, config.model.cg_max_iter, config.dataset.train) == (
        50, 4, "train.txt")
    assert config.baselines == ["br-ridge"]
    # the config's own checks run on the whole config
    with pytest.raises(ParameterTypeError, match="closed-form needs observed_fraction = 1"):
        served.validate_parameters(
            {"config": {"observed_fraction": 0.5, "baselines": ["closed-form"]}})
    with pytest.raises(ParameterTypeError, match="greater than or equal to 1"):
        served.validate_parameters({"config": {"model": {"rank": 0}}})
    # the module's flow still wants a whole config
    with pytest.raises(ParameterTypeError, match="dataset"):
        leml_flow.validate_parameters({"config": {"model": {"rank": 50}}})

    # the runner hands the flow to the run's process pickled: it arrives as a served flow
    again = cloudpickle.loads(cloudpickle.dumps(served))
    assert type(again) is ServedFlow and again.deployment_name == "leml/tiny"


def test_a_served_flows_deployment_carries_the_partial_schema():
    served = ServedFlow.of(leml_flow, "leml/tiny")
    deployment = served.to_deployment(name="tiny", parameters=DEFAULTS,
                                      entrypoint_type=_module_path())
    schema = deployment._parameter_openapi_schema
    assert schema == partial_schema(parameter_schema(leml_flow))
    assert deployment.entrypoint == "scarce.flows.leml.leml_flow"
    assert deployment.enforce_parameter_schema


def _module_path():
    from prefect.types.entrypoint import EntrypointType

    return EntrypointType.MODULE_PATH
