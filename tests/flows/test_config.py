"""Config loading: validation errors name the file and the key; overrides."""

from __future__ import annotations

import decimal
import functools
import math
import re
import typing
import warnings
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from scarce.flows.config import (
    FlowConfig,
    Strict,
    check_input_paths,
    input_path,
    load_config,
    parse_override,
)
from scarce.tasks.errors import InputError


class Solver(Strict):
    tol: float = Field(1e-3, gt=0)
    iters: int = Field(10, ge=1)


class Demo(FlowConfig):
    rank: int = Field(8, ge=1)
    solver: Solver = Solver()
    loss: str = Field("squared", pattern="^(squared|logistic)$")


def write(tmp_path, text):
    p = tmp_path / "demo.yaml"
    p.write_text(text)
    return p


def test_valid_config_with_defaults(tmp_path):
    cfg = load_config(write(tmp_path, "rank: 4\nseed: 3\n"), Demo)
    assert (cfg.rank, cfg.seed, cfg.solver.iters) == (4, 3, 10)


@pytest.mark.parametrize(
    "text, key, words",
    [
        ("rnak: 4\n", "rnak", "unknown key"),
        ("solver:\n  tol: 0.1\n  iter: 3\n", "solver.iter", "unknown key"),
        ("rank: -2\n", "rank", "greater than or equal to 1"),
        ("rank: many\n", "rank", "valid integer"),
        ("solver:\n  tol: 0\n", "solver.tol", "greater than 0"),
        ("loss: hinge\n", "loss", "pattern"),
        ("seed: -1\n", "seed", "greater than or equal to 0"),
    ],
)
def test_invalid_values_name_file_and_key(tmp_path, text, key, words):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_config(path, Demo)
    msg = str(err.value)
    assert str(path) in msg
    assert f"key '{key}'" in msg
    assert words in msg


def test_bad_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "rank: 4\nsolver: [1, 2\n")
    with pytest.raises(InputError) as err:
        load_config(path, Demo)
    assert err.value.path == str(path)
    assert err.value.line is not None and err.value.line >= 2


def test_missing_file_and_non_mapping(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_config(tmp_path / "nope.yaml", Demo)
    with pytest.raises(InputError, match="mapping"):
        load_config(write(tmp_path, "- 1\n- 2\n"), Demo)


def test_overrides_reach_nested_keys_and_parse_yaml(tmp_path):
    path = write(tmp_path, "rank: 4\n")
    cfg = load_config(path, Demo, ["solver.iters=7", "rank=16", "name=exp1"])
    assert (cfg.rank, cfg.solver.iters, cfg.name) == (16, 7, "exp1")


@pytest.mark.parametrize(
    "override, key",
    [("solver.iterz=3", "solver.iterz"), ("rank.sub=1", "rank.sub"), ("nope=1", "nope")],
)
def test_override_of_unknown_key_is_rejected(tmp_path, override, key):
    with pytest.raises(InputError) as err:
        load_config(write(tmp_path, ""), Demo, [override])
    assert err.value.key == key


def test_override_values_are_validated(tmp_path):
    with pytest.raises(InputError, match="rank"):
        load_config(write(tmp_path, ""), Demo, ["rank=0"])


def test_parse_override_syntax():
    assert parse_override("a.b=[1, 2]") == (["a", "b"], [1, 2])
    assert parse_override("a=true") == (["a"], True)
    for bad in ["noequals", "=3", "a..b=1"]:
        with pytest.raises(InputError):
            parse_override(bad)


def test_configs_are_yaml_safe_loaded(tmp_path):
    path = write(tmp_path, "rank: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(InputError):
        load_config(path, Demo)


# -- documents a plain YAML load accepts and a config never is ---------------------------------
DEEP = {
    "flow-lists": ("rank: " + "[" * 5000 + "]" * 5000 + "\n", 1, "nested deeper than 50"),
    "block-mappings": ("".join("  " * i + f"k{i}:\n" for i in range(3000)) + "  " * 3000
                       + "v\n", 50, "nested deeper than 50"),
    "mapping-in-lists": ("solver:\n" + "  " + "- " * 60 + "{tol: 1}\n", 2,
                         "nested deeper than 50"),
    "alias-chain": ("".join(f"a{i}: &a{i} [{f'*a{i - 1}' if i else 0}]\n" for i in range(200)),
                    48, "nested deeper than 50 levels (through aliases)"),
    "recursive-alias": ("rank: &a [1, *a]\n", 1, "an alias refers to a node that contains it"),
}


@pytest.mark.parametrize("case", sorted(DEEP))
def test_deep_documents_are_refused_naming_the_file_and_line(tmp_path, case):
    text, line, words = DEEP[case]
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_config(path, Demo)
    assert err.value.path == str(path) and err.value.line == line
    assert f"invalid YAML: {words}" in str(err.value)


DUPLICATES = {
    "top-level": ("seed: 0\nrank: 4\nseed: 1\n", 3, "seed", 1),
    "nested": ("solver:\n  tol: 0.1\n  iters: 3\n  tol: 0.2\n", 4, "solver.tol", 2),
    "flow-mapping": ("solver: {iters: 3, iters: 4}\n", 1, "solver.iters", 1),
    "in-a-list": ("items:\n  - {a: 1}\n  - a: 1\n    a: 2\n", 4, "items.1.a", 3),
    "same-value": ("rank: 4\nrank: 4\n", 2, "rank", 1),
    "int-keys": ("solver: {1: a, 0x1: b}\n", 1, "solver.1", 1),
}


@pytest.mark.parametrize("case", sorted(DUPLICATES))
def test_a_key_given_twice_is_refused_naming_file_line_and_key(tmp_path, case):
    text, line, key, first = DUPLICATES[case]
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_config(path, Demo)
    assert (err.value.path, err.value.line, err.value.key) == (str(path), line, key)
    assert f"the key is given twice (first on line {first})" in str(err.value)


def test_a_merge_key_may_still_be_overridden(tmp_path):
    from scarce.flows.config import safe_load

    text = "base: &b {tol: 0.5, iters: 3}\nsolver:\n  <<: *b\n  iters: 7\n"
    assert safe_load(text)["solver"] == {"tol": 0.5, "iters": 7}
    # an alias bomb is built once per anchor, and is no deeper than its anchors
    bomb = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else 'x'}]\n"
                   for i in range(9))
    assert len(safe_load(bomb)["l8"]) == 9


@pytest.mark.parametrize("value, words", [
    ("[" * 200 + "]" * 200, "nested deeper than 50"),
    ("{iters: 3, iters: 4}", "the key is given twice"),
    ("&a [*a]", "an alias refers to a node that contains it"),
])
def test_set_values_are_read_as_a_config_is(tmp_path, value, words):
    path = write(tmp_path, "rank: 4\n")
    with pytest.raises(InputError) as err:
        load_config(path, Demo, [f"solver={value}"])
    assert err.value.key == "solver" and err.value.path == str(path)
    assert words in str(err.value) and "--set: value" in str(err.value)


# -- types: no value of another type taken for the one expected ------------------------------
class Typed(FlowConfig):
    rank: int = 8
    lam: float = 1.0
    flag: bool = False
    label: str = "a"
    sizes: list[int] = [1]
    limit: int | None = None
    solver: Solver = Solver()


@pytest.mark.parametrize("text, key, words", [
    ("rank: '5'\n", "rank", "valid integer (got '5')"),
    ('rank: "5"\n', "rank", "valid integer (got '5')"),
    ("rank: 5.0\n", "rank", "valid integer"),
    ("lam: '1.5'\n", "lam", "valid number (got '1.5')"),
    ("flag: 'true'\n", "flag", "valid boolean (got 'true')"),
    ("flag: 1\n", "flag", "valid boolean"),
    ("label: 5\n", "label", "valid string (got 5)"),
    ("sizes: ['1', 2]\n", "sizes.0", "valid integer"),
    ("limit: '3'\n", "limit", "valid integer"),
    ("solver: {iters: '3'}\n", "solver.iters", "valid integer"),
    ("seed: '0'\n", "seed", "valid integer"),
    ("rank: true\n", "rank", "a boolean (true) where a number"),
])
def test_a_value_of_another_type_is_refused(tmp_path, text, key, words):
    path = write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_config(path, Typed)
    assert err.value.key == key and words in str(err.value)


def test_ints_for_floats_set_values_and_sections_as_mappings_still_work(tmp_path):
    path = write(tmp_path, "lam: 1\nsolver: {tol: 1, iters: 2}\nlabel: 'x: y'\n")
    cfg = load_config(path, Typed, ["rank=5", "lam=2", "flag=true", "sizes=[3, 4]",
                                    "label='5'", "limit=null"])
    assert (cfg.rank, cfg.lam, cfg.flag, cfg.sizes, cfg.label, cfg.limit) == (
        5, 2.0, True, [3, 4], "5", None)
    assert isinstance(cfg.lam, float) and isinstance(cfg.solver.tol, float)
    assert Typed.model_validate(cfg.model_dump(mode="json")) == cfg  # a manifest's config


# -- input files and folders ------------------------------------------------------------------
class Inputs(FlowConfig):
    data: list[str] = input_path("file", ["a.txt"])
    folder: str = input_path("folder", "docs")
    either: str | None = input_path("file or folder", None)
    solver: Solver = Solver()


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.setenv("SCARCE_ROOT", str(tmp_path))
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "docs").mkdir()
    return tmp_path


@pytest.mark.parametrize("overrides, key, path, words", [
    (["data=[a.txt, b.txt]"], "data.1", "b.txt", "file not found"),
    (["data=[docs]"], "data.0", "docs", "a folder where a file is expected"),
    (["folder=nowhere"], "folder", "nowhere", "folder not found"),
    (["folder=a.txt"], "folder", "a.txt", "a file where a folder is expected"),
    (["either=gone/x.gz"], "either", "gone/x.gz", "file or folder not found"),
])
def test_a_missing_input_is_refused_naming_key_and_path(project, overrides, key, path, words):
    config = write(project, "seed: 0\n")
    with pytest.raises(InputError) as err:
        load_config(config, Inputs, overrides)
    assert (err.value.key, err.value.path) == (key, str(project / path))
    assert err.value.message == words
    cfg = load_config(config, Inputs, overrides, inputs=False)  # the check can wait (deploy)
    with pytest.raises(InputError, match=words):
        check_input_paths(cfg)


def test_existing_inputs_absolute_or_relative_pass(project):
    config = write(project, f"data: [a.txt, {project / 'a.txt'}]\neither: docs\n")
    assert load_config(config, Inputs).data == ["a.txt", str(project / "a.txt")]


def test_every_bundled_config_and_experiment_loads():
    from scarce.flows.experiment import load_experiment
    from scarce.flows.registry import FLOWS

    root = Path(__file__).resolve().parents[2]
    loaded = [load_config(root / spec.config_file, spec.load_model())
              for spec in FLOWS.values()  # the package's (a test registers its own flow)
              if spec.kind != "experiment" and spec.target.startswith("scarce.")]
    assert len(loaded) == 6
    experiments = sorted((root / "configs" / "experiments").glob("*.yaml"))
    assert experiments
    for path in experiments:
        load_experiment(path)


@pytest.mark.parametrize("what", ["gone", "a-folder"])
def test_a_splits_file_that_cannot_be_read_after_the_check_names_the_key(tmp_path, what):
    import scarce.tasks.strip as tasks_strip

    splits = tmp_path / "splits.tsv"
    if what == "a-folder":
        splits.mkdir()
    with pytest.raises(InputError, match="cannot read the splits file") as err:
        tasks_strip.select_documents(splits, tmp_path, {"train": ["train"]})
    assert (err.value.key, err.value.path) == ("splits_file", str(splits))


def test_the_config_loader_is_a_safe_loader(tmp_path):
    import yaml

    from scarce.flows.config import ConfigLoader

    assert issubclass(ConfigLoader, yaml.SafeLoader)
    with pytest.raises(InputError, match="python/object"):
        load_config(write(tmp_path, ""), Demo, ["rank=!!python/object/apply:os.system [id]"])


LEML_DATA = """
dataset: {train: train.txt, test: test.txt}
"""


def test_the_leml_config_has_no_w_step_section_any_more(tmp_path):
    """``w_step``, the name ``compute`` had before any release, is an unknown key like any
    other: in the file, and in ``--set`` (one line naming the file and the key)."""
    from scarce.flows.leml_config import LemlConfig

    path = tmp_path / "leml.yaml"
    path.write_text(LEML_DATA + "w_step: {runner: blocks, blocks: 3}\n")
    with pytest.raises(InputError) as exc:
        load_config(path, LemlConfig, inputs=False)
    assert str(exc.value) == f"{path}: key 'w_step': unknown key"
    path.write_text(LEML_DATA)
    with pytest.raises(InputError) as exc:
        load_config(path, LemlConfig, ["w_step.blocks=3"], inputs=False)
    message = str(exc.value)
    assert message.startswith(f"{path}: key 'w_step': --set: unknown key (known here: ")
    assert "compute" in message and "\n" not in message


# -- numbers: every way a researcher writes one, read alike by every loader ---------------------
REPO = Path(__file__).resolve().parents[2]

#: (text, the number it is), worked out by hand: YAML 1.2's core schema with Python's digit
#: separators (PyYAML alone reads YAML 1.1, where 1e-4 is a string and 010 is eight).
NUMBERS = [("1e-4", 0.0001), ("1E4", 10000.0), ("1e+3", 1000.0), ("-2.5e-3", -0.0025),
           ("2.5E-03", 0.0025), (".5", 0.5), ("-.5", -0.5), ("+.5", 0.5), ("5.", 5.0),
           ("1.0e4", 10000.0), ("1.e5", 100000.0), ("0.001", 0.001), ("1_000.5", 1000.5),
           ("1_000", 1000), ("010", 10), ("-0", 0), ("+7", 7), ("0x1f", 31), ("0o17", 15),
           ("0b101", 5), (".inf", math.inf), ("-.inf", -math.inf), ("12345678901234567890",
                                                                     12345678901234567890)]
#: Texts that stay text: YAML 1.1's sexagesimal and Python's spellings of infinity included.
NOT_NUMBERS = ["1:30", "1e", "e5", "1.2.3", "1__0", "_1", "1_", "inf", "nan", "Infinity",
               "0x", "1e4.5", "--1", "0o8", "1,5"]


@pytest.mark.parametrize("text, number", NUMBERS, ids=[t for t, _ in NUMBERS])
def test_every_number_syntax_is_read_as_that_number(text, number):
    from scarce.flows.config import safe_load

    value = safe_load(f"x: {text}")["x"]
    assert value == number and type(value) is type(number)
    assert math.isnan(safe_load("x: .nan")["x"])


@pytest.mark.parametrize("text", NOT_NUMBERS)
def test_what_is_no_number_stays_text(text):
    from scarce.flows.config import safe_load

    assert safe_load(f"x: {text}")["x"] == text


def test_every_yaml_read_goes_through_the_config_loader():
    """No module reads YAML but through flows.config (so every number is read alike)."""
    calls = re.compile(r"yaml\.(safe_load|load|full_load|unsafe_load|load_all|safe_load_all)"
                       r"\(|yaml\.(Safe|Full|Unsafe)?Loader\b")
    found = [f"{path.relative_to(REPO)}:{n}"
             for folder in ("algorithms", "tasks", "flows", "bench", "scarce")
             for path in sorted((REPO / folder).rglob("*.py"))
             if path != REPO / "flows" / "config.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if calls.search(line)]
    assert found == []


def _section(annotation):
    for a in (annotation, *typing.get_args(annotation)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def leaf_fields(model, prefix=""):
    """(dotted key, field) of every key of ``model``, its sections walked."""
    for name, field in model.model_fields.items():
        section = _section(field.annotation)
        if section is not None:
            yield from leaf_fields(section, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field


def _floats_of(annotation) -> str | None:
    """'float' for a float key (optional or not), 'list' for a list of floats."""
    if typing.get_origin(annotation) is list:
        return "list" if typing.get_args(annotation) == (float,) else None
    args = typing.get_args(annotation)
    return "float" if annotation is float or (float in args and typing.get_origin(
        annotation) is not typing.Literal) else None


def _models():
    """The config model of every flow of the package (a test registers a flow of its own)."""
    from scarce.flows.registry import FLOWS

    return {name: spec.load_model() for name, spec in FLOWS.items()
            if spec.target.startswith("scarce.")}


def float_keys():
    """(flow, dotted key, 'float' or 'list', a value the key takes) of every config model."""
    from scarce.flows.commands.types import config_number

    out = []
    for flow, model in _models().items():
        for key, field in leaf_fields(model):
            kind = _floats_of(field.annotation)
            if kind is None:
                continue
            default = field.get_default(call_default_factory=True)
            if kind == "list":
                value = default[0]
            else:
                bounds = config_number(model, key)
                value = next(v for v in (default, 0.37, 3.7, 37.0)
                             if isinstance(v, float) and v != 0 and bounds.contains(v))
            out.append((flow, key, kind, value))
    return out


FLOAT_KEYS = float_keys()


def spellings(x: float) -> list[str]:
    """The ways of writing ``x`` (the same decimal, so the same float): ``25e-4``, ``25E-4``,
    ``2.5e-3``, ``2.5E-03``, ``.0025``, and as Python prints it."""
    sign, digits, exp = decimal.Decimal(repr(x)).as_tuple()
    s, m = "-" if sign else "", "".join(map(str, digits))
    lead, e = m[0] + "." + m[1:], exp + len(m) - 1
    out = [repr(x), f"{s}{m}e{exp}", f"{s}{m}E{exp:+d}", f"{s}{lead}e{e}", f"{s}{lead}E{e:+03d}"]
    if 0 < abs(x) < 1:
        out.append(s + format(decimal.Decimal(repr(abs(x))), "f").removeprefix("0"))
    return out


def test_the_spellings_are_of_the_same_number():
    assert spellings(0.0025) == ["0.0025", "25e-4", "25E-4", "2.5e-3", "2.5E-03", ".0025"]
    assert all(float(t) == 1.0 for t in spellings(1.0))


def _packaged(flow: str) -> Path:
    from scarce.flows.registry import FLOWS

    name = FLOWS[flow].config_file.format(name="leml-defaults")
    return REPO / name


def _get(config, key: str):
    return functools.reduce(getattr, key.split("."), config)


def _by_file(flow, key, text, tmp_path):
    import yaml

    data = yaml.safe_load(_packaged(flow).read_text()) or {}  # the shipped data, and the key
    node = data
    for part in key.split(".")[:-1]:
        node = node.setdefault(part, {})
    node[key.split(".")[-1]] = "PLACEHOLDER"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data).replace("PLACEHOLDER", text))
    return _get(load_config(path, _models()[flow], inputs=False), key)


def _by_set(flow, key, text, tmp_path):
    return _get(load_config(_packaged(flow), _models()[flow], [f"{key}={text}"],
                            inputs=False), key)


def _experiment(flow, tmp_path, body: str):
    from scarce.flows.experiment import grid, load_experiment, point_config

    path = tmp_path / "exp.yaml"
    path.write_text(f"flow: {flow}\nbase: {_packaged(flow)}\n{body}"
                    "table: {rows: [seed], metric: m}\n")
    config = load_experiment(path)
    return point_config(config, grid(config)[0])


def _by_experiment_set(flow, key, text, tmp_path):
    return _get(_experiment(flow, tmp_path, f"set: {{{key}: {text}}}\naxes: {{seed: [0]}}\n"),
                key)


def _by_experiment_axis(flow, key, text, tmp_path):
    return _get(_experiment(flow, tmp_path, f"axes: {{seed: [0], {key}: [{text}]}}\n"), key)


def _by_deployments_file(flow, key, text, tmp_path):
    from scarce.flows.deploy import load_deployments

    path = tmp_path / "deployments.yaml"
    path.write_text(f"deployments:\n  d:\n    flow: {flow}\n    config: {_packaged(flow)}\n"
                    f"    parameters: {{{key}: {text}}}\n")
    (deployment,) = load_deployments(path)
    return _get(deployment.config, key)


def _by_where(flow, key, text, tmp_path):
    from scarce.flows.runs_table import parse_where

    ((_, value),) = parse_where([f"{key}={text}"])
    return value


#: Every way a config value is read from YAML: a config file, --set, an experiment's fixed
#: settings and its axes, a deployments file's parameters, and `scarce runs --where`.
LOADERS = {"config-file": _by_file, "set": _by_set, "experiment-set": _by_experiment_set,
           "experiment-axis": _by_experiment_axis, "deployments": _by_deployments_file,
           "where": _by_where}


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("flow, key, kind, value", FLOAT_KEYS,
                         ids=[f"{f}:{k}" for f, k, _, _ in FLOAT_KEYS])
def test_every_float_key_reads_scientific_notation_by_every_loader(flow, key, kind, value,
                                                                   loader, tmp_path,
                                                                   monkeypatch):
    from scarce.flows.registry import FLOWS

    if loader.startswith("experiment") and FLOWS[flow].kind != "train":
        pytest.skip("an experiment's grid is of a training flow")
    monkeypatch.setenv("SCARCE_ROOT", str(REPO))  # the shipped configs' data exist there
    for text in spellings(value):
        read = LOADERS[loader](flow, key, f"[{text}]" if kind == "list" else text, tmp_path)
        read = read[0] if kind == "list" else read
        assert read == value and type(read) is float, (text, read)


def test_every_config_model_has_float_keys_to_check():
    assert {f for f, *_ in FLOAT_KEYS} >= {"leml", "relations", "strip"}
    assert ("leml", "model.cg_tol", "float", 0.001) in FLOAT_KEYS


@pytest.mark.parametrize("flow, key, kind, value", FLOAT_KEYS,
                         ids=[f"{f}:{k}" for f, k, _, _ in FLOAT_KEYS])
def test_no_float_key_takes_an_infinite_or_nan_value(flow, key, kind, value):
    for text in (".inf", "-.inf", ".nan", "1e999"):
        with pytest.raises(InputError) as err:
            _by_set(flow, key, f"[{text}]" if kind == "list" else text, None)
        assert err.value.key in (key, f"{key}.0")
        assert re.search(r"finite number|valid integer \(got (-?inf|nan)\)", str(err.value))


def test_an_int_key_reads_ints_and_refuses_a_float_written_in_scientific_notation():
    assert _by_set("leml", "model.rank", "1_0", None) == 10
    assert _by_set("leml", "model.rank", "010", None) == 10
    with pytest.raises(InputError, match=r"key 'model.rank': Input should be a valid integer "
                                         r"\(got 100.0\)"):
        _by_set("leml", "model.rank", "1e2", None)


# -- names: config values that become file and run names ---------------------------------------
def _is_text(annotation) -> bool:
    if typing.get_origin(annotation) in (dict, typing.Literal):
        return False
    return annotation is str or any(_is_text(a) for a in typing.get_args(annotation))


def text_keys(model):
    """(dotted key, is a list) of every text key of ``model``, its sections walked."""
    return [(key, typing.get_origin(field.annotation) is list
             or any(typing.get_origin(a) is list for a in typing.get_args(field.annotation)))
            for key, field in leaf_fields(model) if _is_text(field.annotation)]


def _base_data(flow: str) -> dict:
    from scarce.flows.config import read_yaml

    return read_yaml(_packaged(flow), "config") or {}


def built_names(flow: str, config, monkeypatch) -> tuple[list[str], list[str]]:
    """(file names, run names) a run of ``flow`` makes from ``config``: its run id and the
    hidden folder it is written under, a figure's file (``plots/<key>.png``), an experiment's
    summary files; the flow run's name and tags."""
    import prefect.runtime.flow_run

    from scarce.flows.artifacts import Artifacts
    from scarce.flows.experiment import summary_file
    from scarce.flows.registry import FLOWS
    from scarce.flows.runtime import PARTIAL, new_run_id
    from scarce.flows.tags import dataset_name, run_tags

    run_id = new_run_id(flow, config.name)
    figure = Artifacts(flow, run_id, None, None, dataset_name(config)).key("stability-over-k")
    files = [run_id, f".{run_id}{PARTIAL}a1b2c3", f"{figure}.png"]
    if flow == "experiment":
        files += [summary_file(m) for m in config.table.also]
    title = FLOWS[flow].load_flow().flow_run_name
    if callable(title):
        monkeypatch.setattr(prefect.runtime.flow_run, "parameters", {"config": config},
                            raising=False)  # the config itself, as a flow run holds it
        title = title()
    elif title:
        title = title.format(config=config)
    return files, [title or flow, *run_tags(flow, config)]


#: Values no file name can hold: too long, a lone surrogate (a byte of the command line that
#: is not UTF-8), path separators, the parent folder, a NUL.
BAD_NAMES = ["a" * 6000, "\udc80", "a\udcffb", "a/b", "../x", "..", "a\\b", "x\x00y", "é" * 200]


def _a_file_name(name: str) -> bool:
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return 0 < size <= 255 and not set(name) & {"/", "\\", "\x00"} and name not in (".", "..")


@pytest.mark.parametrize("flow", sorted(_models()))
def test_every_config_value_in_a_file_or_run_name_is_refused_unless_it_can_be_one(
        flow, monkeypatch):
    """Every text key of the flow's config, set to each of :data:`BAD_NAMES`: the config is
    refused naming the key, or every file and run name a run builds from it is still a valid
    file name (UTF-8, at most 255 bytes, no separator) and run name (UTF-8)."""
    from scarce.flows.config import apply_values, validate_config

    model, base = _models()[flow], _base_data(flow)
    files, runs = built_names(flow, validate_config(base, model, None), monkeypatch)
    assert all(_a_file_name(f) for f in files), files
    for key, many in text_keys(model):
        for bad in BAD_NAMES:
            data = apply_values(base, {key: [bad] if many else bad}, model)
            try:
                config = validate_config(data, model, "c.yaml")
            except InputError:  # refused (by the key, or a check of the whole config)
                continue
            files, runs = built_names(flow, config, monkeypatch)
            assert all(_a_file_name(f) for f in files), (key, bad[:20], files)
            for name in runs:
                name.encode("utf-8")


def _marked(model, data: dict, prefix: str, markers: dict):
    """``model`` built unvalidated from ``data``, each text key holding its own marker."""
    values = {}
    for name, field in model.model_fields.items():
        key, value = f"{prefix}{name}", data.get(name, field.get_default(
            call_default_factory=True))
        section = _section(field.annotation)
        if section is not None:
            value = value.model_dump() if isinstance(value, BaseModel) else value or {}
            values[name] = _marked(section, value, f"{key}.", markers)
            continue
        if _is_text(field.annotation):
            marker = f"zq{len(markers)}x"
            markers[marker] = key
            value = [marker] if typing.get_origin(field.annotation) is list or isinstance(
                value, list) else marker
        values[name] = value
    return model.model_construct(**values)


def test_the_keys_in_names_are_found(monkeypatch):
    """The test above sees the names: a marker in each text key (set without validation, so
    that a pattern does not stop it) shows which keys reach a file or run name."""
    found = {}
    for flow, model in _models().items():
        markers: dict[str, str] = {}
        config = _marked(model, _base_data(flow), "", markers)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydantic on dumping unvalidated values
            names = sum(built_names(flow, config, monkeypatch), [])
        found[flow] = {key for marker, key in markers.items() if any(marker in n for n in names)}
    assert found["leml"] >= {"name", "dataset.name"}
    assert found["relations"] >= {"name", "dataset", "window"}
    assert found["strip"] >= {"name", "dataset"}
    assert found["apply-leml"] >= {"name", "model_run"}
    assert found["experiment"] >= {"name", "table.also"}


def test_the_longest_names_fit_a_file_name(monkeypatch):
    from scarce.flows.config import NAME_LENGTH, validate_config
    from scarce.flows.relations import RelationsConfig

    longest = "r" * NAME_LENGTH
    config = validate_config({"name": longest, "dataset": longest}, RelationsConfig, None)
    files, _ = built_names("relations", config, monkeypatch)
    assert all(_a_file_name(f) for f in files)
    with pytest.raises(InputError, match="at most 100 characters") as err:
        validate_config({"dataset": longest + "r"}, RelationsConfig, "c.yaml")
    assert err.value.key == "dataset"


def test_a_lone_surrogate_written_as_a_yaml_escape_is_refused_naming_the_key(tmp_path):
    from scarce.flows.relations import RelationsConfig

    for text, key in [('dataset: "semeval\\udc80"\n', "dataset"),
                      ('relation_types: ["Cause-Effect\\udcff"]\n', "relation_types.0")]:
        with pytest.raises(InputError, match="not valid UTF-8") as err:
            load_config(write(tmp_path, text), RelationsConfig, inputs=False)
        assert err.value.key == key


def test_a_config_holding_an_alias_bomb_is_read_once_per_anchor_and_its_surrogate_named(tmp_path):
    """An alias shares one list among many places: 13 anchors, each of 9 aliases of the one
    before, are 9**12 places, which a check walking every place would never finish (the text
    it must find comes after them); each list is read once."""
    from scarce.flows.relations import RelationsConfig

    bomb = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else 'x'}]\n"
                   for i in range(13))
    last = 'after: "x\\udc80"\n'  # a YAML escape of a lone surrogate, read after the bomb
    with pytest.raises(InputError, match="not valid UTF-8") as err:
        load_config(write(tmp_path, bomb + last), RelationsConfig, inputs=False)
    assert err.value.key == "after"


def test_an_experiment_named_by_its_file_needs_a_file_name_that_can_name_runs(tmp_path):
    from scarce.flows.experiment import load_experiment

    body = (f"flow: leml\nbase: {REPO / 'configs' / 'leml.yaml'}\naxes: {{seed: [0]}}\n"
            "table: {rows: [seed], metric: m}\n")
    path = tmp_path / "my experiment.yaml"
    path.write_text(body)
    with pytest.raises(InputError, match="cannot name the runs") as err:
        load_experiment(path)
    assert err.value.key == "name"
    path.write_text(body + "name: mine\n")
    assert load_experiment(path).name == "mine"


# -- scarce init: the configs it writes, and what is said outside a project ---------------------
#: A path in a comment: folders and files of a project or of the repository.
PATH_IN_TEXT = re.compile(r"(?<![\w./:-])((?:[\w.-]+/)+[\w.-]*|[\w-]+\.(?:py|md|yaml|yml|txt|tsv"
                          r"|csv|jsonl|parquet|gz|conllu))(?![\w/])")


def test_the_path_pattern_finds_paths_and_nothing_else():
    text = ("see docs/relations.md and algorithms/strip/ripper.py, configs/, data/x.csv, "
            "leml-tune.yaml; not pre:/mid:/post:, tcp://host:8786, 0-10-0, br-ridge | xmc")
    assert PATH_IN_TEXT.findall(text) == ["docs/relations.md", "algorithms/strip/ripper.py",
                                          "configs/", "data/x.csv", "leml-tune.yaml"]


def test_every_comment_of_a_config_scarce_init_writes_makes_sense_in_the_new_project(tmp_path):
    """Each file ``scarce init`` writes: no line speaks of bundled data, and each path a
    config's comment names exists in the new project (no file of the repository, no shipped
    data set's files)."""
    from scarce.flows.init_project import init_project

    project = tmp_path / "new"
    written = init_project(project)
    assert {p.name for p in written} == {"leml.yaml", "relations.yaml", "strip.yaml",
                                         "README.md"}
    for path in written:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            assert "bundled" not in line.lower(), f"{path.name}:{n}: {line}"
            if path.suffix != ".yaml" or "#" not in line:
                continue
            for named in PATH_IN_TEXT.findall(line.split("#", 1)[1]):
                assert (project / named).exists(), f"{path.name}:{n}: {named} ({line})"


def test_scarce_init_writes_configs_that_load_once_their_data_is_there(tmp_path, monkeypatch):
    from scarce.flows.init_project import init_project
    from scarce.flows.registry import FLOWS

    project = tmp_path / "new"
    init_project(project)
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    for name in ("leml", "relations", "strip"):
        config = load_config(project / "configs" / f"{name}.yaml", FLOWS[name].load_model(),
                             inputs=False)
        assert config.name in (None, "mydata")
        with pytest.raises(InputError) as err:  # its data are the user's to put there
            load_config(project / "configs" / f"{name}.yaml", FLOWS[name].load_model())
        assert "scarce init" not in str(err.value) and str(project / "data") in str(err.value)


OUTSIDE = [("run", "leml"), ("run", "relations"), ("run", "strip"), ("run", "all"),
           *[("run", "experiment", p.stem)
             for p in sorted((REPO / "configs" / "experiments").glob("*.yaml"))],
           ("deploy",), ("serve",)]


@pytest.mark.parametrize("argv", OUTSIDE, ids=" ".join)
def test_outside_a_project_a_missing_shipped_input_says_to_run_scarce_init(argv, tmp_path,
                                                                            monkeypatch, capsys):
    """In a folder that is no project (no configs/), the shipped configs are read; their data
    are not there: the one error line says whose config it was and to run ``scarce init``."""
    from scarce.flows.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCARCE_ROOT", str(tmp_path))
    for var in ("SCARCE_STORE", "SCARCE_RUNS"):
        monkeypatch.delenv(var, raising=False)
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert line.endswith("was read: run `scarce init` to start a project there"), line
    assert f"error: {tmp_path}/" in line and "the project folder has no configs/" in line
    assert f"so scarce's shipped {REPO / 'configs'}/" in line, line
    assert len(line) < 500 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written
