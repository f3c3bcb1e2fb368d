"""``scarce apply``: what a finished run learned, applied to new input as an apply run."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from scarce.flows.commands import EXIT_OK
from scarce.flows.commands.running import (
    check_runs,
    choose_runner,
    execute,
    prefect_api,
    preflight,
    print_summary,
)

#: What an apply run's ``--output`` file may be named (LEML and relations write Parquet or CSV,
#: StRip CoNLL-U); each apply flow checks its own before it reads anything.
OUTPUT_SUFFIXES = (".parquet", ".csv", ".conllu")


def apply(args: argparse.Namespace) -> int:
    """``scarce apply RUN_ID --input PATH``: the run's apply flow on the input."""
    from scarce.flows import manifest as mf
    from scarce.flows.apply import resolve_model_run
    from scarce.flows.config import SAFE_NAME, apply_overrides, default_runs_root, validate_config
    from scarce.flows.registry import FLOWS
    from scarce.tasks.errors import InputError

    runs = default_runs_root()
    if args.run_id == "latest" or args.run_id.startswith("latest:"):
        if not args.flow:
            raise InputError(f"{args.run_id!r} needs --flow (leml, relations or strip)",
                             key="run_id")
        flow = args.flow
        run_dir = resolve_model_run(args.run_id, flow, runs)
    else:
        if not re.fullmatch(SAFE_NAME, args.run_id):
            raise InputError(f"not a run id: {args.run_id!r} (see `scarce runs`)", key="run_id")
        flow = mf.read_manifest(runs / args.run_id)["flow"]
        run_dir = resolve_model_run(args.run_id, args.flow or flow, runs)
    spec = FLOWS.get(f"apply-{flow}")
    if spec is None:
        raise InputError(f"runs of the {flow} flow cannot be applied", key="run_id")
    model = spec.load_model()
    # Paths on the command line are the user's, relative to where the command runs (a
    # config file's paths are relative to the project root).
    data: dict[str, Any] = {"model_run": run_dir.name, "input": str(Path(args.input).absolute())}
    if args.output:
        data["output"] = str(Path(args.output).absolute())
    if args.force:
        data["force"] = True
    if args.top_k is not None:
        if "top_k" not in model.model_fields:
            raise InputError(f"--top-k is an option of LEML, not of {flow}", key="top_k")
        data["top_k"] = args.top_k
    if args.keep_columns:
        if "keep_columns" not in model.model_fields:
            raise InputError(f"--keep-column is an option of LEML, not of {flow}",
                             key="keep_columns")
        data["keep_columns"] = list(args.keep_columns)
    data = apply_overrides(data, args.overrides, model) if args.overrides else data
    config = validate_config(data, model, None)
    preflight(args.dask_address)
    check_runs([config], runs)  # the model, the input and the output, before the server
    from scarce.flows.runtime import RunOptions  # (with Prefect: after the checks)

    runner = choose_runner(args)
    options = RunOptions(runner=runner, dask_address=args.dask_address)
    with prefect_api():
        summary = execute(spec, config, options, runner, args.dask_address)
    print_summary(spec.name, summary)
    for o in summary["manifest"].get("named_outputs") or []:
        print(f"  outputs/{o['name']}")
    return EXIT_OK

