"""apply-strip: the rules of a finished StRip run on new CoNLL-U documents.

A small training run (two GUM news documents, one test document, variants ripper and
strip-partial) is applied to its own test document, whose chains must be the bytes the training
run wrote, and to documents it never saw, whose chains must equal ``StRip.cluster`` with the
model's rules on pairs built directly from the file.  Bad input exits 2 with one line and adds
nothing to the runs folder.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scarce.algorithms.strip.features import build_pairs
from scarce.algorithms.strip.ripper import StRip
from scarce.flows.cli import main
from scarce.tasks import strip as tasks_strip
from scarce.tasks.errors import InputError
from scarce.tasks.readers.conllu import read_conllu
from tests.flows.helpers import made_runs, manifest, runs

ROOT = Path(__file__).resolve().parents[2]
GUM = ROOT / "data" / "coref" / "gum"
TRAIN = ["GUM_news_stampede", "GUM_news_worship"]
TEST = ["GUM_news_crane"]
UNSEEN = ["GUM_news_sensitive", "GUM_academic_census"]
WINDOW = 10
TRAINING_STEPS = {"strip-grow", "strip-prune", "strip-optimize", "strip-evaluate"}
flow_test = pytest.mark.usefixtures("prefect_server", "in_project")


@pytest.fixture(scope="module")
def project(make_project):
    root = make_project("apply-strip-project", {"strip.yaml": (
        f"data_dir: {GUM}\nsplits_file: splits.tsv\nwindow: {WINDOW}\nk_optimize: 1\n"
        "variants: [ripper, strip-partial]\ndev_splits: []\n")})
    (root / "splits.tsv").write_text("doc_id\tsplit\n" + "".join(
        [f"{d}\ttrain\n" for d in TRAIN] + [f"{d}\ttest\n" for d in TEST]))
    return root


def cli(project, capsys, *argv):
    """``scarce ARGV``: exit code, stderr, and the manifests of the runs it added."""
    with made_runs(project) as created:
        code = main(list(argv))
        err = capsys.readouterr().err
    return code, err, [manifest(project, r) for r in created]


@pytest.fixture(scope="module")
def made(project, prefect_server, tmp_path_factory) -> dict:
    """The module's training run and its first apply, made together before any test applies
    the model: the test split's documents, copied to a folder beside a file that is not a
    document, applied to an output folder.  Their manifests, and the two folders."""
    base = tmp_path_factory.mktemp("apply-strip-first")
    docs = base / "docs"
    docs.mkdir()
    for d in TEST:
        shutil.copy(GUM / f"{d}.conllu.gz", docs)
    (docs / "notes.txt").write_text("not a document\n")  # not a .conllu file: left out
    made = {"docs": docs, "out": base / "out"}
    with pytest.MonkeyPatch.context() as env:  # as `in_project`, for the module
        env.chdir(project)
        env.setenv("SCARCE_ROOT", str(project))
        env.delenv("SCARCE_STORE", raising=False)
        env.delenv("SCARCE_RUNS", raising=False)
        for key, argv in (("train", ["run", "strip", "--config",
                                     str(project / "configs" / "strip.yaml")]),
                          ("applied", ["apply", "{train}", "--input", str(docs),
                                       "--output", str(made["out"])])):
            with made_runs(project) as created:
                argv = [a.format(train=made.get("train", {}).get("run_id")) for a in argv]
                assert main(argv) == 0
            (run_id,) = created
            made[key] = manifest(project, run_id)
    return made


@pytest.fixture(scope="module")
def trained(made) -> str:
    """The id of the module's training run."""
    return made["train"]["run_id"]


def steps(m) -> set[str]:
    return {o["step"] for o in m["outputs"]}


@flow_test
def test_applied_to_the_test_split_it_writes_the_training_runs_bytes_and_learns_nothing(
        project, made):
    train, applied, out_folder = made["train"], made["applied"], made["out"]
    assert applied["flow"] == "apply-strip" and applied["config"]["variant"] is None
    # no training step ran: none in the manifest, no task run of Prefect's
    assert steps(applied) == {"strip-model-rules", "strip-preprocess", "strip-apply",
                              "strip-conllu", "strip-apply-summary"}
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        names = sorted(t.name for t in client.read_task_runs(flow_run_filter=FlowRunFilter(
            id=FlowRunFilterId(any_=[applied["prefect_flow_run_id"]]))))
    assert names == sorted(["load rules rules-strip-partial.parquet", "count chains",
                            *(f"{w} {d}.conllu.gz" for d in TEST
                              for w in ("apply rules", "write chains"))])
    # the same preprocess step as training: its entries were taken from the store
    assert applied["cache_hits"] == ["strip-preprocess"]
    prep = {o["ref"] for o in applied["outputs"] if o["step"] == "strip-preprocess"}
    assert len(prep) == 2 * len(TEST) and prep <= {o["ref"] for o in train["outputs"]}
    trained = project / "data" / "runs" / train["run_id"] / "outputs"
    out = project / "data" / "runs" / applied["run_id"] / "outputs"
    assert {o["name"] for o in applied["named_outputs"]} == {
        f"predicted/{d}.conllu" for d in TEST}
    for d in TEST:
        want = (trained / "predicted" / "strip-partial" / f"{d}.conllu").read_bytes()
        assert (out / "predicted" / f"{d}.conllu").read_bytes() == want
        assert (out_folder / f"{d}.conllu").read_bytes() == want
    assert sorted(p.name for p in out_folder.iterdir()) == [f"{d}.conllu" for d in TEST]
    # the metrics count what the file holds (its gold chains add the scores:
    # test_apply_strip_scores.py)
    metrics = pd.read_parquet(project / "data" / "runs" / applied["run_id"] / "metrics.parquet")
    got = metrics.set_index("metric")["value"]
    _, pred = read_conllu(out / "predicted" / f"{TEST[0]}.conllu")
    size = pred.groupby("entity").size()
    counts = {"documents": 1, "mentions": len(pred), "chains": (size > 1).sum(),
              "mentions_in_chains": size[size > 1].sum(), "singletons": (size == 1).sum()}
    assert got[list(counts)].to_dict() == counts


@flow_test
@pytest.mark.parametrize("variant", ["ripper", None])
def test_documents_the_model_never_saw_get_the_chains_of_strip_cluster(
        project, trained, capsys, tmp_path, variant):
    train = trained
    model = project / "data" / "runs" / train / "outputs" / "model"
    chosen = variant or "strip-partial"  # the paper's method when the run trained it
    docs = tmp_path / "docs"
    docs.mkdir()
    for d in UNSEEN:
        shutil.copy(GUM / f"{d}.conllu.gz", docs)
    extra = ["--set", f"variant={variant}"] if variant else []
    code, err, (applied,) = cli(project, capsys, "apply", train, "--input", str(docs), *extra)
    assert code == 0, err
    assert not steps(applied) & TRAINING_STEPS
    out = project / "data" / "runs" / applied["run_id"] / "outputs" / "predicted"
    # independent truth: the estimator with the model's rules, on pairs built from the file
    est = StRip()
    est.rules_ = pd.read_parquet(model / f"rules-{chosen}.parquet")
    for d in UNSEEN:
        tokens, gold = read_conllu(GUM / f"{d}.conllu.gz")
        pairs, X, _ = build_pairs(tokens, gold, max_mention_distance=WINDOW)
        direct = est.cluster(X, pairs["doc"], pairs["mention_i"], pairs["mention_j"])
        want = direct.set_index(["doc", "mention"])["cluster"].reindex(
            pd.MultiIndex.from_frame(gold[["doc", "mention"]])).to_numpy(dtype=float, copy=True)
        alone = np.isnan(want)
        want[alone] = -1 - np.arange(alone.sum())  # a mention in no pair is a singleton
        _, pred = read_conllu(out / f"{d}.conllu")
        assert pred[["sent", "start", "end"]].equals(gold[["sent", "start", "end"]])
        np.testing.assert_array_equal(pd.factorize(pred["entity"])[0], pd.factorize(want)[0])
        assert pred["entity"].nunique() < len(pred)  # some mentions were linked


@flow_test
def test_one_file_to_an_output_file_and_the_bundled_config_with_latest(project, trained,
                                                                       capsys, tmp_path):
    target = tmp_path / "deep" / "crane.conllu"
    code, err, (applied,) = cli(
        project, capsys, "run", "apply-strip", "--config", str(ROOT / "configs" /
                                                                "apply-strip.yaml"),
        "--set", f"input={GUM / 'GUM_news_crane.conllu.gz'}", "--set", f"output={target}")
    assert code == 0, err
    assert applied["config"]["model_run"] == "latest"
    predicted = project / "data" / "runs" / trained / "outputs" / "predicted"
    assert target.read_bytes() == (predicted / "strip-partial" / "GUM_news_crane.conllu"
                                   ).read_bytes()


@flow_test
def test_rerun_of_an_apply_run_is_identical(made, capsys):
    assert main(["rerun", made["applied"]["run_id"]]) == 0
    assert capsys.readouterr().out.strip().endswith("identical")


def _fake_run(runs_dir: Path, run_id: str, flow: str, model: dict | None = None,
              rules_from: Path | None = None) -> None:
    d = runs_dir / run_id
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({
        "flow": flow, "outputs": [], "finished": "2000-01-01T00:00:00", "config": {}}))
    if model is not None:
        (d / "outputs" / "model").mkdir(parents=True)
        (d / "outputs" / "model" / "model.json").write_text(json.dumps(model))
        if rules_from is not None:
            for p in rules_from.glob("rules-*.parquet"):
                shutil.copy(p, d / "outputs" / "model")


BAD = {
    "another-flow": (["--flow", "strip"], "is a relations run, not a strip run"),
    "another-flow-run": (["via-run"], "is a relations run, not a strip run"),
    "no-model": ([], "has no model (outputs/model/model.json is missing"),
    "older-model": ([], "model format version 0; this code reads version 1"),
    "xc-text": ([], "bibtex_xmlrepo_test.txt.gz:1: 1 tab-separated columns where CoNLL-U has 10"),
    "no-mentions": ([], "plain.conllu: no mention in the file (no Entity= span)"),
    "variant": (["--set", "variant=strip-labeled"],
                "key 'variant': run strip-fake-variant did not train strip-labeled"),
    "model-key": ([], "model.json: key 'preprocess.window': Input should be greater than"),
    "overwrite": ([], "in: key '--output': the output would be written among the input files"),
}


@flow_test
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_exits_2_with_one_line_and_adds_nothing(project, trained, capsys, tmp_path,
                                                          case):
    runs_dir = project / "data" / "runs"
    train = trained
    before = runs(project)
    model = runs_dir / train / "outputs" / "model"
    meta = json.loads((model / "model.json").read_text())
    run_id, inputs = f"strip-fake-{case}", GUM / f"{TEST[0]}.conllu.gz"
    if case.startswith("another-flow"):
        run_id = "relations-fake"
        _fake_run(runs_dir, run_id, "relations")
    elif case == "no-model":
        _fake_run(runs_dir, run_id, "strip")
    elif case in ("older-model", "variant", "model-key"):
        bad = {"older-model": {**meta, "version": 0}, "variant": meta,
               "model-key": {**meta, "preprocess": {**meta["preprocess"], "window": 0}}}[case]
        _fake_run(runs_dir, run_id, "strip", bad, model)
    else:
        run_id = train
        if case == "overwrite":  # a folder whose file has the output's name
            inputs = tmp_path / "in"
            inputs.mkdir()
            (inputs / "crane.conllu").write_bytes(gzip.decompress(
                (GUM / f"{TEST[0]}.conllu.gz").read_bytes()))
        elif case == "xc-text":
            inputs = ROOT / "data" / "xmc" / "bibtex" / "bibtex_xmlrepo_test.txt.gz"
        else:
            tokens = tmp_path / "plain.conllu"
            tokens.write_text("# newdoc id = plain\n# sent_id = 1\n"
                              "1\tHello\thello\tINTJ\tUH\t_\t0\troot\t_\t_\n\n")
            inputs = tokens
    extra, expect = BAD[case]
    target = inputs if case == "overwrite" else tmp_path / "out.conllu"
    kept = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    if extra == ["via-run"]:
        argv = ["run", "apply-strip", "--config", str(ROOT / "configs" / "apply-strip.yaml"),
                "--set", f"model_run={run_id}", "--set", f"input={inputs}",
                "--set", f"output={target}"]
    else:
        argv = ["apply", run_id, "--input", str(inputs), "--output", str(target), *extra]
    try:
        code = main(argv)
        err = capsys.readouterr().err
    finally:
        if run_id != train:
            shutil.rmtree(runs_dir / run_id)
    assert code == 2, err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert expect in line, line
    assert runs(project) == before  # no run folder: the failed apply run wrote nothing
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == kept
    assert case == "overwrite" or not target.exists()


# ----------------------------------------------------------------------------- the steps alone
def test_written_chains_are_numbered_by_first_mention_and_typed_when_their_mentions_agree(
        tmp_path):
    path = GUM / f"{TEST[0]}.conllu.gz"
    tokens, gold = read_conllu(path)
    # two labellings of one partition (gold entities): one text
    a = gold[["doc", "mention"]].assign(method="gold", cluster=pd.factorize(gold["entity"])[0])
    b = a.assign(method="renamed", cluster=1000 - a["cluster"] * 7)
    out = tasks_strip.write_predicted(path=path, clusters=pd.concat([a, b]))
    assert out["method"].tolist() == ["gold", "renamed"]
    assert out["conllu"].iloc[0] == out["conllu"].iloc[1]
    written = tmp_path / "gold.conllu"
    written.write_text(out["conllu"].iloc[0])
    wtokens, back = read_conllu(written)
    assert wtokens["form"].tolist() == tokens["form"].tolist()
    assert back["entity"].iloc[0] == "e1"
    first = back.drop_duplicates("entity")["entity"].str[1:].astype(int).tolist()
    assert first == list(range(1, len(first) + 1))
    np.testing.assert_array_equal(pd.factorize(back["entity"])[0],
                                  pd.factorize(gold["entity"])[0])
    assert (back["etype"] == gold["etype"]).all()  # gold entities: one type per chain
    # one chain of everything: its mentions' types differ, so it has none
    c = a.assign(cluster=0)
    _, one = read_conllu_text(tmp_path, tasks_strip.write_predicted(path=path, clusters=c))
    assert one["entity"].nunique() == 1 and set(one["etype"]) == {""}
    with pytest.raises(ValueError, match="has no chain"):
        tasks_strip.write_predicted(path=path, clusters=a.iloc[1:])


def read_conllu_text(folder: Path, table: pd.DataFrame):
    path = folder / "one.conllu"
    path.write_text(table["conllu"].iloc[0])
    return read_conllu(path)


@pytest.mark.parametrize("name, expect", [
    ("GUM_news_crane.conllu.gz", "GUM_news_crane.conllu"),
    ("a.conllu", "a.conllu"),
    ("my doc.txt", "my_doc.txt.conllu"),
    (".hidden.conllu", "x.hidden.conllu"),
])
def test_output_names_are_plain_conllu_names(name, expect):
    assert tasks_strip.output_name(Path(name)) == expect


def test_apply_rules_names_a_file_without_mentions_and_a_model_of_other_features(tmp_path):
    path = GUM / f"{TEST[0]}.conllu.gz"
    prep = tasks_strip.preprocess(path=path, window=WINDOW, max_sentence_distance=None,
                                  source_kind="etype", etypes=["person"], fraction=None,
                                  seed=None)
    kinds = tasks_strip.feature_kinds(prep["pairs"])
    rules = pd.DataFrame({"rule_id": [0], "antecedent_index": [0], "feature": ["soon_str"],
                          "op": ["=="], "value": ["True"], "pruned": [False]})
    args = dict(path=path, pairs=prep["pairs"], rules=rules, method="m")
    got = tasks_strip.apply_rules(mentions=prep["mentions"], kinds=kinds, **args)
    assert got.columns.tolist() == tasks_strip.CLUSTER_COLUMNS and len(got) == len(
        prep["mentions"])
    with pytest.raises(InputError, match="no mention in the file") as err:
        tasks_strip.apply_rules(mentions=prep["mentions"].iloc[:0], kinds=kinds, **args)
    assert err.value.path == str(path)
    with pytest.raises(InputError, match="pair features of this code differ") as err:
        tasks_strip.apply_rules(mentions=prep["mentions"], kinds={**kinds, "wn_class": "nominal"},
                                **args)
    assert err.value.key == "model_run"


def test_the_model_records_every_setting_of_the_preprocess_step():
    """apply-strip calls the training step with what model.json records: all its parameters."""
    import inspect

    from scarce.flows.model_strip import _Preprocess
    from scarce.flows.strip import StripConfig, preprocess_options

    wanted = set(inspect.signature(tasks_strip.preprocess.fn).parameters) - {"path"}
    assert set(_Preprocess.model_fields) == wanted
    for sources in ({"kind": "etype"}, {"kind": "fraction", "fraction": 0.3}):
        recorded = preprocess_options(StripConfig(seed=7, window=5, sources=sources))
        assert set(recorded) == wanted
        assert _Preprocess.model_validate(recorded).model_dump() == recorded


@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 5)), min_size=1, max_size=30),
       st.permutations(range(6)))
def test_chain_numbers_depend_on_the_partition_only(mentions, relabel):
    docs = np.array([d for d, _ in mentions])
    labels = np.array([c for _, c in mentions])
    got = tasks_strip.number_chains(docs, labels)
    np.testing.assert_array_equal(got, tasks_strip.number_chains(docs, np.array(relabel)[labels]))
    # 1, 2, ... in order of first appearance; equal numbers exactly for equal (doc, label)
    firsts = pd.unique(got)
    np.testing.assert_array_equal(firsts, np.arange(1, len(firsts) + 1))
    same = (got[:, None] == got[None, :])
    np.testing.assert_array_equal(same, (docs[:, None] == docs[None, :])
                                  & (labels[:, None] == labels[None, :]))
