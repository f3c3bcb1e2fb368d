"""A run killed with SIGKILL resumes from what it completed, to the same outputs.

``scarce run`` starts as a child process in a temporary project; when the store holds
the entries of the third alternating iteration (LEML) or the first stability units
(relations) but not the final ones, the whole process group gets SIGKILL. The same
command again must exit 0, report every step it took from the store as a cache hit
(the log's ``cache hit: <step> -> <refs>`` lines and the manifest's ``cached`` flags),
reuse every step whose entries, seal and Prefect record were complete at the kill, and give
the outputs (refs and sha256, wall-clock tables aside) of an uninterrupted run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scarce.tasks.store import Store
from scarce.tasks.store.layout import SEAL_SUFFIX
from tests.flows import procs

pytestmark = pytest.mark.usefixtures("prefect_server")

KEY = re.compile(r"^[0-9a-f]{32}")


def readable_record(record: Path) -> bool:
    """True when Prefect's cache record is whole (it is written in place, not renamed)."""
    try:
        json.loads(record.read_bytes())
    except (OSError, ValueError):
        return False
    return True


def committed(store_root: Path) -> set[str]:
    """Refs of the entries whose step finished: entry complete, Prefect record readable and
    the step's seal written.  The seal comes after all of a step's entries; a step that writes
    its checkpoint behind (LEML's iterations) gets its Prefect record before it, so a kill in
    between leaves a step that the resume computes again."""
    store = Store(store_root)
    return {
        ref
        for ref in store.refs()
        if readable_record(store.prefect_dir / (key := KEY.match(ref.split("/", 1)[1]).group(0)))
        and (store.prefect_dir / f"{key}{SEAL_SUFFIX}").is_file()
        and store.verify(ref)
    }


def logged_hits(output: str) -> set[str]:
    """The refs named by the ``cache hit: <step> -> ref, ref`` lines of a log."""
    refs = set()
    for line in output.splitlines():
        if "cache hit: " in line and " -> " in line:
            refs.update(r.strip() for r in line.split(" -> ", 1)[1].split(","))
    return refs


def kill_and_resume(tmp_path_factory, flow: str, midway) -> dict:
    """Start, SIGKILL when ``midway(store_root)`` holds, run again; return what happened."""
    procs.start_references(tmp_path_factory)  # the uninterrupted runs go on meanwhile
    project = procs.make_project(tmp_path_factory.mktemp(f"{flow}-kill"), flow)
    store_root = project / "data" / "cache"
    child = procs.start(project, ["run", flow], project / "killed.log")
    reached = procs.wait_until(child, lambda: midway(store_root))
    child.kill()
    assert reached, f"the run ended before the kill point:\n{child.output()[-3000:]}"
    assert child.proc.returncode == -9
    assert procs.run_ids(project) == [], "a killed run wrote a run folder"
    at_kill = set(Store(store_root).refs())
    done = committed(store_root)
    output = procs.run(project, ["run", flow], project / "resumed.log")
    manifest = procs.only_manifest(project)
    hits = {o["ref"] for o in manifest["outputs"] if o["cached"]}
    return {
        "project": project,
        "at_kill": at_kill,
        "done": done,
        "output": output,
        "manifest": manifest,
        "hits": hits,
    }


def check_resumed(outcome: dict, reference: dict) -> None:
    hits, done = outcome["hits"], outcome["done"]
    # Every step that had finished is reused, and nothing is reported reused that was
    # not in the store at the kill.
    assert done <= hits, sorted(done - hits)
    assert hits <= outcome["at_kill"], sorted(hits - outcome["at_kill"])
    # The log names each reused step with its refs.
    assert logged_hits(outcome["output"]) == hits
    # The outputs are the uninterrupted run's, byte for byte.
    assert procs.stable_outputs(outcome["manifest"]) == procs.stable_outputs(reference)
    # Every entry, including those rewritten after the kill, passes its checksum.
    store = Store(outcome["project"] / "data" / "cache")
    assert all(store.verify(r) for r in store.refs())


def iteration_of(store: Store, ref: str) -> int:
    """The alternating iteration an alternate-W/H entry belongs to (from its timings)."""
    base = ref.rsplit("-", 1)[0]
    return int(store.read(base + "-timings")["iteration"].iloc[0])


def test_leml_killed_mid_iterations_resumes_to_the_same_outputs(tmp_path_factory):
    def midway(root: Path) -> bool:
        # the W of iteration 3 is stored, so iteration 2 has finished (record included)
        done_w = [p for p in procs.entries(root, "leml-alternate-W") if p.stem.endswith("-W")]
        return len(done_w) >= 3 and not procs.entries(root, "leml-evaluate")

    outcome = kill_and_resume(tmp_path_factory, "leml", midway)
    _, reference = procs.reference(tmp_path_factory, "leml")
    store = Store(outcome["project"] / "data" / "cache")
    finished = sorted(
        iteration_of(store, r)
        for r in outcome["done"]
        if r.startswith("leml-alternate-H/") and r.endswith("-H")
    )
    # killed after iteration 2 and before the last one
    assert finished[:2] == [1, 2] and max(finished) < procs.LEML_ITERATIONS, finished
    assert not any(r.startswith("leml-evaluate/") for r in outcome["at_kill"])
    reused = sorted(
        iteration_of(store, r)
        for r in outcome["hits"]
        if r.startswith("leml-alternate-W/") and r.endswith("-W")
    )
    assert reused[: len(finished)] == finished
    check_resumed(outcome, reference)
    print(
        f"\nleml killed after iteration {max(finished)} of {procs.LEML_ITERATIONS}; "
        f"{len(outcome['hits'])} entries reused on resume"
    )


def test_relations_killed_mid_stability_search_resumes_to_the_same_outputs(tmp_path_factory):
    k_low, k_high = procs.RELATIONS_K
    units = (k_high - k_low + 1) * procs.RELATIONS_SUBSAMPLES

    def midway(root: Path) -> bool:
        # two stability units finished (entry intact, Prefect record readable: what
        # ``committed`` counts after the kill), the choice not made.  A record that merely
        # exists is not enough: Prefect opens it before writing it, and under load a kill
        # in between left CI with two empty records and none committed.  (Harmless for
        # the resume, which tests the entries; Prefect itself reads an empty record as a miss.)
        recorded = [
            p
            for p in procs.entries(root, "relations-stability")
            if readable_record(root / "_prefect" / KEY.match(p.stem).group(0))
        ]
        return len(recorded) >= 2 and not procs.entries(root, "relations-choose")

    outcome = kill_and_resume(tmp_path_factory, "relations", midway)
    _, reference = procs.reference(tmp_path_factory, "relations")
    stable_done = [r for r in outcome["done"] if r.startswith("relations-stability/")]
    stable_at_kill = [r for r in outcome["at_kill"] if r.startswith("relations-stability/")]
    # Killed inside the stability search: at least two units committed and no choice of k
    # made.  All units may be in (a clean-clone run on a loaded machine once stored all 18 of
    # this small run between two polls); the resume must then reuse every one of them.
    assert 2 <= len(stable_done) <= units, (len(stable_done), len(stable_at_kill))
    assert not any(r.startswith("relations-choose/") for r in outcome["at_kill"])
    # the whole candidate search was done and is reused
    candidates = {r for r in outcome["at_kill"] if r.startswith("relations-candidate/")}
    assert candidates and candidates <= outcome["hits"]
    check_resumed(outcome, reference)
    print(
        f"\nrelations killed with {len(stable_at_kill)} of {units} stability units stored "
        f"({len(stable_done)} committed); {len(outcome['hits'])} entries reused on resume"
    )
