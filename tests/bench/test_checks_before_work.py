"""Every benchmark's ``--set``, and ``bench leml``'s data sets, are checked before any work: a
setting the flow's config (or the estimator) refuses is one ``error:`` line and exit 2, before
a Prefect API starts and before the benchmark's ``run``.  Checked inside ``run``, a bad setting
of the last flow was found after the others had been measured.

The benchmarks are enumerated from :data:`scarce.bench.BENCHMARKS`, their ``--set`` options
from their parsers, so a new one cannot be missed."""

from __future__ import annotations

import argparse

import pytest

from scarce.bench import BENCHMARKS
from scarce.flows.cli import main
from scarce.flows.commands import bench as bench_command
from scarce.flows.commands.types import FlowSetting


def _set_option(name: str) -> argparse.Action | None:
    _, parser = bench_command.benchmark_parser(name)
    return next((a for a in parser._actions if "--set" in a.option_strings), None)


def _bad_settings() -> list[tuple[str, str]]:
    """(benchmark, a ``--set`` value its checks refuse), for every benchmark with ``--set``:
    for each flow of a ``FLOW:KEY=VALUE`` option, a key no config has."""
    out = []
    for name in BENCHMARKS:
        action = _set_option(name)
        if action is None:
            continue
        if isinstance(action.type, FlowSetting):
            out += [(name, f"{flow}:no_such_key=1") for flow in action.type.flows]
        else:
            out.append((name, "no_such_key=1"))
    return out


BAD = _bad_settings()


def test_the_benchmarks_with_settings_are_found():
    assert {name for name, _ in BAD} >= {"overhead", "latency", "workers", "leml"}


@pytest.fixture
def nothing_may_start(monkeypatch):
    """A Prefect API or a benchmark's ``run`` fails the test."""
    def started(*_args, **_kwargs):
        raise AssertionError("work started before the settings were checked")

    monkeypatch.setattr(bench_command, "prefect_api", started)
    for name in BENCHMARKS:
        monkeypatch.setattr(BENCHMARKS[name].load(), "run", started)


@pytest.mark.parametrize("name, setting", BAD, ids=[f"{n}-{s}" for n, s in BAD])
def test_a_setting_the_config_refuses_is_one_line_before_any_work(name, setting, capsys,
                                                                  nothing_may_start):
    assert main(["bench", name, "--set", setting]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "no_such_key" in err[0], err


@pytest.mark.parametrize("name", sorted({n for n, s in BAD if ":" in s}))
def test_a_flow_setting_of_no_flow_is_refused_by_the_parser(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", name, "--set", "no_such_flow:rank=1"])
    assert exit_.value.code == 2
    assert "expected FLOW:KEY=VALUE with FLOW one of" in capsys.readouterr().err


def test_bench_leml_refuses_data_sets_of_which_none_has_its_files(tmp_path, capsys,
                                                                  nothing_may_start):
    assert main(["bench", "leml", "--datasets", "bibtx,delicous",
                 "--sections", "accuracy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bibtx,delicous" in err[0] and "bibtex" in err[0], err
    # a section that reads no data set does not ask for one: the work starts
    main(["bench", "leml", "--datasets", "none", "--sections", "synthetic", "--data",
          str(tmp_path)])
    assert "work started" in capsys.readouterr().err
