"""``scarce claims``: Chen et al.'s claims checked on relations experiments' tables."""

from __future__ import annotations

import argparse
import re

from scarce.flows.commands import EXIT_OK


def claims(args: argparse.Namespace) -> int:
    """Chen et al.'s claims (a) to (d) on an experiment's table: see :mod:`flows.claims`."""
    from scarce.flows.claims import claims as check_claims
    from scarce.flows.claims import claims_markdown, read_experiments
    from scarce.flows.config import SAFE_NAME
    from scarce.flows.runtime import default_runs_root
    from scarce.tasks.errors import InputError

    for run_id in args.run_ids:
        if not re.fullmatch(SAFE_NAME, run_id):
            raise InputError(f"not a run id: {run_id!r} (see `scarce runs`)", key="run_id")
    runs = default_runs_root()
    table, words, group = read_experiments([runs / r for r in args.run_ids], runs)
    print(claims_markdown(*check_claims(table, words, group), group), end="")
    return EXIT_OK
