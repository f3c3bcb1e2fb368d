"""Render the config reference (``docs/reference/configs.md``) from the flows' pydantic models.

Every flow of :data:`scarce.flows.registry.FLOWS` gets a table of its keys (dotted for nested
sections), each with its type and constraints, its default and its description, read from the
model classes themselves, so the page cannot drift from what ``scarce run`` accepts
(``tests/flows/test_config_reference.py`` compares the page with :func:`render`).  Regenerate
the page with::

    .venv/bin/python -m scarce.flows.config_reference > docs/reference/configs.md
"""

from __future__ import annotations

import json
import re
import types
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from scarce.flows.config import INPUT_KIND
from scarce.flows.registry import FLOWS, FlowSpec

__all__ = ["COMMAND", "render"]

#: The command that writes the page.
COMMAND = ".venv/bin/python -m scarce.flows.config_reference > docs/reference/configs.md"

#: pydantic's bound constraints (annotated_types' Ge, Gt, Le, Lt), by attribute.
_BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def render() -> str:
    """The Markdown of the config reference: one section per registered flow, one table row
    per key (nested sections walked, their keys dotted)."""
    out = [
        "# Config reference",
        "",
        "Every key of every flow's config, generated from the pydantic models that validate "
        "them (`scarce.flows.config_reference`); do not edit by hand. Regenerate with",
        "",
        "```sh",
        COMMAND,
        "```",
        "",
        "A config is YAML (`configs/<flow>.yaml`, or `--config PATH`); `--set KEY=VALUE` "
        "overrides any key below by its dotted name, the value read as YAML. Unknown keys, "
        "values of another type (a quoted `'5'` is no number) and values outside the bounds "
        "are refused with one line naming the key. A default marked *from* `Estimator.param` "
        "is that estimator's own default (the schema reads it from the signature). Keys of "
        "type *path* name an input file or folder that must exist, relative to the project "
        "folder.",
        "",
    ]
    flows = project_flows()
    out += [f"- [`{name}`](#{_slug(name)}): {_text(spec.description)}"
            for name, spec in flows.items()]
    for name, spec in flows.items():
        out += [""] + _flow_section(name, spec)
    return "\n".join(out) + "\n"


def project_flows() -> dict[str, FlowSpec]:
    """The registry's flows of this package (``scarce.*``), in registry order: a flow that
    other code registers (a test's, a user's) is not part of this page."""
    return {name: spec for name, spec in FLOWS.items()
            if str(getattr(spec, "target", "scarce.")).startswith("scarce.")}


def _flow_section(name: str, spec: FlowSpec) -> list[str]:
    model = spec.load_model()
    lines = [f"## {name}", ""]
    if spec.description:
        lines += [_text(spec.description) + ".", ""]
    lines.append(f"Model `{model.__module__}.{model.__qualname__}`; default file "
                 f"`{spec.config_file}`.")
    if doc := _first_paragraph(model.__doc__):
        lines += ["", doc]
    lines += ["", "| key | type | default | description |", "| --- | --- | --- | --- |"]
    lines += [_row(key, info) for key, info in _fields(model)]
    return lines


def _fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, FieldInfo]]:
    """Every field of ``model`` in declaration order, each nested section's fields after
    its own row."""
    rows = []
    for name, info in model.model_fields.items():
        key = prefix + name
        rows.append((key, info))
        if (section := _section(info.annotation)) is not None:
            rows += _fields(section, key + ".")
    return rows


def _section(annotation: Any) -> type[BaseModel] | None:
    """The model class of a nested section (``X`` or ``X | None``), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if _is_union(annotation) and len(args) == 1:
        return _section(args[0])
    return None


def _row(key: str, info: FieldInfo) -> str:
    section = _section(info.annotation)
    if section is not None:
        kind, default = "section", ""
        description = info.description or _first_paragraph(section.__doc__)
    else:
        kind = _type(info.annotation)
        if isinstance(info.json_schema_extra, dict) and INPUT_KIND in info.json_schema_extra:
            kind += f", path ({info.json_schema_extra[INPUT_KIND]})"
        if bounds := _bounds(info):
            kind += f", {bounds}"
        default = _default(info)
        description = info.description or ""
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    if "estimator" in extra:
        owner = extra["estimator"].rsplit(".", 1)[-1]
        default += f" (from `{owner}.{extra['parameter']}`)"
    cells = [f"`{key}`", kind, default.strip(), _text(description)]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _type(annotation: Any) -> str:
    """A readable name of a field's type: ``int``, ``list[str]``, ``one of `a`, `b```,
    ``int | null``."""
    if annotation is type(None):
        return "null"
    if annotation is Any:
        return "any"
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:  # one member of a union with bounds of its own
        inner, *extra = args
        bounds = ", ".join(b for e in extra if isinstance(e, FieldInfo) and (b := _bounds(e)))
        return _type(inner) + (f" ({bounds})" if bounds else "")
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{_yaml(a)}`" for a in args)
    if _is_union(annotation):
        literals = [a for a in args if typing.get_origin(a) is typing.Literal]
        if len(literals) == 1 and type(None) in args and len(args) == 2:
            return _type(literals[0]) + ", or `null`"
        return " | ".join(_type(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type(a) for a in args)}]"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation)


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _bounds(info: FieldInfo) -> str:
    parts = []
    for meta in info.metadata:
        for attr, sign in _BOUNDS:
            if getattr(meta, attr, None) is not None:
                parts.append(f"{sign} {_yaml(getattr(meta, attr))}")
        if getattr(meta, "min_length", None):
            parts.append(f"at least {meta.min_length} long")
        if (longest := getattr(meta, "max_length", None)) is not None:
            if parts and parts[-1] == f"at least {longest} long":
                parts[-1] = f"{longest} long"
            else:
                parts.append(f"at most {longest} long")
        if pattern := getattr(meta, "pattern", None):
            parts.append(f"matching `{pattern}`")
    return ", ".join(parts)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return f"`{_yaml(value)}`"


def _yaml(value: Any) -> str:
    """``value`` as it is written in a config (flow style: ``null``, ``true``, ``[1, 1]``)."""
    if isinstance(value, str):
        return value if value and re.fullmatch(r"[\w./:@+-]+", value) else json.dumps(value)
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    return _text(doc.strip().split("\n\n")[0])


def _text(text: str) -> str:
    """Docstring markup (reST roles, double backquotes, line breaks) as Markdown on one
    line."""
    text = re.sub(r":\w+:`(~?)([^`]+)`",
                  lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`",
                  text)
    text = text.replace("``", "`")
    return " ".join(text.split())


def _cell(text: str) -> str:
    """``text`` safe in a table cell: pipes escaped, and outside code spans the characters
    Markdown would read as markup (``<name>`` as an HTML tag, ``*`` as emphasis)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"<(?=[A-Za-z/!?])", "&lt;", parts[i]).replace("*", "\\*")
    return "`".join(parts).replace("|", "\\|")


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


if __name__ == "__main__":
    print(render(), end="")
