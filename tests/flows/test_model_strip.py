"""``scarce.load_model`` of a StRip run: chains and CoNLL-U equal to ``scarce apply``'s.

A small StRip model (two GUM news documents, as in ``test_apply_strip.py``) is applied through
the command line to a folder of two documents, one of which it never saw; the loaded model must
give the same chains and write the same bytes.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import scarce
from scarce.flows.cli import main
from scarce.flows.model_strip import CHAIN_COLUMNS, StripModel
from scarce.tasks.errors import InputError
from scarce.tasks.readers.conllu import read_conllu
from tests.flows.helpers import first_run, run_in, strip_project

pytestmark = pytest.mark.usefixtures("prefect_server", "in_project")

ROOT = Path(__file__).resolve().parents[2]
GUM = ROOT / "data" / "coref" / "gum"
TRAIN = ["GUM_news_stampede", "GUM_news_worship"]
TEST = "GUM_news_crane"
DOCS = [TEST, "GUM_news_sensitive"]


@pytest.fixture(scope="module")
def project(tmp_path_factory, prefect_server):
    root = strip_project(tmp_path_factory.mktemp("model-strip"), GUM, TRAIN, TEST)
    docs = root / "docs"
    docs.mkdir()
    for d in DOCS:
        shutil.copy(GUM / f"{d}.conllu.gz", docs)
    run_in(root, "run", "strip")
    return root


def trained(project) -> str:
    return first_run(project, "strip")


def inputs(project) -> list[Path]:
    return [project / "docs" / f"{d}.conllu.gz" for d in DOCS]


@pytest.mark.parametrize("variant", [None, "ripper"])
def test_chains_and_conllu_equal_scarce_apply_bit_for_bit(project, tmp_path, variant):
    run = trained(project)
    extra = ["--set", f"variant={variant}"] if variant else []
    assert main(["apply", run, "--input", str(project / "docs"),
                 "--output", str(tmp_path / "applied"), *extra]) == 0
    model = scarce.load_model(run) if variant is None else StripModel(
        project / "data" / "runs" / run, variant)
    assert isinstance(model, StripModel)
    assert model.variant == (variant or "strip-partial")
    chains = model.predict(inputs(project), output=tmp_path / "mine")
    assert chains.columns.tolist() == CHAIN_COLUMNS
    assert chains["file"].unique().tolist() == [f"{d}.conllu.gz" for d in DOCS]
    for d in DOCS:
        written = (tmp_path / "mine" / f"{d}.conllu").read_bytes()
        assert written == (tmp_path / "applied" / f"{d}.conllu").read_bytes()
        _, applied = read_conllu(tmp_path / "applied" / f"{d}.conllu")
        mine = chains[chains["file"] == f"{d}.conllu.gz"].reset_index(drop=True)
        for col in ("doc", "mention", "sent", "start", "end", "etype"):
            assert mine[col].tolist() == applied[col].tolist(), col
        assert mine["chain"].tolist() == applied["entity"].tolist()
        assert mine["chain"].nunique() < len(mine)  # some mentions were linked


def test_the_training_runs_test_document_gets_the_training_runs_bytes(project, tmp_path):
    run_dir = project / "data" / "runs" / trained(project)
    target = tmp_path / "crane.conllu"
    StripModel(run_dir).predict(GUM / f"{TEST}.conllu.gz", output=target)
    want = run_dir / "outputs" / "predicted" / "strip-partial" / f"{TEST}.conllu"
    assert target.read_bytes() == want.read_bytes()


def test_parsed_documents_get_the_chains_of_their_files(project):
    model = scarce.load_model("latest", flow="strip")
    from_files = model.predict(inputs(project))
    parsed = model.predict([read_conllu(p) for p in inputs(project)])
    assert parsed["file"].unique().tolist() == ["document-0", "document-1"]
    pd.testing.assert_frame_equal(parsed.drop(columns="file"), from_files.drop(columns="file"))
    one = model.predict(read_conllu(inputs(project)[0]))
    pd.testing.assert_frame_equal(one.drop(columns="file"), from_files[
        from_files["file"] == f"{DOCS[0]}.conllu.gz"].drop(columns="file"))
    first = from_files.iloc[0]
    tokens, _ = read_conllu(inputs(project)[0])
    sent = tokens[(tokens["doc"] == first["doc"]) & (tokens["sent"] == first["sent"])]
    words = sent[(sent["token"] >= first["start"]) & (sent["token"] <= first["end"])]["form"]
    assert first["text"] == " ".join(words)


def test_evaluate_gives_the_training_runs_scores_on_its_test_document(project):
    run = trained(project)
    metrics = pd.read_parquet(project / "data" / "runs" / run / "metrics.parquet")
    want = metrics[metrics["method"] == "strip-partial"].set_index("metric")["value"]
    got = scarce.load_model(run).evaluate(GUM / f"{TEST}.conllu.gz").set_index("metric")["value"]
    assert got["scored_documents"] == 1
    for name in ("b3_f", "pairwise_f", "muc_p", "all_ceaf_e_r", "all_b3_f"):
        assert got[name] == pytest.approx(want[name], abs=1e-12), name


def test_a_model_of_an_unknown_format_version_is_refused(project):
    run = trained(project)
    model_json = project / "data" / "runs" / run / "outputs" / "model" / "model.json"
    original = model_json.read_text()
    try:
        model_json.write_text(json.dumps({**json.loads(original), "version": 99}))
        with pytest.raises(InputError, match="model format version 99"):
            scarce.load_model(run)
    finally:
        model_json.write_text(original)


def test_bad_variants_and_outputs_are_refused(project, tmp_path):
    run_dir = project / "data" / "runs" / trained(project)
    with pytest.raises(InputError, match="did not train strip-labeled"):
        StripModel(run_dir, "strip-labeled")
    model = StripModel(run_dir)
    assert model.variants == ("ripper", "strip-partial")
    doc = read_conllu(inputs(project)[0])
    with pytest.raises(ValueError, match="output needs CoNLL-U paths"):
        model.predict([doc], output=tmp_path / "x.conllu")
    (tmp_path / "in.conllu").write_bytes(gzip.decompress((GUM / f"{TEST}.conllu.gz").read_bytes()))
    kept = (tmp_path / "in.conllu").read_bytes()
    with pytest.raises(ValueError, match="must end in .conllu"):
        model.predict(tmp_path / "in.conllu", output=tmp_path / "out.txt")
    with pytest.raises(ValueError, match="overwrite an input"):
        model.predict(tmp_path / "in.conllu", output=tmp_path / "in.conllu")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.conllu"]
    assert (tmp_path / "in.conllu").read_bytes() == kept
