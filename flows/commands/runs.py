"""``scarce runs``: the table of past runs (settings that differ, the method's metrics), or one
run in detail."""

from __future__ import annotations

import argparse
import re
import sys

from scarce.flows.commands import EXIT_OK

#: The formats ``scarce runs --format`` writes, and the file name ending of each.
FORMATS = ("table", "csv", "md", "parquet")
SUFFIX_OF = {"table": ".txt", "csv": ".csv", "md": ".md", "parquet": ".parquet"}
OUTPUT_SUFFIXES = tuple(SUFFIX_OF.values())


def runs(args: argparse.Namespace) -> int:
    """``scarce runs [RUN_ID] [--flow FLOW] [--tag TAG] [--where KEY=VALUE] [--columns C,...]
    [--all-columns] [--format table|csv|md|parquet] [--output PATH]``."""
    from scarce.flows.config import SAFE_NAME
    from scarce.flows.environment import default_runs_root
    from scarce.flows.manifest import describe_run
    from scarce.flows.runs_table import runs_table
    from scarce.tasks.errors import InputError

    root = default_runs_root()  # --flow is one of the registry's flows (its parser's choices)
    if args.run_id:
        if not re.fullmatch(SAFE_NAME, args.run_id):
            raise InputError(f"not a run id: {args.run_id!r} (see `scarce runs`)", key="run_id")
        given = [o for o, v in (("--output", args.output), ("--format", args.format),
                                ("--columns", args.columns)) if v]
        if given:
            raise InputError(f"{given[0]} is an option of the table of runs; `scarce runs "
                             "RUN_ID` prints one run (redirect it to keep it)", key=given[0])
        print(describe_run(root / args.run_id))
        return EXIT_OK
    fmt = output_format(args.output, args.format)
    if fmt == "parquet" and not args.output:
        raise InputError("--format parquet writes a file: give --output PATH", key="--output")
    columns = args.columns  # names checked by the table (they depend on the runs)
    warnings: list[str] = []
    frame = runs_table(root, flow=args.flow, tags=args.tags, where=args.where, columns=columns,
                       all_columns=args.all_columns, warn=warnings)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    if frame.empty and args.output is None and fmt == "table":
        what = f"{args.flow} runs" if args.flow else "runs"
        print(f"no {what} yet" if not (args.tags or args.where) else f"no {what} match")
        return EXIT_OK
    if args.output:
        write(frame, args.output, fmt)
        print(f"{len(frame)} run(s) written to {args.output}")
    else:
        print(render(frame, fmt), end="")
    return EXIT_OK


def output_format(output: str | None, fmt: str | None) -> str:
    """The format written: ``--format``, else the one the ``--output`` name's suffix says, else
    ``table``; a ``--format`` that the name contradicts is refused."""
    from scarce.tasks.errors import InputError

    by_name = next((f for f, s in SUFFIX_OF.items() if output and output.lower().endswith(s)),
                   None)
    if fmt is not None and output is not None and by_name != fmt:
        raise InputError(f"--format {fmt} is written to a {SUFFIX_OF[fmt]} file, not "
                         f"{output!r}", key="--output")
    return fmt or by_name or "table"


def render(frame, fmt: str) -> str:
    """The table as text: aligned columns (``table``), CSV or a markdown table."""
    import pandas as pd

    from scarce.flows.artifacts import markdown_table

    if fmt == "csv":
        return frame.to_csv(index=False)
    if fmt == "md":
        return markdown_table(frame) + "\n"
    shown = frame.astype(object).where(frame.notna(), "")
    metrics = list(frame.columns)[list(frame.columns).index("method") + 1:] if (
        "method" in frame.columns) else []
    for column in ["seconds", *metrics]:
        if column in frame.columns and pd.api.types.is_float_dtype(frame[column]):
            digits = 1 if column == "seconds" else 4  # an integral metric (k) as an integer
            shown[column] = frame[column].map(
                lambda v, d=digits: "" if pd.isna(v) else
                f"{v:.0f}" if d == 4 and float(v).is_integer() else f"{v:.{d}f}")
    cells = [list(map(str, shown.columns))] + shown.astype(str).to_numpy().tolist()
    widths = [max(len(row[j]) for row in cells) for j in range(len(shown.columns))]
    # left-aligned: a run id starts its line
    return "".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                   + "\n" for row in cells)


def write(frame, path: str, fmt: str) -> None:
    """The table written atomically to ``path`` (checked by the command line's output guard
    before the table was made): Parquet, or the text of ``fmt``."""
    from pathlib import Path

    import pyarrow as pa

    from scarce.flows.outputs import write_failed
    from scarce.tasks.store.atomic import atomic_write_bytes, atomic_write_parquet

    target = Path(path)
    try:
        if fmt == "parquet":
            atomic_write_parquet(target, pa.Table.from_pandas(frame, preserve_index=False))
        else:
            atomic_write_bytes(target, render(frame, fmt).encode("utf-8"))
    except OSError as exc:
        raise write_failed(exc, target, "--output") from None
