"""``scarce claims``: the papers' claims checked on runs and experiments (Chen et al.'s on
relations experiments, Yu et al.'s on LEML runs and experiments, Stoyanov and Cardie's on StRip
experiments)."""

from __future__ import annotations

import argparse
import re

from scarce.flows.commands import EXIT_OK


def claims(args: argparse.Namespace) -> int:
    """The claims of the paper of each run's flow: see :mod:`scarce.flows.claims` and
    :mod:`scarce.flows.paper_claims`."""
    from scarce.flows import paper_claims as pc
    from scarce.flows.claims import claims as check_claims
    from scarce.flows.claims import claims_markdown, read_experiments
    from scarce.flows.config import SAFE_NAME
    from scarce.flows.environment import default_runs_root
    from scarce.tasks.errors import InputError

    for run_id in args.run_ids:
        if not re.fullmatch(SAFE_NAME, run_id):
            raise InputError(f"not a run id: {run_id!r} (see `scarce runs`)", key="run_id")
    runs = default_runs_root()
    flows = {run_id: pc.flow_of(runs / run_id) for run_id in args.run_ids}
    relations = [r for r in args.run_ids if flows[r] == "relations"]
    if relations:  # joined: their rows are one table's groups
        table, words, group = read_experiments([runs / r for r in relations], runs)
        print(claims_markdown(*check_claims(table, words, group), group), end="")
    for run_id in (r for r in args.run_ids if flows[r] != "relations"):
        if flows[run_id] == "published":
            verdicts = pc.published_claims(runs / run_id)
        else:
            verdicts = pc.experiment_claims(runs / run_id, flows[run_id])
        print(f"run {run_id}:")
        print(pc.claims_markdown(verdicts), end="")
    return EXIT_OK
