"""LEML on data as researchers keep it: a CSV of text and tags, a table of sparse features.

- A table of the Extreme Classification rows (their features as ``index:value`` text, their
  labels by name, a label list fixing the order) gives the XC route's metrics and scores to
  the last bit, on the bundled Bibtex and on a sample of Delicious.
- A CSV of text and tags (the shipped example): the vocabulary and idf are scikit-learn's
  fitted on the training table, labels are named in the model and the predictions, new rows
  without tags are applied, and ``scarce.load_model`` gives ``scarce apply``'s predictions.
"""

from __future__ import annotations

import gzip
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

import scarce
from scarce.flows.cli import main
from tests.flows.helpers import made_runs

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")

REPO = Path(__file__).resolve().parents[2]
BIBTEX = REPO / "data" / "xmc" / "bibtex"
DELICIOUS = REPO / "tests" / "data" / "delicious"
EXAMPLES = REPO / "data" / "examples" / "leml"

MODEL = """
seed: 3
model:
  rank: 8
  lam: 4.0
  outer_iterations: 3
tune:
  when: never
"""


def _xc_lines(src: Path, rows: int | None = None) -> list[str]:
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt") as fh:
        lines = fh.read().splitlines()
    if rows is None:
        return lines
    _, d, labels = lines[0].split()
    return [f"{rows} {d} {labels}", *lines[1: rows + 1]]


def _as_table(lines: list[str], names: list[str], path: Path) -> None:
    """The XC rows as a table: ``features`` the row's ``index:value`` text, ``tags`` its
    label names joined by ``|`` (names hold commas)."""
    features, tags = [], []
    for line in lines[1:]:
        head, _, rest = line.partition(" ") if not line.startswith(" ") else ("", "", line)
        if ":" in head:  # a row without labels starts with a feature
            head, rest = "", line
        tags.append("|".join(names[int(i)] for i in head.split(",") if i))
        features.append(rest.strip())
    frame = pd.DataFrame({"id": range(len(tags)), "tags": tags, "features": features})
    if path.suffix == ".parquet":
        frame["tags"] = frame["tags"].str.split("|").map(lambda v: [t for t in v if t])
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)


@pytest.fixture(scope="module")
def project(make_project):
    root = make_project("leml-table", {"text.yaml": (
        "name: text\ndataset:\n  name: text\n  format: table\n  train: text.train.csv\n"
        "  test: text.test.csv\n  table:\n    labels_column: tags\n" + MODEL)})
    bib_names = re.findall(r'<label name="([^"]*)"', (BIBTEX / "bibtex.xml").read_text())
    del_names = (DELICIOUS / "labels.txt").read_text().splitlines()
    sets = {
        "bibtex": (BIBTEX / "bibtex_xmlrepo_train.txt.gz", BIBTEX / "bibtex_xmlrepo_test.txt.gz",
                   300, 60, bib_names, ".csv"),
        "delicious": (DELICIOUS / "delicious.train.txt", DELICIOUS / "delicious.test.txt",
                      None, None, del_names, ".parquet"),
    }
    for name, (train, test, n_train, n_test, names, suffix) in sets.items():
        d = int(_xc_lines(train)[0].split()[1])
        for split, src, rows in (("train", train, n_train), ("test", test, n_test)):
            lines = _xc_lines(src, rows)
            (root / f"{name}.{split}.txt").write_text("\n".join(lines) + "\n")
            _as_table(lines, names, root / f"{name}.{split}{suffix}")
        (root / f"{name}.labels.txt").write_text("\n".join(names) + "\n")
        (root / "configs" / f"{name}-xc.yaml").write_text(
            f"name: {name}\ndataset:\n  name: {name}\n  train: {name}.train.txt\n"
            f"  test: {name}.test.txt\n  normalize: l2\n" + MODEL)
        (root / "configs" / f"{name}-table.yaml").write_text(
            f"name: {name}\ndataset:\n  name: {name}\n  format: table\n"
            f"  train: {name}.train{suffix}\n  test: {name}.test{suffix}\n  normalize: l2\n"
            f"  table:\n    labels_column: tags\n    label_separator: '|'\n"
            f"    features_column: features\n    n_features: {d}\n"
            f"    label_list: {name}.labels.txt\n" + MODEL)
    for split in ("train", "test", "new"):
        shutil.copy(EXAMPLES / f"bibtex.{split}.csv", root / f"text.{split}.csv")
    return root


def _made_by(project, *argv: str) -> Path:
    """The folder of the one run ``scarce ARGV`` makes (run ids sort by their name, so the
    newest is not the last when names differ)."""
    with made_runs(project) as made:
        assert main(list(argv)) == 0
    (run,) = made
    return project / "data" / "runs" / run


@pytest.mark.parametrize("name", ["bibtex", "delicious"])
def test_a_table_of_the_xc_rows_gives_the_xc_metrics_to_the_last_digit(project, name):
    out = {}
    for route in ("xc", "table"):
        out[route] = _made_by(project, "run", "leml", "--config", f"configs/{name}-{route}.yaml")
    metrics = {r: pd.read_parquet(d / "metrics.parquet") for r, d in out.items()}
    pd.testing.assert_frame_equal(metrics["xc"], metrics["table"], check_exact=True)
    pred = {r: pd.read_parquet(d / "outputs" / "predictions.parquet") for r, d in out.items()}
    same = ["row", "rank", "label", "score"]
    pd.testing.assert_frame_equal(pred["xc"][same], pred["table"][same], check_exact=True)
    names = (project / f"{name}.labels.txt").read_text().splitlines()
    assert pred["table"]["label_name"].tolist() == [names[i] for i in pred["table"]["label"]]
    assert pred["xc"]["label_name"].isna().all()  # the XC format names no label


def test_a_csv_of_text_and_tags_trains_applies_and_loads(project):
    run = _made_by(project, "run", "leml", "--config", "configs/text.yaml")
    train = pd.read_csv(project / "text.train.csv")
    model = run / "outputs" / "model"
    # the vocabulary and idf: scikit-learn's vectoriser fitted on the training table only
    peer = TfidfVectorizer().fit(train["text"])
    features = pd.read_parquet(model / "features.parquet")
    assert features["name"].tolist() == sorted(peer.vocabulary_, key=peer.vocabulary_.get)
    np.testing.assert_array_equal(features["idf"].to_numpy(), peer.idf_)
    tags = sorted({t for cell in train["tags"] for t in cell.split(",")})
    assert pd.read_parquet(model / "labels.parquet")["name"].tolist() == tags
    predictions = pd.read_parquet(run / "outputs" / "predictions.parquet")
    assert predictions["label_name"].tolist() == [tags[i] for i in predictions["label"]]

    new = project / "text.new.csv"
    assert "tags" not in pd.read_csv(new).columns  # rows to label: text only
    applied = _made_by(project, "apply", run.name, "--input", "text.new.csv",
                       "--output", "labelled.csv")
    want = pd.read_parquet(applied / "outputs" / "predictions.parquet")
    assert len(want) == 5 * len(pd.read_csv(new))
    assert set(pd.read_parquet(applied / "metrics.parquet")["metric"]) == {"rows"}
    assert (project / "labelled.csv").read_text() == want.to_csv(index=False)
    loaded = scarce.load_model(run.name)
    assert loaded.label_names == tags
    for given in (new, pd.read_csv(new), pd.read_csv(new)["text"].tolist()):
        pd.testing.assert_frame_equal(loaded.predict_top_k(given, 5), want, check_exact=True)
    # scored where labels are given: P@1 equals the training run's on its test table
    p1 = pd.read_parquet(run / "metrics.parquet").set_index("metric")["value"]["precision@1"]
    assert loaded.score(project / "text.test.csv") == pytest.approx(p1, abs=1e-12)
    test = pd.read_csv(project / "text.test.csv")
    assert loaded.score(test["text"].tolist(), test["tags"].str.split(",")) == \
        pytest.approx(p1, abs=1e-12)


def test_a_table_without_its_label_column_is_refused_for_training(project, capsys):
    code = main(["run", "leml", "--config", "configs/text.yaml",
                 "--set", "dataset.table.labels_column=topics"])
    err = capsys.readouterr().err
    assert code == 2
    assert "text.train.csv" in err and "no column 'topics'" in err and "'tags'" in err
