"""Config loading: validation errors name the file and the key; overrides."""

from __future__ import annotations

import warnings

import pytest
from pydantic import Field

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
    from pathlib import Path

    from scarce.flows.experiment import load_experiment
    from scarce.flows.registry import FLOWS

    root = Path(__file__).resolve().parents[2]
    for spec in FLOWS.values():
        if spec.kind != "experiment" and spec.target.startswith("flows."):
            load_config(root / spec.config_file, spec.load_model())
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


@pytest.mark.parametrize("runner, backend", [("local", "local"), ("blocks", "local-blocks"),
                                             ("dask", "dask")])
def test_a_leml_config_with_the_former_w_step_section_loads_as_compute(tmp_path, runner,
                                                                        backend):
    from scarce.flows.leml import LemlConfig

    driver = "worker" if runner == "dask" else "flow"
    path = tmp_path / "leml.yaml"
    path.write_text(LEML_DATA + f"w_step: {{runner: {runner}, blocks: 3, workers: 4, "
                    f"address: 'tcp://h:8786', driver: {driver}}}\n")
    with pytest.warns(FutureWarning) as caught:
        config = load_config(path, LemlConfig, inputs=False)
    message = str(caught[0].message)
    assert all(f"{old} -> {new}" in message for old, new in [
        ("runner", "backend"), ("blocks", "row_blocks"), ("driver", "solvers")])
    assert config.compute.model_dump() == {"backend": backend, "row_blocks": 3, "workers": 4,
                                           "address": "tcp://h:8786", "solvers": driver}
    assert "w_step" not in config.model_dump()


def test_a_leml_config_may_not_give_both_compute_and_w_step(tmp_path):
    from scarce.flows.leml import LemlConfig

    path = tmp_path / "leml.yaml"
    path.write_text(LEML_DATA + "w_step: {runner: dask}\ncompute: {backend: dask}\n")
    with pytest.raises(InputError, match="w_step is the former name of compute") as exc:
        load_config(path, LemlConfig, inputs=False)
    assert str(path) in str(exc.value)
    path.write_text(LEML_DATA + "w_step: {runner: dask}\n")  # and --set of the new name
    with pytest.raises(InputError, match="w_step is the former name of compute"):
        load_config(path, LemlConfig, ["compute.row_blocks=2"], inputs=False)


def test_the_former_w_step_section_keeps_its_checks(tmp_path):
    from scarce.flows.leml import LemlConfig

    path = tmp_path / "leml.yaml"
    for section, words in [("{runner: local, rows: 3}", "w_step.rows: unknown key"),
                           ("{runner: gpu}", "local-blocks"),
                           ("{runner: blocks, driver: worker}", "needs backend 'dask'")]:
        path.write_text(LEML_DATA + f"w_step: {section}\n")
        with warnings.catch_warnings(), pytest.raises(InputError, match=words):
            warnings.simplefilter("ignore", FutureWarning)
            load_config(path, LemlConfig, inputs=False)


def test_set_of_a_former_w_step_key_sets_the_compute_key_it_became(tmp_path):
    """``--set w_step.blocks=3`` (each former key, the runner's former value mapped too) sets
    ``compute.row_blocks`` with a warning naming both; a key w_step never had is refused."""
    from scarce.flows.leml import LemlConfig

    path = tmp_path / "leml.yaml"
    path.write_text(LEML_DATA + "compute: {backend: local, workers: 4}\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config = load_config(path, LemlConfig, ["w_step.blocks=3", "w_step.runner=blocks",
                                                "w_step.driver=flow"], inputs=False)
    assert [(w.category, str(w.message).split(" (")[0]) for w in caught] == [
        (FutureWarning, f"--set w_step.{old} is set as compute.{new}")
        for old, new in [("blocks", "row_blocks"), ("runner", "backend"), ("driver", "solvers")]]
    assert config.compute.model_dump() == {"backend": "local-blocks", "row_blocks": 3,
                                           "workers": 4, "address": None, "solvers": "flow"}
    with pytest.warns(FutureWarning), pytest.raises(InputError, match="needs backend 'dask'"):
        load_config(path, LemlConfig, ["w_step.driver=worker"], inputs=False)
    for bad, words in [("w_step.rows=3", "w_step.rows: unknown key"),
                       ("w_step.blocks.x=3", "no sub-keys")]:
        with pytest.raises(InputError, match=words) as exc:
            load_config(path, LemlConfig, [bad], inputs=False)
        assert bad.split("=")[0] in str(exc.value)
