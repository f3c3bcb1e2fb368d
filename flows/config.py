"""Flow configs: YAML files in ``configs/`` validated by pydantic models.

Each flow's model derives from :class:`FlowConfig`: unknown keys, wrong types
and out-of-range values are rejected, and the error names the file and the
dotted key.  ``--set key.sub=value`` overrides any key; the value is read as
YAML (``3`` is an int, ``true`` a bool, ``[1, 2]`` a list).  Every source of
randomness derives from the one ``seed``.
"""

from __future__ import annotations

import copy
import inspect
import os
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from tasks.errors import InputError, excerpt
from tasks.readers.text import decode_text

# Names that become part of a path (run ids, experiment names): no separators, no "..".
SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


def _accepts_bool(annotation: Any) -> bool:
    """True when a field of this type may hold ``true`` / ``false``."""
    if annotation is bool or annotation is Any:
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return any(isinstance(a, bool) for a in args)
    return any(_accepts_bool(a) for a in args)


class Strict(BaseModel):
    """A config section: no unknown keys, no infinite or NaN numbers, no ``true`` where a
    number is expected (pydantic would read it as 1)."""

    model_config = ConfigDict(extra="forbid", strict=False, validate_default=True, frozen=True,
                              allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            field = cls.model_fields[info.field_name]
            if not _accepts_bool(field.annotation):
                raise ValueError(f"a boolean ({str(value).lower()}) where a number or a "
                                 "string is expected")
        return value


class FlowConfig(Strict):
    """Keys every flow config has."""

    seed: int = Field(0, ge=0, le=2**32 - 1,
                      description="The one seed every source of randomness derives from.")
    name: str | None = Field(
        None,
        pattern=SAFE_NAME,
        description="Experiment name used in run names (letters, digits, '.', '_', '-'); "
        "defaults to the flow's own.",
    )


C = TypeVar("C", bound=FlowConfig)


def from_estimator(estimator: type, param: str, **field: Any) -> Any:
    """A config field whose default is ``estimator``'s default for ``param``.

    The estimator's signature is the one source of a method's defaults: the config schema,
    the bundled YAML (whose comments name any value it changes: ``# default 50; chosen on
    ...``) and the estimator cannot drift apart (``tests/flows/test_defaults.py``).  ``field``
    takes pydantic's constraints and the description.
    """
    parameters = inspect.signature(estimator).parameters
    if param not in parameters or parameters[param].default is inspect.Parameter.empty:
        raise TypeError(f"{estimator.__name__} has no parameter {param!r} with a default")
    extra = {"estimator": f"{estimator.__module__}.{estimator.__qualname__}", "parameter": param}
    return Field(parameters[param].default, json_schema_extra=extra, **field)


def project_root() -> Path:
    """The folder holding ``configs/`` and ``data/``.

    ``SCARCE_ROOT`` when set; else the current folder when it has ``configs/``;
    else the checkout this package was installed from.
    """
    env = os.environ.get("SCARCE_ROOT")
    if env:
        return Path(env).resolve()
    cwd = Path.cwd()
    if (cwd / "configs").is_dir():
        return cwd
    return Path(__file__).resolve().parent.parent


def resolve_path(path: str | os.PathLike[str], base: Path | None = None) -> Path:
    """An input path from a config: absolute, or relative to the project root."""
    p = Path(path)
    return p if p.is_absolute() else (base or project_root()) / p


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"leml.rank=64"`` -> (["leml", "rank"], 64)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise InputError(f"--set expects KEY=VALUE with a dotted key, got {text!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise InputError(f"--set: value {excerpt(raw)} is not valid YAML ({problem})",
                         key=key) from None
    return key.split("."), value


def apply_overrides(
    data: dict[str, Any],
    overrides: list[str],
    model: type[BaseModel],
    path: str | os.PathLike[str] | None = None,
) -> dict:
    """A copy of ``data`` with each ``KEY=VALUE`` applied; unknown keys are errors."""
    values = {}
    for text in overrides:
        keys, value = parse_override(text)
        values[".".join(keys)] = value
    return apply_values(data, values, model, path)


def apply_values(
    data: dict[str, Any],
    values: dict[str, Any],
    model: type[BaseModel],
    path: str | os.PathLike[str] | None = None,
) -> dict:
    """A copy of ``data`` with each dotted key of ``values`` set; unknown keys are errors."""
    out = copy.deepcopy(data)
    for dotted, value in values.items():
        keys = dotted.split(".")
        try:
            _check_key(model, keys)
        except InputError as exc:
            raise InputError(exc.message, path=path, key=exc.key) from None
        node = out
        for part in keys[:-1]:
            nxt = node.get(part)
            if not isinstance(nxt, dict):
                nxt = {}
                node[part] = nxt
            node = nxt
        node[keys[-1]] = copy.deepcopy(value)
    return out


def _check_key(model: type[BaseModel], path: list[str]) -> None:
    current: Any = model
    for i, part in enumerate(path):
        dotted = ".".join(path[: i + 1])
        if typing.get_origin(current) is dict:  # a mapping field: any key, its value type next
            args = typing.get_args(current)
            current = args[1] if len(args) == 2 else Any
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            raise InputError(f"--set: {'.'.join(path[:i])} has no sub-keys", key=dotted)
        field = current.model_fields.get(part)
        if field is None:
            known = ", ".join(sorted(current.model_fields))
            raise InputError(f"--set: unknown key (known here: {known})", key=dotted)
        current = field.annotation


def read_yaml(path: Path, what: str) -> Any:
    """``yaml.safe_load`` of a file; a missing file or bad YAML is an :class:`InputError`
    naming the file (and the line, for a syntax error)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} file not found", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read {what} ({exc.strerror})", path=path) from None
    text = decode_text(raw, path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"invalid YAML: {problem}", path=path, line=line) from None


def load_config(
    path: str | os.PathLike[str],
    model: type[C],
    overrides: list[str] | None = None,
) -> C:
    """Read, override and validate a flow config.

    Raises
    ------
    InputError
        Missing file, bad YAML, unknown key, wrong type or out-of-range value;
        the message names the file and the dotted key.
    """
    path = Path(path)
    data = read_yaml(path, "config")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("a config must be a mapping of keys to values", path=path)
    data = apply_overrides(data, overrides or [], model, path) if overrides else data
    return validate_config(data, model, path)


def validate_config(data: dict[str, Any], model: type[C], path: str | os.PathLike[str] | None) -> C:
    """Validate a config mapping, turning pydantic's error into one clear line."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or None
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif "input" in err and err["type"] != "missing":
            msg = f"{msg} (got {excerpt(err['input'])})"
        more = len(exc.errors()) - 1
        if more:
            msg += f" (and {more} more error{'s' if more > 1 else ''})"
        raise InputError(msg, path=path, key=key) from None
