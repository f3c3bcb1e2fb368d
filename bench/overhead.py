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

Times are wall-clock on a shared machine: the ratios are the result, the seconds indicative.
"""

from __future__ import annotations

import argparse
import shutil
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
        ]
        _say(f"RESULT {name}: first {first:.1f}s ({completed} tasks, {busy:.1f}s inside them, "
             f"orchestration {1 - busy / first:.0%}); cached {again:.1f}s = "
             f"{again / first:.1%} of the first ({reused} of {len(outputs)} outputs reused; "
             f"{prefect_cached + recomputed} task runs"
             f"{': ' + ', '.join(ran_again) if ran_again else ''})")
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["seconds"] = table["seconds"].round(2)
    table["value"] = table["value"].astype(float).round(4)
    return table
