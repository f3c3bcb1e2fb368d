"""Config loading: validation errors name the file and the key; overrides."""

from __future__ import annotations

import pytest
from pydantic import Field

from flows.config import FlowConfig, Strict, load_config, parse_override
from tasks.errors import InputError


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
