"""Every key of ``manifest.json`` that code reads has its type checked when the manifest is
read (``flows.manifest_schema.ManifestSchema``), whichever command reads it.

The keys are enumerated from the schema itself (nested records and their keys included), so a
key added to it is tested here; each is given a value of a wrong type in an otherwise complete
manifest written by hand, and every command that reads manifests must stop with exit code 2
and one ``error:`` line naming the manifest file and the key (``scarce runs`` without a run
id lists the other runs and warns, naming the same).  ``scarce.load_model`` reads the keys of
``RUN_KEYS`` alone (without the schema's pydantic), and stops on those in the same words.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import types
import typing
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pydantic import BaseModel

import scarce
from scarce.flows.cli import main
from scarce.flows.manifest import RUN_KEYS, read_manifest, read_run_keys
from scarce.flows.manifest_schema import ManifestSchema
from scarce.tasks.errors import InputError

RUN, OTHER = "leml-bad-20260101T100000-abcd", "leml-good-20260101T110000-abcd"


def _manifest(run_id: str) -> dict[str, Any]:
    """A complete manifest of a LEML run, every key of the schema present (checked below)."""
    return {
        "schema": 1, "run_id": run_id, "flow": "leml",
        "started": "2026-01-01T10:00:00+00:00", "finished": "2026-01-01T10:00:30+00:00",
        "config": {"seed": 0, "name": None, "dataset": {"name": "bibtex", "train": "t.txt"},
                   "model": {"rank": 8}},
        "seed": 0,
        "code": {"scarce": "0.1", "source_sha256": "e" * 64,
                 "source_files": {"flows/leml.py": "f" * 64}, "commit": "0" * 40,
                 "dirty": False},
        "environment": {"python": "3.12.0", "implementation": "CPython",
                        "platform": "Linux", "packages": {"numpy": "2.1.0"}},
        "options": {"runner": "local", "rerun_of": None, "dask_address": None,
                    "store": None, "runs": None},
        "store": "data/cache",
        "inputs": [{"path": "t.txt", "sha256": "a" * 64}],
        "outputs": [{"step": "leml-load", "ref": "leml-load/" + "1" * 32 + "-X",
                     "sha256": "b" * 64, "cached": False, "volatile": False, "code": "c" * 16,
                     "child": None}],
        "metrics_sha256": "d" * 64,
        "cache_hits": ["leml-load"],
        "plots": [{"name": "objective", "path": "plots/objective.png", "sha256": "9" * 64,
                   "ref": None}],
        "named_outputs": [{"name": "predictions.parquet", "ref": "leml-predict/x",
                           "sha256": "8" * 64, "volatile": False}],
        "prefect_flow_run_id": None, "deployment": None, "task_runner": "ThreadPoolTaskRunner",
        "tags": ["flow:leml"], "notes": {}, "headline": {"bibtex/leml-squared-k8/precision@1":
                                                        0.5},
    }


def _wrong(annotation: Any) -> Any:
    """A JSON value that is not of ``annotation`` (the type without its None)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = args[0]
    origin = typing.get_origin(annotation) or annotation
    if origin is str:
        return 12345
    if origin is bool:
        return "yes"
    if origin in (int, float):
        return "many"
    if origin is list:
        return "not a list"
    if origin is dict or (isinstance(origin, type) and issubclass(origin, BaseModel)):
        return ["not", "a", "mapping"]
    raise AssertionError(f"no wrong value for {annotation!r}")


def _inner(annotation: Any) -> Any:
    """``X`` of ``X | None``."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else annotation


def _cases(model: type[BaseModel], value: dict, prefix: str = "") -> list[tuple]:
    """``(key as the error names it, path into the manifest, wrong value)`` for every key
    of ``model`` and, within it, of its records, lists and mappings."""
    out = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        annotation = _inner(field.annotation)
        if annotation is Any:  # a value of any type is right
            continue
        where = f"{prefix}.{key}" if prefix else key
        out.append((where, (key,), _wrong(annotation)))
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        sub = value[key]
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out += [(k, (key, *p), v) for k, p, v in _cases(annotation, sub, where)]
        elif origin is list and args:
            element = args[0]
            out.append((f"{where}[0]", (key, 0), _wrong(element)))
            if isinstance(element, type) and issubclass(element, BaseModel):
                out += [(k, (key, 0, *p), v)
                        for k, p, v in _cases(element, sub[0], f"{where}[0]")]
        elif origin is dict and args and args[1] is not Any:
            first = next(iter(sub))
            out.append((f"{where}.{first}", (key, first), _wrong(args[1])))
    return out


CASES = _cases(ManifestSchema, _manifest(RUN))


def test_the_complete_manifest_holds_every_key_and_is_valid(tmp_path):
    """The manifest the cases start from is valid and holds every key of the schema (so
    each case changes one key of a manifest otherwise right)."""
    folder = tmp_path / RUN
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps(_manifest(RUN)))
    assert read_manifest(folder) == _manifest(RUN)
    assert {f.alias or n for n, f in ManifestSchema.model_fields.items()} == set(_manifest(RUN))
    keys = {c[0] for c in CASES}
    assert {"named_outputs", "outputs[0].ref", "inputs[0].sha256", "code.source_files",
            "environment.packages.numpy", "headline.bibtex/leml-squared-k8/precision@1",
            "options.runner", "flow", "config", "started"} <= keys


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project whose runs folder holds a good run and the run the cases spoil."""
    monkeypatch.setenv("SCARCE_ROOT", str(tmp_path))
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "data" / "runs"
    for run_id in (RUN, OTHER):
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "manifest.json").write_text(json.dumps(_manifest(run_id)))
        pd.DataFrame({"dataset": ["bibtex"], "method": ["leml-squared-k8"],
                      "metric": ["precision@1"], "value": [0.5]}).to_parquet(
            runs / run_id / "metrics.parquet")
    (tmp_path / "new.txt").write_text("1 1 1\n0 0:1\n")
    return tmp_path


def _spoil(project: Path, path: tuple, value: Any) -> Path:
    m = copy.deepcopy(_manifest(RUN))
    node = m
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    target = project / "data" / "runs" / RUN / "manifest.json"
    target.write_text(json.dumps(m))
    return target


#: Every command that reads a run's manifest, as it is called with the spoilt run.
COMMANDS = {
    "runs RUN": ["runs", RUN],
    "rerun": ["rerun", RUN],
    "diff": ["diff", OTHER, RUN],
    "apply": ["apply", RUN, "--input", "new.txt"],
    "claims": ["claims", RUN],
    "cache gc": ["cache", "gc", "--dry-run"],
}


def _cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("key, path, value", CASES, ids=[c[0] for c in CASES])
def test_a_key_of_the_wrong_type_is_one_error_naming_the_file_and_key(project, key, path,
                                                                     value):
    target = _spoil(project, path, value)
    named = f"{target}: key '{key}': not a valid run manifest"
    for command, args in COMMANDS.items():
        code, _, err = _cli(args)
        lines = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2, (command, err[-1500:])
        assert len(lines) == 1 and named in lines[0], (command, err[-1500:])
        assert "Traceback" not in err, command
    with pytest.raises(InputError) as exc:
        scarce.load_model(RUN)
    if key in RUN_KEYS:  # what finding the model reads
        assert named in str(exc.value) and exc.value.key == key
    else:  # a key it does not read: the run is found, and it has no model
        assert "has no model" in str(exc.value), str(exc.value)
    # the table of runs lists the others and says which run it left out, and why
    code, out, err = _cli(["runs"])
    assert code == 0 and OTHER in out
    warning = next(line for line in err.splitlines() if line.startswith(f"warning: run {RUN}:"))
    assert f"key '{key}'" in warning and str(target) in warning
    if key.startswith("headline"):  # a malformed headline leaves out the metrics only
        assert RUN in out and "malformed headline metrics" in warning
    else:
        assert RUN not in out and warning.endswith("left out")


def test_the_keys_finding_a_model_reads_have_the_schemas_types(tmp_path):
    """``read_run_keys`` (no pydantic) accepts and refuses each key of ``RUN_KEYS`` as the
    schema does: each of the values below, in an otherwise complete manifest, is read by both
    or refused by both, naming the key."""
    folder = tmp_path / RUN
    folder.mkdir()
    values = [None, "x", "", 3, 2.5, True, [], ["x"], {}, {"name": "x"}]
    assert set(RUN_KEYS) <= set(ManifestSchema.model_fields)
    for key in RUN_KEYS:
        for value in values:
            m = {**_manifest(RUN), key: value}
            (folder / "manifest.json").write_text(json.dumps(m))
            answers = []
            for read in (read_manifest, read_run_keys):
                try:
                    read(folder)
                    answers.append("read")
                except InputError as exc:
                    assert exc.key == key, (key, value, str(exc))
                    answers.append("refused")
            assert answers[0] == answers[1], (key, value, answers)
            if answers[0] == "read":
                assert read_run_keys(folder)[key] == value
    (folder / "manifest.json").write_text(json.dumps(
        {k: v for k, v in _manifest(RUN).items() if k not in ("finished", "deployment")}))
    assert read_run_keys(folder)["finished"] is None
