"""``scarce bench NAME``: a registered benchmark run, its table printed as markdown and written
as Parquet under ``data/bench/``."""

from __future__ import annotations

import argparse
from types import ModuleType

from scarce.flows.commands import EXIT_OK, HelpFormatter
from scarce.flows.commands.running import prefect_api


def benchmark_parser(name: str) -> tuple[ModuleType, argparse.ArgumentParser]:
    """The module of the registered benchmark ``name`` and the parser of its options (its help:
    the module's docstring and each option's default)."""
    from scarce.bench import BENCHMARKS

    module = BENCHMARKS[name].load()
    parser = argparse.ArgumentParser(prog=f"scarce bench {name}", description=module.__doc__,
                                     formatter_class=HelpFormatter)
    module.add_arguments(parser)
    return module, parser


def bench(args: argparse.Namespace) -> int:
    """``scarce bench NAME [options]``: the benchmark's options parsed, the benchmark run."""
    import datetime as dt

    from scarce.flows.config import project_root
    from scarce.flows.outputs import check_command
    from scarce.flows.runtime import markdown_table
    from scarce.tasks.store.atomic import atomic_write_parquet
    from scarce.tasks.store.encoding import encode

    module, parser = benchmark_parser(args.name)
    bench_args = parser.parse_args(args.bench_args)
    check_command(parser, bench_args)  # a benchmark's own output options, before it runs
    check = getattr(module, "check", None)
    if check is not None:  # what its parser cannot check (a flow's config, files), at once
        check(bench_args)
    if getattr(module, "USES_PREFECT", True):
        with prefect_api():
            table = module.run(bench_args)
    else:  # its own processes choose their server: none started here for nothing
        table = module.run(bench_args)
    print(markdown_table(table))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    out = project_root() / "data" / "bench" / f"{args.name}-{stamp}.parquet"
    atomic_write_parquet(out, encode(table.reset_index(drop=True)))
    print(f"\ntable written to {out}")
    return EXIT_OK
