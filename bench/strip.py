"""StRip benchmark on GUM: RIPPER, StRip and StRip with partial supervision, against wittgenstein.

Stoyanov and Cardie (EMNLP 2006), the comparison of their table: each method learns rules on
GUM's train split, then single-link clustering (transitive closure) of the test pairs it marks
positive gives the chains, scored over the labelled ("source") mentions: MUC, B³, CEAF-e and
pairwise precision / recall / F1 (``all_*``: the same over every mention).

* ``ripper``: plain RIPPER (no closure) on the labelled pairs (two source NPs);
* ``strip-labeled``: StRip (closure coverage) on the labelled pairs;
* ``strip-partial``: StRip on all pairs, those with a non-source NP unknown (closure only).

The loss ratio (cost of a false positive over a false negative) is chosen per method from a small
sweep by the B³ F1 over the sources of GUM's dev split (``--select conll``: the mean of the MUC,
B³ and CEAF-e F1, the CoNLL-2012 score; ties: pairwise F1, then the ratio nearer 1); the model
fitted on train with that ratio is the one scored on test (no refit, dev never trains).

``--supervision all`` makes every mention a source (every pair labelled with its gold
coreference, nothing unknown): the fully supervised setting of the reference 9-feature wittgenstein
figures over all GUM test mentions (MUC F 0.554, B³ F 0.726), which the full feature set is to beat.
There ``strip-partial`` equals ``strip-labeled`` and is dropped.

Speed peer: ``wittgenstein``'s RIPPER in the same run on the same pair instances: the
labelled pairs (the instances of ``ripper`` and ``strip-labeled``) and all pairs with their gold
labels (the instances of ``strip-partial``; wittgenstein has no unknown label, so this peer sees
more supervision than StRip and its scores are an oracle, not a baseline).  ``time_ratio`` is the
method's training seconds over its peer's.

Outside referee: the test chains of each method are written as CorefUD CoNLL-U by the
flow's own writer (:func:`scarce.tasks.strip.write_predicted`) and scored by the official CRAC
scorer
(``../shared/tools/corefud-scorer`` beside the project; :func:`official_scores`), exact mention
match, singletons kept: its MUC, B³ and CEAF-e precision, recall and F1 against ours, once on the
source mentions (key and response both restricted to them, as our scores are) and once on all
mentions with the unchanged gold file as the key.  ``scorer_max_diff`` is the largest of the 18
differences; ``crac_muc_f``, ``crac_b3_f``, ``crac_ceaf_e_f`` and ``crac_conll_f`` (their mean)
are the scorer's F1 in its own setting, singletons left out, over all mentions (exact match):
MUC equals our ``all_muc_f`` (a singleton holds no link), B³ and CEAF-e are lower than ours,
which count every mention.  NaN when the scorer is absent.

Apply throughput: ``apply_docs_per_s`` is the test documents per second of the apply flow's rule
application (:func:`scarce.tasks.strip.apply_rules`, one call per document), ``apply_speedup`` the
seconds of the training run's ``evaluate`` step on the same documents and rules over those
(best of five each, in this process).

Data: ``--data DIR`` holds ``coref/gum/`` with ``<doc_id>.conllu[.gz]`` files and ``splits.tsv``
(default: the project's bundled part of GUM).  ``--quick``: a few bundled documents.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from scarce.algorithms.metrics.coref import coref_scores
from scarce.algorithms.strip.ripper import VARIANTS, StRip
from scarce.flows.config import project_root
from scarce.flows.runtime import markdown_table
from scarce.tasks import strip as tasks_strip
from scarce.tasks.errors import InputError
from scarce.tasks.readers.conllu import read_conllu, write_chains

# method -> the peer fitted on the same pair instances
PEER_OF = {"ripper": "wittgenstein-labeled", "strip-labeled": "wittgenstein-labeled",
           "strip-partial": "wittgenstein-all"}
QUICK_DOCS = {"train": 6, "dev": 2, "test": 2}
# The official CRAC scorer, beside the project (never part of it): ../shared/tools/corefud-scorer
SCORER = Path(__file__).resolve().parents[1].parent / "shared" / "tools" / "corefud-scorer"
REFEREE_METRICS = ("muc", "b3", "ceaf_e")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from scarce.flows.commands.types import POSITIVE, SEED, NumberList, comma_list, config_number
    from scarce.flows.strip import StripConfig

    parser.add_argument("--data", type=Path, default=None,
                        help="folder holding coref/gum/ (default: the project's data/)")
    parser.add_argument("--window", type=config_number(StripConfig, "window"), default=20,
                        help="candidate pairs: mentions at most this many mentions apart")
    parser.add_argument("--loss-ratios", type=NumberList(config_number(StripConfig, "loss_ratio")),
                        default="0.25,0.5,1,2",
                        help="comma-separated loss ratios swept on the dev split")
    parser.add_argument("--variants", type=comma_list(VARIANTS), default=list(VARIANTS),
                        help=f"comma-separated subset of {', '.join(VARIANTS)}")
    parser.add_argument("--k-optimize", type=config_number(StripConfig, "k_optimize"),
                        default=StRip().k_optimize,
                        help="RIPPER's k (both learners; default: StRip's)")
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--max-docs", type=POSITIVE, default=None,
                        help="at most this many documents per split (first by id)")
    parser.add_argument("--no-peer", action="store_true", help="skip wittgenstein")
    parser.add_argument("--supervision", choices=["sources", "all"], default="sources",
                        help="sources: person / organization mentions labelled (the paper's "
                        "setting); all: every mention a source, every pair labelled")
    parser.add_argument("--select", choices=["b3", "conll"], default="b3",
                        help="dev score that chooses the loss ratio: B3 F1, or the CoNLL mean of "
                        "MUC, B3 and CEAF-e F1")
    parser.add_argument("--quick", action="store_true",
                        help=f"reduced run: {QUICK_DOCS} documents, window 10, loss ratios "
                        "0.5 and 1")


def _log(msg: str) -> None:
    print(f"[bench strip] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- data
def load_split(files: list[Path], window: int, supervision: str = "sources") -> dict:
    """Pairs (keys, label, features) and mentions of the given CoNLL-U files.

    ``supervision="all"``: every entity's mentions are sources (a fraction of 1 of the entities),
    so every pair is labelled; otherwise the person and organization mentions.
    """
    if supervision == "all":
        sources = {"source_kind": "fraction", "etypes": None, "fraction": 1.0, "seed": 0}
    else:
        sources = {"source_kind": "etype", "etypes": ["person", "organization"],
                   "fraction": None, "seed": None}
    pairs, mentions = [], []
    for path in files:
        out = tasks_strip.preprocess(path=path, window=window, max_sentence_distance=None,
                                     **sources)
        pairs.append(out["pairs"])
        mentions.append(out["mentions"])
    return {"pairs": pd.concat(pairs, ignore_index=True),
            "mentions": pd.concat(mentions, ignore_index=True),
            "files": list(zip(files, pairs, mentions, strict=True))}


def _documents(gum: Path, max_docs: dict[str, int | None]) -> dict[str, list[Path]]:
    """The CoNLL-U files of each split (train, dev, test), at most ``max_docs[split]``."""
    splits_file = gum / "splits.tsv"
    if not splits_file.is_file():
        raise InputError("splits file not found (expected coref/gum/splits.tsv under --data)",
                         path=splits_file)
    table = tasks_strip.select_documents(splits_file, gum, {s: [s] for s in max_docs})
    return {split: list(table.loc[table["role"] == split, "file"])[: limit or None]
            for split, limit in max_docs.items()}


# ----------------------------------------------------------------------------- scoring
def score(positive: np.ndarray, data: dict) -> dict[str, float]:
    """Single-link chains of the positive pairs, scored over the sources and over all mentions."""
    men = data["mentions"]
    response = tasks_strip.chains(positive, data["pairs"], men)
    key = men["entity"].to_numpy()
    groups = men["doc"].to_numpy()
    src = coref_scores(key, response, men["source"].to_numpy(dtype=bool), groups)
    every = coref_scores(key, response, None, groups)
    out = {f"{m}_f": float(src.loc[m, "f"]) for m in tasks_strip.SCORE_NAMES}
    out["pairwise_p"] = float(src.loc["pairwise", "p"])
    out["pairwise_r"] = float(src.loc["pairwise", "r"])
    out["conll_f"] = float(np.mean([out["muc_f"], out["b3_f"], out["ceaf_e_f"]]))
    out["all_muc_f"] = float(every.loc["muc", "f"])
    out["all_b3_f"] = float(every.loc["b3", "f"])
    out["all_ceaf_e_f"] = float(every.loc["ceaf_e", "f"])
    return out


# ----------------------------------------------------------------------------- the outside referee
_DRIVER = """
import contextlib, importlib, json, sys
jobs = json.load(sys.stdin)
with contextlib.redirect_stdout(sys.stderr):
    cli = importlib.import_module("corefud-scorer")
    from scorer.corefud.reader import CorefUDReader
    from scorer.eval import evaluator
    out = []
    for job in jobs:
        args = cli.corefud_to_ua_args({
            "key_file": None, "sys_file": None, "metrics": ["muc", "bcub", "ceafe"],
            "keep_singletons": job["singletons"], "match": "exact", "exact_match": True,
            "zero_match_method": "dependent"})
        cli.uascorer.process_arguments(args)
        infos = {}
        for k, (key, response) in enumerate(job["files"]):
            reader = CorefUDReader(**args)
            reader.get_coref_infos(key, response)
            infos.update({(k, doc): info for doc, info in reader.doc_coref_infos.items()})
        out.append({name: evaluator.evaluate_documents(infos, metric, beta=1)
                    for name, metric in args["metrics"]})
print(json.dumps(out))
"""
_SCORER_NAMES = {"muc": "muc", "bcub": "b3", "ceafe": "ceaf_e"}


def official_scores(jobs: list[dict], scorer: Path = SCORER) -> list[pd.DataFrame]:
    """MUC, B³ and CEAF-e of the official CRAC scorer, exact mention match, full precision.

    Runs the scorer's own code (``corefud-scorer.py``'s options, its CorefUD reader and
    evaluator) in a subprocess, without the rounding of its printed output; the documents of all
    the file pairs of a job are scored together, as the scorer scores the documents of one file.

    Parameters
    ----------
    jobs : list of dict
        Each ``{"files": [(key, response), ...], "singletons": bool}`` (``singletons``: the
        scorer's ``-s``, keep singletons).
    scorer : Path
        The scorer's folder.

    Returns
    -------
    list of DataFrame
        Per job, rows ``muc, b3, ceaf_e`` and columns ``p, r, f``.
    """
    payload = [{"files": [[str(Path(k).resolve()), str(Path(r).resolve())] for k, r in j["files"]],
                "singletons": bool(j["singletons"])} for j in jobs]
    proc = subprocess.run([sys.executable, "-c", _DRIVER], input=json.dumps(payload),
                          cwd=scorer, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(f"the CRAC scorer failed: {last}")
    out = []
    for result in json.loads(proc.stdout):
        rows = {_SCORER_NAMES[n]: (p, r, f) for n, (r, p, f) in result.items()}
        out.append(pd.DataFrame.from_dict(rows, orient="index", columns=["p", "r", "f"])
                   .loc[list(REFEREE_METRICS)])
    return out


def referee_files(path: Path, mentions: pd.DataFrame, response: np.ndarray,
                  folder: Path) -> dict[str, tuple[Path, Path]]:
    """Key and response CoNLL-U of one test file, for the scorer.

    ``mentions`` are ``preprocess``'s mentions of the file (``doc, mention, entity, source``)
    and ``response`` their predicted chains.  ``all``: the gold file itself as the key, the
    response written by the flow's writer (:func:`scarce.tasks.strip.write_predicted`); ``sources``:
    key and response restricted to the source mentions (gold entities and predicted chains
    written back with :func:`scarce.tasks.readers.conllu.write_chains`), the mentions our scores
    count.
    """
    folder.mkdir(parents=True, exist_ok=True)
    stem = tasks_strip.output_name(path).removesuffix(".conllu")
    clusters = mentions[["doc", "mention"]].assign(method="m", cluster=response)
    text = tasks_strip.write_predicted(path=path, clusters=clusters)["conllu"].iloc[0]
    files = {"all": (path, folder / f"{stem}.response.conllu")}
    files["all"][1].write_text(text, encoding="utf-8")
    _, spans = read_conllu(path)
    row = pd.MultiIndex.from_frame(mentions[["doc", "mention"]]).get_indexer(
        pd.MultiIndex.from_frame(spans[["doc", "mention"]]))
    keep = mentions["source"].to_numpy(dtype=bool)[row]
    kept = spans[keep]
    entity = pd.factorize(mentions["entity"].to_numpy()[row][keep])[0]
    key, resp = folder / f"{stem}.sources.key.conllu", folder / f"{stem}.sources.response.conllu"
    key.write_text(write_chains(path, kept.assign(cluster=entity)), encoding="utf-8")
    chain = pd.factorize(np.asarray(response)[row][keep])[0]
    resp.write_text(write_chains(path, kept.assign(cluster=chain)), encoding="utf-8")
    files["sources"] = (key, resp)
    return files


def referee(files: list[Path], mentions: pd.DataFrame, response: np.ndarray,
            scorer: Path = SCORER) -> dict[str, pd.DataFrame]:
    """The scorer's scores of the chains ``response`` of the test ``files``' ``mentions``.

    Returns
    -------
    dict of DataFrame
        ``sources`` and ``all`` (singletons kept: comparable with our scores over the sources
        and with the ``all_`` ones) and ``crac`` (all mentions, singletons left out: the
        scorer's own default besides the exact match).
    """
    with tempfile.TemporaryDirectory(prefix="scarce-referee-") as tmp:
        pairs: dict[str, list] = {"sources": [], "all": []}
        for path in files:
            docs = set(read_conllu(path)[1]["doc"])
            own = mentions["doc"].isin(docs).to_numpy()
            made = referee_files(path, mentions[own], np.asarray(response)[own], Path(tmp))
            for k in pairs:
                pairs[k].append(made[k])
        scores = official_scores([{"files": pairs["sources"], "singletons": True},
                                  {"files": pairs["all"], "singletons": True},
                                  {"files": pairs["all"], "singletons": False}], scorer)
    return dict(zip(("sources", "all", "crac"), scores, strict=True))


def referee_columns(files: list[Path], data: dict, response: np.ndarray) -> dict[str, float]:
    """``scorer_max_diff`` and the scorer's ``crac_*_f`` of a row (NaN when it is absent)."""
    crac = [f"crac_{m}_f" for m in REFEREE_METRICS] + ["crac_conll_f"]
    if not (SCORER / "corefud-scorer.py").is_file():
        return {"scorer_max_diff": np.nan, **dict.fromkeys(crac, np.nan)}
    men = data["mentions"]
    key, groups = men["entity"].to_numpy(), men["doc"].to_numpy()
    ours = {"sources": coref_scores(key, response, men["source"].to_numpy(dtype=bool), groups),
            "all": coref_scores(key, response, None, groups)}
    theirs = referee(files, men, response)
    diff = max(float(np.abs(ours[k].loc[list(REFEREE_METRICS)].to_numpy()
                            - theirs[k].to_numpy()).max()) for k in ours)
    f = theirs["crac"]["f"]
    return {"scorer_max_diff": diff, **{f"crac_{m}_f": float(f[m]) for m in REFEREE_METRICS},
            "crac_conll_f": float(f.mean())}


# ----------------------------------------------------------------------------- apply throughput
def _best_of(fn, repeats: int = 5) -> float:
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def apply_throughput(rules: pd.DataFrame, method: str, data: dict) -> dict[str, float]:
    """Documents per second of the apply flow's rule application on the test files, and the
    seconds of the training run's ``evaluate`` step on the same files and rules over its."""
    files = data["files"]
    kinds = tasks_strip.feature_kinds(files[0][1])

    def apply() -> None:
        for path, pairs, mentions in files:
            tasks_strip.apply_rules(path=path, pairs=pairs, mentions=mentions, rules=rules,
                                    method=method, kinds=kinds)

    def evaluate() -> None:
        tasks_strip.evaluate(test_pairs=[f[1] for f in files], test_mentions=[f[2] for f in files],
                             rules={method: rules}, timings={method: [pd.DataFrame()]},
                             dataset="test")

    t_apply, t_eval = _best_of(apply), _best_of(evaluate)
    return {"apply_docs_per_s": len(files) / t_apply, "apply_speedup": t_eval / t_apply}


def _fit_strip(train: pd.DataFrame, variant: str, loss_ratio: float, k: int, seed: int):
    model = StRip.from_variant(variant, loss_ratio=loss_ratio, k_optimize=k, random_state=seed)
    t0 = time.perf_counter()
    model.fit(tasks_strip.features(train), train["label"].to_numpy(),
              *tasks_strip.pair_ends(train))
    return model, time.perf_counter() - t0


def _fit_peer(train: pd.DataFrame, which: str, k: int, seed: int):
    import wittgenstein

    table = train[train["label"].to_numpy() >= 0] if which == "labeled" else train
    X = tasks_strip.features(table.drop(columns="gold")).reset_index(drop=True)
    if which == "labeled":
        y = (table["label"].to_numpy() == 1).astype(np.int64)
    else:  # gold labels of every pair (wittgenstein knows no "unknown")
        y = table["gold"].to_numpy().astype(np.int64)
    model = wittgenstein.RIPPER(k=k, random_state=seed)
    t0 = time.perf_counter()
    model.fit(X, y, pos_class=1)  # y as numpy: an unnamed Series fails under pandas 3
    return model, time.perf_counter() - t0, len(table), int(np.count_nonzero(table["label"] >= 0))


def _gold(data: dict) -> np.ndarray:
    """Gold coreference of every pair (same entity), sources or not."""
    men = data["mentions"].set_index(["doc", "mention"])["entity"]
    p = data["pairs"]
    ei = men.reindex(pd.MultiIndex.from_arrays([p["doc"], p["mention_i"]])).to_numpy()
    ej = men.reindex(pd.MultiIndex.from_arrays([p["doc"], p["mention_j"]])).to_numpy()
    return (ei == ej).astype(np.int64)


def _choose(sweep: list[dict], select: str = "b3") -> dict:
    """The sweep's row of the best loss ratio on dev, by the flow's rule."""
    rows = [{"b3_f": r["dev_b3_f"], "conll_f": r["dev_conll_f"],
             "pairwise_f": r["dev_pairwise_f"], "loss_ratio": r["loss_ratio"], "index": i}
            for i, r in enumerate(sweep)]
    return sweep[tasks_strip.choose_loss_ratio(rows, select)["index"]]


# ----------------------------------------------------------------------------- run
def run(args: argparse.Namespace) -> pd.DataFrame:
    """The benchmark table: one row per method, scores on test, training time and peer ratio."""
    data_root = args.data if args.data is not None else project_root() / "data"
    gum = Path(data_root) / "coref" / "gum"
    window = 10 if args.quick else args.window
    ratios = [0.5, 1.0] if args.quick else list(args.loss_ratios)
    variants = list(args.variants)  # each one of VARIANTS (checked by the parser)
    supervision = args.supervision
    select = args.select
    if supervision == "all" and "strip-partial" in variants:
        variants.remove("strip-partial")
        _log("--supervision all: every pair is labelled, so strip-partial equals strip-labeled "
             "(dropped)")
    if not variants:
        raise InputError("--supervision all leaves no variant of --variants to run (strip-partial "
                         "is dropped: give ripper or strip-labeled too)")
    limits = dict(QUICK_DOCS) if args.quick else {s: args.max_docs for s in QUICK_DOCS}
    docs = _documents(gum, limits)
    _log(f"documents: {', '.join(f'{s} {len(d)}' for s, d in docs.items())}; window {window}")

    if not (SCORER / "corefud-scorer.py").is_file():
        _log(f"the CRAC scorer is not at {SCORER}: no scorer columns")
    with threadpool_limits(1):
        t0 = time.perf_counter()
        data = {s: load_split(d, window, supervision) for s, d in docs.items()}
        data["train"]["pairs"]["gold"] = _gold(data["train"])
        _log(f"features in {time.perf_counter() - t0:.1f} s: " + ", ".join(
            f"{s} {len(d['pairs'])} pairs ({int((d['pairs']['label'] >= 0).sum())} labelled)"
            for s, d in data.items()))
        train = data["train"]["pairs"]
        train_x = train.drop(columns=["gold"])
        rows, sweep_rows = [], []
        for variant in variants:
            sweep = []
            for ratio in ratios:
                model, secs = _fit_strip(train_x, variant, ratio, args.k_optimize, args.seed)
                dev = score(model.predict(tasks_strip.features(data["dev"]["pairs"])).astype(bool),
                            data["dev"])
                sweep.append({"method": variant, "loss_ratio": ratio, "model": model,
                              "train_seconds": secs, "dev_b3_f": dev["b3_f"],
                              "dev_conll_f": dev["conll_f"],
                              "dev_pairwise_f": dev["pairwise_f"],
                              "n_rules": int(model.rules_["rule_id"].nunique())})
                _log(f"{variant} L={ratio:g}: {secs:.1f} s, {sweep[-1]['n_rules']} rules, dev B3 "
                     f"{dev['b3_f']:.4f} CoNLL {dev['conll_f']:.4f} pairwise F "
                     f"{dev['pairwise_f']:.4f}")
            best = _choose(sweep, select)
            model = best["model"]
            positive = model.predict(tasks_strip.features(data["test"]["pairs"])).astype(bool)
            test = score(positive, data["test"])
            response = tasks_strip.chains(positive, data["test"]["pairs"],
                                          data["test"]["mentions"])
            rows.append({"method": variant, "train_pairs": model.n_pairs_,
                         "train_labeled": model.n_labeled_, "loss_ratio": best["loss_ratio"],
                         "n_rules": best["n_rules"], "dev_b3_f": best["dev_b3_f"],
                         "dev_conll_f": best["dev_conll_f"], **test,
                         **referee_columns(docs["test"], data["test"], response),
                         **apply_throughput(model.rules_, variant, data["test"]),
                         "train_seconds": best["train_seconds"]})
            sweep_rows += [{k: v for k, v in r.items() if k != "model"} for r in sweep]
        _log("dev sweep:\n" + markdown_table(pd.DataFrame(sweep_rows)))

        peers = {}
        if args.no_peer:
            _log("wittgenstein skipped (--no-peer)")
        else:
            try:
                import wittgenstein
            except ImportError:
                wittgenstein = None
                _log("wittgenstein is not installed (pip install wittgenstein): no speed peer")
            if wittgenstein is not None:
                need = sorted({PEER_OF[v] for v in variants})
                for name in need:
                    which = name.split("-", 1)[1]
                    model, secs, n, n_lab = _fit_peer(train, which, args.k_optimize, args.seed)
                    positive = np.asarray(model.predict(
                        tasks_strip.features(data["test"]["pairs"]).reset_index(drop=True)),
                        dtype=bool)
                    peers[name] = secs
                    rows.append({"method": f"{name} {wittgenstein.__version__}",
                                 "train_pairs": n, "train_labeled": n_lab,
                                 "loss_ratio": np.nan, "n_rules": len(model.ruleset_.rules),
                                 "dev_b3_f": np.nan, **score(positive, data["test"]),
                                 "train_seconds": secs})
                    _log(f"{name}: {secs:.1f} s, {len(model.ruleset_.rules)} rules")

    table = pd.DataFrame(rows)
    table["peer"] = [PEER_OF.get(m, "") if PEER_OF.get(m) in peers else "" for m in table["method"]]
    table["time_ratio"] = [row.train_seconds / peers[row.peer] if row.peer else np.nan
                           for row in table.itertuples()]
    return table
