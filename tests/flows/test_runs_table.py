"""``scarce runs`` and ``scarce.runs()``: the table of past runs, from hand-written manifests
whose settings and metrics are known, so every cell can be checked."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest

import scarce
from scarce.flows.cli import main
from scarce.flows.leml import headline
from scarce.flows.runs_table import flat_config, own_method, runs_table
from scarce.tasks.errors import InputError


def _leml(rank: int, compute: dict | None = None, **extra) -> dict:
    config = {"seed": 0, "dataset": {"name": "bibtex", "train": "t.txt"},
              "model": {"rank": rank, "lam": 1.0}, "baselines": ["br-ridge"]}
    config.update(compute if compute is not None else {"compute": {"backend": "local",
                                                                   "row_blocks": 4}})
    return {"flow": "leml", "config": config, "options": {"runner": "local"},
            "headline": {"bibtex/br-ridge/precision@1": 0.65,
                         f"bibtex/leml-squared-k{rank}/precision@1": rank / 100,
                         f"bibtex/leml-squared-k{rank}/precision@5": rank / 1000},
            **extra}


def _write(root, run_id: str, manifest: dict, started: str) -> None:
    (root / run_id).mkdir(parents=True)
    m = {"outputs": [], "started": f"2026-01-01T{started}+00:00",
         "finished": f"2026-01-01T{started[:-2]}30+00:00", **manifest}
    (root / run_id / "manifest.json").write_text(json.dumps(m))


INPUTS_A = [{"path": "t.txt", "sha256": "a" * 64}, {"path": "s.txt", "sha256": "c" * 64}]
INPUTS_B = [{"path": "t.txt", "sha256": "b" * 64}, {"path": "s.txt", "sha256": "c" * 64}]


def _digest(inputs: list[dict]) -> str:
    """By hand: sha256 over the inputs in path order as compact JSON, 8 hex digits."""
    ordered = sorted(inputs, key=lambda i: i["path"])
    text = "[" + ",".join(f'{{"path":"{i["path"]}","sha256":"{i["sha256"]}"}}'
                          for i in ordered) + "]"
    return hashlib.sha256(text.encode()).hexdigest()[:8]


@pytest.fixture
def runs_dir(tmp_path):
    root = tmp_path / "runs"
    _write(root, "leml-a", _leml(8, inputs=INPUTS_A), "10:00:00")
    # its training file has the same path as leml-a's, other bytes
    _write(root, "leml-b", _leml(25, {"compute": {"backend": "local-blocks", "row_blocks": 3}},
                                 tags=["flow:leml", "experiment:rank"], inputs=INPUTS_B),
           "10:01:00")
    _write(root, "strip-a", {"flow": "strip", "config": {"seed": 0, "window": 20},
                             "options": {"rerun_of": "strip-0"},
                             "headline": {"gum/ripper/b3_f": 0.69, "gum/strip-labeled/b3_f": 0.68,
                                          "gum/strip-partial/b3_f": 0.70}}, "10:02:00")
    (root / "junk").mkdir()
    (root / "junk" / "manifest.json").write_text("{")
    return root


def test_a_row_per_run_with_the_settings_that_differ_and_the_methods_own_metrics(runs_dir):
    warn: list[str] = []
    frame = runs_table(runs_dir, warn=warn)
    assert warn and warn[0].startswith("run junk: ")
    assert frame["run_id"].tolist() == ["leml-a", "leml-b", "strip-a"]
    # the fixed columns, the tag only one run has, then the LEML config values that differ
    # (window is strip's alone and the same in its one run), then the own method's metrics
    assert list(frame.columns) == [
        "run_id", "flow", "dataset", "inputs", "status", "started", "seconds", "tags",
        "model.rank", "compute.backend", "compute.row_blocks", "method", "precision@1",
        "precision@5", "b3_f"]
    assert frame["status"].tolist() == ["finished", "finished", "rerun of strip-0"]
    # the same input path, other bytes: other digests; no input recorded: none
    assert frame["inputs"].tolist()[:2] == [_digest(INPUTS_A), _digest(INPUTS_B)]
    assert frame["inputs"][0] != frame["inputs"][1] and pd.isna(frame["inputs"][2])
    assert frame["seconds"].tolist() == [30.0, 30.0, 30.0]
    assert frame["tags"].tolist() == ["", "experiment:rank", ""]
    assert str(frame["model.rank"].dtype) == "Int64"  # integers, though strip has no rank
    assert frame["model.rank"].tolist()[:2] == [8, 25] and pd.isna(frame["model.rank"][2])
    assert frame["compute.backend"].tolist()[:2] == ["local", "local-blocks"]
    assert frame["compute.row_blocks"].tolist()[:2] == [4, 3]
    # LEML's own method, not the binary-relevance baseline; StRip's partially supervised one
    assert frame["method"].tolist() == ["leml-squared-k8", "leml-squared-k25", "strip-partial"]
    assert frame["precision@1"].tolist()[:2] == [0.08, 0.25]
    assert frame["b3_f"].tolist()[2] == 0.70 and pd.isna(frame["b3_f"][0])


def test_filters_by_flow_tag_and_value(runs_dir):
    assert runs_table(runs_dir, flow="strip")["run_id"].tolist() == ["strip-a"]
    assert runs_table(runs_dir, tags=["experiment:rank"])["run_id"].tolist() == ["leml-b"]
    # tags of a run recorded without them: from its manifest
    assert runs_table(runs_dir, tags=["rerun-of:strip-0"])["run_id"].tolist() == ["strip-a"]
    assert runs_table(runs_dir, where=["model.rank=8"])["run_id"].tolist() == ["leml-a"]
    assert runs_table(runs_dir, where=["precision@1=0.25"])["run_id"].tolist() == ["leml-b"]
    assert runs_table(runs_dir, where=["compute.backend=local-blocks", "model.rank=8"]).empty
    with pytest.raises(InputError, match="did you mean model.rank") as exc:
        runs_table(runs_dir, where=["model.rnk=8"])
    assert exc.value.key == "--where"


def test_chosen_columns_and_every_config_value(runs_dir):
    frame = runs_table(runs_dir, flow="leml", columns=["model.lam", "precision@5"])
    assert list(frame.columns) == ["run_id", "model.lam", "precision@5"]
    assert frame["model.lam"].tolist() == [1.0, 1.0]
    every = runs_table(runs_dir, flow="leml", all_columns=True)
    assert {"seed", "dataset.name", "dataset.train", "model.lam", "baselines"} <= set(every)
    assert every["baselines"].tolist() == ['["br-ridge"]'] * 2
    with pytest.raises(InputError, match="no run has a column 'nope'"):
        runs_table(runs_dir, columns=["nope"])


def test_the_python_table_is_the_commands(runs_dir, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("SCARCE_RUNS", str(runs_dir))
    frame = runs_table(runs_dir, flow="leml")
    pd.testing.assert_frame_equal(scarce.runs("leml"), frame)
    pd.testing.assert_frame_equal(scarce.runs("leml", root=runs_dir), frame)
    assert main(["runs", "--flow", "leml", "--format", "csv"]) == 0
    printed = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    assert printed["run_id"].tolist() == ["leml-a", "leml-b"]
    assert printed["model.rank"].tolist() == [8, 25]
    out = tmp_path / "runs.parquet"
    assert main(["runs", "--flow", "leml", "--format", "parquet", "--output", str(out)]) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), frame)
    assert capsys.readouterr().out == f"2 run(s) written to {out}\n"
    assert main(["runs", "--format", "parquet"]) == 2  # Parquet goes to a file
    assert "give --output PATH" in capsys.readouterr().err
    assert main(["runs", "--flow", "leml", "--format", "md"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| run_id | flow | dataset |") and len(lines) == 4
    assert main(["runs", "--flow", "leml"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # aligned: each cell starts where its column's name does
    starts = [i for i, c in enumerate(lines[0]) if c != " " and (i == 0 or lines[0][i - 1] == " ")]
    row = {lines[0][a:b].strip(): lines[1][a:b].strip()
           for a, b in zip(starts, [*starts[1:], None], strict=True)}
    assert row["run_id"] == "leml-a" and row["started"] == "2026-01-01 10:00:00"
    assert row["tags"] == ""  # the other run's experiment tag
    assert (row["model.rank"], row["compute.row_blocks"], row["seconds"]) == ("8", "4", "30.0")
    assert (row["method"], row["precision@1"], row["precision@5"]) == (
        "leml-squared-k8", "0.0800", "0.0080")
    assert main(["runs", "--where", "model.rank=9"]) == 0
    assert capsys.readouterr().out.strip() == "no runs match"
    # the columns as given (blanks and a repeat ignored), after run_id
    assert main(["runs", "--flow", "leml", "--format", "csv", "--columns",
                 "model.rank, method,model.rank"]) == 0
    printed = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out))
    assert list(printed.columns) == ["run_id", "model.rank", "method"]
    assert printed["model.rank"].tolist() == [8, 25]


def test_flat_config_and_own_method_by_hand():
    assert flat_config({"a": 1, "b": {"c": [1, 2], "d": {"e": None}}, "f": {}}) == {
        "a": 1, "b.c": "[1, 2]", "b.d.e": None, "f": "{}"}
    assert own_method("leml", ["br-ridge", "leml-logistic-k5"]) == "leml-logistic-k5"
    assert own_method("apply-leml", ["br-ridge", "leml-squared-k5"]) == "leml-squared-k5"
    assert own_method("strip", ["ripper", "strip-labeled"]) == "strip-labeled"
    assert own_method("relations", ["entropy", "RLBaseline"]) == "entropy"
    assert own_method("strip", []) is None


def test_the_inputs_digest_depends_on_the_files_bytes_not_their_order(tmp_path):
    root = tmp_path / "runs"
    _write(root, "leml-a", _leml(8, inputs=INPUTS_A), "10:00:00")
    _write(root, "leml-b", _leml(8, inputs=list(reversed(INPUTS_A))), "10:01:00")
    _write(root, "leml-c", _leml(8, inputs=INPUTS_B), "10:02:00")
    digests = runs_table(root)["inputs"].tolist()
    assert digests == [_digest(INPUTS_A), _digest(INPUTS_A), _digest(INPUTS_B)]
    assert len(digests[0]) == 8 and int(digests[0], 16) >= 0


def test_a_leml_run_shows_p_at_3_between_p_at_1_and_p_at_5(tmp_path):
    """The LEML flow's headline (from a metrics table written by hand, in another order)
    puts P@1, P@3, P@5 and AUC of its method in the table, in that order."""
    metrics = pd.DataFrame({
        "dataset": "bibtex", "method": ["leml-squared-k8"] * 5 + ["br-ridge"] * 2,
        "metric": ["instance_auc", "precision@5", "precision@3", "ndcg@3", "precision@1",
                   "precision@1", "precision@3"],
        "value": [0.9, 0.3, 0.4, 0.45, 0.6, 0.55, 0.35]})
    root = tmp_path / "runs"
    _write(root, "leml-a", {"flow": "leml", "config": {"dataset": {"name": "bibtex"}},
                            "headline": headline(metrics)}, "10:00:00")
    frame = runs_table(root)
    assert list(frame.columns)[-5:] == ["method", "precision@1", "precision@3", "precision@5",
                                        "instance_auc"]
    row = frame.iloc[0]
    assert (row["method"], row["precision@1"], row["precision@3"], row["precision@5"],
            row["instance_auc"]) == ("leml-squared-k8", 0.6, 0.4, 0.3, 0.9)
