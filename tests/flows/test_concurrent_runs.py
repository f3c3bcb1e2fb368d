"""Two ``scarce run`` processes on the same config and the same store at the same time.

Both start together in one fresh project (same ``SCARCE_ROOT``, so the same
``data/cache`` store and ``data/runs`` folder) and race through the same steps,
writing the same entries and Prefect records. Both must exit 0 with their own run id,
list the same outputs with the same sha256 as an uninterrupted run in a store of its
own, and leave a store whose every entry passes its checksum, whose Prefect records
are whole JSON, and with no temporary file behind (``.<name>.<random>.tmp``).
"""

from __future__ import annotations

import json

import pytest

from scarce.tasks.store import Store
from tests.flows import procs

pytestmark = pytest.mark.usefixtures("prefect_server")

N_RUNS = 2


def test_two_runs_on_one_store_at_once(tmp_path_factory):
    procs.start_references(tmp_path_factory)  # the solo run in its own store, meanwhile
    project = procs.make_project(tmp_path_factory.mktemp("leml-concurrent"), "leml")
    children = [
        procs.start(project, ["run", "leml"], project / f"run{i}.log") for i in range(N_RUNS)
    ]
    codes = [c.wait(600) for c in children]
    _, reference = procs.reference(tmp_path_factory, "leml")
    assert codes == [0] * N_RUNS, "\n\n".join(c.output()[-3000:] for c in children)

    ids = procs.run_ids(project)
    assert len(ids) == N_RUNS, ids
    manifests = [procs.manifest(project, i) for i in ids]
    expected = procs.stable_outputs(reference)
    for m in manifests:
        assert procs.stable_outputs(m) == expected
    # the volatile parts (timings) are listed too, possibly with other bytes
    assert len({len(m["outputs"]) for m in manifests}) == 1

    store_root = project / "data" / "cache"
    store = Store(store_root)
    refs = store.refs()
    assert refs and all(store.verify(r) for r in refs)
    assert {o["ref"] for m in manifests for o in m["outputs"]} <= set(refs)
    assert procs.stray_files(store_root) == []
    for record in store.prefect_dir.iterdir():
        json.loads(record.read_bytes())
    print(f"\n{N_RUNS} concurrent leml runs, {len(refs)} shared entries, all intact")
