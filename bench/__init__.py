"""Benchmarks: ``scarce bench NAME [options]`` prints a table and writes it as Parquet.

Each module here has ``add_arguments(parser)`` and ``run(args) -> pandas.DataFrame``;
the command line prints the table (markdown, for README) and saves it under
``data/bench/<name>-<timestamp>.parquet``.  Timings are reported as ratios to a
peer measured in the same run, since these machines are shared and noisy.
"""

BENCHMARKS = {
    "leml": "bench.leml",
    "leml-blocks": "bench.leml_blocks",
    "relations": "bench.relations",
    "strip": "bench.strip",
    "overhead": "bench.overhead",
    "workers": "bench.workers",
    "apply": "bench.apply",
}
