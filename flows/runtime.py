"""The run a flow belongs to: its store, its record of outputs, its manifest.

Kept as one module: a run's context, its record of outputs and its artifacts share the run's
folder and its lease.

A flow opens a :class:`RunContext` first and calls its steps through it::

    ctx = RunContext.open("leml", config, options)
    train = ctx.run(load_xmc, path=cfg.train, dtype=cfg.dtype)
    ...
    return ctx.finish(metrics)

``run`` and ``map`` submit the step's Prefect task, log which steps were cache
hits, and remember every ref (and every input file) for the manifest.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field

from scarce.flows import manifest as mf
from scarce.flows.config import SAFE_NAME, FlowConfig, project_root, resolve_path
from scarce.flows.tags import tag_flow_run
from scarce.tasks.errors import InputError
from scarce.tasks.steps import Step, _iter_refs, cached_file_sha256, log_both
from scarce.tasks.store import (
    SUFFIX,
    CorruptEntry,
    Lease,
    Store,
    atomic_write_bytes,
    atomic_write_parquet,
    encode,
    file_sha256,
)

log = logging.getLogger("scarce.run")

METRIC_COLUMNS = ["dataset", "method", "metric", "value"]
PLOTS = "plots"  # the run folder's subfolder of PNG figures (not compared by rerun)
PARTIAL = mf.PARTIAL  # a run folder being written: .<run-id>.partial-<hex>, renamed when complete


# Leases of the runs this process opened; a run that fails before `finish` leaves its lease to
# `release_leases`, called by whoever started the flow (the command line, after each flow).
_open_leases: list[Lease] = []


def release_leases() -> None:
    """Release every lease this process still holds (runs that ended without ``finish``)."""
    while _open_leases:
        _open_leases.pop().release()


class RunOptions(BaseModel):
    """Where a run keeps its data, and whether it may reuse the cache."""

    store: str | None = Field(
        None, description="Store root (a path or file:// URL); default data/cache or $SCARCE_STORE."
    )
    runs: str | None = Field(None, description="Runs folder; default data/runs or $SCARCE_RUNS.")
    run_id: str | None = Field(
        None, pattern=SAFE_NAME, description="Run id; generated when empty."
    )
    refresh: bool = Field(False, description="Ignore cached results and recompute every step.")
    rerun_of: str | None = Field(None, description="The run this one reproduces, if any.")
    runner: str = Field("local", description="Task runner the flow was started with.")
    dask_address: str | None = Field(
        None, description="Scheduler of the Dask cluster the run used, if it was given.")


def default_store_root() -> str | Path:
    """``$SCARCE_STORE`` (a path or a ``file://`` URL) or the project's ``data/cache``."""
    return os.environ.get("SCARCE_STORE") or project_root() / "data" / "cache"


def default_runs_root() -> Path:
    return Path(os.environ.get("SCARCE_RUNS") or project_root() / "data" / "runs")


def check_writable_folder(path: Path, key: str) -> None:
    """Refuse, before a run computes, a folder it could not write: ``path`` (or, while it does
    not exist, its nearest existing parent) must be a folder this process may write.

    Raises
    ------
    InputError
        Naming ``path`` and ``key`` (the option or variable that chose it).
    """
    existing = Path(path)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"{existing} is not a folder", path=path, key=key)
    # access(2) reports a read-only file system (EROFS) for root too
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{existing} is not writable (read-only, or not ours)", path=path,
                         key=key)


def new_run_id(flow: str, name: str | None) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    slug = "-".join(p for p in (flow, name) if p)
    return f"{slug}-{stamp}-{secrets.token_hex(2)}"


def _flow_run_id() -> str | None:
    """The Prefect flow run this run is (its page in the UI), if any."""
    from prefect.runtime import flow_run

    run_id = flow_run.id
    return str(run_id) if run_id else None


def _deployment_name() -> str | None:
    """The deployment that started this flow run (``scarce serve``), if any."""
    from prefect.runtime import deployment

    try:
        name = deployment.name
    except Exception:  # no API to ask: not a deployment run
        return None
    return str(name) if name else None


def _task_runner() -> str | None:
    """Class name of the task runner of the flow run in progress (``DaskTaskRunner``, ...)."""
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    runner = getattr(ctx, "task_runner", None)
    return type(runner).__name__ if runner is not None else None


@dataclass(frozen=True)
class _Hit:
    """A submitted step resolved from the store (see :meth:`RunContext._store_hit`)."""

    refs: Any


@dataclass
class RunContext:
    flow: str
    config: FlowConfig
    store: Store
    run_dir: Path
    run_id: str
    options: RunOptions
    started: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[str, str] = field(default_factory=dict)
    cache_hits: list[str] = field(default_factory=list)
    store_hits: dict[str, int] = field(default_factory=dict)  # steps resolved without a task run
    fast_cache: bool = True
    plots: dict[str, bytes] = field(default_factory=dict)
    lease: Lease | None = None  # keeps what this run uses safe from `scarce cache gc`
    plot_refs: dict[str, str] = field(default_factory=dict)  # plot name -> its store memo
    named: dict[str, str] = field(default_factory=dict)  # outputs/<name> -> store ref
    files: dict[str, bytes] = field(default_factory=dict)  # outputs/<name> -> bytes
    volatile_files: set[str] = field(default_factory=set)  # not compared by rerun
    notes: dict[str, Any] = field(default_factory=dict)  # facts for the manifest's `notes`
    _plot_memos: dict[str, str] = field(default_factory=dict)  # sha256 of a PNG -> its memo

    @classmethod
    def open(cls, flow: str, config: FlowConfig, options: RunOptions | None = None) -> RunContext:
        options = options or RunOptions()
        try:
            store = Store(options.store or default_store_root())
        except ValueError as exc:
            raise InputError(str(exc), key="store (or $SCARCE_STORE)") from None
        run_id = options.run_id or new_run_id(flow, config.name)
        run_dir = Path(options.runs or default_runs_root()) / run_id
        tag_flow_run(flow, config, options)
        ctx = cls(flow, config, store, run_dir, run_id, options)
        ctx.lease = store.lease(run_id)
        _open_leases.append(ctx.lease)
        return ctx

    # -- calling steps ------------------------------------------------------
    def _task(self, st: Step):
        task = st.bind(self.store)
        return task.with_options(refresh_cache=True) if self.options.refresh else task

    def _note_files(self, st: Step, kwargs: dict[str, Any]) -> None:
        for name in st.files:
            values = kwargs.get(name)
            for p in values if isinstance(values, list | tuple) else [values]:
                if p is None:
                    continue
                if not Path(p).is_file():
                    raise InputError("input file not found", path=p, key=f"{st.name}.{name}")
                self.inputs[self._rel(p)] = cached_file_sha256(p)

    def _rel(self, p: str | os.PathLike[str]) -> str:
        path = Path(p).resolve()
        try:
            return str(path.relative_to(project_root()))
        except ValueError:
            return str(path)

    def _note_outputs(self, st: Step, refs: Any, cached: bool) -> Any:
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

    def note(self, name: str, value: Any) -> None:
        """A fact about how the run ran (JSON-like), recorded under the manifest's ``notes``:
        for example the Dask cluster a step used."""
        self.notes[name] = json.loads(json.dumps(value, default=str))

    def adopt(self, outputs: list[dict[str, Any]], child: str | None) -> None:
        """Record another run's outputs as this run's (an experiment's children): they are
        listed in this manifest, kept by gc, and compared by ``scarce rerun``."""
        if self.lease is not None:
            self.lease.note(o["ref"] for o in outputs)
        for o in outputs:
            self.outputs[o["ref"]] = {"step": o["step"], "ref": o["ref"], "cached": o["cached"],
                                      "volatile": o["volatile"], "code": o.get("code"),
                                      "child": child}

    def _record(self, st: Step, state: Any) -> Any:
        return self._note_outputs(st, state.result(), state.name == "Cached")

    def _store_hit(self, st: Step, kwargs: dict[str, Any]) -> Any:
        """The refs of a clean cache hit, read from the store before any task run starts.

        A Prefect task run costs a few API calls even when cached, which made a cached rerun
        of the relations flow, with its hundreds of small stability units, take over half
        the first run's time.  A step whose cache record exists and whose entries all pass
        their checksums and file hashes (:meth:`tasks.steps.Step.clean_hit`) is resolved
        here, without a task run (the run's ``cache-hits`` artifact and log list it).
        Anything else -- no record, a damaged entry, ``--refresh`` -- goes through Prefect,
        whose cache policy logs and repairs the damage.
        """
        if self.options.refresh or not self.fast_cache:
            return None
        # Noted in the lease before the check, under gc's lock: a gc running now either
        # finished before the check or will see the note and keep the entries.
        refs = st.clean_hit(self.store, kwargs,
                            hold=self.lease.hold if self.lease is not None else None)
        if refs is None:
            return None
        self.store_hits[st.name] = self.store_hits.get(st.name, 0) + 1
        return refs

    def run(self, st: Step, **kwargs: Any) -> Any:
        """Run one step (or take it from the cache) and return its refs."""
        self._note_files(st, kwargs)
        refs = self._store_hit(st, kwargs)
        if refs is not None:
            return self._note_outputs(st, refs, cached=True)
        state = self._task(st)(**kwargs, return_state=True)
        return self._record(st, state)

    def submit(self, st: Step, **kwargs: Any) -> Any:
        """Submit one step to the task runner; pass the result to :meth:`gather`."""
        self._note_files(st, kwargs)
        refs = self._store_hit(st, kwargs)
        if refs is not None:
            return st, _Hit(refs)
        return st, self._task(st).submit(**kwargs)

    def map(self, st: Step, progress: Progress | None = None, **kwargs: Any) -> list[Any]:
        """Map a step over the lists in ``kwargs`` (Prefect's ``.map``; other values and
        ``prefect.unmapped(...)`` are passed to every call).

        ``progress`` (from :meth:`progress`) advances by one as each mapped task finishes.
        """
        from prefect.utilities.annotations import unmapped

        def mapped(v: Any) -> bool:  # unmapped(...) is a tuple subclass: test it first
            return not isinstance(v, unmapped) and isinstance(v, list | tuple)

        lengths = {len(v) for v in kwargs.values() if mapped(v)}
        if len(lengths) != 1:
            raise ValueError(f"map {st.name}: mapped arguments need one common length, "
                             f"got {sorted(lengths)}")
        (n,) = lengths
        units = [
            {k: (v[i] if mapped(v) else v.value if isinstance(v, unmapped) else v)
             for k, v in kwargs.items()}
            for i in range(n)
        ]
        for unit in units:
            self._note_files(st, unit)
        hits = [self._store_hit(st, u) for u in units]
        todo = [i for i, h in enumerate(hits) if h is None]
        futures = {}
        if todo:
            rest = {k: ([v[i] for i in todo] if mapped(v) else v) for k, v in kwargs.items()}
            futures = dict(zip(todo, self._task(st).map(**rest), strict=True))
        if progress is not None and n > len(todo):
            progress.advance(n - len(todo))  # the store's hits at once: one API call
        out = []
        for i in range(n):
            if hits[i] is not None:
                out.append(self._note_outputs(st, hits[i], cached=True))
            else:
                f = futures[i]
                out.append(self._record(st, f.wait() or f.state))
                if progress is not None:
                    progress.advance()
        return out

    def gather(self, submitted: Iterable[tuple[Step, Any]]) -> list[Any]:
        out = []
        for st, fut in submitted:
            if isinstance(fut, _Hit):
                out.append(self._note_outputs(st, fut.refs, cached=True))
                continue
            fut.wait()
            out.append(self._record(st, fut.state))
        return out

    def stage(self, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` inside a Prefect task run named ``name``.

        A stage groups steps under one node of the flow run (``stability-search`` over its
        hundreds of mapped units): the steps ``fn`` runs through this context are task runs
        nested in it, submitted to the flow's own task runner (Dask included), each cached in
        the store as usual.  The stage itself is neither cached nor persisted: it holds no data,
        and its steps' cache hits make a repeated stage cheap.  Two things Prefect does to
        nested tasks are undone here:

        * it ships the stage's task, closure included, in the context of every task submitted
          to a Dask worker from inside the stage (the worker never calls it); the closure holds
          this context, whose lease cannot be pickled, so it travels as :class:`_Local`, which
          pickles empty;
        * it commits the cache records of nested tasks with their parent's transaction, so a run
          killed inside the stage would keep none of its finished units; an eager transaction
          commits each unit as it ends.
        """
        from prefect import Task
        from prefect.cache_policies import NO_CACHE

        held = _Local((fn, args, kwargs))

        def run_stage() -> Any:
            from prefect.transactions import CommitMode, transaction

            f, a, k = held.value
            with transaction(commit_mode=CommitMode.EAGER):
                return f(*a, **k)

        task = Task(fn=run_stage, name=name, task_run_name=name, cache_policy=NO_CACHE,
                    persist_result=False)
        return task()

    def read(self, ref: str) -> Any:
        """Load a stored value (small ones: metrics, summaries for artifacts)."""
        return self.store.read(ref)

    def path(self, p: str | os.PathLike[str]) -> Path:
        return resolve_path(p)

    # -- named outputs: what the user came for, as files in the run folder ----------
    def name_output(self, name: str, ref: str) -> None:
        """Publish the store entry ``ref`` as ``outputs/<name>`` of the run folder.

        ``name`` is a relative path ending in ``.parquet`` (``assignments.parquet``,
        ``model/W.parquet``).  :meth:`finish` hard-links the entry there (a copy across file
        systems), so the store stays the one truth; the manifest lists it with its sha256, and
        ``scarce rerun`` compares it.
        """
        _check_output_name(name)
        if not name.endswith(SUFFIX):
            raise ValueError(f"output {name!r}: a store entry is published as a .parquet file")
        if name in self.named or name in self.files:
            raise ValueError(f"output {name!r} named twice")
        self.named[name] = ref

    def write_output(self, name: str, data: bytes | str, volatile: bool = False) -> None:
        """A file of the run's outputs that is not a store entry (readable rules, a model's
        JSON, CoNLL-U); written by :meth:`finish`, listed and compared like the others, unless
        ``volatile`` (it names things that differ between equal runs, such as run ids)."""
        _check_output_name(name)
        if name in self.named or name in self.files:
            raise ValueError(f"output {name!r} named twice")
        self.files[name] = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        if volatile:
            self.volatile_files.add(name)

    def _write_named_outputs(self, root: Path) -> list[dict[str, Any]]:
        out = []
        for name, ref in sorted(self.named.items()):
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            link_or_copy(self.store.path(ref), path)
            out.append({"name": name, "ref": ref, "sha256": file_sha256(path)})
        for name, data in sorted(self.files.items()):
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, data)
            out.append({"name": name, "ref": None, "sha256": hashlib.sha256(data).hexdigest(),
                        **({"volatile": True} if name in self.volatile_files else {})})
        return sorted(out, key=lambda o: o["name"])

    # -- what the Prefect UI shows -------------------------------------------
    def _artifact_key(self, name: str) -> str:
        return re.sub(r"[^a-z0-9-]+", "-", f"{self.flow}-{name}".lower()).strip("-")

    def publish_table(self, name: str, value: Any, description: str = "") -> None:
        """A table artifact from a stored table (a ref) or a DataFrame."""
        from prefect.artifacts import create_table_artifact

        frame = self.read(value) if isinstance(value, str) else value
        records = json.loads(frame.to_json(orient="records"))  # NaN -> null
        create_table_artifact(table=records, key=self._artifact_key(name), description=description)

    def publish_markdown(self, name: str, text: str, description: str = "") -> None:
        from prefect.artifacts import create_markdown_artifact

        create_markdown_artifact(
            markdown=text, key=self._artifact_key(name), description=description
        )

    def publish_image(self, name: str, png: bytes, description: str = "") -> None:
        """A markdown artifact showing ``png``; the file goes to ``plots/<name>.png``.

        Parameters
        ----------
        name : str
            The figure's name: the artifact's key is ``<flow>-<name>``.
        png : bytes
            The figure, a PNG image.
        description : str
            One short line: the artifact's description, the image's alt text and its caption.

        Raises
        ------
        ValueError
            When ``png`` is not a PNG image.

        Notes
        -----
        The image travels inside the artifact as a ``data:image/png;base64`` URL, so the UI
        shows it without a file server.  It is a markdown artifact, ``![description](data:...)``
        and a one-line caption, not an image artifact: the UI prints an image artifact's data,
        here the whole URL (tens of thousands of characters), as the link text under the
        picture, while it renders a markdown image as an ``<img>`` with the alt text alone.
        The file is written by :meth:`finish` (a failed run writes no run folder) and listed
        under ``plots`` in the manifest, outside the outputs that ``rerun`` compares.
        """
        from prefect.artifacts import create_markdown_artifact

        if not png.startswith(b"\x89PNG\r\n\x1a\n"):
            raise ValueError(f"plot {name!r} is not a PNG image")
        key = self._artifact_key(name)
        self.plots[key] = png
        memo = self._plot_memos.get(hashlib.sha256(png).hexdigest())
        if memo is not None:
            self.plot_refs[key] = memo
        alt = " ".join(re.sub(r"[\[\]\\]", "", description or key).split())
        url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        where = f"`{PLOTS}/{key}.png` in the folder of run `{self.run_id}`"
        caption = f"{description} ({where})" if description else f"The figure: {where}."
        text = f"![{alt}]({url})\n\n{caption}"
        create_markdown_artifact(markdown=text, key=key, description=description)

    def plot(self, fn: Any, *args: Any, **kwargs: Any) -> bytes:
        """``fn(*args, **kwargs)`` (a figure as PNG bytes), memoised in the store.

        Drawing a figure costs seconds (importing matplotlib alone is about one), which was
        most of a cached rerun of a small flow.  The PNG is kept as a store entry
        ``plots/<digest>`` (a one-row table with a binary ``png`` column, checksummed like any
        entry), the digest covering the function's source and the plots module's, and the
        arguments (tables by their content).  The manifest lists the memo of each published
        plot, so ``scarce cache gc`` keeps the memos of existing runs and drops the others.
        """
        import inspect

        from scarce.flows import plots as plots_module

        h = hashlib.sha256()
        h.update(inspect.getsource(fn).encode())
        h.update(inspect.getsource(plots_module).encode())
        for value in (*args, *sorted(kwargs.items())):
            if isinstance(value, tuple):  # a keyword: (name, value)
                h.update(value[0].encode())
                value = value[1]
            if isinstance(value, pd.DataFrame):
                h.update(repr((list(value.columns), [str(t) for t in value.dtypes])).encode())
                h.update(pd.util.hash_pandas_object(value, index=True).to_numpy().tobytes())
            else:
                h.update(repr(value).encode())
        ref = f"plots/{h.hexdigest()[:32]}"
        with self.lease.hold([ref]) if self.lease else nullcontext():
            if self.store.exists(ref):
                try:
                    png = self.store.read(ref)["png"].iloc[0]
                    if isinstance(png, bytes) and png.startswith(b"\x89PNG\r\n\x1a\n"):
                        self._plot_memos[hashlib.sha256(png).hexdigest()] = ref
                        return png
                except (CorruptEntry, OSError, ValueError, KeyError, IndexError):
                    pass  # a damaged memo is drawn again and rewritten
        png = fn(*args, **kwargs)
        self.store.write(ref, pd.DataFrame({"png": [png]}), {"task": "plots"})
        self._plot_memos[hashlib.sha256(png).hexdigest()] = ref
        return png

    def progress(self, name: str, total: int, description: str = "") -> Progress:
        """A progress artifact (at 0%) for a loop of ``total`` units; ``advance()`` per unit."""
        return Progress(total, key=self._artifact_key(name), description=description)

    # -- finishing ----------------------------------------------------------
    def finish(self, metrics_ref: str, headline: dict[str, float] | None = None) -> dict[str, Any]:
        """Write the run folder (``metrics.parquet``, plots, outputs, ``manifest.json``) and
        return the run summary.

        The folder is written under a hidden temporary name beside its final one and renamed
        when complete, so a run that fails while writing it (a full disk, a read-only runs
        folder) leaves no run folder at all, as a run that fails earlier does.
        """
        metrics = self.store.read(metrics_ref)
        missing = [c for c in METRIC_COLUMNS if c not in metrics.columns]
        if missing:
            raise ValueError(f"metrics table lacks columns {missing}")
        metrics = metrics[METRIC_COLUMNS].reset_index(drop=True)
        outputs = [
            {**o, "sha256": self.store.sha256(o["ref"])}
            for o in sorted(self.outputs.values(), key=lambda o: o["ref"])
        ]
        partial = self.run_dir.with_name(f".{self.run_id}{PARTIAL}{secrets.token_hex(3)}")
        try:
            manifest = self._write_folder(partial, metrics, outputs, headline)
            if self.run_dir.exists():
                raise FileExistsError(f"run folder {self.run_dir} exists")
            os.rename(partial, self.run_dir)
        except OSError as exc:  # a full disk, a read-only or vanished runs folder
            where = f" ({exc.filename})" if exc.filename else ""
            raise InputError(f"cannot write the run folder: {exc.strerror or exc}{where}",
                             path=self.run_dir, key="runs folder (or $SCARCE_RUNS)") from exc
        finally:
            if partial.exists():
                shutil.rmtree(partial, ignore_errors=True)
        self.publish_table("metrics", metrics, f"Metrics of run {self.run_id}")
        if self.store_hits:
            self.publish_table(
                "cache-hits",
                pd.DataFrame(sorted(self.store_hits.items()), columns=["step", "entries reused"]),
                "Steps taken from the store without a task run (their entries passed their "
                "checksums and file hashes)",
            )
        if self.lease is not None:  # the manifest now names what this run keeps
            self.lease.release()
            if self.lease in _open_leases:
                _open_leases.remove(self.lease)
        log.info("run %s written to %s", self.run_id, self.run_dir)
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "metrics": metrics,
            "metrics_ref": metrics_ref,
            "manifest": manifest,
        }

    def _write_folder(self, folder: Path, metrics: pd.DataFrame, outputs: list[dict[str, Any]],
                      headline: dict[str, float] | None) -> dict[str, Any]:
        """Everything of the run folder, written into ``folder``; returns the manifest."""
        folder.mkdir(parents=True)
        metrics_path = folder / mf.METRICS
        atomic_write_parquet(metrics_path, encode(metrics))
        plots = []
        for key, png in sorted(self.plots.items()):
            rel = f"{PLOTS}/{key}.png"
            (folder / PLOTS).mkdir(exist_ok=True)
            atomic_write_bytes(folder / rel, png)
            plots.append({"name": key, "path": rel, "sha256": file_sha256(folder / rel),
                          "ref": self.plot_refs.get(key)})
        named = self._write_named_outputs(folder / OUTPUTS)
        manifest = {
            "schema": mf.SCHEMA_VERSION,
            "run_id": self.run_id,
            "flow": self.flow,
            "started": self.started,
            "finished": dt.datetime.now(dt.UTC).isoformat(),
            "config": self.config.model_dump(mode="json"),
            "seed": self.config.seed,
            "code": mf.code_version(),
            "environment": mf.environment(),
            "options": self.options.model_dump(mode="json", exclude={"run_id", "refresh"}),
            "store": str(self.store.root),
            "inputs": [{"path": p, "sha256": h} for p, h in sorted(self.inputs.items())],
            "outputs": outputs,
            "metrics_sha256": file_sha256(metrics_path),
            "cache_hits": sorted(set(self.cache_hits)),
            "plots": plots,
            "named_outputs": named,
            "prefect_flow_run_id": _flow_run_id(),
            "deployment": _deployment_name(),
            "task_runner": _task_runner(),
            "notes": self.notes,
            "headline": headline or headline_metrics(metrics),
        }
        mf.write_manifest(folder, manifest)
        return manifest


class Progress:
    """A Prefect progress artifact over ``total`` units of a loop.

    Created at 0%; :meth:`advance` updates it when the percentage has moved by a whole point
    or reached 100 (at most about 100 API calls however long the loop).
    """

    def __init__(self, total: int, key: str | None = None, description: str = "") -> None:
        from prefect.artifacts import create_progress_artifact

        self.total, self.done, self.shown = max(int(total), 1), 0, 0.0
        self.artifact_id = create_progress_artifact(0.0, key=key, description=description)

    def advance(self, n: int = 1) -> None:
        from prefect.artifacts import update_progress_artifact

        self.done = min(self.done + n, self.total)
        percent = 100.0 * self.done / self.total
        if percent - self.shown >= 1.0 or (self.done == self.total and percent > self.shown):
            update_progress_artifact(self.artifact_id, percent)
            self.shown = percent


class _Local:
    """A value that stays in this process: pickled, it becomes an empty holder."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> tuple:
        return (_Local, (None,))


OUTPUTS = "outputs"  # the run folder's subfolder of named outputs


def _check_output_name(name: str) -> None:
    parts = Path(name).parts
    if (not parts or Path(name).is_absolute() or any(p in ("", ".", "..") for p in parts)
            or not all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", p) for p in parts)):
        raise ValueError(f"not an output name: {name!r} (a relative path of plain names)")


def link_or_copy(source: Path, target: Path) -> None:
    """``target`` as a hard link to ``source`` (the same bytes, no copy), or a copy where the
    two are on different file systems; atomic either way (a temporary name, then a rename)."""
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        try:
            os.link(source, tmp)
        except OSError:  # another file system, or links not allowed: copy the bytes
            with open(source, "rb") as fh:
                atomic_write_bytes(tmp, fh.read())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def markdown_table(frame: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub-style markdown table (pandas' to_markdown needs the tabulate package)."""

    def cell(v: Any) -> str:
        return f"{v:.{digits}g}" if isinstance(v, float) else str(v)

    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def headline_metrics(metrics: pd.DataFrame, limit: int = 4) -> dict[str, float]:
    """The first few metrics of the table, keyed ``dataset/method/metric``."""
    out = {}
    for row in metrics.head(limit).itertuples(index=False):
        out[f"{row.dataset}/{row.method}/{row.metric}"] = float(row.value)
    return out
