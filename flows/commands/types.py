"""Types of the command line's options that argparse checks: numbers against bounds, and lists
of names against their choices.

``type=int`` checks the syntax alone: ``scarce serve --limit 0`` was taken (and served for ever),
``scarce ui --port 99999`` failed in the socket library with a traceback.  A :class:`Number`
(or a comma-separated :class:`NumberList` of them) raises :class:`argparse.ArgumentTypeError`
for a value out of its bounds, which argparse prints as its one-line usage error (exit 2).  A
bound of an option that sets a config key is read from the config model
(:func:`config_number`), so the two cannot differ.

A comma-separated list of names (``scarce bench leml --sections accuracy,speed``) is a
:class:`NameList` (:func:`comma_list`): each name one of its choices (or accepted by its
``item`` check), else the same one-line usage error naming the option, the name and the
choices, before the command does anything.  Split by hand after parsing, a misspelt name was
found only when the benchmark reached it, after minutes of work.
"""

from __future__ import annotations

import argparse
import math
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import annotated_types


@dataclass(frozen=True)
class Number:
    """An integer (``kind`` int) or a finite number (``kind`` float) in ``[low, high]``; an
    ``open`` end excludes its bound (``low=0, low_open=True``: above 0)."""

    kind: type = int
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    # Words the option takes besides numbers (a config key of ``int | Literal["auto"]``).
    words: tuple[str, ...] = ()

    @property
    def __name__(self) -> str:  # argparse names a type by it
        return "integer" if self.kind is int else "number"

    def __call__(self, text: str) -> int | float | str:
        if text in self.words:
            return text
        try:
            value = int(text, 10) if self.kind is int else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {text!r}") from None
        if not (math.isfinite(value) and self.contains(value)):
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {text!r}")
        return value

    def contains(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self) -> str:
        """``an integer from 1 to 65535``, ``a number above 0``, ``a number in [0, 1)``; with
        words, ``auto or an integer of at least 0``."""
        words = "".join(f"{w!r} or " for w in self.words)
        return words + self._describe_number()

    def _describe_number(self) -> str:
        what = "an integer" if self.kind is int else "a number"
        low, high = _shown(self.low), _shown(self.high)
        if self.low is not None and self.high is not None:
            if not (self.low_open or self.high_open):
                return f"{what} from {low} to {high}"
            return (f"{what} in {'(' if self.low_open else '['}{low}, {high}"
                    f"{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{what} {'above' if self.low_open else 'of at least'} {low}"
        if self.high is not None:
            return f"{what} {'below' if self.high_open else 'of at most'} {high}"
        return f"{what}" if self.kind is int else "a finite number"

    def bad_values(self) -> list[str]:
        """Texts this type refuses: each bound crossed, and (for a number) NaN and infinity."""
        out = ["one"]
        step = 1 if self.kind is int else 0.5
        if self.low is not None:
            out.append(_text(self.low if self.low_open else self.low - step, self.kind))
        if self.high is not None:
            out.append(_text(self.high if self.high_open else self.high + step, self.kind))
        if self.kind is float:
            out += ["nan", "inf", "-inf"]
        return out


@dataclass(frozen=True)
class NumberList:
    """At least one :class:`Number` ``item``, separated by ``sep`` (``1,2,4``; a letter in
    either case); with ``length``, exactly that many (``400000x100000``).  Parses to a list (a
    tuple with ``length``)."""

    item: Number
    sep: str = ","
    length: int | None = None

    @property
    def __name__(self) -> str:
        return f"list of {self.item.__name__}s"

    def __call__(self, text: str) -> list | tuple:
        parts = [p.strip() for p in re.split(re.escape(self.sep), text, flags=re.I)]
        if self.length is None:
            parts = [p for p in parts if p]
        if not parts or (self.length is not None and len(parts) != self.length):
            count = f"{self.length}" if self.length is not None else "one or more"
            raise argparse.ArgumentTypeError(
                f"expected {count} of {self.item.describe()} separated by {self.sep!r}, "
                f"got {text!r}")
        values = []
        for p in parts:
            try:
                values.append(self.item(p))
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(f"{exc} in {text!r}") from None
        return tuple(values) if self.length is not None else values

    def bad_values(self) -> list[str]:
        good = _text(_inside(self.item), self.item.kind)
        n = self.length or 2
        out = [self.sep.join([good] * (n - 1) + [bad]) for bad in self.item.bad_values()]
        out.append(self.sep.join([good] * (n + 1)) if self.length else self.sep)
        return out


@dataclass(frozen=True)
class NameList:
    """At least one name, separated by commas (blanks around them and empty items ignored):
    each one of ``choices`` when given, else any name ``item`` accepts (a function raising
    ``ValueError`` for a bad one: ``0-10-0`` a window), else any name.  Parses to the list of
    names in the order given, a name repeated kept once."""

    choices: tuple[str, ...] | None = None
    item: Callable[[str], Any] | None = None

    @property
    def __name__(self) -> str:
        return "list of names"

    def __call__(self, text: str) -> list[str]:
        names = list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
        if not names:
            raise argparse.ArgumentTypeError(
                f"expected {self.describe()} separated by ',', got {text!r}")
        for name in names:
            if self.choices is not None and name not in self.choices:
                raise argparse.ArgumentTypeError(
                    f"{name!r} is not one of {', '.join(self.choices)} (in {text!r})")
            if self.item is not None:
                try:
                    self.item(name)
                except ValueError as exc:
                    raise argparse.ArgumentTypeError(f"{exc} (in {text!r})") from None
        return names

    def describe(self) -> str:
        return f"one or more of {', '.join(self.choices)}" if self.choices else "one or more names"

    def bad_values(self) -> list[str]:
        """Texts this type refuses: no name at all, a name its ``item`` check refuses, and
        (with choices) a name not among them after a good one, and a choice in capitals."""
        out = [",", " "]
        if self.item is not None and _refuses(self.item, "no-such-name"):
            out.append("no-such-name")
        if self.choices:
            first = self.choices[0]
            out += [f"{first},no-such-name"] + (
                [first.upper()] if first.upper() not in self.choices else [])
        return out


@dataclass(frozen=True)
class FlowSetting:
    """``FLOW:KEY=VALUE``, a config override of one of ``flows`` (``leml:model.rank=16``), as
    the benchmarks that run several flows take it; parses to ``(FLOW, "KEY=VALUE")``.  The
    key and value are the flow's config's to check (:func:`scarce.bench.overhead.flow_configs`,
    before any work): a parser knows only the shape."""

    flows: tuple[str, ...]

    @property
    def __name__(self) -> str:
        return "setting"

    def __call__(self, text: str) -> tuple[str, str]:
        flow, sep, rest = text.partition(":")
        key, eq, _ = rest.partition("=")
        if not (sep and eq and key.strip() and flow in self.flows):
            raise argparse.ArgumentTypeError(
                f"expected FLOW:KEY=VALUE with FLOW one of {', '.join(self.flows)}, got {text!r}")
        return flow, rest


def comma_list(choices=None, *, item: Callable[[str], Any] | None = None) -> NameList:
    """A comma-separated list of names, each one of ``choices`` (any iterable of names: a
    tuple, a dict's keys), or checked by ``item``, or free (a name the command checks itself,
    as the columns of ``scarce runs``, which depend on the runs)."""
    return NameList(tuple(choices) if choices is not None else None, item)


def integer(low: int | None = None, high: int | None = None) -> Number:
    """An integer in ``[low, high]``."""
    return Number(int, low, high)


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           high_open: bool = False) -> Number:
    """A finite number between ``low`` and ``high`` (each end closed unless said open)."""
    return Number(float, low, high, low_open, high_open)


def config_number(model: type, key: str) -> Number:
    """The bounds of the config key ``key`` (dotted) of the pydantic ``model`` as a type: an
    option that sets a config value refuses what the config would.  A key of
    ``Annotated[int, Field(ge=0)] | Literal["auto"]`` takes its bounds from the annotation and
    its words from the literal."""
    field = None
    for part in key.split("."):
        field = model.model_fields[part]
        model = _submodel(field.annotation)
    metadata = list(field.metadata)
    kinds, words = set(), []
    for a in (field.annotation, *typing.get_args(field.annotation)):
        if typing.get_origin(a) is typing.Annotated:
            a, *extra = typing.get_args(a)
            metadata += [m for e in extra for m in getattr(e, "metadata", [e])]
        if a in (int, float):
            kinds.add(a)
        elif typing.get_origin(a) is typing.Literal:
            words += [w for w in typing.get_args(a) if isinstance(w, str)]
    kind = float if float in kinds else int
    if not kinds or field.annotation is bool:
        raise TypeError(f"{key} is not a number")
    low = high = None
    low_open = high_open = False
    for meta in metadata:
        if isinstance(meta, annotated_types.Ge):
            low = meta.ge
        elif isinstance(meta, annotated_types.Gt):
            low, low_open = meta.gt, True
        elif isinstance(meta, annotated_types.Le):
            high = meta.le
        elif isinstance(meta, annotated_types.Lt):
            high, high_open = meta.lt, True
    return Number(kind, low, high, low_open, high_open, tuple(words))


#: A seed: what the configs' ``seed`` takes.
SEED = integer(0, 2**32 - 1)
#: A TCP port to listen on.
PORT = integer(1, 65535)
#: A count of at least one.
POSITIVE = integer(1)


def _submodel(annotation: Any) -> Any:
    for a in (annotation, *typing.get_args(annotation)):
        if isinstance(a, type) and hasattr(a, "model_fields"):
            return a
    return None


def _refuses(check: Callable[[str], Any], text: str) -> bool:
    try:
        check(text)
    except ValueError:
        return True
    return False


def _shown(bound: float | None) -> str:
    if bound is None:
        return ""
    return str(int(bound)) if float(bound).is_integer() else f"{bound:g}"


def _text(value: float, kind: type) -> str:
    return str(int(value)) if kind is int else repr(float(value))


def _inside(item: Number) -> float:
    """A value ``item`` accepts."""
    if item.low is not None:
        if item.high is not None:
            return (item.low + item.high) / 2 if item.kind is float else item.low + (
                0 if not item.low_open else 1)
        return item.low + (1 if item.low_open else 0)
    if item.high is not None:
        return item.high - (1 if item.high_open else 0)
    return 1
