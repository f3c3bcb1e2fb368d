"""What a run records so that it can be rerun exactly, and how a rerun compares.

``data/runs/<run-id>/manifest.json`` holds the config after overrides, the
seed, the code version, the versions of every installed package, the sha256
of every input file and the ref and sha256 of every output.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from scarce.tasks.errors import InputError, excerpt
from scarce.tasks.store.atomic import FolderSyncs, atomic_write_bytes

MANIFEST = "manifest.json"
METRICS = "metrics.parquet"
SCHEMA_VERSION = 1
PARTIAL = ".partial-"  # in the hidden name of a run folder still being written


def run_folders(runs_dir: Path) -> list[Path]:
    """The run folders of ``runs_dir`` (those with a manifest), sorted by name; hidden folders,
    such as a run folder still being written, are not runs."""
    if not runs_dir.is_dir():
        return []
    return sorted(d for d in runs_dir.iterdir()
                  if not d.name.startswith(".") and (d / MANIFEST).is_file())


def partial_folders(runs_dir: Path) -> list[Path]:
    """Run folders left half-written by a process killed while writing one."""
    if not runs_dir.is_dir():
        return []
    return sorted(d for d in runs_dir.iterdir()
                  if d.name.startswith(".") and PARTIAL in d.name and d.is_dir())
CODE_PACKAGES = ("algorithms", "tasks", "flows")


def _source_digests(root: Path) -> tuple[str, dict[str, str]]:
    """sha256 over the project's Python sources (path and bytes, sorted), and each file's own
    sha256 by path (``flows/leml.py``): what ``scarce diff`` names when the code differs."""
    h = hashlib.sha256()
    files = {}
    for pkg in CODE_PACKAGES:
        for f in sorted((root / pkg).rglob("*.py")):
            data = f.read_bytes()
            rel = str(f.relative_to(root))
            h.update(rel.encode())
            h.update(data)
            files[rel] = hashlib.sha256(data).hexdigest()
    return h.hexdigest(), files


def git_state(root: Path) -> dict[str, Any]:
    """Commit and dirtiness of the checkout, when it is one."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        if commit.returncode != 0:
            return {}
        status = subprocess.run(
            ["git", "status", "--porcelain", "--", *CODE_PACKAGES],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {}


def package_versions() -> dict[str, str]:
    """Every installed distribution and its version (what ``pip freeze`` lists).

    Read once per process (about a second for the 150 distributions here): the installed set
    does not change under a running ``scarce serve`` or benchmark.
    """
    return dict(_package_versions())


@functools.cache
def _package_versions() -> dict[str, str]:
    import importlib.metadata  # (only a run's record needs it, not a manifest's reader)

    out = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            out[name.lower()] = dist.version
    return dict(sorted(out.items()))


def code_root() -> Path:
    """The folder holding this checkout's packages (not the data's project root)."""
    return Path(__file__).resolve().parent.parent


def code_version(root: Path | None = None) -> dict[str, Any]:
    import importlib.metadata

    root = root or code_root()
    try:
        version = importlib.metadata.version("scarce")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    total, files = _source_digests(root)
    return {"scarce": version, "source_sha256": total, "source_files": files,
            **git_state(root)}


def environment() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "packages": package_versions(),
    }


def write_manifest(run_dir: Path, manifest: dict[str, Any],
                   syncs: FolderSyncs | None = None) -> Path:
    """``manifest.json`` of ``run_dir``, written atomically (its folder fsync-ed at once, or
    with the run folder's other files: ``syncs``)."""
    path = run_dir / MANIFEST
    atomic_write_bytes(path, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(),
                       syncs)
    return path


def _where(loc: tuple) -> str:
    """A pydantic error location as the key it names: ``outputs[3].ref``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def check_manifest(data: Any, path: Path, droppable: tuple[str, ...] = (),
                   dropped: list[InputError] | None = None) -> dict[str, Any]:
    """``data`` (a manifest's parsed JSON) after checking the type of every key code reads
    (:class:`scarce.flows.manifest_schema.ManifestSchema`); an :class:`InputError` naming
    ``path`` and the key otherwise.

    A key of ``droppable`` that is wrong is left out of the returned copy instead, its error
    added to ``dropped`` (``scarce runs`` lists a run whose headline metrics are malformed,
    without them).
    """
    from pydantic import ValidationError

    from scarce.flows.manifest_schema import ManifestSchema

    _check_mapping(data, path)
    while True:
        try:
            ManifestSchema.model_validate(data)
            return data
        except ValidationError as exc:
            err = exc.errors()[0]
            got = "nothing" if err["type"] == "missing" else (
                f"{type(err['input']).__name__} {excerpt(err['input'], 40)}")
            msg = err["msg"].removeprefix("Value error, ")
            error = InputError(f"not a valid run manifest: {msg[:1].lower()}{msg[1:]} "
                               f"(got {got})", path=path, key=_where(err["loc"]))
            if err["loc"][0] not in droppable or dropped is None:
                raise error from None
            dropped.append(error)
            data = {k: v for k, v in data.items() if k != err["loc"][0]}


def _parsed(run_dir: Path) -> tuple[Any, Path]:
    """The parsed JSON of ``run_dir``'s manifest and its path; an :class:`InputError` naming
    the file (and the line) when it is missing, not UTF-8 or not JSON."""
    path = run_dir / MANIFEST
    try:
        return json.loads(path.read_text(encoding="utf-8")), path
    except FileNotFoundError:
        raise InputError("no such run (manifest.json missing)", path=path) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"manifest is not UTF-8 text (byte {exc.start})", path=path) from None
    except json.JSONDecodeError as exc:
        msg = f"manifest is not valid JSON ({exc.msg})"
        raise InputError(msg, path=path, line=exc.lineno) from None


def _check_mapping(data: Any, path: Path) -> None:
    if not isinstance(data, dict) or "outputs" not in data or "flow" not in data:
        raise InputError("not a scarce run manifest", path=path)


def read_manifest(run_dir: Path, droppable: tuple[str, ...] = (),
                  dropped: list[InputError] | None = None) -> dict[str, Any]:
    """The manifest of the run folder ``run_dir``, its keys' types checked
    (:func:`check_manifest`, which ``droppable`` and ``dropped`` are passed to).

    Raises
    ------
    InputError
        No manifest, not JSON, not a manifest, or a key of the wrong type: naming the file
        (and the line, or the key).
    """
    data, path = _parsed(run_dir)
    return check_manifest(data, path, droppable, dropped)


#: The keys of a manifest that finding a run's model reads (:func:`read_run_keys`), and the
#: types each may have: those :class:`scarce.flows.manifest_schema.ManifestSchema` gives it
#: (a test holds the two to the same answers).
RUN_KEYS: dict[str, tuple[type, ...]] = {
    "flow": (str,), "finished": (str, type(None)), "deployment": (str, type(None)),
    "config": (dict, type(None)),
}


def read_run_keys(run_dir: Path) -> dict[str, Any]:
    """The keys of :data:`RUN_KEYS` of ``run_dir``'s manifest (``None`` for one it lacks),
    each of its type, with the errors :func:`read_manifest` gives for them.

    What finds a run's model reads no more: a model loaded into Python (its own files are
    checked by its loader) then does not import the whole manifest's schema, pydantic's
    import and schema building being a good part of a fresh process's time to its first
    predictions.
    """
    data, path = _parsed(run_dir)
    _check_mapping(data, path)
    for key, types in RUN_KEYS.items():
        value = data.get(key)
        if not isinstance(value, types):
            want = " or ".join("null" if t is type(None) else
                               {"str": "a string", "dict": "a mapping"}[t.__name__]
                               for t in types)
            raise InputError(f"not a valid run manifest: {key} should be {want} (got "
                             f"{type(value).__name__} {excerpt(value, 40)})", path=path,
                             key=key)
    return {key: data.get(key) for key in RUN_KEYS}


def _differences(a: dict[str, str], b: dict[str, str], prefix: str = "") -> list[str]:
    """Lines for every name whose sha256 differs between ``a`` (recorded) and ``b`` (rerun)."""
    lines = []
    for name in sorted(set(a) | set(b)):
        if name not in b:
            lines.append(f"missing in rerun: {prefix}{name}")
        elif name not in a:
            lines.append(f"new in rerun: {prefix}{name}")
        elif a[name] != b[name]:
            lines.append(f"differs: {prefix}{name} ({str(a[name])[:12]} != "
                         f"{str(b[name])[:12]})")
    return lines


def compare_outputs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Lines describing every output whose hash differs (empty when identical): the store
    entries, ``metrics.parquet`` and the named outputs.

    Outputs marked volatile (wall-clock timings) are not compared.
    """
    lines = _differences(
        {o["ref"]: o.get("sha256") for o in old["outputs"] if not o.get("volatile")},
        {o["ref"]: o.get("sha256") for o in new["outputs"] if not o.get("volatile")})
    if old.get("metrics_sha256") != new.get("metrics_sha256"):
        lines.append("differs: metrics.parquet")
    return lines + _differences(
        {o["name"]: o.get("sha256") for o in old.get("named_outputs") or []
         if not o.get("volatile")},
        {o["name"]: o.get("sha256") for o in new.get("named_outputs") or []
         if not o.get("volatile")},
        prefix="outputs/")


# -- what a file holds ---------------------------------------------------------------------
#: Footer metadata of a Parquet output that says where it came from or how it was written, not
#: what it holds: the step, key and part that entries written by earlier versions carried (a
#: changed step's code re-keyed entries whose tables were unchanged; today's footers hold only
#: what decodes the value, :func:`scarce.tasks.store.encoding.encode`), the checksum (taken
#: over those too) and the store format's version; in pandas' metadata, the versions of the
#: writing libraries; and the Parquet writer that wrote the file.
PROVENANCE = ("scarce.task", "scarce.key", "scarce.part", "scarce.checksum",
              "scarce.format_version")
_WRITER_FIELDS = ("creator", "pandas_version")
#: The name a metadata difference is reported under when two Parquet files hold the same table
#: with the same metadata in other bytes (row groups, compression, statistics).
BYTES = "parquet.bytes"


def parquet_content(path: Path) -> tuple[str, dict[str, str]]:
    """What a Parquet file holds, and apart from it its :data:`PROVENANCE` metadata.

    Returns the sha256 of the file's table -- its schema, its values bit for bit (a NaN equals
    itself, unlike ``pyarrow.Table.equals``) and the metadata that says how it decodes
    (pandas' index and dtypes, the store's kind, shape and dtypes) -- and the provenance
    metadata by name (``parquet.created_by``: the Parquet writer and its version).  Raises
    what pyarrow raises for a file that is not Parquet.
    """
    import pyarrow.parquet as pq

    from scarce.tasks.store.encoding import table_checksum

    table = pq.read_table(path)
    held, provenance = {}, {"parquet.created_by": str(pq.read_metadata(path).created_by)}
    for k, v in (table.schema.metadata or {}).items():
        name = k.decode("utf-8", "replace")
        if name in PROVENANCE:
            provenance[name] = v.decode("utf-8", "replace")
        elif name == "pandas":
            doc = json.loads(v)
            for field in _WRITER_FIELDS:
                provenance[f"pandas.{field}"] = json.dumps(doc.pop(field, None), sort_keys=True)
            held[k] = json.dumps(doc, sort_keys=True).encode()
        else:
            held[k] = v
    return table_checksum(table.replace_schema_metadata(held)), provenance


#: A metadata difference: (name, first file's value, second file's value; None when absent).
Change = tuple[str, Any, Any]


def same_content(a: Path, b: Path) -> tuple[bool, list[Change]]:
    """Whether files ``a`` and ``b`` hold the same, and the metadata in which they differ.

    A Parquet file (``.parquet``) holds its table (:func:`parquet_content`), so two files whose
    tables are equal are the same whatever their provenance metadata says; the changes name
    each provenance key that differs with both values, or, when none does and the bytes still
    differ, :data:`BYTES` with both files' sha256.  Any other file (JSON, text, CoNLL-U, PNG)
    holds its bytes.
    """
    from scarce.tasks.store.atomic import file_sha256

    if a.suffix == b.suffix == ".parquet":
        try:
            (held_a, meta_a), (held_b, meta_b) = parquet_content(a), parquet_content(b)
        except Exception:  # not readable as Parquet: compared by its bytes
            pass
        else:
            changes = _changed_values(meta_a, meta_b)
            if held_a == held_b and not changes:
                sha_a, sha_b = file_sha256(a), file_sha256(b)
                changes = [] if sha_a == sha_b else [(BYTES, sha_a, sha_b)]
            return held_a == held_b, changes
    return file_sha256(a) == file_sha256(b), []


def _changed_values(a: dict, b: dict) -> list[Change]:
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _intact(path: Path, recorded: str | None) -> bool:
    """Whether ``path`` still holds the bytes its manifest records."""
    from scarce.tasks.store.atomic import file_sha256

    try:
        return path.is_file() and file_sha256(path) == recorded
    except OSError:
        return False


def _entry_part(ref: str) -> tuple[str, str]:
    """(step, part) of a store ref ``<step>/<key>[-<part>]``: what a re-keyed entry keeps."""
    from scarce.tasks.store.layout import KEY_HEX

    step, _, name = ref.partition("/")
    return step, name[KEY_HEX + 1:]


def compare_runs(old: dict[str, Any], new: dict[str, Any], old_dir: Path,
                 new_dir: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """What differs between two runs' outputs, by what the files hold: ``(differs, metadata)``.

    ``differs`` are :func:`compare_outputs`' lines, less those whose files hold the same
    (:func:`same_content`).  ``metadata`` has one record per file whose content is the same
    and whose bytes are not (``name``; ``changes``: :func:`same_content`'s; ``keys``: their
    names; ``entries`` None), and one per step and part of the store whose entries only one
    run has and the other holds under another key (``name`` ``store: <step> <part>``,
    ``entries``: how many): ``keys`` empty when they are the same bytes (the key changed,
    nothing in the files), else the metadata in which they differ.

    * ``metrics.parquet`` and the named outputs are read in both run folders (a file whose
      bytes no longer match its manifest, damaged since, is compared by the recorded hash);
    * a store entry written under the same ref by both runs was overwritten by the second: it
      is compared through the first run's named output of it, when it has one, else by hash;
    * entries under refs only one run has (a step's key changed: its code, or the key of an
      input) are paired by step and part with an entry of the other run: first one recorded
      with the same sha256, then one holding the same table, read from the store each
      manifest names; those left unpaired are listed.
    """
    lines = compare_outputs(old, new)
    metadata: list[dict[str, Any]] = []
    files = {METRICS: (old.get("metrics_sha256"), new.get("metrics_sha256"))}
    named_old = {o["name"]: o for o in old.get("named_outputs") or [] if not o.get("volatile")}
    named_new = {o["name"]: o for o in new.get("named_outputs") or [] if not o.get("volatile")}
    for name in set(named_old) & set(named_new):
        files[f"outputs/{name}"] = (named_old[name]["sha256"], named_new[name]["sha256"])
    old_copy = {o["ref"]: old_dir / "outputs" / name for name, o in named_old.items()
                if o.get("ref")}
    old_sha = {o["ref"]: o["sha256"] for o in old["outputs"]}
    new_store = _store_at(new.get("store"))

    def resolved(a: Path, sha_a, b: Path, sha_b, name: str) -> bool:
        if not (_intact(a, sha_a) and _intact(b, sha_b)):
            return False
        same, changes = same_content(a, b)
        if same and changes:
            metadata.append({"name": name, "keys": [k for k, _, _ in changes],
                             "changes": changes, "entries": None})
        return same

    same, gone, added = set(), [], []
    for line in lines:
        kind, _, rest = line.partition(": ")
        name = rest.split(" (", 1)[0]
        if kind == "differs" and name in files:
            if resolved(old_dir / name, files[name][0], new_dir / name, files[name][1], name):
                same.add(line)
        elif kind == "differs" and name in old_copy and new_store is not None:
            # a store entry the first run also published: its copy keeps the first bytes
            new_sha = next(o["sha256"] for o in new["outputs"] if o["ref"] == name)
            if resolved(old_copy[name], old_sha[name], new_store.path(name), new_sha, name):
                same.add(line)
        elif kind in ("missing in rerun", "new in rerun"):
            (gone if kind == "missing in rerun" else added).append(name)
    recorded = {**{o["ref"]: o["sha256"] for o in new["outputs"]}, **old_sha}
    left = _pair_entries(gone, added, _store_at(old.get("store")), new_store, recorded,
                         metadata)
    same.update(f"missing in rerun: {r}" for r in set(gone) - set(left[0]))
    same.update(f"new in rerun: {r}" for r in set(added) - set(left[1]))
    return [line for line in lines if line not in same], metadata


def _store_at(root: Any) -> Any:
    """The store a manifest names, to read entries from (None when it names none usable)."""
    from scarce.tasks.store import Store

    try:
        return Store(root) if root else None
    except (ValueError, OSError):
        return None


def _pair_entries(gone: list[str], added: list[str], old_store: Any, new_store: Any,
                  recorded: dict[str, str], metadata: list[dict[str, Any]]
                  ) -> tuple[list[str], list[str]]:
    """The refs of ``gone`` (first run only) and ``added`` (second run only) that no entry of
    the other holds the same as, within one step and part; records in ``metadata`` per step
    and part of the entries paired.

    An entry pairs first with one the other run ``recorded`` with the same sha256 (the same
    bytes under another key: nothing is read), then with one holding the same table (read
    from the stores).  An entry whose file no longer has the sha256 its run ``recorded``
    (rewritten or damaged since) pairs by table with none."""
    def content(store: Any, ref: str) -> tuple[str, dict[str, str]] | None:
        if store is None:
            return None
        try:
            path = store.path(ref)
            return parquet_content(path) if _intact(path, recorded.get(ref)) else None
        except Exception:  # gone (gc), damaged, or no store there
            return None

    groups: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for ref in gone:
        groups.setdefault(_entry_part(ref), ([], []))[0].append(ref)
    for ref in added:
        groups.setdefault(_entry_part(ref), ([], []))[1].append(ref)
    left_old, left_new = [], []
    for (step, part), (olds, news) in sorted(groups.items()):
        name = f"store: {step} {part}".strip()
        if not olds or not news:
            left_old += olds
            left_new += news
            continue
        by_sha: dict[str | None, list[str]] = {}
        for ref in olds:
            by_sha.setdefault(recorded.get(ref), []).append(ref)
        rekeyed, unpaired = 0, []
        for ref in news:
            match = by_sha.get(recorded.get(ref)) if recorded.get(ref) else None
            if match:
                match.pop()
                rekeyed += 1
            else:
                unpaired.append(ref)
        if rekeyed:
            metadata.append({"name": name, "keys": [], "entries": rekeyed})
        held_old = {ref: content(old_store, ref) for refs in by_sha.values() for ref in refs}
        keys: set[str] = set()
        paired = 0
        for ref in unpaired:
            mine = content(new_store, ref)
            match = next((r for r, c in held_old.items()
                          if mine is not None and c is not None and c[0] == mine[0]), None)
            if match is None:
                left_new.append(ref)
                continue
            changes = _changed_values(held_old.pop(match)[1], mine[1])
            keys.update(k for k, _, _ in changes or [(BYTES, None, None)])
            paired += 1
        left_old += list(held_old)
        if paired:
            metadata.append({"name": name, "keys": sorted(keys), "entries": paired})
    return sorted(left_old), sorted(left_new)


def recorded_files(m: dict[str, Any]) -> dict[str, str]:
    """The files of a run folder its manifest vouches for, by path in the folder: sha256."""
    files = {METRICS: m.get("metrics_sha256")}
    files.update({f"outputs/{o['name']}": o.get("sha256") for o in m.get("named_outputs") or []})
    return {name: h for name, h in files.items() if isinstance(h, str)}


def damaged_outputs(run_dir: Path, m: dict[str, Any]) -> dict[str, str | None]:
    """The files of ``run_dir`` whose bytes on disk no longer match the sha256 its manifest
    ``m`` records, by path in the folder: their sha256 on disk, or None when missing."""
    from scarce.tasks.store.atomic import file_sha256

    out: dict[str, str | None] = {}
    for name, recorded in recorded_files(m).items():
        path = run_dir / name
        try:
            actual = file_sha256(path) if path.is_file() else None
        except OSError:
            actual = None
        if actual != recorded:
            out[name] = actual
    return out


def run_dataset(config: Any) -> str:
    """The name of the data set a recorded config names (``dataset`` or ``dataset.name``)."""
    dataset = (config or {}).get("dataset") if isinstance(config, dict) else None
    if isinstance(dataset, dict):
        dataset = dataset.get("name")
    return str(dataset) if dataset else ""


#: Hex digits of a run's inputs digest: enough to tell apart the inputs of the runs one
#: project holds, short enough for a table.
INPUTS_DIGITS = 8


def inputs_digest(m: dict[str, Any]) -> str | None:
    """The first :data:`INPUTS_DIGITS` hex digits of the sha256 over the manifest's
    ``inputs`` (each file's path and sha256, in path order, as JSON); None when the run
    recorded no input file."""
    inputs = sorted((str(i["path"]), str(i["sha256"])) for i in m.get("inputs") or [])
    if not inputs:
        return None
    text = json.dumps([{"path": p, "sha256": h} for p, h in inputs], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:INPUTS_DIGITS]


def run_seconds(m: dict[str, Any]) -> float | None:
    """A recorded run's duration, start to finish, in seconds (None when not recorded)."""
    try:
        start = dt.datetime.fromisoformat(m["started"])
        end = dt.datetime.fromisoformat(m["finished"])
    except (KeyError, TypeError, ValueError):
        return None
    return round((end - start).total_seconds(), 1)


def describe_run(run_dir: Path) -> str:
    """What ``scarce runs RUN_ID`` prints: the run's record and its metrics."""
    m = read_manifest(run_dir)
    code = m.get("code") or {}
    lines = [
        f"run        {run_dir.name}",
        f"flow       {m['flow']}  (dataset {run_dataset(m.get('config')) or '-'})",
        f"started    {m.get('started', '')}",
        f"finished   {m.get('finished', '')}  ({run_seconds(m)} s)",
        f"runner     {m.get('task_runner') or '-'}",
        f"tags       {', '.join(m.get('tags') or []) or '-'}",
        f"seed       {m.get('seed')}",
        f"code       scarce {code.get('scarce', '?')}, commit {code.get('commit', '-')}"
        + (" (with uncommitted changes)" if code.get("dirty") else ""),
        f"store      {m.get('store', '')}",
        f"inputs     {len(m.get('inputs') or [])} file(s)"
        + (f", digest {inputs_digest(m)}" if m.get("inputs") else ""),
        f"outputs    {len(m['outputs'])} store entries, "
        f"{sum(1 for o in m['outputs'] if o.get('cached'))} taken from the cache",
    ]
    named = m.get("named_outputs") or []
    if named:
        lines.append("named      " + ", ".join(f"outputs/{o['name']}" for o in named))
    if m.get("prefect_flow_run_id"):
        lines.append(f"prefect    flow run {m['prefect_flow_run_id']}")
    metrics_path = run_dir / METRICS
    if metrics_path.is_file():
        import pandas as pd  # (a summary's table; reading a manifest needs no pandas)

        metrics = pd.read_parquet(metrics_path)
        wide = metrics.pivot_table(index=["dataset", "method"], columns="metric",
                                   values="value", sort=False)
        with pd.option_context("display.width", 120, "display.max_columns", 12,
                               "display.float_format", "{:.4f}".format):
            lines += ["", wide.to_string()]
    return "\n".join(lines)
