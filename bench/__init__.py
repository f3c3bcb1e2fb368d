"""Benchmarks: ``scarce bench NAME [options]`` prints a table and writes it as Parquet.

Each module here has ``add_arguments(parser)`` and ``run(args) -> pandas.DataFrame``;
the command line prints the table (markdown, for README) and saves it under
``data/bench/<name>-<timestamp>.parquet``.  Timings are reported as ratios to a
peer measured in the same run, since these machines are shared and noisy.
"""

BENCHMARKS = {
    "leml": "scarce.bench.leml",
    "leml-blocks": "scarce.bench.leml_blocks",
    "relations": "scarce.bench.relations",
    "strip": "scarce.bench.strip",
    "overhead": "scarce.bench.overhead",
    "workers": "scarce.bench.workers",
    "apply": "scarce.bench.apply",
}
