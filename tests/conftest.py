"""Test-session set-up shared by every test.

BLAS/OpenMP pinned to one thread (two were 3-100x slower on these 2-core
machines), Prefect offline with a temporary home, and each command's Prefect server its own
(``SCARCE_SERVER=temporary``).
"""

import gc
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="scarce-prefect-"))
# Every command of the suite (in this process or a child) without PREFECT_API_URL starts a
# temporary server of its own, stopped when it ends: no background server outlives a test.
# The tests of the shared server (tests/flows/test_shared_server.py) ask for it themselves.
os.environ["SCARCE_SERVER"] = "temporary"

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# No test may hang on the wall clock: hypothesis' per-example deadline (200 ms) failed property
# tests on a loaded 2-core machine, while the examples themselves were right.
settings.register_profile("scarce", deadline=None)
settings.load_profile("scarce")


@pytest.fixture(scope="session")
def prefect_server():
    """One temporary Prefect server for the whole session (each start costs ~10 s)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def migrated_prefect_db(tmp_path_factory) -> Path:
    """A Prefect database with every migration of the installed Prefect applied and nothing
    in it, made once per test process (``prefect server database upgrade``).

    A server started in a new Prefect home spends most of its start creating its database
    (every migration, about 12 s of CPU on these machines); :func:`seeded_prefect_home` gives
    a test that starts servers for another reason a home holding a copy.  The start in a home
    that is truly new is tested as such (``tests/flows/test_server_lifetime.py``)."""
    home = tmp_path_factory.mktemp("migrated-prefect-home")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_API_", "PREFECT_SERVER_DATABASE_"))}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    prefect = Path(sys.executable).with_name("prefect")
    subprocess.run([str(prefect), "server", "database", "upgrade", "-y"], env=env,
                   check=True, capture_output=True, timeout=900)
    return home / "prefect.db"


@pytest.fixture(scope="session")
def seeded_prefect_home(migrated_prefect_db):
    """``seed(path)``: ``path`` made a Prefect home holding a copy of the migrated database
    (:func:`migrated_prefect_db`); returns ``path``."""
    def seed(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(migrated_prefect_db, path / "prefect.db")
        return path

    return seed


def pytest_report_header(config):
    """Where the official coreference scorer was looked for, and whether its tests run."""
    from tests.scorer import scorer_found, why_missing

    return "CRAC scorer: " + ("found" if scorer_found() else why_missing())


def pytest_collection_modifyitems(config, items):
    """Every test that needs the Prefect server runs whole flows: mark it ``slow``.

    ``make test-fast`` (``-m "not slow"``) leaves these out for the edit-test loop; modules
    that start processes or clusters without the server mark themselves.
    """
    for item in items:
        if "prefect_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    _slowest_files_first(config, items)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """Collect with the garbage collector paused, then move what collecting made (the
    libraries, every test module and its data: it lives as long as the test process) out of
    its reach (:func:`gc.freeze`), so that the collections the tests set off do not traverse it
    each time; as a command that runs flows does (:mod:`scarce.flows.runners`).  Collecting
    makes little garbage (frozen with the rest), and its collections and the tests' traversals
    of that heap were a sizeable part of a test process's time."""
    gc.disable()
    try:
        return (yield)
    finally:
        gc.freeze()
        gc.enable()


def _slowest_files_first(config, items) -> None:
    """Whole files ordered by their recorded seconds, slowest first (``tests/durations.py``);
    the tests of a file keep their order.  Files not recorded come first, in their own order:
    a new file may run for minutes, and handed out last it would leave one process working
    alone at the end, while the recorded files that end the run are the quickest."""
    from tests.durations import recorded

    seconds = recorded()
    root = config.rootpath
    files: dict = {}  # path -> (file, its first index)
    for i, item in enumerate(items):
        if item.path not in files:
            files[item.path] = (item.path.relative_to(root).as_posix(), i)

    def order(item) -> tuple:
        file, first = files[item.path]
        return (file in seconds, -seconds.get(file, 0.0), first)

    items.sort(key=order)
