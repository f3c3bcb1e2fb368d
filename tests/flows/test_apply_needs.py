"""What applying a model needs: an apply flow imports no more than its work uses.

Importing scikit-learn costs an apply command more than scoring a file does, so the LEML
steps import the estimators only where they fit (``tasks/leml.py``, ``tasks/leml_data.py``),
the ``leml-score`` step scores by the factors alone
(:class:`~scarce.algorithms.leml.predict.FactorModel`), and the ``apply-leml`` flow takes the
score step's parameters from ``model.json`` without building the estimator
(:func:`~scarce.tasks.leml.model_task_params`).  Checked here: those parameters equal the
estimator's own for every committed LEML model and every loss, dtype and intercept; the score
step's predictions equal the estimator's bit for bit; and, for every apply flow of the
registry, whether importing it imports scikit-learn, which only the flows of
:data:`NEEDS_SKLEARN` may (with the reason).  The whole apply run of a feature-row LEML model
in a fresh process is checked in ``tests/flows/test_apply_leml.py``
(``test_applying_a_feature_row_model_imports_no_scikit_learn``).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scarce.algorithms.leml import LEML
from scarce.algorithms.leml.params import PARAMS
from scarce.flows.apply_leml_config import MODEL_KEYS
from scarce.flows.registry import FLOWS
from scarce.tasks.leml import model_task_params, score
from scarce.tasks.leml_files import MODEL_FILES, read_factor
from tests.flows.test_lean_load import MODELS

#: The apply flows whose steps import scikit-learn, and why their work needs it.
NEEDS_SKLEARN = {
    # the pairs' contexts are vectorised by the model's stored vocabulary with scikit-learn's
    # vectorisers (algorithms/relations/contexts.py)
    "apply-relations": "vectorises the pairs' contexts (CountVectorizer / TfidfVectorizer)",
}
#: The others import none with their steps.  apply-leml still imports it at run time for a
#: model of a table's text, to vectorise the text (algorithms/leml/text.py imports the
#: vectoriser when called); a model of feature rows (XC, ARFF, Parquet, a table's feature
#: column) never (the whole run: test_apply_leml.py).  apply-strip applies the learned rules
#: as a table (algorithms/strip/rule_table.py), without the RIPPER learner.
LIGHT = ("apply-leml", "apply-strip")

APPLY = sorted(name for name, spec in FLOWS.items()
               if spec.kind == "apply" and spec.target.startswith("scarce.flows."))
#: The committed LEML models (model.json of a ``scarce-leml-model``).
LEML_MODELS = sorted(
    path for path in MODELS.glob("*/outputs/model/model.json")
    if json.loads(path.read_text()).get("format") == "scarce-leml-model")
ESTIMATOR_KEYS = ("rank", "loss", "dtype", "fit_intercept")


#: Python for a fresh interpreter: import module ``argv[1]``, then resolve every attribute the
#: module's source takes of a module of ``scarce.tasks`` it imports (``strip.apply_rules``:
#: the steps a flow runs, which a package of steps imports on first use); print whether
#: scikit-learn was imported.
IMPORTS = """
import ast, importlib, inspect, sys
module = importlib.import_module(sys.argv[1])
tree = ast.parse(inspect.getsource(module))
bound = {}
for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("scarce.tasks"):
        for alias in node.names:
            name = f"{node.module}.{alias.name}"
            if importlib.util.find_spec(name.rpartition(".")[0]) and name in sys.modules:
                bound[alias.asname or alias.name] = sys.modules[name]
for node in ast.walk(tree):
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \\
            and node.value.id in bound:
        getattr(bound[node.value.id], node.attr)
print("sklearn" in sys.modules)
"""


def _imports_sklearn(module: str) -> bool:
    done = subprocess.run([sys.executable, "-c", IMPORTS, module], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip() == "True"


def test_the_apply_flows_listed_are_the_registrys():
    assert APPLY == ["apply-leml", "apply-relations", "apply-strip"]
    assert sorted([*NEEDS_SKLEARN, *LIGHT]) == APPLY
    assert LEML_MODELS, "no committed LEML model"


@pytest.mark.slow  # starts a Python process per flow
@pytest.mark.parametrize("name", APPLY)
def test_an_apply_flow_and_its_steps_import_scikit_learn_only_when_listed(name):
    module = FLOWS[name].target.partition(":")[0]
    assert _imports_sklearn(module) == (name in NEEDS_SKLEARN)


@pytest.mark.slow  # starts a Python process
def test_the_leml_steps_import_no_scikit_learn():
    assert not _imports_sklearn("scarce.tasks.leml")


def _grid() -> list[dict]:
    return [dict(zip(ESTIMATOR_KEYS, values, strict=True)) for values in itertools.product(
        (1, 8), PARAMS["loss"].choices, PARAMS["dtype"].choices, (True, False))]


@pytest.mark.parametrize("given", [
    *({k: json.loads(p.read_text())[k] for k in ESTIMATOR_KEYS} for p in LEML_MODELS),
    *_grid()], ids=str)
def test_the_score_parameters_from_model_json_are_the_estimators(given):
    assert set(ESTIMATOR_KEYS) <= set(MODEL_KEYS)
    # the score step predicts: it reads what the estimator's predict methods read
    assert model_task_params(given, score) == LEML(**given).step_params("predict")


@pytest.mark.parametrize("model_json", LEML_MODELS, ids=lambda p: p.parts[-4])
def test_the_score_step_predicts_as_the_estimator_bit_for_bit(model_json, tmp_path):
    meta, folder = json.loads(model_json.read_text()), model_json.parent
    W, H = (read_factor(folder / MODEL_FILES[p], meta["shapes"][p]) for p in ("W", "H"))
    rng = np.random.default_rng(0)
    X = sp.random(40, meta["n_features"], density=0.05, format="csr", random_state=rng,
                  dtype=np.dtype(meta["dtype"]))
    Y = sp.csr_matrix((40, meta["n_labels"]), dtype=np.float32)
    params = model_task_params({k: meta[k] for k in ESTIMATOR_KEYS}, score)
    out = score.fn(X=X, Y=Y, path=tmp_path / "new.txt", W=folder / MODEL_FILES["W"],
                   H=folder / MODEL_FILES["H"], labels=folder / MODEL_FILES["labels"],
                   format="xmc", shapes=meta["shapes"], params=params, top_k=5,
                   batch_size=16, method="m", source="new.txt")
    estimator = LEML(**{k: meta[k] for k in ESTIMATOR_KEYS}).set_factors(W, H)
    labels, scores = estimator.predict_top_k(X, 5, 16, return_scores=True)
    got = out["predictions"]
    np.testing.assert_array_equal(got["label"].to_numpy(), labels.ravel())
    assert got["score"].to_numpy().tobytes() == scores.ravel().astype(np.float64).tobytes()
    pd.testing.assert_series_equal(got["row"], pd.Series(np.repeat(np.arange(40), 5),
                                                         name="row"), check_dtype=False)
