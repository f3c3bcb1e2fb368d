"""A run's record: the decisions it logs and keeps for the manifest."""

from __future__ import annotations

import json
import logging

from scarce.flows.run_record import RunRecord
from scarce.tasks.store import Store


def test_a_decision_is_logged_with_its_reason_and_kept_in_order(tmp_path, caplog):
    record = RunRecord("r1", "relations", Store(tmp_path / "store"))
    with caplog.at_level(logging.INFO):
        record.decide("k", 9, "the largest M_norm, 0.3630, of k in 2..12")
        record.decide("loss ratio of strip-partial", 0.5, "the best B³ F1 on dev")
    said = [r.getMessage() for r in caplog.records]
    assert "decision: k = 9 (the largest M_norm, 0.3630, of k in 2..12)" in said
    assert "decision: loss ratio of strip-partial = 0.5 (the best B³ F1 on dev)" in said
    assert record.notes["decisions"] == [
        {"what": "k", "value": 9, "why": "the largest M_norm, 0.3630, of k in 2..12"},
        {"what": "loss ratio of strip-partial", "value": 0.5, "why": "the best B³ F1 on dev"},
    ]
    json.dumps(record.notes)  # the manifest's notes stay JSON


def test_a_numpy_value_is_kept_as_its_python_number(tmp_path):
    import numpy as np

    record = RunRecord("r1", "leml", Store(tmp_path / "store"))
    record.decide("outer iterations", np.int64(10), "model.outer_iterations")
    record.decide("lambda", np.float64(0.25), "chosen on dev")
    assert [d["value"] for d in record.notes["decisions"]] == [10, 0.25]
    assert type(record.notes["decisions"][0]["value"]) is int
    json.dumps(record.notes)
