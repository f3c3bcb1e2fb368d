"""A model loaded into Python imports neither Prefect nor the flows: in a fresh process,
``scarce.load_model`` and the model's predictions load only the model's own code.

What a loaded model may import of ``scarce.flows`` is listed in :data:`ALLOWED_FLOWS`, each
with its reason; every other module of ``scarce.flows`` (found from the files, so that a new
one is covered) is a flow, the command line or the machinery of runs, and is forbidden, as are
the packages of :data:`FORBIDDEN`.  A LEML model of feature rows does not import scikit-learn
either (:data:`FORBIDDEN_LEML_ROWS`).  The runs of every flow are made and checked in
``tests/flows/test_loaded_models.py`` (:func:`loaded_in_a_fresh_process`); here, the model of
every such flow committed in ``tests/data/models`` (:data:`SAVED`), which needs no run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

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
#: Nor does a LEML model given feature rows (a file in its format, a matrix): scikit-learn is
#: its estimator's (built when ``estimator_`` is used) and a table's vectoriser's; numba is
#: StRip's; matplotlib the runs' plots.
FORBIDDEN_LEML_ROWS = (*FORBIDDEN, "sklearn", "numba", "matplotlib")
#: The modules of ``scarce.flows`` a loaded model may import, and why.
ALLOWED_FLOWS = {
    "scarce.flows": "the package (its docstring only)",
    "scarce.flows.models": "load_model: finds the run, imports its flow's model class",
    "scarce.flows.model_leml": "the LEML model",
    "scarce.flows.model_relations": "the relations model",
    "scarce.flows.model_strip": "the StRip model and the reading of its model.json",
    "scarce.flows.model_checks": "the checks of a model's parameters and arguments",
    "scarce.flows.manifest": "reads and checks the run's manifest",
    "scarce.flows.apply": "the model format: model.json, a run's model folder, input files",
    "scarce.flows.config": "the project's folders; StRip's model.json checked as a config",
    "scarce.flows.environment": "the SCARCE_ROOT, SCARCE_RUNS and SCARCE_STORE variables",
    "scarce.flows.outputs": "the output guard of StRip's predict(output=...)",
}


def flows_modules() -> list[str]:
    """Every module of ``scarce.flows``, from its files."""
    names = []
    for path in sorted((PROJECT_ROOT / "flows").rglob("*.py")):
        name = ".".join(("scarce", *path.relative_to(PROJECT_ROOT).with_suffix("").parts))
        names.append(name.removesuffix(".__init__"))
    return names


def forbidden_in(modules: list[str], packages: tuple[str, ...] = FORBIDDEN) -> list[str]:
    """The modules of ``modules`` (``sys.modules`` of a process) that a loaded model must not
    import: those of ``packages``, and the modules of ``scarce.flows`` not allowed."""
    flows = set(flows_modules()) - set(ALLOWED_FLOWS)
    return sorted(m for m in modules
                  if m.split(".")[0] in packages or m in flows)


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


def test_every_flow_with_a_model_in_python_has_a_committed_model():
    from scarce.flows.models import LOADERS

    assert sorted(SAVED_MODELS) == sorted(LOADERS)


@pytest.mark.slow  # a Python process per flow
@pytest.mark.parametrize("flow", sorted(SAVED_MODELS))
def test_a_committed_model_of_every_flow_predicts_in_a_process_without_prefect_or_the_flows(
        tmp_path, flow):
    """Each flow's committed model, loaded and used in a fresh process, imports nothing of
    :data:`FORBIDDEN` nor of the flows, and gives what this process (which has imported
    everything) gives on the same input."""
    import scarce

    saved = SAVED_MODELS[flow]
    if flow == "relations":
        pairs = tmp_path / "pairs.txt"
        lines = SEMEVAL_TEST.read_text(encoding="utf-8-sig").splitlines()
        pairs.write_text("\n".join(lines[: 4 * 12]) + "\n")
        method, args = "assign", (str(pairs),)
    elif flow == "strip":
        method, args = "predict", (str(GUM_DOC),)
    else:
        method, args = "predict_top_k", (str(NEW_ROWS), 5)
    out = tmp_path / "out.parquet"
    modules = loaded_in_a_fresh_process(f"""
        model = scarce.load_model({str(saved)!r})
        model.{method}(*{args!r}).to_parquet({str(out)!r})
        """, tmp_path)
    assert forbidden_in(modules) == []
    assert f"scarce.flows.model_{flow}" in modules  # (the check saw the load)
    want = getattr(scarce.load_model(saved), method)(*args)
    assert len(want) > 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), want, check_exact=True)
