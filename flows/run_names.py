"""How a run is named: its Prefect flow run's name and its run id, from its config.

Both come from the config the run actually runs with (after ``--set``, an experiment's grid
point, a rerun's manifest), and only from the keys :data:`NAMINGS` lists for its flow, so
that no part of a name can describe another run than the one it names (a name set once in a
config file and left as it was while ``dataset.name`` changed, say).

- The flow run's name (the Prefect UI) is the flow's settings that tell its runs apart:
  ``leml-bibtex-k100-seed0``, ``strip-gum-w20-seed0``, ``apply-leml-latest``.
- The run id (its folder under ``data/runs``) is the flow, the config's ``name`` when one is
  given, the data set, the time and a random suffix: ``leml-delicious-20261206T101500-1a2b``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Naming:
    """The config keys (dotted) a flow's run names show, and the flow run's name from their
    values (a dict by dotted key)."""

    keys: tuple[str, ...]
    flow_run: Callable[[dict[str, Any]], str]


def _leml(v: dict[str, Any]) -> str:
    frac = v["observed_fraction"]
    miss = "" if frac >= 1 else f"-obs{int(round(frac * 100))}"
    on = "-on-validation" if v["dataset.evaluate_on"] == "validation" else ""
    return f"leml-{v['dataset.name']}-k{v['model.rank']}{miss}-seed{v['seed']}{on}"


#: Per flow (the registry's names), the keys its run names show and its flow run's name.
NAMINGS: dict[str, Naming] = {
    "leml": Naming(("dataset.name", "model.rank", "observed_fraction", "seed",
                    "dataset.evaluate_on"), _leml),
    "relations": Naming(("dataset", "window", "seed"),
                        lambda v: f"relations-{v['dataset']}-{v['window']}-seed{v['seed']}"),
    "strip": Naming(("dataset", "window", "seed"),
                    lambda v: f"strip-{v['dataset']}-w{v['window']}-seed{v['seed']}"),
    **{f"apply-{f}": Naming(("model_run",), lambda v, f=f: f"apply-{f}-{v['model_run']}")
       for f in ("leml", "relations", "strip")},
    "experiment": Naming(("name",), lambda v: f"experiment-{v['name']}"),
}

#: The config keys a run id shows besides the flow (when the config has them): the config's
#: own ``name`` and the data set's.
ID_KEYS = ("name", "dataset.name", "dataset")

# A run id part is a folder name's part: letters, digits, '.', '_', '-', at most this long.
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_PART_LENGTH = 40


def value(config: Any, dotted: str) -> Any:
    """The value of the dotted key in ``config`` (a pydantic model)."""
    node = config
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def flow_run_name(flow: str, config: Any) -> str:
    """The name of the flow run of ``flow`` with ``config`` (see the module docstring)."""
    naming = NAMINGS[flow]
    return naming.flow_run({k: value(config, k) for k in naming.keys})


def run_id_label(config: Any) -> str | None:
    """What a run id shows between the flow and the time: the :data:`ID_KEYS` the config
    has (its ``name``, its data set's name), each once, made safe for a folder name."""
    parts: list[str] = []
    for key in ID_KEYS:
        try:
            v = value(config, key)
        except AttributeError:
            continue
        if not isinstance(v, str) or not v:
            continue
        part = _UNSAFE.sub("-", v).strip("-.")[:_PART_LENGTH].strip("-.")
        if part and part not in parts:
            parts.append(part)
    return "-".join(parts) or None


def namer(flow: str) -> Callable[[], str]:
    """The ``flow_run_name`` callable of the flow ``flow``'s decorator: the name from the
    config of the flow run in progress, as the flow validated it."""

    def name() -> str:
        from prefect.runtime import flow_run

        from scarce.flows.registry import FLOWS

        config = flow_run.parameters["config"]
        if isinstance(config, dict):  # a deployment's parameters, not yet a config
            config = FLOWS[flow].load_model().model_validate(config)
        return flow_run_name(flow, config)

    name.__qualname__ = f"{flow}_run_name"
    return name
