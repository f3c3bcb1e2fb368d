"""The model format: where a training run keeps its model, ``model.json``, and finding the run.

A training run writes its model to ``data/runs/<run-id>/outputs/model/``: Parquet files (the
learned arrays and tables, hard links of store entries) and ``model.json``, a small document
naming the flow, the format version and what the arrays mean.  Nothing is pickled.

``model_run`` names the training run: a run id, ``latest`` (the newest finished run of the
flow), or ``latest:<name>`` (the newest finished run started by the deployment ``<name>``, or
whose config ``name`` is ``<name>``), so a scheduled deployment can apply whatever the nightly
training run learned last.

Both the apply flows (:mod:`scarce.flows.apply`, which re-exports these names) and a model
loaded into Python (:func:`scarce.load_model`) read models through this module; it imports
neither the configs' machinery nor the store's, so that a loaded model does not pay for them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from scarce.flows import manifest as mf
from scarce.tasks.errors import InputError
from scarce.tasks.logs import log_both
from scarce.tasks.readers.text import check_no_gzip_twin

MODEL_DIR = "model"
MODEL_JSON = "model.json"


def model_document(flow: str, version: int, **meta: Any) -> str:
    """The text of ``model.json``: the flow, the format version and the model's metadata."""
    return json.dumps({"format": f"scarce-{flow}-model", "version": int(version), **meta},
                      indent=2, sort_keys=True) + "\n"


def _finished_runs(runs_root: Path) -> list[tuple[str, dict[str, Any]]]:
    """(run id, the manifest's :data:`~scarce.flows.manifest.RUN_KEYS`) of every finished run,
    oldest first by finishing time."""
    out = []
    for d in mf.run_folders(runs_root):
        try:
            out.append((d.name, mf.read_run_keys(d)))
        except InputError:
            continue  # a damaged manifest is no model to apply
    return sorted(out, key=lambda item: (item[1]["finished"] or "", item[0]))


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
    m = mf.read_run_keys(run_dir)
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
