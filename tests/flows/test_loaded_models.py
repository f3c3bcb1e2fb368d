"""What ``scarce.load_model`` gives for a run of every flow that has a model in Python
(``flows.models.LOADERS``): its estimator is the run's, its methods refuse bad rows in
one line naming the argument and the row, and in a fresh process it loads and predicts
without Prefect, the flows or what its predictions do not need (``tests/flows/test_lean_load.py``
says what is forbidden).

One small training run per flow (LEML on 300 Bibtex rows with settings away from the
defaults, relation discovery on 60 SemEval pairs, StRip on two GUM documents) in one
project.  The estimator a loaded model exposes must report the parameters the run's
manifest config gives (built here from the config by the flow's own rules: LEML's model
section and seed, RelationsConfig's estimator, StRip's variant, loss ratio and learner
settings), and a ``sklearn.base.clone`` of it, fitted on the run's training data, must
learn what the run learned.  Then every public method of each loaded model whose first
argument is rows (``X``, ``pairs``, ``documents``) is given no rows, None, a wrong type and
a list with one bad item.  In a new interpreter, each model's predictions equal those of
this one, which has imported everything (for LEML: those of its estimator, on the rows the
``leml-load`` step reads).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import yaml
from sklearn.base import clone
from sklearn.pipeline import make_pipeline

import scarce
from scarce.algorithms.leml import LEML
from scarce.algorithms.relations.context_features import ContextFeatures
from scarce.algorithms.strip.ripper import StRip
from scarce.flows.leml import LemlConfig
from scarce.flows.models import LOADERS, model_class
from scarce.flows.relations import RelationsConfig
from scarce.flows.strip import StripConfig
from scarce.tasks import strip
from scarce.tasks.errors import InputError
from scarce.tasks.readers.semeval import read_semeval
from scarce.tasks.readers.xmc import read_xmc
from tests.flows.helpers import first_run, manifest, run_in, strip_project
from tests.flows.test_lean_load import forbidden_in, loaded_in_a_fresh_process, not_imported
from tests.flows.test_leml_flow import BIBTEX, _head
from tests.flows.test_model_relations import CONFIG as RELATIONS
from tests.flows.test_model_relations import SEMEVAL, _pairs

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")

GUM = Path(__file__).resolve().parents[2] / "data" / "coref" / "gum"
TRAIN_DOCS, TEST_DOC = ["GUM_news_stampede", "GUM_news_worship"], "GUM_news_crane"

# Settings away from the estimator's defaults, so that a model reporting the defaults fails.
LEML_CONFIG = """
seed: 5
dataset:
  name: bibtex-300
  train: train.txt
  test: test.txt
model:
  rank: 6
  lam: 3.0
  outer_iterations: 2
  cg_max_iter: 4
  cg_tol: 0.01
  cg_preconditioner: diagonal
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory, prefect_server):
    """A project with one finished run of each flow that has a model in Python."""
    root = strip_project(tmp_path_factory.mktemp("loaded-models"), GUM, TRAIN_DOCS, TEST_DOC)
    _head(BIBTEX / "bibtex_xmlrepo_train.txt.gz", root / "train.txt", 300)
    _head(BIBTEX / "bibtex_xmlrepo_test.txt.gz", root / "test.txt", 60)
    (root / "configs" / "leml.yaml").write_text(LEML_CONFIG)
    train = (SEMEVAL / "TRAIN_FILE.TXT").read_text(encoding="utf-8-sig").splitlines()
    (root / "pairs.txt").write_text("\n".join(train[: 4 * 60]) + "\n")
    test = (SEMEVAL / "TEST_FILE_FULL.TXT").read_text(encoding="utf-8-sig").splitlines()
    (root / "new-pairs.txt").write_text("\n".join(test[: 4 * 12]) + "\n")
    (root / "configs" / "relations.yaml").write_text(yaml.safe_dump(
        {**RELATIONS, "data": ["pairs.txt"]}))
    for flow in ("leml", "relations", "strip"):
        run_in(root, "run", flow)
    return root


FLOWS = sorted(LOADERS)


def test_every_flow_with_a_model_in_python_is_tested():
    assert FLOWS == ["leml", "relations", "strip"]


def _from_config(flow: str, config: dict, model) -> dict:
    """The parameters the flow trains its estimator with, from its recorded config."""
    if flow == "leml":
        c = LemlConfig.model_validate(config)
        # "auto" as it resolved: a clone trains what the run trained
        estimator = c.model.estimator(random_state=c.seed)
        return estimator.set_params(**estimator.resolved_params()).get_params()
    if flow == "relations":
        return RelationsConfig.model_validate(config).estimator().get_params()
    c = StripConfig.model_validate(config)
    assert not c.dev_splits  # one loss ratio: the config's
    return StRip.from_variant(model.variant, loss_ratio=c.loss_ratio, k_optimize=c.k_optimize,
                              dl_surplus=c.dl_surplus, max_thresholds=c.max_thresholds,
                              random_state=c.seed).get_params()


@pytest.mark.parametrize("flow", FLOWS)
def test_the_loaded_estimator_reports_the_runs_own_parameters(project, flow):
    run = first_run(project, flow)
    model = scarce.load_model(run)
    want = _from_config(flow, manifest(project, run)["config"], model)
    assert model.estimator_.get_params() == want
    assert clone(model.estimator_).get_params() == want
    defaults = type(model.estimator_)().get_params()
    if flow != "strip":  # the run's settings are not all the defaults (StRip: its variant's)
        assert want != defaults


def test_a_clone_of_the_leml_estimator_trains_the_runs_factors(project):
    model = scarce.load_model(first_run(project, "leml"))
    X, Y = read_xmc(project / "train.txt", dtype=np.float32)
    again = clone(model.estimator_).fit(X, Y)
    np.testing.assert_allclose(again.W_, model.estimator_.W_, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(again.H_, model.estimator_.H_, rtol=1e-4, atol=1e-5)
    assert not np.allclose(again.W_, LEML(rank=6, random_state=5).fit(X, Y).W_, atol=1e-3)


def test_a_clone_of_the_relations_estimator_finds_the_runs_clusters(project):
    model = scarce.load_model(first_run(project, "relations"))
    train = _pairs(read_semeval(project / "pairs.txt"), labels=False)
    new = _pairs(read_semeval(project / "new-pairs.txt"), labels=False)
    pipe = make_pipeline(ContextFeatures(), clone(model.estimator_)).fit(train)
    fitted = pipe[-1]
    assert fitted.n_clusters_ == model.estimator_.n_clusters_ == model.n_clusters
    np.testing.assert_array_equal(fitted.selected_features_, model.estimator_.selected_features_)
    np.testing.assert_allclose(fitted.cluster_centers_, model.estimator_.cluster_centers_,
                               rtol=1e-12, atol=1e-12)
    # the loaded estimator predicts new pairs' context features as the model assigns them
    clusters = model.assign(new)["cluster"].to_numpy()
    np.testing.assert_array_equal(model.estimator_.predict(pipe[0].transform(new)), clusters)
    np.testing.assert_array_equal(pipe.predict(new), clusters)


def test_a_clone_of_the_strip_estimator_learns_the_runs_rules(project):
    model = scarce.load_model(first_run(project, "strip"))
    tables = [strip.preprocess.fn(path=GUM / f"{d}.conllu.gz", **model.preprocess_)["pairs"]
              for d in TRAIN_DOCS]
    pairs = pd.concat(tables, ignore_index=True)
    again = clone(model.estimator_).fit(strip.features(pairs), pairs["label"].to_numpy(),
                                        *strip.pair_ends(pairs))
    pd.testing.assert_frame_equal(again.rules_.reset_index(drop=True),
                                  model.rules_.reset_index(drop=True), check_dtype=False)
    assert len(model.rules_)


# -- bad rows ----------------------------------------------------------------------------
#: The names of the arguments that hold rows, first after ``self``.
ROW_ARGUMENTS = ("X", "pairs", "documents")


def _row_methods(cls) -> list[str]:
    """The public methods of a loaded model whose first argument is rows."""
    out = []
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        params = list(inspect.signature(fn).parameters)
        if not name.startswith("_") and len(params) > 1 and params[1] in ROW_ARGUMENTS:
            out.append(name)
    return out


METHODS = [(f, m) for f in FLOWS for m in _row_methods(model_class(f))]


def test_the_row_methods_found_are_those_documented():
    assert METHODS == [
        ("leml", "decision_function"), ("leml", "predict_proba"), ("leml", "predict_top_k"),
        ("leml", "score"), ("relations", "assign"), ("relations", "mentions"),
        ("relations", "predict"), ("strip", "evaluate"), ("strip", "predict")]


def _good(flow: str, project: Path):
    """One good row of each flow's input."""
    if flow == "leml":
        return [0.0] * 1836  # Bibtex's features
    if flow == "relations":
        return {"tokens": ["the", "cat", "sat", "on", "mats"], "head": [1, 2], "tail": [4, 5]}
    return str(GUM / f"{TEST_DOC}.conllu.gz")


#: (what is given, what the message starts with) with ``{a}`` the argument and ``{good}``
#: a good row.
BAD = [
    ("none", "{a} is None"),
    ("empty", "{a} is empty"),
    ("int", "{a} is an int"),
    ("bad second item None", "{a}[1] is None"),
    ("bad second item int", "{a}[1] is an int"),
]


def _given(case: str, good) -> object:
    return {"none": None, "empty": [], "int": 7, "bad second item None": [good, None],
            "bad second item int": [good, 7]}[case]


@pytest.mark.parametrize("flow, method", METHODS, ids=[f"{f}.{m}" for f, m in METHODS])
@pytest.mark.parametrize("case, message", BAD, ids=[b[0] for b in BAD])
def test_bad_rows_are_one_line_naming_the_argument_and_the_row(project, flow, method, case,
                                                              message):
    model = scarce.load_model(first_run(project, flow))
    arg = list(inspect.signature(getattr(type(model), method)).parameters)[1]
    with pytest.raises(InputError) as exc:
        getattr(model, method)(_given(case, _good(flow, project)))
    text = str(exc.value)
    assert text.startswith(message.format(a=arg)), text
    assert "\n" not in text


def test_the_good_rows_of_the_bad_cases_are_accepted(project):
    """The good item each bad case starts from is itself accepted (so the error names the
    bad item, not the good one)."""
    for flow in FLOWS:
        model = scarce.load_model(first_run(project, flow))
        good = _good(flow, project)
        if flow == "leml":
            assert model.predict_top_k([good], 3)["row"].tolist() == [0, 0, 0]
        elif flow == "relations":
            assert len(model.assign([good])) == 1
        else:
            assert len(model.predict([good])) > 0


@pytest.mark.parametrize("X, message", [
    ([[1.0, float("nan")]], "X[0] is not a row of finite numbers"),
    (sp.csr_matrix(np.array([[0.0, 1.0], [np.inf, 0.0]])), "X[1] holds a value that is not"),
    ([[0.0] * 3, [0.0] * 2], "X[1] has 2 values but X[0] has 3"),
    (pd.DataFrame({"text": []}), "X has no rows"),
    ("", "X is an empty path"),
    ({"a": 1}, "X is a dict"),
])
def test_bad_feature_rows_of_leml_are_named(project, X, message):
    model = scarce.load_model(first_run(project, "leml"))
    with pytest.raises(InputError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        model.decision_function(X)


@pytest.mark.parametrize("Y, message", [
    ([["a"], None], "Y[1] is None; expected a list of label names"),
    ([["a"], "b"], "Y[1] is a str"),
    ([["a"], [3]], "Y[1][0] is an int"),
    ([["a"]], "Y has 1 rows but X has 2"),
    (5, "Y is an int"),
])
def test_bad_labels_of_leml_score_are_named(project, Y, message):
    model = scarce.load_model(first_run(project, "leml"))
    with pytest.raises(InputError, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        model.score([[0.0] * 1836] * 2, Y)


@pytest.mark.parametrize("k, name", [(0, "k"), ("5", "k"), (True, "k")])
def test_a_bad_k_is_named(project, k, name):
    model = scarce.load_model(first_run(project, "leml"))
    with pytest.raises(InputError, match=f"^{name} must be a positive integer"):
        model.predict_top_k([[0.0] * 1836], k)


# -- a fresh process -----------------------------------------------------------------------
def _estimator_predictions(model, path: Path) -> pd.DataFrame:
    """LEML's predictions of a file by the run's estimator, on the rows the ``leml-load``
    step reads: the path through the flows' own steps and the estimator's predict_top_k."""
    from scarce.algorithms.leml.predict import BATCH_SIZE, predictions_table
    from scarce.tasks.leml import load
    from scarce.tasks.leml_files import in_feature_space, named_predictions

    m = model.meta_
    read = load.fn(path=path, format="xmc", dtype=m["dtype"], n_labels=None,
                   normalize=m["normalize"])
    rows = in_feature_space(read["X"], model.estimator_.n_features_in_, path, "xmc")
    return named_predictions(predictions_table(model.estimator_, rows, 5, BATCH_SIZE),
                             model.labels_)


@pytest.mark.parametrize("flow", FLOWS)
def test_a_fresh_process_loads_and_predicts_without_what_it_does_not_need(project, flow,
                                                                           tmp_path):
    run = project / "data" / "runs" / first_run(project, flow)
    model = scarce.load_model(run)
    out = {}
    if flow == "leml":
        X, _ = read_xmc(project / "test.txt", dtype=np.float32)  # raw rows, as a matrix
        sp.save_npz(tmp_path / "X.npz", sp.csr_matrix(X))
        body = f"""
            import scipy.sparse as sp
            model = scarce.load_model({str(run)!r})
            model.predict_top_k({str(project / "test.txt")!r}, 5).to_parquet(
                {str(tmp_path / "file.parquet")!r})
            model.predict_top_k(sp.load_npz({str(tmp_path / "X.npz")!r}), 5).to_parquet(
                {str(tmp_path / "matrix.parquet")!r})
            """
        want = _estimator_predictions(model, project / "test.txt")
        pd.testing.assert_frame_equal(model.predict_top_k(project / "test.txt", 5), want,
                                      check_exact=True)
        out = {"file": want, "matrix": want}
    elif flow == "relations":
        body = f"""
            model = scarce.load_model({str(run)!r})
            model.assign({str(project / "new-pairs.txt")!r}).to_parquet(
                {str(tmp_path / "assign.parquet")!r})
            """
        out = {"assign": model.assign(project / "new-pairs.txt")}
    else:
        doc = GUM / f"{TEST_DOC}.conllu.gz"
        body = f"""
            model = scarce.load_model({str(run)!r})
            model.predict({str(doc)!r}, output={str(tmp_path / "chains.conllu")!r}).to_parquet(
                {str(tmp_path / "predict.parquet")!r})
            """
        out = {"predict": model.predict(doc)}
    modules = loaded_in_a_fresh_process(body, project)
    assert forbidden_in(modules, not_imported(flow)) == []
    assert f"scarce.flows.model_{flow}" in modules  # (the check saw the load)
    for name, want in out.items():  # both through Parquet, which the child wrote
        want.to_parquet(tmp_path / f"{name}-here.parquet")
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / f"{name}.parquet"),
                                      pd.read_parquet(tmp_path / f"{name}-here.parquet"),
                                      check_exact=True)


def test_bench_load_times_the_runs_model_in_fresh_processes_beside_its_peers(project, capsys):
    import argparse

    from scarce.bench import load as bench_load

    run = first_run(project, "leml")
    table = bench_load.run(argparse.Namespace(run_id=run, rows=20, repeats=1))
    assert table["command"].tolist() == [
        "python", "numpy + scipy.sparse", "+ pandas + pyarrow.parquet", "bare factors",
        "load_model + predict_top_k", "import sklearn.base", "import prefect"]
    by = table.set_index("command")
    assert by.loc["numpy + scipy.sparse", ["ratio_to_peer", "cpu_ratio_to_peer"]].tolist() == [
        1.0, 1.0]
    # what each child had imported when it ended: the model's path none of the heavy packages
    assert by["heavy_imports"].tolist() == ["none", "none", "none", "none", "none", "sklearn",
                                            "prefect, pydantic"]
    assert (table["min_seconds"] <= table["median_seconds"]).all()
    assert (table[["median_seconds", "median_cpu_seconds"]] > 0).all(axis=None)
    assert "RUN" in by.loc["load_model + predict_top_k", "code"]  # paths left out of the table
    assert f"`scarce bench load {run} --rows 20 --repeats 1`" in capsys.readouterr().out
