"""A run's command in a fresh store gives the run's outputs, for every document format the StRip
flow reads, however many runs the store has cached before it.

The formats are the flow's own: a document is ``<doc_id>`` with a suffix of
:data:`tasks.strip.DOC_SUFFIXES` (CoNLL-U, plain or gzipped), its id its ``# newdoc id`` or,
when it names none, its file's name; the splits file is tab-separated text, plain or gzipped.
One store holds, in turn, a run of three GUM documents in each format, then of files
byte-identical to an earlier run's under names read otherwise: gzipped documents under plain
names (they fail), documents without ``# newdoc id`` under other names (other document ids), a
gzipped splits file under a plain name (it fails); then the same documents in another folder
and the first command again (every step from the store).  Each command is then run again in a
store of its own: it must end as it did (the same exit code) with the same metrics and named
outputs, the predicted CoNLL-U files among them.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from scarce.tasks import strip
from scarce.tasks.store import Store
from tests.flows.helpers import (
    again_in_a_fresh_store,
    assert_same_outputs,
    every_command_in_one_store,
    strip_project,
)

pytestmark = pytest.mark.usefixtures("prefect_server")

GUM = Path(__file__).resolve().parents[2] / "data" / "coref" / "gum"
TRAIN = ["GUM_news_stampede", "GUM_news_worship"]
TEST = "GUM_news_crane"
DOCS = [*TRAIN, TEST]
#: The documents under other names (read without ``# newdoc id``: other document ids).
RENAMED = {d: f"renamed_{k}" for k, d in enumerate(DOCS)}


def _suffix_folder(suffix: str) -> str:
    return "docs" + suffix.replace(".", "-")


def _splits(names: dict[str, str]) -> bytes:
    return ("doc_id\tsplit\n" + "".join(
        f"{names[d]}\t{'test' if d == TEST else 'train'}\n" for d in DOCS)).encode()


def _unnamed(text: bytes) -> bytes:
    """The document without its ``# newdoc id`` line: named after its file."""
    return b"".join(line for line in text.splitlines(keepends=True)
                    if not line.startswith(b"# newdoc"))


def _commands() -> list[tuple[str, list[str], bool]]:
    """Every command in the order the shared store sees them: name, ``--set`` values, and
    whether it reads."""
    out = [(f"documents{suffix}", [f"data_dir={_suffix_folder(suffix)}"], True)
           for suffix in strip.DOC_SUFFIXES]
    plain, gz = _suffix_folder(".conllu"), _suffix_folder(".conllu.gz")
    out += [
        ("gz-named-plain", ["data_dir=gz-named-plain"], False),
        ("unnamed", ["data_dir=unnamed"], True),
        ("unnamed-renamed", ["data_dir=unnamed-renamed", "splits_file=splits-renamed.tsv"],
         True),
        ("splits.tsv.gz", [f"data_dir={plain}", "splits_file=splits.tsv.gz"], True),
        ("splits-gz-named-plain", [f"data_dir={plain}", "splits_file=splits_gz.tsv"], False),
        ("moved", [f"data_dir=moved/{gz}"], True),
        ("again", out[0][1], True),
    ]
    return out


COMMANDS = _commands()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = strip_project(tmp_path_factory.mktemp("strip-keys"), "unset", TRAIN, TEST)
    texts = {d: gzip.decompress((GUM / f"{d}.conllu.gz").read_bytes()) for d in DOCS}
    folders = {name: root / name for name in
               ("gz-named-plain", "unnamed", "unnamed-renamed", "moved")}
    for suffix in strip.DOC_SUFFIXES:
        folders[suffix] = root / _suffix_folder(suffix)
    for folder in folders.values():
        folder.mkdir()
    (root / "moved" / _suffix_folder(".conllu.gz")).mkdir()
    for d, text in texts.items():
        for suffix in strip.DOC_SUFFIXES:
            data = gzip.compress(text, mtime=0) if suffix.endswith(".gz") else text
            (folders[suffix] / f"{d}{suffix}").write_bytes(data)
        gz = folders[".conllu.gz"] / f"{d}.conllu.gz"
        # byte-identical files under names read otherwise
        shutil.copy(gz, root / "gz-named-plain" / f"{d}.conllu")
        shutil.copy(gz, root / "moved" / _suffix_folder(".conllu.gz") / gz.name)
        (root / "unnamed" / f"{d}.conllu").write_bytes(_unnamed(text))
        (root / "unnamed-renamed" / f"{RENAMED[d]}.conllu").write_bytes(_unnamed(text))
    (root / "splits-renamed.tsv").write_bytes(_splits(RENAMED))
    (root / "splits.tsv.gz").write_bytes(gzip.compress((root / "splits.tsv").read_bytes(),
                                                       mtime=0))
    shutil.copy(root / "splits.tsv.gz", root / "splits_gz.tsv")
    with (root / "configs" / "strip.yaml").open("a") as fh:
        fh.write("dataset: keys\n")
    return root


@pytest.fixture(scope="module")
def shared(project):
    """Every command of :data:`COMMANDS` run in turn in one store: name -> (exit code, run
    folder, error output)."""
    return every_command_in_one_store(project, "strip", COMMANDS)


def test_documents_read_as_before_are_served_from_the_store(shared):
    """The same bytes under the same names, in another folder or again: every step is a cache
    hit (and the test below finds the outputs equal to a fresh store's)."""
    for name in ("moved", "again"):
        m = json.loads((shared[name][1] / "manifest.json").read_text())
        assert all(o["cached"] for o in m["outputs"]), name


def test_documents_named_by_their_files_take_the_files_names(project, shared):
    """The premise of ``unnamed-renamed``: byte-identical documents under other names are other
    documents (their ids in the mentions the run's preprocess steps stored)."""
    m = json.loads((shared["unnamed-renamed"][1] / "manifest.json").read_text())
    store = Store(project / "shared-store")
    docs = {d for o in m["outputs"] if o["step"] == "strip-preprocess"
            and o["ref"].endswith("-mentions") for d in store.read(o["ref"])["doc"]}
    assert docs == set(RENAMED.values())


@pytest.mark.parametrize("name,settings,reads", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_runs_command_in_a_fresh_store_gives_its_outputs(project, shared, name, settings,
                                                          reads, tmp_path, capsys):
    folder, fresh, _ = again_in_a_fresh_store(project, "strip", shared, name, settings, reads,
                                              tmp_path / "fresh-store", capsys)
    if not reads:
        assert shared[name][0] == 2
        return
    assert_same_outputs(fresh, folder)
