"""What the Prefect UI shows of a run besides its artifacts: its tags and its name."""

from __future__ import annotations

from scarce.flows.runtime import RunOptions
from scarce.flows.tags import run_tags, run_title

BASE = "leml-delicious-k100-seed0"


def test_runs_with_the_same_settings_get_different_names_that_say_what_they_are():
    first = run_title(BASE, "leml-delicious-20261205T101010-ab12", [], RunOptions())
    second = run_title(BASE, "leml-delicious-20261205T111111-cd34", [], RunOptions())
    assert first == f"{BASE} (leml-delicious-20261205T101010-ab12)"
    assert first != second
    rerun = run_title(BASE, "leml-delicious-20261205T121212-ef56", [],
                      RunOptions(rerun_of="leml-delicious-20261205T101010-ab12"))
    assert rerun == (f"{BASE} (rerun of leml-delicious-20261205T101010-ab12, "
                     "leml-delicious-20261205T121212-ef56)")
    point = run_title(BASE, "leml-k25-20261205T131313-0a0b", ["flow:leml", "experiment:ranks"])
    assert point == f"{BASE} (experiment ranks, leml-k25-20261205T131313-0a0b)"
    scheduled = run_title(BASE, "leml-delicious-20261205T141414-1c1d", [], RunOptions(),
                          deployment="leml/nightly")
    assert scheduled == f"{BASE} (deployment leml/nightly, leml-delicious-20261205T141414-1c1d)"
    assert run_title(BASE, None, []) == BASE


def test_tags_name_the_flow_the_data_the_methods_and_a_rerun():
    from scarce.flows.leml import LemlConfig

    config = LemlConfig.model_validate({"dataset": {"name": "bibtex", "train": "a.txt",
                                                    "test": "b.txt"}})
    tags = run_tags("leml", config, RunOptions(rerun_of="leml-x"))
    assert tags[:3] == ["flow:leml", "dataset:bibtex", f"method:leml-{config.model.loss}"]
    assert "rerun-of:leml-x" in tags and "runner:local" in tags
