"""Why two runs differ, then how (``flows.run_diff``, ``scarce diff``): hand-made manifests and
metrics tables, so every line can be worked out."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest

from scarce.flows.cli import main
from scarce.flows.run_diff import causes, outcome


def _manifest(**over) -> dict:
    m = {"flow": "leml", "config": {"seed": 0, "model": {"rank": 8}, "compute": {"row_blocks": 3}},
         "inputs": [{"path": "train.txt", "sha256": "a" * 64},
                    {"path": "test.txt", "sha256": "b" * 64}],
         "code": {"source_sha256": "c" * 64,
                  "source_files": {"flows/leml.py": "1" * 64, "tasks/leml.py": "2" * 64}},
         "environment": {"python": "3.11.7", "packages": {"numpy": "2.1.0", "scipy": "1.14"}},
         "outputs": [{"ref": "leml-load-x-X", "sha256": "d" * 64},
                     {"ref": "leml-init-y-W", "sha256": "e" * 64}],
         "metrics_sha256": "f" * 64,
         "named_outputs": [{"name": "predictions.parquet", "sha256": "9" * 64}]}
    m.update(over)
    return m


def test_the_causes_name_each_input_code_file_package_and_config_value():
    old = _manifest()
    new = copy.deepcopy(old)
    new["inputs"][1]["sha256"] = "0" * 64
    new["inputs"].append({"path": "extra.txt", "sha256": "7" * 64})
    new["code"] = {"source_sha256": "8" * 64,
                   "source_files": {"flows/leml.py": "1" * 64, "tasks/leml.py": "3" * 64}}
    new["environment"]["packages"] = {"numpy": "2.2.0", "pandas": "3.0"}
    # the same blocks: no difference; the rank is one
    new["config"] = {"seed": 0, "model": {"rank": 9}, "compute": {"row_blocks": 3}}
    assert causes(old, new) == [
        "why: input extra.txt read only by the second run",
        f"why: input test.txt changed (sha256 {'b' * 12} -> {'0' * 12})",
        "why: code changed in 1 file(s): tasks/leml.py",
        "why: package numpy 2.1.0 -> 2.2.0",
        "why: package pandas absent -> 3.0",
        "why: package scipy 1.14 -> absent",
        "why: config model.rank 8 -> 9",
    ]
    assert causes(old, copy.deepcopy(old)) == []
    # a run recorded before the code's files were: the sources' digest
    del new["code"]["source_files"]
    assert f"why: code changed (sources sha256 {'c' * 12} -> {'8' * 12})" in causes(old, new)


def _run(tmp_path, name: str, m: dict, values: dict[str, float]) -> None:
    d = tmp_path / "runs" / name
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps(m))
    rows = [dict(zip(["dataset", "method", "metric"], k.split("/"), strict=True), value=v)
            for k, v in values.items()]
    pd.DataFrame(rows).to_parquet(d / "metrics.parquet")


def test_the_outcome_gives_the_metrics_both_ways_and_counts_the_store_entries(tmp_path):
    old = _manifest()
    new = copy.deepcopy(old)
    new["metrics_sha256"] = "0" * 64
    new["outputs"] = [{"ref": "leml-load-x-X", "sha256": "0" * 64},
                      {"ref": "leml-init-z-W", "sha256": "e" * 64}]
    _run(tmp_path, "a", old, {"bib/leml/p@1": 0.5, "bib/leml/p@5": 0.25, "bib/br/p@1": 0.4})
    _run(tmp_path, "b", new, {"bib/leml/p@1": 0.625, "bib/leml/p@5": 0.25})
    a, b = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    assert outcome(old, new, a, b) == [
        "differs: metrics.parquet",
        "  bib/br/p@1: 0.4 -> absent",
        "  bib/leml/p@1: 0.5 -> 0.625",
        "store: 1 entries differ, 1 only in the second run, 1 only in the first "
        "(--verbose lists them)"]
    verbose = outcome(old, new, a, b, verbose=True)
    assert verbose[-3:] == ["missing in rerun: leml-init-y-W", "new in rerun: leml-init-z-W",
                            f"differs: leml-load-x-X ({'d' * 12} != {'0' * 12})"]
    assert outcome(old, copy.deepcopy(old), a, a) == []


def test_scarce_diff_says_why_first_and_exits_1_when_outputs_differ(tmp_path, monkeypatch,
                                                                    capsys):
    monkeypatch.setenv("SCARCE_RUNS", str(tmp_path / "runs"))
    old = _manifest()
    new = copy.deepcopy(old)
    new["config"]["model"]["rank"] = 9
    new["named_outputs"] = [{"name": "predictions.parquet", "sha256": "0" * 64}]
    _run(tmp_path, "a", old, {"bib/leml/p@1": 0.5})
    _run(tmp_path, "b", new, {"bib/leml/p@1": 0.5})
    assert main(["diff", "a", "b"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "why: config model.rank 8 -> 9",
        f"differs: outputs/predictions.parquet ({'9' * 12} != {'0' * 12})"]
    # what differs in the record but not in the outputs: said, and identical
    new["named_outputs"] = old["named_outputs"]
    (tmp_path / "runs" / "b" / "manifest.json").write_text(json.dumps(new))
    assert main(["diff", "a", "b"]) == 0
    assert capsys.readouterr().out.splitlines() == ["why: config model.rank 8 -> 9", "identical"]
    assert main(["diff", "a", "nope"]) == 2
    assert "no such run" in capsys.readouterr().err


@pytest.mark.parametrize("bad", ["../a", "a/b"])
def test_scarce_diff_takes_run_ids_only(bad, capsys):
    assert main(["diff", "a", bad]) == 2
    assert "not a run id" in capsys.readouterr().err


def _folder(tmp_path, name: str, m: dict, frame: pd.DataFrame, **parquet) -> dict:
    """Run folder ``name`` with ``frame`` as its ``metrics.parquet`` (written with pandas'
    ``parquet`` options) and manifest ``m``, the metrics' sha256 recorded; returns ``m``."""
    from scarce.tasks.store.atomic import file_sha256

    d = tmp_path / "runs" / name
    d.mkdir(parents=True)
    frame.to_parquet(d / "metrics.parquet", **parquet)
    m = {**m, "metrics_sha256": file_sha256(d / "metrics.parquet")}
    (d / "manifest.json").write_text(json.dumps(m))
    return m


def test_the_same_bytes_under_other_keys_are_identical_and_other_bytes_name_what_differs(
        tmp_path, monkeypatch, capsys):
    """Entries whose key changed and whose bytes did not: ``identical``, counted apart.  A
    ``metrics.parquet`` holding the same table in other bytes: ``identical (metadata
    differs)``, with what differs and both values."""
    from scarce.tasks.store.atomic import file_sha256

    monkeypatch.setenv("SCARCE_RUNS", str(tmp_path / "runs"))
    frame = pd.DataFrame({"dataset": ["bib"], "method": ["leml"], "metric": ["p@1"],
                          "value": [0.5]})
    old = _manifest(outputs=[{"ref": f"leml-load/{'1' * 32}-X", "sha256": "d" * 64}])
    new = _manifest(outputs=[{"ref": f"leml-load/{'2' * 32}-X", "sha256": "d" * 64}])
    old = _folder(tmp_path, "a", old, frame)
    _folder(tmp_path, "b", new, frame)
    assert main(["diff", "a", "b"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "identical",
        "store: 1 entries are the same bytes under another key (--verbose lists them)"]
    assert main(["diff", "a", "b", "--verbose"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [
        "store: leml-load X: 1 entries are the same bytes under another key"]

    new = _folder(tmp_path, "c", new, frame, compression="gzip")
    shas = [file_sha256(tmp_path / "runs" / r / "metrics.parquet") for r in ("a", "c")]
    assert shas[0] != shas[1]
    assert main(["diff", "a", "c"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "identical (metadata differs)",
        f"metadata differs: metrics.parquet (parquet.bytes {shas[0][:12]}… -> {shas[1][:12]}…)",
        "store: 1 entries are the same bytes under another key (--verbose lists them)"]
