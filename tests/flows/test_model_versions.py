"""A model written by an earlier version of scarce keeps loading: a LEML table model of model
format 1, committed with the predictions it gave, must give them again bit for bit; a model
of a format version this code does not know is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import scarce
from scarce.tasks.errors import InputError

REPO = Path(__file__).resolve().parents[2]
SAVED = REPO / "tests" / "data" / "models" / "leml-table-v1"
NEW_ROWS = REPO / "data" / "examples" / "leml" / "bibtex.new.csv"


def test_a_saved_format_1_model_gives_its_recorded_predictions():
    model = scarce.load_model(SAVED)
    texts = pd.read_csv(NEW_ROWS)["text"].tolist()
    want = pd.read_parquet(SAVED / "expected.parquet")
    pd.testing.assert_frame_equal(model.predict_top_k(texts, 5), want, check_exact=True)
    pd.testing.assert_frame_equal(model.predict_top_k(NEW_ROWS, 5), want, check_exact=True)


def test_a_model_of_an_unknown_format_version_is_refused_in_one_line(tmp_path):
    copy = tmp_path / "leml-from-the-future"
    shutil.copytree(SAVED, copy)
    meta = copy / "outputs" / "model" / "model.json"
    doc = json.loads(meta.read_text())
    doc["version"] = 99
    meta.write_text(json.dumps(doc))
    with pytest.raises(InputError) as err:
        scarce.load_model(copy)
    message = str(err.value)
    assert "99" in message and "model.json" in message and "\n" not in message
