"""``scarce bench leml --quick`` on a small sample of the bundled Bibtex data."""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np
import pytest

from scarce.bench import leml as bench
from scarce.tasks.readers.xmc import read_xmc

BIBTEX = Path(__file__).resolve().parents[2] / "data" / "xmc" / "bibtex"


def _head(src: Path, dst: Path, rows: int) -> None:
    with gzip.open(src, "rt") as fh:
        lines = fh.read().splitlines()
    _, d, labels = lines[0].split()
    dst.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(dst, "wt") as fh:
        fh.write("\n".join([f"{rows} {d} {labels}", *lines[1 : rows + 1]]) + "\n")


def test_quick_bench_gives_sane_long_table(tmp_path):
    for part, rows in (("train", 300), ("test", 150)):
        name = f"bibtex_xmlrepo_{part}.txt.gz"
        _head(BIBTEX / name, tmp_path / "xmc" / "bibtex" / name, rows)
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--data", str(tmp_path), "--quick", "--datasets",
                              "bibtex,delicious", "--sections", "accuracy,missing,scaling",
                              "--alphas", "1", "--set", "outer_iterations=3"])
    table = bench.run(args)

    assert list(table.columns) == bench.COLUMNS
    assert set(table["section"]) == {"accuracy", "missing", "scaling"}
    assert set(table["dataset"]) == {"bibtex"}  # delicious is absent here: skipped
    acc = table[table["section"] == "accuracy"].set_index(["method", "metric"])["value"]
    assert acc[("LEML (published, XC repository)", "P@1")] == 62.54
    for method in ("LEML squared", "full-rank ridge (closed form)"):
        p1, p3, p5 = (acc[(method, m)] for m in ("P@1", "P@3", "P@5"))
        assert 10 < p1 <= 100  # far above chance (1/159) even on 300 training rows
        assert 0 < p5 <= 100 and 0 < p3 <= 100
        assert 50 < acc[(method, "AUC")] <= 100
        assert acc[(method, "train seconds")] > 0
    missing = table[table["section"] == "missing"]
    assert set(missing["method"]) == {"LEML squared", "BR ridge"}
    assert missing["setting"].str.startswith("observed=20%").all()
    scaling = table[table["section"] == "scaling"].set_index(["setting", "metric"])["value"]
    one_x = [s for s, m in scaling.index if "1x" in s and m == "time ratio vs 1x"]
    assert len(one_x) == 2 and all(scaling[(s, "time ratio vs 1x")] == 1 for s in one_x)
    two_x = [s for s, m in scaling.index if "2x" in s and m == "size ratio vs 1x"]
    assert len(two_x) == 2 and np.allclose([scaling[(s, "size ratio vs 1x")] for s in two_x], 2)


def _setting(argv: list[str], grid: dict) -> tuple[dict, str]:
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(argv)
    args.params = bench.estimator_params(args.estimator)
    return bench.leml_setting("bibtex", args, grid, {})


def test_the_set_parameters_reach_leml_and_its_setting_only_when_given():
    grid = {"scale": 1.0, "outer_iterations": 4}
    plain, described = _setting([], grid)
    assert "cg_max_iter" not in plain and "cg_preconditioner" not in plain
    assert described == "k=50 lam=1 T=4"
    params, described = _setting(["--set", "cg_max_iter=3", "--set",
                                  "cg_preconditioner=diagonal"], grid)
    assert params["cg_max_iter"] == 3 and params["cg_preconditioner"] == "diagonal"
    assert described == "k=50 lam=1 T=4 cg_max_iter=3 cg_preconditioner=diagonal"
    model = bench.LEML(**params)  # what a child process builds from the plain values
    assert (model.cg_max_iter, model.cg_preconditioner) == (3, "diagonal")
    params, described = _setting(["--set", "rank=16", "--set", "lam=0.3", "--set",
                                  "loss=logistic"], grid)
    assert (params["rank"], params["lam"], params["loss"]) == (16, 0.3, "logistic")
    assert described.startswith("k=16 lam=0.3 T=4 newton=")


@pytest.mark.parametrize(("text", "key", "words"), [
    ("rnak=3", "rnak", "unknown key (known here: cg_max_iter, "),
    ("rank=0", "rank", "greater than or equal to 1 (got 0)"),
    ("loss=hinge", "loss", "Input should be 'squared', 'logistic' or 'sqhinge'"),
    ("cg_max_iter=many", "cg_max_iter", "valid integer"),
    ("rank", "rank", "KEY=VALUE"),
])
def test_a_bad_set_is_one_line_naming_the_key_before_any_data_is_read(tmp_path, text, key,
                                                                       words):
    from scarce.tasks.errors import InputError

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--data", str(tmp_path / "none"), "--set", text])
    with pytest.raises(InputError) as err:
        bench.run(args)
    line = str(err.value)
    assert "\n" not in line and f"'{key}'" in line and words in line, line


def test_early_stopping_reaches_leml_and_each_split_reads_its_own_files():
    grid = {"scale": 1.0, "outer_iterations": 40}
    params, described = _setting(["--set", "early_stopping=true", "--set",
                                  "n_iter_no_change=3"], grid)
    assert params["early_stopping"] is True and params["n_iter_no_change"] == 3
    assert described.endswith("early_stopping=True n_iter_no_change=3")
    model = bench.LEML(**params)
    assert (model.early_stopping, model.n_iter_no_change, model.outer_iterations) == (True, 3, 40)
    data = BIBTEX.parents[1]
    for split in ("xmlrepo", "mulan"):
        Xtr, Ytr, Xte, Yte = bench._load(data, "bibtex", split)
        want = [read_xmc(BIBTEX / f"bibtex_{split}_{part}.txt.gz") for part in
                ("train", "test")]
        assert (Xtr != want[0][0]).nnz == 0 and (Yte != want[1][1]).nnz == 0
    # the two splits hold different rows (of the same sizes)
    assert bench._load(data, "bibtex", "mulan")[0].nnz != bench._load(data, "bibtex")[0].nnz
