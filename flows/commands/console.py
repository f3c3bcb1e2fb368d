"""The console of a command: this project's log lines on stderr, tracebacks of bad input left
out of Prefect's console log, and stdout put away once the reader of a pipe has gone."""

from __future__ import annotations

import logging
import os
import sys


def stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit has nowhere to
    fail once the reader of a pipe has gone (Python's documented way out of SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file (captured in tests): nothing to flush
        pass


class _StderrHandler(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stderr`` is when a line is logged, not the
    stream it was at the handler's making: a command run from Python (a notebook, a test)
    may replace and close ``sys.stderr`` between two commands of one process."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler sets it; the property always reads now
        pass


def log_to_stderr() -> None:
    """Show this project's INFO messages (cache hits, run folders); Prefect logs its own."""
    logger = logging.getLogger("scarce")
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(
            logging.Formatter("%(asctime)s | %(levelname)-7s | %(message)s", "%H:%M:%S")
        )
        logger.addHandler(handler)
        logger.propagate = False  # shown once, by this handler (Prefect's root handler aside)
    logger.setLevel(logging.INFO)


class _InputErrorWithoutTraceback(logging.Formatter):
    """Console formatter that leaves out the traceback of an :class:`InputError`.

    Prefect logs a failed task's traceback; for bad input the one-line message says
    all (the Prefect UI still gets the traceback through Prefect's API handler).
    """

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        from scarce.algorithms.memory import MemoryBudgetError
        from scarce.tasks.errors import InputError

        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, InputError | MemoryBudgetError):
            return self.inner.format(record)
        saved = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            return self.inner.format(record)
        finally:
            record.exc_info, record.exc_text = saved


#: Whether the command asked for :func:`quiet_input_errors`, done when Prefect starts.
_QUIET = {"asked": False}


def quiet_input_errors() -> None:
    """Have the formatters of Prefect's console handlers wrapped (see the class above) once
    the command starts Prefect (:func:`prefect_started`): the checks a command makes before
    it import nothing of Prefect, so that bad input is told within the command's start-up."""
    _QUIET["asked"] = True


def prefect_started() -> None:
    """Called by a command as it starts Prefect (:func:`scarce.flows.commands.running.prefect_api`):
    the wrapping :func:`quiet_input_errors` asked for, if it did."""
    if _QUIET["asked"]:
        _wrap_prefect_handlers()


def _wrap_prefect_handlers() -> None:
    """Wrap the formatters of Prefect's console handlers (see the class above)."""
    from prefect.logging.configuration import PROCESS_LOGGING_CONFIG, setup_logging

    if not PROCESS_LOGGING_CONFIG:  # Prefect sets its handlers up lazily; do it now
        setup_logging()
    for name in ("", "prefect", "prefect.flow_runs", "prefect.task_runs"):
        for handler in logging.getLogger(name).handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(
                handler.formatter, _InputErrorWithoutTraceback
            ):
                handler.setFormatter(
                    _InputErrorWithoutTraceback(handler.formatter or logging.Formatter())
                )
