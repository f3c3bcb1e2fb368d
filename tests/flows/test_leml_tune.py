"""LEML tuned on the user's own data: held-out training rows score a grid of rank and lambda,
each setting from a fresh start while its held-out P@1 rises, the best is trained on every row.

The choice is checked against an independent recomputation: each setting refitted here for
1, 2, ... iterations on the rows the run held out of (read from the store), its P@1 by argmax
of the decision values, the patience rule, the best setting, then a model trained on every row
with it, against the run's factors.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scarce.algorithms.leml import LEML
from scarce.flows.cli import main
from scarce.flows.leml import MIN_TUNING_ROWS, tuning_grid
from scarce.tasks.store import Store
from scarce.tasks.store.encoding import read_checked_value
from tests.flows.helpers import manifest, runs

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "data" / "examples" / "leml"

CONFIG = """
seed: 2
dataset:
  name: tags
  format: table
  train: train.csv
  test: test.csv
  table:
    labels_column: tags
    label_separator: ","
    text_column: text
model:
  rank: 8
  lam: 1.0
  outer_iterations: 8
  n_iter_no_change: 2
tune:
  when: always
  rank: [4, 8]
  lam: [0.3, 3.0]
baselines: []
"""


def test_the_grid_tries_each_rank_once_at_most_the_space_allows():
    assert tuning_grid([50, 100, 200], [0.3, 1.0], 159) == [
        {"rank": 50, "lam": 0.3}, {"rank": 50, "lam": 1.0}, {"rank": 100, "lam": 0.3},
        {"rank": 100, "lam": 1.0}, {"rank": 159, "lam": 0.3}, {"rank": 159, "lam": 1.0}]
    assert tuning_grid([200, 300], [1.0], 20) == [{"rank": 20, "lam": 1.0}]


@pytest.fixture(scope="module")
def project(make_project, prefect_server):
    root = make_project("tune", {"leml.yaml": CONFIG})
    shutil.copy(EXAMPLES / "bibtex.train.csv", root / "train.csv")
    shutil.copy(EXAMPLES / "bibtex.test.csv", root / "test.csv")
    return root


@pytest.fixture
def here(project, monkeypatch):
    monkeypatch.chdir(project)
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    return project


def _entry(project, m, step, part):
    store = Store(project / "data" / "cache")
    ref = next(o["ref"] for o in m["outputs"] if o["step"] == step and o["ref"].endswith(part))
    return store.read(ref)


def test_the_tuned_choice_equals_a_recomputation_and_the_model_is_trained_on_every_row(here):
    assert main(["run", "leml"]) == 0
    m = manifest(here, runs(here)[-1])
    (decision,) = [d for d in m["notes"]["decisions"] if d["what"] == "tuned"]
    X_fit, Y_fit = (_entry(here, m, "leml-early-split", p) for p in ("-X_fit", "-Y_fit"))
    X_val, Y_val = (_entry(here, m, "leml-early-split", p) for p in ("-X_val", "-Y_val"))
    base = LEML(**m["config"]["model"], random_state=2)
    base.set_params(**base.resolved_params(), early_stopping=False)
    Yv = np.asarray(Y_val.todense())
    found = []
    for rank in (4, 8):
        for lam in (0.3, 3.0):
            scores = []
            for t in range(1, 9):
                fit = LEML(**{**base.get_params(), "rank": rank, "lam": lam,
                              "outer_iterations": t}).fit(X_fit, Y_fit)
                top = np.argmax(fit.decision_function(X_val), axis=1)
                scores.append(float(np.mean(Yv[np.arange(len(top)), top] > 0)))
                if t - 1 - int(np.argmax(scores)) >= 2:
                    break
            found.append(((rank, lam), int(np.argmax(scores)) + 1, max(scores)))
    (rank, lam), best_t, _ = max(found, key=lambda f: f[2])  # the first of equal scores
    assert decision["value"] == {"rank": rank, "lam": lam, "outer_iterations": best_t}
    table = _entry(here, m, "leml-tune", "-table")
    # the validation table is an output a person opens by name
    pd.testing.assert_frame_equal(pd.read_parquet(
        here / "data" / "runs" / m["run_id"] / "outputs" / "tuning.parquet"), table)
    np.testing.assert_allclose(table["score"], [f[2] for f in found], rtol=0, atol=1e-12)
    assert table["best_iteration"].tolist() == [f[1] for f in found]
    # trained on every row with the chosen values, for that many iterations
    # the training table's entries (the test table is loaded by the same step): their rows
    # are the held-out split's two parts
    store = Store(here / "data" / "cache")
    loaded = [o["ref"] for o in m["outputs"] if o["step"] == "leml-load-table"]
    n_train = X_fit.shape[0] + X_val.shape[0]
    (x_ref,) = [r for r in loaded if r.endswith("-X") and store.read(r).shape[0] == n_train]
    X, Y = store.read(x_ref), store.read(x_ref[:-2] + "-Y")
    want = LEML(**{**base.get_params(), "rank": rank, "lam": lam,
                   "outer_iterations": best_t}).fit(X, Y)
    W = read_checked_value(here / "data" / "runs" / m["run_id"] / "outputs" / "model"
                           / "W.parquet")
    np.testing.assert_allclose(W, want.W_, rtol=1e-4, atol=1e-5)


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err[-2000:]
    return lines[0]


@pytest.mark.parametrize(("sets", "words"), [
    (["tune.rank=[]"], "key 'tune.rank'"),
    (["tune.lam=[]"], "key 'tune.lam'"),
    (["tune.validation_fraction=0"], "key 'tune.validation_fraction'"),
    (["tune.validation_fraction=1"], "key 'tune.validation_fraction'"),
    (["tune.validation_fraction=0.01"], f"at least {MIN_TUNING_ROWS} rows"),
    (["tune.rank=[0]"], "key 'tune.rank'"),
    (["tune.lam=[-1]"], "key 'tune.lam'"),
])
def test_bad_tuning_settings_are_one_line_and_no_run(here, capsys, sets, words):
    before = runs(here)
    code = main(["run", "leml", *[a for s in sets for a in ("--set", s)]])
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert words in _one_error(err)
    assert runs(here) == before


def test_auto_does_not_tune_a_small_set_and_says_why(here):
    assert main(["run", "leml", "--set", "tune.when=auto"]) == 0
    m = manifest(here, runs(here)[-1])
    assert not [d for d in m["notes"].get("decisions", []) if d["what"] == "tuned"]
    assert m["notes"]["tuning"].startswith("not tuned: 120 held-out rows of 600")
