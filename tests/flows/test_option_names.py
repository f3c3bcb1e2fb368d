"""One option name for one idea across the command line: every parser (``scarce``'s commands
and each benchmark's own) is enumerated, and

* a spelling retired for the name the other commands use is in none of them, not even hidden
  (a deployments file holds config keys, never options, so no file in the wild can use one);
* the words of one idea (the file of settings, the cache) are spelled one way everywhere;
* ``--flow`` is a choice among the registry's flows wherever it is taken (a benchmark's list of
  flows too: the option repeated), refused by the parser when it is not one, and means the same
  flow in every command;
* a run is the positional ``RUN_ID`` wherever a command takes one, never an option.
"""

from __future__ import annotations

import argparse

import pytest

from scarce.bench import BENCHMARKS
from scarce.flows.cli import build_parser, main
from scarce.flows.commands.bench import benchmark_parser
from scarce.flows.registry import FLOWS
from tests.flows.helpers import command_parsers

#: A retired spelling -> the one every command uses for its idea.
RETIRED = {"--use-cache": "--no-refresh", "--file": "--config", "--config-file": "--config",
           "--no-cache": "--refresh", "--cache": "--refresh", "--flows": "--flow (repeated)",
           "--tags": "--tag (a run's; a count of labels is --labels)",
           "--run": "the positional RUN_ID", "--run-id": "the positional RUN_ID"}
#: The spellings one idea may take; each idea is spelled by one of them in every parser.
IDEAS = {
    "the file a command reads its settings from": {"--config", "--file", "--config-file"},
    "whether the steps recompute": {"--refresh", "--use-cache", "--cache", "--no-cache"},
    "a config key set on the command line": {"--set", "--override"},
    "the flow": {"--flow", "--flows"},
    "a run's tag": {"--tag", "--tags"},
}


def parsers() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the command line, a benchmark's own included."""
    out = list(command_parsers(build_parser()))
    for name in BENCHMARKS:
        out.append((("bench", name), benchmark_parser(name)[1]))
    return out


def options() -> list[tuple[tuple[str, ...], str, argparse.Action]]:
    """(command words, option string, action) of every option of every parser."""
    return [(path, option, action) for path, parser in parsers() for action in parser._actions
            for option in action.option_strings]


def test_the_options_are_found():
    found = {(path, option) for path, option, _ in options()}
    for expected in [(("run",), "--config"), (("run",), "--refresh"), (("rerun",), "--refresh"),
                     (("rerun",), "--no-refresh"), (("deploy",), "--config"),
                     (("serve",), "--config"), (("apply",), "--flow"), (("runs",), "--flow"),
                     (("bench", "overhead"), "--set"), (("bench", "overhead"), "--flow"),
                     (("bench", "apply"), "--flow"), (("bench", "workers"), "--set"),
                     (("bench", "baselines"), "--labels")]:
        assert expected in found, expected


def test_no_parser_takes_a_retired_spelling_even_hidden():
    taken = [(path, option) for path, option, _ in options() if option in RETIRED]
    assert not taken, [f"scarce {' '.join(p)} {o}: use {RETIRED[o]}" for p, o in taken]


@pytest.mark.parametrize("idea", list(IDEAS))
def test_one_idea_is_spelled_one_way_in_every_command(idea):
    spellings = {option.removeprefix("--no-").removeprefix("--")
                 for _, option, _ in options() if option in IDEAS[idea]
                 or option.replace("--no-", "--") in IDEAS[idea]}
    assert len(spellings) <= 1, f"{idea}: {sorted(spellings)}"


@pytest.mark.parametrize("argv, old", [
    (["rerun", "RUN", "--use-cache"], "--use-cache"),
    (["deploy", "--file", "configs/deployments.yaml"], "--file"),
    (["serve", "--file", "configs/deployments.yaml"], "--file"),
])
def test_a_retired_spelling_is_a_usage_error(argv, old, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert f"unrecognized arguments: {old}" in capsys.readouterr().err


def test_refresh_defaults_to_the_cache_for_run_and_to_recomputing_for_rerun():
    parse = build_parser().parse_args
    assert parse(["run", "leml"]).refresh is False
    assert parse(["run", "leml", "--refresh"]).refresh is True
    assert parse(["rerun", "RUN"]).refresh is True
    assert parse(["rerun", "RUN", "--no-refresh"]).refresh is False


def test_deploy_and_serve_read_the_deployments_file_given_by_config():
    parse = build_parser().parse_args
    for command in ("deploy", "serve"):
        assert parse([command, "--config", "mine.yaml"]).file == "mine.yaml"


def _flow_options():
    return [(path, action) for path, option, action in options() if option == "--flow"]


def test_every_flow_option_is_a_choice_among_the_registrys_flows():
    found = _flow_options()
    assert {path for path, _ in found} >= {("apply",), ("runs",)}
    for path, action in found:
        assert action.choices is not None, path
        assert set(action.choices) <= set(FLOWS), (path, set(action.choices) - set(FLOWS))
        assert action.metavar == "FLOW", path


def test_a_flow_one_command_takes_every_other_takes_too():
    """``runs`` lists the runs of any flow; ``apply --flow`` names the training flow of
    ``latest``, so it takes the flows whose model can be applied: each of those is a flow
    ``runs --flow`` takes, under the same name."""
    choices = {path: set(action.choices) for path, action in _flow_options()}
    assert choices[("runs",)] == set(FLOWS)
    trained = {spec.applies for spec in FLOWS.values() if spec.kind == "apply" and spec.applies}
    assert choices[("apply",)] == trained
    # the project's own (a test module may register a sample flow of its own: `digits`)
    training = {name for name, spec in FLOWS.items()
                if spec.kind == "train" and spec.target.startswith("scarce.flows.")}
    for bench in (("bench", "overhead"), ("bench", "apply")):  # a new training flow is measured
        assert choices[bench] == training, bench
    for path, names in choices.items():
        assert names <= choices[("runs",)], path


@pytest.mark.parametrize("path, flow", [
    (path, flow) for path, action in sorted(_flow_options(), key=lambda p: p[0])
    for flow in ["bogus", "LEML", "leml-", "experiment", "apply-leml"]
    if flow not in action.choices], ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_an_unknown_flow_is_the_parsers_choice_error(path, flow, capsys):
    argv = [*path, *(["RUN", "--input", "x"] if path == ("apply",) else []), "--flow", flow]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --flow: invalid choice: {flow!r}" in err


def test_a_benchmarks_flows_are_the_flow_option_repeated():
    parse = {path: parser.parse_args for path, parser in parsers()}
    for path in (("bench", "overhead"), ("bench", "apply")):
        assert parse[path]([]).flows is None, path  # every flow it measures
        assert parse[path](["--flow", "strip", "--flow", "leml"]).flows == ["strip", "leml"]


def test_a_run_is_the_positional_run_id_in_every_command():
    found = []
    for path, parser in parsers():
        for action in parser._actions:
            if action.dest in ("run", "run_id") or {"--run", "--run-id"} & set(
                    action.option_strings):
                found.append(path)
                assert not action.option_strings, (path, action.option_strings)
                assert (action.dest, action.metavar) == ("run_id", "RUN_ID"), path
    assert {("rerun",), ("apply",), ("runs",), ("bench", "load")} <= set(found)


def test_a_benchmarks_run_id_reaches_its_parser_through_the_command_line():
    args, extra = build_parser().parse_known_args(["bench", "load", "RUN-1", "--rows", "5"])
    parsed = benchmark_parser(args.name)[1].parse_args(extra)
    assert (parsed.run_id, parsed.rows) == ("RUN-1", 5)
