"""Every part of a run's names comes from the config it runs with.

For every flow of the registry, its bundled config is loaded with ``--set`` overrides of each
key its names show (``flows.run_names.NAMINGS`` for the flow run's name, ``ID_KEYS`` for the
run id): the new value must be in the flow run's name the flow's own decorator gives (as
Prefect calls it, with the validated config) and in the run id ``RunContext.open`` makes,
and the old one gone.  The issue's case: ``--set dataset.name=delicious`` over the bundled
LEML config names a run ``leml-delicious-...``, never ``leml-bibtex-...``.
"""

from __future__ import annotations

import re

import pytest

from scarce.flows.config import config_path, load_config
from scarce.flows.registry import FLOWS
from scarce.flows.run_names import ID_KEYS, NAMINGS, flow_run_name, run_id_label, value
from scarce.flows.runtime import RunContext, RunOptions

#: The flows of the package (a test registers flows of its own).
PACKAGE_FLOWS = sorted(n for n, s in FLOWS.items() if s.target.startswith("scarce.flows."))

#: A new value for each key a name shows (by flow where the type differs), what the name
#: then shows, and other keys the value needs.
NEW = {
    "dataset.name": ("delicious", "delicious", ()),
    "model.rank": (37, "k37", ()),
    "observed_fraction": (0.37, "obs37", ()),
    "seed": (41, "seed41", ()),
    "dataset.evaluate_on": ("validation", "on-validation", ("dataset.validation_fraction=0.2",)),
    "dataset": ("corpus-x", "corpus-x", ()),
    ("relations", "window"): ("2-7-3", "2-7-3", ()),
    ("strip", "window"): (13, "w13", ()),
    "model_run": ("leml-old-20260101T000000-abcd", "leml-old-20260101T000000-abcd", ()),
    "name": ("mine", "mine", ()),
}


def _config(flow: str, overrides: list[str]):
    spec = FLOWS[flow]
    path = config_path(spec.config_file.format(name="leml-defaults"))
    sets = [*overrides, *(["input=x.txt"] if spec.kind == "apply" else [])]
    return load_config(path, spec.load_model(), sets, inputs=False)


def _new(flow: str, key: str) -> tuple:
    return NEW.get((flow, key)) or NEW[key]


def _decorated_name(flow: str, config, monkeypatch) -> str:
    """The flow run's name as Prefect asks the flow's decorator for it."""
    from prefect.runtime import flow_run

    monkeypatch.setitem(flow_run.FIELDS, "parameters", lambda: {"config": config})
    return FLOWS[flow].load_flow().flow_run_name()


def _run_id(flow: str, config, tmp_path) -> str:
    ctx = RunContext.open(flow, config, RunOptions(store=str(tmp_path / "store"),
                                                   runs=str(tmp_path / "runs")))
    ctx.lease.release()
    return ctx.run_id


def test_every_flow_has_its_names_keys():
    assert set(PACKAGE_FLOWS) == set(NAMINGS)


@pytest.mark.parametrize("flow, key", [(f, k) for f in PACKAGE_FLOWS for k in NAMINGS[f].keys])
def test_an_override_of_a_key_the_flow_run_name_shows_is_in_the_name(flow, key, monkeypatch):
    new, shown, needs = _new(flow, key)
    before = _config(flow, list(needs))
    after = _config(flow, [*needs, f"{key}={new}"])
    assert value(after, key) == new and value(before, key) != new
    name = _decorated_name(flow, after, monkeypatch)
    assert name == flow_run_name(flow, after)
    assert name != _decorated_name(flow, before, monkeypatch)
    assert re.search(rf"(^|-){re.escape(shown)}(-|$)", name), name
    # a deployment's parameters (a dict) name the run as the config they validate to
    assert _decorated_name(flow, after.model_dump(mode="json"), monkeypatch) == name


def _id_keys(flow: str) -> list[str]:
    config = _config(flow, [])
    out = []
    for key in ID_KEYS:
        try:
            if isinstance(value(config, key), str | None):
                out.append(key)
        except AttributeError:
            continue
    return out


@pytest.mark.parametrize("flow, key", [(f, k) for f in PACKAGE_FLOWS for k in _id_keys(f)])
def test_an_override_of_a_key_the_run_id_shows_is_in_the_run_id(flow, key, tmp_path):
    new, shown, needs = _new(flow, key)
    before = _config(flow, list(needs))
    old = value(before, key)
    run_id = _run_id(flow, _config(flow, [*needs, f"{key}={new}"]), tmp_path)
    assert re.fullmatch(rf"{flow}-(.+-)?{re.escape(shown)}(-.+)?-\d{{8}}T\d{{6}}-[0-9a-f]{{4}}",
                        run_id), run_id
    if old:  # the value it replaced is gone
        assert f"-{old}-" not in run_id.removeprefix(flow), run_id


def test_the_bundled_leml_config_with_another_data_set_names_the_run_by_it(tmp_path,
                                                                          monkeypatch):
    config = _config("leml", ["dataset.name=delicious"])
    run_id = _run_id("leml", config, tmp_path)
    assert run_id.startswith("leml-delicious-") and "bibtex" not in run_id
    name = _decorated_name("leml", config, monkeypatch)
    assert name.startswith("leml-delicious-k") and "bibtex" not in name


def test_a_run_id_part_is_a_folder_name_and_an_unsafe_one_is_refused_first():
    config = _config("relations", ["dataset=semeval-2010-task-8", "name=x.y"])
    assert run_id_label(config) == "x.y-semeval-2010-task-8"
    assert run_id_label(_config("apply-leml", [])) is None
    from scarce.tasks.errors import InputError

    with pytest.raises(InputError, match="key 'dataset'"):
        _config("relations", ["dataset=SemEval 2010 / task 8"])
