"""A run's command in a fresh store gives the run's outputs, for every reader and format the
LEML flow takes, however many runs the store has cached before it.

One store holds, in turn, a run of every format (Extreme Classification text plain and
gzipped, Mulan ARFF, a Parquet pair, tables as CSV, TSV, gzipped CSV, Parquet and JSON Lines),
among them files that are byte-identical to an earlier run's under a name read otherwise: a
tab-separated file named ``.csv`` (the reported case: it has no column ``text``), a gzipped
file named ``.txt``.  Each command is then run again in a store of its own: it must end as it
did (the same exit code) with the same metrics and predictions.
"""

from __future__ import annotations

import gzip
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scarce.tasks.readers.xmc import read_xmc
from scarce.tasks.store import Store
from tests.flows.helpers import again_in_a_fresh_store, every_command_in_one_store

pytestmark = pytest.mark.usefixtures("prefect_server")

REPO = Path(__file__).resolve().parents[2]
BIBTEX = REPO / "data" / "xmc" / "bibtex"
EXAMPLES = REPO / "data" / "examples" / "leml"

BASE = """
seed: 1
name: keys
dataset:
  name: keys
  train: train.txt
  test: test.txt
model:
  rank: 3
  lam: 2.0
  outer_iterations: 1
  cg_max_iter: 4
baselines: []
"""
TEXT_TABLE = ["dataset.format=table", "dataset.table.labels_column=tags"]


def _xc_head(src: Path, rows: int) -> str:
    with gzip.open(src, "rt") as fh:
        lines = fh.read().splitlines()
    _, d, labels = lines[0].split()
    return "\n".join([f"{rows} {d} {labels}", *lines[1:rows + 1]]) + "\n"


def _arff(path: Path, X: sp.csr_matrix, Y: sp.csr_matrix) -> None:
    """A sparse Mulan ARFF file of ``X`` and ``Y`` (the labels the last attributes)."""
    d = X.shape[1]
    lines = ["@relation keys"]
    lines += [f"@attribute f{j} numeric" for j in range(d)]
    lines += [f"@attribute l{j} {{0,1}}" for j in range(Y.shape[1])]
    lines.append("@data")
    for i in range(X.shape[0]):
        x, y = X.getrow(i), Y.getrow(i)
        cells = [f"{j} {v:g}" for j, v in zip(x.indices, x.data, strict=True)]
        cells += [f"{d + j} 1" for j in sorted(y.indices)]
        lines.append("{" + ", ".join(cells) + "}")
    path.write_text("\n".join(lines) + "\n")


def _pair(root: Path, name: str, X, Y) -> None:
    store = Store(root / "_pairs")
    for part, value in (("X", X), ("Y", sp.csr_matrix(Y, dtype=np.float32))):
        shutil.copy(store.path(store.write(f"pair/{name}-{part}", value)),
                    root / f"{name}.{part}.parquet")


@pytest.fixture(scope="module")
def project(make_project):
    root = make_project("keys", {"leml.yaml": BASE})
    for split, src, rows in (("train", "bibtex_xmlrepo_train.txt.gz", 60),
                             ("test", "bibtex_xmlrepo_test.txt.gz", 20)):
        text = _xc_head(BIBTEX / src, rows)
        (root / f"{split}.txt").write_text(text)
        (root / f"{split}.txt.gz").write_bytes(gzip.compress(text.encode(), mtime=0))
        X, Y = read_xmc(root / f"{split}.txt")
        _arff(root / f"{split}.arff", X, Y)
        _pair(root, split, X, Y)
        table = pd.read_csv(EXAMPLES / f"bibtex.{split}.csv").head(rows)
        table.to_csv(root / f"{split}.csv", index=False)
        table.to_csv(root / f"{split}.tsv", sep="\t", index=False)
        table.to_parquet(root / f"{split}.parquet")
        table.assign(tags=table["tags"].str.split(",")).to_json(
            root / f"{split}.jsonl", orient="records", lines=True)
        (root / f"{split}.csv.gz").write_bytes(
            gzip.compress((root / f"{split}.csv").read_bytes(), mtime=0))
    # byte-identical files under names their readers read otherwise
    shutil.copy(root / "train.tsv", root / "train_tabs.csv")
    shutil.copy(root / "train.txt.gz", root / "train_gz.txt")
    return root


def _settings(train: str, test: str, *extra: str) -> list[str]:
    return [f"dataset.train={train}", f"dataset.test={test}", *extra]


#: Every format, in the order the shared store sees them; each a command's --set values and
#: whether it reads.
COMMANDS = [
    ("xmc", _settings("train.txt", "test.txt"), True),
    ("xmc-gz", _settings("train.txt.gz", "test.txt.gz"), True),
    ("gz-named-txt", _settings("train_gz.txt", "test.txt.gz"), False),
    ("arff", _settings("train.arff", "test.arff", "dataset.format=arff",
                       "dataset.n_labels=159"), True),
    ("parquet-pair", _settings("train.X.parquet", "test.X.parquet", "dataset.format=parquet"),
     True),
    ("table-tsv", _settings("train.tsv", "test.tsv", *TEXT_TABLE), True),
    ("tsv-named-csv", _settings("train_tabs.csv", "test.tsv", *TEXT_TABLE), False),
    ("table-csv", _settings("train.csv", "test.csv", *TEXT_TABLE), True),
    ("table-csv-gz", _settings("train.csv.gz", "test.csv.gz", *TEXT_TABLE), True),
    ("table-parquet", _settings("train.parquet", "test.parquet", *TEXT_TABLE), True),
    ("table-jsonl", _settings("train.jsonl", "test.jsonl", *TEXT_TABLE), True),
]


@pytest.fixture(scope="module")
def shared(project):
    """Every command of :data:`COMMANDS` run in turn in one store: name -> (exit code, run
    folder, error output)."""
    return every_command_in_one_store(project, "leml", COMMANDS)


def test_a_tab_separated_file_named_csv_fails_after_the_tsv_was_read(shared):
    code, folder, _ = shared["tsv-named-csv"]
    assert code == 2 and folder is None


@pytest.mark.parametrize("name,settings,reads", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_runs_command_in_a_fresh_store_gives_its_outputs(project, shared, name, settings,
                                                          reads, tmp_path, capsys):
    folder, fresh, err = again_in_a_fresh_store(project, "leml", shared, name, settings, reads,
                                                tmp_path / "fresh-store", capsys)
    if not reads:
        if name == "tsv-named-csv":
            assert re.search(r"no column 'text'", err), err
        return
    for output in ("metrics.parquet", "outputs/predictions.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(fresh / output),
                                      pd.read_parquet(folder / output), check_exact=True)
