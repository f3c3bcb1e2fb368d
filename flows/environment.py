"""The environment variables scarce reads, each checked in one place.

======================  =================================================================
``SCARCE_ROOT``         the project folder (default: the current folder); must exist
``SCARCE_STORE``        the result store: a folder or a ``file://`` URL (default
                        ``data/cache`` of the project)
``SCARCE_RUNS``         the runs folder (default ``data/runs`` of the project)
``SCARCE_MEMORY_LIMIT_GB``  a ceiling for the memory guards, in GiB
                        (:func:`scarce.algorithms.memory.memory_cap`)
``SCARCE_SERVER``       ``shared`` (default) or ``temporary``: the Prefect server of a command
                        without ``PREFECT_API_URL`` (:mod:`scarce.flows.shared_server`)
``SCARCE_SERVER_IDLE_MINUTES``  minutes without a command after which the shared background
                        server stops (default 30)
``SCARCE_PRELOAD``      ``on`` (default) or ``off``: whether commands run in a fork of the
                        shared server's preloaded process (:mod:`scarce.flows.preload`)
======================  =================================================================

A variable that is set must hold a value: an empty one is refused (unset it to get the
default), and so is text that is not UTF-8 (a byte the runs' records, JSON and Parquet in
UTF-8, could not hold, found only when a finished run is written).  A path is read as the shell
reads it, relative to the current folder, and made absolute when read; it must name a folder,
or a place where one can be made (``SCARCE_ROOT``: an existing folder), never a file nor a path
through a file.

:func:`check_environment` checks every variable when a command starts, before it reads a config
or starts a server.  The functions that read them (:func:`root`, :func:`store`, :func:`runs`,
and ``memory_cap``) apply the same checks, so that ``scarce.runs()`` and ``scarce.load_model()``
refuse a bad value in the same words.  Each error is an :class:`InputError` naming the
variable.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from scarce.algorithms.memory import ENV_LIMIT as MEMORY_LIMIT
from scarce.tasks.errors import InputError, excerpt

ROOT, STORE, RUNS = "SCARCE_ROOT", "SCARCE_STORE", "SCARCE_RUNS"
SERVER, SERVER_IDLE = "SCARCE_SERVER", "SCARCE_SERVER_IDLE_MINUTES"
PRELOAD = "SCARCE_PRELOAD"
#: The values of ``SCARCE_PRELOAD``, the default first (:data:`scarce.flows.preload.VALUES`).
PRELOAD_VALUES = ("on", "off")
#: The values of ``SCARCE_SERVER``, the default first.
SERVER_MODES = ("shared", "temporary")
#: The default of ``SCARCE_SERVER_IDLE_MINUTES``: long enough to cover the pauses of a working
#: session, short enough that a server (a few hundred MB) is not kept for a day.
DEFAULT_IDLE_MINUTES = 30.0

#: Every environment variable of scarce's own: what it sets, and its default.
VARIABLES: dict[str, tuple[str, str]] = {
    ROOT: ("the project folder", "the current folder"),
    STORE: ("the result store, a folder or a file:// URL", "the project's data/cache"),
    RUNS: ("the runs folder", "the project's data/runs"),
    MEMORY_LIMIT: ("a ceiling for the memory guards, in GiB", "none"),
    SERVER: ("the Prefect server of a command without PREFECT_API_URL: shared or temporary",
             "shared"),
    SERVER_IDLE: ("minutes without a command after which the shared server stops",
                  f"{DEFAULT_IDLE_MINUTES:g}"),
    PRELOAD: ("whether commands run in a fork of the shared server's preloaded process: on or "
              "off", "on"),
}
#: The longest path an error shows whole (a longer one is cut, so that the error is one line).
SHOWN_PATH = 200


def value(name: str) -> str | None:
    """The value of the variable ``name``, ``None`` when it is unset.

    Raises
    ------
    InputError
        When it is set but empty (or blank), or holds text that is not UTF-8.
    """
    text = os.environ.get(name)
    if text is None:
        return None
    if not text.strip():
        raise InputError(f"set but empty: unset it for the default ({VARIABLES[name][1]})",
                         key=name)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # os.environ holds a byte that is not UTF-8 as a lone surrogate
        raise InputError(f"{excerpt(text)} is not valid UTF-8 (the runs' records, written in "
                         "UTF-8, could not name it)", key=name) from None
    return text


def _error(message: str, path: Path, name: str) -> InputError:
    """An error naming ``path`` (cut when long) and the variable ``name``."""
    if len(str(path)) <= SHOWN_PATH:
        return InputError(message, path=path, key=name)
    return InputError(f"{_shown(path)}: {message}", key=name)


def _shown(path: Path) -> str:
    """``path``, cut in the middle when longer than :data:`SHOWN_PATH`."""
    text = str(path)
    half = SHOWN_PATH // 2
    return text if len(text) <= SHOWN_PATH else f"{text[:half]}…{text[-half:]}"


def _folder(name: str, text: str, must_exist: bool) -> Path:
    """``text`` as an absolute path naming a folder (or, unless ``must_exist``, a place one can
    be made)."""
    path = Path(text).absolute()
    try:
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
    except OSError as exc:  # a name too long for the system, a loop of links
        raise _error(f"cannot use the path: {exc.strerror or exc}", path, name) from None
    if not existing.is_dir():  # the path, or the part of it that exists, is a file
        raise _error(f"{_shown(existing)} is not a folder", path, name)
    if existing != path and must_exist:
        raise _error("folder not found", path, name)
    return path


def root() -> Path | None:
    """``SCARCE_ROOT`` as an absolute, resolved path (an existing folder), or ``None``."""
    text = value(ROOT)
    return None if text is None else _folder(ROOT, text, must_exist=True).resolve()


def store() -> str | Path | None:
    """``SCARCE_STORE``: the ``file://`` URL as given or an absolute path, once its folder is
    checked; ``None`` when unset."""
    text = value(STORE)
    if text is None:
        return None
    if "://" in text:
        from scarce.tasks.store.layout import local_root

        try:
            folder = local_root(text)
        except ValueError as exc:
            raise InputError(str(exc), key=STORE) from None
        _folder(STORE, os.fspath(folder), must_exist=False)
        return text
    return _folder(STORE, text, must_exist=False)


def runs() -> Path | None:
    """``SCARCE_RUNS`` as an absolute path, once checked; ``None`` when unset."""
    text = value(RUNS)
    return None if text is None else _folder(RUNS, text, must_exist=False)


def project_root() -> Path:
    """The folder a command works in: ``SCARCE_ROOT`` when set, else the current folder.

    Relative paths of configs and data are read from it, and the store and the runs go under
    its ``data/`` (unless ``SCARCE_STORE`` or ``SCARCE_RUNS`` say otherwise).

    Raises
    ------
    InputError
        When ``SCARCE_ROOT`` is set but names no folder (:func:`root`).
    """
    return root() or Path.cwd()


def default_store_root() -> str | Path:
    """``$SCARCE_STORE`` (a path or a ``file://`` URL, checked by :func:`store`) or the
    project's ``data/cache``."""
    return store() or project_root() / "data" / "cache"


def default_runs_root() -> Path:
    """``$SCARCE_RUNS`` (checked by :func:`runs`) or the project's ``data/runs``."""
    return runs() or project_root() / "data" / "runs"


def memory_limit() -> None:
    """Check ``SCARCE_MEMORY_LIMIT_GB`` (a positive, finite number of GiB, when set)."""
    from scarce.algorithms.memory import memory_cap

    value(MEMORY_LIMIT)
    try:
        memory_cap()
    except ValueError as exc:
        raise InputError(str(exc), key=MEMORY_LIMIT) from None


def server() -> str:
    """``SCARCE_SERVER``: ``shared`` (the default) or ``temporary``
    (:mod:`scarce.flows.shared_server`).

    Raises
    ------
    InputError
        Naming the variable, for any other value.
    """
    return _one_of(SERVER, SERVER_MODES)


def server_idle_minutes() -> float:
    """``SCARCE_SERVER_IDLE_MINUTES``: a positive, finite number (default
    :data:`DEFAULT_IDLE_MINUTES`).

    Raises
    ------
    InputError
        Naming the variable, for anything else.
    """
    text = value(SERVER_IDLE)
    if text is None:
        return DEFAULT_IDLE_MINUTES
    try:
        minutes = float(text)
    except ValueError:
        minutes = math.nan
    if not (math.isfinite(minutes) and minutes > 0):
        raise InputError(f"{text!r} is not a positive number of minutes", key=SERVER_IDLE)
    return minutes


def preload() -> str:
    """``SCARCE_PRELOAD``: ``on`` (the default) or ``off`` (:mod:`scarce.flows.preload`).

    Raises
    ------
    InputError
        Naming the variable, for any other value.
    """
    return _one_of(PRELOAD, PRELOAD_VALUES)


def _one_of(name: str, values: tuple[str, ...]) -> str:
    """The variable ``name``, one of ``values`` (blanks around it ignored); the first when
    unset."""
    text = value(name)
    if text is None:
        return values[0]
    if text.strip() not in values:
        raise InputError(f"{text!r} is not one of {', '.join(values)}", key=name)
    return text.strip()


#: The check of each variable (every name of :data:`VARIABLES`).
CHECKS = {ROOT: root, STORE: store, RUNS: runs, MEMORY_LIMIT: memory_limit,
          SERVER: server, SERVER_IDLE: server_idle_minutes,
          PRELOAD: preload}


def check_environment() -> None:
    """Check every variable of :data:`VARIABLES`, and write a relative path back as the
    absolute one it was read as, so that the command's child processes (Dask workers, served
    flow runs) use the same folder wherever they start.

    Raises
    ------
    InputError
        Naming the first variable at fault.
    """
    for name in VARIABLES:
        checked = CHECKS[name]()
        if isinstance(checked, Path) and os.environ[name] != str(checked):
            os.environ[name] = str(checked)
