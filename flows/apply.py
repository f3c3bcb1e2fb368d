"""Using what a run learned: the apply flows' common part.

A training run writes its model to ``data/runs/<run-id>/outputs/model/`` (the format, and how
``model_run`` names the run, are :mod:`scarce.flows.model_format`'s, whose names are importable
from here too).  An apply flow (``apply-leml``, ``apply-relations``, ``apply-strip``) reads that
folder, runs the training flow's own readers and feature steps on new input, and writes
predictions; it learns nothing (its steps are not training steps, which a test checks from its
manifest).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field

from scarce.flows.config import SAFE_NAME, FlowConfig
from scarce.flows.model_format import MODEL_DIR as MODEL_DIR  # (re-exported: the model format)
from scarce.flows.model_format import MODEL_JSON as MODEL_JSON
from scarce.flows.model_format import input_files as input_files
from scarce.flows.model_format import model_document as model_document
from scarce.flows.model_format import open_model as open_model
from scarce.flows.model_format import resolve_model_run as resolve_model_run
from scarce.flows.outputs import Output, Protected, check_output, check_targets, write_failed
from scarce.tasks.errors import InputError
from scarce.tasks.store.atomic import atomic_write_bytes, make_folder, synced_folders


class ApplyConfig(FlowConfig):
    """Keys every apply flow has."""

    model_run: str = Field(
        description="The training run whose model is applied: a run id, 'latest' (the newest "
        "finished run of the flow) or 'latest:<name>' (of that deployment or config name).",
        pattern="^(?:latest:)?" + SAFE_NAME.removeprefix("^"),  # in the run's name and tags
        max_length=200,
    )
    input: str = Field(
        description="A file to apply the model to, or a folder: every file in it (sorted), "
        "each written to its own output; files already applied with the same model are "
        "taken from the store.",
        min_length=1,
    )
    output: str | None = Field(
        None,
        description="Output file (one input file) or folder (a folder of inputs); default: "
        "the apply run's own outputs/ folder.",
    )
    force: bool = Field(
        False,
        description="Replace files that already exist at `output` (--force). Without it an "
        "existing file is an error and nothing is written.",
    )
    allow_empty: bool = Field(
        False,
        description="A folder with no input file finishes with nothing to do instead of an "
        "error (a scheduled run over an inbox folder).",
    )


# -- where the results go -------------------------------------------------------------------
def output_names(source: Path, files: list[Path], suffixes: tuple[str, ...],
                 single: str) -> list[str]:
    """The named output of each input file: ``single`` (``predictions.parquet``) when the
    input is one file; for a folder, ``<stem of single>/<name>.parquet`` with ``<name>`` the
    file's name less its suffix (characters other than letters, digits, ``.``, ``_`` and ``-``
    replaced by ``_``)."""
    if not source.is_dir():
        return [single]
    folder = single.removesuffix(".parquet")
    names: dict[str, Path] = {}
    for path in files:
        suffix = next((s for s in suffixes if path.name.lower().endswith(s)), "")
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", path.name[: len(path.name) - len(suffix)])
        name = f"{folder}/{stem.lstrip('._-') or 'input'}.parquet"
        if name in names:
            raise InputError(f"{names[name].name} and {path.name} would both be written to "
                             f"{name}; rename one", path=path.parent, key="input")
        names[name] = path
    return list(names)


def output_target(target: Path, names: list[str], *, inputs: list[Path], source: Path,
                  store_root: Path, runs_root: Path, force: bool) -> Path:
    """``output``, checked before anything runs: a ``.parquet`` or ``.csv`` file for one input
    file, a folder for a folder of inputs (either created with its parent folders when
    absent); every file it would write passes the output guard
    (:func:`scarce.flows.outputs.check_targets`)."""
    protected = Protected.of(store_root, runs_root)
    if len(names) == 1 and "/" not in names[0]:
        if target.is_dir():
            raise InputError("expected a file name (.parquet or .csv), not a folder",
                             path=target, key="output")
        check_output(target, Output("file", (".parquet", ".csv")), force=force,
                     protected=protected, source=source)
        files = [target]
    else:
        if target.exists() and not target.is_dir():
            raise InputError("a folder of input files needs an output folder", path=target,
                             key="output")
        check_output(target, Output("folder"), force=force, protected=protected)
        files = [target / Path(name).name for name in names]
    check_targets(files, inputs=inputs, source=source, force=force, protected=protected)
    return target


def export(store: Any, refs: list[str], names: list[str], target: Path, run_dir: Path) -> None:
    """Write the results to ``target`` atomically: for one input file, the store entry's
    Parquet bytes, or CSV when the name ends in ``.csv``; for a folder of inputs, a folder of
    Parquet files named as the outputs.  Called once the run is recorded: a write the system
    refuses (a full disk) is one line naming ``target`` and the run folder keeping the
    results."""
    try:
        if len(names) == 1 and "/" not in names[0]:
            if target.name.lower().endswith(".csv"):
                data = store.read(refs[0]).to_csv(index=False).encode("utf-8")
            else:
                data = store.path(refs[0]).read_bytes()
            atomic_write_bytes(target, data)  # (with its missing parent folders)
            return
        with synced_folders() as syncs:  # the folder fsync-ed once, after the last file
            make_folder(target, syncs)
            for ref, name in zip(refs, names, strict=True):
                atomic_write_bytes(target / Path(name).name, store.path(ref).read_bytes(),
                                   syncs)
    except OSError as exc:
        raise write_failed(exc, target, "output", f"{run_dir / 'outputs'}") from None
