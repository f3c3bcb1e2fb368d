"""Every numeric option of the command line (``scarce`` and each benchmark's parser) has bounds
that argparse checks: a value out of them is one usage error (exit 2), before anything runs.

The options are found by what their types do (an option whose type turns some text into a
number, or a list of numbers, is numeric), so a new ``type=int`` cannot slip by.
"""

from __future__ import annotations

import argparse
import re

import pytest

from scarce.bench import BENCHMARKS
from scarce.flows.cli import build_parser
from scarce.flows.commands.bench import benchmark_parser
from scarce.flows.commands.types import PORT, Number, NumberList, config_number, integer, number
from tests.flows.helpers import command_parsers, usage_error

PROBES = ("0", "1", "-1", "0.5", "1,2", "1x2", "3")


def options() -> list[tuple[tuple[str, ...], argparse.Action]]:
    """(command words, action) of every option with a type, in ``scarce`` and every
    benchmark's own parser."""
    found = [(path, a) for path, p in command_parsers(build_parser()) for a in p._actions
             if a.option_strings and a.type is not None]
    for name in BENCHMARKS:
        _, parser = benchmark_parser(name)
        found += [(("bench", name), a) for a in parser._actions
                  if a.option_strings and a.type is not None]
    return found


def _numeric(value) -> bool:
    if isinstance(value, list | tuple):
        return bool(value) and all(_numeric(v) for v in value)
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_numeric(kind) -> bool:
    """Whether the type turns any of :data:`PROBES` into a number or a list of numbers."""
    for text in PROBES:
        try:
            if _numeric(kind(text)):
                return True
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            continue
    return False


NUMERIC = [(path, action) for path, action in options() if is_numeric(action.type)]
CASES = [(path, action.option_strings[-1], bad) for path, action in NUMERIC
         for bad in action.type.bad_values()]


def test_the_numeric_options_are_found():
    names = {(" ".join(path), a.option_strings[-1]) for path, a in NUMERIC}
    assert {("serve", "--limit"), ("ui", "--port"), ("apply", "--top-k"),
            ("bench leml", "--ranks"), ("bench leml", "--partition-shape"),
            ("bench workers", "--workers"), ("bench strip", "--loss-ratios"),
            ("bench relations", "--theta")} <= names
    assert not is_numeric(str) and is_numeric(int) and is_numeric(float)


@pytest.mark.parametrize("path, action", NUMERIC,
                         ids=[f"{' '.join(p)} {a.option_strings[-1]}" for p, a in NUMERIC])
def test_every_numeric_option_has_bounds(path, action):
    assert isinstance(action.type, Number | NumberList), (
        f"{' '.join(path)} {action.option_strings[-1]}: type {action.type!r} checks no bounds "
        "(use scarce.flows.commands.types)")
    item = action.type.item if isinstance(action.type, NumberList) else action.type
    assert item.low is not None or item.high is not None


@pytest.mark.parametrize("path, option, bad", CASES,
                         ids=[f"{' '.join(p)} {o}={b}" for p, o, b in CASES])
def test_a_value_out_of_bounds_is_one_usage_error(path, option, bad, tmp_path, monkeypatch,
                                                  capsys):
    last = usage_error([*path, f"{option}={bad}"], tmp_path, monkeypatch, capsys)
    named = re.search(r"error: argument ([^:]+): expected ", last)
    assert named and option in named.group(1).split("/") and repr(bad) in last, last


@pytest.mark.parametrize("text, value", [("1", 1), ("65535", 65535), ("4200", 4200)])
def test_a_port_takes_1_to_65535(text, value):
    assert PORT(text) == value
    assert build_parser().parse_args(["ui", "--port", text]).port == value


def test_bounds_are_described_and_kept():
    assert integer(1, 65535).describe() == "an integer from 1 to 65535"
    assert number(0, 1, low_open=True).describe() == "a number in (0, 1]"
    assert number(0, low_open=True).describe() == "a number above 0"
    assert integer(0).describe() == "an integer of at least 0"
    fraction = number(0, 1, high_open=True)
    assert [fraction.contains(v) for v in (-0.1, 0, 0.5, 1)] == [False, True, True, False]
    for bad in fraction.bad_values():
        with pytest.raises(argparse.ArgumentTypeError):
            fraction(bad)
    assert NumberList(integer(1), sep="x", length=2)("10X20") == (10, 20)


def test_an_option_that_sets_a_config_key_has_the_keys_bounds():
    """The benchmark and command-line options for config keys refuse what the config does."""
    from scarce.flows.apply_leml import ApplyLemlConfig
    from scarce.flows.leml import LemlConfig

    top_k = next(a for p, a in NUMERIC if p == ("apply",) and "--top-k" in a.option_strings)
    assert top_k.type == config_number(ApplyLemlConfig, "top_k")
    ranks = next(a for p, a in NUMERIC if p == ("bench", "leml") and "--ranks" in
                 a.option_strings)
    assert ranks.type.item == config_number(LemlConfig, "model.rank")


def test_serving_runner_refuses_a_limit_below_one():
    from scarce.flows.deploy import serving_runner

    for limit in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="at least 1"):
            serving_runner([], limit)
