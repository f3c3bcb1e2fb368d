"""``scarce init``: a new project folder with the flows' configs to edit, data/ and a README."""

from __future__ import annotations

import argparse
from pathlib import Path

from scarce.flows.commands import EXIT_OK


def init(args: argparse.Namespace) -> int:
    """``scarce init [DIR]``: the files written, and what to do next."""
    from scarce.flows.init_project import init_project

    folder = Path(args.dir)
    written = init_project(folder, force=args.force)
    print(f"project written to {folder.absolute()}:")
    for path in written:
        print(f"  {path.relative_to(folder)}")
    print("edit the data paths of configs/*.yaml, then `scarce run leml` (or relations, strip) "
          "in that folder")
    return EXIT_OK
