"""Helpers shared by the end-to-end flow tests."""

from __future__ import annotations

import json


def runs(project):
    """Run ids under the project's data/runs, sorted by name (creation time)."""
    d = project / "data" / "runs"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


def manifest(project, run_id):
    return json.loads((project / "data" / "runs" / run_id / "manifest.json").read_text())
