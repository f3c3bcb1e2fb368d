"""The run a flow belongs to: it calls the flow's steps, and finishes the run.

A flow opens a :class:`RunContext` first and calls its steps through it::

    ctx = RunContext.open("leml", config, options)
    train = ctx.run(load_xmc, path=cfg.train, dtype=cfg.dtype)
    ctx.artifacts.table("summary", summary)
    ctx.record.name_output("model/W.parquet", factors["W"])
    ...
    return ctx.finish(metrics)

``run``, ``submit``/``gather`` and ``map`` take a step from the store when it is a clean
cache hit (:meth:`scarce.tasks.steps.Step.clean_hit`, the one cache-hit decision), else submit its
Prefect task.  What the run read and wrote goes to its record (``ctx.record``,
:mod:`scarce.flows.run_record`), what the UI shows to its artifacts (``ctx.artifacts``,
:mod:`scarce.flows.artifacts`); :meth:`RunContext.finish` writes the run folder from both.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel, Field

from scarce.flows import manifest as mf
from scarce.flows.artifacts import PLOTS, Artifacts, Progress, markdown_table
from scarce.flows.config import (
    SAFE_NAME,
    FlowConfig,
    default_runs_root,
    default_store_root,
    resolve_path,
)
from scarce.flows.outputs import check_writable_folder
from scarce.flows.run_names import run_id_label
from scarce.flows.run_record import OUTPUTS, RunRecord, link_or_copy
from scarce.flows.tags import dataset_name, run_tags, tag_flow_run, unique
from scarce.tasks.errors import InputError
from scarce.tasks.step_tasks import bind
from scarce.tasks.steps import Step
from scarce.tasks.store import Store
from scarce.tasks.store.leases import Lease

__all__ = ["METRIC_COLUMNS", "OUTPUTS", "PLOTS", "Progress", "RunContext", "RunOptions",
           "check_writable_folder", "default_runs_root", "default_store_root",
           "headline_metrics", "lead_line", "link_or_copy", "markdown_table", "new_run_id",
           "release_leases"]

log = logging.getLogger("scarce.run")

METRIC_COLUMNS = ["dataset", "method", "metric", "value"]
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


def state_result(state: Any) -> Any:
    """What a finished task run returned (a step's refs), as ``state.result()`` gives it.

    A task run of this process carries its result record in its state; it is read there.
    ``State.result()`` runs a coroutine on Prefect's event-loop thread and waits for it,
    which made every step wait for that thread once more (and for a core, on a loaded
    machine).  Any other state (a failure, a result known only by its metadata, as from a
    Dask worker) goes through ``state.result()``, which raises or fetches as before."""
    from prefect.results import ResultRecord

    if state.is_completed() and isinstance(state.data, ResultRecord):
        return state.data.result
    return state.result()


def new_run_id(flow: str, name: str | None) -> str:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    slug = "-".join(p for p in (flow, name) if p)
    return f"{slug}-{stamp}-{secrets.token_hex(2)}"


def _flow_run_id() -> str | None:
    """The Prefect flow run this run is (its page in the UI), if any."""
    from prefect.runtime import flow_run

    run_id = flow_run.id
    return str(run_id) if run_id else None


def _flow_run_tags(flow: str, config: FlowConfig, options: RunOptions) -> list[str]:
    """The tags of this flow run (those it was started with, an experiment's among them) and
    the run's own (:func:`scarce.flows.tags.run_tags`), for ``scarce runs --tag``."""
    from prefect.runtime import flow_run

    return unique([*flow_run.tags, *run_tags(flow, config, options)])


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
    """One run of ``flow``: its store, the steps it calls, its record and its artifacts."""

    flow: str
    config: FlowConfig
    store: Store
    run_dir: Path
    run_id: str
    options: RunOptions
    lease: Lease | None = None  # keeps what this run uses safe from `scarce cache gc`
    record: RunRecord = field(init=False)
    artifacts: Artifacts = field(init=False)

    def __post_init__(self) -> None:
        self.record = RunRecord(self.run_id, self.flow, self.store, self.lease)
        self.artifacts = Artifacts(self.flow, self.run_id, self.store, self.lease,
                                   dataset_name(self.config))

    @classmethod
    def open(cls, flow: str, config: FlowConfig, options: RunOptions | None = None) -> RunContext:
        options = options or RunOptions()
        try:
            store = Store(options.store or default_store_root())
        except ValueError as exc:
            raise InputError(str(exc), key="store (or $SCARCE_STORE)") from None
        run_id = options.run_id or new_run_id(flow, run_id_label(config))
        run_dir = Path(options.runs or default_runs_root()) / run_id
        tag_flow_run(flow, config, options, run_id)
        lease = store.lease(run_id)
        _open_leases.append(lease)
        return cls(flow, config, store, run_dir, run_id, options, lease)

    # -- calling steps ------------------------------------------------------
    def _task(self, st: Step):
        return bind(st, self.store, refresh=self.options.refresh)

    def _record(self, st: Step, state: Any) -> Any:
        return self.record.note_outputs(st, state_result(state), state.name == "Cached")

    def _store_hit(self, st: Step, kwargs: dict[str, Any]) -> Any:
        """The refs of a clean cache hit, read from the store before any task run starts.

        A Prefect task run costs a few API calls even when cached, which made a cached rerun
        of the relations flow, with its hundreds of small stability units, take over half
        the first run's time.  A step whose cache record exists and whose entries all pass
        their checksums and file hashes (:meth:`scarce.tasks.steps.Step.clean_hit`) is resolved
        here, without a task run (the run's ``cache-hits`` artifact and log list it).
        Anything else -- no record, a damaged entry, ``--refresh`` -- goes through Prefect,
        whose cache policy logs and repairs the damage.
        """
        if self.options.refresh:
            return None
        # Noted in the lease before the check, under gc's lock: a gc running now either
        # finished before the check or will see the note and keep the entries.
        refs = st.clean_hit(self.store, kwargs,
                            hold=self.lease.hold if self.lease is not None else None)
        if refs is not None:
            self.record.note_store_hit(st)
        return refs

    def run(self, st: Step, **kwargs: Any) -> Any:
        """Run one step (or take it from the cache) and return its refs."""
        self.record.note_inputs(st, kwargs)
        refs = self._store_hit(st, kwargs)
        if refs is not None:
            return self.record.note_outputs(st, refs, cached=True)
        state = self._task(st)(**kwargs, return_state=True)
        return self._record(st, state)

    def submit(self, st: Step, **kwargs: Any) -> Any:
        """Submit one step to the task runner; pass the result to :meth:`gather`."""
        self.record.note_inputs(st, kwargs)
        refs = self._store_hit(st, kwargs)
        if refs is not None:
            return st, _Hit(refs)
        return st, self._task(st).submit(**kwargs)

    def map(self, st: Step, progress: Progress | None = None, **kwargs: Any) -> list[Any]:
        """Map a step over the lists in ``kwargs`` (Prefect's ``.map``; other values and
        ``prefect.unmapped(...)`` are passed to every call).

        ``progress`` (from ``ctx.artifacts.progress``) advances by one as each mapped task finishes.
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
            self.record.note_inputs(st, unit)
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
                out.append(self.record.note_outputs(st, hits[i], cached=True))
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
                out.append(self.record.note_outputs(st, fut.refs, cached=True))
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

    # -- finishing ----------------------------------------------------------
    def finish(self, metrics_ref: str, headline: dict[str, float] | None = None) -> dict[str, Any]:
        """Write the run folder (``metrics.parquet``, plots, outputs, ``manifest.json``) and
        return the run summary.

        The folder is written under a hidden temporary name beside its final one and renamed
        when complete (:meth:`~scarce.flows.run_record.RunRecord.publish`), so a run that fails
        while writing it (a full disk, a read-only runs folder) leaves no run folder at all, as
        a run that fails earlier does.
        """
        self.store.flush()  # the checkpoints written behind (a write's error fails the run)
        metrics = self.store.read(metrics_ref)
        missing = [c for c in METRIC_COLUMNS if c not in metrics.columns]
        if missing:
            raise ValueError(f"metrics table lacks columns {missing}")
        metrics = metrics[METRIC_COLUMNS].reset_index(drop=True)
        try:
            manifest = self.record.publish(
                self.run_dir, config=self.config, options=self.options, metrics=metrics,
                plots=self.artifacts.plots, plot_refs=self.artifacts.plot_refs,
                headline=headline or headline_metrics(metrics),
                run={"prefect_flow_run_id": _flow_run_id(), "deployment": _deployment_name(),
                     "task_runner": _task_runner(),
                     "tags": _flow_run_tags(self.flow, self.config, self.options)})
        except OSError as exc:  # a full disk, a read-only or vanished runs folder
            where = f" ({exc.filename})" if exc.filename else ""
            raise InputError(f"cannot write the run folder: {exc.strerror or exc}{where}",
                             path=self.run_dir, key="runs folder (or $SCARCE_RUNS)") from exc
        self.artifacts.table("metrics", metrics, f"Metrics of run {self.run_id}")
        if self.record.store_hits:
            self.artifacts.table(
                "cache-hits",
                pd.DataFrame(sorted(self.record.store_hits.items()),
                             columns=["step", "entries reused"]),
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


class _Local:
    """A value that stays in this process: pickled, it becomes an empty holder."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> tuple:
        return (_Local, (None,))


def headline_metrics(metrics: pd.DataFrame, limit: int = 4) -> dict[str, float]:
    """The first few metrics of the table, keyed ``dataset/method/metric``."""
    out = {}
    for row in metrics.head(limit).itertuples(index=False):
        out[f"{row.dataset}/{row.method}/{row.metric}"] = float(row.value)
    return out


def lead_line(metrics: Any, spec: Any) -> str | None:
    """One line saying which method of the run leads on the flow's test metric
    (``spec.lead_metric``) and by how much, so that our own method is never taken to lead when
    a baseline in the same run does: ``br-ridge leads leml-squared-k100 by 2.27 points of
    precision@1 on this data``; None when the run has one method or lacks the metric."""
    import re

    if spec.lead_metric is None or spec.own_method is None or metrics is None:
        return None
    rows = metrics[metrics["metric"] == spec.lead_metric].dropna(subset=["value"])
    if rows["method"].nunique() < 2:
        return None
    own = rows[rows["method"].map(lambda m: bool(re.search(spec.own_method, str(m))))]
    others = rows.drop(own.index)
    if own.empty or others.empty:
        return None
    mine, best = own.loc[own["value"].idxmax()], others.loc[others["value"].idxmax()]
    gap = 100 * abs(float(mine["value"]) - float(best["value"]))
    what = f"{gap:.2f} points of {spec.lead_metric} on this data"
    if float(best["value"]) > float(mine["value"]):
        return f"{best['method']} leads {mine['method']} by {what}"
    if float(best["value"]) == float(mine["value"]):
        return f"{mine['method']} and {best['method']} are level on {spec.lead_metric}"
    return f"{mine['method']} leads {best['method']} (the best other method) by {what}"
