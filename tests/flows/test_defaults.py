"""One set of defaults per method: the estimator's signature.

LEML's ``model`` section is LEML's parameters with the defaults its signature and a fresh
``LEML()`` give, each field declared from its parameter, so a changed default reaches the config
(checked in a fresh process) and a config that kept an old one is caught (checked with scratch
estimators); every config field declared with :func:`flows.config.from_declared` has the
default the estimator it names uses; every value of a bundled config equals its schema default
unless the line's comment says ``default <value>`` (and then that value is the schema's
default); and every ``default <value>`` a comment mentions is the schema's default.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import types
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from scarce.algorithms.leml import LEML
from scarce.flows.config import Strict, project_root
from scarce.flows.leml_config import ModelConfig
from scarce.flows.registry import FLOWS

MISSING = object()
# The project's flows (tests register flows of their own, such as `digits`); the training flows
# are those whose options come from an estimator.
PROJECT_FLOWS = sorted(name for name, spec in FLOWS.items()
                       if spec.target.startswith("scarce.flows.") and spec.kind != "experiment")
TRAINING_FLOWS = [name for name in PROJECT_FLOWS if FLOWS[name].kind == "train"]
# An empty list would skip the parametrised tests below without a word.
assert {"leml", "relations", "strip"} <= set(TRAINING_FLOWS), sorted(FLOWS)
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


# LEML's parameters that a run sets itself: the seed comes from the config's ``seed``, and a
# flow reports progress through Prefect, not through printing or a callback.
SET_BY_THE_RUN = {"random_state", "verbose", "callback"}


def _identical(a: Any, b: Any) -> bool:
    """Equal and of the same type (``True`` is not ``1``, ``1`` is not ``1.0``)."""
    return type(a) is type(b) and a == b


def _estimator_defaults(estimator) -> dict[str, Any]:
    """The defaults of ``estimator`` (a class or a function), read without the config: its
    signature's, and for a class also ``get_params`` of an instance made without arguments,
    which must agree with the signature."""
    init = estimator.__init__ if isinstance(estimator, type) else estimator
    signature = {name: p.default for name, p in inspect.signature(init).parameters.items()
                 if name != "self" and p.default is not inspect.Parameter.empty}
    if isinstance(estimator, type) and hasattr(estimator, "get_params"):
        fresh = estimator().get_params(deep=False)
        differ = sorted(k for k in signature if not _identical(fresh.get(k), signature[k]))
        assert not differ, f"{estimator.__name__}() keeps other values than its defaults: {differ}"
    return signature


def _default_mismatches(section: type[BaseModel], estimator: type,
                        set_by_the_run=SET_BY_THE_RUN) -> list[str]:
    """What keeps the config section ``section`` from being ``estimator``'s parameters with
    its defaults: a parameter without a field (other than ``set_by_the_run``), a field the
    estimator does not take, a default that is not the estimator's."""
    defaults = _estimator_defaults(estimator)
    fields = section.model_fields
    name = estimator.__name__
    problems = [f"{p}: a parameter of {name} without a config field"
                for p in sorted(set(defaults) - set(fields) - set(set_by_the_run))]
    for key, info in fields.items():
        if key not in defaults:
            problems.append(f"{key}: a config field that {name} does not take")
        elif not _identical(info.default, defaults[key]):
            problems.append(f"{key}: config default {info.default!r}, {name}'s "
                            f"{defaults[key]!r}")
    return problems


def _with_defaults(estimator: type, **defaults) -> type:
    """A scratch subclass of ``estimator`` whose ``__init__`` is the estimator's own code
    with other defaults: what an edit of the estimator's signature would make."""
    init = estimator.__init__
    names = list(inspect.signature(init).parameters)[-len(init.__defaults__):]
    unknown = set(defaults) - set(names)
    assert not unknown, unknown
    values = tuple(defaults.get(n, d) for n, d in zip(names, init.__defaults__, strict=True))
    copy = types.FunctionType(init.__code__, init.__globals__, init.__name__, values,
                              init.__closure__)
    return type(f"Scratch{estimator.__name__}", (estimator,), {"__init__": copy})


def test_leml_model_section_is_lemls_parameters_with_its_defaults():
    assert _default_mismatches(ModelConfig, LEML) == []
    assert ModelConfig().estimator().get_params() == LEML().get_params()


@pytest.mark.parametrize(("param", "value"), [
    ("rank", 51), ("lam", 1), ("cg_tol", 1e-4), ("fit_intercept", False),
    ("dtype", "float64"), ("loss", "logistic")])
def test_an_estimator_default_the_config_does_not_have_is_caught(param, value):
    scratch = _with_defaults(LEML, **{param: value})
    assert getattr(scratch(), param) == value  # the scratch estimator really has it
    assert _default_mismatches(ModelConfig, scratch) == [
        f"{param}: config default {getattr(ModelConfig(), param)!r}, ScratchLEML's {value!r}"]


def test_a_parameter_without_a_field_and_a_field_without_a_parameter_are_caught():
    assert _default_mismatches(ModelConfig, LEML, set_by_the_run={"verbose", "callback"}) == [
        "random_state: a parameter of LEML without a config field"]

    class Narrow(Strict):
        rank: int = 50
        extra: int = 3

    assert "extra: a config field that LEML does not take" in _default_mismatches(Narrow, LEML)


def test_leml_model_fields_are_declared_from_lemls_parameters():
    """Each field is made from LEML's declared parameter of its name (``from_declared``,
    which records where its default came from) and says what it is."""
    for name, info in ModelConfig.model_fields.items():
        assert info.json_schema_extra == {"estimator": "scarce.algorithms.leml.model.LEML",
                                          "parameter": name}, name
        assert info.description, name


@pytest.mark.slow  # starts a Python process
def test_a_changed_leml_default_reaches_the_flow_config():
    """LEML's rank default changed where it is declared (:mod:`algorithms.leml.params`)
    before the estimator and the flow's config are defined: the config's default, its JSON
    schema, the estimator it builds and the estimator's own default follow."""
    code = (
        "import dataclasses, json\n"
        "from scarce.algorithms.leml import params\n"
        "params.PARAMS['rank'] = dataclasses.replace(params.PARAMS['rank'], default=7)\n"
        "params.DEFAULTS['rank'] = 7\n"
        "from scarce.algorithms.leml import LEML\n"
        "from scarce.flows.leml_config import ModelConfig\n"
        "print(json.dumps([ModelConfig().rank,\n"
        "                  ModelConfig.model_json_schema()['properties']['rank']['default'],\n"
        "                  ModelConfig().estimator().rank, LEML().rank]))\n")
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [7, 7, 7, 7]


@pytest.mark.parametrize("flow", TRAINING_FLOWS)
def test_fields_declared_from_an_estimator_have_its_defaults(flow):
    """Every field of a training flow's config declared with ``from_declared`` has the
    default that the estimator (or function) it names actually uses."""
    fields = _fields(FLOWS[flow].load_model())
    bound = {k: f for k, f in fields.items()
             if isinstance(f.json_schema_extra, dict) and "estimator" in f.json_schema_extra}
    assert bound, f"{flow}: no config field takes its default from an estimator"
    for key, info in bound.items():
        module, _, cls = info.json_schema_extra["estimator"].rpartition(".")
        defaults = _estimator_defaults(getattr(importlib.import_module(module), cls))
        param = info.json_schema_extra["parameter"]
        assert _identical(info.default, defaults[param]), (key, info.default, defaults[param])


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
