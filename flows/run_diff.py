"""Why two runs differ, and how: what ``scarce rerun`` and ``scarce diff`` print.

The causes first, from the two manifests: the input files whose sha256 changed, the source
files of the code, the installed packages and the Python version, the config values and the
seed.  Then the outcome: the metrics that changed (with both values), the run's files that
differ (``metrics.parquet``, the named outputs), and a count of the store entries that differ,
listed one by one only when asked (``--verbose``): a changed input renames every entry
downstream of it, and those lines would hide the one that says why.

Outputs are compared by what they hold (:func:`scarce.flows.manifest.compare_runs`): a Parquet
file by its table, so that a file whose table is the same and whose footer metadata is not (a
store key that entries written by earlier versions carried, another pandas) is identical, the
metadata named apart with both values (``metadata differs: ...``).  Entries whose step's code
changed and whose bytes did not are the same entries under other keys: said, not a difference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from scarce.flows import manifest as mf
from scarce.flows.runs_table import recorded_config


def _short(sha: Any) -> str:
    return str(sha)[:12] if sha else "-"


def _changed(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(name, a's value, b's value) of every name whose value differs or that one lacks."""
    missing = object()
    out = []
    for name in sorted(set(a) | set(b)):
        va, vb = a.get(name, missing), b.get(name, missing)
        if va != vb:
            out.append((name, None if va is missing else va, None if vb is missing else vb))
    return out


def causes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What the manifests of two runs record differently that can change what a run computes
    (one line each, ``why: ...``); empty when they record the same inputs, code, packages,
    Python and config."""
    lines = []
    if old.get("flow") != new.get("flow"):
        lines.append(f"why: flow {old.get('flow')} -> {new.get('flow')}")
    inputs = _changed({i["path"]: i["sha256"] for i in old.get("inputs") or []},
                      {i["path"]: i["sha256"] for i in new.get("inputs") or []})
    for path, a, b in inputs:
        if a is None:
            lines.append(f"why: input {path} read only by the second run")
        elif b is None:
            lines.append(f"why: input {path} read only by the first run")
        else:
            lines.append(f"why: input {path} changed (sha256 {_short(a)} -> {_short(b)})")
    code_a, code_b = old.get("code") or {}, new.get("code") or {}
    if code_a.get("source_sha256") != code_b.get("source_sha256"):
        files_a, files_b = code_a.get("source_files"), code_b.get("source_files")
        if isinstance(files_a, dict) and isinstance(files_b, dict):
            changed = [name for name, _, _ in _changed(files_a, files_b)]
            lines.append(f"why: code changed in {len(changed)} file(s): "
                         + ", ".join(changed[:8]) + (", ..." if len(changed) > 8 else ""))
        else:  # a run recorded before the files' digests were
            lines.append(f"why: code changed (sources sha256 {_short(code_a.get('source_sha256'))}"
                         f" -> {_short(code_b.get('source_sha256'))})")
    env_a, env_b = old.get("environment") or {}, new.get("environment") or {}
    if env_a.get("python") != env_b.get("python"):
        lines.append(f"why: Python {env_a.get('python')} -> {env_b.get('python')}")
    for name, a, b in _changed(env_a.get("packages") or {}, env_b.get("packages") or {}):
        lines.append(f"why: package {name} {a or 'absent'} -> {b or 'absent'}")
    for key, a, b in _changed(recorded_config(old), recorded_config(new)):
        lines.append(f"why: config {key} {a!r} -> {b!r}")
    return lines


def metric_changes(old_dir: Path, new_dir: Path) -> list[str]:
    """``dataset/method/metric: a -> b`` for every metric whose value differs (or that one run
    lacks) between the two runs' ``metrics.parquet``."""
    def values(run_dir: Path) -> dict[str, float]:
        path = run_dir / mf.METRICS
        if not path.is_file():
            return {}
        frame = pd.read_parquet(path)
        return {f"{r.dataset}/{r.method}/{r.metric}": r.value for r in frame.itertuples()}

    def show(v: Any) -> str:
        return "absent" if v is None else f"{v:.6g}" if isinstance(v, float) else str(v)

    a, b = values(old_dir), values(new_dir)
    changed = [(k, va, vb) for k, va, vb in _changed(a, b)
               if not (isinstance(va, float) and isinstance(vb, float) and pd.isna(va)
                       and pd.isna(vb))]
    return [f"  {k}: {show(va)} -> {show(vb)}" for k, va, vb in changed]


def outcome(old: dict[str, Any], new: dict[str, Any], old_dir: Path, new_dir: Path,
            verbose: bool = False) -> list[str]:
    """The outputs that differ (empty when identical): the metrics with both values, the run's
    files, and the store entries (counted; listed with ``verbose``)."""
    return compare(old, new, old_dir, new_dir, verbose)[0]


def compare(old: dict[str, Any], new: dict[str, Any], old_dir: Path, new_dir: Path,
            verbose: bool = False) -> tuple[list[str], list[str]]:
    """:func:`outcome`, and apart from it what holds the same in other bytes or under other keys
    (:func:`scarce.flows.manifest.compare_runs`): ``metadata differs: NAME (KEY A -> B, ...)``
    per file, the store's entries counted (listed by step and part with ``verbose``), and the
    store's entries that are the same bytes under other keys, counted likewise."""
    lines, metadata = mf.compare_runs(old, new, old_dir, new_dir)
    files = [line for line in lines if line.endswith("metrics.parquet")
             or line.split(": ", 1)[-1].startswith("outputs/")]
    entries = [line for line in lines if line not in files]
    out = []
    for line in files:
        out.append(line)
        if line.endswith("metrics.parquet"):
            out += metric_changes(old_dir, new_dir)
    if entries and verbose:
        out += entries
    elif entries:
        kinds = {"differs": 0, "missing in rerun": 0, "new in rerun": 0}
        for line in entries:
            kinds[line.split(":", 1)[0]] += 1
        out.append(f"store: {kinds['differs']} entries differ, {kinds['new in rerun']} only in "
                   f"the second run, {kinds['missing in rerun']} only in the first "
                   "(--verbose lists them)")
    notes = [f"metadata differs: {m['name']} ("
             + ", ".join(f"{k} {_value(a)} -> {_value(b)}" for k, a, b in m["changes"]) + ")"
             for m in metadata if m["entries"] is None]
    store = [m for m in metadata if m["entries"] is not None and m["keys"]]
    if store and verbose:
        notes += [f"metadata differs: {m['name']}: {m['entries']} entries hold the same "
                  f"under another key ({', '.join(m['keys'])})" for m in store]
    elif store:
        keys = sorted({k for m in store for k in m["keys"]})
        notes.append(f"metadata differs: store: {sum(m['entries'] for m in store)} entries "
                     f"hold the same under another key ({', '.join(keys)}; --verbose lists "
                     "them)")
    rekeyed = [m for m in metadata if m["entries"] is not None and not m["keys"]]
    if rekeyed and verbose:
        notes += [f"{m['name']}: {m['entries']} entries are the same bytes under another key"
                  for m in rekeyed]
    elif rekeyed:
        notes.append(f"store: {sum(m['entries'] for m in rekeyed)} entries are the same bytes "
                     "under another key (--verbose lists them)")
    return out, notes


def metadata_differs(notes: list[str]) -> bool:
    """Whether :func:`compare`'s ``notes`` name metadata that differs (not only entries that
    are the same bytes under other keys)."""
    return any(note.startswith("metadata differs:") for note in notes)


#: The longest metadata value shown whole; a longer one (a checksum, a store key) is shown by
#: its first 12 characters, as the rerun shows a sha256.
VALUE_SHOWN = 16


def _value(value: Any) -> str:
    """A metadata value as a rerun shows it: ``absent``, the value, or the first 12 characters
    of one longer than :data:`VALUE_SHOWN` and ``…``."""
    if value is None:
        return "absent"
    text = str(value)
    return text if len(text) <= VALUE_SHOWN else text[:12] + "…"
