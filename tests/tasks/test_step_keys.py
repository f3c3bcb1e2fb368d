"""A step's key covers everything that changes its output: a file's bytes, what its reader
decides from the file's name, and every option.

The truth here is the reader itself: every registered step that takes a file is called on the
same bytes under many names (every suffix a reader of this project or pandas reads otherwise,
in both cases, plain and gzip-compressed, and two stems), and any two calls whose outputs differ
(one failing where the other reads is a difference: a fresh store would fail) must have
different keys.  A step added with a ``files`` parameter but no case here fails
:func:`test_every_file_parameter_has_a_case`, so a new reader cannot be missed.
"""

from __future__ import annotations

import ast
import dataclasses
import gzip
import importlib
import inspect
import io
import json
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

import scarce.tasks
from scarce.flows.leml import TableConfig
from scarce.tasks import relations, strip
from scarce.tasks.steps import Step, whole_name
from scarce.tasks.store import Store
from scarce.tasks.store.encoding import encode, table_checksum

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "data" / "examples"

#: Every ending a reader (ours, pandas', pyarrow's) may read otherwise, in both cases where
#: case matters to one of them, and none; and every ending the readers' own lists name.
ENDINGS = list(dict.fromkeys([
    "", ".txt", ".gz", ".GZ", ".txt.gz", ".csv", ".tsv", ".TSV", ".csv.gz", ".CSV.GZ",
    ".csv.bz2", ".parquet", ".jsonl", ".JSONL", ".json.gz", ".arff", ".conllu", ".conllu.gz",
    ".X.parquet", ".Y.parquet", ".x.parquet", *relations.JSONL_SUFFIXES, *strip.DOC_SUFFIXES]))
#: A name with another stem for each kind of file (a document or a source named after it).
NAMES = [f"train{e}" for e in ENDINGS] + ["other.txt", "other.csv", "other.jsonl",
                                           "other.conllu", "other.parquet"]
PLACEHOLDER = "placeholder/0"  # a ref: what a flow passes for an input (keys take refs)


def all_steps() -> dict[str, Step]:
    """Every step the project's task modules declare, by name."""
    out = {}
    for info in pkgutil.walk_packages(scarce.tasks.__path__, "scarce.tasks."):
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, Step):
                out[value.name] = value
    return out


STEPS = all_steps()


@dataclasses.dataclass
class Case:
    """A step called with its file parameter ``param`` under every name of :data:`NAMES`.

    ``contents``: the bytes written under each name (each also gzip-compressed);
    ``siblings``: other files of the folder (name -> bytes); ``call(path, tmp)``: the
    arguments (inputs as data) and the same arguments as a flow keys them (inputs as refs).
    """

    step: str
    param: str
    contents: dict[str, bytes]
    call: Callable[[Path, Path], tuple[dict[str, Any], dict[str, Any]]]
    siblings: Callable[[], dict[str, bytes]] = dict
    names: list[str] = dataclasses.field(default_factory=lambda: NAMES)

    @property
    def id(self) -> str:
        return f"{self.step}.{self.param}"


def _digest(value: Any) -> Any:
    """What an output holds, as a comparable value (the store's checksum of its encoding)."""
    if isinstance(value, dict):
        return {k: _digest(v) for k, v in sorted(value.items())}
    return table_checksum(encode(value))


def outcome(st: Step, kwargs: dict[str, Any]) -> Any:
    """The step's output digest, or ``"fails"``: a step that fails stores nothing, so a
    failure and an output are different outcomes."""
    try:
        return _digest(st.fn(**kwargs))
    except Exception:
        return "fails"


def _stored(value: Any, tmp: Path, name: str) -> bytes:
    """``value`` as the store writes it (a store-format Parquet file's bytes)."""
    store = Store(tmp / "_store")
    return store.path(store.write(f"x/{name}", value)).read_bytes()


_MADE: dict[tuple[Path, str], Any] = {}


def once(tmp: Path, what: str, make: Callable[[], Any]) -> Any:
    """``make()`` once per folder: what a case's calls share (a space, a model's files)."""
    if (tmp, what) not in _MADE:
        _MADE[(tmp, what)] = make()
    return _MADE[(tmp, what)]


# -- the samples ------------------------------------------------------------------------------
def _text(path: Path, lines: int | None = None) -> bytes:
    data = path.read_bytes()
    if lines is None:
        return data
    return b"".join(data.splitlines(keepends=True)[:lines])


XMC = _text(EXAMPLES / "leml" / "bibtex.sample.txt")
ARFF = b"""@relation tiny
@attribute f0 numeric
@attribute f1 numeric
@attribute l0 {0,1}
@attribute l1 {0,1}
@data
1,0,1,0
0,2.5,0,1
3,1,1,1
"""
TABLE_CSV = _text(EXAMPLES / "leml" / "bibtex.train.csv", 25)
TABLE_TSV = pd.read_csv(io.BytesIO(TABLE_CSV)).to_csv(sep="\t", index=False).encode()
TABLE_JSONL = _text(EXAMPLES / "leml" / "bibtex.sample.jsonl")
TABLE_PARQUET = (EXAMPLES / "leml" / "bibtex.sample.parquet").read_bytes()
SEMEVAL = _text(EXAMPLES / "relations" / "semeval.txt")
PAIRS = _text(EXAMPLES / "relations" / "pairs.jsonl")
#: A sample of every format of the relations flow (:data:`tasks.relations.READERS`).
RELATION_SAMPLES = {"semeval": SEMEVAL, "jsonl": PAIRS}

def _sentences(path: Path, n: int) -> bytes:
    """The file up to the end of its ``n``-th sentence (mentions close in their sentence)."""
    lines = path.read_bytes().splitlines(keepends=True)
    ends = [i for i, line in enumerate(lines) if not line.strip()]
    return b"".join(lines[:ends[n - 1] + 1])


CONLLU = _sentences(EXAMPLES / "strip" / "GUM_news_worship.conllu", 4)
# Without its ``# newdoc id``, a document is named after its file.
CONLLU_UNNAMED = b"".join(line for line in CONLLU.splitlines(keepends=True)
                          if not line.startswith(b"# newdoc"))

TEXT_TABLE = {**TableConfig().options(), "labels_column": "tags"}
FEATURE_TABLE = {**TEXT_TABLE, "features_column": "features"}


def _load_call(fmt: str, **extra):
    def call(path: Path, tmp: Path):
        from scarce.tasks.leml_files import label_file

        kwargs = dict(path=path, format=fmt, dtype="float32", n_labels=2 if fmt == "arff" else None,
                      normalize="none", labels_file=label_file(path, fmt)
                      if fmt == "parquet" and label_file(path, fmt).is_file() else None, **extra)
        return kwargs, kwargs
    return call


def _pair_siblings() -> dict[str, bytes]:
    """Two Parquet pairs: ``a`` and ``b`` have the same Y and different X (``train``'s X is
    the sample's): a name ending ``.Y.parquet`` is read with the X its name points to."""
    import tempfile

    tmp = Path(tempfile.mkdtemp())
    X = sp.csr_matrix(np.array([[1, 0, 2], [0, 3, 0]], dtype=np.float32))
    Y = sp.csr_matrix(np.array([[1, 0], [0, 1]], dtype=np.float32))
    return {"a.X.parquet": _stored(X, tmp, "ax"), "a.Y.parquet": _stored(Y, tmp, "ay"),
            "b.X.parquet": _stored(X * 2, tmp, "bx"), "b.Y.parquet": _stored(Y, tmp, "by"),
            "train.Y.parquet": _stored(Y, tmp, "ty")}


PAIR_X = _pair_siblings()["a.X.parquet"]


def _space(path: Path, table: dict, tmp: Path) -> tuple[Path, Path]:
    """The store-format feature and label maps of the table at ``path`` (a training space)."""
    from scarce.tasks.leml_table import table_space

    space = table_space.fn(path=path, table=table)
    out = []
    for part in ("features", "labels"):
        target = tmp / f"_{part}.parquet"
        target.write_bytes(_stored(space[part], tmp, part))
        out.append(target)
    return out[0], out[1]


def _table_space_call(table: dict, label_list: bool = False):
    def call(path: Path, tmp: Path):
        kwargs = dict(path=path, table=table, label_list=None)
        if label_list:
            lst = tmp / "_labels.txt"
            lst.write_text("engineering\nsoftware\n")
            kwargs["label_list"] = lst
        return kwargs, kwargs
    return call


def _load_table_call(table: dict, sample: bytes, suffix: str):
    def call(path: Path, tmp: Path):
        def make():
            train = tmp / f"_train{suffix}"
            train.write_bytes(sample)
            return _space(train, table, tmp)

        features, labels = once(tmp, "space", make)
        kwargs = dict(path=path, table=table, features=features, labels=labels,
                      dtype="float32", normalize="l2")
        return kwargs, kwargs
    return call


def _keep_columns_call(path: Path, tmp: Path):
    """leml-keep-columns of a table's ``tags`` column beside predictions of its rows."""
    predictions = pd.DataFrame({"row": [0, 1], "rank": [1, 1], "label": [0, 1],
                                "score": [0.5, 0.25]})
    kwargs = dict(path=path, predictions=predictions, columns=["tags"])
    return kwargs, {**kwargs, "predictions": PLACEHOLDER}


def _maps_call(part: str):
    """leml-load-table with its ``part`` map file under each name (the table fixed)."""
    def call(path: Path, tmp: Path):
        train = tmp / "_train.csv"

        def make():
            train.write_bytes(TABLE_CSV)
            return _space(train, TEXT_TABLE, tmp)

        features, labels = once(tmp, "space", make)
        maps = {"features": features, "labels": labels, part: path}
        kwargs = dict(path=train, table=TEXT_TABLE, dtype="float32", normalize="none", **maps)
        return kwargs, kwargs
    return call


def _label_list_call(path: Path, tmp: Path):
    train = tmp / "_train.csv"
    train.write_bytes(TABLE_CSV)
    kwargs = dict(path=train, table=TEXT_TABLE, label_list=path)
    return kwargs, kwargs


def _parse_call(fmt: str, source: str | None):
    def call(path: Path, tmp: Path):
        kwargs = dict(path=str(path), fmt=fmt, relation_types=None, include_other=True,
                      directed=False, source=source)
        return kwargs, kwargs
    return call


PREPROCESS = dict(window=5, max_sentence_distance=None, source_kind="etype",
                  etypes=["person"], fraction=None, seed=None)


def _preprocess_call(path: Path, tmp: Path):
    kwargs = dict(path=path, **PREPROCESS)
    return kwargs, kwargs


def _gold_clusters(path: Path) -> pd.DataFrame:
    from scarce.tasks.readers.conllu import read_conllu

    _, mentions = read_conllu(path)
    return pd.DataFrame({"doc": mentions["doc"], "mention": mentions["mention"],
                         "method": "gold", "cluster": mentions["entity"]})


def _conllu_call(sample: bytes):
    def call(path: Path, tmp: Path):
        reference = tmp / "_reference" / "train.conllu"  # its clusters as ``train.conllu``
        reference.parent.mkdir(exist_ok=True)
        reference.write_bytes(sample)
        kwargs = dict(path=path, clusters=once(tmp, "clusters",
                                               lambda: _gold_clusters(reference)))
        return kwargs, {**kwargs, "clusters": PLACEHOLDER}
    return call


EMPTY_RULES = pd.DataFrame({"rule_id": pd.Series([], dtype=np.int64),
                            "antecedent_index": pd.Series([], dtype=np.int64),
                            "feature": pd.Series([], dtype=object),
                            "op": pd.Series([], dtype=object),
                            "value": pd.Series([], dtype=object),
                            "pruned": pd.Series([], dtype=bool)})


def _apply_call(path: Path, tmp: Path):
    from scarce.tasks import strip

    def make():
        reference = tmp / "_train.conllu"
        reference.write_bytes(CONLLU)
        return strip.preprocess.fn(path=reference, **PREPROCESS)

    data = once(tmp, "pairs", make)
    kwargs = dict(path=path, pairs=data["pairs"], mentions=data["mentions"], rules=EMPTY_RULES,
                  method="ripper", kinds=strip.feature_kinds(data["pairs"]))
    return kwargs, {**kwargs, "pairs": PLACEHOLDER, "mentions": PLACEHOLDER,
                    "rules": PLACEHOLDER}


def _path_only(path: Path, tmp: Path):
    return {"path": path}, {"path": path}


def _documents_call(path: Path, tmp: Path):
    kwargs = dict(splits_file=path, documents=[{"role": "train", "split": "train",
                                                "doc_id": "d", "file": "d.conllu"}])
    return kwargs, kwargs


MODEL_TABLES = {
    "vocabulary": pd.DataFrame({"feature": [0, 1, 2], "word": ["a", "b", "c"],
                                "df": [1, 2, 1], "idf": [1.0, 0.5, 1.0]}),
    "features": pd.DataFrame({"rank": [0, 1], "feature": [2, 0], "word": ["c", "a"]}),
    "centroids": pd.DataFrame({"cluster": [0, 0, 1, 1], "rank": [0, 1, 0, 1],
                               "feature": [2, 0, 2, 0], "word": ["c", "a", "c", "a"],
                               "value": [0.5, 0.1, 0.2, 0.9]}),
    "clusters": pd.DataFrame({"cluster": [0, 1], "size": [3, 4], "label": ["x", "y"],
                              "words": ["c a", "a c"], "weights": ["0.5 0.1", "0.9 0.2"]}),
}


def _model_call(part: str):
    def call(path: Path, tmp: Path):
        def make():
            files = {}
            for name, table in MODEL_TABLES.items():
                target = tmp / f"_{name}.parquet"
                target.write_bytes(_stored(table, tmp, name))
                files[name] = str(target)
            return files

        kwargs = {**once(tmp, "model", make), part: str(path)}
        return kwargs, kwargs
    return call


SCORE_ARRAYS = {"W": np.array([[0.5, -1.0], [1.0, 0.25], [0.0, 2.0]], dtype=np.float32),
                "H": np.array([[1.0, 0.0], [0.5, 0.5]], dtype=np.float32),
                "labels": pd.DataFrame({"label": [0, 1], "name": ["p", "q"]}),
                "propensity": np.array([1.5, 2.0])}


def _score_call(part: str):
    def call(path: Path, tmp: Path):
        from scarce.algorithms.leml import LEML
        from scarce.tasks.leml import score, task_params

        def make():
            files = {}
            for name, value in SCORE_ARRAYS.items():
                files[name] = tmp / f"_{name}.parquet"
                files[name].write_bytes(_stored(value, tmp, name))
            files["path"] = tmp / "_new.txt"
            files["path"].write_bytes(XMC)
            return files

        files = {**once(tmp, "model", make), part: path}
        X = sp.csr_matrix(np.array([[1, 0, 2], [0, 1, 0]], dtype=np.float32))
        Y = sp.csr_matrix(np.array([[1, 0], [1, 1]], dtype=np.float32))
        model = LEML(rank=2, fit_intercept=False, dtype="float32")
        kwargs = dict(X=X, Y=Y, format="xmc", shapes={"W": [3, 2], "H": [2, 2]},
                      params=task_params(model, score), top_k=2, batch_size=8,
                      method="leml", source="new.txt", **files)
        return kwargs, {**kwargs, "X": PLACEHOLDER, "Y": PLACEHOLDER}
    return call


def _model_contents(part: str) -> dict[str, bytes]:
    import tempfile

    return {"model": _stored(MODEL_TABLES[part], Path(tempfile.mkdtemp()), part)}


def _score_contents(part: str) -> dict[str, bytes]:
    import tempfile

    if part == "path":
        return {"xmc": XMC}
    return {"entry": _stored(SCORE_ARRAYS[part], Path(tempfile.mkdtemp()), part)}


def _rules_contents() -> dict[str, bytes]:
    import tempfile

    return {"rules": _stored(EMPTY_RULES, Path(tempfile.mkdtemp()), "rules")}


CASES = [
    Case("leml-load", "path", {"xmc": XMC, "arff": ARFF}, _load_call("xmc")),
    Case("leml-load", "path", {"xmc": XMC, "arff": ARFF}, _load_call("arff")),
    Case("leml-load", "path", {"pair-x": PAIR_X}, _load_call("parquet"),
         siblings=_pair_siblings,
         names=[*NAMES, "a.X.parquet", "a.Y.parquet", "b.X.parquet", "b.Y.parquet"]),
    Case("leml-load", "path", {"pair-x": PAIR_X}, _load_call("parquet", with_labels=False),
         siblings=_pair_siblings,
         names=[*NAMES, "a.X.parquet", "a.Y.parquet", "b.X.parquet", "b.Y.parquet"]),
    Case("leml-load", "labels_file", {"pair-y": _pair_siblings()["a.Y.parquet"]},
         lambda path, tmp: _pair_labels_call(path, tmp), siblings=_pair_siblings),
    Case("leml-table-space", "path", {"csv": TABLE_CSV, "tsv": TABLE_TSV},
         _table_space_call(TEXT_TABLE)),
    Case("leml-table-space", "path", {"jsonl": TABLE_JSONL, "parquet": TABLE_PARQUET},
         _table_space_call(FEATURE_TABLE)),
    Case("leml-table-space", "label_list", {"list": b"engineering\nsoftware\n"},
         _label_list_call),
    Case("leml-load-table", "path", {"csv": TABLE_CSV, "tsv": TABLE_TSV},
         _load_table_call(TEXT_TABLE, TABLE_CSV, ".csv")),
    Case("leml-load-table", "path", {"jsonl": TABLE_JSONL, "parquet": TABLE_PARQUET},
         _load_table_call(FEATURE_TABLE, TABLE_JSONL, ".jsonl")),
    Case("leml-load-table", "features", {"features": b""}, _maps_call("features")),
    Case("leml-keep-columns", "path", {"csv": TABLE_CSV, "tsv": TABLE_TSV},
         _keep_columns_call),
    Case("leml-load-table", "labels", {"labels": b""}, _maps_call("labels")),
    Case("leml-score", "path", _score_contents("path"), _score_call("path")),
    *[Case("leml-score", part, _score_contents(part), _score_call(part))
      for part in ("W", "H", "labels", "propensity")],
    *[Case("relations-parse", "path", RELATION_SAMPLES, _parse_call(fmt, None))
      for fmt in ("auto", *relations.READERS)],
    Case("relations-parse", "path", RELATION_SAMPLES, _parse_call("auto", "given.txt")),
    *[Case("relations-read-model", part, _model_contents(part), _model_call(part))
      for part in MODEL_TABLES],
    Case("strip-preprocess", "path", {"named": CONLLU, "unnamed": CONLLU_UNNAMED},
         _preprocess_call),
    Case("strip-conllu", "path", {"named": CONLLU}, _conllu_call(CONLLU)),
    Case("strip-conllu", "path", {"unnamed": CONLLU_UNNAMED}, _conllu_call(CONLLU_UNNAMED)),
    Case("strip-apply", "path", {"named": CONLLU}, _apply_call),
    Case("strip-model-rules", "path", _rules_contents(), _path_only),
    Case("strip-documents", "splits_file", {"splits": b"doc_id\tsplit\nd\ttrain\n"},
         _documents_call),
]


def _pair_labels_call(path: Path, tmp: Path):
    """leml-load of the pair ``a`` with its labels file under each name."""
    kwargs = dict(path=tmp / "a.X.parquet", format="parquet", dtype="float32", n_labels=None,
                  normalize="none", labels_file=path)
    return kwargs, kwargs


# The maps of leml-load-table are written by the call itself: their case's contents are
# replaced by the store-format bytes of the training space, made once.
def _map_bytes(part: str) -> bytes:
    import tempfile

    tmp = Path(tempfile.mkdtemp())
    train = tmp / "t.csv"
    train.write_bytes(TABLE_CSV)
    return _space(train, TEXT_TABLE, tmp)[0 if part == "features" else 1].read_bytes()


for _case in CASES:
    if _case.step == "leml-load-table" and _case.param in ("features", "labels"):
        _case.contents = {_case.param: _map_bytes(_case.param)}


def test_every_relations_format_has_a_sample(tmp_path):
    """The parse cases read a sample of every format the relations flow takes, each under
    every name (and with every ``format``), so a new reader cannot be missed."""
    assert set(RELATION_SAMPLES) == set(relations.READERS)
    for fmt, sample in RELATION_SAMPLES.items():
        (tmp_path / fmt).write_bytes(sample)
        assert not relations.READERS[fmt](tmp_path / fmt).empty


def test_every_file_parameter_has_a_case():
    declared = {(s.name, f) for s in STEPS.values() for f in s.files}
    assert declared, "no step declares a file"
    covered = {(c.step, c.param) for c in CASES}
    assert declared - covered == set(), "a file parameter without a case here"
    assert covered - declared == set()


def _prepare(case: Case, folder: Path, content: bytes) -> None:
    """``folder`` holding the case's siblings and ``content`` under each of its names."""
    folder.mkdir(parents=True, exist_ok=True)
    siblings = case.siblings()
    for name, data in siblings.items():
        (folder / name).write_bytes(data)
    for name in case.names:
        if name not in siblings:
            (folder / name).write_bytes(content)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_calls_that_read_differently_have_different_keys(case, tmp_path):
    """Over every name and content: calls with one key give one outcome."""
    st = STEPS[case.step]
    by_key: dict[str, dict[Any, str]] = {}
    outcomes = set()
    for kind, data in case.contents.items():
        for compressed in (False, True):
            folder = tmp_path / f"{kind}-{'gz' if compressed else 'plain'}"
            _prepare(case, folder, gzip.compress(data, mtime=0) if compressed else data)
            for name in case.names:
                kwargs, keyed = case.call(folder / name, folder)
                got = outcome(st, kwargs)
                outcomes.add(json.dumps(got, sort_keys=True))
                key = st.key(keyed)
                by_key.setdefault(key, {}).setdefault(json.dumps(got, sort_keys=True),
                                                     f"{folder.name}/{name}")
    shared = {k: v for k, v in by_key.items() if len(v) > 1}
    assert not shared, f"one key, different outcomes: {list(shared.values())[:3]}"
    assert any(o != '"fails"' for o in outcomes), "no name of this case is read at all"


def test_a_tsv_and_the_same_bytes_named_csv_have_different_keys(tmp_path):
    """``train.tsv`` and a byte-identical ``train_tabs.csv``: the CSV has no column ``text``
    (it fails), so the two calls cannot share an entry."""
    st = STEPS["leml-table-space"]
    (tmp_path / "train.tsv").write_bytes(TABLE_TSV)
    (tmp_path / "train_tabs.csv").write_bytes(TABLE_TSV)
    calls = [dict(path=tmp_path / n, table=TEXT_TABLE, label_list=None)
             for n in ("train.tsv", "train_tabs.csv")]
    assert outcome(st, calls[0]) != "fails" and outcome(st, calls[1]) == "fails"
    assert st.key(calls[0]) != st.key(calls[1])


def test_a_rename_that_reads_the_same_keeps_the_key(tmp_path):
    """The rules are the readers' (not the whole name): ``train.txt`` and ``data.dat`` are the
    same Extreme Classification file, ``a.csv`` and ``b.csv`` the same table."""
    for a, b, st, extra in (
            ("train.txt", "data.dat", "leml-load",
             dict(format="xmc", dtype="float32", n_labels=None, normalize="none")),
            ("a.csv", "b.csv", "leml-table-space", dict(table=TEXT_TABLE, label_list=None))):
        (tmp_path / a).write_bytes(TABLE_CSV if a.endswith(".csv") else XMC)
        (tmp_path / b).write_bytes(TABLE_CSV if a.endswith(".csv") else XMC)
        assert (STEPS[st].key({"path": tmp_path / a, **extra})
                == STEPS[st].key({"path": tmp_path / b, **extra}))


def test_a_file_parameter_without_a_rule_is_keyed_by_its_whole_name(tmp_path):
    from scarce.tasks.steps import step

    @step("test-undeclared", files=("path",))
    def read(path: Path) -> pd.DataFrame:
        return pd.DataFrame({"n": [len(path.read_bytes())]})

    assert read.names == {"path": whole_name}
    for name in ("a.txt", "a.TXT", "b.txt"):
        (tmp_path / name).write_bytes(b"x")
    keys = {read.key({"path": tmp_path / n}) for n in ("a.txt", "a.TXT", "b.txt")}
    assert len(keys) == 3
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_bytes(b"x")  # the same name elsewhere: the same entry
    assert read.key({"path": tmp_path / "sub" / "a.txt"}) == read.key({"path": tmp_path / "a.txt"})


# -- options: every argument but the runtime ones is in the key --------------------------------
def _leaves(value: Any, prefix: tuple = ()) -> list[tuple]:
    if isinstance(value, dict):
        return [leaf for k, v in value.items() for leaf in _leaves(v, (*prefix, k))]
    return [prefix]


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, value[-1] if value else 1]
    return "x"


def _replace(value: dict, path: tuple, new: Any) -> dict:
    out = json.loads(json.dumps(value))
    target = out
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = new
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_option_changes_the_key(case, tmp_path):
    """Each argument a call is keyed by (each leaf of a mapping such as a table's reader and
    vectoriser options) changes the key when it changes; a runtime argument never does, and
    never changes the output (it may only refuse the call)."""
    st = STEPS[case.step]
    kwargs, keyed = _first_read(case, tmp_path)
    base = st.key(keyed)
    fixed = {*st.inputs, *st.files, *st.paths, *st.runtime}
    for arg, value in keyed.items():
        if arg in fixed:
            continue
        for leaf in _leaves(value) if isinstance(value, dict) else [()]:
            if leaf:
                changed = {**keyed, arg: _replace(value, leaf, _changed(_get(value, leaf)))}
            else:
                changed = {**keyed, arg: _changed(value)}
            assert st.key(changed) != base, f"{arg}{'.' + '.'.join(leaf) if leaf else ''}"
    want = outcome(st, kwargs)
    for arg in st.runtime:
        default = inspect.signature(st.fn).parameters[arg].default
        for value in (default, _changed(default) if default is not None else {}):
            assert st.key({**keyed, arg: value}) == base
            got = outcome(st, {**kwargs, arg: value})
            assert got in (want, "fails"), f"runtime {arg}={value!r} changed the output"


def _first_read(case: Case, tmp: Path) -> tuple[dict, dict]:
    """The arguments of the case's first call (by content, then name) that reads."""
    st = STEPS[case.step]
    for k, content in enumerate(case.contents.values()):
        folder = tmp / str(k)
        _prepare(case, folder, content)
        for name in case.names:
            call = case.call(folder / name, folder)
            if outcome(st, call[0]) != "fails":
                return call
    raise AssertionError("no name of this case is read at all")


def _get(value: dict, path: tuple) -> Any:
    for k in path:
        value = value[k]
    return value


def test_the_table_options_are_every_reader_and_vectoriser_option():
    """The table steps are keyed by ``TableConfig.options()``: every field of the table and
    of its vectoriser but the label list (a file, keyed by its bytes)."""
    from scarce.flows.leml import TableConfig, VectorizerConfig

    options = TableConfig().options()
    assert set(options) == set(TableConfig.model_fields) - {"label_list"}
    assert set(options["vectorizer"]) == set(VectorizerConfig.model_fields)


def test_store_format_parquet_is_read_by_its_bytes_alone(tmp_path):
    """pyarrow takes nothing from a Parquet file's name: the maps and model files above are
    rightly keyed by content (a check of the premise, not of our code)."""
    data = _stored(pd.DataFrame({"a": [1, 2]}), tmp_path, "t")
    for name in ("x.parquet", "x.csv", "x.gz", "x"):
        (tmp_path / name).write_bytes(data)
        assert pq.read_table(tmp_path / name).to_pandas()["a"].tolist() == [1, 2]


# -- the environment ---------------------------------------------------------------------------
#: The variables the steps' code (algorithms/, tasks/) reads, each with the test showing that it
#: changes no output: it may only refuse a call.
ENVIRONMENT_READ = {
    "SCARCE_MEMORY_LIMIT_GB": "tests/algorithms/leml/test_terms.py::"
                              "test_bound_solvers_give_the_same_bits_under_any_memory_limit",
}


def test_the_steps_read_no_environment_variable_that_could_change_an_output():
    """Every read of the environment under algorithms/ and tasks/ (``os.environ``,
    ``os.getenv``) names a variable of :data:`ENVIRONMENT_READ`: a new one must be put in
    the keys of the steps it changes, or shown to change no output."""
    import ast

    read = set()
    for package in ("algorithms", "tasks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            constants = {t.id: n.value.value for n in ast.walk(tree)
                         if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                         for t in n.targets if isinstance(t, ast.Name)}
            for node in ast.walk(tree):
                arg = None
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                        node.func.attr == "getenv" or (node.func.attr in ("get", "setdefault")
                                                       and _is_environ(node.func.value))):
                    arg = node.args[0] if node.args else None
                elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                    arg = node.slice
                elif isinstance(node, ast.Attribute) and node.attr == "environ" \
                        and not _used_by_key(tree, node):
                    read.add(f"{path.relative_to(ROOT)}: os.environ as a whole")
                    continue
                else:
                    continue
                name = (arg.value if isinstance(arg, ast.Constant)
                        else constants.get(getattr(arg, "id", None), ast.dump(arg)))
                read.add(name)
    assert read == set(ENVIRONMENT_READ)


def _is_environ(node: Any) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _used_by_key(tree: Any, node: Any) -> bool:
    """Whether this ``os.environ`` is the object of a ``.get``/``[...]`` read counted above."""
    return any(isinstance(parent, ast.Attribute | ast.Subscript) and parent.value is node
               for parent in ast.walk(tree))
