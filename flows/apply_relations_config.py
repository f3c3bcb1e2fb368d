"""The ``apply-relations`` flow's config schema and the checks of an apply run before it starts.

Apart from the flow (:mod:`scarce.flows.apply_relations`), and importing neither Prefect,
scikit-learn nor Dask, so that ``scarce apply`` checks the model, the input and the output
before it imports the flow or starts a server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from scarce.algorithms.relations.params import INPUT_FORMATS
from scarce.flows.apply import (
    ApplyConfig,
    input_files,
    open_model,
    output_names,
    output_target,
    resolve_model_run,
)
from scarce.flows.config import resolve_path
from scarce.tasks.relations_format import MODEL_KEYS, MODEL_VERSION

#: The endings (lower case) of the files of a folder that are read: SemEval text, JSON Lines.
SUFFIXES = (".txt", ".txt.gz", ".jsonl", ".jsonl.gz", ".json", ".json.gz")


class ApplyRelationsConfig(ApplyConfig):
    """Options of ``apply-relations`` (``configs/apply-relations.yaml``): the model run, the
    input and output of :class:`~scarce.flows.apply.ApplyConfig`, and the input format."""

    format: Literal[("auto", *INPUT_FORMATS)] = Field(
        "auto", description="Input format; 'auto' guesses from the name (.jsonl/.json).")


    def check_before_run(self, runs: Path, store: Path) -> None:
        """The model, the input and the output, as the flow checks them first
        (:func:`prepare`)."""
        super().check_before_run(runs, store)
        prepare(self, runs, store, announce=False)


def prepare(config: ApplyRelationsConfig, runs: Path, store: Path,
            announce: bool = True) -> tuple[dict, Path, Path, list[Path], list[str],
                                            Path | None]:
    """The model of ``config.model_run`` in the runs folder ``runs`` (``model.json`` and its
    folder), the input (its path and files), the outputs' names and where they go (the
    output guard, with the store ``store``), all checked before anything is read: by the flow
    first, and by the command before it starts a server.  ``announce``: log which model is
    applied."""
    run_dir = resolve_model_run(config.model_run, "relations", runs)
    meta, folder = open_model(run_dir, "relations", MODEL_VERSION, MODEL_KEYS,
                              announce=announce)
    source = resolve_path(config.input)
    files = input_files(source, SUFFIXES, config.allow_empty)
    names = output_names(source, files, SUFFIXES, "assignments.parquet")
    output = None if config.output is None else output_target(
        resolve_path(config.output), names, inputs=files, source=source, store_root=store,
        runs_root=runs, force=config.force)
    return meta, folder, source, files, names, output
