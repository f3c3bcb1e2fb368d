"""One set of defaults per method: the estimator's signature.

Every config field declared with :func:`flows.config.from_estimator` has the estimator's default;
every value of a bundled config equals its schema default unless the line's comment says
``default <value>`` (and then that value is the schema's default); and every ``default <value>``
a comment mentions is the schema's default.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from scarce.flows.config import project_root
from scarce.flows.registry import FLOWS

MISSING = object()
# The project's flows (tests register flows of their own, such as `digits`); the training flows
# are those whose options come from an estimator.
PROJECT_FLOWS = sorted(name for name, spec in FLOWS.items()
                       if spec.target.startswith("flows.") and spec.kind != "experiment")
TRAINING_FLOWS = [name for name in PROJECT_FLOWS if FLOWS[name].kind == "train"]
DEFAULT_IN_COMMENT = re.compile(r"\bdefault:?\s+([^\s;,)]+)")


def _fields(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    """Dotted key -> FieldInfo, nested sections included."""
    out = {}
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        out[key] = info
        ann = info.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.update(_fields(ann, key + "."))
    return out


def _default(info) -> Any:
    if info.is_required():
        return MISSING
    value = info.get_default(call_default_factory=True)
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _yaml_lines(path) -> dict[str, str]:
    """Dotted key -> the comment on its line and the comment lines right below it."""
    comments: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    last = None
    for line in path.read_text().splitlines():
        m = re.match(r"^(\s*)([A-Za-z_][\w]*):(.*)$", line)
        if m:
            indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
            while stack and stack[-1][0] >= indent:
                stack.pop()
            dotted = ".".join([*(k for _, k in stack), key])
            stack.append((indent, key))
            comment = rest.split("#", 1)[1] if "#" in rest else ""
            comments[dotted] = comment.strip()
            last = (dotted, indent)
        elif last and re.match(r"^\s+#", line) and len(line) - len(line.lstrip()) > last[1]:
            comments[last[0]] += " " + line.strip().lstrip("#").strip()
        else:
            last = None
    return comments


def _lookup(data: dict, dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return MISSING
        node = node[part]
    return node


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return a == b


@pytest.mark.parametrize("flow", TRAINING_FLOWS)
def test_schema_defaults_are_the_estimators(flow):
    fields = _fields(FLOWS[flow].load_model())
    bound = {k: f for k, f in fields.items()
             if isinstance(f.json_schema_extra, dict) and "estimator" in f.json_schema_extra}
    assert bound, f"{flow}: no config field takes its default from an estimator"
    for key, info in bound.items():
        module, _, cls = info.json_schema_extra["estimator"].rpartition(".")
        estimator = getattr(importlib.import_module(module), cls)
        param = inspect.signature(estimator).parameters[info.json_schema_extra["parameter"]]
        assert _same(info.default, param.default), (key, info.default, param.default)


@pytest.mark.parametrize("flow", PROJECT_FLOWS)
def test_bundled_config_values_are_the_defaults_or_say_which_default_they_change(flow):
    spec = FLOWS[flow]
    path = project_root() / spec.config_file
    data = yaml.safe_load(path.read_text())
    comments = _yaml_lines(path)
    fields = _fields(spec.load_model())
    problems = []
    for key, info in fields.items():
        value = _lookup(data, key)
        default = _default(info)
        if value is MISSING or default is MISSING or isinstance(value, dict):
            continue
        said = DEFAULT_IN_COMMENT.findall(comments.get(key, ""))
        if said:
            stated = yaml.safe_load(said[0])
            if not _same(stated, default):
                problems.append(f"{key}: comment says default {said[0]}, schema has {default!r}")
        elif not _same(value, default):
            problems.append(f"{key}: {value!r} differs from the default {default!r} and its "
                            "comment does not say 'default <value>'")
    assert not problems, "\n".join(problems)


def test_a_comment_that_names_the_wrong_default_is_caught(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: 1  # default 2; chosen on dev\n"
                    "b:\n  c: 3  # chosen on dev,\n        # default 4\n")
    comments = _yaml_lines(path)
    assert DEFAULT_IN_COMMENT.findall(comments["a"]) == ["2"]
    assert DEFAULT_IN_COMMENT.findall(comments["b.c"]) == ["4"]
