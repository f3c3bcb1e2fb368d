"""Flow configs: YAML files in ``configs/`` validated by pydantic models.

Each flow's model derives from :class:`FlowConfig`: unknown keys, wrong types
(a quoted ``'5'`` is a string, never a number), out-of-range values, duplicated
keys and documents nested deeper than :data:`MAX_DEPTH` are rejected, and the
error names the file and the dotted key (or the line).  ``--set key.sub=value``
overrides any key; the value is read as YAML (``3`` is an int, ``true`` a
bool, ``[1, 2]`` a list).  Every YAML the project reads (configs, ``--set``,
experiment and deployments files, ``scarce runs --where``) goes through
:class:`ConfigLoader`, which reads numbers as YAML 1.2 does (``1e-4`` and ``.5`` are
floats, ``010`` is ten).  A key declared with :func:`input_path` names an
input file or folder, which must exist (:func:`check_input_paths`); a value that
becomes part of file and run names is at most :data:`NAME_LENGTH` ASCII letters,
digits, ``.``, ``_`` and ``-``.  Every source of randomness derives from the one
``seed``.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

# (the folders a command works in, re-exported: they are read without the configs' pydantic)
from scarce.flows.environment import default_runs_root as default_runs_root
from scarce.flows.environment import default_store_root as default_store_root
from scarce.flows.environment import project_root as project_root
from scarce.tasks.errors import InputError, excerpt
from scarce.tasks.readers.text import decode_text

#: The longest name a config may give that becomes part of file and run names: the run id
#: (``<flow>-<name>-<time>-<hex>``), a figure's file (``plots/<flow>-<dataset>-<figure>.png``),
#: the flow run's name and tags.  With their other parts, well under a file name's 255 bytes.
NAME_LENGTH = 100
# Names that become part of a path (run ids, experiment names): ASCII letters, digits and
# '.', '_', '-' (no separator, no "..", nothing a file system or UTF-8 cannot hold).
SAFE_NAME = rf"^[A-Za-z0-9][A-Za-z0-9._-]{{0,{NAME_LENGTH - 1}}}$"
#: A data set's name (in run names, figure files, tags): lower case, as artifact keys are.
DATASET_NAME = rf"^[a-z0-9][a-z0-9_-]{{0,{NAME_LENGTH - 1}}}$"
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
    """A config section: no unknown keys, no infinite or NaN numbers, no text that UTF-8
    cannot encode (no record of the run could hold it), and no value of another type taken
    for the one expected (pydantic's strict mode: ``'5'`` is no int, ``5`` no string,
    ``'true'`` no bool, ``2.0`` no int; an int is a float).  A section may still be given as
    a mapping."""

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

    @field_validator("*", mode="before")
    @classmethod
    def _utf8_text(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is None or _section_of(field.annotation) is None:  # a section checks its own
            _check_utf8(value)
        return value


#: What a text UTF-8 cannot encode is told.
NOT_UTF8 = ("{text} is not valid UTF-8 text (a lone surrogate, as the escape \\udc80 writes): "
            "no record or name of the run could hold it")


def _check_utf8(value: Any) -> None:
    found = _not_utf8(value)
    if found is not None:
        loc, text = found
        where = f" (at {'.'.join(map(str, loc))})" if loc else ""
        raise ValueError(NOT_UTF8.format(text=excerpt(text)) + where)


def _not_utf8(value: Any) -> tuple[tuple, str] | None:
    """The place (keys and list indexes) and the text of the first text in ``value`` (mapping
    keys included) that UTF-8 cannot encode: a lone surrogate.  Each mapping and list is read
    once, at its first place: YAML aliases share one object among many places, and a walk of
    every place expands an alias bomb to all of its items."""
    stack: list[tuple[tuple, Any]] = [((), value)]
    seen: set[int] = set()  # ids of the containers read (all alive inside ``value``)
    while stack:
        loc, item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return loc, item
            continue
        if not isinstance(item, dict | list | tuple) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            for key, sub in reversed(list(item.items())):
                stack += [((*loc, key), sub), ((*loc, key), key)]
        elif isinstance(item, list | tuple):
            stack += [((*loc, i), sub) for i, sub in reversed(list(enumerate(item)))]
    return None


def _section_of(annotation: Any) -> type[BaseModel] | None:
    """The config section (a model) a key of this type holds, if any."""
    for a in (annotation, *typing.get_args(annotation)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


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

    def check_before_run(self, runs: Path, store: Path) -> None:
        """Refuse what can be found wrong with a run of this config without running it: by
        default its input files and folders (:func:`check_input_paths`); a flow's config adds
        what its flow checks before its first step (the heads of its data, an apply run's
        model and output).

        Called by the commands before they start a Prefect server or anything else
        (:func:`scarce.flows.commands.running.check_runs`), so that bad input is one line within
        the command's start-up, and by the flow itself (a deployment's run, an experiment's
        child).  ``runs`` and ``store`` are the runs folder and the store root the run would
        use.

        Raises
        ------
        InputError
            Naming the file, line or key.
        """
        check_input_paths(self)


C = TypeVar("C", bound=FlowConfig)


def from_declared(estimator: str, param: str, default: Any, **field: Any) -> Any:
    """A config field holding the parameter ``param`` of ``estimator`` (its dotted name), with
    the ``default`` (and the bounds, in ``field``) declared for it in a light module of its
    own (:mod:`scarce.algorithms.leml.params`, :mod:`scarce.algorithms.relations.params`,
    :mod:`scarce.algorithms.strip.params`), which the estimator's signature and checks read too.

    One declaration of a method's defaults and bounds: the config schema, the bundled YAML
    (whose comments name any value it changes: ``# default 50; chosen on ...``) and the
    estimator cannot drift apart (``tests/flows/test_defaults.py`` imports the estimator named
    here and compares), and the schema is read without importing the estimator.  ``field``
    takes pydantic's other arguments (the description).
    """
    extra = {"estimator": estimator, "parameter": param}
    return Field(default, json_schema_extra=extra, **field)


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


def check_inputs(config: BaseModel, source: str | os.PathLike[str]) -> None:
    """:func:`check_input_paths` of a config read from the file ``source``; when ``source`` is
    a default shipped with the package, taken because the folder is no project of its own
    (:func:`shipped_default`), a missing input says so, and that ``scarce init`` starts one.

    Raises
    ------
    InputError
        As :func:`check_input_paths`, naming where the config came from when it is shipped.
    """
    try:
        check_input_paths(config)
    except InputError as exc:
        name = shipped_default(source)
        if name is None:
            raise
        raise InputError(f"{exc.message}; the project folder has no {name}, so scarce's "
                         f"shipped {Path(source)} was read: run `scarce init` to start a "
                         "project there", path=exc.path, key=exc.key) from None


def shipped_default(path: str | os.PathLike[str]) -> str | None:
    """``configs/<name>`` when ``path`` is that default shipped with the package, read because
    the project has no file of that name (:func:`config_path`); else ``None`` (in the
    repository itself the shipped configs are the project's own)."""
    path = Path(path).resolve()
    try:
        rel = path.relative_to(packaged_configs())
    except ValueError:
        return None
    if (project_root() / "configs" / rel).exists():
        return None
    return f"configs/{rel.as_posix()}"


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
        section = _section_of(current)  # an optional section (`select: ... | None`) too
        if section is None:
            raise InputError(f"--set: {'.'.join(path[:i])} has no sub-keys", key=dotted)
        current = section
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
    overridden by the mapping's own keys: that is what it is for.  Numbers are read as YAML
    1.2 reads them (:data:`INT_SYNTAX`, :data:`FLOAT_SYNTAX`), not as PyYAML's YAML 1.1."""

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


# Numbers as YAML 1.2 reads them (its core schema), with Python's digit separators.  PyYAML
# implements YAML 1.1 only, whose floats need a dot (``1e-4`` and ``1.0e4`` were strings), whose
# ``010`` is eight and ``1:30`` ninety; ruamel.yaml reads YAML 1.2, but the checks above are
# built on PyYAML's composer, so its resolvers are replaced here for the number tags alone.
_INT_TAG, _FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_DIGITS = r"[0-9](?:_?[0-9])*"
INT_SYNTAX = re.compile(
    rf"""^[-+]?(?:{_DIGITS}                       # 12, -3, 1_000, 010 (ten)
    |0[xX][0-9a-fA-F](?:_?[0-9a-fA-F])*            # 0x1f
    |0[oO][0-7](?:_?[0-7])*                        # 0o17
    |0[bB][01](?:_?[01])*)$                        # 0b101
    """, re.X)
FLOAT_SYNTAX = re.compile(
    rf"""^(?:[-+]?(?:{_DIGITS}\.(?:{_DIGITS})?|\.{_DIGITS})   # 1.5, .5, 1.
    (?:[eE][-+]?{_DIGITS})?                        # 2.5e-3
    |[-+]?{_DIGITS}[eE][-+]?{_DIGITS}              # 1e-4, 1E4, 1e+3
    |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$     # .inf -.inf .nan (refused as not finite)
    """, re.X)


def _construct_int(loader: yaml.SafeLoader, node: Any) -> int:
    text = loader.construct_scalar(node)
    try:
        prefixed = text.lstrip("+-")[:2].lower() in ("0x", "0o", "0b")
        return int(text, 0) if prefixed else int(text, 10)
    except ValueError:  # an explicit !!int tag on something else
        raise yaml.constructor.ConstructorError(None, None, f"not an integer: {text!r}",
                                                node.start_mark) from None


def _construct_float(loader: yaml.SafeLoader, node: Any) -> float:
    text = loader.construct_scalar(node)
    low = text.lower()
    try:
        if low.lstrip("+-") in (".inf", ".nan"):
            return float(low.replace(".", ""))
        return float(text)
    except ValueError:  # an explicit !!float tag on something else
        raise yaml.constructor.ConstructorError(None, None, f"not a number: {text!r}",
                                                node.start_mark) from None


ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT_TAG, _FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "-+0123456789.":  # numbers first: a date (year-month-day) is no number
    ConfigLoader.yaml_implicit_resolvers.setdefault(_first, [])[:0] = [
        (_INT_TAG, INT_SYNTAX), (_FLOAT_TAG, FLOAT_SYNTAX)]
ConfigLoader.add_constructor(_INT_TAG, _construct_int)
ConfigLoader.add_constructor(_FLOAT_TAG, _construct_float)


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
    """``yaml.safe_load`` of one document, through :class:`ConfigLoader`; a copy of its own
    for each caller."""
    return copy.deepcopy(_parsed_yaml(text))


# PyYAML's composer and the checks above are pure Python (reading a config costs many times
# copying what it holds), and one process reads one config many times: an experiment's base
# config for each of its runs, a deployments file's configs.  A document that
# fails is not kept: it raises again each time.
@functools.lru_cache(maxsize=64)
def _parsed_yaml(text: str) -> Any:
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
        check_inputs(config, path)
    return config


def _input_loc(data: Any, loc: tuple) -> list:
    """The parts of pydantic's error location that are keys of the input: the member of a
    union it tried (``int`` of ``min_df: int | float``) is no config key."""
    out, node = [], data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list | tuple) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif isinstance(part, str) and _is_member_tag(part):
            continue
        else:  # a key the input does not give (a missing key)
            node = None
        out.append(part)
    return out


def _is_member_tag(part: str) -> bool:
    """A name pydantic gives a member of a union in an error location (``int``,
    ``list[float]``, ``function-after[...]``), which no config key is."""
    return part in ("int", "float", "str", "bool", "none") or "[" in part


def validate_config(data: dict[str, Any], model: type[C], path: str | os.PathLike[str] | None) -> C:
    """Validate a config mapping, turning pydantic's error into one clear line."""
    found = _not_utf8(data)
    if found is not None:  # named by its whole key, as a section's own check cannot
        loc, text = found
        raise InputError(NOT_UTF8.format(text=excerpt(text)), path=path,
                         key=".".join(map(str, loc)) or None)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in _input_loc(data, err["loc"])) or None
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif "input" in err and err["type"] != "missing":
            msg = f"{msg} (got {excerpt(err['input'])})"
        more = len(exc.errors()) - 1
        if more:
            msg += f" (and {more} more error{'s' if more > 1 else ''})"
        raise InputError(msg, path=path, key=key) from None
