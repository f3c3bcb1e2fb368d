"""How a rerun's outputs are compared with the recorded ones."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from scarce.flows.manifest import compare_outputs, compare_runs, read_manifest
from scarce.tasks.errors import InputError


def _m(outputs, metrics="m"):
    return {"flow": "f", "outputs": outputs, "metrics_sha256": metrics}


def test_identical_outputs_give_no_differences():
    outs = [{"ref": "a/1", "sha256": "x"}, {"ref": "b/2", "sha256": "y"}]
    assert compare_outputs(_m(outs), _m(list(reversed(outs)))) == []


def test_differences_are_listed_by_ref():
    old = _m([{"ref": "a/1", "sha256": "x"}, {"ref": "b/2", "sha256": "y"}])
    new = _m([{"ref": "a/1", "sha256": "z"}, {"ref": "c/3", "sha256": "w"}], metrics="n")
    diffs = compare_outputs(old, new)
    assert diffs == [
        "differs: a/1 (x != z)",
        "missing in rerun: b/2",
        "new in rerun: c/3",
        "differs: metrics.parquet",
    ]


def test_volatile_timings_are_not_compared():
    old = _m([{"ref": "a/1-timings", "sha256": "x", "volatile": True}])
    new = _m([{"ref": "a/1-timings", "sha256": "y", "volatile": True}])
    assert compare_outputs(old, new) == []


def test_bad_manifests_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="no such run"):
        read_manifest(tmp_path / "nope")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "manifest.json").write_text("{not json")
    with pytest.raises(InputError) as err:
        read_manifest(tmp_path / "r")
    assert err.value.line == 1
    (tmp_path / "r" / "manifest.json").write_text(json.dumps({"x": 1}))
    with pytest.raises(InputError, match="not a scarce run manifest"):
        read_manifest(tmp_path / "r")


# -- comparing what the files hold --------------------------------------------------------------
#: Every kind of value a run's Parquet outputs hold (what the store encodes: a table, a sparse
#: matrix, a dense array of one or two dimensions), with one cell changed.
VALUES = {
    "table": (pd.DataFrame({"row": [0, 0, 1], "label": [3, 1, 2], "label_name": ["c", "a", None],
                            "score": [0.5, np.nan, -1.0]}),
              lambda v: v.assign(score=[0.5, np.nan, -2.0])),
    "sparse": (sp.csr_matrix(np.array([[0, 1.5], [2.0, 0]], dtype=np.float32)),
               lambda v: v * 2),
    "dense-2d": (np.array([[1.0, 2.0], [np.nan, 4.0]]), lambda v: v + 1),
    "dense-1d": (np.array([1, 2, 3], dtype=np.int64), lambda v: v[::-1].copy()),
}
#: The files of a run that are not store entries (write_output): compared by their bytes.
FILES = {"model/model.json": b'{"rank": 2}\n', "rules.txt": b"R1: IF a THEN coreferent\n",
         "table.md": b"| k | value |\n", "predicted/a.conllu": b"# newdoc id = a\n"}


def _earlier_entry(store, ref: str, value) -> str:
    """``value`` written under ``ref`` as the store wrote entries before their footers held
    only the value: its step, key and part in the footer too, under its checksum."""
    import pyarrow.parquet as pq

    from scarce.tasks.store.encoding import CHECKSUM_KEY, encode, parquet_options, table_checksum

    table = encode(value)
    step, _, name = ref.partition("/")
    meta = {k: v for k, v in table.schema.metadata.items() if k != CHECKSUM_KEY}
    meta.update({b"scarce.task": step.encode(), b"scarce.key": name[:32].encode(),
                 b"scarce.part": name[33:].encode()})
    table = table.replace_schema_metadata(meta)
    meta[CHECKSUM_KEY] = table_checksum(table).encode()
    table = table.replace_schema_metadata(meta)
    store.path(ref).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, store.path(ref), **parquet_options(table))
    return ref


def _entry_run(tmp_path, name: str, value, key: str, extra: dict[str, bytes] | None = None,
               earlier: bool = False):
    """A run folder whose ``outputs/value.parquet`` is the store entry of ``value`` written
    under ``key`` (as an earlier version wrote it, the key in its footer, when ``earlier``),
    and whose other named outputs are ``extra``; returns (folder, manifest)."""
    from scarce.flows.run_record import link_or_copy
    from scarce.tasks.store import Store
    from scarce.tasks.store.atomic import file_sha256
    from scarce.tasks.store.encoding import encode

    store = Store(tmp_path / "store")
    ref = f"step/{key}-part"
    if earlier:
        _earlier_entry(store, ref, value)
    else:
        store.write(ref, value)
    folder = tmp_path / name
    (folder / "outputs").mkdir(parents=True)
    link_or_copy(store.path(ref), folder / "outputs" / "value.parquet")
    named = [{"name": "value.parquet", "ref": ref,
              "sha256": file_sha256(folder / "outputs" / "value.parquet")}]
    for rel, data in (extra or {}).items():
        (folder / "outputs" / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / "outputs" / rel).write_bytes(data)
        named.append({"name": rel, "ref": None, "sha256": file_sha256(folder / "outputs" / rel)})
    metrics = pd.DataFrame({"dataset": ["d"], "method": ["m"], "metric": ["x"], "value": [1.0]})
    import pyarrow.parquet as pq

    pq.write_table(encode(metrics), folder / "metrics.parquet")
    m = {"flow": "f", "store": str(store.root), "named_outputs": named,
         "outputs": [{"ref": ref, "step": "step", "sha256": store.sha256(ref)}],
         "metrics_sha256": file_sha256(folder / "metrics.parquet")}
    return folder, m


def test_the_values_cover_every_kind_the_store_writes():
    """A named Parquet output is a store entry (``RunRecord.name_output`` takes a ref), and
    the store writes three kinds (``tasks.store.encoding.encode``; ``decode`` refuses any other)."""
    from scarce.tasks.store.encoding import encode

    kinds = {encode(v).schema.metadata[b"scarce.kind"].decode() for v, _ in VALUES.values()}
    assert kinds == {"table", "sparse", "dense"}


@pytest.mark.parametrize("kind", VALUES)
def test_an_output_whose_only_change_is_its_key_is_the_same_bytes(kind, tmp_path):
    """A step's code changed, its result did not: its entry under the new key is the same file,
    byte for byte, so the run folders' outputs are too; the entries are counted as re-keyed,
    with no metadata that differs."""
    value, _ = VALUES[kind]
    a, old = _entry_run(tmp_path, "a", value, "0" * 32)
    b, new = _entry_run(tmp_path, "b", value, "1" * 32)
    assert (a / "outputs" / "value.parquet").read_bytes() == \
        (b / "outputs" / "value.parquet").read_bytes()
    assert old["named_outputs"][0]["sha256"] == new["named_outputs"][0]["sha256"]
    assert compare_runs(old, new, a, b) == (
        [], [{"name": "store: step part", "keys": [], "entries": 1}])


@pytest.mark.parametrize("kind", VALUES)
def test_an_output_of_an_earlier_version_with_its_key_in_the_footer_is_identical_with_a_note(
        kind, tmp_path):
    """A run made when entries held their step, key and part in the footer, against a run of
    today (the key changed with the code): the same table, the metadata that differs named
    with both values, for the run's file and for the store's entry."""
    value, _ = VALUES[kind]
    a, old = _entry_run(tmp_path, "a", value, "0" * 32, earlier=True)
    b, new = _entry_run(tmp_path, "b", value, "1" * 32)
    assert old["named_outputs"][0]["sha256"] != new["named_outputs"][0]["sha256"]
    differs, metadata = compare_runs(old, new, a, b)
    assert differs == []
    provenance = ["scarce.checksum", "scarce.key", "scarce.part", "scarce.task"]
    (file,) = [m for m in metadata if m["entries"] is None]
    assert file["name"] == "outputs/value.parquet" and file["keys"] == provenance
    changes = {k: (x, y) for k, x, y in file["changes"]}
    assert changes["scarce.key"] == ("0" * 32, None)
    assert changes["scarce.task"] == ("step", None) and changes["scarce.part"] == ("part", None)
    assert {"name": "store: step part", "keys": provenance, "entries": 1} in metadata


@pytest.mark.parametrize("kind", VALUES)
def test_an_output_with_a_changed_cell_differs(kind, tmp_path):
    value, change = VALUES[kind]
    a, old = _entry_run(tmp_path, "a", value, "0" * 32)
    b, new = _entry_run(tmp_path, "b", change(value), "0" * 32)  # the same key: overwritten
    differs, metadata = compare_runs(old, new, a, b)
    assert [line.split(" (")[0] for line in differs] == [
        f"differs: {old['outputs'][0]['ref']}", "differs: outputs/value.parquet"]
    assert metadata == []
    b2, new2 = _entry_run(tmp_path, "b2", change(value), "1" * 32)  # another key
    differs, metadata = compare_runs(old, new2, a, b2)
    assert [line.split(" (")[0] for line in differs] == [
        f"missing in rerun: {old['outputs'][0]['ref']}",
        f"new in rerun: {new2['outputs'][0]['ref']}", "differs: outputs/value.parquet"]


@pytest.mark.parametrize("rel", FILES)
def test_other_outputs_compare_by_their_bytes(rel, tmp_path):
    value = VALUES["table"][0]
    a, old = _entry_run(tmp_path, "a", value, "0" * 32, {rel: FILES[rel]})
    b, new = _entry_run(tmp_path, "b", value, "0" * 32, {rel: FILES[rel]})
    assert compare_runs(old, new, a, b) == ([], [])
    c, changed = _entry_run(tmp_path, "c", value, "0" * 32, {rel: FILES[rel] + b" "})
    differs, _ = compare_runs(old, changed, a, c)
    assert [line.split(" (")[0] for line in differs] == [f"differs: outputs/{rel}"]


def test_a_file_damaged_since_its_run_is_compared_by_its_recorded_hash(tmp_path):
    value = VALUES["table"][0]
    a, old = _entry_run(tmp_path, "a", value, "0" * 32, earlier=True)  # other bytes
    b, new = _entry_run(tmp_path, "b", value, "1" * 32)
    (a / "outputs" / "value.parquet").unlink()
    (a / "outputs" / "value.parquet").write_bytes(b"damaged")
    differs, _ = compare_runs(old, new, a, b)
    assert "differs: outputs/value.parquet" in [line.split(" (")[0] for line in differs]


def test_the_metrics_table_is_compared_by_what_it_holds(tmp_path):
    """``metrics.parquet`` written by another pandas (its footer's versions differ): the same."""
    import json as json_module

    import pyarrow.parquet as pq

    from scarce.tasks.store.atomic import file_sha256

    value = VALUES["table"][0]
    a, old = _entry_run(tmp_path, "a", value, "0" * 32)
    b, new = _entry_run(tmp_path, "b", value, "0" * 32)
    table = pq.read_table(b / "metrics.parquet")
    meta = dict(table.schema.metadata)
    doc = json_module.loads(meta[b"pandas"])
    doc["pandas_version"] = "0.0.1"
    meta[b"pandas"] = json_module.dumps(doc).encode()
    pq.write_table(table.replace_schema_metadata(meta), b / "metrics.parquet")
    new["metrics_sha256"] = file_sha256(b / "metrics.parquet")
    differs, metadata = compare_runs(old, new, a, b)
    assert differs == []
    (note,) = [m for m in metadata if m["name"] == "metrics.parquet"]
    assert note["keys"] == ["pandas.pandas_version"]
    assert note["changes"] == [("pandas.pandas_version", json_module.dumps(pd.__version__),
                                '"0.0.1"')]
