"""``scarce bench leml --sections peers`` (bench.leml_peers): each method in its own fresh
process, scored here on one table."""

from __future__ import annotations

import importlib.util
import math
import stat
import sys
import textwrap

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from scarce.algorithms.leml import LEML
from scarce.bench import leml as bench
from scarce.bench.leml_peers import as_ranking, rotation, run_child, write_split
from tests.bench.tables import leml_table
from tests.bench.test_leml import BIBTEX, _head

# LEML at an explicit setting, so the test can fit the same estimator itself.
SETTING = ["--datasets", "bibtex", "--sections", "peers", "--set", "rank=16",
           "--set", "lam=0.3", "--set", "outer_iterations=3"]
PEERS = {"pecos": "libpecos", "napkinxc": "napkinxc", "omikuji": "omikuji"}
METRICS = ["train seconds", "predict ms per 1,000 test rows", "peak added RSS MiB", "P@1",
           "P@3", "P@5", "train time / LEML", "peak / LEML"]

# Stand-ins for the peers' libraries, first on the PYTHONPATH of a wrapper interpreter:
# PECOS and napkinXC fail to import; omikuji ranks at most 3 labels (the most frequent in
# training), holds 40 MiB while training, and crashes when PEERS_STUB_CRASH is set.
STUB_OMIKUJI = '''
import os
from collections import Counter

import numpy as np


class Model:
    def __init__(self, labels):
        self.labels = labels

    @classmethod
    def train_on_data(cls, path, n_threads=None):
        if os.environ.get("PEERS_STUB_CRASH"):
            raise RuntimeError("the stub omikuji crashed")
        counts = Counter()
        with open(path) as fh:
            next(fh)
            for line in fh:
                head = line.split(" ", 1)[0]
                counts.update(int(j) for j in head.split(",") if j and ":" not in j)
        held = np.ones(40 * 2**20, dtype=np.uint8)
        held.sum()
        return cls([j for j, _ in sorted(counts.items(), key=lambda c: (-c[1], c[0]))[:3]])

    def predict(self, pairs, beam_size=10, top_k=10):
        return [(j, 1.0) for j in self.labels[:top_k]]
'''


def _p_at(Y, top, k):
    """P@k in %, counted directly: the true labels among each row's first k, over k."""
    dense = Y.toarray() != 0
    return 100 * np.take_along_axis(dense, top[:, :k], axis=1).sum(axis=1).mean() / k


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("data")
    for part, rows in (("train", 300), ("test", 150)):
        name = f"bibtex_xmlrepo_{part}.txt.gz"
        _head(BIBTEX / name, folder / "xmc" / "bibtex" / name, rows)
    return folder


@pytest.fixture(scope="module")
def split(data):
    Xtr, Ytr, Xte, Yte = bench._load(data, "bibtex")
    Xtr, Xte = bench._preprocess("l2", Xtr, Xte)
    return Xtr, Ytr, Xte, Yte


@pytest.fixture(scope="module")
def stub_python(tmp_path_factory):
    """An interpreter (this one) that finds the stand-in libraries first."""
    folder = tmp_path_factory.mktemp("stubs")
    for blocked in ("pecos", "napkinxc"):
        (folder / blocked).mkdir()
        (folder / blocked / "__init__.py").write_text(
            f"raise ImportError('{blocked} is blocked in this test')\n")
    (folder / "omikuji").mkdir()
    (folder / "omikuji" / "__init__.py").write_text(textwrap.dedent(STUB_OMIKUJI))
    (folder / "omikuji-0.0.1.dist-info").mkdir()
    (folder / "omikuji-0.0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: omikuji\nVersion: 0.0.1\n")
    python = folder / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{folder}${{PYTHONPATH:+:$PYTHONPATH}}" '
                      f'exec "{sys.executable}" "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


@pytest.mark.slow
def test_leml_in_its_own_process_scores_as_in_this_one_and_missing_peers_are_skipped(
        data, split, capsys):
    table = leml_table("--data", str(data), "--quick", *SETTING,
                       "--peer-python", sys.executable)
    err = capsys.readouterr().err

    Xtr, Ytr, Xte, Yte = split
    with threadpool_limits(1):  # as in the child
        top = LEML(rank=16, lam=0.3, outer_iterations=3, loss="squared",
                   random_state=0).fit(Xtr, Ytr).predict_top_k(Xte, 5)
    for k in (1, 3, 5):
        assert table[("LEML squared", f"P@{k}")] == pytest.approx(_p_at(Yte, top, k), abs=1e-4)
    peak = table[("LEML squared", "peak added RSS MiB")]
    if sys.platform.startswith("linux"):
        assert math.isfinite(peak) and peak > 0
    assert table[("LEML squared", "train seconds")] > 0
    assert table[("LEML squared", "predict ms per 1,000 test rows")] > 0
    assert table[("LEML squared", "train time / LEML")] == 1
    missing = [m for m in PEERS if importlib.util.find_spec(m) is None]
    assert missing, "a test of the skip needs a peer missing from this environment"
    for module in missing:
        assert (f"skipped (pip install {PEERS[module]} in the --peer-python environment)"
                in err)
    ran = {method for method, _ in table.index}
    assert len(ran) == 1 + len(PEERS) - len(missing)


@pytest.mark.slow
def test_a_peer_gets_its_row_and_ratios_and_the_missing_ones_are_left_out(
        data, split, stub_python, capsys):
    table = leml_table("--data", str(data), *SETTING, "--repeats", "2",
                       "--peer-python", str(stub_python))
    err = capsys.readouterr().err

    assert set(table.index) == {(m, metric) for m in ("LEML squared", "omikuji")
                                for metric in METRICS}
    for dist in ("libpecos", "napkinxc"):
        assert f"skipped (pip install {dist} in the --peer-python environment)" in err
    # Repeat 2 starts at the second of the methods that run.
    starts = [line.split(": ")[1].split(",")[0] for line in err.splitlines()
              if ", repeat " in line and "skipped" not in line]
    assert starts == ["LEML squared", "PECOS XR-Linear", "napkinXC PLT", "omikuji",
                      "omikuji", "LEML squared"]
    # The stub ranks 3 labels: the 4th and 5th places count as misses.
    _, Ytr, _, Yte = split
    frequent = np.argsort(-np.asarray(Ytr.sum(axis=0)).ravel(), kind="stable")[:3]
    top = np.tile(frequent, (Yte.shape[0], 1))
    assert table[("omikuji", "P@3")] == pytest.approx(_p_at(Yte, top, 3), abs=1e-4)
    assert table[("omikuji", "P@5")] == pytest.approx(3 / 5 * _p_at(Yte, top, 3), abs=1e-4)
    # the stub touches 40 MiB while training; pages the process freed after the peak was
    # reset may absorb a few of them
    assert 36 <= table[("omikuji", "peak added RSS MiB")] < 60
    for metric, ratio in (("train seconds", "train time / LEML"),
                          ("peak added RSS MiB", "peak / LEML")):
        value, base = table[("omikuji", metric)], table[("LEML squared", metric)]
        # The table holds 4 decimals: the ratio of rounded values is off by at most this.
        rounding = 0.5e-4 * (1 + (1 + value / base) / base)
        assert table[("omikuji", ratio)] == pytest.approx(value / base, abs=rounding)
        assert table[("LEML squared", ratio)] == 1


@pytest.mark.slow
def test_a_crashing_peer_raises_with_the_end_of_its_stderr(split, stub_python, tmp_path,
                                                           monkeypatch):
    Xtr, Ytr, Xte, _ = split
    write_split(tmp_path, Xtr, Ytr, Xte)
    monkeypatch.setenv("PEERS_STUB_CRASH", "1")
    with pytest.raises(RuntimeError, match="the stub omikuji crashed"):
        run_child(str(stub_python), "omikuji", tmp_path, {})


def test_each_repeat_starts_one_method_later():
    methods = ["a", "b", "c"]
    assert [rotation(methods, r) for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_an_absent_prediction_counts_as_a_miss():
    import scipy.sparse as sp

    Y = sp.csr_matrix(np.array([[1, 1, 0, 0], [0, 0, 0, 1]]))
    given = np.array([[0, -1, -1], [3, 2, -1]])
    top = as_ranking(given, Y)
    assert np.array_equal(top[given >= 0], given[given >= 0])
    assert all(Y[i, top[i, j]] == 0 for i, j in zip(*np.nonzero(given < 0), strict=True))
