"""A run's command in a fresh store gives the run's outputs, for every reader and format the
relation discovery flow takes, however many runs the store has cached before it.

The formats are the flow's own (:data:`tasks.relations.READERS`), each under every name
``format: auto`` reads in it (:data:`tasks.relations.JSONL_SUFFIXES`, any other name SemEval),
plain and gzipped.  One store holds, in turn, a run of each, then of files byte-identical to
an earlier run's under names read otherwise: each format's bytes under a name of another (read
as that one: it fails; with ``format`` given: it reads), a gzipped file under a plain name, the
same file under another name (its pairs listed under that name), the same file in another
folder (every step from the store), two files of two formats, and last the first command again
(every step from the store).  Each command is then run again in a store of its own: it
must end as it did (the same exit code) with the same metrics and named outputs.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from scarce.tasks import relations as rel
from scarce.tasks.readers.semeval import read_semeval
from tests.flows.helpers import (
    again_in_a_fresh_store,
    assert_same_outputs,
    every_command_in_one_store,
)

pytestmark = pytest.mark.usefixtures("prefect_server")

REPO = Path(__file__).resolve().parents[2]
SEMEVAL = REPO / "data" / "relations" / "semeval2010_task8" / "TRAIN_FILE.TXT"
RECORDS = 120  # SemEval records (four lines each) of the sample; about 100 pairs are not Other

CONFIG = """
seed: 1
dataset: keys
data: [pairs.txt]
min_df: 1
k_low: 2
k_high: 4
n_prefixes: 2
min_prefix: 10
theta: 0.5
n_init: 1
n_subsamples: 2
baselines: false
"""

#: Per format of the flow, the names ``format: auto`` reads in it (each also with ``.gz``).
AUTO_NAMES = {"semeval": ["pairs.txt"], "jsonl": [f"pairs{s}" for s in rel.JSONL_SUFFIXES]}


def _semeval_sample() -> bytes:
    return b"".join(SEMEVAL.read_bytes().splitlines(keepends=True)[:4 * RECORDS])


def _jsonl_sample(semeval: Path) -> bytes:
    """The pairs of the SemEval sample in the JSON Lines schema (its directed labels)."""
    frame = read_semeval(semeval)
    return "".join(json.dumps({"id": int(r.id), "tokens": list(r.tokens),
                               "head": [int(r.e1_start), int(r.e1_end)],
                               "tail": [int(r.e2_start), int(r.e2_end)], "label": r.label}) + "\n"
                   for r in frame.itertuples()).encode()


def _misnamed(fmt: str, other: str) -> str:
    """The name of the bytes of ``fmt`` under a name ``auto`` reads as ``other``."""
    return f"{fmt}-bytes{Path(AUTO_NAMES[other][0]).suffix}"


def _commands() -> list[tuple[str, list[str], bool]]:
    """Every command in the order the shared store sees them: name, ``--set`` values, and
    whether it reads."""
    out = []
    for fmt, names in AUTO_NAMES.items():
        for name in names:
            out.append((f"{fmt}{Path(name).suffix}", [f"data=[{name}]"], True))
            out.append((f"{fmt}{Path(name).suffix}.gz", [f"data=[{name}.gz]"], True))
    for fmt in rel.READERS:
        for other in rel.READERS:
            if other != fmt:
                # read first (format given), so that a key missing the format would serve
                # its entries to the command that reads it as the other format
                name = _misnamed(fmt, other)
                out.append((f"{fmt}-named-{other}-format-{fmt}",
                            [f"data=[{name}]", f"format={fmt}"], True))
                out.append((f"{fmt}-named-{other}", [f"data=[{name}]"], False))
    out += [("gz-named-plain", ["data=[pairs_gz.txt]"], False),
            ("renamed", ["data=[other.txt]"], True),
            ("moved", ["data=[moved/pairs.txt]"], True),
            ("two-files", ["data=[pairs.txt, pairs.jsonl]"], True),
            ("again", out[0][1], True)]
    return out


COMMANDS = _commands()


@pytest.fixture(scope="module")
def project(make_project):
    root = make_project("relations-keys", {"relations.yaml": CONFIG})
    (root / "pairs.txt").write_bytes(_semeval_sample())
    samples = {"semeval": _semeval_sample(), "jsonl": _jsonl_sample(root / "pairs.txt")}
    assert set(samples) == set(rel.READERS)
    for fmt, names in AUTO_NAMES.items():
        for name in names:
            (root / name).write_bytes(samples[fmt])
            (root / f"{name}.gz").write_bytes(gzip.compress(samples[fmt], mtime=0))
        for other in rel.READERS:
            if other != fmt:
                (root / _misnamed(fmt, other)).write_bytes(samples[fmt])
    # byte-identical files under names read otherwise, and under another name read the same
    shutil.copy(root / "pairs.txt.gz", root / "pairs_gz.txt")
    shutil.copy(root / "pairs.txt", root / "other.txt")
    (root / "moved").mkdir()
    shutil.copy(root / "pairs.txt", root / "moved" / "pairs.txt")
    return root


@pytest.fixture(scope="module")
def shared(project):
    """Every command of :data:`COMMANDS` run in turn in one store: name -> (exit code, run
    folder, error output)."""
    return every_command_in_one_store(project, "relations", COMMANDS)


def test_a_file_read_as_before_is_served_from_the_store(shared):
    """The same bytes under the same name, in another folder or again: every step is a cache
    hit (and the test above finds its outputs equal to a fresh store's)."""
    for name in ("moved", "again"):
        m = json.loads((shared[name][1] / "manifest.json").read_text())
        assert all(o["cached"] for o in m["outputs"]), name


def test_the_commands_cover_every_format_and_name_rule():
    """Each format of the flow is read under each name ``auto`` reads it by (checked with the
    flow's own rule), plain and gzipped, and under a name of each other format."""
    assert set(AUTO_NAMES) == set(rel.READERS)
    for fmt, names in AUTO_NAMES.items():
        for name in names:
            assert rel.detect_format(name, "auto") == fmt
            assert rel.detect_format(f"{name}.gz", "auto") == fmt
        for other in set(rel.READERS) - {fmt}:
            assert rel.detect_format(_misnamed(fmt, other), "auto") == other
    assert len({name for name, _, _ in COMMANDS}) == len(COMMANDS)


@pytest.mark.parametrize("name,settings,reads", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_runs_command_in_a_fresh_store_gives_its_outputs(project, shared, name, settings,
                                                          reads, tmp_path, capsys):
    folder, fresh, _ = again_in_a_fresh_store(project, "relations", shared, name, settings, reads,
                                              tmp_path / "fresh-store", capsys)
    if not reads:
        assert shared[name][0] == 2
        return
    assert_same_outputs(fresh, folder)
