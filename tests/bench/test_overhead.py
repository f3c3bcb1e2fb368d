"""``scarce bench overhead``: the task runs it counts as training, when a bare ``LEML.fit`` can
train what the run trains, and the bare fit in its own process."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from scarce.bench import overhead
from scarce.flows.leml import LemlConfig

BIBTEX = Path(__file__).resolve().parents[2] / "data" / "xmc" / "bibtex"


def test_training_seconds_is_the_union_of_the_start_and_the_half_steps():
    intervals = [(0.0, 2.0), (1.0, 3.0), (3.0, 4.5), (10.0, 11.0), (5.0, 6.0), (6.0, 9.0)]
    names = ["initial factors", "alternate-W iter=1", "alternate-H iter=1", "evaluate",
             "load train.txt", "baseline br-ridge"]
    # [0, 2] and [1, 3] overlap (3 s), then [3, 4.5]: 4.5 s; the rest is not training
    assert overhead.training_seconds(intervals, names) == 4.5


def _config(tmp_path, **changes) -> LemlConfig:
    train = tmp_path / "train.txt"
    with gzip.open(BIBTEX / "bibtex_xmlrepo_train.txt.gz", "rt") as fh:
        lines = fh.read().splitlines()
    _, d, labels = lines[0].split()
    train.write_text("\n".join([f"300 {d} {labels}", *lines[1:301]]) + "\n")
    data = {"dataset": {"name": "tiny", "train": str(train), "test": str(train)},
            "model": {"rank": 8, "outer_iterations": 2}, **changes}
    return LemlConfig.model_validate(data)


@pytest.mark.parametrize(("changes", "why"), [
    ({}, None),
    ({"observed_fraction": 0.5}, "labels missing"),
    ({"compute": {"backend": "local-blocks"}}, "the local-blocks backend"),
])
def test_the_bare_fit_only_where_leml_fit_trains_what_the_run_trains(tmp_path, changes, why):
    got = overhead.bare_fit_possible(_config(tmp_path, **changes))
    assert got == why if why is None else why in got


@pytest.mark.slow  # starts a Python process
def test_the_bare_fit_runs_in_its_own_process(tmp_path):
    assert overhead.bare_fit_seconds(_config(tmp_path)) > 0
