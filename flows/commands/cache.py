"""``scarce cache``: the result store's entries listed, and ``gc`` with its keep-policy: an
entry stays while a run manifest names it or a running run uses it; a file in the store that
scarce did not write is never touched, and named."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from scarce.flows.commands import EXIT_OK
from scarce.flows.commands.running import print_frame


def referenced_refs(runs: Path) -> set[str]:
    """Every store entry a run manifest in ``runs`` names: its outputs and its plots' memos.

    A manifest that cannot be read stops the collection (an error naming it): gc cannot know
    what such a run keeps, so it removes nothing.
    """
    from scarce.flows import manifest as mf

    keep: set[str] = set()
    for d in mf.run_folders(runs):
        m = mf.read_manifest(d)
        keep.update(o["ref"] for o in m["outputs"])
        keep.update(p["ref"] for p in m.get("plots") or [] if p.get("ref"))
    return keep


def _store() -> Any:
    from scarce.flows.environment import default_store_root
    from scarce.tasks.errors import InputError
    from scarce.tasks.store import Store

    try:
        return Store(default_store_root())
    except ValueError as exc:
        raise InputError(str(exc), key="$SCARCE_STORE") from None


FOREIGN_SHOWN = 10  # foreign files named one per line; the rest counted


def print_foreign(foreign: list[Any]) -> None:
    """Say that the store holds files scarce did not write, and which: ``cache ls`` and
    ``cache gc`` leave them alone (a store root set to a data folder or a project holds the
    user's files)."""
    if not foreign:
        return
    n = len(foreign)
    print(f"{n} {'file' if n == 1 else 'files'} in the store that scarce did not write "
          f"{'is' if n == 1 else 'are'} left alone:")
    for item in foreign[:FOREIGN_SHOWN]:
        print(f"  {item.path}  ({item.why})")
    if n > FOREIGN_SHOWN:
        print(f"  ... and {n - FOREIGN_SHOWN} more")


def ls(args: argparse.Namespace) -> int:
    """``scarce cache ls``: the store's entries, their sizes and total, and the files in the
    store that are not its entries."""
    store = _store()
    listing = store.scan()
    frame = store.ls(listing)
    if frame.empty:
        print(f"store {store.root} has no entries")
    else:
        frame["modified"] = frame["modified"].dt.strftime("%Y-%m-%d %H:%M")
        print_frame(frame)
        print(f"{len(frame)} entries, {frame['bytes'].sum() / 1e6:.1f} MB in {store.root}")
    print_foreign(listing.foreign)
    return EXIT_OK


def gc(args: argparse.Namespace) -> int:
    """``scarce cache gc``: drop the entries no manifest names and no running run uses, and the
    half-written run folders of dead processes; say what was (or would be) freed."""
    from scarce.flows import manifest as mf
    from scarce.flows.environment import default_runs_root

    store = _store()
    runs = default_runs_root()
    report = store.gc(referenced_refs(runs), dry_run=args.dry_run)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {len(report.removed)} entries ({report.bytes / 1e6:.1f} MB) from {store.root}")
    for ref in report.removed:
        print(f"  {ref}")
    if report.temporaries:
        print(f"{verb} {len(report.temporaries)} temporary files of interrupted writes")
    for folder in mf.partial_folders(runs):  # left by a process killed while writing a run
        run_id = folder.name[1:].split(mf.PARTIAL, 1)[0]
        if run_id in report.live_runs:
            continue
        if not args.dry_run:
            shutil.rmtree(folder, ignore_errors=True)
        print(f"{verb} the half-written run folder {folder.name} from {runs}")
    if report.live_runs:
        print(f"kept {report.kept_for_live_runs} entries in use by {len(report.live_runs)} "
              f"running run(s): {', '.join(report.live_runs)}")
    print_foreign(report.foreign)
    return EXIT_OK
