"""The command line's parser: version, --debug on either side of the command, choices from the
registries, and help text that says what each option does without history in it."""

from __future__ import annotations

import argparse
import re

import pytest

import scarce
from scarce.bench import BENCHMARKS
from scarce.flows.cli import build_parser, main
from scarce.flows.commands.bench import benchmark_parser
from scarce.flows.registry import FLOWS
from scarce.tasks.errors import InputError
from tests.flows.helpers import command_parsers

MONTH = ("(?:January|February|March|April|May|June|July|August|September|October|November|"
         "December)")
# A calendar date with its year (2026-12-02, 2 December 2026, December 2, 2026) or an issue
# number ("issue 3", "issue #18"): history, which belongs in docs/journal, not in help.
HISTORY = re.compile(rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b|\b\d{{1,2}} {MONTH} \d{{4}}\b|"
                     rf"\b{MONTH} \d{{1,2}},? \d{{4}}\b|\bissues? #?\d+", re.IGNORECASE)


@pytest.fixture(autouse=True)
def empty_project(tmp_path, monkeypatch):
    monkeypatch.setenv("SCARCE_ROOT", str(tmp_path))
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    monkeypatch.delenv("SCARCE_STORE", raising=False)


def test_the_history_pattern_finds_dates_and_issue_numbers_only():
    for text in ("named distributed until 2026-12-02", "omikuji (issue 3).", "see Issue #18",
                 "on 2 December 2026", "since December 2, 2026"):
        assert HISTORY.search(text), text
    for text in ("Chen et al. (2005) Tables 4 and 5", "SemEval-2010 Task 8", "the issue's",
                 "(Yu et al., 2014)", "data/bench/NAME-TIMESTAMP.parquet"):
        assert not HISTORY.search(text), text


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"scarce {scarce.__version__}\n"


@pytest.mark.parametrize("argv", [
    ["--debug", "runs", "no/such"],
    ["runs", "no/such", "--debug"],
    ["runs", "--debug", "no/such"],
], ids=["before", "after", "between"])
def test_debug_before_or_after_the_command_shows_the_traceback(argv):
    with pytest.raises(InputError, match="not a run id: 'no/such'"):
        main(argv)


def test_without_debug_bad_input_is_one_error_line_and_exit_2(capsys):
    assert main(["runs", "no/such"]) == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert "not a run id: 'no/such'" in line and "Traceback" not in err


@pytest.mark.parametrize("argv, debug", [
    (["bench", "leml", "--quick"], False),
    (["--debug", "bench", "leml", "--quick"], True),
    (["bench", "--debug", "leml", "--quick"], True),
    (["bench", "leml", "--quick", "--debug", "--sections", "accuracy"], True),
])
def test_debug_anywhere_in_a_benchmark_command_is_not_passed_to_the_benchmark(argv, debug):
    args, extra = build_parser().parse_known_args(argv)
    assert (args.command, args.name, args.debug) == ("bench", "leml", debug)
    assert extra == [a for a in argv[argv.index("leml") + 1:] if a != "--debug"]


def test_an_unknown_flow_is_argparses_choice_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "nosuchflow"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "scarce run: error: argument FLOW: invalid choice: 'nosuchflow'" in err
    for name in (*FLOWS, "all", "experiment"):
        assert repr(name) in err


def test_run_lists_every_registered_flow_with_its_description(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for name, spec in FLOWS.items():
        assert re.search(rf"^  {re.escape(name)} +{re.escape(spec.description[:30])}", out,
                         re.MULTILINE), name
    assert re.search(r"^  all +every training flow", out, re.MULTILINE)


def test_an_argument_the_command_does_not_take_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["runs", "--quick"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --quick" in capsys.readouterr().err


def test_bench_help_names_every_registered_benchmark(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # help wraps long descriptions
    assert len(BENCHMARKS) >= 7
    for benchmark in BENCHMARKS.values():
        assert f" {benchmark.name} " in out
        assert benchmark.description and benchmark.description in out


def test_an_unknown_benchmark_is_argparses_choice_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "nosuchbench"])
    assert exit_.value.code == 2
    assert "argument NAME: invalid choice: 'nosuchbench'" in capsys.readouterr().err


def test_a_benchmark_description_is_its_module_docstrings_first_line():
    for benchmark in BENCHMARKS.values():
        module = benchmark.load()
        first = module.__doc__.strip().split("\n\n")[0]
        assert benchmark.description == " ".join(first.split()).replace("``", "`")


def test_every_argument_has_help_and_no_help_holds_a_date_or_an_issue_number():
    for path, parser in command_parsers(build_parser()):
        for action in parser._actions:
            if not isinstance(action, argparse._SubParsersAction):
                assert action.help, (path, action.dest)
        text = parser.format_help()
        assert not HISTORY.search(text), (path, HISTORY.search(text).group())


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_no_benchmark_help_holds_a_date_or_an_issue_number(name, capsys):
    _, parser = benchmark_parser(name)
    text = parser.format_help()
    assert not HISTORY.search(text), HISTORY.search(text).group()
    with pytest.raises(SystemExit) as exit_:  # what `scarce bench NAME --help` prints
        main(["bench", name, "--help"])
    assert exit_.value.code == 0 and capsys.readouterr().out == text


def test_run_flow_choices_follow_the_registry(monkeypatch):
    from scarce.flows.registry import FlowSpec

    monkeypatch.setitem(FLOWS, "extra", FlowSpec("extra", "m:f", "m:C", "configs/extra.yaml",
                                                 description="a flow registered later"))
    args = build_parser().parse_args(["run", "extra"])
    assert args.flow == "extra" and args.func.__module__ == "scarce.flows.commands.run"
