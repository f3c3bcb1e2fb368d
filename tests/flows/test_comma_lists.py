"""Every comma-separated option of the command line (``scarce``'s commands and each benchmark's
own parser) is split and checked by the parser: a name that is not one of its choices is one
usage error (exit 2) naming the option, the name and the choices, before anything runs, and a
good list parses to its names.

The options are found three ways, so that a list split by hand after parsing cannot slip by:
by what their types do (a type that turns ``a,b`` into a list), by their help or metavar (which
says the value is comma-separated), and by the code of the commands and benchmarks (an
attribute of the parsed arguments split on ``","``, or a ``type=`` function that splits).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
from pathlib import Path

import pytest

import scarce.bench
import scarce.flows.commands
from scarce.flows.cli import main
from scarce.flows.commands.types import NameList, NumberList
from tests.flows.helpers import usage_error
from tests.flows.test_option_names import parsers

LIST_TYPES = (NameList, NumberList)
PROBES = ("a,b", "1,2", "sparse,dense")
PARSERS = dict(parsers())


def options() -> list[tuple[tuple[str, ...], argparse.Action]]:
    """(command words, action) of every option of every parser."""
    return [(path, a) for path, p in PARSERS.items() for a in p._actions if a.option_strings]


def _name(path, action) -> str:
    return f"{' '.join(path)} {action.option_strings[-1]}"


def _makes_a_list(kind) -> bool:
    for text in PROBES:
        try:
            if isinstance(kind(text), list | tuple):
                return True
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            continue
    return False


def _says_comma_separated(action) -> bool:
    return "comma-separated" in (action.help or "") or "," in str(action.metavar or "")


def comma_options() -> list[tuple[tuple[str, ...], argparse.Action]]:
    """The options that take a comma-separated value: by type, by help or by metavar."""
    return [(path, a) for path, a in options()
            if isinstance(a.type, LIST_TYPES) or (a.type is not None and _makes_a_list(a.type))
            or _says_comma_separated(a)]


COMMA = comma_options()
NAMES = [(path, a) for path, a in COMMA if isinstance(a.type, NameList)]
CASES = [(path, a.option_strings[-1], a.type, bad) for path, a in NAMES
         for bad in a.type.bad_values()]


# -- the options found from the code ------------------------------------------------------
def comma_splits(source: str) -> list[tuple[int, str]]:
    """(line, what) of each place ``source`` splits a parsed option on ``","``: a call
    ``NAME.ATTR.split(",")`` (``args.jobs.split(",")``), or a ``type=`` function of an
    ``add_argument`` that splits its text on ``","``."""
    tree = ast.parse(source)
    splitters = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                 and any(_splits_on_comma(n) for n in ast.walk(f))}
    found = []
    for node in ast.walk(tree):
        if _splits_on_comma(node) and isinstance(node.func.value, ast.Attribute) and isinstance(
                node.func.value.value, ast.Name):
            found.append((node.lineno, f"{node.func.value.value.id}.{node.func.value.attr}"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                node.func.attr == "add_argument"):
            for kw in node.keywords:
                if kw.arg == "type" and isinstance(kw.value, ast.Name) and (
                        kw.value.id in splitters):
                    found.append((node.lineno, f"type={kw.value.id}"))
    return found


def _splits_on_comma(node) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "split" and bool(node.args)
            and isinstance(node.args[0], ast.Constant) and node.args[0].value == ",")


def command_sources() -> list[Path]:
    """The code that parses and reads the options: the command line, its handlers and every
    benchmark module."""
    folders = [Path(inspect.getfile(scarce.bench)).parent,
               Path(inspect.getfile(scarce.flows.commands)).parent]
    files = [f for folder in folders for f in sorted(folder.glob("*.py"))]
    return [*files, Path(inspect.getfile(main))]


def test_the_split_finder_finds_a_split_option_and_a_splitting_type():
    source = ("def _names(text):\n    return [t for t in text.split(',')]\n"
              "def add(p):\n    p.add_argument('--x', type=_names)\n"
              "def run(args):\n    return args.jobs.split(',')\n")
    assert sorted(what for _, what in comma_splits(source)) == ["args.jobs", "type=_names"]


def test_no_command_splits_an_option_itself():
    found = [f"{path.name}:{line}: {what}" for path in command_sources()
             for line, what in comma_splits(path.read_text())]
    assert not found, f"split by the parser instead (scarce.flows.commands.types): {found}"


# -- the options found from the parsers -------------------------------------------------
def test_the_comma_options_are_found():
    names = {_name(path, a) for path, a in COMMA}
    assert {"bench baselines --problems", "bench baselines --methods", "bench leml --sections",
            "bench leml --datasets", "bench leml --losses", "bench leml --modes",
            "bench relations --rankings", "bench relations --windows",
            "bench relations --baselines", "bench store --kinds", "bench workers --jobs",
            "bench strip --variants", "bench latency --commands", "runs --columns",
            "bench leml --ranks", "bench workers --workers"} <= names


@pytest.mark.parametrize("path, action", COMMA, ids=[_name(p, a) for p, a in COMMA])
def test_every_comma_option_is_split_and_checked_by_the_parser(path, action):
    assert isinstance(action.type, LIST_TYPES), (
        f"{_name(path, action)}: type {action.type!r} (use comma_list or NumberList of "
        "scarce.flows.commands.types)")


@pytest.mark.parametrize("path, action", NAMES, ids=[_name(p, a) for p, a in NAMES])
def test_a_comma_options_default_is_among_its_choices(path, action):
    default = action.default
    if isinstance(default, str):  # argparse parses a text default with the type
        default = action.type(default)
    if default is not None and action.type.choices is not None:
        assert default and set(default) <= set(action.type.choices), default


@pytest.mark.parametrize("path, option, kind, bad", CASES,
                         ids=[f"{' '.join(p)} {o}={b}" for p, o, _, b in CASES])
def test_a_bad_name_is_one_usage_error_naming_it_and_the_choices(path, option, kind, bad,
                                                                 tmp_path, monkeypatch, capsys):
    line = usage_error([*path, f"{option}={bad}"], tmp_path, monkeypatch, capsys)
    assert re.search(rf"error: argument {re.escape(option)}: ", line), line
    assert repr(bad) in line, line
    wrong = [n.strip() for n in bad.split(",") if n.strip()]
    if kind.choices is not None and wrong:
        assert repr(next(n for n in wrong if n not in kind.choices)) in line
        assert ", ".join(kind.choices) in line


@pytest.mark.parametrize("path, action", NAMES, ids=[_name(p, a) for p, a in NAMES])
def test_a_good_list_parses_to_its_names_in_order_each_once(path, action):
    parser = PARSERS[path]
    option = action.option_strings[-1]
    if action.type.choices is not None:
        names = list(action.type.choices[:3])[::-1]
    elif action.type.item is not None:  # a window pre-mid-post
        names = ["2-10-2", "0-5-0"]
    else:
        names = ["b", "a"]
    extra = ["RUN"] if any(a.dest == "run_id" and not a.option_strings and a.nargs is None
                           for a in parser._actions) else []
    text = " , ".join(names + names[:1]) + ","
    parsed = parser.parse_args([*extra, option, text])
    assert getattr(parsed, action.dest) == names
