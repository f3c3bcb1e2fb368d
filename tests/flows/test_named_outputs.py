"""Named outputs: what a run learned, as files with names in its run folder."""

from __future__ import annotations

import os

import pandas as pd
import pytest

import tests.flows.sample_flow  # noqa: F401  (registers the 'digits' flow)
from scarce.flows import manifest as mf
from scarce.flows.cli import main
from scarce.flows.run_record import check_output_name
from scarce.tasks.store import Store
from scarce.tasks.store.atomic import file_sha256
from tests.flows.helpers import digits_project, manifest, runs


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = digits_project(tmp_path / "project", n_samples=150, k=5)
    monkeypatch.setenv("SCARCE_ROOT", str(root))
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    return root


@pytest.mark.usefixtures("prefect_server")
def test_named_outputs_are_the_store_entries_and_a_rerun_compares_them(project, capsys):
    assert main(["run", "digits"]) == 0
    (run_id,) = runs(project)
    m = manifest(project, run_id)
    named = {o["name"]: o for o in m["named_outputs"]}
    assert set(named) == {"labels.parquet", "model/k.txt"}
    out = project / "data" / "runs" / run_id / "outputs"
    store = Store(project / "data" / "cache")
    entry = named["labels.parquet"]
    # the same bytes as the store entry (a hard link on one file system), opened by pandas
    assert os.path.samefile(out / "labels.parquet", store.path(entry["ref"]))
    assert file_sha256(out / "labels.parquet") == entry["sha256"]
    labels = pd.read_parquet(out / "labels.parquet")
    assert labels["value"].tolist() == store.read(entry["ref"]).tolist()
    assert (out / "model" / "k.txt").read_text() == "5\n"

    capsys.readouterr()
    assert main(["rerun", run_id]) == 0
    assert "identical" in capsys.readouterr().out
    # a named output that changed is reported by the comparison
    other = {**m, "named_outputs": [{**named["model/k.txt"], "sha256": "0" * 64},
                                    named["labels.parquet"]]}
    assert mf.compare_outputs(m, other) == [
        f"differs: outputs/model/k.txt ({named['model/k.txt']['sha256'][:12]} != 000000000000)"]


@pytest.mark.parametrize("name", ["../x.parquet", "/abs.parquet", "a/../b", "", ".hidden",
                                  "a b.txt"])
def test_output_names_are_plain_relative_paths(name):
    with pytest.raises(ValueError, match="not an output name"):
        check_output_name(name)


@pytest.mark.usefixtures("prefect_server")
def test_a_rerun_whose_outputs_changed_only_their_keys_is_identical(project, capsys,
                                                                     monkeypatch):
    """A step's version changed (as its code would): its entries and those downstream are
    written under other keys, holding the same values, so the same bytes.  ``scarce rerun``
    says identical and counts the entries under other keys; a changed cell is a
    difference."""
    from tests.flows import sample_flow

    assert main(["run", "digits"]) == 0
    (run_id,) = runs(project)
    monkeypatch.setattr(sample_flow.cluster, "version", "2")
    capsys.readouterr()
    assert main(["rerun", run_id]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "identical" in out
    assert "store: 2 entries are the same bytes under another key (--verbose lists them)" in out
    assert not any(line.startswith(("differs", "metadata differs")) for line in out), out
    real = sample_flow.cluster.fn

    def one_label_moved(**kwargs):
        labels = real(**kwargs)
        labels[0] = (labels[0] + 1) % kwargs["k"]
        return labels

    monkeypatch.setattr(sample_flow.cluster, "fn", one_label_moved)
    assert main(["rerun", run_id]) == 1
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("differs: outputs/labels.parquet") for line in out), out
