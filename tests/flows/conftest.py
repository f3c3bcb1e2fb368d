"""Fixtures and helpers shared by the end-to-end flow tests.

A test module defines a module-scoped ``project`` fixture from ``make_project`` (a temporary
project root with ``configs/``, :func:`tests.flows.helpers.new_project`) and marks its tests
with ``in_project`` and ``prefect_server``; the runs a command made there are
:func:`tests.flows.helpers.made_runs`'.
"""

from __future__ import annotations

import pytest

from tests.flows.helpers import new_project


@pytest.fixture(scope="session")
def make_project(tmp_path_factory):
    """``make_project(name, configs, files)``: a new project folder under pytest's temporary
    folders, named after ``name``, with ``configs/`` (see :func:`~tests.flows.helpers.new_project`).
    """
    def make(name: str, configs=None, files=None):
        return new_project(tmp_path_factory.mktemp(name), configs, files)

    return make


@pytest.fixture
def in_project(project, monkeypatch):
    """Point SCARCE_ROOT at the module's project and work in it, as a user does (paths on the
    command line are relative to the working folder); store and runs under it."""
    monkeypatch.setenv("SCARCE_ROOT", str(project))
    monkeypatch.chdir(project)
    monkeypatch.delenv("SCARCE_STORE", raising=False)
    monkeypatch.delenv("SCARCE_RUNS", raising=False)
