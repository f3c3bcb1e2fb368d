"""The schema of a run's ``manifest.json``: the types of the keys code reads.

Kept apart from :mod:`scarce.flows.manifest` so that what reads only a run's flow and finishing
time (a model loaded into Python, which does not import pydantic) does not build it:
:func:`scarce.flows.manifest.read_manifest` imports it when it checks a whole manifest.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Record(BaseModel):
    """A part of a manifest: the types of the keys code reads, strictly (no ``"3"`` for 3);
    other keys are kept as they are (a newer manifest may hold more)."""

    model_config = ConfigDict(extra="allow", strict=True)


class _Input(_Record):
    path: str
    sha256: str


class _Output(_Record):
    ref: str
    sha256: str | None = None
    step: str | None = None
    cached: bool = False
    volatile: bool = False
    code: str | None = None
    child: str | None = None


class _NamedOutput(_Record):
    name: str
    ref: str | None = None
    sha256: str | None = None
    volatile: bool = False


class _Plot(_Record):
    name: str | None = None
    path: str | None = None
    sha256: str | None = None
    ref: str | None = None


class _Code(_Record):
    scarce: str | None = None
    source_sha256: str | None = None
    source_files: dict[str, str] | None = None
    commit: str | None = None
    dirty: bool | None = None


class _Environment(_Record):
    python: str | None = None
    implementation: str | None = None
    platform: str | None = None
    packages: dict[str, str] | None = None


class _Options(_Record):
    runner: str | None = None
    rerun_of: str | None = None
    dask_address: str | None = None
    store: str | None = None
    runs: str | None = None


class ManifestSchema(_Record):
    """What ``manifest.json`` holds, as the commands read it (``scarce runs``, ``rerun``,
    ``diff``, ``apply``, ``claims``, ``cache gc``, :func:`scarce.load_model`): checked once,
    by :func:`read_manifest`, so that no reader meets a wrong type later (a ``named_outputs``
    that is a string, an ``outputs`` entry without its ``ref``).  Only ``flow`` and
    ``outputs`` are required: a manifest recorded before a key existed lacks it.  The config
    is a mapping here; its values are the flow config's, which ``scarce rerun`` validates."""

    schema_: int | None = Field(None, alias="schema")  # BaseModel has a `schema` method
    run_id: str | None = None
    flow: str
    started: str | None = None
    finished: str | None = None
    config: dict[str, Any] | None = None
    seed: int | None = None
    code: _Code | None = None
    environment: _Environment | None = None
    options: _Options | None = None
    store: str | None = None
    inputs: list[_Input] | None = None
    outputs: list[_Output]
    metrics_sha256: str | None = None
    cache_hits: list[str] | None = None
    plots: list[_Plot] | None = None
    named_outputs: list[_NamedOutput] | None = None
    prefect_flow_run_id: str | None = None
    deployment: str | None = None
    task_runner: str | None = None
    tags: list[str] | None = None
    notes: dict[str, Any] | None = None
    headline: dict[str, float] | None = None

    @field_validator("headline")
    @classmethod
    def _headline_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        bad = next((k for k in value or {} if k.count("/") < 2), None)
        if bad is not None:
            raise ValueError(f"a headline metric is named dataset/method/metric, not {bad!r}")
        return value
