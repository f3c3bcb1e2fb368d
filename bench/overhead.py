"""What orchestration costs: cached reruns and Prefect's share of a flow's time.

``scarce bench overhead`` runs each flow (its config in ``configs/``, with ``--set``
overrides) three times in a fresh temporary store, through Prefect exactly as
``scarce run`` does (local task runner, the Prefect server in use or a temporary one):

0. an untimed trivial flow first, so a temporary server's start is not counted;
1. a first run that computes every step;
2. the same run again, every step a cache hit: its time as a share of the first run's
   (the goal: under 10%).  Hits whose entries pass their checks are resolved from the store
   without a Prefect task run (see ``RunContext._store_hit``);
3. nothing more: the first run's task runs are read back from the Prefect API, and the
   time inside them (the union of their Running intervals, so concurrent tasks count once)
   is the computation; the rest of the flow's wall time is orchestration: task submission,
   cache-key computation, state changes, artifacts and the API calls around them.

For LEML the same training is also timed bare, side by side: ``LEML.fit`` with the run's
parameters on the run's training file (read and normalised by the flow's own ``load``, the
read not timed) in a fresh Python process with one BLAS thread, before the first run.  Its
ratio to the first run's training task runs (the start and every half-step: the union of
their Running intervals) is what the flow adds to the training itself (checkpoints of W and
H, keys, task states); the first run's wall time less the time inside all its task runs is
the run's fixed cost.  The bare fit needs what ``LEML.fit`` takes: one training file, every
label observed, no validation split, the local backend; other configs are measured without
it.

Times are wall-clock on a shared machine: the ratios are the result, the seconds indicative.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

FLOWS = ("leml", "relations", "strip")
COLUMNS = ["flow", "run", "seconds", "metric", "value"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flows", default=",".join(FLOWS),
                        help="comma-separated flows to measure (default: all three)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="FLOW:KEY=VALUE",
                        help="a config override for one flow, e.g. leml:model.rank=16")
    parser.add_argument("--quick", action="store_true",
                        help="small configs (LEML rank 16 and 3 iterations, 400 relation "
                        "pairs with k in 2..6, StRip window 5) for a check in a few minutes")


QUICK = {
    "leml": ["model.rank=16", "model.outer_iterations=3"],
    "relations": ["max_pairs=400", "k_low=2", "k_high=6", "n_subsamples=3"],
    "strip": ["window=5", "variants=[ripper,strip-partial]"],
}


#: The LEML flow's task runs that train: the start and the half-steps.
TRAINING_TASK = re.compile(r"^(initial factors|alternate-[WH] iter=\d+)$")

#: A fresh process's bare fit: the training file read by the flow's own load step (not
#: timed), then ``LEML.fit`` with the config's parameters, timed; prints the seconds.
BARE_FIT = """
import json, sys, time
from scarce.flows.config import resolve_path
from scarce.flows.leml import LemlConfig
from scarce.tasks.leml import load
config = LemlConfig.model_validate(json.loads(sys.argv[1]))
d, m = config.dataset, config.model
data = load.fn(path=resolve_path(d.train), format=d.format, dtype=m.dtype,
               n_labels=d.n_labels, normalize=d.normalize, labelled=True)
model = m.estimator(random_state=config.seed)
t0 = time.perf_counter()
model.fit(data["X"], data["Y"])
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def bare_fit_possible(config) -> str | None:
    """Why the bare ``LEML.fit`` cannot train what the run trains (None when it can)."""
    from scarce.flows.config import resolve_path

    d = config.dataset
    if d.format == "table":
        return "a table is read by the table steps"
    if resolve_path(d.train).is_dir():
        return "a folder of parts"
    if config.observed_fraction < 1:
        return "labels missing (observed_fraction < 1)"
    if d.validation_fraction > 0:
        return "a validation split"
    if config.compute.backend != "local":
        return f"the {config.compute.backend} backend"
    return None


def bare_fit_seconds(config) -> float:
    """Seconds of ``LEML.fit`` on ``config``'s training data in a fresh Python process with one
    BLAS thread (:data:`BARE_FIT`)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", BARE_FIT, config.model_dump_json()],
                         capture_output=True, text=True, env=env, timeout=24 * 3600)
    if out.returncode != 0:
        raise RuntimeError(f"the bare fit failed: {out.stderr.strip()[-2000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def training_seconds(intervals: list[tuple[float, float]], names: list[str]) -> float:
    """The union of the Running intervals of the training task runs (:data:`TRAINING_TASK`)
    among ``intervals`` (one per task run, named ``names``)."""
    return busy_seconds([iv for iv, name in zip(intervals, names, strict=True)
                         if TRAINING_TASK.match(name)])


def _say(*parts) -> None:
    print("[bench overhead]", *parts, file=sys.stderr, flush=True)


def busy_seconds(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of ``[start, end]`` intervals."""
    total, end = 0.0, -float("inf")
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _task_intervals(flow_run_id) -> tuple[list[tuple[float, float]], list[str], int]:
    """Running intervals of a flow run's task runs, the names of those that ran, and the
    number of cache hits."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    intervals, ran, cached = [], [], 0
    for tr in runs:
        name = tr.state.name if tr.state else ""
        if name == "Cached":
            cached += 1
        elif tr.start_time and tr.end_time:
            ran.append(tr.name)
            intervals.append((tr.start_time.timestamp(), tr.end_time.timestamp()))
    return intervals, ran, cached


def warm_up() -> None:
    """Start the Prefect server (a temporary one unless PREFECT_API_URL is set) untimed."""
    from prefect import flow

    @flow(name="overhead-warm-up")
    def warm_up() -> int:
        return 1

    warm_up()


def _timed_run(spec, config, options):
    flow_fn = spec.load_flow()
    t0 = time.perf_counter()
    state = flow_fn(config=config, options=options, return_state=True)
    seconds = time.perf_counter() - t0
    summary = state.result()  # raises if the flow failed
    return seconds, state.state_details.flow_run_id, summary["manifest"]


def run(args: argparse.Namespace) -> pd.DataFrame:
    from scarce.flows.config import load_config, resolve_path
    from scarce.flows.registry import FLOWS
    from scarce.flows.runtime import RunOptions

    names = [f.strip() for f in args.flows.split(",") if f.strip()]
    unknown = set(names) - set(FLOWS)
    if unknown:
        raise ValueError(f"unknown flows {sorted(unknown)}; known: {sorted(FLOWS)}")
    overrides: dict[str, list[str]] = {n: list(QUICK[n]) if args.quick else [] for n in names}
    for text in args.overrides:
        flow, sep, rest = text.partition(":")
        if not sep or flow not in overrides:
            raise ValueError(f"--set {text!r}: expected FLOW:KEY=VALUE with FLOW in {names}")
        overrides[flow].append(rest)
    rows: list[tuple] = []
    warm_up()
    for name in names:
        spec = FLOWS[name]
        config = load_config(resolve_path(spec.config_file), spec.load_model(), overrides[name])
        bare, why_not = None, bare_fit_possible(config) if name == "leml" else "not LEML"
        if why_not is None:
            _say(f"{name}: the same training bare (LEML.fit in a fresh process)")
            bare = bare_fit_seconds(config)
        elif name == "leml":
            _say(f"{name}: no bare fit: {why_not}")
        tmp = Path(tempfile.mkdtemp(prefix=f"scarce-overhead-{name}-"))
        try:
            opts = {"store": str(tmp / "cache"), "runs": str(tmp / "runs")}
            _say(f"{name}: first run (every step computed)")
            first, first_id, _ = _timed_run(spec, config, RunOptions(**opts))
            _say(f"{name}: first run {first:.1f}s; cached run")
            again, again_id, manifest = _timed_run(spec, config, RunOptions(**opts))
            intervals, ran, _ = _task_intervals(first_id)
            _, ran_again, prefect_cached = _task_intervals(again_id)
            completed, recomputed = len(ran), len(ran_again)
            outputs = manifest["outputs"]
            reused = sum(o["cached"] for o in outputs)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        busy = busy_seconds(intervals)
        rows += [
            (name, "first", first, "task runs computed", completed),
            (name, "first", first, "seconds inside task runs (union)", busy),
            (name, "first", first, "orchestration share of wall time", 1 - busy / first),
            (name, "cached", again, "outputs reused", reused),
            (name, "cached", again, "outputs recomputed", len(outputs) - reused),
            (name, "cached", again, "task runs (cached, recomputed)", prefect_cached + recomputed),
            (name, "cached", again, "time / first run", again / first),
            (name, "first", first, "fixed cost seconds (wall less inside task runs)",
             first - busy),
        ]
        if bare is not None:
            train = training_seconds(intervals, ran)
            rows += [(name, "bare", bare, "LEML.fit seconds, fresh process", bare),
                     (name, "first", first, "training task runs seconds (union)", train),
                     (name, "first", first, "in-flow training / bare fit", train / bare)]
            _say(f"RESULT {name}: training {train:.1f}s in the flow, {bare:.1f}s bare "
                 f"({train / bare:.2f}x); fixed cost {first - busy:.1f}s")
        _say(f"RESULT {name}: first {first:.1f}s ({completed} tasks, {busy:.1f}s inside them, "
             f"orchestration {1 - busy / first:.0%}); cached {again:.1f}s = "
             f"{again / first:.1%} of the first ({reused} of {len(outputs)} outputs reused; "
             f"{prefect_cached + recomputed} task runs"
             f"{': ' + ', '.join(ran_again) if ran_again else ''})")
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["seconds"] = table["seconds"].round(2)
    table["value"] = table["value"].astype(float).round(4)
    return table
