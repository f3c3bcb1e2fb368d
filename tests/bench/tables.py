"""The table of a ``scarce bench leml`` run, for the tests of its sections."""

from __future__ import annotations

import argparse

import pandas as pd

from scarce.bench import leml as bench


def leml_table(*argv: str) -> pd.Series:
    """``scarce bench leml ARGV``'s values, indexed by (method, metric)."""
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    return bench.run(parser.parse_args(list(argv))).set_index(["method", "metric"])["value"]
