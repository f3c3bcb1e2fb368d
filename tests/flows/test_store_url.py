"""A store root given as an fsspec URL: ``file://`` reaches a second local folder."""

from __future__ import annotations

import pytest

import tests.flows.sample_flow  # noqa: F401  (registers the 'digits' flow)
from scarce.flows.cli import main
from scarce.tasks.store import Store
from scarce.tasks.store.layout import local_root
from tests.flows.helpers import digits_project, manifest, runs


def test_local_root_of_paths_and_urls(tmp_path):
    assert local_root(tmp_path) == tmp_path
    assert local_root(str(tmp_path)) == tmp_path
    assert local_root(tmp_path.as_uri()) == tmp_path  # file:///...
    assert Store(tmp_path.as_uri()).root == tmp_path
    with pytest.raises(ValueError, match="not a local filesystem"):
        local_root("memory://somewhere/store")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return digits_project(tmp_path_factory.mktemp("project"))


@pytest.mark.usefixtures("prefect_server")
def test_a_run_and_its_rerun_through_a_file_url_store(project, tmp_path_factory, monkeypatch,
                                                      capsys):
    shared = tmp_path_factory.mktemp("elsewhere") / "store"
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    monkeypatch.setenv("SCARCE_STORE", shared.as_uri())
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
    assert main(["run", "digits"]) == 0
    (run_id,) = runs(project)
    m = manifest(project, run_id)
    store = Store(shared)
    assert {o["step"] for o in m["outputs"]} == {"digits-load", "digits-cluster",
                                                 "digits-evaluate"}
    for o in m["outputs"]:  # every output lives in the second folder, with its recorded hash
        assert store.path(o["ref"]).is_file()
        assert store.sha256(o["ref"]) == o["sha256"]
    assert not (project / "data" / "cache").exists()
    capsys.readouterr()
    assert main(["cache", "ls"]) == 0
    listed = capsys.readouterr().out
    assert all(o["ref"] in listed for o in m["outputs"])
    # a rerun from the manifest finds the same store and reproduces every byte
    monkeypatch.delenv("SCARCE_STORE")
    assert main(["rerun", run_id]) == 0
    assert capsys.readouterr().out.strip().endswith("identical")


@pytest.mark.usefixtures("prefect_server")
def test_an_object_store_url_is_refused_with_one_line(project, monkeypatch, capsys):
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    monkeypatch.setenv("SCARCE_STORE", "memory://bucket/store")
    code = main(["run", "digits"])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("error:")]
    assert code == 2 and len(lines) == 1
    assert "memory://bucket/store" in lines[0] and "SCARCE_STORE" in lines[0]
