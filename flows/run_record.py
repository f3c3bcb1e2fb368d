"""The record of a run: what it read and wrote, its named outputs, and its folder.

A run's :class:`RunRecord` (``ctx.record``) collects, while the flow runs, every input file
with its sha256, every store entry a step returned (and whether it was a cache hit), the
facts a flow notes (:meth:`RunRecord.note`), and the files the user came for
(:meth:`RunRecord.name_output`, :meth:`RunRecord.write_output`).  When the run finishes it
writes them as the run folder: ``metrics.parquet``, ``plots/``, ``outputs/`` and
``manifest.json`` (:meth:`RunRecord.write_folder`), from which ``scarce rerun`` repeats it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel

from scarce.flows import manifest as mf
from scarce.flows.config import FlowConfig, project_root
from scarce.tasks.errors import InputError
from scarce.tasks.steps import Step, _iter_refs, cached_file_sha256, log_both
from scarce.tasks.store import Store
from scarce.tasks.store.atomic import (
    FolderSyncs,
    atomic_write_bytes,
    atomic_write_parquet,
    file_sha256,
    fsync_folder,
    make_folder,
    synced_folders,
)
from scarce.tasks.store.encoding import encode
from scarce.tasks.store.layout import SUFFIX
from scarce.tasks.store.leases import Lease

OUTPUTS = "outputs"  # the run folder's subfolder of named outputs


class RunRecord:
    """What one run used and produced, written as its folder when it finishes."""

    def __init__(self, run_id: str, flow: str, store: Store, lease: Lease | None = None) -> None:
        self.run_id, self.flow, self.store, self.lease = run_id, flow, store, lease
        self.started = dt.datetime.now(dt.UTC).isoformat()
        self.inputs: dict[str, str] = {}  # input file (relative to the project) -> sha256
        self.outputs: dict[str, dict[str, Any]] = {}  # store ref -> its step, cached, code
        self.cache_hits: list[str] = []  # steps whose outputs came from the cache
        self.store_hits: dict[str, int] = {}  # steps resolved without a task run -> count
        self.notes: dict[str, Any] = {}  # facts for the manifest's `notes`
        self.named: dict[str, str] = {}  # outputs/<name> -> store ref
        self.files: dict[str, bytes] = {}  # outputs/<name> -> bytes
        self.volatile_files: set[str] = set()  # not compared by rerun

    # -- while the run runs ---------------------------------------------------
    def note_inputs(self, st: Step, kwargs: dict[str, Any]) -> None:
        """Record the sha256 of every input file among a step's arguments (its ``files``);
        a missing one is refused, naming the step's argument."""
        for name in st.files:
            values = kwargs.get(name)
            for p in values if isinstance(values, list | tuple) else [values]:
                if p is None:
                    continue
                if not Path(p).is_file():
                    raise InputError("input file not found", path=p, key=f"{st.name}.{name}")
                self.inputs[_relative(p)] = cached_file_sha256(p)

    def note_outputs(self, st: Step, refs: Any, cached: bool) -> Any:
        """Record the store entries a step returned (kept by the run's lease) and return them."""
        if self.lease is not None:
            self.lease.note(_iter_refs(refs))
        for ref in _iter_refs(refs):
            self.outputs[ref] = {
                "step": st.name,
                "ref": ref,
                "cached": cached,
                "volatile": st.is_volatile(ref),
                "code": st.code_hash,  # the step's code digest (part of its key)
            }
        if cached:
            self.cache_hits.append(st.name)
            log_both(logging.INFO, "cache hit: %s -> %s", st.name, ", ".join(_iter_refs(refs)))
        return refs

    def note_store_hit(self, st: Step) -> None:
        """Count a step resolved from the store without a task run."""
        self.store_hits[st.name] = self.store_hits.get(st.name, 0) + 1

    def note(self, name: str, value: Any) -> None:
        """A fact about how the run ran (JSON-like), recorded under the manifest's ``notes``:
        for example the Dask cluster a step used."""
        self.notes[name] = json.loads(json.dumps(value, default=str))

    def decide(self, what: str, value: Any, why: str) -> None:
        """A choice the run made from the data (the number of clusters, a loss ratio chosen on
        dev, where training stopped): logged with its reason, so the console and the Prefect
        UI say it as it happens, and kept under the manifest's ``notes["decisions"]``."""
        if hasattr(value, "item"):  # a numpy scalar: its Python value
            value = value.item()
        value = json.loads(json.dumps(value, default=str))
        log_both(logging.INFO, "decision: %s = %s (%s)", what, value, why)
        self.notes.setdefault("decisions", []).append({"what": what, "value": value,
                                                       "why": why})

    def adopt(self, outputs: list[dict[str, Any]], child: str | None) -> None:
        """Record another run's outputs as this run's (an experiment's children): they are
        listed in this manifest, kept by gc, and compared by ``scarce rerun``."""
        if self.lease is not None:
            self.lease.note(o["ref"] for o in outputs)
        for o in outputs:
            self.outputs[o["ref"]] = {"step": o["step"], "ref": o["ref"], "cached": o["cached"],
                                      "volatile": o["volatile"], "code": o.get("code"),
                                      "child": child}

    # -- named outputs: what the user came for, as files in the run folder ----------
    def name_output(self, name: str, ref: str) -> None:
        """Publish the store entry ``ref`` as ``outputs/<name>`` of the run folder.

        ``name`` is a relative path ending in ``.parquet`` (``assignments.parquet``,
        ``model/W.parquet``).  :meth:`write_folder` hard-links the entry there (a copy across
        file systems), so the store stays the one truth; the manifest lists it with its
        sha256, and ``scarce rerun`` compares it.
        """
        check_output_name(name)
        if not name.endswith(SUFFIX):
            raise ValueError(f"output {name!r}: a store entry is published as a .parquet file")
        if name in self.named or name in self.files:
            raise ValueError(f"output {name!r} named twice")
        self.named[name] = ref

    def write_output(self, name: str, data: bytes | str, volatile: bool = False) -> None:
        """A file of the run's outputs that is not a store entry (readable rules, a model's
        JSON, CoNLL-U); written with the run folder, listed and compared like the others,
        unless ``volatile`` (it names things that differ between equal runs, such as run
        ids)."""
        check_output_name(name)
        if name in self.named or name in self.files:
            raise ValueError(f"output {name!r} named twice")
        self.files[name] = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        if volatile:
            self.volatile_files.add(name)

    # -- when it finishes ---------------------------------------------------------
    def publish(self, run_dir: Path, **folder: Any) -> dict[str, Any]:
        """The run folder written as :meth:`write_folder` writes it (``folder``: its keyword
        arguments), under a hidden name beside ``run_dir`` (``.<run-id>.partial-<hex>``),
        then renamed to ``run_dir``; returns the manifest.

        A run that fails meanwhile (an ``OSError`` raised: a full disk, a read-only runs
        folder) leaves no folder under either name.  The rename comes after every file of
        the folder was made to last (:meth:`write_folder`), and is fsync-ed itself, so that
        no crash leaves a run folder named as complete without its files.
        """
        partial = run_dir.with_name(f".{self.run_id}{mf.PARTIAL}{secrets.token_hex(3)}")
        try:
            manifest = self.write_folder(partial, **folder)
            if run_dir.exists():
                raise FileExistsError(f"run folder {run_dir} exists")
            os.rename(partial, run_dir)
            fsync_folder(run_dir.parent)
        finally:
            if partial.exists():
                shutil.rmtree(partial, ignore_errors=True)
        return manifest

    def write_folder(self, folder: Path, *, config: FlowConfig, options: BaseModel,
                     metrics: pd.DataFrame, plots: dict[str, bytes],
                     plot_refs: dict[str, str], headline: dict[str, float],
                     run: dict[str, Any]) -> dict[str, Any]:
        """Everything of the run folder, written into ``folder`` (a new folder); returns the
        manifest.

        ``plots`` and ``plot_refs`` are the run's figures and their store memos
        (:class:`scarce.flows.artifacts.Artifacts`); ``run`` the facts of the Prefect run it was
        (flow run id, deployment, task runner).  Its files are one group of writes
        (:class:`~scarce.tasks.store.atomic.FolderSyncs`): each folder is fsync-ed once, when
        the last file is written, so when this returns everything in the folder lasts through
        a crash.  The folder's own name does not (its parent is not fsync-ed for it): it is
        temporary, and the name that must last is the one :meth:`publish` gives it."""
        with synced_folders() as syncs:
            make_folder(folder.parent, syncs)
            folder.mkdir()
            return self._write_folder(folder, syncs, config=config, options=options,
                                      metrics=metrics, plots=plots, plot_refs=plot_refs,
                                      headline=headline, run=run)

    def _write_folder(self, folder: Path, syncs: FolderSyncs, *, config: FlowConfig,
                      options: BaseModel, metrics: pd.DataFrame, plots: dict[str, bytes],
                      plot_refs: dict[str, str], headline: dict[str, float],
                      run: dict[str, Any]) -> dict[str, Any]:
        from scarce.flows.artifacts import PLOTS

        metrics_path = folder / mf.METRICS
        atomic_write_parquet(metrics_path, encode(metrics), syncs)
        figures = []
        for key, png in sorted(plots.items()):
            rel = f"{PLOTS}/{key}.png"
            atomic_write_bytes(folder / rel, png, syncs)
            figures.append({"name": key, "path": rel, "sha256": file_sha256(folder / rel),
                            "ref": plot_refs.get(key)})
        named = self._write_named_outputs(folder / OUTPUTS, syncs)
        outputs = [{**o, "sha256": self.store.sha256(o["ref"])}
                   for o in sorted(self.outputs.values(), key=lambda o: o["ref"])]
        manifest = {
            "schema": mf.SCHEMA_VERSION,
            "run_id": self.run_id,
            "flow": self.flow,
            "started": self.started,
            "finished": dt.datetime.now(dt.UTC).isoformat(),
            "config": config.model_dump(mode="json"),
            "seed": config.seed,
            "code": mf.code_version(),
            "environment": mf.environment(),
            "options": options.model_dump(mode="json", exclude={"run_id", "refresh"}),
            "store": str(self.store.root),
            "inputs": [{"path": p, "sha256": h} for p, h in sorted(self.inputs.items())],
            "outputs": outputs,
            "metrics_sha256": file_sha256(metrics_path),
            "cache_hits": sorted(set(self.cache_hits)),
            "plots": figures,
            "named_outputs": named,
            "prefect_flow_run_id": run.get("prefect_flow_run_id"),
            "deployment": run.get("deployment"),
            "task_runner": run.get("task_runner"),
            "tags": run.get("tags") or [],
            "notes": self.notes,
            "headline": headline,
        }
        mf.write_manifest(folder, manifest, syncs)
        return manifest

    def _write_named_outputs(self, root: Path, syncs: FolderSyncs) -> list[dict[str, Any]]:
        out = []
        for name, ref in sorted(self.named.items()):
            path = root / name
            make_folder(path.parent, syncs)
            link_or_copy(self.store.path(ref), path, syncs)
            out.append({"name": name, "ref": ref, "sha256": file_sha256(path)})
        for name, data in sorted(self.files.items()):
            path = root / name
            atomic_write_bytes(path, data, syncs)  # (with its missing parent folders)
            out.append({"name": name, "ref": None, "sha256": hashlib.sha256(data).hexdigest(),
                        **({"volatile": True} if name in self.volatile_files else {})})
        return sorted(out, key=lambda o: o["name"])


def _relative(p: str | os.PathLike[str]) -> str:
    """``p`` relative to the project root where it lies under it, else absolute."""
    path = Path(p).resolve()
    try:
        return str(path.relative_to(project_root()))
    except ValueError:
        return str(path)


def check_output_name(name: str) -> None:
    """Refuse an output name that is not a relative path of plain names."""
    parts = Path(name).parts
    if (not parts or Path(name).is_absolute() or any(p in ("", ".", "..") for p in parts)
            or not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", p) for p in parts)):
        raise ValueError(f"not an output name: {name!r} (a relative path of plain names)")


def link_or_copy(source: Path, target: Path, syncs: FolderSyncs | None = None) -> None:
    """``target`` as a hard link to ``source`` (the same bytes, no copy), or a copy where the
    two are on different file systems; atomic either way (a temporary name, then a rename),
    and lasting once its folder is fsync-ed: at once, or with the group ``syncs``."""
    with nullcontext(syncs) if syncs is not None else synced_folders() as group:
        tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
        try:
            try:
                os.link(source, tmp)
            except OSError:  # another file system, or links not allowed: copy the bytes
                with open(source, "rb") as fh:
                    atomic_write_bytes(tmp, fh.read(), group)
            os.replace(tmp, target)
            group.add(target.parent)
        finally:
            tmp.unlink(missing_ok=True)
