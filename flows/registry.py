"""The flows ``scarce run`` knows, by name.

Each entry points at a Prefect flow ``fn(config, options=None) -> summary`` and
the pydantic model and default YAML file of its config.  Targets are imported
only when used, so ``scarce --help`` stays fast.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FlowSpec:
    name: str
    target: str  # "module:flow_function"
    config_model: str  # "module:ConfigModel"
    config_file: str  # relative to the project root
    description: str = ""
    applies: str | None = None  # for an apply flow: the training flow whose model it applies
    kind: str = "train"  # train | apply | experiment
    # A pattern whose first group is the method's name in an experiment's table, for a flow
    # whose method names hold settings an experiment varies (see tasks.experiment.gather).
    method_family: str | None = None
    # The flow's own method (a pattern) and the test metric a run's summary compares it on
    # with the other methods in the same run (its baselines): who leads, and by how much.
    own_method: str | None = None
    lead_metric: str | None = None

    def load_flow(self) -> Any:
        return _load(self.target)

    def load_model(self) -> Any:
        return _load(self.config_model)


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


FLOWS: dict[str, FlowSpec] = {}


def register(spec: FlowSpec) -> FlowSpec:
    FLOWS[spec.name] = spec
    return spec


register(
    FlowSpec(
        name="leml",
        target="scarce.flows.leml:leml_flow",
        config_model="scarce.flows.leml_config:LemlConfig",
        config_file="configs/leml.yaml",
        description="LEML: low-rank multi-label learning with missing labels (Yu et al., 2014)",
        method_family=r"^(leml)-[a-z_]+-k\d+$",  # leml-LOSS-kRANK
        own_method=r"^leml-", lead_metric="precision@1",
    )
)
register(
    FlowSpec(
        name="relations",
        target="scarce.flows.relations:relations_flow",
        config_model="scarce.flows.relations_config:RelationsConfig",
        config_file="configs/relations.yaml",
        description="Relation discovery: feature selection and model order by stability "
        "(Chen et al., 2005)",
    )
)
register(
    FlowSpec(
        name="strip",
        target="scarce.flows.strip:strip_flow",
        config_model="scarce.flows.strip_config:StripConfig",
        config_file="configs/strip.yaml",
        description="StRip: partially supervised coreference (Stoyanov and Cardie, 2006)",
        own_method=r"^strip-partial$", lead_metric="b3_f",
    )
)

for _flow in ("leml", "relations", "strip"):
    register(
        FlowSpec(
            name=f"apply-{_flow}",
            target=f"scarce.flows.apply_{_flow}:apply_{_flow}_flow",
            config_model=f"scarce.flows.apply_{_flow}_config:Apply{_flow.capitalize()}Config",
            config_file=f"configs/apply-{_flow}.yaml",
            description=f"Apply what a finished {_flow} run learned to new input",
            applies=_flow,
            kind="apply",
        )
    )

register(
    FlowSpec(
        name="experiment",
        target="scarce.flows.experiment:experiment_flow",
        config_model="scarce.flows.experiment_config:ExperimentConfig",
        config_file="configs/experiments/{name}.yaml",
        description="A grid of runs of one flow and the table they make "
        "(`scarce run experiment NAME`)",
        kind="experiment",
    )
)
