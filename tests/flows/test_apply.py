"""The apply flows' common part: which run's model, in which format, on which files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scarce.flows.apply import input_files, model_document, open_model, resolve_model_run
from scarce.tasks.errors import InputError


def _run(runs: Path, run_id: str, flow: str, finished: str, name: str | None = None,
         deployment: str | None = None, model: str | None = None) -> Path:
    d = runs / run_id
    (d / "outputs" / "model").mkdir(parents=True)
    manifest = {"flow": flow, "outputs": [], "finished": finished, "config": {"name": name},
                "deployment": deployment}
    (d / "manifest.json").write_text(json.dumps(manifest))
    if model is not None:
        (d / "outputs" / "model" / "model.json").write_text(model)
    return d


@pytest.fixture
def runs(tmp_path):
    runs = tmp_path / "runs"
    _run(runs, "leml-a", "leml", "2026-12-01T01:00:00", deployment="nightly")
    _run(runs, "leml-b", "leml", "2026-12-01T03:00:00", name="wide")
    _run(runs, "leml-c", "leml", "2026-12-01T02:00:00", deployment="nightly")
    _run(runs, "strip-a", "strip", "2026-12-01T04:00:00")
    (runs / "broken").mkdir()
    (runs / "broken" / "manifest.json").write_text("{not json")
    return runs


def test_latest_is_the_newest_finished_run_of_the_flow_or_of_a_name(runs):
    assert resolve_model_run("latest", "leml", runs).name == "leml-b"
    assert resolve_model_run("latest:nightly", "leml", runs).name == "leml-c"
    assert resolve_model_run("latest:wide", "leml", runs).name == "leml-b"
    assert resolve_model_run("leml-a", "leml", runs).name == "leml-a"


@pytest.mark.parametrize("model_run, flow, words", [
    ("latest:weekly", "leml", "no finished leml run named 'weekly'"),
    ("latest", "relations", "no finished relations run"),
    ("strip-a", "leml", "is a strip run, not a leml run"),
    ("nope", "leml", "no run 'nope'"),
    ("../leml-a", "leml", "no run '../leml-a'"),
])
def test_a_model_run_that_is_not_there_is_named(runs, model_run, flow, words):
    with pytest.raises(InputError, match=words) as err:
        resolve_model_run(model_run, flow, runs)
    assert err.value.key == "model_run"


def test_the_model_document_round_trips_and_checks_flow_and_version(tmp_path):
    d = _run(tmp_path, "r", "leml", "t", model=model_document("leml", 1, rank=3))
    meta, folder = open_model(d, "leml", 1)
    assert meta == {"format": "scarce-leml-model", "version": 1, "rank": 3}
    assert folder == d / "outputs" / "model"
    with pytest.raises(InputError, match="format version 1; this code reads version 2"):
        open_model(d, "leml", 2)
    with pytest.raises(InputError, match="not a strip model"):
        open_model(d, "strip", 1)
    (folder / "model.json").write_text("[1, 2")
    with pytest.raises(InputError, match="not valid JSON"):
        open_model(d, "leml", 1)
    (folder / "model.json").unlink()
    with pytest.raises(InputError, match="has no model"):
        open_model(d, "leml", 1)


def test_input_files_are_the_file_or_the_matching_files_of_a_folder(tmp_path):
    (tmp_path / "b.conllu").write_text("")
    (tmp_path / "a.conllu.gz").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    assert input_files(tmp_path / "b.conllu", (".conllu",)) == [tmp_path / "b.conllu"]
    assert input_files(tmp_path, (".conllu", ".conllu.gz")) == [
        tmp_path / "a.conllu.gz", tmp_path / "b.conllu"]
    with pytest.raises(InputError, match="no input file"):
        input_files(tmp_path, (".arff",))
    with pytest.raises(InputError, match="input not found"):
        input_files(tmp_path / "missing.txt", (".txt",))


def test_an_empty_folder_is_an_error_unless_allowed(tmp_path):
    with pytest.raises(InputError, match="no input file"):
        input_files(tmp_path, (".txt",))
    assert input_files(tmp_path, (".txt",), allow_empty=True) == []
    with pytest.raises(InputError, match="input not found"):  # a typo stays an error
        input_files(tmp_path / "inbxo", (".txt",), allow_empty=True)
