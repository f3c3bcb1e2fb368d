"""``scarce rerun``: a run again from its manifest, its outputs compared with the new run's and
its damaged files restored where the rerun reproduced them; ``scarce diff``: two runs compared.
Both say why first (inputs, code, packages, config), then what differs, by what the files hold
(a Parquet file by its table), and apart from it the metadata that differs where they hold the
same (another pandas in a footer; the store key that entries written by earlier versions
carried)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from scarce.flows.commands import EXIT_FAIL, EXIT_OK
from scarce.flows.commands.running import (
    check_runs,
    choose_runner,
    execute,
    prefect_api,
    preflight,
)


def rerun(args: argparse.Namespace) -> int:
    """``scarce rerun RUN_ID``: ``identical`` (exit 0) or what differs (exit 1)."""
    from scarce.flows import manifest as mf
    from scarce.flows.config import SAFE_NAME, default_runs_root, validate_config
    from scarce.flows.registry import FLOWS
    from scarce.tasks.errors import InputError

    if not re.fullmatch(SAFE_NAME, args.run_id):  # a run id never holds a path separator
        raise InputError(f"not a run id: {args.run_id!r} (see `scarce runs`)", key="run_id")
    runs = default_runs_root()
    run_dir = runs / args.run_id
    old = mf.read_manifest(run_dir)
    spec = FLOWS.get(old["flow"])
    if spec is None:
        raise InputError(f"flow {old['flow']!r} of this run is not available", path=run_dir)
    if not isinstance(old.get("config"), dict):
        raise InputError("the manifest has no config to rerun", path=run_dir / mf.MANIFEST,
                         key="config")
    data = dict(old["config"])
    if spec.kind == "apply" and data.get("output"):
        # A recorded path is a fact about the past, never a place to write: the rerun's
        # results go to its own run folder, where they are compared.
        print(f"note: run {args.run_id} also wrote {data['output']}; the rerun writes only "
              "its own run folder", file=sys.stderr)
        data["output"] = None
    config = validate_config(data, spec.load_model(), run_dir / mf.MANIFEST)
    recorded = old.get("options") or {}
    runner = choose_runner(args, "dask" if old.get("task_runner") == "DaskTaskRunner"
                           else recorded.get("runner"))
    if runner == "dask" and not args.dask_address and recorded.get("dask_address"):
        print(f"note: run {args.run_id} used the Dask cluster at {recorded['dask_address']}; "
              "this rerun starts a local Dask cluster (give --dask-address to use a cluster)",
              file=sys.stderr)
    preflight(args.dask_address)
    check_runs([config], runs)  # its inputs as they are today, before the server starts
    from scarce.flows.runtime import RunOptions, new_run_id  # (with Prefect: after the checks)

    damaged = mf.damaged_outputs(run_dir, old)  # hashed on disk before the rerun writes
    # The store is the one the environment names today (``$SCARCE_STORE`` or the project's):
    # a manifest is a record, never a place to write (a copied project or an edited "store"
    # would otherwise send the rerun's writes elsewhere).
    options = RunOptions(
        runs=str(runs),
        run_id=new_run_id(old["flow"], "rerun"),
        refresh=args.refresh,
        rerun_of=args.run_id,
        runner=runner,
        dask_address=args.dask_address,
    )
    print(f"rerun of {args.run_id} on the {runner} runner", file=sys.stderr)
    with prefect_api():
        summary = execute(spec, config, options, runner, args.dask_address)
    new_dir = Path(summary["run_dir"])
    diffs, notes = explain(old, summary["manifest"], run_dir, new_dir, args.verbose)
    print(f"rerun {summary['run_id']} of {args.run_id}")
    repairs = _repair(run_dir, old, new_dir, damaged)
    for line in repairs:
        print(line)
    if any(line.startswith("damaged:") for line in repairs):
        print("\n".join([*diffs, *notes]) if diffs else "\n".join(
            [f"outputs identical; run {args.run_id} keeps damaged files", *notes]))
        return EXIT_FAIL
    if not diffs:
        from scarce.flows.run_diff import causes

        print("\n".join([*causes(old, summary["manifest"]), identical(notes), *notes]))
        return EXIT_OK
    print("\n".join([*diffs, *notes]))
    return EXIT_FAIL


def identical(notes: list[str]) -> str:
    """The verdict of two runs whose outputs hold the same: ``identical`` when every output is
    the same bytes (store entries perhaps under other keys), with a word when the ``notes``
    below it (``metadata differs: ...``) name metadata that is not the same."""
    from scarce.flows.run_diff import metadata_differs

    return "identical (metadata differs)" if metadata_differs(notes) else "identical"


def explain(old: dict, new: dict, old_dir: Path, new_dir: Path,
            verbose: bool) -> tuple[list[str], list[str]]:
    """Why the outputs of two runs differ, then how (empty when they hold the same); and apart,
    the files and entries that hold the same with other metadata
    (:func:`scarce.flows.run_diff.compare`)."""
    from scarce.flows.run_diff import causes, compare

    differs, notes = compare(old, new, old_dir, new_dir, verbose)
    if not differs:
        return [], notes
    why = causes(old, new) or ["why: the two runs record the same inputs, code, packages and "
                               "config: a step is not deterministic"]
    return why + differs, notes


def diff(args: argparse.Namespace) -> int:
    """``scarce diff RUN_A RUN_B``: ``identical`` (exit 0), or why and what differs (exit 1)."""
    from scarce.flows import manifest as mf
    from scarce.flows.config import SAFE_NAME
    from scarce.flows.environment import default_runs_root
    from scarce.flows.run_diff import causes
    from scarce.tasks.errors import InputError

    runs = default_runs_root()
    for key, run_id in (("run_a", args.run_a), ("run_b", args.run_b)):
        if not re.fullmatch(SAFE_NAME, run_id):
            raise InputError(f"not a run id: {run_id!r} (see `scarce runs`)", key=key)
    dirs = runs / args.run_a, runs / args.run_b
    a, b = (mf.read_manifest(d) for d in dirs)
    lines, notes = explain(a, b, *dirs, args.verbose)
    if not lines:
        why = causes(a, b)  # outputs identical: what differed made no difference
        print("\n".join([*why, identical(notes), *notes]))
        return EXIT_OK
    print("\n".join([*lines, *notes]))
    return EXIT_FAIL


def _repair(run_dir: Path, old: dict, new_dir: Path, damaged: dict[str, str | None]
            ) -> list[str]:
    """Restore each damaged file of the rerun run (bytes on disk unlike its manifest's record)
    whose bytes the rerun reproduced exactly; say what was found and done, file by file."""
    from scarce.flows import manifest as mf
    from scarce.flows.runtime import link_or_copy
    from scarce.tasks.store.atomic import file_sha256, synced_folders

    recorded = mf.recorded_files(old)
    lines = []
    with synced_folders() as syncs:  # each folder fsync-ed once, after its last repair
        for name, actual in sorted(damaged.items()):
            found = "missing" if actual is None else f"sha256 {actual[:12]} on disk"
            fresh = new_dir / name
            if fresh.is_file() and file_sha256(fresh) == recorded[name]:
                link_or_copy(fresh, run_dir / name, syncs)
                lines.append(f"repaired: {name} of run {run_dir.name} ({found}, recorded "
                             f"{recorded[name][:12]}; restored from the rerun's identical file)")
            else:
                lines.append(f"damaged: {name} of run {run_dir.name} ({found}, recorded "
                             f"{recorded[name][:12]}; the rerun did not reproduce it)")
    return lines

