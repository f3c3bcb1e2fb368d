"""Using what a run learned: the model format and the apply flows' common part.

A training run writes its model to ``data/runs/<run-id>/outputs/model/``: Parquet files (the
learned arrays and tables, hard links of store entries) and ``model.json``, a small document
naming the flow, the format version and what the arrays mean.  Nothing is pickled.  An apply
flow (``apply-leml``, ``apply-relations``, ``apply-strip``) reads that folder, runs the training
flow's own readers and feature steps on new input, and writes predictions; it learns nothing
(its steps are not training steps, which a test checks from its manifest).

``model_run`` names the training run: a run id, ``latest`` (the newest finished run of the
flow), or ``latest:<name>`` (the newest finished run started by the deployment ``<name>``, or
whose config ``name`` is ``<name>``), so a scheduled deployment can apply whatever the nightly
training run learned last.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from pydantic import Field

from scarce.flows import manifest as mf
from scarce.flows.config import SAFE_NAME, FlowConfig
from scarce.flows.outputs import Output, Protected, check_output, check_targets, write_failed
from scarce.tasks.errors import InputError
from scarce.tasks.readers.text import check_no_gzip_twin
from scarce.tasks.steps import log_both
from scarce.tasks.store.atomic import atomic_write_bytes, make_folder, synced_folders

MODEL_DIR = "model"
MODEL_JSON = "model.json"


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


def model_document(flow: str, version: int, **meta: Any) -> str:
    """The text of ``model.json``: the flow, the format version and the model's metadata."""
    return json.dumps({"format": f"scarce-{flow}-model", "version": int(version), **meta},
                      indent=2, sort_keys=True) + "\n"


def _finished_runs(runs_root: Path) -> list[tuple[str, dict[str, Any]]]:
    """(run id, manifest) of every finished run, oldest first by finishing time."""
    out = []
    for d in mf.run_folders(runs_root):
        try:
            out.append((d.name, mf.read_manifest(d)))
        except InputError:
            continue  # a damaged manifest is no model to apply
    return sorted(out, key=lambda item: (str(item[1].get("finished", "")), item[0]))


def resolve_model_run(model_run: str, flow: str, runs_root: Path) -> Path:
    """The run folder ``model_run`` names (see the module docstring); an :class:`InputError`
    naming ``model_run`` when there is none or it is not a run of ``flow``."""
    if model_run == "latest" or model_run.startswith("latest:"):
        name = model_run.partition(":")[2] or None
        candidates = [
            run_id for run_id, m in _finished_runs(runs_root)
            if m["flow"] == flow and (name is None or name in (
                m.get("deployment"), (m.get("config") or {}).get("name")))
        ]
        if not candidates:
            what = f"{flow} run" + (f" named {name!r}" if name else "")
            raise InputError(f"no finished {what} in {runs_root}", key="model_run")
        return runs_root / candidates[-1]
    run_dir = runs_root / model_run
    if "/" in model_run or model_run.startswith(".") or not (run_dir / mf.MANIFEST).is_file():
        raise InputError(f"no run {model_run!r} in {runs_root} (see `scarce runs`)",
                         key="model_run")
    m = mf.read_manifest(run_dir)
    if m["flow"] != flow:
        raise InputError(f"run {model_run!r} is a {m['flow']} run, not a {flow} run",
                         key="model_run")
    return run_dir


def open_model(run_dir: Path, flow: str, version: int, required: tuple[str, ...] = (),
               announce: bool = True) -> tuple[dict[str, Any], Path]:
    """``model.json`` of a training run and the folder of its arrays, after checking that it
    is a model of ``flow`` in format ``version`` holding the ``required`` keys; ``announce``
    logs which run's model it is (an apply run's check before it starts says nothing)."""
    folder = run_dir / "outputs" / MODEL_DIR
    path = folder / MODEL_JSON
    if not path.is_file():
        raise InputError(f"run {run_dir.name} has no model (outputs/{MODEL_DIR}/{MODEL_JSON} "
                         "is missing; a run made before models were written can be repeated "
                         "with `scarce rerun`)", path=path)
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"model.json is not valid JSON ({exc})", path=path) from None
    if not isinstance(meta, dict) or meta.get("format") != f"scarce-{flow}-model":
        got = meta.get("format") if isinstance(meta, dict) else type(meta).__name__
        raise InputError(f"not a {flow} model (format {got!r})", path=path)
    if meta.get("version") != version:
        raise InputError(f"model format version {meta.get('version')!r}; this code reads "
                         f"version {version}: repeat the training run (`scarce rerun "
                         f"{run_dir.name}`) to write the model in the current format",
                         path=path)
    missing = [key for key in required if key not in meta]
    if missing:
        raise InputError(f"model.json lacks {', '.join(missing)}", path=path)
    if announce:
        log_both(logging.INFO, "applying the model of run %s", run_dir.name)
    return meta, folder


def input_files(path: Path, suffixes: tuple[str, ...], allow_empty: bool = False) -> list[Path]:
    """The input file, or every file of a folder whose name ends in one of ``suffixes`` (none
    is an error unless ``allow_empty``; a file there both plain and gzipped, ``x`` and
    ``x.gz``, is an error naming both: :func:`scarce.tasks.readers.text.check_no_gzip_twin`)."""
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.iterdir()
                       if p.is_file() and p.name.lower().endswith(suffixes))
        check_no_gzip_twin(files, key="input")
        if not files and not allow_empty:
            raise InputError(f"no input file ({', '.join(suffixes)}) in the folder", path=path)
        return files
    raise InputError("input not found", path=path, key="input")


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
