"""The ``apply-relations`` flow: the clusters a finished ``relations`` run discovered, for new
entity pairs.

read the model -> parse (the training flow's own step) -> assign each pair its nearest cluster
(the step that wrote the training run's ``assignments.parquet``) -> summarise.  Nothing is
learned: the vocabulary, idf, selected words and centroids are read from the training run's
``outputs/model/`` (format in docs/relations.md).  Every input file is parsed and assigned by
store steps keyed by the file's hash and the model's, so a folder applied again computes only
its new files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from prefect import flow
from pydantic import Field

from scarce.flows.apply import (
    ApplyConfig,
    export,
    input_files,
    open_model,
    output_names,
    output_target,
    resolve_model_run,
)
from scarce.flows.config import resolve_path
from scarce.flows.run_names import namer
from scarce.flows.runtime import RunContext, RunOptions
from scarce.tasks import relations as rel

#: The endings (lower case) of the files of a folder that are read: SemEval text, JSON Lines.
SUFFIXES = (".txt", ".txt.gz", ".jsonl", ".jsonl.gz", ".json", ".json.gz")


class ApplyRelationsConfig(ApplyConfig):
    """Options of ``apply-relations`` (``configs/apply-relations.yaml``): the model run, the
    input and output of :class:`~scarce.flows.apply.ApplyConfig`, and the input format."""

    format: Literal[("auto", *rel.READERS)] = Field(
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
    meta, folder = open_model(run_dir, "relations", rel.MODEL_VERSION, rel.MODEL_KEYS,
                              announce=announce)
    source = resolve_path(config.input)
    files = input_files(source, SUFFIXES, config.allow_empty)
    names = output_names(source, files, SUFFIXES, "assignments.parquet")
    output = None if config.output is None else output_target(
        resolve_path(config.output), names, inputs=files, source=source, store_root=store,
        runs_root=runs, force=config.force)
    return meta, folder, source, files, names, output


@flow(name="apply-relations", flow_run_name=namer("apply-relations"))
def apply_relations_flow(config: ApplyRelationsConfig, options: RunOptions | None = None) -> dict:
    """Parse every input file as the training run parsed its data (every pair kept, gold
    labels when the file has them), give each pair the model's nearest cluster with its label
    words, and write the ``assignments.parquet`` of each file."""
    ctx = RunContext.open("apply-relations", config, options)
    meta, folder, source, files, names, output = prepare(config, ctx.run_dir.parent,
                                                         ctx.store.root)
    model = ctx.run(rel.read_model, **{p: folder / meta["files"][p] for p in rel.MODEL_PARTS})
    parsed = ctx.gather([ctx.submit(rel.parse, path=path, fmt=config.format, relation_types=None,
                                    include_other=True, directed=bool(meta["directed"]),
                                    source=path.name) for path in files])
    assigned = ctx.gather([ctx.submit(rel.assign_pairs, mentions=mentions, **model,
                                      contexts=meta["contexts"], params=meta["assign"])
                           for mentions in parsed])
    for name, ref in zip(names, assigned, strict=True):
        ctx.record.name_output(name, ref)
    summary = ctx.finish(ctx.run(rel.apply_metrics, assignments=assigned,
                                 dataset=config.name or source.name))
    if output is not None:
        export(ctx.store, assigned, names, output, ctx.run_dir)
    return summary
