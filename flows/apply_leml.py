"""The ``apply-leml`` flow: a finished ``leml`` run's model on new data.

open the model -> load (the training flow's own step) -> score, for every input file; then the
predictions (the columns of the training run's ``predictions.parquet``) as named outputs, and
in ``--output`` when given.  Nothing is learned: the model's ``W`` and ``H`` are read from the
training run's ``outputs/model/`` (format in ``docs/leml.md``).  Each file's load and score are
store steps keyed by the file's hash (and, for score, the model files' hashes), so a folder
applied again computes only its new files.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Literal

from prefect import flow
from pydantic import Field

from algorithms.leml import LEML
from algorithms.leml.predict import BATCH_SIZE
from flows.apply import ApplyConfig, input_files, open_model, resolve_model_run
from flows.leml import MODEL_FILES, MODEL_VERSION
from flows.runtime import RunContext, RunOptions
from tasks.errors import InputError
from tasks.leml import TOP_K, collect, load, score, task_params
from tasks.steps import log_both
from tasks.store import atomic_write_bytes

#: The endings (lower case) of the files of a folder each format reads (a Parquet pair by X).
SUFFIXES = {"xmc": (".txt", ".txt.gz"), "arff": (".arff", ".arff.gz"),
            "parquet": (".x.parquet",)}
#: What ``apply-leml`` reads from ``model.json``.
MODEL_KEYS = ("rank", "loss", "dtype", "n_labels", "fit_intercept", "normalize", "input_format",
              "shapes")


class ApplyLemlConfig(ApplyConfig):
    top_k: int = Field(TOP_K, ge=1, description="Labels per row, best first (at most the "
                       "model's label count).")
    format: Literal["xmc", "arff", "parquet"] | None = Field(
        None, description="Input format; null: the format the model was trained on.")
    batch_size: int = Field(BATCH_SIZE, ge=1, description="Rows scored at a time.")


def _run_name() -> str:
    from prefect.runtime import flow_run

    cfg = flow_run.parameters["config"]
    cfg = cfg if isinstance(cfg, dict) else cfg.model_dump()
    return f"apply-leml-{cfg['model_run']}"


@flow(name="apply-leml", flow_run_name=_run_name)
def apply_leml_flow(config: ApplyLemlConfig, options: RunOptions | None = None) -> dict:
    """Load every input file as the training run loaded its test file, score its rows with
    the stored factors and write the ``top_k`` labels of each row with their scores."""
    ctx = RunContext.open("apply-leml", config, options)
    run_dir = resolve_model_run(config.model_run, "leml", ctx.run_dir.parent)
    meta, folder = open_model(run_dir, "leml", MODEL_VERSION)
    log_both(logging.INFO, "applying the model of run %s", run_dir.name)
    missing = [key for key in MODEL_KEYS if key not in meta]
    if missing:
        raise InputError(f"model.json lacks {', '.join(missing)}", path=folder / "model.json")
    fmt, source = config.format or meta["input_format"], ctx.path(config.input)
    files = input_files(source, SUFFIXES[fmt])
    names = output_names(files, fmt) if source.is_dir() else ["predictions.parquet"]
    output = None if config.output is None else _output_target(ctx.path(config.output), names)
    read = dict(format=fmt, dtype=meta["dtype"], normalize=meta["normalize"],
                n_labels=meta["n_labels"] if fmt == "arff" else None)
    loaded = ctx.gather([ctx.submit(load, path=path, **read) for path in files])
    model = LEML(**{k: meta[k] for k in ("rank", "loss", "dtype", "fit_intercept")})
    scored = ctx.gather([
        ctx.submit(score, X=data["X"], Y=data["Y"], path=path, W=folder / MODEL_FILES["W"],
                   H=folder / MODEL_FILES["H"], format=fmt, shapes=meta["shapes"],
                   params=task_params(model, score), top_k=config.top_k,
                   batch_size=config.batch_size, method=f"leml-{meta['loss']}-k{meta['rank']}",
                   source=path.name)
        for path, data in zip(files, loaded, strict=True)])
    for name, result in zip(names, scored, strict=True):
        ctx.name_output(name, result["predictions"])
    if output is not None:
        export(ctx, [r["predictions"] for r in scored], names, output)
    return ctx.finish(ctx.run(collect, tables=[r["metrics"] for r in scored]))


def output_names(files: list[Path], fmt: str) -> list[str]:
    """The named output of each file of a folder: ``predictions/<name>.parquet``, ``<name>``
    the file's name less its format's suffix (characters other than letters, digits, ``.``,
    ``_`` and ``-`` replaced by ``_``)."""
    names: dict[str, Path] = {}
    for path in files:
        suffix = next(s for s in SUFFIXES[fmt] if path.name.lower().endswith(s))
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", path.name[: -len(suffix)]).lstrip("._-")
        name = f"predictions/{stem or 'input'}.parquet"
        if name in names:
            raise InputError(f"{names[name].name} and {path.name} would both be written to "
                             f"{name}; rename one", path=path.parent, key="input")
        names[name] = path
    return list(names)


def _output_target(target: Path, names: list[str]) -> Path:
    """``--output``, checked before anything runs: a file in an existing folder for one input
    file, a folder (created when absent) for a folder of inputs."""
    if names == ["predictions.parquet"]:
        if target.is_dir() or not target.parent.is_dir():
            raise InputError("expected a file name (.parquet or .csv) in an existing folder",
                             path=target, key="output")
    elif target.exists() and not target.is_dir():
        raise InputError("a folder of input files needs an output folder", path=target,
                         key="output")
    return target


def export(ctx: RunContext, refs: list[str], names: list[str], target: Path) -> None:
    """Write the predictions to ``target`` atomically: for one input file, the store entry's
    Parquet bytes, or CSV when the name ends in ``.csv``; for a folder of inputs, a folder of
    Parquet files named as the outputs under ``predictions/``."""
    if names == ["predictions.parquet"]:
        if target.name.lower().endswith(".csv"):
            data = ctx.read(refs[0]).to_csv(index=False).encode("utf-8")
        else:
            data = ctx.store.path(refs[0]).read_bytes()
        atomic_write_bytes(target, data)
        return
    target.mkdir(parents=True, exist_ok=True)
    for ref, name in zip(refs, names, strict=True):
        atomic_write_bytes(target / Path(name).name, ctx.store.path(ref).read_bytes())
