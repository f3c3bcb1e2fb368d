"""How a rerun's outputs are compared with the recorded ones."""

from __future__ import annotations

import json

import pytest

from scarce.flows.manifest import compare_outputs, read_manifest
from scarce.tasks.errors import InputError


def _m(outputs, metrics="m"):
    return {"flow": "f", "outputs": outputs, "metrics_sha256": metrics}


def test_identical_outputs_give_no_differences():
    outs = [{"ref": "a/1", "sha256": "x"}, {"ref": "b/2", "sha256": "y"}]
    assert compare_outputs(_m(outs), _m(list(reversed(outs)))) == []


def test_differences_are_listed_by_ref():
    old = _m([{"ref": "a/1", "sha256": "x"}, {"ref": "b/2", "sha256": "y"}])
    new = _m([{"ref": "a/1", "sha256": "z"}, {"ref": "c/3", "sha256": "w"}], metrics="n")
    diffs = compare_outputs(old, new)
    assert diffs == [
        "differs: a/1 (x != z)",
        "missing in rerun: b/2",
        "new in rerun: c/3",
        "differs: metrics.parquet",
    ]


def test_volatile_timings_are_not_compared():
    old = _m([{"ref": "a/1-timings", "sha256": "x", "volatile": True}])
    new = _m([{"ref": "a/1-timings", "sha256": "y", "volatile": True}])
    assert compare_outputs(old, new) == []


def test_bad_manifests_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such run"):
        read_manifest(tmp_path / "nope")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "manifest.json").write_text("{not json")
    with pytest.raises(InputError) as err:
        read_manifest(tmp_path / "r")
    assert err.value.line == 1
    (tmp_path / "r" / "manifest.json").write_text(json.dumps({"x": 1}))
    with pytest.raises(InputError, match="not a scarce run manifest"):
        read_manifest(tmp_path / "r")
