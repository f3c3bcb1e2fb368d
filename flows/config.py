"""Flow configs: YAML files in ``configs/`` validated by pydantic models.

Each flow's model derives from :class:`FlowConfig`: unknown keys, wrong types
(a quoted ``'5'`` is a string, never a number), out-of-range values, duplicated
keys and documents nested deeper than :data:`MAX_DEPTH` are rejected, and the
error names the file and the dotted key (or the line).  ``--set key.sub=value``
overrides any key; the value is read as YAML (``3`` is an int, ``true`` a
bool, ``[1, 2]`` a list).  A key declared with :func:`input_path` names an
input file or folder, which must exist (:func:`check_input_paths`).  Every source
of randomness derives from the one ``seed``.
"""

from __future__ import annotations

import copy
import inspect
import os
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from scarce.tasks.errors import InputError, excerpt
from scarce.tasks.readers.text import decode_text

# Names that become part of a path (run ids, experiment names): no separators, no "..".
SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
#: Deepest nesting of mappings and lists a config may have.  A config is a few levels deep;
#: a deeper document would reach Python's recursion limit in the YAML composer, in
#: validation or in copying, and fail with no file named.
MAX_DEPTH = 50
#: The ``json_schema_extra`` key of a field that names an input path (:func:`input_path`).
INPUT_KIND = "input"


def _accepts_bool(annotation: Any) -> bool:
    """True when a field of this type may hold ``true`` / ``false``."""
    if annotation is bool or annotation is Any:
        return True
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return any(isinstance(a, bool) for a in args)
    return any(_accepts_bool(a) for a in args)


class Strict(BaseModel):
    """A config section: no unknown keys, no infinite or NaN numbers, and no value of another
    type taken for the one expected (pydantic's strict mode: ``'5'`` is no int, ``5`` no
    string, ``'true'`` no bool, ``2.0`` no int; an int is a float).  A section may still be
    given as a mapping."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=True, frozen=True,
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

    @classmethod
    def renamed_key(cls, keys: list[str], value: Any) -> tuple[list[str], Any]:
        """The key and value an override (``--set``, an experiment's settings) given under a
        former name stands for now, with a :class:`FutureWarning`; a flow whose config
        renamed a key maps it here, as its validator maps a config file's former section."""
        return keys, value


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


def input_path(kind: Literal["file", "folder", "file or folder"], default: Any = ...,
               **field: Any) -> Any:
    """A config field (a path, or a list of paths) naming input that must exist.

    ``kind`` says what each path must be; :func:`check_input_paths` checks every such field
    of a config, so that a missing input is refused, naming its key, before a run starts.
    ``field`` takes pydantic's other arguments (the description).
    """
    return Field(default, json_schema_extra={INPUT_KIND: kind}, **field)


def check_input_paths(config: BaseModel, prefix: str = "") -> None:
    """Refuse a config whose input files or folders (its :func:`input_path` fields, nested
    sections included) do not exist, or are a folder where a file is expected (or the
    reverse).

    Raises
    ------
    InputError
        Naming the path (resolved as the flows resolve it, :func:`resolve_path`) and the
        dotted key (``data.1`` for the second path of a list).
    """
    for name, info in type(config).model_fields.items():
        value = getattr(config, name)
        key = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            check_input_paths(value, f"{key}.")
            continue
        extra = info.json_schema_extra
        kind = extra.get(INPUT_KIND) if isinstance(extra, dict) else None
        if kind is None or value is None:
            continue
        many = isinstance(value, list | tuple)
        for i, item in enumerate(value if many else [value]):
            path, where = resolve_path(item), f"{key}.{i}" if many else key
            if kind == "file" and path.is_dir():
                raise InputError("a folder where a file is expected", path=path, key=where)
            if kind == "folder" and path.exists() and not path.is_dir():
                raise InputError("a file where a folder is expected", path=path, key=where)
            if not path.exists():
                raise InputError(f"{kind} not found", path=path, key=where)


def project_root() -> Path:
    """The folder a command works in: ``SCARCE_ROOT`` when set, else the current folder.

    Relative paths of configs and data are read from it, and the store and the runs go under
    its ``data/`` (unless ``SCARCE_STORE`` or ``SCARCE_RUNS`` say otherwise).
    """
    env = os.environ.get("SCARCE_ROOT")
    return Path(env).resolve() if env else Path.cwd()


def packaged_configs() -> Path:
    """The default configs shipped with the package (the repository's ``configs/``)."""
    return Path(__file__).resolve().parent.parent / "configs"


def config_path(name: str | os.PathLike[str]) -> Path:
    """A config file named relative to the project (``configs/leml.yaml``): the project's own
    when it has one, else the default shipped with the package (an absolute or unknown path is
    returned as it is, to be reported missing by whoever reads it)."""
    path = resolve_path(name)
    parts = Path(name).parts
    if path.exists() or Path(name).is_absolute() or not parts or parts[0] != "configs":
        return path
    shipped = packaged_configs().joinpath(*parts[1:])
    return shipped if shipped.is_file() else path


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
        value = safe_load(raw) if raw.strip() else ""
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
        try:
            keys, value = parse_override(text)
        except InputError as exc:  # named as the config's key, as the other --set errors are
            raise InputError(exc.message, path=path, key=exc.key) from None
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
        if isinstance(model, type) and issubclass(model, FlowConfig):
            keys, value = model.renamed_key(keys, value)
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


class ConfigLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also refuses what a config never holds and a plain load
    accepts: a key given twice in one mapping (the last would win, silently), and nesting
    deeper than :data:`MAX_DEPTH` (textual, or built through aliases), which would exhaust the
    recursion limit in the composer or after it.  A merge key (``<<: *base``) may still be
    overridden by the mapping's own keys: that is what it is for."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._keys: dict[int, str] = {}  # id of a mapping node -> its dotted key

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels",
                    self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        self._check_graph(node)
        return node

    def _check_graph(self, root: Any) -> None:
        """The node graph's depth (aliases followed, each node once), a cycle refused, and
        each mapping's dotted key noted for the duplicate check."""
        height: dict[int, int] = {}
        open_ids = {id(root)}
        self._keys[id(root)] = ""
        stack = [(root, iter(_children(root)))]
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                height[id(node)] = 1 + max((height[id(c)] for _, c in _children(node)),
                                           default=0)
                open_ids.discard(id(node))
                stack.pop()
                continue
            name, child = child
            if id(child) in open_ids:
                raise yaml.composer.ComposerError(
                    None, None, "an alias refers to a node that contains it",
                    child.start_mark)
            if len(stack) + height.get(id(child), 1) > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels (through aliases)",
                    child.start_mark)
            if id(child) not in height:
                parent = self._keys.get(id(node), "")
                self._keys.setdefault(id(child), f"{parent}.{name}" if parent else name)
                open_ids.add(id(child))
                stack.append((child, iter(_children(child))))

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    seen = key in first
                except TypeError:  # an unhashable key: the safe constructor says so
                    continue
                if seen:
                    parent = self._keys.get(id(node), "")
                    raise DuplicateKeyError(f"{parent}.{key}" if parent else str(key),
                                            first[key], key_node.start_mark)
                first[key] = line
        return super().construct_mapping(node, deep=deep)


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping of a YAML document gives a key twice; ``key`` is its dotted config key."""

    def __init__(self, key: str, first_line: int, mark: Any) -> None:
        super().__init__(None, None, f"the key is given twice (first on line {first_line})",
                         mark)
        self.key = key


def _children(node: Any) -> list[tuple[str, Any]]:
    """A node's child nodes, each with the name of its place (a key, or a list index)."""
    if isinstance(node, yaml.SequenceNode):
        return [(str(i), child) for i, child in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        out = []
        for key_node, value_node in node.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
            out += [(name, key_node), (name, value_node)]
        return out
    return []


def safe_load(text: str) -> Any:
    """``yaml.safe_load`` of one document, through :class:`ConfigLoader`."""
    loader = ConfigLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_yaml(path: Path, what: str) -> Any:
    """``yaml.safe_load`` of a file (:func:`safe_load`: no key twice, no deep nesting); a
    missing file or bad YAML is an :class:`InputError` naming the file (and the line)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} file not found", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read {what} ({exc.strerror})", path=path) from None
    text = decode_text(raw, path)
    try:
        return safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"invalid YAML: {problem}", path=path, line=line,
                         key=getattr(exc, "key", None)) from None


def load_config(
    path: str | os.PathLike[str],
    model: type[C],
    overrides: list[str] | None = None,
    inputs: bool = True,
) -> C:
    """Read, override and validate a flow config; with ``inputs``, its input files and folders
    must exist (:func:`check_input_paths`), so that a run is refused before it starts.

    Raises
    ------
    InputError
        Missing file, bad YAML, unknown key, wrong type, out-of-range value or missing
        input; the message names the file and the dotted key.
    """
    path = Path(path)
    data = read_yaml(path, "config")
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("a config must be a mapping of keys to values", path=path)
    data = apply_overrides(data, overrides or [], model, path) if overrides else data
    config = validate_config(data, model, path)
    if inputs:
        check_input_paths(config)
    return config


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
