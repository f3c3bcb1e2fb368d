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

import logging
import re
from pathlib import Path
from typing import Literal

from prefect import flow
from pydantic import Field

from flows.apply import ApplyConfig, input_files, open_model, resolve_model_run
from flows.relations import MODEL_VERSION
from flows.runtime import RunContext, RunOptions
from tasks import relations as rel
from tasks.errors import InputError
from tasks.steps import log_both
from tasks.store import atomic_write_bytes

#: The endings (lower case) of the files of a folder that are read: SemEval text, JSON Lines.
SUFFIXES = (".txt", ".txt.gz", ".jsonl", ".jsonl.gz", ".json", ".json.gz")
#: What ``apply-relations`` reads from ``model.json``.
MODEL_KEYS = ("directed", "contexts", "assign", "files", "dataset")


class ApplyRelationsConfig(ApplyConfig):
    """Options of ``apply-relations`` (``configs/apply-relations.yaml``): the model run, the
    input and output of :class:`~flows.apply.ApplyConfig`, and the input format."""

    format: Literal["auto", "semeval", "jsonl"] = Field(
        "auto", description="Input format; 'auto' guesses from the name (.jsonl/.json).")


@flow(name="apply-relations", flow_run_name="apply-relations-{config.model_run}")
def apply_relations_flow(config: ApplyRelationsConfig, options: RunOptions | None = None) -> dict:
    """Parse every input file as the training run parsed its data (every pair kept, gold
    labels when the file has them), give each pair the model's nearest cluster with its label
    words, and write the ``assignments.parquet`` of each file."""
    ctx = RunContext.open("apply-relations", config, options)
    run_dir = resolve_model_run(config.model_run, "relations", ctx.run_dir.parent)
    meta, folder = open_model(run_dir, "relations", MODEL_VERSION)
    log_both(logging.INFO, "applying the model of run %s", run_dir.name)
    missing = [key for key in MODEL_KEYS if key not in meta]
    if missing:
        raise InputError(f"model.json lacks {', '.join(missing)}", path=folder / "model.json")
    source = ctx.path(config.input)
    files = input_files(source, SUFFIXES)
    names = output_names(files) if source.is_dir() else ["assignments.parquet"]
    output = None if config.output is None else output_target(ctx.path(config.output), names)
    model = ctx.run(rel.read_model, **{p: folder / meta["files"][p] for p in rel.MODEL_PARTS})
    parsed = ctx.gather([ctx.submit(rel.parse, path=path, fmt=config.format, relation_types=None,
                                    include_other=True, directed=bool(meta["directed"]),
                                    source=path.name) for path in files])
    assigned = ctx.gather([ctx.submit(rel.assign_pairs, mentions=mentions, **model,
                                      contexts=meta["contexts"], params=meta["assign"])
                           for mentions in parsed])
    for name, ref in zip(names, assigned, strict=True):
        ctx.name_output(name, ref)
    if output is not None:
        export(ctx, assigned, names, output)
    return ctx.finish(ctx.run(rel.apply_metrics, assignments=assigned,
                              dataset=config.name or source.name))


def output_names(files: list[Path]) -> list[str]:
    """The named output of each file of a folder: ``assignments/<name>.parquet``, ``<name>``
    the file's name less its suffix (characters other than letters, digits, ``.``, ``_`` and
    ``-`` replaced by ``_``)."""
    names: dict[str, Path] = {}
    for path in files:
        suffix = next(s for s in SUFFIXES if path.name.lower().endswith(s))
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", path.name[: -len(suffix)]).lstrip("._-")
        name = f"assignments/{stem or 'input'}.parquet"
        if name in names:
            raise InputError(f"{names[name].name} and {path.name} would both be written to "
                             f"{name}; rename one", path=path.parent, key="input")
        names[name] = path
    return list(names)


def output_target(target: Path, names: list[str]) -> Path:
    """``output``, checked before anything runs: a file in an existing folder for one input
    file, a folder (created when absent, in an existing folder) for a folder of inputs."""
    if names == ["assignments.parquet"]:
        if target.is_dir() or not target.parent.is_dir():
            raise InputError("expected a file name (.parquet or .csv) in an existing folder",
                             path=target, key="output")
    elif (target.exists() and not target.is_dir()) or not target.parent.is_dir():
        raise InputError("a folder of input files needs an output folder (in an existing "
                         "folder)", path=target, key="output")
    return target


def export(ctx: RunContext, refs: list[str], names: list[str], target: Path) -> None:
    """Write the assignments to ``target`` atomically: for one input file, the store entry's
    Parquet bytes, or CSV when the name ends in ``.csv``; for a folder of inputs, a folder of
    Parquet files named as the outputs under ``assignments/``."""
    if names == ["assignments.parquet"]:
        if target.name.lower().endswith(".csv"):
            data = ctx.read(refs[0]).to_csv(index=False).encode("utf-8")
        else:
            data = ctx.store.path(refs[0]).read_bytes()
        atomic_write_bytes(target, data)
        return
    target.mkdir(exist_ok=True)
    for ref, name in zip(refs, names, strict=True):
        atomic_write_bytes(target / Path(name).name, ctx.store.path(ref).read_bytes())
