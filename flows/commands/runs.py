"""``scarce runs``: the past runs one a line, or one run in detail."""

from __future__ import annotations

import argparse
import re
import sys

from scarce.flows.commands import EXIT_OK


def runs(args: argparse.Namespace) -> int:
    """``scarce runs [RUN_ID] [--flow FLOW]``."""
    import pandas as pd

    from scarce.flows.config import SAFE_NAME
    from scarce.flows.manifest import describe_run, list_runs
    from scarce.flows.runtime import default_runs_root
    from scarce.tasks.errors import InputError

    root = default_runs_root()
    if args.flow is not None:
        from scarce.flows.registry import FLOWS

        if args.flow not in FLOWS:
            raise InputError(f"unknown flow {args.flow!r} (known: {', '.join(sorted(FLOWS))})",
                             key="--flow")
    if args.run_id:
        if not re.fullmatch(SAFE_NAME, args.run_id):
            raise InputError(f"not a run id: {args.run_id!r} (see `scarce runs`)", key="run_id")
        print(describe_run(root / args.run_id))
        return EXIT_OK
    warnings: list[str] = []
    frame = list_runs(root, flow=args.flow, warn=warnings)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    if frame.empty:
        print("no runs yet" if not args.flow else f"no {args.flow} runs yet")
        return EXIT_OK
    frame["seconds"] = frame["seconds"].map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
    cells = [list(frame.columns)] + frame.astype(str).to_numpy().tolist()
    widths = [max(len(row[j]) for row in cells) for j in range(len(frame.columns))]
    for row in cells:  # left-aligned: a run id starts its line
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK
