"""Fixtures and helpers shared by the end-to-end flow tests.

A test module defines a module-scoped ``project`` fixture (a temporary project
root with ``configs/``) and marks its tests with ``in_project`` and
``prefect_server``.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def in_project(project, monkeypatch):
    """Point SCARCE_ROOT at the module's project and work in it, as a user does (paths on the
    command line are relative to the working folder); store and runs under it."""
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    monkeypatch.chdir(project)
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
