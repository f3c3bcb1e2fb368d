"""A message logged once: to Prefect's run logger inside a flow or task run, else to the
project's logger (``scarce.store``).

Its own module, imported by :mod:`scarce.tasks.steps` (which re-exports it) and by what logs
without declaring steps: a model loaded into Python reads its files and logs without the step
machinery (the code digest, the store's seals).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger("scarce.store")


def log_both(level: int, msg: str, *args: Any) -> None:
    """Log once: to Prefect's run logger inside a flow or task run (the console and the
    Prefect UI), else to this project's logger.  Prefect not imported yet means no run, and
    is not imported to ask (a model loaded into Python logs without it)."""
    if "prefect" not in sys.modules:
        log.log(level, msg, *args)
        return
    try:
        from prefect.logging import get_run_logger

        logger = get_run_logger()
    except Exception:  # outside a run context
        log.log(level, msg, *args)
        return
    logger.log(level, msg, *args)
