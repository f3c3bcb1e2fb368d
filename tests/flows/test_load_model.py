"""``scarce.load_model``: a finished run's model in Python, equal to ``scarce apply``.

A tiny LEML model is trained (the Bibtex sample of ``test_leml_flow.py``) and applied through
the command line; the loaded model must give the apply run's predictions bit for bit, and the
training run's own P@1 on its test file.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import scarce
from scarce.flows.cli import main
from scarce.tasks.errors import InputError
from scarce.tasks.readers.xmc import read_xmc
from tests.flows.helpers import first_run, manifest, run_in, runs
from tests.flows.test_leml_flow import BIBTEX, CONFIG, _head

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")


@pytest.fixture(scope="module")
def project(make_project, prefect_server):
    root = make_project("load-model", {"leml.yaml": CONFIG})
    _head(BIBTEX / "bibtex_xmlrepo_train.txt.gz", root / "train.txt", 300)
    _head(BIBTEX / "bibtex_xmlrepo_test.txt.gz", root / "test.txt", 60)
    run_in(root, "run", "leml")
    return root


def _trained(project) -> str:
    return first_run(project, "leml")


def test_predictions_equal_scarce_apply_bit_for_bit(project):
    run = _trained(project)
    assert main(["apply", run, "--input", "test.txt", "--top-k", "4"]) == 0
    applied = next(r for r in reversed(runs(project))
                   if manifest(project, r)["flow"] == "apply-leml")
    want = pd.read_parquet(project / "data" / "runs" / applied / "outputs"
                           / "predictions.parquet")
    model = scarce.load_model(run)
    got = model.predict_top_k(project / "test.txt", 4)
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True),
                                  check_exact=True)
    assert scarce.load_model("latest").run_id == run  # the newest run with a model
    assert scarce.load_model(project / "data" / "runs" / run).run_id == run


def test_a_feature_matrix_is_normalised_as_the_run_read_its_file(project):
    """Raw rows from the reader, given as a matrix, score as the file does (the model applies
    the run's row normalisation itself)."""
    model = scarce.load_model(_trained(project))
    X, _ = read_xmc(project / "test.txt", dtype=np.float32)
    from_file = model.decision_function(project / "test.txt")
    from_rows = model.decision_function(sp.csr_matrix(X))
    np.testing.assert_array_equal(from_rows, from_file)
    assert from_file.shape == (60, model.n_labels)


def test_score_is_the_training_runs_test_precision_at_1(project):
    run = _trained(project)
    metrics = pd.read_parquet(project / "data" / "runs" / run / "metrics.parquet")
    method = metrics["method"][metrics["method"].str.startswith("leml-")].iloc[0]
    want = metrics[(metrics["method"] == method) & (metrics["metric"] == "precision@1")]
    assert scarce.load_model(run).score(project / "test.txt") == pytest.approx(
        float(want["value"].iloc[0]), abs=1e-12)


def test_a_model_of_an_unknown_format_version_is_refused(project, tmp_path):
    run = _trained(project)
    model_json = project / "data" / "runs" / run / "outputs" / "model" / "model.json"
    original = model_json.read_text()
    try:
        model_json.write_text(json.dumps({**json.loads(original), "version": 99}))
        with pytest.raises(InputError, match="model format version 99"):
            scarce.load_model(run)
    finally:
        model_json.write_text(original)


@pytest.mark.parametrize("run", ["no-such-run", "latest:nobody"])
def test_no_such_run_is_an_input_error(project, run):
    with pytest.raises(InputError):
        scarce.load_model(run)
