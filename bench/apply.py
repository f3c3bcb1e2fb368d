"""How fast a trained model is applied: ``scarce bench apply``.

For each flow, in a fresh temporary store, through Prefect as ``scarce run`` and ``scarce apply``
do: the training run on its bundled config (``--quick``: the small settings of
``scarce bench overhead --quick``), then its apply flow on the rows the training run evaluated
(LEML: the test file; relations: the data file; StRip: the test documents).  The times are the
task runs' own (read back from the Prefect API): the apply flow's scoring step against the
training run's ``evaluate`` step, as rows (pairs, documents) per second and their ratio, both
from the same run on the same machine.  Beside them, the same input through Python: the
seconds of ``scarce.load_model`` (the model read included) and its predict call
(:data:`PYTHON_CALLS`), against the whole apply run's wall-clock seconds (what ``scarce
apply`` costs a user, its Prefect flow run and run folder included); the Python result is
checked equal to the apply run's output first.

LEML's ``evaluate`` also computes the Hamming loss and per-instance AUC; relations' ``evaluate``
scores clusterings that already exist (its assignment step is the one apply runs); StRip's
``evaluate`` applies and scores every variant, so its time is divided by the variants trained.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from scarce.bench.overhead import FLOWS, QUICK, chosen_flows, task_runs, warm_up

# What a notebook calls on the apply run's input, with the model of the training run folder.
PYTHON_CALLS = {
    "leml": lambda model, source: model.predict_top_k(source, 5),
    "relations": lambda model, source: model.assign(source),
    "strip": lambda model, source: model.predict(source),
}
# The apply run's named output (one input file) that the call's result must equal; StRip's
# outputs are CoNLL-U files, compared by its tests.
PYTHON_OUTPUTS = {"leml": "predictions.parquet", "relations": "assignments.parquet"}

COLUMNS = ["flow", "unit", "evaluate_rows", "evaluate_seconds", "evaluate_per_second",
           "apply_rows", "apply_seconds", "apply_per_second", "apply_over_evaluate",
           "apply_command_seconds", "python_seconds", "command_over_python"]
# (the training run's task run, the apply run's task runs, the unit counted)
STEPS = {
    "leml": ("evaluate", "score ", "rows"),
    "relations": ("evaluate", "assign nearest cluster", "pairs"),
    "strip": ("evaluate ", "apply rules ", "documents"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flow", dest="flows", action="append", choices=FLOWS, metavar="FLOW",
                        help=f"a flow to measure: {', '.join(FLOWS)} (repeatable; default: "
                        "all three)")
    parser.add_argument("--quick", action="store_true",
                        help="the small training settings of `scarce bench overhead --quick`")


def _say(*parts) -> None:
    print("[bench apply]", *parts, file=sys.stderr, flush=True)


def _task_seconds(flow_run_id, prefix: str) -> float:
    """Seconds inside the task runs of a flow run whose name starts with ``prefix`` (summed;
    none ran concurrently with another of them here)."""
    spans = [(tr.end_time - tr.start_time).total_seconds() for tr in task_runs(flow_run_id)
             if tr.name.startswith(prefix) and tr.start_time and tr.end_time]
    if not spans:
        raise RuntimeError(f"no task run named {prefix!r}… in flow run {flow_run_id}")
    return float(sum(spans))


def _run(flow_fn, config, options):
    state = flow_fn(config=config, options=options, return_state=True)
    summary = state.result()  # raises if the flow failed
    return state.state_details.flow_run_id, summary


def _inputs(name: str, config, run_dir: Path, tmp: Path) -> tuple[str, int, int]:
    """The apply input for ``name``, the rows the training run evaluated, and the number of
    variants it evaluated them with (1 but for StRip)."""
    from scarce.flows.config import resolve_path

    if name == "leml":
        rows = len(pd.read_parquet(run_dir / "outputs" / "predictions.parquet")["row"].unique())
        return str(resolve_path(config.dataset.test)), rows, 1
    if name == "relations":
        if len(config.data) != 1:
            raise ValueError("bench apply: a relations config with one data file is expected")
        rows = len(pd.read_parquet(run_dir / "outputs" / "assignments.parquet"))
        return str(resolve_path(config.data[0])), rows, 1
    predicted = run_dir / "outputs" / "predicted"
    variants = sorted(p for p in predicted.iterdir() if p.is_dir())
    docs = tmp / "test-documents"
    docs.mkdir()
    data_dir = resolve_path(config.data_dir)
    for out in sorted(variants[0].iterdir()):
        for suffix in (".gz", ""):
            source = data_dir / f"{out.name}{suffix}"
            if source.is_file():
                (docs / source.name).symlink_to(source)
                break
    return str(docs), len(list(docs.iterdir())), len(variants)


def run(args: argparse.Namespace) -> pd.DataFrame:
    from scarce.flows import registry
    from scarce.flows.config import load_config, resolve_path
    from scarce.flows.runtime import RunOptions

    names = chosen_flows(args.flows)
    warm_up()
    rows = []
    for name in names:
        spec, apply_spec = registry.FLOWS[name], registry.FLOWS[f"apply-{name}"]
        config = load_config(resolve_path(spec.config_file), spec.load_model(),
                             list(QUICK[name]) if args.quick else [])
        tmp = Path(tempfile.mkdtemp(prefix=f"scarce-bench-apply-{name}-"))
        try:
            opts = {"store": str(tmp / "cache"), "runs": str(tmp / "runs")}
            _say(f"{name}: training run")
            train_id, summary = _run(spec.load_flow(), config, RunOptions(**opts))
            run_dir = Path(summary["run_dir"])
            source, n_rows, n_variants = _inputs(name, config, run_dir, tmp)
            apply_config = apply_spec.load_model().model_validate(
                {"model_run": run_dir.name, "input": source})
            _say(f"{name}: apply run on {source}")
            started = time.perf_counter()
            apply_id, applied = _run(apply_spec.load_flow(), apply_config, RunOptions(**opts))
            command = time.perf_counter() - started
            python = _python_seconds(name, run_dir, source, Path(applied["run_dir"]))
            train_step, apply_step, unit = STEPS[name]
            evaluate = _task_seconds(train_id, train_step) / n_variants
            apply_seconds = _task_seconds(apply_id, apply_step)
            n_applied = n_rows if name != "relations" else int(
                applied["metrics"].set_index("metric").loc["n_pairs", "value"])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        per_eval, per_apply = n_rows / evaluate, n_applied / apply_seconds
        rows.append((name, unit, n_rows, evaluate, per_eval, n_applied, apply_seconds,
                     per_apply, per_apply / per_eval, command, python, command / python))
        _say(f"RESULT {name}: evaluate {per_eval:,.0f} {unit}/s, apply {per_apply:,.0f} "
             f"{unit}/s ({per_apply / per_eval:.2f}x); scarce apply {command:.2f} s, "
             f"load_model + predict {python:.2f} s")
    table = pd.DataFrame(rows, columns=COLUMNS)
    for col in ("evaluate_seconds", "apply_seconds", "apply_command_seconds",
                "python_seconds"):
        table[col] = table[col].round(4)
    for col in ("evaluate_per_second", "apply_per_second", "apply_over_evaluate",
                "command_over_python"):
        table[col] = table[col].round(2)
    return table


def _python_seconds(name: str, run_dir: Path, source: str, applied: Path) -> float:
    """Seconds of ``scarce.load_model(run_dir)`` and its predict call on ``source``
    (:data:`PYTHON_CALLS`), after a first call whose result is checked against the apply
    run's output (the second call is timed: the first pays for imports)."""
    import scarce

    call = PYTHON_CALLS[name]
    result = call(scarce.load_model(run_dir), source)
    output = PYTHON_OUTPUTS.get(name)
    if output is not None:
        want = pd.read_parquet(applied / "outputs" / output)
        pd.testing.assert_frame_equal(result.reset_index(drop=True),
                                      want.reset_index(drop=True), check_exact=True)
    elif len(result) == 0:
        raise RuntimeError(f"{name}: load_model's predict gave no rows")
    started = time.perf_counter()
    call(scarce.load_model(run_dir), source)
    return time.perf_counter() - started
