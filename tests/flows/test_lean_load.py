"""A model loaded into Python imports neither Prefect nor the flows, nor what its own
predictions do not need: in a fresh process, ``scarce.load_model`` and the model's predictions
load only the model's own code and the packages it reads and predicts with.

What a loaded model may import of ``scarce.flows`` is listed in :data:`ALLOWED_FLOWS`, each
with its reason; every other module of ``scarce.flows`` (found from the files, so that a new
one is covered) is a flow, the command line or the machinery of runs, and is forbidden, as are
the packages of :data:`FORBIDDEN`.  Beyond those, :data:`NOT_NEEDED` says, for every training
flow of the registry (a test checks that none is missing), which heavy packages and modules its
model's load and predictions leave out, each with its reason: what the model needs is numpy,
SciPy's sparse matrices, pyarrow to read its Parquet files, and pandas, since every model's
results are DataFrames; a flow's own needs beside those are said there (relations:
scikit-learn's vectoriser and estimator base; StRip: pydantic, which checks its model.json
as a config).  The runs of
every flow are made and checked in ``tests/flows/test_loaded_models.py``
(:func:`loaded_in_a_fresh_process`); here, the model of every such flow committed in
``tests/data/models`` (:data:`SAVED_MODELS`), which needs no run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from scarce.flows.registry import FLOWS
from scarce.tasks.code_digest import PROJECT_ROOT

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "data" / "models"
#: The committed model of each training flow, by flow (a run folder: manifest and model).
SAVED_MODELS = {"leml": MODELS / "leml-table-v1", "relations": MODELS / "relations-v1",
                "strip": MODELS / "strip-v1"}
SAVED = SAVED_MODELS["leml"]
NEW_ROWS = REPO / "data" / "examples" / "leml" / "bibtex.new.csv"
GUM_DOC = REPO / "data" / "coref" / "gum" / "GUM_news_crane.conllu.gz"
SEMEVAL_TEST = REPO / "data" / "relations" / "semeval2010_task8" / "TEST_FILE_FULL.TXT"

#: Packages no loaded model imports: Prefect, the Dask it runs flows on, its Dask runner.
FORBIDDEN = ("prefect", "prefect_dask", "dask", "distributed")
_PLOTS = "the runs' plots"
_STORE = "the store's folder machinery (and its writers): a model reads its own files"
_CONFIGS = "the flows' configs (and their YAML): nothing of a config is read"
_SCHEMA = ("the manifest schema's: finding the model reads four keys of the manifest "
           "(flows.manifest.RUN_KEYS), checked without it")
#: Per training flow (:data:`scarce.flows.registry.FLOWS` of kind ``train``): the packages and
#: modules (a name and all below it) that loading its model and predicting leave out, and why.
#: A LEML model is given feature rows here (a file in its format, a matrix): a table's texts
#: are vectorised by scikit-learn, which it imports then.
NOT_NEEDED: dict[str, dict[str, str]] = {
    "leml": {
        "sklearn": "the estimator's (built when estimator_ is first used) and a table's "
                   "vectoriser's, for texts",
        "scipy.special": "the losses', which training evaluates; scores are X W H^T",
        "scipy.optimize": "scikit-learn's and the metrics'",
        "numba": "StRip's learner's",
        "matplotlib": _PLOTS,
        "yaml": _CONFIGS,
        "scarce.flows.config": _CONFIGS,
        "pydantic": _SCHEMA,
        "scarce.tasks.store.folder": _STORE,
        "scarce.tasks.steps": "the steps' machinery (keys, code digests, seals): a LEML model "
                              "calls no step",
    },
    "relations": {
        "sklearn.cluster": "k-means: the search's, not the nearest-centroid assignment's",
        "sklearn.metrics": "the clustering scores of a run's evaluation",
        "scipy.cluster": "the Hasegawa baseline's complete linkage",
        "numba": "StRip's learner's",
        "matplotlib": _PLOTS,
        "yaml": _CONFIGS,
        "scarce.flows.config": _CONFIGS,
        "pydantic": _SCHEMA,
        "scarce.tasks.store.folder": _STORE,
    },
    "strip": {
        "sklearn": "the estimator's (built when estimator_ is first used) and the sampling of "
                   "training sources; applying rules needs none",
        "numba": "the learner's compiled counting, not the rules' closure",
        "scipy.optimize": "CEAF's alignment, for evaluate(), not predict()",
        "matplotlib": _PLOTS,
        "scarce.tasks.store.folder": _STORE,
    },
}
#: The modules of ``scarce.flows`` a loaded model may import, and why.
ALLOWED_FLOWS = {
    "scarce.flows": "the package (its docstring only)",
    "scarce.flows.models": "load_model: finds the run, imports its flow's model class",
    "scarce.flows.model_leml": "the LEML model",
    "scarce.flows.model_relations": "the relations model",
    "scarce.flows.model_strip": "the StRip model and the reading of its model.json",
    "scarce.flows.model_checks": "the checks of a model's parameters and arguments",
    "scarce.flows.model_format": "the model format: model.json, a run's model folder, input "
                                 "files",
    "scarce.flows.manifest": "reads the keys of the run's manifest that find its model",
    "scarce.flows.config": "StRip's model.json checked as a config",
    "scarce.flows.environment": "the project's folders; the SCARCE_ROOT, SCARCE_RUNS and "
                                "SCARCE_STORE variables",
    "scarce.flows.outputs": "the output guard of StRip's predict(output=...)",
}


def training_flows() -> list[str]:
    """The package's training flows in the registry: those whose runs have a model (a test
    registers a flow of its own, ``tests.flows.sample_flow``, which is not one)."""
    return sorted(name for name, spec in FLOWS.items()
                  if spec.kind == "train" and spec.target.startswith("scarce.flows."))


def not_imported(flow: str) -> tuple[str, ...]:
    """What a model of ``flow``, loaded and predicting, must not import."""
    return (*FORBIDDEN, *NOT_NEEDED[flow])


def flows_modules() -> list[str]:
    """Every module of ``scarce.flows``, from its files."""
    names = []
    for path in sorted((PROJECT_ROOT / "flows").rglob("*.py")):
        name = ".".join(("scarce", *path.relative_to(PROJECT_ROOT).with_suffix("").parts))
        names.append(name.removesuffix(".__init__"))
    return names


def forbidden_in(modules: list[str], packages: tuple[str, ...] = FORBIDDEN) -> list[str]:
    """The modules of ``modules`` (``sys.modules`` of a process) that a loaded model must not
    import: those of ``packages`` (each a package or module, and everything below it), and the
    modules of ``scarce.flows`` not allowed."""
    flows = set(flows_modules()) - set(ALLOWED_FLOWS)
    return sorted(m for m in modules
                  if any(m == p or m.startswith(p + ".") for p in packages) or m in flows)


def loaded_in_a_fresh_process(body: str, cwd: Path) -> list[str]:
    """Run ``body`` (Python that loads a model and writes its predictions somewhere) in a new
    interpreter after ``import scarce``; the names of the modules it had imported then."""
    code = "import json, sys\nimport scarce\n" + textwrap.dedent(body) + \
        "\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_allowed_modules_exist_and_the_forbidden_are_found_from_the_files():
    modules = flows_modules()
    assert set(ALLOWED_FLOWS) <= set(modules)
    # the flows, the runtime and the command line are among what is forbidden
    for heavy in ("scarce.flows.leml", "scarce.flows.relations", "scarce.flows.strip",
                  "scarce.flows.apply_leml", "scarce.flows.apply_strip", "scarce.flows.runtime",
                  "scarce.flows.cli", "scarce.flows.commands.run"):
        assert forbidden_in([heavy]) == [heavy]
    assert forbidden_in(["prefect.flows", "numpy", "scarce.flows.models"]) == ["prefect.flows"]
    # a dotted name forbids that module and those below it, not its siblings nor its parent
    assert forbidden_in(["scipy", "scipy.special", "scipy.special._ufuncs", "scipy.sparse",
                         "scipy.specialty"], ("scipy.special",)) == [
        "scipy.special", "scipy.special._ufuncs"]


def test_every_training_flow_says_what_its_model_leaves_out_and_has_a_committed_model():
    from scarce.flows.models import LOADERS

    assert sorted(NOT_NEEDED) == training_flows() == sorted(LOADERS) == sorted(SAVED_MODELS)
    for flow, reasons in NOT_NEEDED.items():
        assert all(reason for reason in reasons.values()), flow
        # what a model is allowed among the flows' modules is no flow's "not needed"
        assert not set(reasons) & (set(ALLOWED_FLOWS) - {"scarce.flows.config"}), flow


@pytest.mark.slow  # starts a Python process
def test_the_saved_table_model_predicts_texts_in_a_process_without_prefect_or_the_flows(
        tmp_path):
    """A table model's texts are vectorised by scikit-learn, which it may import; the rest
    holds as for every model."""
    modules = loaded_in_a_fresh_process(f"""
        import pandas as pd
        model = scarce.load_model({str(SAVED)!r})
        texts = pd.read_csv({str(NEW_ROWS)!r})["text"].tolist()
        model.predict_top_k(texts, 5).to_parquet({str(tmp_path / "texts.parquet")!r})
        model.predict_top_k({str(NEW_ROWS)!r}, 5).to_parquet({str(tmp_path / "file.parquet")!r})
        """, tmp_path)
    assert forbidden_in(modules) == []
    assert "scarce.flows.model_leml" in modules  # (the check saw the load)
    want = pd.read_parquet(SAVED / "expected.parquet")
    for name in ("texts", "file"):
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / f"{name}.parquet"), want,
                                      check_exact=True)


@pytest.mark.slow  # a Python process per flow
@pytest.mark.parametrize("flow", training_flows())
def test_a_committed_model_of_every_flow_predicts_in_a_process_without_what_it_does_not_need(
        tmp_path, flow):
    """Each training flow's committed model, loaded and used in a fresh process, imports
    nothing of :data:`FORBIDDEN`, of its flow's :data:`NOT_NEEDED` nor of the flows, and gives
    the same predictions as this process, which has imported everything (LEML: the rows its
    run's table gives for texts, whose predictions are committed beside it)."""
    import scarce

    saved = SAVED_MODELS[flow]
    if flow == "leml":  # feature rows: the committed texts vectorised, in this process
        import scipy.sparse as sp

        from scarce.tasks.leml_table import read_frame_xy

        model = scarce.load_model(saved)
        X, _ = read_frame_xy(pd.read_csv(NEW_ROWS), model.meta_["table"], model.features_,
                             model.labels_, model.meta_["dtype"], model.meta_["normalize"])
        sp.save_npz(tmp_path / "X.npz", X)
        load, method = "import scipy.sparse as sp", "predict_top_k"
        args, given = f"sp.load_npz({str(tmp_path / 'X.npz')!r}), 5", (X, 5)
    elif flow == "relations":
        pairs = tmp_path / "pairs.txt"
        lines = SEMEVAL_TEST.read_text(encoding="utf-8-sig").splitlines()
        pairs.write_text("\n".join(lines[: 4 * 12]) + "\n")
        load, method, given = "pass", "assign", (str(pairs),)
        args = repr(str(pairs))
    else:
        load, method, given = "pass", "predict", (str(GUM_DOC),)
        args = repr(str(GUM_DOC))
    out = tmp_path / "out.parquet"
    modules = loaded_in_a_fresh_process(f"""
        {load}
        model = scarce.load_model({str(saved)!r})
        model.{method}({args}).to_parquet({str(out)!r})
        """, tmp_path)
    assert forbidden_in(modules, not_imported(flow)) == []
    assert f"scarce.flows.model_{flow}" in modules  # (the check saw the load)
    want = getattr(scarce.load_model(saved), method)(*given)
    assert len(want) > 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), want, check_exact=True)
    if flow == "leml":  # and those of the texts the rows are, written when it was made
        pd.testing.assert_frame_equal(pd.read_parquet(out),
                                      pd.read_parquet(SAVED / "expected.parquet"),
                                      check_exact=True)
