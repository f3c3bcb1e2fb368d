"""``keep_columns`` of apply-leml: the columns of an input table named by the user are copied
into its predictions, on every line of their row, for every table format; a name a table
lacks is refused before anything is read into the store.

The model is the LEML table model of model format 1 committed in ``tests/data/models``
(copied into the project's runs folder); the new rows are the bundled Bibtex examples with an
id and a title added, written as CSV, Parquet and JSON Lines.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path

import pandas as pd
import pytest

from scarce.flows.apply_leml import ApplyLemlConfig
from scarce.flows.cli import main
from scarce.flows.config import validate_config
from scarce.tasks.errors import InputError
from tests.flows.helpers import made_runs, manifest

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")

REPO = Path(__file__).resolve().parents[2]
SAVED = REPO / "tests" / "data" / "models" / "leml-table-v1"
MODEL = "leml-table-v1"
WRITE = {"csv": lambda f, p: f.to_csv(p, index=False),
         "parquet": lambda f, p: f.to_parquet(p, index=False),
         "jsonl": lambda f, p: f.to_json(p, orient="records", lines=True)}


@pytest.fixture(scope="module")
def project(tmp_path_factory, prefect_server):
    root = tmp_path_factory.mktemp("keep-columns")
    shutil.copytree(SAVED, root / "data" / "runs" / MODEL)
    texts = pd.read_csv(REPO / "data" / "examples" / "leml" / "bibtex.new.csv")["text"]
    frame = pd.DataFrame({"id": [f"doc-{i:03d}" for i in range(len(texts))],
                          "title": [f"title {i}" for i in range(len(texts))],
                          "text": texts})
    for kind, write in WRITE.items():
        write(frame, root / f"new.{kind}")
    return root


def _apply(project: Path, *args: str) -> tuple[int, str, Path | None]:
    """``scarce apply`` in the project: the exit code, stderr and the new run's folder."""
    with made_runs(project) as new:
        err = io.StringIO()
        with pytest.MonkeyPatch.context() as env, contextlib.redirect_stderr(err), \
                contextlib.redirect_stdout(io.StringIO()):
            env.chdir(project)
            env.setenv("SCARCE_ROOT", str(project))
            env.delenv("SCARCE_STORE", raising=False)
            env.delenv("SCARCE_RUNS", raising=False)
            code = main(["apply", MODEL, *args])
    return code, err.getvalue(), (project / "data" / "runs" / new[0]) if new else None


@pytest.mark.parametrize("kind", sorted(WRITE))
def test_the_kept_columns_lead_every_line_of_their_row(project, kind):
    table = pd.read_csv(project / "new.csv", dtype=str)
    code, err, plain = _apply(project, "--input", f"new.{kind}")
    assert code == 0, err[-2000:]
    keep = (["--set", "keep_columns=[title, id]"] if kind == "csv" else
            ["--keep-column", "title", "--keep-column", "id"])  # the config key, the option
    code, err, kept = _apply(project, "--input", f"new.{kind}", *keep)
    assert code == 0, err[-2000:]
    want = pd.read_parquet(plain / "outputs" / "predictions.parquet")
    got = pd.read_parquet(kept / "outputs" / "predictions.parquet")
    assert list(got.columns) == ["title", "id", *want.columns]
    # the predictions unchanged; each line's id and title those of its row of the table
    pd.testing.assert_frame_equal(got[list(want.columns)], want, check_exact=True)
    assert got["id"].tolist() == table["id"].to_numpy()[want["row"]].tolist()
    assert got["title"].tolist() == table["title"].to_numpy()[want["row"]].tolist()
    assert len(got) == 5 * len(table)  # one line per row and rank, as without


@pytest.mark.parametrize("kind", sorted(WRITE))
def test_a_column_the_table_lacks_is_refused_before_the_work(project, kind):
    store_before = sorted(p.name for p in (project / "data" / "cache").rglob("*.parquet"))
    code, err, run = _apply(project, "--input", f"new.{kind}", "--set",
                            "keep_columns=[id, nope]")
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1, err[-2000:]
    assert f"new.{kind}: key 'keep_columns': no column 'nope' to keep" in lines[0]
    assert run is None
    assert sorted(p.name for p in (project / "data" / "cache").rglob("*.parquet")) \
        == store_before


def test_columns_are_kept_from_a_table_only(project):
    (project / "new.txt").write_text("1 1754 158\n0 1:1\n")
    code, err, run = _apply(project, "--input", "new.txt", "--set", "format=xmc",
                            "--set", "keep_columns=[id]")
    assert code == 2 and run is None
    assert "key 'keep_columns': columns are kept from a table" in err


@pytest.mark.parametrize("names, words", [
    (["id", "score"], "'score' is a column of the predictions"),
    (["id", "id"], "each column at most once"),
    ([""], "each column at most once, each a non-empty name"),
])
def test_a_kept_name_that_cannot_be_a_column_is_a_config_error(names, words):
    with pytest.raises(InputError, match=words) as exc:
        validate_config({"model_run": "latest", "input": "x.csv", "keep_columns": names},
                        ApplyLemlConfig, None)
    assert exc.value.key == "keep_columns"


def test_the_apply_run_records_its_kept_columns(project):
    code, err, run = _apply(project, "--input", "new.parquet", "--set", "keep_columns=[id]")
    assert code == 0, err[-2000:]
    assert manifest(project, run.name)["config"]["keep_columns"] == ["id"]
